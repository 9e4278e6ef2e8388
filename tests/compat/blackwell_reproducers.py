"""The kernel that reproduces the Blackwell LLVM aborts of Triton 3.0-3.2 (windows ``triton30-sm100-llvm-abort``,
``triton31-32-sm100-llvm-abort``): a dot-free cross-warp reduction, ``rowsum(dO * O)`` per row, which those
releases' LLVM cannot lower for sm_100/103/120 ('Cannot select: intrinsic %llvm.nvvm.shfl.sync').

It is the backward's former ``sel_bwd_delta_kernel`` (the kernel the windows were found with), kept here as
the windows' reproducer since the library no longer ships it (it served only a ``streams=2`` experiment that
the library dropped).  Imports only triton.
"""

from pathlib import Path

import triton
import triton.language as tl

from nsa_triton_sel.compat.registry.specs import CompileSpec


@triton.jit
def shfl_reduce_kernel(
    O, DO, DELTA,
    S, G, h, Dv,
    so_b, so_s, so_g, so_h, so_d,
    sdo_b, sdo_s, sdo_g, sdo_h, sdo_d,
    BLOCK_H: tl.constexpr,
    BLOCK_DV: tl.constexpr,
):
    """``delta = rowsum(dO * O)`` (fp32, contiguous ``[B, S, G, h]``) of one (token, group, head chunk)."""
    token = tl.program_id(0)
    pid1 = tl.program_id(1)
    n_hc = tl.cdiv(h, BLOCK_H)
    g = pid1 // n_hc
    offs_h = (pid1 % n_hc) * BLOCK_H + tl.arange(0, BLOCK_H)  # [BLOCK_H]
    b = token // S
    s = token % S
    offs_d = tl.arange(0, BLOCK_DV)  # [BLOCK_DV]
    mask = (offs_h < h)[:, None] & (offs_d < Dv)[None, :]  # [BLOCK_H, BLOCK_DV]
    o_base = O + b.to(tl.int64) * so_b + s.to(tl.int64) * so_s + g.to(tl.int64) * so_g
    do_base = DO + b.to(tl.int64) * sdo_b + s.to(tl.int64) * sdo_s + g.to(tl.int64) * sdo_g
    o = tl.load(o_base + offs_h[:, None] * so_h + offs_d[None, :] * so_d, mask=mask, other=0.0)  # [BLOCK_H, BLOCK_DV]
    do = tl.load(do_base + offs_h[:, None] * sdo_h + offs_d[None, :] * sdo_d, mask=mask, other=0.0)
    delta = tl.sum(do.to(tl.float32) * o.to(tl.float32), 1)  # [BLOCK_H]: the cross-warp reduction
    tl.store(DELTA + (token.to(tl.int64) * G + g) * h + offs_h, delta, mask=offs_h < h)


SHFL_REDUCE = CompileSpec(
    name="reproducer/shfl-reduce/bf16/dv128/h16",
    kernel=f"{Path(__file__).resolve()}:shfl_reduce_kernel",
    constexprs={"BLOCK_H": 16, "BLOCK_DV": 128},
    dtype="bf16",
    types={"DELTA": "*fp32", "S": "i32", "G": "i32"},
    num_warps=4,
    num_stages=1,
)
