"""Random NSA selection problems for tests and benchmarks.

Every generator takes a ``torch.Generator`` (or a seed) so failures reproduce, and
builds ranges that obey the contract: disjoint ``[start, end)`` spans inside ``[0, T)``,
padding as ``start == end``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Problem:
    q: torch.Tensor  # [B, S, G, h, Dk]
    k: torch.Tensor  # [B, G, T, Dk]
    v: torch.Tensor  # [B, G, T, Dv]
    ranges: torch.Tensor  # [B, S, G, n, 2] int32


def _gen(seed) -> torch.Generator:
    if isinstance(seed, torch.Generator):
        return seed
    g = torch.Generator()
    g.manual_seed(int(seed))
    return g


def random_ranges(B, S, G, n, T, *, gen, max_len=None, empty_frac=0.0, pad_frac=0.25):
    """Disjoint random spans per row: ``[B, S, G, n, 2]`` int32.

    Each row cuts ``[0, T)`` at ``2n`` sorted random points and keeps every other gap,
    so spans never overlap and lengths vary (1 .. T).  ``pad_frac`` of the slots become
    padding (start == end), ``empty_frac`` of the rows have no key at all.  The slots
    are shuffled so spans do not come sorted.  ``max_len`` caps each span's length.
    """
    cuts = torch.rand(B, S, G, 2 * n, generator=gen).mul(T + 1).floor().clamp(max=T).to(torch.int64)
    cuts = cuts.sort(dim=-1).values
    start, end = cuts[..., 0::2], cuts[..., 1::2]
    if max_len is not None:
        end = torch.minimum(end, start + max_len)
    pad = torch.rand(B, S, G, n, generator=gen) < pad_frac
    empty = (torch.rand(B, S, G, 1, generator=gen) < empty_frac).expand(B, S, G, n)
    drop = pad | empty
    start = torch.where(drop, end, start)
    perm = torch.rand(B, S, G, n, generator=gen).argsort(dim=-1)
    r = torch.stack([start.gather(-1, perm), end.gather(-1, perm)], dim=-1)
    return r.to(torch.int32)


def single_span_ranges(B, S, G, T, L, *, gen, n=1):
    """One span of exactly ``min(L, T)`` keys at a random offset (plus ``n - 1`` padding slots)."""
    L = min(L, T)
    off = (torch.rand(B, S, G, generator=gen) * (T - L + 1)).floor().to(torch.int64)
    r = torch.zeros(B, S, G, n, 2, dtype=torch.int64)
    r[..., 0, 0] = off
    r[..., 0, 1] = off + L
    return r.to(torch.int32)


def make_problem(
    B=1, S=4, G=2, h=4, Dk=64, Dv=64, T=256, n=4, *,
    dtype=torch.float16, device="cpu", seed=0, ranges="random", L=None, empty_frac=0.1,
    noncontiguous=False,
) -> Problem:
    """A random problem; ``ranges`` is ``"random"`` (multi-span) or ``"single"`` (one span of ``L``)."""
    gen = _gen(seed)
    q = torch.randn(B, S, G, h, Dk, generator=gen)
    k = torch.randn(B, G, T, Dk, generator=gen)
    v = torch.randn(B, G, T, Dv, generator=gen)
    if ranges == "random":
        r = random_ranges(B, S, G, n, T, gen=gen, empty_frac=empty_frac)
    elif ranges == "single":
        r = single_span_ranges(B, S, G, T, L if L is not None else T, gen=gen, n=n)
    else:
        raise ValueError(f"ranges must be 'random' or 'single', got {ranges!r}")
    q, k, v = (x.to(dtype) for x in (q, k, v))
    if noncontiguous:
        # Same values, strided storage: transpose through a buffer with swapped axes.
        q = q.transpose(1, 2).contiguous().transpose(1, 2)
        k = k.transpose(2, 3).contiguous().transpose(2, 3)
        v = v.transpose(1, 2).contiguous().transpose(1, 2)
    dev = torch.device(device)
    return Problem(q.to(dev), k.to(dev), v.to(dev), r.to(dev))


def nsa_ranges(B, T, G, n, block, *, seed=0, local=True, device="cpu"):
    """NSA-like selections for the S = T tokens of a sequence: ``[B, T, G, n, 2]`` int32 ranges.

    Every token selects block 0 and its current block (causally clamped to ``t + 1``) plus
    random earlier blocks; with ``local`` all tokens of one block share their random picks,
    as real NSA selections (smooth compressed scores) mostly do.
    """
    from .contract import block_indices_to_ranges

    g = torch.Generator().manual_seed(int(seed))
    nb = -(-T // block)
    tok_block = torch.arange(T) // block
    if local:
        scores = torch.rand(B, nb, G, nb, generator=g)[:, tok_block]
    else:
        scores = torch.rand(B, T, G, nb, generator=g)
    cur = tok_block[None, :, None, None]
    blk = torch.arange(nb)[None, None, None, :]
    scores = torch.where(blk > cur, -1.0, scores)
    scores = torch.where((blk == 0) | (blk == cur), 2.0, scores)
    top = scores.topk(min(n, nb), dim=-1)
    idx = torch.where(top.values < 0, -1, top.indices).to(torch.int32)
    return block_indices_to_ranges(idx, block, T).to(device)
