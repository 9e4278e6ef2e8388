"""Launch planning: which kernel runs a call, and with which configuration.

From the sizes of a call, its span layout and the device, :func:`selection` (the 5-D contract) and
:func:`packed` (the seeds' packed layouts) return a :class:`Plan`:

- which kernel: the single-token kernel, its split-L decode form (:func:`use_decode`) or the
  multi-token kernel (``tokens > 1``);
- rows per program: all ``h`` heads of a group (``meta.head_block``), never more than the
  device's :func:`row_cap`, which comes from the known-bad windows (``data/known_bad.toml``);
- splits (:func:`decode_splits`) and tokens per program (``meta.tokens_per_program``);
- tile sizes, warps and stages (``kernels/meta.py``), and the grids.

The dispatcher asks it which kernel it will get, the launchers launch what it says, and the
compile-smoke registry (``compat/specs.py``) derives its variants from :func:`config_classes`, so
the three cannot drift.  Pure Python at import (no torch, no triton): :func:`device_of` imports
torch when it is first asked about a device, reads the device once and keeps the answer (see
``config.refresh``).  Plans are cached per signature, so a repeated call costs a dict lookup.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache

from . import known_bad
from .kernels import meta as M

ROWS = 64  # the widest dot M tile the kernels use (h = 64 heads of a group, or TOK x HP rows)
INTERPRETER_SMS = 8  # the interpreter has no SMs: any small number exercises the split path

# Each extra split adds one partial result that the merge kernel reads in a serial loop
# (about 0.4 us per split on the H100), while a decode row selects only L keys (16 blocks of
# 64 in NSA), which the host does not know without a sync.  Measured on seed-002 shapes
# (bench/decode_splits.py, H100): the best split count is 1-8, and the default this cap
# gives is within 1.6 us of the best on every shape from 4 to 256 rows, where the old cap
# (128: 66 splits for 4 rows) took 27 us instead of 9-13 us.
MAX_DECODE_SPLITS = 4


@dataclass(frozen=True)
class Device:
    """What planning needs to know about the device: read once per torch device."""

    type: str  # "cuda", or "cpu" for the Triton interpreter
    arch: int | None  # compute capability as an int (90 = sm_90); None off CUDA
    sm_count: int
    name: str  # GPU name ("cpu" off CUDA): the thresholds file is keyed by it
    triton: str  # the installed Triton version ("" without Triton)
    interpreter: bool = False  # TRITON_INTERPRET=1 when the device was first read
    max_rows: int = ROWS  # largest dot M tile this Triton compiles here (:func:`row_cap`)

    @classmethod
    def target(cls, arch: int | None, triton: str, sm_count: int = 132, name: str = "target") -> Device:
        """A device described by hand (the compile-smoke registry plans for archs it does not have)."""
        return cls("cuda" if arch else "cpu", arch, sm_count, name, triton, arch is None, row_cap(triton, arch))

    @property
    def cc(self) -> str:
        """Compute capability as the thresholds file writes it ("9.0"; "cpu" off CUDA)."""
        return "cpu" if self.arch is None else f"{self.arch // 10}.{self.arch % 10}"


def row_cap(triton_version: str | None, arch: int | None) -> int:
    """Rows per program the installed Triton compiles for ``arch``: 64 unless a window caps it."""
    cap = known_bad.row_cap(triton_version, arch)
    return ROWS if cap is None else min(ROWS, cap)


def triton_version() -> str:
    try:
        import triton
    except Exception:  # noqa: BLE001 - any import failure means "no Triton"
        return ""
    return triton.__version__


_DEVICES: dict[tuple[str, int | None], Device] = {}


def device_of(device) -> Device:
    """The :class:`Device` record of a torch device, read once (the only CUDA queries of a call)."""
    key = (device.type, device.index)
    hit = _DEVICES.get(key)
    if hit is None:
        hit = _DEVICES[key] = _read_device(device)
    return hit


def _read_device(device) -> Device:
    interp = os.environ.get("TRITON_INTERPRET") == "1"
    version = triton_version()
    if device.type != "cuda":
        return Device(device.type, None, INTERPRETER_SMS, "cpu", version, interp, ROWS)
    import torch

    props = torch.cuda.get_device_properties(device)
    arch = props.major * 10 + props.minor
    return Device("cuda", arch, props.multi_processor_count, props.name, version, interp, row_cap(version, arch))


def clear_caches() -> None:
    """Forget the devices and plans read so far (``config.refresh`` calls this)."""
    _DEVICES.clear()
    selection.cache_clear()
    packed.cache_clear()


@dataclass(frozen=True)
class Plan:
    """One launch: the kernel, its constexprs and launch options, and its grid."""

    kernel: str  # "ranges", "decode" (split-L), "tokens", "dense" or "varlen"
    meta: M.KernelMeta | M.TokMeta
    grid: tuple[int, int]
    num_splits: int = 1  # decode: programs per row (the merge kernel runs on the rows' grid)
    merge_grid: tuple[int, int] | None = None

    @property
    def rows(self) -> int:
        """The dot's M: heads per program, or tokens x padded heads."""
        return self.meta.BLOCK_H if isinstance(self.meta, M.KernelMeta) else self.meta.TOK * self.meta.HP


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def use_decode(B: int, S: int, G: int, h: int, per_head: bool, dev: Device) -> bool:
    """Split-L decode: one query position and too few (row, head-chunk) programs to fill the GPU."""
    if S != 1:
        return False
    return B * G * cdiv(h, M.head_block(h, per_head, dev.max_rows)) < dev.sm_count


def decode_splits(rows: int, T: int, block_n: int, sm_count: int) -> int:
    """How many programs share one row's keys: enough to fill the GPU twice over, at most
    ``MAX_DECODE_SPLITS`` and never more than the row could have key tiles."""
    want = cdiv(2 * sm_count, max(rows, 1))
    return int(max(1, min(want, cdiv(max(T, 1), block_n), MAX_DECODE_SPLITS)))


def tokens_problem(tokens: int, h: int, dev: Device) -> str | None:
    """Why ``tokens`` tokens per program cannot run ``h`` heads on this device, or None."""
    cap = dev.max_rows
    return M.tokens_problem(tokens, h, cap if cap < ROWS else None)


def auto_tokens(h: int, S: int, dev: Device) -> int:
    """Tokens per program worth trying when neighbours share spans (1: the single-token kernel)."""
    tok = M.tokens_per_program(h, dev.max_rows)
    return tok if tok > 1 and S >= 2 * tok else 1


@lru_cache(maxsize=1024)
def selection(
    B: int, S: int, G: int, h: int, Dk: int, Dv: int, T: int, n: int, *,
    dev: Device, span_mode: int = M.MODE_RANGES, has_pos: bool = False, has_lse: bool = True,
    per_head: bool = False, tokens: int = 1, decode: bool | None = None, num_splits: int | None = None,
    dot_f32: bool = False, tune: tuple = (),
) -> Plan:
    """The launch of one selection call (``q [B, S, G, h, Dk]``, ``k/v [B, G, T, D]``, ``n`` spans a row).

    ``tokens > 1`` picks the multi-token kernel (ranges only: the caller converts block indices);
    ``decode`` None decides by :func:`use_decode`; ``tune`` holds launch overrides
    (``(("block_n", 32), ...)``: block_n, num_warps, num_stages, max_rows, rows_hint, keys_hint).
    """
    opts = dict(tune)
    cap = min(opts.pop("max_rows", ROWS), dev.max_rows)
    if tokens > 1:
        if span_mode != M.MODE_RANGES:
            raise ValueError("the multi-token kernel reads ranges; convert block indices first")
        meta = M.tok_meta(h=h, Dk=Dk, Dv=Dv, n_spans=max(n, 1), has_lse=has_lse, dot_f32=dot_f32,
                          tokens=tokens, max_rows=cap, **opts)
        return Plan("tokens", meta, (B * cdiv(S, meta.TOK), G))
    if decode is None:
        decode = use_decode(B, S, G, h, per_head, dev) or num_splits is not None
    if not decode:
        opts.setdefault("rows_hint", B * S * G)
        opts.setdefault("keys_hint", T)
    meta = M.kernel_meta(mode=span_mode, h=h, Dk=Dk, Dv=Dv, n_spans=max(n, 1), has_lse=has_lse, split=decode,
                         per_head=per_head, dot_f32=dot_f32, has_pos=has_pos, max_rows=cap, **opts)
    n_hc = cdiv(h, meta.BLOCK_H)
    if not decode:
        return Plan("ranges", meta, (B * S, G * n_hc))
    if num_splits is None:
        num_splits = decode_splits(B * S * G * n_hc, T, meta.BLOCK_N, dev.sm_count)
    if num_splits < 1:
        raise ValueError(f"num_splits must be >= 1, got {num_splits}")
    return Plan("decode", meta, (B * S * num_splits, G * n_hc), num_splits, (B * S, G * n_hc))


@lru_cache(maxsize=256)
def packed(mode: int, N: int, H: int, Dk: int, Dv: int, L: int | None, *, dev: Device, has_lse: bool,
           dot_f32: bool = False, tune: tuple = ()) -> Plan:
    """The launch of the seeds' packed layouts: ``MODE_DENSE`` (rows of ``L`` keys) or ``MODE_CU``."""
    opts = dict(tune)
    cap = min(opts.pop("max_rows", ROWS), dev.max_rows)
    if mode == M.MODE_DENSE:
        opts.setdefault("rows_hint", N)
        opts.setdefault("keys_hint", L)
    meta = M.kernel_meta(mode=mode, h=H, Dk=Dk, Dv=Dv, has_lse=has_lse, dot_f32=dot_f32, max_rows=cap, **opts)
    kernel = "dense" if mode == M.MODE_DENSE else "varlen"
    return Plan(kernel, meta, (N, cdiv(H, meta.BLOCK_H)))
