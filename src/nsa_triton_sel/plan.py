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

# Shared memory one program (thread block) may use, per compute capability (CUDA programming guide,
# "technical specifications per compute capability": the opt-in maximum per block).  The consumer
# parts (sm_86/89 Ada, sm_120/121 RTX 50xx) have less than half of Hopper's and Blackwell-datacenter's,
# so a tile that fits sm_90 may not launch there: the compile smoke checks every compiled variant's
# shared memory against this table (an arch missing here is not checked).
SHARED_PER_BLOCK = {
    80: 166912, 86: 101376, 87: 166912, 89: 101376,  # Ampere 163 KiB, consumer Ampere / Ada 99 KiB
    90: 232448, 100: 232448, 103: 232448,            # Hopper, Blackwell B200/GB200, B300/GB300: 227 KiB
    120: 101376, 121: 101376,                        # Blackwell RTX 50xx / DGX Spark: 99 KiB
}


def shared_limit(arch: int | None) -> int | None:
    """Bytes of shared memory a program may use on ``arch`` (None: unknown arch, or no GPU)."""
    return None if arch is None else SHARED_PER_BLOCK.get(int(arch))


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


# ---------------------------------------------------------------- what the compile smoke must cover

@dataclass(frozen=True)
class SmokeCase:
    """One kernel specialisation the launchers can launch, for the compile-smoke registry."""

    name: str
    kernel: str  # attribute of kernels/forward.py
    constexprs: dict
    num_warps: int
    num_stages: int
    dtype: str  # "fp16" / "bf16"
    types: tuple = ()  # pointer types other than the data dtype: (("SPANS", "*i64"), ...)
    rows: int = 0  # the dot's M: a known-bad window's max_rows skips the case where it is larger


def _tile_class(plan: Plan, dtype: str) -> tuple:
    """What shapes the compiled code: the dot tile (rows, BLOCK_N, Dk slices), warps and stages.

    64-row dots take sm_90's wgmma path, whose instructions (and the layout conversions Triton
    3.0/3.1 abort on) depend on the element type: there the dtype is part of the class.
    """
    m = plan.meta
    return (plan.kernel == "tokens", plan.rows, m.BLOCK_N, m.DK2 > 0, m.num_warps, m.num_stages,
            dtype if plan.rows >= ROWS else "")


def _features(plan: Plan, dtype: str) -> set:
    """Every (constexpr, value) the plan sets, and its dtype: each must be compiled at least once."""
    tag = "tok" if plan.kernel == "tokens" else "sel"
    out = {(tag, name, value) for name, value in plan.meta.constexprs().items()}
    return out | {(tag, "dtype", dtype), (tag, "kernel", plan.kernel)}


# The calls the sweep plans: head dims (Dk != Dv, non-powers of two), head counts (every head block
# 16/32/64 and the per-head path), every span layout, decode split, multi-token, both dtypes.
_HEAD_DIMS = ((64, 64), (128, 128), (192, 128), (96, 96), (256, 256), (128, 64), (16, 48), (48, 32))
_HEADS = (16, 64, 32, 3, 1, 20, 2, 8)
_SHAPES = {"prefill": (1, 8192, 8192), "decode": (64, 1, 32768), "short": (4096, 1, 64)}


def _sweep(dev: Device):
    """(name, dtype, plan, types) of every call the sweep covers, in a fixed order."""
    for dtype in ("fp16", "bf16"):
        for Dk, Dv in _HEAD_DIMS:
            for h in _HEADS:
                for per_head in (False, True):
                    yield from _sweep_call(dev, Dk, Dv, h, per_head, dtype)


def _sweep_call(dev, Dk, Dv, h, per_head, dtype):
    head = f"{dtype}/dk{Dk}-dv{Dv}/h{h}" + ("/per-head" if per_head else "")
    B, S, T = _SHAPES["prefill"]
    for mode, name, types in ((M.MODE_RANGES, "ranges", ()), (M.MODE_BLOCKS, "blocks", (("SPANS", "*i64"),))):
        for has_pos in ((False, True) if mode == M.MODE_BLOCKS else (False,)):
            for has_lse in (True, False):
                tags = ("+pos" if has_pos else "") + ("+lse" if has_lse else "")
                pos_types = (("POS", "*i64"),) if has_pos else ()
                plan = selection(B, S, 4, h, Dk, Dv, T, 16, dev=dev, span_mode=mode, has_pos=has_pos,
                                 has_lse=has_lse, per_head=per_head)
                yield f"sel_fwd/{name}/{head}/prefill{tags}", dtype, plan, types + pos_types
                B2, S2, T2 = _SHAPES["decode"]
                plan = selection(B2, S2, 4, h, Dk, Dv, T2, 16, dev=dev, span_mode=mode, has_pos=has_pos,
                                 has_lse=has_lse, per_head=per_head, decode=True, num_splits=4)
                yield f"sel_fwd/{name}/{head}/decode{tags}+split", dtype, plan, types + pos_types
    for regime, (N, _, L) in (("short", _SHAPES["short"]), ("prefill", (1 << 20, 1, 8192))):
        yield f"sel_fwd/dense/{head}/{regime}", dtype, packed(M.MODE_DENSE, N, h, Dk, Dv, L, dev=dev,
                                                              has_lse=False), ()
    yield f"sel_fwd/varlen/{head}/prefill+lse", dtype, packed(M.MODE_CU, 1 << 16, h, Dk, Dv, None, dev=dev,
                                                              has_lse=True), ()
    tok = auto_tokens(h, S, dev)
    if tok > 1 and not per_head:
        plan = selection(B, S, 4, h, Dk, Dv, T, 16, dev=dev, tokens=tok)
        yield f"sel_fwd_tok/{head}/tok{tok}+lse", dtype, plan, ()


def smoke_cases(dev: Device | None = None) -> list[SmokeCase]:
    """The fewest launches that compile every tile class and every constexpr value the planner picks.

    Sweeps the planner over head dims, head counts, span layouts, decode split, the multi-token
    kernel and both dtypes (on an uncapped sm_90 device: a capped device picks a subset), and
    picks calls greedily until every tile class (rows x BLOCK_N x Dk slices x warps x stages) and
    every constexpr value is compiled once.  The merge kernel of every kept split plan comes along.
    ``tests/test_plan.py`` checks that a wider sweep finds nothing this list misses.
    """
    dev = dev or Device.target(90, "")
    calls = [(name, dtype, plan, types, {_tile_class(plan, dtype)} | _features(plan, dtype))
             for name, dtype, plan, types in _sweep(dev)]
    seen: set = set()
    cases: list[SmokeCase] = []
    while True:  # greedy set cover: the call that brings the most new items, first in sweep order on ties
        best = max(calls, key=lambda c: len(c[4] - seen))
        if not best[4] - seen:
            break
        name, dtype, plan, types, items = best
        seen |= items
        kernel = "sel_fwd_tok_kernel" if plan.kernel == "tokens" else "sel_fwd_kernel"
        m = plan.meta
        cases.append(SmokeCase(name, kernel, m.constexprs(), m.num_warps, m.num_stages, dtype, types, plan.rows))
        if plan.merge_grid is not None:
            merge = {"BLOCK_H": m.BLOCK_H, "BLOCK_DV": m.BLOCK_DV, "HAS_LSE": m.HAS_LSE}
            key = ("merge",) + tuple(merge.values())
            if key not in seen:
                seen.add(key)
                cases.append(SmokeCase(f"merge_splits/{dtype}/dv{m.BLOCK_DV}/h{m.BLOCK_H}"
                                       + ("+lse" if m.HAS_LSE else ""), "merge_splits_kernel", merge, 4, 3, dtype))
    return cases
