"""Every Triton kernel against the float64 oracle, under the Triton interpreter (CPU).

This module is the parity suite of the CPU lanes (``nox -s parity-X`` runs ``pytest -m
interp``).  Shapes are tiny because the interpreter runs each program in Python, yet they
cover what broke the seeds: L = 1, 63, 64, 65, 200; several spans per row; empty rows;
h in {1, 3, 16, 20}; Dk = 192 and Dk != Dv; T not a multiple of 64; decode with fewer
rows than splits.
"""

from __future__ import annotations

import os

import pytest
import torch

import kernel_checks
from kernel_checks import packed_as_5d, varlen_as_5d
from nsa_triton_sel.testing import make_problem, nsa_ranges

pytestmark = [
    pytest.mark.interp,
    pytest.mark.skipif(
        os.environ.get("TRITON_INTERPRET") != "1", reason="interpreter tests (a CUDA device is present: see test_kernels_gpu)"
    ),
]

direct = pytest.importorskip("nsa_triton_sel.kernels.direct")

DTYPES = [torch.float16, torch.bfloat16]


def check_against_oracle(out, lse, q, *args, **kw):
    # The interpreter converts fp32 -> bf16 by truncation, not round-to-nearest (measured on
    # 3.9.0: twice the rounding error of torch's conversion), so a bf16 result may carry twice
    # the error the GPU bound allows; the GPU tests hold the 2x bound.
    factor = 4.0 if q.dtype == torch.bfloat16 else 2.0
    return kernel_checks.check_against_oracle(out, lse, q, *args, rel_factor=factor, **kw)


@pytest.mark.parametrize("L", [1, 63, 64, 65, 200])
def test_ranges_single_span_lengths(L):
    p = make_problem(B=1, S=2, G=1, h=3, Dk=64, Dv=64, T=200, n=2, ranges="single", L=L, seed=L)
    out, lse = direct.sel_attn_ranges(p.q, p.k, p.v, p.ranges, return_lse=True)
    check_against_oracle(out, lse, p.q, p.k, p.v, p.ranges, what=f"ranges L={L}")


@pytest.mark.parametrize("h", [1, 3, 16, 20])
@pytest.mark.parametrize("dtype", DTYPES)
def test_ranges_multi_span_heads(h, dtype):
    # T = 150 is not a multiple of 64; random spans are unaligned; ~1/3 of rows are empty.
    p = make_problem(B=2, S=2, G=2, h=h, Dk=32, Dv=48, T=150, n=4, dtype=dtype, seed=h, empty_frac=0.3)
    out, lse = direct.sel_attn_ranges(p.q, p.k, p.v, p.ranges, return_lse=True)
    check_against_oracle(out, lse, p.q, p.k, p.v, p.ranges, what=f"ranges h={h} {dtype}")


def test_ranges_dk192_dk_ne_dv_noncontiguous():
    p = make_problem(B=1, S=2, G=2, h=4, Dk=192, Dv=128, T=130, n=3, seed=7, noncontiguous=True)
    out, lse = direct.sel_attn_ranges(p.q, p.k, p.v, p.ranges, return_lse=True)
    check_against_oracle(out, lse, p.q, p.k, p.v, p.ranges, what="Dk=192 Dv=128 strided")


@pytest.mark.parametrize("Dk,Dv", [(192, 192), (96, 96), (64, 100)])
def test_value_dim_in_two_slices_every_kernel(Dk, Dv):
    # Dv not a power of two is covered by two slices (192 = 128 + 64, 96 = 64 + 32, 100 = 64 + 64):
    # the single-token, multi-token and split-decode kernels all store both slices.
    p = make_problem(B=1, S=4, G=2, h=5, Dk=Dk, Dv=Dv, T=150, n=3, seed=Dv, empty_frac=0.25)
    for what, (out, lse) in (
        ("ranges", direct.sel_attn_ranges(p.q, p.k, p.v, p.ranges, return_lse=True)),
        ("tokens", direct.sel_attn_tokens(p.q, p.k, p.v, p.ranges, return_lse=True, tokens=4)),
        ("decode", direct.sel_attn_decode(p.q, p.k, p.v, p.ranges, return_lse=True, num_splits=2)),
    ):
        check_against_oracle(out, lse, p.q, p.k, p.v, p.ranges, what=f"{what} Dk={Dk} Dv={Dv}")


def test_ranges_all_rows_empty_and_no_spans():
    p = make_problem(B=1, S=2, G=1, h=2, T=70, n=2, seed=3)
    zero = torch.zeros_like(p.ranges)
    out, lse = direct.sel_attn_ranges(p.q, p.k, p.v, zero, return_lse=True)
    assert torch.count_nonzero(out) == 0 and torch.isneginf(lse).all()
    out, lse = direct.sel_attn_ranges(p.q, p.k, p.v, p.ranges[..., :0, :], return_lse=True)
    assert torch.count_nonzero(out) == 0 and torch.isneginf(lse).all()


def test_ranges_writes_every_output_element():
    p = make_problem(B=1, S=3, G=2, h=3, Dk=32, Dv=32, T=100, n=3, seed=11, empty_frac=0.3)
    clean = direct.sel_attn_ranges(p.q, p.k, p.v, p.ranges)
    dirty = torch.full_like(clean, float("nan"))
    direct.sel_attn_ranges(p.q, p.k, p.v, p.ranges, out=dirty)
    assert torch.equal(clean, dirty)


@pytest.mark.parametrize("per_head", [False, True])
def test_ranges_per_head_programs(per_head):
    p = make_problem(B=1, S=2, G=2, h=5, Dk=32, Dv=32, T=90, n=3, seed=5)
    out, lse = direct.sel_attn_ranges(p.q, p.k, p.v, p.ranges, return_lse=True, per_head=per_head)
    check_against_oracle(out, lse, p.q, p.k, p.v, p.ranges, what=f"per_head={per_head}")


def test_default_decode_splits_are_capped():
    from nsa_triton_sel.device import device_of
    from nsa_triton_sel.plan import MAX_DECODE_SPLITS, decode_splits

    cpu = device_of(torch.device("cpu")).sm_count  # 8 here: a row alone would want 16 splits
    assert decode_splits(1, 8192, 64, cpu) == MAX_DECODE_SPLITS == 4
    assert decode_splits(8, 8192, 64, cpu) == 2 and decode_splits(64, 8192, 64, cpu) == 1
    assert decode_splits(1, 100, 64, cpu) == 2  # never more splits than the cache has key tiles


@pytest.mark.parametrize("num_splits", [1, 3, 16])
def test_decode_split_merge(num_splits):
    # B*G = 2 rows, up to 16 splits: most splits of a short row have no tile at all.
    p = make_problem(B=2, S=1, G=1, h=20, Dk=64, Dv=32, T=260, n=4, seed=num_splits, empty_frac=0.25)
    p.ranges[1] = 0  # one empty row
    out, lse = direct.sel_attn_decode(p.q, p.k, p.v, p.ranges, return_lse=True, num_splits=num_splits)
    check_against_oracle(out, lse, p.q, p.k, p.v, p.ranges, what=f"decode splits={num_splits}")


def test_decode_default_splits_dk192():
    p = make_problem(B=1, S=1, G=2, h=3, Dk=192, Dv=64, T=200, n=2, seed=9, empty_frac=0.0)
    out, lse = direct.sel_attn_decode(p.q, p.k, p.v, p.ranges, return_lse=True)
    check_against_oracle(out, lse, p.q, p.k, p.v, p.ranges, what="decode default splits")


@pytest.mark.parametrize("L", [1, 64, 65, 200])
@pytest.mark.parametrize("dtype", DTYPES)
def test_dense_seed_api(L, dtype):
    g = torch.Generator().manual_seed(L)
    N, H, Dk, Dv = 3, 3, 64, 32
    q = torch.randn(N, H, Dk, generator=g).to(dtype)
    k = torch.randn(N, L, Dk, generator=g).to(dtype)
    v = torch.randn(N, L, Dv, generator=g).to(dtype)
    out, lse = direct.sel_attn_fwd_dense(q, k, v, return_lse=True)
    q5, k5, v5, r5 = packed_as_5d(q, k, v)
    check_against_oracle(out.reshape(N, 1, 1, H, Dv), lse.reshape(N, 1, 1, H), q5, k5, v5, r5,
                         what=f"dense L={L} {dtype}")


def test_varlen_seed_api_with_empty_row():
    g = torch.Generator().manual_seed(0)
    lens = torch.tensor([65, 0, 1, 200, 63])
    cu = torch.zeros(len(lens) + 1, dtype=torch.int32)
    cu[1:] = lens.cumsum(0)
    N, H, Dk, Dv = len(lens), 16, 192, 128
    q = torch.randn(N, H, Dk, generator=g).half()
    k_all = torch.randn(int(cu[-1]), Dk, generator=g).half()
    v_all = torch.randn(int(cu[-1]), Dv, generator=g).half()
    out, lse = direct.sel_attn_fwd_varlen(q, k_all, v_all, cu, return_lse=True)
    q5, k5, v5, r5 = varlen_as_5d(q, k_all, v_all, cu)
    check_against_oracle(out.reshape(1, N, 1, H, Dv), lse.reshape(1, N, 1, H), q5, k5, v5, r5, what="varlen")


@pytest.mark.parametrize("h", [3, 16])
@pytest.mark.parametrize("selection", ["local", "random"])
def test_multi_token_kernel(h, selection):
    # Local: tokens of a block share spans except the causal end (phase 1 with per-row masks);
    # random: hardly anything shared (phase 2 carries the work).  S is not a multiple of the
    # tokens per program, so the last program has tokens past S.
    B, T, G = 1, 75, 2
    p = make_problem(B=B, S=T, G=G, h=h, Dk=32, Dv=48, T=T, n=3, seed=h, empty_frac=0.1)
    if selection == "local":
        p.ranges = nsa_ranges(B, T, G, 3, 16, seed=h)
    out, lse = direct.sel_attn_tokens(p.q, p.k, p.v, p.ranges, return_lse=True)
    check_against_oracle(out, lse, p.q, p.k, p.v, p.ranges, what=f"tokens {selection} h={h}")


def test_multi_token_kernel_bf16_overlapping_leader():
    # The leader's spans only partly cover the others' (phase 2 masks covered keys out).
    p = make_problem(B=1, S=8, G=1, h=4, Dk=64, Dv=64, T=160, n=2, dtype=torch.bfloat16, seed=4)
    p.ranges[0, :, 0, 0] = torch.tensor([10, 100], dtype=torch.int32)
    p.ranges[0, :, 0, 1] = torch.tensor([120, 121], dtype=torch.int32)
    p.ranges[0, 7, 0, 0] = torch.tensor([40, 70], dtype=torch.int32)  # a leader covering only part
    p.ranges[0, 3, 0] = 0  # an empty row among them
    out, lse = direct.sel_attn_tokens(p.q, p.k, p.v, p.ranges, return_lse=True, tokens=8)
    check_against_oracle(out, lse, p.q, p.k, p.v, p.ranges, what="tokens partial leader")


# ----------------------------------------------------------------------------- block indices (MODE_BLOCKS)


def _blocks(B, S, G, n, T, bs, gen, dtype=torch.int64):
    """Random distinct blocks per row, unsorted, with -1 padding, some wholly in a query's future."""
    nb = -(-T // bs)
    idx = torch.rand(B, S, G, nb, generator=gen).argsort(-1)[..., :n]  # distinct, unsorted
    pad = torch.rand(B, S, G, n, generator=gen) < 0.3
    return torch.where(pad, -1, idx).to(dtype)


@pytest.mark.parametrize(
    "shape, bs, positions",
    [
        (dict(B=1, S=5, G=2, h=3, Dk=32, Dv=48, T=150), 32, None),  # partial last block (150 = 4 x 32 + 22)
        (dict(B=2, S=3, G=1, h=4, Dk=64, Dv=64, T=130), 64, "per-batch"),  # [B, S] positions
        (dict(B=1, S=4, G=2, h=16, Dk=192, Dv=64, T=100), 16, "shared"),  # [S] positions, Dk = 192
    ],
    ids=["partial-last-block", "positions-BS", "dk192-positions-S"],
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_block_mode_matches_oracle(shape, bs, positions, dtype):
    from nsa_triton_sel.contract import block_indices_to_ranges

    gen = torch.Generator().manual_seed(bs + shape["h"])
    p = make_problem(**shape, n=2, dtype=dtype, seed=bs)
    B, S, G, T = shape["B"], shape["S"], shape["G"], shape["T"]
    idx = _blocks(B, S, G, 3, T, bs, gen, torch.int32 if positions == "shared" else torch.int64)
    if positions == "per-batch":
        pos = torch.randint(0, T, (B, S), generator=gen)
    elif positions == "shared":
        pos = torch.randint(0, T, (S,), generator=gen).to(torch.int32)
    else:
        pos = None  # query s at position s: most blocks are wholly in the future (causal clamp)
    out, lse = direct.sel_attn_blocks(p.q, p.k, p.v, idx, bs, pos, return_lse=True)
    ranges = block_indices_to_ranges(idx, bs, T, pos)
    check_against_oracle(out, lse, p.q, p.k, p.v, ranges, what=f"blocks {shape} bs={bs} pos={positions}")


@pytest.mark.parametrize("num_splits", [1, 3])
def test_block_mode_decode_split(num_splits):
    from nsa_triton_sel.contract import block_indices_to_ranges

    p = make_problem(B=3, S=1, G=1, h=5, Dk=64, Dv=32, T=200, n=2, seed=num_splits)
    idx = torch.tensor([[3, 0, -1, 1], [-1, -1, -1, -1], [2, 1, 0, 3]]).view(3, 1, 1, 4)  # row 1 empty
    pos = torch.tensor([199, 10, 150])  # row 0 sees the partial last block [192, 200)
    out, lse = direct.sel_attn_blocks(p.q, p.k, p.v, idx, 64, pos.view(3, 1), return_lse=True, decode=True,
                                      num_splits=num_splits)
    ranges = block_indices_to_ranges(idx, 64, 200, pos.view(3, 1))
    check_against_oracle(out, lse, p.q, p.k, p.v, ranges, what=f"blocks decode splits={num_splits}")
    assert torch.isneginf(lse[1]).all() and torch.count_nonzero(out[1]) == 0


def test_block_mode_huge_positions_and_block_size():
    """pos + 1 near 2^63 must not wrap (it would empty every row), nor block_size * index."""
    p = make_problem(B=1, S=2, G=1, h=2, Dk=32, Dv=32, T=100, n=1, seed=2)
    idx = torch.tensor([[[[0, 1]], [[1, -1]]]])
    big = torch.tensor([2**63 - 1, 2**63 - 2])
    out, lse = direct.sel_attn_blocks(p.q, p.k, p.v, idx, 64, big, return_lse=True)
    full = torch.tensor([[[[[0, 64], [64, 100]]], [[[64, 100], [0, 0]]]]], dtype=torch.int32)
    check_against_oracle(out, lse, p.q, p.k, p.v, full, what="positions near 2^63")
    whole = torch.tensor([[[[0, -1]], [[0, -1]]]])
    for bs in (2**31, 2**63, 2**64):  # one block covers every key (clamped to T by the launcher)
        out, lse = direct.sel_attn_blocks(p.q, p.k, p.v, whole, bs, big, return_lse=True)
        ranges = torch.tensor([0, 100], dtype=torch.int32).expand(1, 2, 1, 2, 2).contiguous()
        ranges[..., 1, :] = 0
        check_against_oracle(out, lse, p.q, p.k, p.v, ranges, what=f"block_size={bs}")


def test_kernels_clamp_spans_outside_the_keys():
    """Out-of-range spans read no key outside [0, T): the dispatcher enqueues the kernel before its value
    checks answer (they raise afterwards), so the kernel itself must stay in bounds whatever it is given."""
    p = make_problem(B=1, S=4, G=1, h=4, Dk=32, Dv=32, T=90, n=3, seed=21, empty_frac=0.0)
    bad = p.ranges.clone()
    bad[0, :, 0, 0] = torch.tensor([-7, 10], dtype=bad.dtype)  # start < 0
    bad[0, :, 0, 1] = torch.tensor([80, 500], dtype=bad.dtype)  # end > T
    bad[0, :, 0, 2] = torch.tensor([30, 20], dtype=bad.dtype)  # start > end: empty
    clamped = bad.clone()
    clamped[0, :, 0, 0, 0] = 0
    clamped[0, :, 0, 1, 1] = 90
    clamped[0, :, 0, 2] = 0
    for run in (lambda r: direct.sel_attn_ranges(p.q, p.k, p.v, r, return_lse=True),
                lambda r: direct.sel_attn_tokens(p.q, p.k, p.v, r, return_lse=True, tokens=4)):
        out, lse = run(bad)
        ref_out, ref_lse = run(clamped)
        assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)
        check_against_oracle(ref_out, ref_lse, p.q, p.k, p.v, clamped, what="clamped spans")
