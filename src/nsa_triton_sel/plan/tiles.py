"""Launch configuration of the selection kernels: tile sizes and warps.

Pure Python (no torch, no triton), so the launchers, the compile-smoke registry and
the tests all read the same numbers from one place.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

MODE_RANGES = 0  # ranges [B, S, G, n, 2]: [start, end) spans
MODE_DENSE = 1  # one span [0, L) per row of k [N, L, Dk] (seed sel_attn_fwd_dense)
MODE_CU = 2  # one span [cu[i], cu[i + 1]) of k_all [total, Dk] (seed sel_attn_fwd_varlen)
MODE_BLOCKS = 3  # block indices [B, S, G, n]: block i = keys [i * bs, (i + 1) * bs), causally clamped
MODE_NAMES = {MODE_RANGES: "ranges", MODE_DENSE: "dense", MODE_CU: "varlen", MODE_BLOCKS: "blocks"}
SPAN_LISTS = (MODE_RANGES, MODE_BLOCKS)  # modes with n spans per row, read in the kernel

LOG2E = 1.4426950408889634  # log2(e): the host folds it into qk_scale, so the kernels use exp2

MIN_DOT = 16  # smallest M/N/K tl.dot accepts on every Triton 3.x


@dataclass(frozen=True)
class HeadDims:
    """One (Dk, Dv) class the kernels are built for: the compile registry (``compat/registry/variants.py``) sweeps
    the forward over every entry and the backward over the ``backward`` ones."""

    Dk: int
    Dv: int
    backward: bool = False


# The head dimensions, one table: the planner accepts every Dk, Dv up to the largest here (any value in
# between is covered by two power-of-two slices, ``split_head_dim``), and the compile smoke compiles what
# each entry plans.  A new head dimension is one entry (``tests/test_plan.py`` checks that it is enough).
HEAD_DIMS = (
    HeadDims(64, 64, backward=True), HeadDims(128, 128, backward=True), HeadDims(192, 128, backward=True),
    HeadDims(96, 96), HeadDims(256, 256, backward=True), HeadDims(128, 64, backward=True), HeadDims(16, 48),
    HeadDims(48, 32),
)
MAX_HEAD_DIM = max(max(d.Dk, d.Dv) for d in HEAD_DIMS)


def next_pow2(x: int) -> int:
    return 1 if x <= 1 else 1 << (int(x) - 1).bit_length()


def check_sizes(h: int, Dk: int, Dv: int, kernels: str) -> None:
    """``ValueError`` (naming ``kernels``) unless 1 <= Dk, Dv <= MAX_HEAD_DIM and h >= 1."""
    for name, d in (("Dk", Dk), ("Dv", Dv)):
        if not 1 <= d <= MAX_HEAD_DIM:
            raise ValueError(f"{name}={d} is not supported by {kernels}; accepted: 1..{MAX_HEAD_DIM}")
    if h < 1:
        raise ValueError(f"h={h}: need at least one query head per group")


def split_head_dim(d: int) -> tuple[int, int]:
    """Cover ``d`` with two power-of-two slices ``(D1, D2)``, ``D2`` possibly 0.

    192 -> (128, 64), 100 -> (64, 64), 128 -> (128, 0), 8 -> (16, 0).  Two slices
    waste less than one padded block for head dims like 192 (256 would load 33% zeros).
    """
    if d <= MIN_DOT:
        return MIN_DOT, 0
    d1 = next_pow2(d)
    if d1 == d:
        return d, 0
    d1 //= 2
    return d1, max(MIN_DOT, next_pow2(d - d1))


class _Constexprs:
    """The UPPERCASE fields are the kernel's constexprs; ``num_warps``/``num_stages`` are launch options."""

    def constexprs(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name.isupper()}


@dataclass(frozen=True)
class KernelMeta(_Constexprs):
    """Constexprs and launch options of one ``sel_fwd_kernel`` specialisation."""

    SPAN_MODE: int
    HAS_POS: bool  # MODE_BLOCKS: query positions given (else position = s)
    BLOCK_H: int
    BLOCK_N: int
    DK1: int
    DK2: int
    DV1: int  # Dv is covered by two power-of-two slices too (192 = 128 + 64), DV2 possibly 0
    DV2: int
    BLOCK_S: int
    HAS_LSE: bool
    SPLIT: bool
    DOT_F32: bool
    num_warps: int
    num_stages: int

    @property
    def BLOCK_DV(self) -> int:
        """One power-of-two tile over Dv: the split merge's (cheap, no dot), not the main kernels'."""
        return max(MIN_DOT, next_pow2(self.DV1 + self.DV2))


def head_block(h: int, per_head: bool = False, max_rows: int = 64) -> int:
    """Rows of the ``tl.dot`` M dimension: all heads of the group (at least 16, at most ``max_rows``)."""
    if per_head:
        return MIN_DOT
    return min(max_rows, max(MIN_DOT, next_pow2(h)))


# Launch defaults, chosen from the launch sweeps under bench/results/ (H100, Triton 3.6): the canonical
# NSA shape (h = 16, D = 128, one program per token) runs best with ONE warp, 32-key tiles and 3 pipeline
# stages: a program's work is one 16-row MMA chain, and more, smaller programs keep more loads in flight.
# Few programs with many keys each (decode) want 4 warps and 64-key tiles, which keep the copy bandwidth
# busy; rows of at most 64 keys want 16-key tiles.
FEW_PROGRAMS = 1024


def _default_launch(block_h, dk, block_dv, *, mode, split, rows_hint, keys_hint):
    big = dk > 128 or block_dv > 128
    if block_h >= 64:
        return (32 if big else 64), 4 if not big else 8, 2
    if big:
        return 32, 4, 2
    if split or (rows_hint is not None and rows_hint < FEW_PROGRAMS and (keys_hint or 1 << 30) > 256):
        return 64, 4, 3
    if mode == MODE_DENSE and keys_hint is not None and keys_hint <= 64:
        return 16, 1, 3
    return 32, (1 if block_h <= 16 else 2), 3


def kernel_meta(
    *,
    mode: int,
    h: int,
    Dk: int,
    Dv: int,
    n_spans: int = 1,
    has_lse: bool = False,
    split: bool = False,
    per_head: bool = False,
    dot_f32: bool = False,
    has_pos: bool = False,
    rows_hint: int | None = None,
    keys_hint: int | None = None,
    max_rows: int = 64,
    block_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> KernelMeta:
    """The launch configuration for these sizes; raises ``ValueError`` outside the supported range."""
    if mode not in MODE_NAMES:
        raise ValueError(f"mode must be one of {sorted(MODE_NAMES)}, got {mode!r}")
    check_sizes(h, Dk, Dv, "the Triton kernels")
    dk1, dk2 = split_head_dim(Dk)
    dv1, dv2 = split_head_dim(Dv)
    block_dv = dv1 + dv2
    block_h = head_block(h, per_head, max_rows)
    bn, nw, ns = _default_launch(block_h, dk1 + dk2, block_dv, mode=mode, split=split, rows_hint=rows_hint,
                                 keys_hint=keys_hint)
    bn, nw, ns = block_n or bn, num_warps or nw, num_stages or ns
    return KernelMeta(
        SPAN_MODE=mode,
        HAS_POS=bool(has_pos) and mode == MODE_BLOCKS,
        BLOCK_H=block_h,
        BLOCK_N=bn,
        DK1=dk1,
        DK2=dk2,
        DV1=dv1,
        DV2=dv2,
        BLOCK_S=max(2, next_pow2(n_spans)) if mode in SPAN_LISTS else 2,
        HAS_LSE=bool(has_lse),
        SPLIT=bool(split),
        DOT_F32=bool(dot_f32),
        num_warps=nw,
        num_stages=ns,
    )


@dataclass(frozen=True)
class TokMeta(_Constexprs):
    """Constexprs and launch options of one ``sel_fwd_tok_kernel`` specialisation."""

    TOK: int
    HP: int
    BLOCK_N: int
    DK1: int
    DK2: int
    DV1: int
    DV2: int
    BLOCK_S: int
    HAS_LSE: bool
    DOT_F32: bool
    num_warps: int
    num_stages: int


MULTI_TOKEN_ROWS = 64  # M = tokens x padded heads of the multi-token kernel
# At most 16 tokens per program: phase 2 of the kernel handles TOK x BLOCK_S spans at once, and
# 64 tokens (h = 1) did not compile within 120 s for sm_80/89 in the compile smoke (Triton 3.9,
# nsa-sel smoke), where 16 tokens x 4 heads compiles in seconds and is the measured h = 4 config.
MAX_TOKENS = 16


def tokens_per_program(h: int, max_rows: int = MULTI_TOKEN_ROWS) -> int:
    """How many consecutive tokens share one program in the multi-token kernel (1: not worth it)."""
    hp = next_pow2(h)
    return max(1, min(MAX_TOKENS, min(MULTI_TOKEN_ROWS, max_rows) // hp))


def tokens_problem(tokens: int, h: int, max_rows: int | None = None) -> str | None:
    """Why ``tokens`` consecutive tokens of ``h`` heads cannot share one multi-token program, or None.

    ``max_rows`` is a row cap from a known-bad window (``device.row_cap``): M = tokens x next_pow2(h)
    must stay under it.
    """
    hp = next_pow2(h)
    if tokens < 2 or tokens & (tokens - 1) or tokens * hp < MIN_DOT:
        return f"tokens={tokens} with h={h}: need a power of two >= 2 with tokens * next_pow2(h) >= {MIN_DOT}"
    if max_rows is not None and tokens * hp > max_rows:
        return (f"tokens={tokens} with h={h} makes {tokens * hp}-row tiles; the installed Triton compiles at most "
                f"{max_rows} rows for this GPU (a known-bad window)")
    return None


def tok_meta(
    *, h: int, Dk: int, Dv: int, n_spans: int, has_lse: bool = False, dot_f32: bool = False,
    tokens: int | None = None, max_rows: int = MULTI_TOKEN_ROWS, block_n: int | None = None, num_warps: int | None = None,
    num_stages: int | None = None,
) -> TokMeta:
    """Launch configuration of the multi-token kernel for these sizes."""
    base = kernel_meta(mode=MODE_RANGES, h=h, Dk=Dk, Dv=Dv, n_spans=n_spans)
    hp = next_pow2(h)
    tok = tokens or tokens_per_program(h, max_rows)
    problem = tokens_problem(tok, h, max_rows if max_rows < MULTI_TOKEN_ROWS else None)
    if problem:
        raise ValueError(problem)
    return TokMeta(
        TOK=tok, HP=hp, BLOCK_N=block_n or _tok_block_n(base), DK1=base.DK1, DK2=base.DK2, DV1=base.DV1,
        DV2=base.DV2, BLOCK_S=base.BLOCK_S, HAS_LSE=bool(has_lse), DOT_F32=bool(dot_f32),
        num_warps=num_warps or 4, num_stages=num_stages or 2,  # best of 18 at T = 8K, local
    )


def _tok_block_n(base: KernelMeta) -> int:
    """Key tile of the multi-token kernel: 64 keys, 32 for head dims over 128, where the [64, 128 + 64]
    accumulators and K/V tiles of 64 keys spill registers (slower than 32-key tiles on the H100)."""
    return 32 if max(base.DK1 + base.DK2, base.DV1 + base.DV2) > 128 else 64
