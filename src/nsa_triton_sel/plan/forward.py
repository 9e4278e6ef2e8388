"""The forward's launch plan: which kernel runs a call, and with which configuration.

From the sizes of a call, its span layout and the device, :func:`selection` (the 5-D contract,
explicit choices; ``plan.plan_call`` asks it for the operator) and :func:`packed` (the seeds' packed
layouts) return a :class:`Launch`:

- which kernel: the single-token kernel, its split-L decode form (:func:`use_decode`) or the
  multi-token kernel (tokens per program: :mod:`.tokens`);
- rows per program: all ``h`` heads of a group (``tiles.head_block``), never more than the
  device's row cap, which comes from the known-bad windows (``data/known_bad.toml``);
- splits (:func:`decode_splits`), tile sizes, warps and stages (:mod:`.tiles`), and the grids.

The launchers (``kernels/launch.py``) launch what a plan says and decide nothing; the
compile-smoke registry (``compat/registry/variants.py``) sweeps these functions, so the variants that
ship are the variants compiled.  Pure Python (no torch, no triton); plans are cached per
signature, so a repeated call costs a dict lookup.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from .. import caches
from ..device import ROWS, Device, shared_limit
from . import tiles as M
from .keymajor import WORKSPACE_BYTES, KeyMajorMeta, keymajor_meta

# Each extra split adds one partial result that the merge kernel reads in a serial loop, while a decode
# row selects only L keys (16 blocks of 64 in NSA), which the host does not know without a sync.  On the
# seeds' decode shapes the best split count is 1-8 (H100 sweep under bench/results/), so a small cap
# stays near the best on every shape from 4 to 256 rows, where a large one makes the merge dominate.
MAX_DECODE_SPLITS = 4


@dataclass(frozen=True)
class Launch:
    """One forward launch: the kernel, its constexprs and launch options, and its grid.  Hashed once (the
    bound launcher keys every launch by it)."""

    kernel: str  # "ranges", "decode" (split-L), "tokens", "keymajor", "dense" or "varlen"
    meta: M.KernelMeta | M.TokMeta | KeyMajorMeta
    grid: tuple[int, int]
    num_splits: int = 1  # decode: programs per row (the merge kernel runs on the rows' grid)
    merge_grid: tuple[int, ...] | None = None  # decode splits, key-major partials: the merge kernel's grid
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "_hash", hash((self.kernel, self.meta, self.grid, self.num_splits, self.merge_grid)))

    def __hash__(self) -> int:
        return self._hash

    @property
    def rows(self) -> int:
        """The dot's M: heads per program, tokens x padded heads, or (entry, head) pairs per step."""
        if isinstance(self.meta, KeyMajorMeta):
            return self.meta.ROWS
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


@lru_cache(maxsize=1024)
def selection(
    B: int, S: int, G: int, h: int, Dk: int, Dv: int, T: int, n: int, *,
    dev: Device, span_mode: int = M.MODE_RANGES, has_pos: bool = False, has_lse: bool = True,
    per_head: bool = False, tokens: int = 1, decode: bool | None = None, num_splits: int | None = None,
    dot_f32: bool = False, tune: tuple = (),
) -> Launch:
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
        return Launch("tokens", meta, (B * cdiv(S, meta.TOK), G))
    if decode is None:
        decode = use_decode(B, S, G, h, per_head, dev) or num_splits is not None
    if not decode:
        opts.setdefault("rows_hint", B * S * G)
        opts.setdefault("keys_hint", T)
    meta = M.kernel_meta(mode=span_mode, h=h, Dk=Dk, Dv=Dv, n_spans=max(n, 1), has_lse=has_lse, split=decode,
                         per_head=per_head, dot_f32=dot_f32, has_pos=has_pos, max_rows=cap, **opts)
    n_hc = cdiv(h, meta.BLOCK_H)
    if not decode:
        return Launch("ranges", meta, (B * S, G * n_hc))
    if num_splits is None:
        num_splits = decode_splits(B * S * G * n_hc, T, meta.BLOCK_N, dev.sm_count)
    if num_splits < 1:
        raise ValueError(f"num_splits must be >= 1, got {num_splits}")
    return Launch("decode", meta, (B * S * num_splits, G * n_hc), num_splits, (B * S, G * n_hc))


@lru_cache(maxsize=256)
def keymajor(B: int, S: int, G: int, h: int, Dk: int, Dv: int, T: int, n: int, *, dev: Device, span_len: int,
             aligned: bool, has_lse: bool = True, dot_f32: bool = False, bf16: bool = False,
             tune: tuple = ()) -> Launch:
    """The key-major forward of a call (``plan.keymajor``), per pass over ``meta.groups_per_pass`` KV heads:
    ``grid`` bounds its programs (one per chunk of a key tile's readers; the launcher launches the reader list's
    chunk rows, of this count), ``merge_grid`` the merge's.  ``bf16``: the call's dtype is bfloat16 (where the
    device's Triton has it, the warp-specialised partial kernel then runs: ``keymajor.takes_ws``, and the
    backward's Gluon kernel: ``keymajor.takes_gluon_backward``).  ``tune``: block_n, pairs, num_warps, num_stages,
    chunk, groups_per_pass, max_rows, gluon_ws (False: the Triton partial kernel), gluon_bwd (False: the Triton
    backward kernel alone)."""
    opts = dict(tune)
    cap = min(opts.pop("max_rows", ROWS), dev.max_rows)
    gluon_ws = opts.pop("gluon_ws", dev.gluon_ws) and bf16
    gluon_bwd = opts.pop("gluon_bwd", dev.gluon_ws) and bf16
    meta = keymajor_meta(h=h, Dk=Dk, Dv=Dv, n_spans=n, T=T, span_len=span_len, aligned=aligned, B=B, S=S, G=G,
                         sm_count=dev.sm_count, has_lse=has_lse, dot_f32=dot_f32, max_rows=cap,
                         shared=shared_limit(dev.arch), gluon_ws=gluon_ws, gluon_bwd=gluon_bwd, **opts)
    if meta.groups_per_pass == 0:
        raise ValueError(f"the key-major forward's workspace for one KV head passes {WORKSPACE_BYTES} bytes "
                         f"(S={S}, h={h}, Dv={Dv}, {meta.per_row} partials a row); use the token-major kernels")
    gpp = meta.groups_per_pass
    programs = B * gpp * cdiv(max(T, 1), meta.BLOCK_N) + B * S * gpp * meta.per_row // meta.chunk
    return Launch("keymajor", meta, (programs,), merge_grid=(cdiv(B * S * gpp, meta.merge_rows_per_program()),))


@lru_cache(maxsize=256)
def packed(mode: int, N: int, H: int, Dk: int, Dv: int, L: int | None, *, dev: Device, has_lse: bool,
           dot_f32: bool = False, tune: tuple = ()) -> Launch:
    """The launch of the seeds' packed layouts: ``MODE_DENSE`` (rows of ``L`` keys) or ``MODE_CU``."""
    opts = dict(tune)
    cap = min(opts.pop("max_rows", ROWS), dev.max_rows)
    if mode == M.MODE_DENSE:
        opts.setdefault("rows_hint", N)
        opts.setdefault("keys_hint", L)
    meta = M.kernel_meta(mode=mode, h=H, Dk=Dk, Dv=Dv, has_lse=has_lse, dot_f32=dot_f32, max_rows=cap, **opts)
    kernel = "dense" if mode == M.MODE_DENSE else "varlen"
    return Launch(kernel, meta, (N, cdiv(H, meta.BLOCK_H)))


for _fn in (selection, keymajor, packed):
    caches.register(f"launches_{_fn.__name__}", clear=_fn.cache_clear, size=lambda f=_fn: f.cache_info().currsize)
