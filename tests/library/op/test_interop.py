"""The drop-ins (``nsa_triton_sel.interop``) against float64 references written from the peers'
documented semantics (``peer_refs``), on the CPU: fla-core 0.6.0 ``parallel_nsa`` and XunhaoLai's
``topk_sparse_attention``.  Packed sequences shorter than one block and empty ones, tokens whose
selection is all padding, ``block_counts`` below the index width, decode against a long packed cache,
and varlen gradients (XunhaoLai #27) against float64 autograd.  On the CPU the drop-ins take the
packed-SDPA path (float32); ``test_interop_interp`` runs the same through the Triton kernels
(interpreter), ``test_interop_gpu`` against the peers themselves."""

from __future__ import annotations

import pytest
import torch

import peer_refs
from nsa_triton_sel.interop.fla import parallel_nsa
from nsa_triton_sel.interop.xunhaolai import topk_sparse_attention

CU = [0, 5, 5, 45, 83]  # a sequence shorter than one block, an empty one, partial last blocks
BS = 16


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _qkv(Tq, Tk, HQ=4, H=2, D=8, Dv=None, seed=0, dtype=torch.float32):
    g = _gen(seed)
    return (torch.randn(Tq, HQ, D, generator=g).to(dtype), torch.randn(Tk, H, D, generator=g).to(dtype),
            torch.randn(Tk, H, Dv or D, generator=g).to(dtype))


def _close(got, ref, atol=2e-5):
    err = (got.double() - ref).abs().max().item()
    assert err <= atol, f"max abs error {err:.3e} > {atol:.1e}"


def _fla_call(q, k, v, idx, counts, cu_q, cu_k=None, **kw):
    cu = torch.tensor(cu_q) if cu_k is None else (torch.tensor(cu_q), torch.tensor(cu_k))
    return parallel_nsa(q[None], k[None], v[None], idx[None], counts, BS, cu_seqlens=cu, **kw)[0]


@pytest.mark.parametrize("counts", ["none", "int", "tensor"])
def test_fla_packed_forward(counts):
    q, k, v = _qkv(CU[-1], CU[-1], Dv=12)
    idx = peer_refs.random_blocks(CU, CU, 2, 3, BS, _gen(1))
    bc = {"none": None, "int": 2, "tensor": torch.randint(0, 5, (CU[-1], 2), generator=_gen(2))}[counts]
    out = _fla_call(q, k, v, idx, bc[None] if counts == "tensor" else bc, CU)
    assert out.shape == (CU[-1], 4, 12)
    _close(out, peer_refs.fla(q, k, v, idx, bc, BS, CU, CU))


def test_fla_all_padding_token_is_zero():
    q, k, v = _qkv(CU[-1], CU[-1])
    idx = peer_refs.random_blocks(CU, CU, 2, 3, BS, _gen(1))
    idx[7] = torch.tensor([-1, 50, -3])  # all padding: none, past the sequence, negative
    bc = torch.full((1, CU[-1], 2), 3)
    bc[0, 9] = 0  # a count of 0: no slot used
    out = _fla_call(q, k, v, idx, bc, CU)
    assert torch.equal(out[7], torch.zeros_like(out[7])) and torch.equal(out[9], torch.zeros_like(out[9]))
    _close(out, peer_refs.fla(q, k, v, idx, bc[0], BS, CU, CU))


def test_fla_block_counts_int_below_width_ignores_the_later_slots():
    q, k, v = _qkv(CU[-1], CU[-1])
    idx = peer_refs.random_blocks(CU, CU, 2, 4, BS, _gen(3), extra=False)
    got = _fla_call(q, k, v, idx, 2, CU)
    assert torch.equal(got, _fla_call(q, k, v, idx[..., :2].contiguous(), None, CU))
    assert not torch.allclose(got, _fla_call(q, k, v, idx, None, CU))


def test_fla_fixed_length_batch_and_cached_queries():
    g = _gen(4)
    B, TQ, TK = 2, 6, 40  # TQ < TK: the queries are the last TQ tokens (positions TK - TQ + i)
    q, k, v = torch.randn(B, TQ, 4, 8, generator=g), torch.randn(B, TK, 2, 8, generator=g), torch.randn(B, TK, 2, 8,
                                                                                                          generator=g)
    cu_q, cu_k = [0, TQ, 2 * TQ], [0, TK, 2 * TK]
    idx = peer_refs.random_blocks(cu_q, cu_k, 2, 3, BS, g).view(B, TQ, 2, 3)
    out = parallel_nsa(q, k, v, idx, None, BS)
    ref = peer_refs.fla(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), idx.flatten(0, 1), None, BS, cu_q, cu_k)
    _close(out.flatten(0, 1), ref)


def test_fla_decode_against_a_long_packed_cache():
    cu_q, cu_k = [0, 1, 2, 3], [0, 300, 301, 1000]  # one query per sequence, the last token of each
    q, k, v = _qkv(3, cu_k[-1], HQ=8, H=2, seed=5)
    idx = peer_refs.random_blocks(cu_q, cu_k, 2, 6, BS, _gen(6))
    out = _fla_call(q, k, v, idx, None, cu_q, cu_k)
    _close(out, peer_refs.fla(q, k, v, idx, None, BS, cu_q, cu_k))


def test_fla_packed_gradients_match_float64_autograd():
    q, k, v = _qkv(CU[-1], CU[-1], seed=7)
    idx = peer_refs.random_blocks(CU, CU, 2, 3, BS, _gen(8))
    go = torch.randn(CU[-1], 4, 8, generator=_gen(9))
    ours = [x.clone().requires_grad_() for x in (q, k, v)]
    _fla_call(*ours, idx, 2, CU).backward(go)
    ref = [x.double().requires_grad_() for x in (q, k, v)]
    peer_refs.fla(*ref, idx, 2, BS, CU, CU).backward(go.double())
    for name, a, b in zip("qkv", ours, ref):
        assert (a.grad.double() - b.grad).abs().max() <= 2e-5, f"d{name}"


def test_fla_repeated_block_raises():
    q, k, v = _qkv(CU[-1], CU[-1])
    idx = torch.full((CU[-1], 2, 3), -1)
    idx[50, 1] = torch.tensor([0, 1, 1])
    with pytest.raises(ValueError, match=r"block_indices\[b=0, t=50, h=1\] \(sequence 3, position 5\).*repeats"):
        _fla_call(q, k, v, idx, None, CU)


def test_xunhaolai_packed_forward_and_gradients():
    cu = torch.tensor(CU, dtype=torch.int32)
    q, k, v = _qkv(CU[-1], CU[-1], seed=10)
    topk = peer_refs.random_blocks(CU, CU, 2, 3, BS, _gen(11)).to(torch.int32).permute(1, 0, 2).contiguous()
    ours = [x.clone().requires_grad_() for x in (q, k, v)]
    out = topk_sparse_attention(*ours, topk, BS, cu, softmax_scale=0.3)
    ref = [x.double().requires_grad_() for x in (q, k, v)]
    want = peer_refs.xunhaolai(*ref, topk, BS, CU, scale=0.3)
    _close(out, want)
    go = torch.randn(out.shape, generator=_gen(12))
    out.backward(go)
    want.backward(go.double())
    for name, a, b in zip("qkv", ours, ref):
        assert (a.grad.double() - b.grad).abs().max() <= 2e-5, f"d{name}"


def test_xunhaolai_all_padding_and_short_sequences():
    cu = torch.tensor([0, 3, 20], dtype=torch.int32)
    q, k, v = _qkv(20, 20, HQ=2, H=1)
    topk = torch.full((1, 20, 2), -1, dtype=torch.int32)
    topk[0, :3, 0] = 0  # the 3-token sequence: its one (partial) block
    topk[0, 3:, 0] = torch.tensor([0] * 16 + [1])  # position 16 of sequence 1 may see block 1
    topk[0, 5, :] = -1  # all padding
    out = topk_sparse_attention(q, k, v, topk, BS, cu)
    assert torch.equal(out[5], torch.zeros_like(out[5]))
    _close(out, peer_refs.xunhaolai(q, k, v, topk, BS, cu.tolist()))
