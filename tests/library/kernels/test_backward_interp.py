"""The backward kernels against float64 autograd, under the Triton interpreter (CPU).

Part of the CPU parity suite (``pytest -m interp``, run by ``nox -s parity-X``). Tiny shapes, yet they cover: a
span just past one key tile (65 keys), multi-span rows with empty rows, h = 3, 5, 16 and 40 (whole entries per
dk/dv step, and the flat walk), Dk != Dv, Dk = 192, a partial last key tile (T = 150), strided inputs and
upstream gradients, hot keys read by every token (split over several programs and reduced), bit-for-bit
determinism, the LSE's own gradient, and the reader list against a brute-force enumeration.
The kernels are called directly (``kernels/direct.py``: forward, then ``sel_attn_backward`` with launch
overrides); the operator's autograd is tested in ``test_op.py`` / ``test_api.py``.
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

direct = pytest.importorskip("nsa_triton_sel.kernels.direct")
readers = pytest.importorskip("nsa_triton_sel.kernels.readers")


def factor(dtype) -> float:
    # As in test_kernels_interp: the interpreter rounds fp32 -> bf16 by truncation, which
    # doubles the bf16 rounding error; the GPU tests hold the 2x bound.
    return 4.0 if dtype == torch.bfloat16 else 2.0


def run(p, grad_out=None, scale=None, ranges=None, **tune):
    """Forward + backward through the kernels (``grad_checks.kernel_grads``): ``((dq, dk, dv), grad_out)``."""
    return grad_checks.kernel_grads(p.q, p.k, p.v, p.ranges if ranges is None else ranges, grad_out, scale=scale,
                                    **tune)


def tiles(block_n: int, n: int):
    """A backward plan with ``block_n``-key tiles for rows of ``n`` spans (what the reader list reads of it)."""
    from nsa_triton_sel.plan.backward import backward_meta

    return backward_meta(h=1, Dk=16, Dv=16, n_spans=n, kv_block_n=block_n)


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


@pytest.mark.parametrize("h, rows", [(5, 16), (40, 32)])
def test_dkdv_walk_whole_entries_and_flat(h, rows):
    # The dk/dv walk takes rows // next_pow2(h) whole entries per step (h = 5: 8 positions an entry, 3 of them
    # padding), or, with more heads than pairs per step (h = 40 > 32), the flat entry * h + head list, whose
    # steps straddle entries; chunk=3 ends chunks inside a step.
    from nsa_triton_sel.plan.backward import backward_meta

    assert backward_meta(h=h, Dk=16, Dv=24, rows=rows).KV_HP == (8 if h == 5 else 0)
    p = make_problem(B=1, S=4, G=1, h=h, Dk=16, Dv=24, T=140, n=3, seed=h, empty_frac=0.2)
    check(p, f"dk/dv walk h={h} rows={rows}", rows=rows, chunk=3)


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
    if chunk is not None:
        from nsa_triton_sel.plan import entries_per_row

        lists = readers.reader_list(p.ranges, 200, tiles(64, 3), per_row=entries_per_row(3, 200, 64, 0, False),
                                    chunk=chunk)
        assert lists.slots > 0 and int((lists.tile_slots[:, 1] > 1).sum()) >= 1, "the hot tile was not split"
    check(p, f"hot keys chunk={chunk}", **tune)
    first, go = run(p, **tune)
    again, _ = run(p, grad_out=go, **tune)
    assert all(torch.equal(a, b) for a, b in zip(first, again)), "two runs differ"


def test_grad_out_strided_and_expanded():
    p = make_problem(B=1, S=3, G=2, h=3, Dk=32, Dv=32, T=90, n=3, seed=5)
    ones = torch.ones((), dtype=p.q.dtype).expand(*p.q.shape[:4], p.v.shape[-1])  # a stride-0 expand
    got, _ = run(p, grad_out=ones)
    grad_checks.check_grads(got, p.q, p.k, p.v, p.ranges, ones.contiguous(), what="expanded grad_out")


def test_empty_selections_give_zero_gradients():
    p = make_problem(B=1, S=2, G=1, h=2, Dk=32, Dv=32, T=70, n=2, seed=3)
    for ranges in (torch.zeros_like(p.ranges), p.ranges[..., :0, :]):
        got, _ = run(p, ranges=ranges)
        for name, g in zip(("dq", "dk", "dv"), got):
            assert g is not None and not torch.isnan(g).any() and torch.count_nonzero(g) == 0, name


def test_the_lse_gradient_is_folded_into_the_backward():
    """d lse / d s = P: with an upstream gradient on the LSE (merging attention branches by LSE), the kernels'
    gradients equal float64 autograd of output and LSE together."""
    p = make_problem(B=1, S=5, G=2, h=3, Dk=32, Dv=16, T=150, n=3, seed=12, empty_frac=0.2)
    out, lse = direct.sel_attn_ranges(p.q, p.k, p.v, p.ranges, return_lse=True)
    g = torch.Generator().manual_seed(2)
    go = torch.randn(out.shape, generator=g).to(out.dtype)
    gl = torch.randn(lse.shape, generator=g) * torch.isfinite(lse)  # an empty row's LSE is -inf: no gradient
    got = direct.sel_attn_backward(p.q, p.k, p.v, p.ranges, out, lse, go, grad_lse=gl)
    xs = [x.double().requires_grad_() for x in (p.q, p.k, p.v)]
    o, l = reference.oracle(*xs, p.ranges, return_lse=True)
    fin = torch.isfinite(l)
    ((o * go.double()).sum() + (torch.where(fin, l, 0) * gl.double()).sum()).backward()
    for name, a, b in zip("qkv", got, xs):
        err = float((a.double() - b.grad).norm() / b.grad.norm())
        assert err < 5e-3, f"d{name}: relative error {err:.2e}"


@pytest.mark.parametrize("dtype, strided, int64_keys", [(torch.int32, False, False), (torch.int64, True, True)])
def test_reader_list_matches_brute_force(dtype, strided, int64_keys, monkeypatch):
    from nsa_triton_sel.plan import entries_per_row

    if int64_keys:  # the sort keys of selections too large for int32 keys
        monkeypatch.setattr(readers, "INT32_KEYS_BELOW", 0)

    p = make_problem(B=2, S=5, G=2, h=1, T=100, n=4, seed=9, empty_frac=0.2)
    bn, chunk = 16, 2
    per_row = entries_per_row(4, 100, bn, 0, aligned=False)
    capacity = 2 * 5 * 2 * per_row
    ranges = p.ranges.to(dtype)
    if strided:  # the spans as a view with no unit stride: every stride is read from the tensor
        ranges = torch.zeros((2, 5, 2, 4, 2, 3), dtype=dtype)[..., 1].copy_(ranges)
    lists = readers.reader_list(ranges, 100, tiles(bn, 4), per_row=per_row, chunk=chunk)
    nt = lists.n_tiles
    want = {}
    for b in range(2):
        for s in range(5):
            for g in range(2):
                for st, en in p.ranges[b, s, g].tolist():
                    for t in range(st // bn, (en - 1) // bn + 1) if en > st else ():
                        lo, hi = max(st - t * bn, 0), min(en - t * bn, bn)
                        want.setdefault((b * 2 + g) * nt + t, []).append((s, lo, hi))
    got = {}
    for tile, e0, e1, slot in lists.chunks.tolist():
        if tile < 0:
            continue
        assert e1 - e0 <= chunk
        rows = [(s, bnd & 0xFFFF, bnd >> 16) for s, bnd in lists.entries[e0:e1].tolist()]
        got.setdefault(tile, []).extend(rows)
        assert (slot >= 0) == (len(want.get(tile, [])) > chunk), f"tile {tile}: slot {slot}"
    for tile in got:
        got[tile].sort(key=lambda r: r[0])  # programs run longest first; entries within a tile are by token
    assert {t: sorted(r) for t, r in got.items() if r} == {t: sorted(r) for t, r in want.items()}
    assert sum(len(r) for r in want.values()) <= capacity
    assert int(lists.tile_slots[:, 1].sum()) <= lists.slots


def test_overlapping_spans_cannot_overrun_the_reader_list():
    """Spans that break the contract (overlapping: validate=False) can exceed the bound: each row's list is cut at
    its ``per_row`` slots, so no kernel reads past it (the gradients of such input are not defined)."""
    p = make_problem(B=1, S=4, G=1, h=2, Dk=16, Dv=16, T=128, n=3, seed=2)
    p.ranges[:] = torch.tensor([0, 128], dtype=p.ranges.dtype)  # three copies of all keys per row
    lists = readers.reader_list(p.ranges, 128, tiles(16, 3), per_row=3, chunk=4)  # each row has 24 entries, cut at 3
    live = lists.chunks[lists.chunks[:, 0] >= 0]  # padding programs (tile -1) return before reading
    assert int(live[:, 2].max()) <= 12 and lists.entries.shape[0] == 12
    assert int((live[:, 2] - live[:, 1]).sum()) == 12
    got, _ = run(p)  # the real bound, from shapes: runs, whatever it computes
    assert all(g.shape == x.shape for g, x in zip(got, (p.q, p.k, p.v)))


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
            _, tile_slots, slots = readers._chunk_table(offsets, n_entries, chunk)
            used = int(tile_slots[:, 1].sum())
            assert used <= slots, f"chunk {chunk}: {used} slots used, {slots} allocated"
            assert slots == n_entries // chunk + min(per_tile.numel(), n_entries // chunk)
