"""The user contract's cases: every entry point a user calls, with the float64 oracle of its output, LSE and
gradients (``tests/test_contract_gpu.py`` runs them in every mode).

One problem per entry point (bf16, G = 2 groups of h = 3 query heads, D = 64, blocks of 32, up to 4 causal
blocks per token including its own, fresh random values on every call), in the entry point's own layout.
:func:`oracle` computes the definition in float64 on the GPU (dense scores, keys outside the row's spans
masked), differentiable: the reference for the output, the LSE and the gradients of q, k and v through both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from nsa_triton_sel import selection_attention
from nsa_triton_sel.contract import block_indices_to_ranges

G, H_PER_G, D, BS, TOP = 2, 3, 64, 32, 4
HQ = G * H_PER_G
DEV = "cuda"
DT = torch.bfloat16


def causal_blocks(n_tok: int, positions, gen) -> torch.Tensor:
    """``[n_tok, G, TOP]`` int64 block indices: up to TOP distinct blocks of each token's past, own block
    included, -1 padding (random slots)."""
    out = torch.full((n_tok, G, TOP), -1, dtype=torch.int64)
    for t in range(n_tok):
        nb = int(positions[t]) // BS + 1
        for g in range(G):
            pick = torch.randperm(nb, generator=gen)[:TOP]
            pick = torch.unique(torch.cat([torch.tensor([nb - 1]), pick]))[:TOP]
            out[t, g, :pick.numel()] = pick
            out[t, g] = out[t, g][torch.randperm(TOP, generator=gen)]
    return out


def oracle(q5, k4, v4, ranges, scale=None):
    """Float64 ``(out [B, S, G, h, Dv], lse [B, S, G, h])`` of native views, differentiable; -inf / 0 for an
    empty row."""
    T = k4.shape[2]
    sc = 1.0 / math.sqrt(q5.shape[-1]) if scale is None else scale
    r = ranges.to(torch.int64)
    pos = torch.arange(T, device=q5.device)
    mask = ((pos >= r[..., 0, None]) & (pos < r[..., 1, None])).any(-2)  # [B, S, G, T]
    s = torch.einsum("bsghd,bgtd->bsght", q5, k4) * sc
    s = s.masked_fill(~mask[:, :, :, None, :], float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))[..., None])
    out = torch.einsum("bsght,bgtd->bsghd", p, v4)
    return out, lse


@dataclass
class Case:
    """One entry point's call on fresh inputs: ``call(q, k, v) -> (out, lse or None)`` in its own layout,
    ``native(q, k, v)`` its native views, ``ranges`` the native global ranges, ``out5(out)`` / ``lse4(lse)``
    its outputs as native views."""

    name: str
    make: Callable  # () -> (q, k, v) leaves in the entry's layout
    call: Callable
    native: Callable
    ranges: torch.Tensor
    out5: Callable
    lse4: Callable
    has_lse: bool = True


def _rand(*shape, gen):
    return torch.randn(*shape, generator=gen, device=DEV).to(DT)


def build(name: str, seed: int = 0) -> Case:
    gen = torch.Generator().manual_seed(seed)
    dgen = torch.Generator(device=DEV).manual_seed(seed)
    if name in ("ranges5", "blocks5"):
        B, T = 2, 160
        blocks = torch.stack([causal_blocks(T, torch.arange(T), gen) for _ in range(B)]).to(DEV)  # [B, T, G, n]
        ranges = block_indices_to_ranges(blocks, BS, T)
        make = lambda: (_rand(B, T, G, H_PER_G, D, gen=dgen), _rand(B, G, T, D, gen=dgen),  # noqa: E731
                        _rand(B, G, T, D, gen=dgen))
        if name == "ranges5":
            call = lambda q, k, v: selection_attention(q, k, v, ranges, return_lse=True)  # noqa: E731
        else:
            call = lambda q, k, v: selection_attention(q, k, v, block_indices=blocks, block_size=BS,  # noqa: E731
                                                       return_lse=True)
        return Case(name, make, call, lambda q, k, v: (q, k, v), ranges, lambda o: o, lambda l: l)
    if name == "decode":
        B, T = 4, 300
        pos = torch.tensor([299, 150, 31, 200])
        blocks = torch.stack([causal_blocks(1, pos[b:b + 1], gen) for b in range(B)]).to(DEV)  # [B, 1, G, n]
        positions = pos.view(B, 1).to(DEV)
        ranges = block_indices_to_ranges(blocks, BS, T, positions)
        make = lambda: (_rand(B, 1, G, H_PER_G, D, gen=dgen), _rand(B, G, T, D, gen=dgen),  # noqa: E731
                        _rand(B, G, T, D, gen=dgen))
        call = lambda q, k, v: selection_attention(q, k, v, block_indices=blocks, block_size=BS,  # noqa: E731
                                                   positions=positions, return_lse=True)
        return Case(name, make, call, lambda q, k, v: (q, k, v), ranges, lambda o: o, lambda l: l)
    # the peers' layouts: q [B, T, HQ, D] / [T, HQ, D], k/v [B, T, G, D] / [T, G, D]
    lens = [100, 156]
    cu_list = [0, 100, 256]
    total = cu_list[-1]
    local = torch.cat([torch.arange(n) for n in lens])
    blocks = causal_blocks(total, local, gen).to(DEV)  # [total, G, n], sequence-local
    cu = torch.tensor(cu_list, device=DEV, dtype=torch.int32)
    bos = torch.cat([torch.full((n,), s) for n, s in zip(lens, cu_list)]).to(DEV)
    glob = torch.where(blocks >= 0, blocks * BS + bos[:, None, None], -1)
    start = glob.clamp_min(0)
    end = torch.minimum(start + BS, (bos + local.to(DEV) + 1)[:, None, None])
    rng = torch.where((blocks >= 0)[..., None], torch.stack([start, end], -1), 0)[None]  # [1, total, G, n, 2]
    native3 = lambda q, k, v: (q[None].unflatten(2, (G, H_PER_G)), k[None].permute(0, 2, 1, 3),  # noqa: E731
                               v[None].permute(0, 2, 1, 3))
    make3 = lambda: (_rand(total, HQ, D, gen=dgen), _rand(total, G, D, gen=dgen), _rand(total, G, D, gen=dgen))  # noqa: E731
    out3, lse3 = (lambda o: o[None].unflatten(2, (G, H_PER_G))), (lambda l: l[None].unflatten(2, (G, H_PER_G)))
    if name == "packed":
        call = lambda q, k, v: selection_attention(q, k, v, block_indices=blocks, block_size=BS,  # noqa: E731
                                                   cu_seqlens=cu, return_lse=True)
        return Case(name, make3, call, native3, rng, out3, lse3)
    if name == "xunhaolai":
        from nsa_triton_sel.interop.xunhaolai import topk_sparse_attention

        call = lambda q, k, v: (topk_sparse_attention(q, k, v, blocks.permute(1, 0, 2), BS, cu), None)  # noqa: E731
        return Case(name, make3, call, native3, rng, out3, lse3, has_lse=False)
    if name == "fla":
        from nsa_triton_sel.interop.fla import parallel_nsa

        make4 = lambda: tuple(x[None] for x in make3())  # noqa: E731
        call = lambda q, k, v: (parallel_nsa(q, k, v, blocks[None], block_size=BS, cu_seqlens=cu), None)  # noqa: E731
        return Case(name, make4, call, lambda q, k, v: native3(q[0], k[0], v[0]), rng,
                    lambda o: out3(o[0]), lse3, has_lse=False)
    if name in ("bthd", "thd"):  # one sequence (the first one's tokens), unpacked
        n = lens[1]
        b1 = causal_blocks(n, torch.arange(n), gen).to(DEV)
        r1 = block_indices_to_ranges(b1[None], BS, n)
        make1 = lambda: (_rand(n, HQ, D, gen=dgen), _rand(n, G, D, gen=dgen), _rand(n, G, D, gen=dgen))  # noqa: E731
        if name == "thd":
            call = lambda q, k, v: selection_attention(q, k, v, block_indices=b1, block_size=BS,  # noqa: E731
                                                       return_lse=True)
            return Case(name, make1, call, native3, r1, out3, lse3)
        make4 = lambda: tuple(x[None] for x in make1())  # noqa: E731
        call = lambda q, k, v: selection_attention(q, k, v, block_indices=b1[None], block_size=BS,  # noqa: E731
                                                   return_lse=True)
        return Case(name, make4, call, lambda q, k, v: native3(q[0], k[0], v[0]), r1,
                    lambda o: out3(o[0]), lambda l: lse3(l[0]))
    raise ValueError(name)


ENTRIES = ("ranges5", "blocks5", "decode", "packed", "bthd", "thd", "fla", "xunhaolai")
