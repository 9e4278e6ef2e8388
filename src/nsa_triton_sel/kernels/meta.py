"""Launch configuration of the selection kernels: tile sizes and warps.

Pure Python (no torch, no triton), so the launchers, the compile-smoke registry and
the tests all read the same numbers from one place.
"""

from __future__ import annotations

from dataclasses import dataclass

MODE_RANGES = 0
MODE_DENSE = 1
MODE_CU = 2
MODE_NAMES = {MODE_RANGES: "ranges", MODE_DENSE: "dense", MODE_CU: "varlen"}

MAX_HEAD_DIM = 256
MIN_DOT = 16  # smallest M/N/K tl.dot accepts on every Triton 3.x


def next_pow2(x: int) -> int:
    return 1 if x <= 1 else 1 << (int(x) - 1).bit_length()


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


@dataclass(frozen=True)
class KernelMeta:
    """Constexprs and launch options of one ``sel_fwd_kernel`` specialisation."""

    SPAN_MODE: int
    BLOCK_H: int
    BLOCK_N: int
    DK1: int
    DK2: int
    BLOCK_DV: int
    BLOCK_S: int
    HAS_LSE: bool
    SPLIT: bool
    DOT_F32: bool
    num_warps: int
    num_stages: int

    def constexprs(self) -> dict:
        return {
            "SPAN_MODE": self.SPAN_MODE,
            "BLOCK_H": self.BLOCK_H,
            "BLOCK_N": self.BLOCK_N,
            "DK1": self.DK1,
            "DK2": self.DK2,
            "BLOCK_DV": self.BLOCK_DV,
            "BLOCK_S": self.BLOCK_S,
            "HAS_LSE": self.HAS_LSE,
            "SPLIT": self.SPLIT,
            "DOT_F32": self.DOT_F32,
        }


def head_block(h: int, per_head: bool = False) -> int:
    """Rows of the ``tl.dot`` M dimension: all heads of the group (at least 16, at most 64)."""
    if per_head:
        return MIN_DOT
    return min(64, max(MIN_DOT, next_pow2(h)))


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
    block_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> KernelMeta:
    """The launch configuration for these sizes; raises ``ValueError`` outside the supported range."""
    if mode not in MODE_NAMES:
        raise ValueError(f"mode must be one of {sorted(MODE_NAMES)}, got {mode!r}")
    for name, d in (("Dk", Dk), ("Dv", Dv)):
        if not 1 <= d <= MAX_HEAD_DIM:
            raise ValueError(f"{name}={d} is not supported by the Triton kernels; accepted: 1..{MAX_HEAD_DIM}")
    if h < 1:
        raise ValueError(f"h={h}: need at least one query head per group")
    dk1, dk2 = split_head_dim(Dk)
    block_dv = max(MIN_DOT, next_pow2(Dv))
    block_h = head_block(h, per_head)
    big = (dk1 + dk2) > 128 or block_dv > 128
    bn = block_n or (32 if big and block_h >= 64 else 64)
    nw = num_warps or (4 if block_h <= 32 else 8)
    ns = num_stages or (2 if big else 3)
    return KernelMeta(
        SPAN_MODE=mode,
        BLOCK_H=block_h,
        BLOCK_N=bn,
        DK1=dk1,
        DK2=dk2,
        BLOCK_DV=block_dv,
        BLOCK_S=max(2, next_pow2(n_spans)) if mode == MODE_RANGES else 2,
        HAS_LSE=bool(has_lse),
        SPLIT=bool(split),
        DOT_F32=bool(dot_f32),
        num_warps=nw,
        num_stages=ns,
    )


@dataclass(frozen=True)
class TokMeta:
    """Constexprs and launch options of one ``sel_fwd_tok_kernel`` specialisation."""

    TOK: int
    HP: int
    BLOCK_N: int
    DK1: int
    DK2: int
    BLOCK_DV: int
    BLOCK_S: int
    HAS_LSE: bool
    DOT_F32: bool
    num_warps: int
    num_stages: int

    def constexprs(self) -> dict:
        return {k: getattr(self, k) for k in
                ("TOK", "HP", "BLOCK_N", "DK1", "DK2", "BLOCK_DV", "BLOCK_S", "HAS_LSE", "DOT_F32")}


MULTI_TOKEN_ROWS = 64  # M = tokens x padded heads of the multi-token kernel


def tokens_per_program(h: int) -> int:
    """How many consecutive tokens share one program in the multi-token kernel (1: not worth it)."""
    hp = next_pow2(h)
    return max(1, MULTI_TOKEN_ROWS // hp)


def tok_meta(
    *, h: int, Dk: int, Dv: int, n_spans: int, has_lse: bool = False, dot_f32: bool = False,
    tokens: int | None = None, block_n: int | None = None, num_warps: int | None = None,
    num_stages: int | None = None,
) -> TokMeta:
    """Launch configuration of the multi-token kernel for these sizes."""
    base = kernel_meta(mode=MODE_RANGES, h=h, Dk=Dk, Dv=Dv, n_spans=n_spans)
    hp = next_pow2(h)
    tok = tokens or tokens_per_program(h)
    if tok < 2 or tok & (tok - 1) or tok * hp < MIN_DOT:
        raise ValueError(f"tokens={tok} with h={h}: need a power of two >= 2 with tokens * next_pow2(h) >= 16")
    return TokMeta(
        TOK=tok, HP=hp, BLOCK_N=block_n or 32, DK1=base.DK1, DK2=base.DK2, BLOCK_DV=base.BLOCK_DV,
        BLOCK_S=base.BLOCK_S, HAS_LSE=bool(has_lse), DOT_F32=bool(dot_f32),
        num_warps=num_warps or 4, num_stages=num_stages or 2,
    )
