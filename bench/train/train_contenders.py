"""Inputs and contenders of the NSA training benchmark (``train_nsa.py``).

One canonical problem (one sequence of T tokens, 64 query heads in 4 groups so h = 16,
D = 128, blocks of 64, top-16 blocks per token: block 0, the two local blocks and the rest
drawn at random; or "local": the tokens of one 64-token chunk share their picks) is built
once, as block indices, and handed to every contender in its own convention:

- ``ours-api``: the public ``selection_attention`` from the block indices on inputs that require
  grad (the operator, its forward kernel and the backward kernels), q ``[B, T, G, h, D]``, k/v
  ``[B, G, T, D]``: the row the targets are judged on;
- ``ours``: the kernels without the dispatcher or the operator (``kernels/direct.py``: the forward kernel,
  then ``sel_attn_backward``) on ``ranges = block_indices_to_ranges(blocks)``, through a bench-local
  autograd function (:class:`KernelsOnly`);
- ``sdpa``: ``reference.packed_sdpa`` (the dispatcher's fallback, differentiable);
- ``fla``: fla-core's ``ParallelNSAFunction`` (q ``[B, T, HQ, D]``, k/v ``[B, T, H, D]``,
  block indices ``[B, T, H, S]`` padded with -1);
- ``xunhaolai``: ``topk_sparse_attention`` (varlen: q ``[total, HQ, D]``, k/v ``[total, H, D]``,
  ``topk_idx [H, total, S]`` int32 whose valid entries must come first, -1 after).

Query head ``g * h + j`` of the peers is head j of group g here.  Every contender's output
gradient is the same ``grad_out``; its input gradients are mapped back to this package's
layout for ``--check``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch

BS, TOPK, G, H_PER_GROUP, D = 64, 16, 4, 16, 128


def select_blocks(T: int, groups: int, *, local: bool, gen: torch.Generator, device, bs: int = BS,
                  topk: int = TOPK) -> torch.Tensor:
    """Top-``topk`` block indices ``[1, T, groups, topk]`` int32 (-1 = none) of tokens 0..T-1.

    Block 0, the token's own block and the one before it are always picked (when they exist
    causally); the other picks are random among earlier blocks, per token (``random``) or
    per 64-token chunk (``local``).
    """
    pos = torch.arange(T, device=device)
    nb = math.ceil(T / bs)
    cur = (pos // bs)[:, None, None]
    if local:
        scores = torch.rand(nb, groups, nb, device=device, generator=gen)[pos // bs]
    else:
        scores = torch.rand(T, groups, nb, device=device, generator=gen)
    blk = torch.arange(nb, device=device)[None, None, :]
    scores = torch.where(blk > cur, float("-inf"), scores)
    forced = (blk == 0) | (blk == cur) | (blk == cur - 1)
    scores = torch.where(forced & (blk <= cur), float("inf"), scores)
    top = scores.topk(min(topk, nb), dim=-1)
    idx = torch.where(torch.isneginf(top.values), -1, top.indices).to(torch.int32)
    if idx.shape[-1] < topk:
        idx = torch.cat([idx, idx.new_full((T, groups, topk - idx.shape[-1]), -1)], -1)
    return idx[None]


@dataclass
class Problem:
    T: int
    sel: str
    q: torch.Tensor       # [1, T, G, h, D]
    k: torch.Tensor       # [1, G, T, D]
    v: torch.Tensor
    grad_out: torch.Tensor
    blocks: torch.Tensor  # [1, T, G, 16] int32
    ranges: torch.Tensor  # [1, T, G, 16, 2] int32
    keys: int             # selected (token, group, key) triples

    @property
    def scale(self) -> float:
        return self.q.shape[-1] ** -0.5

    def flops(self, backward_only: bool = False) -> float:
        """FLOPs counted as dense attention on the selected keys: 2 dots of 2*D per (head, key)
        forward, 5 backward (recomputed scores, dP, dV, dK, dQ)."""
        per = (5 if backward_only else 7) * 2 * self.q.shape[-1]
        return float(self.keys) * self.q.shape[3] * per


def make_problem(T: int, sel: str, *, device="cuda", dtype=torch.bfloat16, seed: int = 0, h: int = H_PER_GROUP,
                 d: int = D, groups: int = G) -> Problem:
    from nsa_triton_sel.contract import block_indices_to_ranges

    gen = torch.Generator(device=device).manual_seed(seed + T + (sel == "local"))
    blocks = select_blocks(T, groups, local=sel == "local", gen=gen, device=device)
    ranges = block_indices_to_ranges(blocks, BS, T, validate=False)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=device).to(dtype)

    keys = int((ranges[..., 1] - ranges[..., 0]).clamp_min(0).sum())
    return Problem(T, sel, randn(1, T, groups, h, d), randn(1, groups, T, d), randn(1, groups, T, d),
                   randn(1, T, groups, h, d),
                   blocks, ranges, keys)


@dataclass
class Contender:
    """One implementation on one problem: ``forward()`` -> output; ``leaves`` need grad."""

    name: str
    leaves: list
    forward: Callable[[], torch.Tensor]
    grad_out: torch.Tensor
    to_ours: Callable = field(default=lambda grads: grads)  # (dq, dk, dv) in this package's layout
    note: str = ""


def _leaf(x):
    return x.detach().clone().requires_grad_()


class KernelsOnly(torch.autograd.Function):
    """The forward kernel (``tokens``: the multi-token one) and ``sel_attn_backward`` with launch overrides: the
    kernels without the dispatcher and the operator, for timing and tuning (the library's own autograd is the
    operator's, ``op.py``)."""

    @staticmethod
    def forward(ctx, q, k, v, ranges, forward, tune):
        from nsa_triton_sel.kernels import direct
        from nsa_triton_sel.plan.backward import dq_tokens_per_program

        fwd = {"ranges": direct.sel_attn_ranges, "tokens": direct.sel_attn_tokens,
               "keymajor": lambda *a, **kw: direct.sel_attn_keymajor(*a, span_len=BS, **kw)}[forward]
        out, lse = fwd(q, k, v, ranges, return_lse=True)
        if forward == "tokens" and "dq_tokens" not in tune:  # the same locality serves the dq kernel
            tune = {**tune, "dq_tokens": dq_tokens_per_program(q.shape[3]) or None}
        ctx.save_for_backward(q, k, v, ranges, out, lse)
        ctx.tune = tune
        return out

    @staticmethod
    def backward(ctx, grad_out):
        from nsa_triton_sel.kernels import direct

        q, k, v, ranges, out, lse = ctx.saved_tensors
        return (*direct.sel_attn_backward(q, k, v, ranges, out, lse, grad_out, **ctx.tune), None, None, None)


def ours(p: Problem, tune: dict | None = None, name: str = "ours", forward: str | None = None) -> Contender:
    """The forward kernel the dispatcher picks for this selection (multi-token for local ones,
    where neighbouring tokens share their blocks; ``forward`` "ranges" or "tokens" forces one) and the
    backward kernels."""
    q, k, v = _leaf(p.q), _leaf(p.k), _leaf(p.v)
    forward = forward or ("tokens" if p.sel == "local" else "ranges")
    tune = dict(tune or {})
    return Contender(name, [q, k, v], lambda: KernelsOnly.apply(q, k, v, p.ranges, forward, tune), p.grad_out,
                     note=" ".join(f"{a}={b}" for a, b in sorted({"forward": forward, **tune}.items())))


def ours_api(p: Problem) -> Contender:
    """What a user gets: ``selection_attention`` from block indices (``validate=False``) on inputs that
    require grad; the operator's autograd runs the backward kernels (``op.backward``)."""
    from nsa_triton_sel import selection_attention

    q, k, v = _leaf(p.q), _leaf(p.k), _leaf(p.v)
    fwd = lambda: selection_attention(q, k, v, block_indices=p.blocks, block_size=BS, validate=False)  # noqa: E731
    return Contender("ours-api", [q, k, v], fwd, p.grad_out, note="selection_attention(block_indices=...)")


def sdpa(p: Problem) -> Contender:
    from nsa_triton_sel import reference

    q, k, v = _leaf(p.q), _leaf(p.k), _leaf(p.v)
    return Contender("sdpa", [q, k, v], lambda: reference.packed_sdpa(q, k, v, p.ranges, validate=False),
                     p.grad_out)


def fla(p: Problem) -> Contender:
    from fla.ops.nsa.parallel import ParallelNSAFunction

    B, T, Gn, h, d = p.q.shape
    q = _leaf(p.q.reshape(B, T, Gn * h, d))
    k, v = _leaf(p.k.transpose(1, 2).contiguous()), _leaf(p.v.transpose(1, 2).contiguous())
    blocks = p.blocks.to(torch.long).contiguous()

    def to_ours(gr):
        return gr[0].reshape(B, T, Gn, h, d), gr[1].transpose(1, 2), gr[2].transpose(1, 2)

    fwd = lambda: ParallelNSAFunction.apply(q, k, v, blocks, TOPK, BS, p.scale, None)  # noqa: E731
    return Contender("fla", [q, k, v], fwd, p.grad_out.reshape(B, T, Gn * h, d), to_ours)


def xunhaolai(p: Problem, name: str = "xunhaolai") -> Contender:
    if name == "fsa":  # FSA's kernel takes XunhaoLai's arguments
        from fsa.ops.FSA_topk_sparse_attention import FSA_topk_sparse_attention as topk_sparse_attention
    else:
        from native_sparse_attention.ops.triton.topk_sparse_attention import topk_sparse_attention

    B, T, Gn, h, d = p.q.shape
    q = _leaf(p.q.reshape(T, Gn * h, d))
    k, v = _leaf(p.k[0].transpose(0, 1).contiguous()), _leaf(p.v[0].transpose(0, 1).contiguous())
    idx = xunhaolai_topk(p.blocks)
    cu = torch.tensor([0, T], dtype=torch.int32, device=p.q.device)

    def to_ours(gr):
        return gr[0].reshape(1, T, Gn, h, d), gr[1].transpose(0, 1)[None], gr[2].transpose(0, 1)[None]

    fwd = lambda: topk_sparse_attention(q, k, v, idx, BS, cu, p.scale)  # noqa: E731
    return Contender(name, [q, k, v], fwd, p.grad_out.reshape(T, Gn * h, d), to_ours)


def fsa(p: Problem) -> Contender:
    """FSA (Flash Sparse Attention, key-block-major for small groups): XunhaoLai's arguments."""
    return xunhaolai(p, name="fsa")


def xunhaolai_topk(blocks: torch.Tensor) -> torch.Tensor:
    """``[1, T, H, S]`` block indices as XunhaoLai's ``topk_idx [H, T, S]`` int32: its kernels walk
    the first "real_topk" entries of a row, so the valid indices come first and -1 last."""
    return blocks[0].permute(1, 0, 2).sort(dim=-1, descending=True).values.to(torch.int32).contiguous()


PEERS = {"fla": fla, "xunhaolai": xunhaolai, "fsa": fsa}


def peer_status(name: str) -> str | None:
    """``None`` when peer ``name`` imports, else the reason it does not."""
    mod = {"fla": "fla.ops.nsa.parallel", "xunhaolai": "native_sparse_attention.ops.triton.topk_sparse_attention",
           "cudnn": "cudnn.native_sparse_attention", "fsa": "fsa.ops.FSA_topk_sparse_attention"}
    try:
        __import__(mod[name])
    except Exception as exc:  # noqa: BLE001 - any import failure is a reason to skip
        return f"{type(exc).__name__}: {exc}"
    if name == "xunhaolai":
        import triton
        from packaging.version import Version

        if Version(triton.__version__).release >= (3, 9):
            return f"its kernels use block pointers, which Triton {triton.__version__} removed (3.9)"
    return None
