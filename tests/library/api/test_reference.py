"""The float64 oracle and the packed-SDPA path agree, and SDPA with ``is_causal`` does not.

Tolerances: fp32 max error < 1e-5 (acceptance); fp16/bf16 within one unit of the
dtype's epsilon at the output's magnitude, i.e. the rounding of the output itself.  A
real bug (a dropped key, a wrong softmax, attending key 0 only) is 10-1000x larger.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from nsa_triton_sel import reference
from nsa_triton_sel.reference import oracle, packed_sdpa, sdpa_rows
from nsa_triton_sel.testing import make_problem, random_ranges

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def out_tol(dtype: torch.dtype, ref: torch.Tensor) -> float:
    """Allowed max |packed - oracle| for the output."""
    if dtype == torch.float32:
        return 1e-5
    return torch.finfo(dtype).eps * max(1.0, float(ref.abs().max()))


def dense_reference(q, k, v, ranges):
    """Independent float64 check of the oracle: dense masked softmax over all T keys.

    Key t of row (b, s, g) is selected when some span has start <= t < end; a row with
    no key gives zeros.  No gather, no per-row loop: a different route to the same math.
    """
    T = k.shape[2]
    t = torch.arange(T)
    r = ranges.long()
    sel = ((r[..., 0, None] <= t) & (t < r[..., 1, None])).any(-2)  # [B, S, G, T]
    scores = torch.einsum("bsghd,bgtd->bsght", q.double(), k.double()) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~sel[:, :, :, None, :], float("-inf"))
    p = torch.softmax(scores, -1).nan_to_num(0.0)
    return torch.einsum("bsght,bgtd->bsghd", p, v.double())


# Shapes the acceptance names: L just above 64, several spans per row, empty rows,
# spans not aligned to 64, h in {1, 3, 16, 64}, Dk != Dv, Dk = 192, T not a multiple of
# the block size (64), non-contiguous inputs.
CASES = {
    "L65_h3": dict(ranges="single", L=65, T=333, h=3, S=3),
    "L127_h1": dict(ranges="single", L=127, T=200, h=1, S=3, G=3),
    "L200_h16": dict(ranges="single", L=200, T=333, h=16, n=2),
    "multispan_empty_rows": dict(T=1000, n=8, h=16, S=6, empty_frac=0.3),
    "h64_Dk192_Dv64": dict(T=333, h=64, Dk=192, Dv=64, n=5),
    "Dk192_Dv128_h1": dict(T=130, h=1, Dk=192, Dv=128, S=5),
    "Dk32_Dv96_noncontig": dict(T=257, h=16, Dk=32, Dv=96, noncontiguous=True, n=6),
    "many_rows_T97": dict(B=2, S=5, G=3, h=3, T=97, Dk=48, Dv=40, n=3, empty_frac=0.2),
}


def _check_against_oracle(p, dtype):
    """packed_sdpa vs oracle on problem ``p``: output within tolerance, LSE close,
    empty rows exactly zero with LSE -inf, no NaN anywhere."""
    want, want_lse = oracle(p.q, p.k, p.v, p.ranges, return_lse=True)
    got, got_lse = packed_sdpa(p.q, p.k, p.v, p.ranges, return_lse=True)
    got, got_lse = got.cpu(), got_lse.cpu()  # the oracle answers on the CPU
    assert got.dtype == p.v.dtype and got.shape == want.shape
    assert got_lse.dtype == torch.float32 and got_lse.shape == want.shape[:-1]
    assert not got.isnan().any() and not got_lse.isnan().any()
    err = (got.double() - want).abs().max().item()
    assert err < out_tol(dtype, want), f"max error {err:.3g}"
    empty = torch.isinf(want_lse)
    assert torch.equal(torch.isinf(got_lse), empty)
    assert (got_lse[empty] == float("-inf")).all() and (got[empty] == 0).all()
    lse_err = (got_lse.double() - want_lse)[~empty].abs().max().item() if (~empty).any() else 0.0
    assert lse_err < 1e-5 * max(1.0, want_lse[~empty].abs().max().item() if (~empty).any() else 1.0)
    return empty


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_packed_sdpa_matches_oracle(case, dtype, seed):
    p = make_problem(dtype=dtype, seed=seed, **CASES[case])
    _check_against_oracle(p, dtype)


def test_cases_cover_what_the_acceptance_names():
    # Guards the table above: a refactor that loses a shape would pass silently.
    lens, empties, unaligned = set(), 0, 0
    for kw in CASES.values():
        p = make_problem(seed=0, **kw)
        span = (p.ranges[..., 1] - p.ranges[..., 0]).long()
        lens |= set(span.sum(-1).flatten().tolist())
        empties += int((span.sum(-1) == 0).sum())
        unaligned += int(((p.ranges[..., 0] % 64 != 0) & (span > 0)).sum())
    assert {65, 127, 200} <= lens and empties > 0 and unaligned > 0
    assert {kw.get("h") for kw in CASES.values()} >= {1, 3, 16, 64}
    assert any(kw.get("Dk") == 192 for kw in CASES.values())
    assert any(kw.get("noncontiguous") for kw in CASES.values())
    assert any(kw.get("Dk", 64) != kw.get("Dv", 64) for kw in CASES.values())
    assert all(kw["T"] % 64 for kw in CASES.values())


@pytest.mark.parametrize("draw", range(4))
def test_packed_sdpa_matches_oracle_on_random_shapes(draw, seed):
    gen = torch.Generator().manual_seed(seed + draw)

    def pick(*xs):
        return xs[int(torch.randint(len(xs), (1,), generator=gen))]

    shape = dict(
        B=pick(1, 2), S=pick(1, 3, 4), G=pick(1, 2, 3), h=pick(1, 3, 16, 64),
        Dk=pick(16, 64, 96, 192), Dv=pick(8, 64, 128), T=pick(65, 127, 200, 301), n=pick(1, 3, 7),
    )
    p = make_problem(dtype=torch.float32, seed=gen, noncontiguous=bool(draw % 2), **shape)
    _check_against_oracle(p, torch.float32)


def test_non_contiguous_ranges(seed):
    p = make_problem(dtype=torch.float32, seed=seed, T=150, n=4)
    strided = torch.stack([p.ranges, p.ranges.flip(3)], dim=4)[..., 0, :]  # same values, other strides
    strided = strided.transpose(3, 4).contiguous().transpose(3, 4)
    assert not strided.is_contiguous() and torch.equal(strided, p.ranges)
    want = oracle(p.q, p.k, p.v, p.ranges)
    got = packed_sdpa(p.q, p.k, p.v, strided)
    assert (got.double() - want).abs().max() < 1e-5


@pytest.mark.parametrize("case", ["multispan_empty_rows", "many_rows_T97", "L200_h16"])
def test_oracle_matches_a_dense_masked_softmax(case, seed):
    p = make_problem(dtype=torch.float32, seed=seed, **CASES[case])
    assert (oracle(p.q, p.k, p.v, p.ranges) - dense_reference(p.q, p.k, p.v, p.ranges)).abs().max() < 1e-12


def test_empty_rows_give_zeros_and_minus_inf_never_nan():
    p = make_problem(B=1, S=4, G=2, h=3, Dk=8, Dv=8, T=50, n=3, dtype=torch.float16, seed=3)
    p.ranges[0, 1] = torch.tensor([5, 5], dtype=p.ranges.dtype)  # padding only
    p.ranges[0, 2, 1] = 0  # [0, 0) spans
    for fn in (oracle, packed_sdpa):
        out, lse = fn(p.q, p.k, p.v, p.ranges, return_lse=True)
        for b, s, g in ((0, 1, 0), (0, 1, 1), (0, 2, 1)):
            assert (out[b, s, g] == 0).all() and (lse[b, s, g] == float("-inf")).all(), fn.__name__
        assert not out.isnan().any() and not lse.isnan().any()
        assert torch.isfinite(lse[0, 0]).all()


@pytest.mark.parametrize("n, T", [(0, 10), (3, 10), (2, 0)])
def test_problem_with_no_key_at_all(n, T):
    q = torch.randn(2, 3, 2, 4, 16, dtype=torch.bfloat16)
    k, v = torch.randn(2, 2, T, 16, dtype=torch.bfloat16), torch.randn(2, 2, T, 24, dtype=torch.bfloat16)
    ranges = torch.full((2, 3, 2, n, 2), min(7, T), dtype=torch.int64)
    for fn in (oracle, packed_sdpa):
        out, lse = fn(q, k, v, ranges, return_lse=True)
        assert out.shape == (2, 3, 2, 4, 24) and (out == 0).all()
        assert lse.shape == (2, 3, 2, 4) and (lse == float("-inf")).all()
    assert packed_sdpa(q, k, v, ranges).dtype == torch.bfloat16


def test_gradients_are_finite_with_empty_rows():
    p = make_problem(B=1, S=4, G=2, h=2, Dk=16, Dv=16, T=40, n=3, dtype=torch.float32, seed=5, empty_frac=0.5)
    for x in (p.q, p.k, p.v):
        x.requires_grad_(True)
    out, lse = packed_sdpa(p.q, p.k, p.v, p.ranges, return_lse=True)
    empty = torch.isinf(lse)
    assert empty.any()  # the seed must give an empty row for this test to mean anything
    (out.sum() + lse.masked_fill(empty, 0).sum()).backward()
    for x in (p.q, p.k, p.v):
        assert torch.isfinite(x.grad).all()
    assert (p.q.grad[empty] == 0).all()


def test_default_and_explicit_scale():
    p = make_problem(dtype=torch.float32, seed=7, T=90, Dk=40)
    for sc in (None, 0.05):
        want = oracle(p.q, p.k, p.v, p.ranges, scale=sc)
        assert (packed_sdpa(p.q, p.k, p.v, p.ranges, scale=sc).double() - want).abs().max() < 1e-5
    # And the scale matters: a regression that dropped it would fail above.
    assert (oracle(p.q, p.k, p.v, p.ranges, scale=0.05) - oracle(p.q, p.k, p.v, p.ranges)).abs().max() > 1e-2


# ----------------------------------------------------------------------------- chunking


class _SdpaSpy:
    """Wraps F.scaled_dot_product_attention as packed_sdpa sees it; records each call."""

    def __init__(self, monkeypatch):
        self.calls: list[dict] = []
        real = F.scaled_dot_product_attention

        def spy(q, k, v, *args, **kwargs):
            kv_bytes = k.numel() * k.element_size() + v.numel() * v.element_size()
            self.calls.append(dict(rows=q.shape[0], kv_bytes=kv_bytes, **kwargs))
            return real(q, k, v, *args, **kwargs)

        monkeypatch.setattr(reference.F, "scaled_dot_product_attention", spy)


@pytest.mark.parametrize("chunk_bytes", [1, 50_000, 400_000])
def test_chunking_bounds_memory_and_changes_nothing(monkeypatch, chunk_bytes, seed):
    p = make_problem(B=2, S=6, G=2, h=4, Dk=32, Dv=16, T=300, n=4, dtype=torch.float16, seed=seed)
    whole, whole_lse = packed_sdpa(p.q, p.k, p.v, p.ranges, return_lse=True)
    spy = _SdpaSpy(monkeypatch)
    out, lse = packed_sdpa(p.q, p.k, p.v, p.ranges, return_lse=True, chunk_bytes=chunk_bytes)
    rows = 2 * 6 * 2
    assert sum(c["rows"] for c in spy.calls) == rows
    if chunk_bytes == 1:
        assert len(spy.calls) == rows  # at least one row per chunk, never zero
    else:
        assert len(spy.calls) > 1
        assert max(c["kv_bytes"] for c in spy.calls) <= chunk_bytes  # the gathered buffers fit
    # Rows are independent, so chunking must not change a single bit.
    assert torch.equal(out, whole) and torch.equal(lse, whole_lse)


def test_default_chunk_is_one_call_for_small_problems(monkeypatch):
    p = make_problem(dtype=torch.float16, seed=1)
    spy = _SdpaSpy(monkeypatch)
    packed_sdpa(p.q, p.k, p.v, p.ranges)
    assert len(spy.calls) == 1


def test_host_syncs_do_not_grow_with_rows(host_syncs):
    # "No Python loop over rows, no .item() per span": the host copies must be the same
    # for 8 rows in one chunk and 512 rows in many chunks.
    counts = []
    for S in (2, 128):
        p = make_problem(B=1, S=S, G=4, h=2, Dk=16, Dv=16, T=200, n=4, dtype=torch.float32, seed=2)
        host_syncs.clear()
        packed_sdpa(p.q, p.k, p.v, p.ranges, return_lse=True, chunk_bytes=1 << 20)
        counts.append(list(host_syncs))
    assert counts[0] == counts[1] and len(counts[0]) <= 2, counts  # validation + longest row


def test_packed_sdpa_never_asks_sdpa_for_is_causal(monkeypatch):
    spy = _SdpaSpy(monkeypatch)
    p = make_problem(dtype=torch.float16, seed=4)
    packed_sdpa(p.q, p.k, p.v, p.ranges)
    assert spy.calls and not any(c.get("is_causal") for c in spy.calls)
    assert all(c.get("attn_mask") is not None for c in spy.calls)


# ----------------------------------------------------------------------------- is_causal


def _one_span_rows(L, seed):
    """Rows whose single span has L keys, as float32, with the oracle's answer."""
    p = make_problem(
        B=1, S=4, G=2, h=8, Dk=64, Dv=64, T=L + 37, n=1, ranges="single", L=L, dtype=torch.float32, seed=seed
    )
    want = oracle(p.q, p.k, p.v, p.ranges).reshape(8, 8, 64)  # [rows, h, Dv]
    st = p.ranges[..., 0, 0].reshape(8).long()
    g = torch.arange(8) % 2
    key = st[:, None] + torch.arange(L)  # [rows, L]
    kb = p.k[0, g[:, None], key]  # [rows, L, Dk]
    vb = p.v[0, g[:, None], key]
    return p.q.reshape(8, 8, 64), kb, vb, want


def test_is_causal_with_one_query_does_not_match_the_oracle_at_L200(seed):
    """The seeds' bug, replayed: q ``[N, h, 1, D]`` against the row's L keys with
    ``is_causal=True``.  Top-left alignment lets the one query see key 0 only (or the
    first 64 keys on some backends), so it must be far from the oracle at L = 200."""
    q, kb, vb, want = _one_span_rows(200, seed)
    h = q.shape[1]
    k4 = kb[:, None].expand(-1, h, -1, -1)
    v4 = vb[:, None].expand(-1, h, -1, -1)
    buggy = F.scaled_dot_product_attention(q[:, :, None], k4, v4, is_causal=True)[:, :, 0]
    fixed = F.scaled_dot_product_attention(q[:, :, None], k4, v4)[:, :, 0]
    assert (fixed.double() - want).abs().max() < 1e-5  # same call without is_causal is right
    assert (buggy.double() - want).abs().mean() > 0.1  # ... with it, grossly wrong
    # The fast path we ship matches the oracle on the same rows.
    assert (sdpa_rows(q, kb, vb).double() - want).abs().max() < 1e-5


def test_is_causal_with_heads_as_queries_is_also_wrong(seed):
    # The decode fallback's variant: q [1, h, D] against k [1, L, D] with is_causal=True
    # makes head i see keys 0..i.
    q, kb, vb, want = _one_span_rows(200, seed)
    rows = [slice(i, i + 1) for i in range(q.shape[0])]
    buggy = torch.cat([F.scaled_dot_product_attention(q[r], kb[r], vb[r], is_causal=True) for r in rows])
    assert (buggy.double() - want).abs().mean() > 0.1


def test_sdpa_rows_respects_key_valid(seed):
    q, kb, vb, _ = _one_span_rows(100, seed)
    valid = torch.arange(100) < torch.tensor([100, 70, 65, 1, 99, 100, 3, 64])[:, None]
    got = sdpa_rows(q, kb, vb, key_valid=valid)
    for i in range(q.shape[0]):
        L = int(valid[i].sum())
        one = sdpa_rows(q[i : i + 1], kb[i : i + 1, :L], vb[i : i + 1, :L])
        assert (got[i] - one[0]).abs().max() < 1e-6


def test_random_ranges_helper_obeys_the_contract(seed):
    # The generators feed every test above: their spans must be disjoint and in range.
    from nsa_triton_sel.contract import Dims, check_ranges

    gen = torch.Generator().manual_seed(seed)
    r = random_ranges(2, 5, 3, 6, 123, gen=gen, empty_frac=0.3)
    check_ranges(r, Dims(2, 5, 3, 1, 8, 123, 8), r.device)


# ----------------------------------------------------------------------------- on a GPU


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", ["L200_h16", "multispan_empty_rows", "h64_Dk192_Dv64"])
def test_packed_sdpa_on_cuda_matches_oracle(case, dtype, seed):
    p = make_problem(dtype=dtype, seed=seed, device="cuda", **CASES[case])
    _check_against_oracle(p, dtype)


@pytest.mark.gpu
def test_is_causal_on_cuda_backends_does_not_match_the_oracle(seed):
    # On CUDA the memory-efficient backend reads the first 64 keys and math/cuDNN key 0:
    # both are far from the oracle at L = 200.
    q, kb, vb, want = _one_span_rows(200, seed)
    q, kb, vb = (x.cuda().half() for x in (q, kb, vb))
    h = q.shape[1]
    k4, v4 = kb[:, None].expand(-1, h, -1, -1), vb[:, None].expand(-1, h, -1, -1)
    buggy = F.scaled_dot_product_attention(q[:, :, None], k4, v4, is_causal=True)[:, :, 0]
    assert (buggy.double().cpu() - want).abs().mean() > 0.05
