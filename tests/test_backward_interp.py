"""The backward kernels against float64 autograd, under the Triton interpreter (CPU).

Part of the CPU parity suite (``pytest -m interp``, run by ``nox -s parity-X``).  Tiny shapes,
yet they cover: a span just past one key tile (65 keys), multi-span rows with empty rows,
h = 3 and 16, Dk != Dv, Dk = 192, a partial last key tile (T = 150), strided inputs and
upstream gradients, hot keys read by every token (split over several programs and reduced),
bit-for-bit determinism, and the reader CSR against a brute-force enumeration.
"""

from __future__ import annotations

import os

import pytest
import torch

import grad_checks
from nsa_triton_sel import reference
from nsa_triton_sel.testing import make_problem, nsa_ranges

pytestmark = [
    pytest.mark.interp,
    pytest.mark.skipif(
        os.environ.get("TRITON_INTERPRET") != "1", reason="interpreter tests (a CUDA device is present: see test_backward_gpu)"
    ),
]

grad = pytest.importorskip("nsa_triton_sel.kernels.grad")


def factor(dtype) -> float:
    # As in test_kernels_interp: the interpreter rounds fp32 -> bf16 by truncation, which
    # doubles the bf16 rounding error; the GPU tests hold the 2x bound.
    return 4.0 if dtype == torch.bfloat16 else 2.0


def run(p, grad_out=None, scale=None, **tune):
    """Forward + backward through the kernels; returns (dq, dk, dv, grad_out)."""
    q, k, v = (x.detach().clone().requires_grad_() for x in (p.q, p.k, p.v))
    out = grad.sel_attn_train(q, k, v, p.ranges, scale=scale, **tune)
    if grad_out is None:
        grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(out.dtype)
    out.backward(grad_out)
    return (q.grad, k.grad, v.grad), grad_out


def check(p, what, scale=None, **tune):
    got, go = run(p, scale=scale, **tune)
    return grad_checks.check_grads(got, p.q, p.k, p.v, p.ranges, go, scale=scale, factor=factor(p.q.dtype), what=what)


def test_masked_oracle_matches_reference():
    p = make_problem(B=1, S=3, G=2, h=2, Dk=16, Dv=24, T=70, n=3, dtype=torch.float32, seed=2, empty_frac=0.3)
    out = grad_checks.masked_attention(p.q.double(), p.k.double(), p.v.double(), p.ranges)
    assert torch.allclose(out, reference.oracle(p.q, p.k, p.v, p.ranges), atol=1e-12)


@pytest.mark.parametrize("L", [1, 65])
def test_single_span_past_one_tile(L):
    # 65 keys: one past the dk/dv kernel's 64-key tile and two past the dq kernel's 32.
    p = make_problem(B=1, S=2, G=1, h=3, Dk=32, Dv=32, T=130, n=2, ranges="single", L=L, seed=L)
    check(p, f"L={L}")


@pytest.mark.parametrize("h", [3, 16])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_multi_span_rows_with_empty_rows(h, dtype):
    # T = 150: the last key tile is partial; random unaligned spans; ~1/3 of rows empty.
    p = make_problem(B=2, S=3, G=2, h=h, Dk=32, Dv=48, T=150, n=4, dtype=dtype, seed=h, empty_frac=0.3)
    check(p, f"h={h} {dtype}")


def test_dk192_dk_ne_dv_noncontiguous():
    p = make_problem(B=1, S=2, G=2, h=4, Dk=192, Dv=128, T=130, n=3, seed=7, noncontiguous=True)
    check(p, "Dk=192 Dv=128 strided", scale=0.1)


def test_tokens_forward_kernel():
    # The multi-token forward's output and LSE feed the backward, whose dq then also runs
    # several tokens per program (16 tokens x 4 padded heads here).
    p = make_problem(B=1, S=9, G=1, h=4, Dk=32, Dv=32, T=120, n=3, seed=6, empty_frac=0.2)
    check(p, "forward=tokens", forward="tokens")


@pytest.mark.parametrize("selection", ["local", "random"])
@pytest.mark.parametrize("h", [3, 16])
def test_multi_token_dq(h, selection):
    # Local: neighbours share blocks (phase 1 with per-row masks); random: little is shared
    # (phase 2 does the work).  S = 37 is not a multiple of the tokens per program.
    T, G = 37, 1
    p = make_problem(B=1, S=T, G=G, h=h, Dk=32, Dv=48, T=T, n=3, seed=h, empty_frac=0.1)
    if selection == "local":
        p.ranges = nsa_ranges(1, T, G, 3, 8, seed=h)
    check(p, f"dq tokens {selection} h={h}", dq_tokens=64 // (4 if h == 3 else 16))


def test_multi_token_dq_partial_leader_dk192_separate_delta():
    # The leader's spans only partly cover the others' (phase 2 masks the covered keys);
    # Dk = 192 (two slices); delta from the fp32 recomputation, loaded by the dq kernel.
    p = make_problem(B=1, S=8, G=1, h=4, Dk=192, Dv=64, T=160, n=2, dtype=torch.bfloat16, seed=4)
    p.ranges[0, :, 0, 0] = torch.tensor([10, 100], dtype=torch.int32)
    p.ranges[0, :, 0, 1] = torch.tensor([120, 121], dtype=torch.int32)
    p.ranges[0, 7, 0, 0] = torch.tensor([40, 70], dtype=torch.int32)
    p.ranges[0, 3, 0] = 0  # an empty row among them
    check(p, "dq tokens partial leader", dq_tokens=8, delta="fp32")


def test_loaded_delta():
    # delta="fp32": delta computed before the dq kernel (from O recomputed in fp32), which loads it
    # (LOAD_DELTA) instead of computing it from the stored output; gradients agree with the oracle.
    p = make_problem(B=1, S=3, G=2, h=5, Dk=64, Dv=32, T=100, n=3, seed=8, empty_frac=0.3)
    check(p, "delta=fp32", delta="fp32")


@pytest.mark.parametrize("chunk", [None, 3])
def test_hot_keys_split_and_deterministic(chunk):
    # Every token reads keys [0, 40) (NSA's block 0) plus a random span: the tile of those
    # keys has one reader per token.  chunk=3 splits it over several programs (partial sums
    # in the workspace, then the reduce kernel); both runs must agree bit for bit.
    p = make_problem(B=1, S=8, G=1, h=2, Dk=32, Dv=32, T=200, n=3, seed=3, empty_frac=0.0)
    p.ranges[..., 0, 0] = 0
    p.ranges[..., 0, 1] = 40
    p.ranges[..., 1:, 0] = p.ranges[..., 1:, 0].clamp_min(40)
    p.ranges[..., 1:, 1] = torch.maximum(p.ranges[..., 1:, 1], p.ranges[..., 1:, 0])
    tune = {} if chunk is None else {"chunk": chunk}
    csr = grad.reader_csr(p.ranges, 200, 64, h=2, rows_per_step=64, chunk=chunk, programs=1)
    if chunk is not None:
        assert csr.slots > 0 and int((csr.tile_slots[:, 1] > 1).sum()) >= 1, "the hot tile was not split"
    check(p, f"hot keys chunk={chunk}", **tune)
    first, go = run(p, **tune)
    again, _ = run(p, grad_out=go, **tune)
    assert all(torch.equal(a, b) for a, b in zip(first, again)), "two runs differ"


def test_grad_out_strided_and_expanded():
    p = make_problem(B=1, S=3, G=2, h=3, Dk=32, Dv=32, T=90, n=3, seed=5)
    q, k, v = (x.detach().clone().requires_grad_() for x in (p.q, p.k, p.v))
    out = grad.sel_attn_train(q, k, v, p.ranges)
    out.float().sum().backward()  # grad_out is a stride-0 expand of ones
    ones = torch.ones(out.shape, dtype=out.dtype)
    grad_checks.check_grads((q.grad, k.grad, v.grad), p.q, p.k, p.v, p.ranges, ones, what="expanded grad_out")


def test_empty_selections_give_zero_gradients():
    p = make_problem(B=1, S=2, G=1, h=2, Dk=32, Dv=32, T=70, n=2, seed=3)
    for ranges in (torch.zeros_like(p.ranges), p.ranges[..., :0, :]):
        q, k, v = (x.detach().clone().requires_grad_() for x in (p.q, p.k, p.v))
        out = grad.sel_attn_train(q, k, v, ranges)
        out.backward(torch.randn(out.shape).to(out.dtype))
        for name, g in (("dq", q.grad), ("dk", k.grad), ("dv", v.grad)):
            assert g is not None and not torch.isnan(g).any() and torch.count_nonzero(g) == 0, name


def test_reader_csr_matches_brute_force():
    p = make_problem(B=2, S=5, G=2, h=1, T=100, n=4, seed=9, empty_frac=0.2)
    bn, chunk = 16, 2
    csr = grad.reader_csr(p.ranges, 100, bn, h=1, rows_per_step=16, chunk=chunk, programs=1)
    nt = csr.n_tiles
    want = {}
    for b in range(2):
        for s in range(5):
            for g in range(2):
                for st, en in p.ranges[b, s, g].tolist():
                    for t in range(st // bn, (en - 1) // bn + 1) if en > st else ():
                        lo, hi = max(st - t * bn, 0), min(en - t * bn, bn)
                        want.setdefault((b * 2 + g) * nt + t, []).append((s, lo, hi))
    got = {}
    for tile, e0, e1, slot in csr.chunks.tolist():
        if tile < 0:
            continue
        assert e1 - e0 <= chunk
        rows = [(s, bnd & 0xFFFF, bnd >> 16) for s, bnd in csr.entries[e0:e1].tolist()]
        got.setdefault(tile, []).extend(rows)
        assert (slot >= 0) == (len(want.get(tile, [])) > chunk), f"tile {tile}: slot {slot}"
    for tile in got:
        got[tile].sort(key=lambda r: r[0])  # programs run longest first; entries within a tile are by token
    assert {t: sorted(r) for t, r in got.items() if r} == {t: sorted(r) for t, r in want.items()}
    assert csr.n_entries == sum(len(r) for r in want.values())
    assert int(csr.tile_slots[:, 1].sum()) <= csr.slots


@pytest.mark.parametrize("what", ["finite", "inf-q", "nan-do", "overflow"])
def test_maybe_nonfinite_flags_every_nonfinite_input(what):
    """The backward's cheap test (fp32 sums of q and dO) must flag any inf/NaN; an fp32 overflow of
    finite values is a false alarm that the exact per-row test then clears."""
    from nsa_triton_sel.kernels.grad import _maybe_nonfinite, _nonfinite_rows

    q = torch.randn(1, 5, 2, 3, 16).to(torch.bfloat16)
    do = torch.randn(1, 5, 2, 3, 16).to(torch.bfloat16)
    if what == "inf-q":
        q[0, 3, 1, 2, 7] = float("-inf")
    elif what == "nan-do":
        do[0, 0, 0, 1, 0] = float("nan")
    elif what == "overflow":
        q[0, 1, 0, 0, :4] = 3.0e38
    flag = int(_maybe_nonfinite(q, do))
    rows = _nonfinite_rows(q, do)
    assert flag == (0 if what == "finite" else 1)
    assert int(rows.sum()) == (1 if what in ("inf-q", "nan-do") else 0)


def test_workspace_slots_bound_every_split():
    """The workspace is sized before the GPU says how many tiles split: the bound must hold for any
    distribution of readers over tiles (random ones, one hot tile, every tile just over a chunk)."""
    gen = torch.Generator().manual_seed(0)
    cases = [torch.randint(0, 40, (n,), generator=gen) for n in (1, 7, 64, 300)]
    cases += [torch.tensor([1000] + [0] * 20), torch.full((50,), 9), torch.full((50,), 17)]
    for per_tile in cases:
        offsets = torch.zeros(per_tile.numel() + 1, dtype=torch.int64)
        torch.cumsum(per_tile, 0, out=offsets[1:])
        n_entries = int(offsets[-1])
        for chunk in (1, 2, 8, 16, 64):
            _, tile_slots, slots = grad._chunk_table(per_tile.to(torch.int64), offsets, n_entries, chunk)
            used = int(tile_slots[:, 1].sum())
            assert used <= slots, f"chunk {chunk}: {used} slots used, {slots} allocated"
            assert slots <= 2 * n_entries // chunk
