"""The drop-ins against the peers themselves on a GPU: fla-core 0.6.0 ``parallel_nsa`` and XunhaoLai's
``topk_sparse_attention``, forward and gradients, packed batches included; each prints its max errors
(run with ``-s``).  Skipped without CUDA (conftest) and, with the reason, where a peer does not import.

The peers are never committed: put them on ``sys.path`` or name their folder in ``NSA_BENCH_PEERS``
(subfolders ``fla_core``, ``xunhaolai``, ``einops_pkg`` or the folder itself, as ``bench/``'s contender
tables): ``pip download fla-core==0.6.0 --no-deps`` unpacked, and XunhaoLai's repository root.

Both sides get the same bf16 inputs; the reference is packed SDPA in float32 on the float32 copies
(``backend="reference"``).  Ours must be within 2x the peer's error of that reference (floor 1e-2).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from nsa_triton_sel import selection_attention
from nsa_triton_sel.interop.fla import parallel_nsa
from nsa_triton_sel.interop.xunhaolai import topk_sparse_attention

pytestmark = pytest.mark.gpu

for _sub in ("einops_pkg", "fla_core", "xunhaolai", ""):
    if os.environ.get("NSA_BENCH_PEERS") and Path(os.environ["NSA_BENCH_PEERS"], _sub).is_dir():
        sys.path.insert(0, str(Path(os.environ["NSA_BENCH_PEERS"], _sub)))


def _peer(name: str):
    mod = {"fla": "fla.ops.nsa.parallel", "xunhaolai": "native_sparse_attention.ops.triton.topk_sparse_attention"}[name]
    try:
        module = __import__(mod, fromlist=["x"])
    except Exception as exc:  # noqa: BLE001 - any import failure is the reason to skip
        pytest.skip(f"{name} does not import ({type(exc).__name__}: {exc}); see this module's docstring")
    if name == "xunhaolai":
        import triton
        from packaging.version import Version

        if Version(triton.__version__).release >= (3, 9):
            pytest.skip(f"XunhaoLai's kernels use block pointers, which Triton {triton.__version__} removed")
    return module


def _blocks(cu_q, cu_k, H, n, bs, gen, counts=False):
    """``[Tq, H, n]`` distinct blocks each query may see (block 0 always: no all-padding row, where the
    peers give NaN), best first and -1 on the right (XunhaoLai's order); with ``counts`` a ``[Tq, H]``
    count in ``[1, n]``."""
    dev = gen.device
    rows = []
    for i in range(len(cu_q) - 1):
        len_q, len_k = int(cu_q[i + 1] - cu_q[i]), int(cu_k[i + 1] - cu_k[i])
        nb = -(-len_k // bs)
        pos = torch.arange(len_k - len_q, len_k, device=dev)
        score = torch.rand(len_q, H, nb, generator=gen, device=dev)
        score[..., 0] = 2.0
        blk = torch.arange(nb, device=dev)
        score = score.masked_fill(blk > (pos // bs)[:, None, None], -1.0)
        top = score.topk(min(n, nb), dim=-1)
        idx = torch.where(top.values < 0, -1, top.indices)
        rows.append(torch.nn.functional.pad(idx, (0, n - idx.shape[-1]), value=-1))
    idx = torch.cat(rows)
    if not counts:
        return idx
    return idx, torch.randint(1, n + 1, idx.shape[:2], generator=gen, device=dev)


def _inputs(Tq, Tk, HQ, H, D, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(*s, generator=gen, device="cuda").bfloat16() for s in ((Tq, HQ, D), (Tk, H, D), (Tk, H, D)))
    return q, k, v, gen


def _grads(fn, q, k, v, go):
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    out = fn(*leaves)
    out.backward(go.to(out.dtype))
    return out.detach().float(), [x.grad.float() for x in leaves]


def _compare(what, ours, peer, ref):
    """Print and check the max abs errors of ours and the peer against the float32 reference."""
    for name, a, b, r in zip(("out", "dq", "dk", "dv"), ours, peer, ref):
        e_ours, e_peer = (a - r).abs().max().item(), (b - r).abs().max().item()
        diff = (a - b).abs().max().item()
        print(f"{what} {name}: max abs err ours {e_ours:.3e}, peer {e_peer:.3e}; ours - peer {diff:.3e}")
        assert e_ours <= max(2 * e_peer, 1e-2), f"{what} {name}: ours {e_ours:.3e} vs peer {e_peer:.3e}"


def _triple(fn, q, k, v, go):
    out, grads = _grads(fn, q, k, v, go)
    return [out] + grads


CU = [0, 1000, 1030, 3000, 4096]  # 30 tokens: shorter than one block of 64


def test_fla_packed_forward_and_gradients_match_fla():
    fla = _peer("fla")
    q, k, v, gen = _inputs(CU[-1], CU[-1], 64, 4, 128)
    cu = torch.tensor(CU, device="cuda")
    idx, counts = _blocks(cu, cu, 4, 16, 64, gen, counts=True)
    go = torch.randn(CU[-1], 64, 128, generator=gen, device="cuda")
    args = lambda q, k, v: (q[None], k[None], v[None], idx[None], counts[None])  # noqa: E731
    ours = _triple(lambda *x: parallel_nsa(*args(*x), 64, cu_seqlens=cu)[0], q, k, v, go)
    peer = _triple(lambda *x: fla.parallel_nsa(*args(*x)[:3], block_indices=idx[None], block_counts=counts[None],
                                               block_size=64, cu_seqlens=cu)[0], q, k, v, go)
    used = torch.where(torch.arange(16, device="cuda") < counts[..., None], idx, -1)
    ref = _triple(lambda *x: selection_attention(*(y.float() for y in x), block_indices=used, block_size=64,
                                                 cu_seqlens=cu, backend="reference"), q, k, v, go)
    _compare("fla packed", ours, peer, ref)


def test_fla_fixed_length_forward_and_gradients_match_fla():
    fla = _peer("fla")
    B, T = 2, 2048
    q, k, v, gen = _inputs(B * T, B * T, 64, 4, 128, seed=1)
    cu = torch.arange(0, B * T + 1, T, device="cuda")
    idx = _blocks(cu, cu, 4, 16, 64, gen).view(B, T, 4, 16)
    go = torch.randn(B, T, 64, 128, generator=gen, device="cuda")
    shape = lambda x: x.view(B, T, *x.shape[1:])  # noqa: E731
    ours = _triple(lambda *x: parallel_nsa(*map(shape, x), idx, 16, 64), q, k, v, go)
    peer = _triple(lambda *x: fla.parallel_nsa(*map(shape, x), block_indices=idx, block_counts=16, block_size=64),
                   q, k, v, go)
    ref = _triple(lambda *x: selection_attention(*(shape(y).float() for y in x), block_indices=idx, block_size=64,
                                                 backend="reference"), q, k, v, go)
    _compare("fla fixed", ours, peer, ref)


def test_fla_decode_against_a_long_packed_cache_matches_fla():
    fla = _peer("fla")
    lens = [32768, 1, 777, 65, 20000]
    cu_k = torch.tensor([0] + lens, device="cuda").cumsum(0)
    cu_q = torch.arange(len(lens) + 1, device="cuda")
    q, k, v, gen = _inputs(len(lens), int(cu_k[-1]), 64, 4, 128, seed=2)
    idx = _blocks(cu_q, cu_k, 4, 16, 64, gen)
    with torch.no_grad():
        ours = parallel_nsa(q[None], k[None], v[None], idx[None], 16, 64, cu_seqlens=(cu_q, cu_k))[0].float()
        peer = fla.parallel_nsa(q[None], k[None], v[None], block_indices=idx[None], block_counts=16, block_size=64,
                                cu_seqlens=(cu_q, cu_k))[0].float()
        ref = selection_attention(q.float(), k.float(), v.float(), block_indices=idx, block_size=64, cu_seqlens_q=cu_q,
                                  cu_seqlens_k=cu_k, backend="reference")
    e_ours, e_peer = (ours - ref).abs().max().item(), (peer - ref).abs().max().item()
    print(f"fla decode out: max abs err ours {e_ours:.3e}, peer {e_peer:.3e}; ours - peer "
          f"{(ours - peer).abs().max().item():.3e}")
    assert e_ours <= max(2 * e_peer, 1e-2)


def test_xunhaolai_packed_forward_and_gradients_match_xunhaolai():
    xl = _peer("xunhaolai")
    q, k, v, gen = _inputs(CU[-1], CU[-1], 64, 4, 128, seed=3)
    cu = torch.tensor(CU, device="cuda", dtype=torch.int32)
    topk = _blocks(cu, cu, 4, 16, 64, gen).to(torch.int32).permute(1, 0, 2).contiguous()
    go = torch.randn(CU[-1], 64, 128, generator=gen, device="cuda")
    ours = _triple(lambda *x: topk_sparse_attention(*x, topk, 64, cu), q, k, v, go)
    peer = _triple(lambda *x: xl.topk_sparse_attention(*x, topk, 64, cu), q, k, v, go)
    ref = _triple(lambda *x: selection_attention(*(y.float() for y in x), block_indices=topk.permute(1, 0, 2),
                                                 block_size=64, cu_seqlens=cu, backend="reference"), q, k, v, go)
    _compare("xunhaolai packed", ours, peer, ref)


def test_packed_equals_fixed_and_never_syncs():
    B, T = 4, 2048
    q, k, v, gen = _inputs(B * T, B * T, 64, 4, 128, seed=4)
    cu = torch.arange(0, B * T + 1, T, device="cuda", dtype=torch.int32)
    idx = _blocks(cu, cu, 4, 16, 64, gen)
    fixed = selection_attention(q.view(B, T, 64, 128), k.view(B, T, 4, 128), v.view(B, T, 4, 128),
                                block_indices=idx.view(B, T, 4, 16), block_size=64)
    packed = selection_attention(q, k, v, block_indices=idx, block_size=64, cu_seqlens=cu)
    diff = (fixed.reshape(packed.shape).float() - packed.float()).abs().max().item()
    print(f"packed vs fixed: max abs diff {diff:.3e}")
    assert diff <= 1e-2
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        selection_attention(q, k, v, block_indices=idx, block_size=64, cu_seqlens=cu, validate=False)
    finally:
        torch.cuda.set_sync_debug_mode(0)


def test_cached_rows_follow_in_place_changes_of_cu_seqlens():
    q, k, v, gen = _inputs(4096, 4096, 64, 4, 128, seed=5)
    cu = torch.tensor([0, 1000, 4096], device="cuda")
    idx = _blocks(torch.tensor([0, 1000, 2000, 4096], device="cuda"), torch.tensor([0, 1000, 2000, 4096],
                                                                                  device="cuda"), 4, 16, 64, gen)
    first = selection_attention(q, k, v, block_indices=idx, block_size=64, cu_seqlens=cu, validate=False)
    cu.copy_(torch.tensor([0, 2000, 4096], device="cuda"))  # same tensor, new values
    again = selection_attention(q, k, v, block_indices=idx, block_size=64, cu_seqlens=cu, validate=False)
    fresh = selection_attention(q, k, v, block_indices=idx, block_size=64, cu_seqlens=cu.clone(), validate=False)
    assert torch.equal(again, fresh) and not torch.equal(first, again)
