"""``selection_attention`` with packed batches (``cu_seqlens``, ``cu_seqlens_q``/``cu_seqlens_k``) and the
``[B, T, HQ, D]`` / ``[T, HQ, D]`` layouts (``arguments/layouts.py``): packed calls equal per-sequence calls, the
layouts are views, no row reads across its sequence's boundary (validated: errors name the row), and
the Triton kernels (interpreter) agree with float64 forward and backward on packed batches."""

from __future__ import annotations

import os

import pytest
import torch

import peer_refs
from nsa_triton_sel import selection_attention
from nsa_triton_sel.arguments.layouts import layout_of

CU = [0, 5, 5, 45, 83]
BS = 16
INTERP_ONLY = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                 reason="interpreter tests (a CUDA device is present: see test_interop_gpu)")


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _packed(Tq=CU[-1], Tk=CU[-1], HQ=4, H=2, D=8, seed=0, dtype=torch.float32):
    g = _gen(seed)
    return tuple(torch.randn(*s, generator=g).to(dtype) for s in ((Tq, HQ, D), (Tk, H, D), (Tk, H, D)))


def _per_sequence(q, k, v, spans, cu, **kw):
    """Each sequence on its own through the native fixed-length call."""
    outs = []
    for a, b in zip(cu[:-1], cu[1:]):
        if b == a:
            continue
        q5, k5, v5 = layout_of(q[a:b], k[a:b], v[a:b]).native(q[a:b], k[a:b], v[a:b])
        s = spans[a:b][None]
        key = "block_indices" if s.dim() == 4 else "ranges"
        outs.append(selection_attention(q5, k5, v5, **{key: s}, **kw, backend="oracle").flatten(2, 3)[0])
    return torch.cat(outs)


def test_packed_block_indices_equal_per_sequence_calls():
    q, k, v = _packed()
    idx = peer_refs.random_blocks(CU, CU, 2, 3, BS, _gen(1), extra=False)
    got = selection_attention(q, k, v, block_indices=idx, block_size=BS, cu_seqlens=torch.tensor(CU), backend="oracle")
    assert torch.allclose(got, _per_sequence(q, k, v, idx, CU, block_size=BS), atol=1e-6)


def test_packed_ranges_count_from_each_sequence_start():
    q, k, v = _packed()
    cu = torch.tensor(CU)
    seq = torch.searchsorted(cu[1:-1], torch.arange(1, CU[-1] + 1))
    t = torch.arange(CU[-1]) - cu[seq]  # position inside the sequence
    ranges = torch.stack([(t - 3).clamp_min(0), t + 1], -1)[:, None, None, :].expand(-1, 2, 1, 2).contiguous()
    got, lse = selection_attention(q, k, v, ranges, cu_seqlens=cu, backend="oracle", return_lse=True)
    assert got.shape == (CU[-1], 4, 8) and lse.shape == (CU[-1], 4)
    assert torch.allclose(got, _per_sequence(q, k, v, ranges, CU), atol=1e-6)


def test_positions_are_inside_the_sequence_and_cached_queries_are_the_last_tokens():
    cu_q, cu_k = [0, 2, 5], [0, 40, 70]
    q, k, v = _packed(5, 70)
    idx = peer_refs.random_blocks(cu_q, cu_k, 2, 2, BS, _gen(2), extra=False)
    kw = dict(block_indices=idx, block_size=BS, backend="oracle")
    got = selection_attention(q, k, v, cu_seqlens_q=torch.tensor(cu_q), cu_seqlens_k=torch.tensor(cu_k), **kw)
    assert torch.allclose(got.double(), peer_refs.fla(q, k, v, idx, None, BS, cu_q, cu_k), atol=2e-5)
    pos = torch.tensor([38, 39, 27, 28, 29])  # the default: len_k - len_q + i
    same = selection_attention(q, k, v, cu_seqlens_q=torch.tensor(cu_q), cu_seqlens_k=torch.tensor(cu_k),
                               positions=pos, **kw)
    assert torch.equal(got, same)


def test_layouts_are_views_and_match_the_native_call():
    g = _gen(3)
    q, k, v = torch.randn(2, 9, 6, 8, generator=g), torch.randn(2, 9, 3, 8, generator=g), torch.randn(2, 9, 3, 5,
                                                                                                      generator=g)
    q5, k5, v5 = layout_of(q, k, v).native(q, k, v)
    for a, b in ((q5, q), (k5, k), (v5, v)):
        assert a.data_ptr() == b.data_ptr() and a._base is not None  # a view, no copy
    assert q5.shape == (2, 9, 3, 2, 8) and k5.shape == (2, 3, 9, 8)
    idx = torch.tensor([0, -1]).expand(2, 9, 3, 2)
    out, lse = selection_attention(q, k, v, block_indices=idx, block_size=4, backend="oracle", return_lse=True)
    ref, ref_lse = selection_attention(q5, k5, v5, block_indices=idx, block_size=4, backend="oracle",
                                       return_lse=True)
    assert out.shape == (2, 9, 6, 5) and lse.shape == (2, 9, 6)
    assert torch.equal(out, ref.flatten(2, 3)) and torch.equal(lse, ref_lse.flatten(2, 3))
    out3 = selection_attention(q[1], k[1], v[1], block_indices=idx[1], block_size=4, backend="oracle")
    assert torch.equal(out3, out[1])


def test_a_new_layout_is_one_table_entry(monkeypatch):
    """Adding a layout is one entry of ``layouts.LAYOUTS``: here ``q [T, Dk]`` with ``k/v [T, D]`` (one head)."""
    from nsa_triton_sel.arguments import layouts

    single = layouts.Layout("[T, Dk]", "[T, D]",
                            native=lambda q, k, v: (q[None, :, None, None], k[None, None], v[None, None]),
                            spans=lambda x: x if x is None else x[None, :, None],
                            back=lambda o, l: (o[0, :, 0, 0], None if l is None else l[0, :, 0, 0]))
    monkeypatch.setitem(layouts.LAYOUTS, 2, single)
    q, k, v = _packed(HQ=1, H=1)
    idx = torch.tensor([0, 2, -1]).expand(CU[-1], 3)
    got, lse = selection_attention(q[:, 0], k[:, 0], v[:, 0], block_indices=idx, block_size=BS, backend="oracle",
                                   return_lse=True)
    want, want_lse = selection_attention(q, k, v, block_indices=idx[:, None], block_size=BS, backend="oracle",
                                         return_lse=True)
    assert torch.equal(got, want[:, 0]) and torch.equal(lse, want_lse[:, 0])


def test_meta_tensors_give_the_shapes():
    q, k, v = (x.to("meta") for x in _packed())
    idx = torch.zeros(CU[-1], 2, 3, dtype=torch.int64, device="meta")
    out = selection_attention(q, k, v, block_indices=idx, block_size=BS, cu_seqlens=torch.tensor(CU, device="meta"))
    assert out.shape == (CU[-1], 4, 8) and out.device.type == "meta"


def test_unvalidated_bad_values_never_read_another_sequence():
    q, k, v = _packed()
    idx = torch.full((CU[-1], 2, 2), -1)
    idx[10:, :, 0] = 0
    bad = idx.clone()
    bad[10:40, :, 1] = 5  # past the end of sequence 2 (40 keys: blocks 0..2), into sequence 3
    bad[44, 0, 1] = -9
    kw = dict(block_size=BS, cu_seqlens=torch.tensor(CU), backend="oracle", validate=False)
    assert torch.equal(selection_attention(q, k, v, block_indices=bad, **kw),
                       selection_attention(q, k, v, block_indices=idx, **kw))


@pytest.mark.parametrize("case, match", [
    ("past_sequence", r"block_indices\[t=12, h=1, slot=0\] \(sequence 2, position 7\) = 3: out of range; block "
                      r"indices count from the start of each sequence: accepted -1 \(no block\) or 0 <= index < 3"),
    ("repeat", r"block_indices\[t=50, h=0\] \(sequence 3, position 5\) = \[0, 0, -1\] repeats a block"),
    ("cu_start", r"cu_seqlens_q / cu_seqlens_k \(or cu_seqlens\) = \[1, 5, 5, 45, 83\] .*must start at 0"),
    ("cu_end", r"cu_seqlens_q = \[0, 5, 5, 45, 80\]: must end at the number of packed query rows S=83"),
    ("cu_order", r"must never decrease"),
])
def test_bad_block_indices_name_the_row(case, match):
    q, k, v = _packed()
    idx = torch.full((CU[-1], 2, 3), -1)
    cu = torch.tensor(CU)
    if case == "past_sequence":
        idx[12, 1, 0] = 3
    elif case == "repeat":
        idx[50, 0, :2] = 0
    elif case == "cu_start":
        cu[0] = 1
    elif case == "cu_end":
        cu[-1] = 80
    else:
        cu[2] = 3
    with pytest.raises(ValueError, match=match):
        selection_attention(q, k, v, block_indices=idx, block_size=BS, cu_seqlens=cu, backend="oracle")


def test_ranges_past_the_sequence_and_more_queries_than_keys_raise():
    q, k, v = _packed()
    ranges = torch.zeros(CU[-1], 2, 1, 2, dtype=torch.int64)
    ranges[46, 1, 0] = torch.tensor([30, 39])  # sequence 3 has 38 keys
    with pytest.raises(ValueError, match=r"ranges\[t=46, h=1, span=0\] \(sequence 3, position 1\) = \[30, 39\]: end > "
                                         r"the length of its sequence .* \(len=38 here\)"):
        selection_attention(q, k, v, ranges, cu_seqlens=torch.tensor(CU), backend="oracle")
    with pytest.raises(ValueError, match="more queries than keys"):
        selection_attention(q[:6], k[:5], v[:5], ranges[:6], cu_seqlens_q=torch.tensor([0, 6]),
                            cu_seqlens_k=torch.tensor([0, 5]), backend="oracle")


@pytest.mark.parametrize("kw, err, match", [
    (dict(cu_seqlens=[0, 83]), TypeError, "cu_seqlens must be a torch.Tensor"),
    (dict(cu_seqlens=torch.tensor([0.0, 83.0])), TypeError, "cu_seqlens must be an integer tensor"),
    (dict(cu_seqlens=torch.tensor([83])), ValueError, r"cu_seqlens has shape \[1\]; accepted: \[N \+ 1\]"),
    (dict(cu_seqlens_q=torch.tensor([0, 83])), ValueError, "cu_seqlens_q and cu_seqlens_k go together"),
    (dict(cu_seqlens=torch.tensor([0, 83]), cu_seqlens_k=torch.tensor([0, 83])), ValueError, "not both"),
    (dict(cu_seqlens_q=torch.tensor([0, 83]), cu_seqlens_k=torch.tensor([0, 3, 83])), ValueError,
     "the same sequences"),
])
def test_bad_cu_seqlens_arguments(kw, err, match):
    q, k, v = _packed()
    with pytest.raises(err, match=match):
        selection_attention(q, k, v, block_indices=torch.full((83, 2, 1), -1), block_size=BS, **kw)


def test_bad_layouts():
    q, k, v = _packed()
    with pytest.raises(ValueError, match=r"H must divide HQ"):
        selection_attention(q[:, :3], k, v, block_indices=torch.full((83, 2, 1), -1), block_size=BS)
    with pytest.raises(ValueError, match=r"k must be \[T, H, D\]"):
        selection_attention(q, k[None], v, block_indices=torch.full((83, 2, 1), -1), block_size=BS)
    with pytest.raises(ValueError, match=r"got B=2"):
        selection_attention(torch.stack([q, q]), torch.stack([k, k]), torch.stack([v, v]),
                            block_indices=torch.full((2, 83, 2, 1), -1), block_size=BS, cu_seqlens=torch.tensor(CU))


def _fp16_case(seed, cu_q, cu_k, S=2, HQ=2, H=1, D=16, extra=True):
    g = _gen(seed)
    q, k, v = (torch.randn(*s, generator=g).half() for s in ((cu_q[-1], HQ, D), (cu_k[-1], H, D), (cu_k[-1], H, D)))
    return q, k, v, peer_refs.random_blocks(cu_q, cu_k, H, S, BS, g, extra=extra)


@pytest.mark.interp
@INTERP_ONLY
@pytest.mark.parametrize("seed", [0])
@pytest.mark.usefixtures("every_row_through_triton")
def test_interp_packed_forward_and_backward(seed):
    from nsa_triton_sel.interop.fla import parallel_nsa

    cu = [0, 3, 3, 21]  # shorter than a block, empty, a partial last block
    q, k, v, idx = _fp16_case(seed, cu, cu)
    ours = [x.clone().requires_grad_() for x in (q, k, v)]
    out = parallel_nsa(*(x[None] for x in ours), idx[None], None, BS, cu_seqlens=torch.tensor(cu))[0]
    ref = [x.double().requires_grad_() for x in (q, k, v)]
    want = peer_refs.fla(*ref, idx, None, BS, cu, cu)
    assert (out.double() - want).abs().max() < 4e-3
    go = torch.randn(out.shape, generator=_gen(1)).half()
    out.backward(go)
    want.backward(go.double())
    for name, a, b in zip("qkv", ours, ref):
        err = (a.grad.double() - b.grad).abs().max()
        assert err < 1e-2 * max(1.0, b.grad.abs().max()), f"d{name}: {err}"


@pytest.mark.interp
@INTERP_ONLY
@pytest.mark.usefixtures("every_row_through_triton")
def test_interp_packed_decode_takes_the_decode_kernel():
    from nsa_triton_sel.kernels import launch

    cu_q, cu_k = [0, 1, 2], [0, 200, 450]
    q, k, v, idx = _fp16_case(3, cu_q, cu_k, S=4, extra=False)
    calls = []
    orig = launch.launch

    def spy(p, q5, *a, **kw):
        calls.append((p.kernel, tuple(q5.shape[:2])))  # the kernel and (B, S) of the launch
        return orig(p, q5, *a, **kw)

    launch.launch = spy
    try:
        out = selection_attention(q, k, v, block_indices=idx, block_size=BS, cu_seqlens_q=torch.tensor(cu_q),
                                  cu_seqlens_k=torch.tensor(cu_k))
    finally:
        launch.launch = orig
    assert (out.double() - peer_refs.fla(q, k, v, idx, None, BS, cu_q, cu_k)).abs().max() < 4e-3
    assert calls == [("decode", (2, 1))], f"launches: {calls}; expected one row per batch entry (the packed rows as a batch)"


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_one_sequence_equals_the_unpacked_call_and_huge_positions_clamp(dtype):
    q, k, v = _packed()
    idx = torch.tensor([0, 2, -1]).expand(CU[-1], 2, 3)
    kw = dict(block_indices=idx, block_size=BS, backend="oracle")
    cu = torch.tensor([0, CU[-1]], dtype=dtype)
    assert torch.equal(selection_attention(q, k, v, cu_seqlens=cu, **kw), selection_attention(q, k, v, **kw))
    pos = torch.full((CU[-1],), 2**62)  # past the sequence: clamped to its end, without overflow
    assert torch.equal(selection_attention(q, k, v, cu_seqlens=cu, positions=pos, **kw),
                       selection_attention(q, k, v, positions=pos, **kw))


@pytest.mark.interp
@INTERP_ONLY
def test_packed_call_traces_in_one_graph():
    """No host sync and no graph break: torch.compile(fullgraph=True) traces a packed call (dynamo only)."""
    cu_q, cu_k = [0, 1, 2], [0, 20, 45]  # decode: one query per sequence, the decode view inside the graph
    q, k, v, idx = _fp16_case(5, cu_q, cu_k, extra=False)

    def f(q, k, v, idx, cu_q, cu_k):
        return selection_attention(q, k, v, block_indices=idx, block_size=BS, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                   backend="triton")

    torch._dynamo.reset()
    args = (q, k, v, idx, torch.tensor(cu_q), torch.tensor(cu_k))
    got = torch.compile(f, backend="eager", fullgraph=True)(*args)
    assert (got.double() - peer_refs.fla(q, k, v, idx, None, BS, cu_q, cu_k)).abs().max() < 4e-3


def test_unvalidated_bad_cu_seqlens_stay_inside_the_keys():
    """cu_seqlens past the keys (not validated): every range stays within [0, T], so the packed-SDPA path,
    which gathers by index, cannot index out of bounds."""
    q, k, v = _packed()
    idx = torch.tensor([0, 1, -1]).expand(CU[-1], 2, 3)
    out = selection_attention(q, k, v, block_indices=idx, block_size=BS, cu_seqlens_q=torch.tensor([0, 40, 83]),
                              cu_seqlens_k=torch.tensor([0, 200, 283]), backend="sdpa", validate=False)
    assert out.shape == q.shape and not out.isnan().any()


@pytest.mark.parametrize("cu", [[0, 5, 5, 45, 83], [0, 83], [0, 0, 83], [0, 40, 200], [-7, 3, 83], [0, 90, 50, 83]])
def test_the_sequence_of_every_row_without_searchsorted(cu):
    """Each packed row's sequence without searchsorted (Inductor's searchsorted over cu_seqlens[1:-1] drops the
    slice's offset on the GPU): the number of inner boundaries <= the row, whatever the values (clamped into
    [0, N))."""
    from nsa_triton_sel.arguments.layouts import sequence_of_rows

    S = 83
    got = sequence_of_rows(torch.tensor(cu), S).tolist()
    want = [sum(1 for b in cu[1:-1] if b <= row) for row in range(S)]
    assert got == want
