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


def nsa_block_indices(B: int, S: int, G: int, T: int, bs: int, topn: int, pattern: str,
                      gen: torch.Generator, positions: torch.Tensor | None = None) -> torch.Tensor:
    """Selected blocks ``[B, S, G, topn]`` int64 (-1 = none) of the canonical NSA setting,
    built on ``gen``'s device.

    Query s sits at ``positions[s]`` (default s) and may pick only blocks that start at or
    before it.  ``random``: topn distinct random blocks among those; ``local``: the topn
    most recent ones (tokens of one block share their selection, as real NSA selections
    mostly do).  Early queries with fewer than topn candidates get -1 padding.
    """
    dev = gen.device
    pos = torch.arange(S, device=dev) if positions is None else positions.to(dev, torch.int64)
    nb = -(-T // bs)
    k = min(topn, nb)
    blk = torch.arange(nb, device=dev).view(1, 1, 1, nb)
    out = []
    step = max(1, (1 << 26) // max(1, B * G * nb))  # bound the score buffer to ~256 MB
    for s0 in range(0, S, step):
        p = pos[s0:s0 + step]
        ok = blk <= (p // bs).view(1, -1, 1, 1)  # blocks starting at or before the query
        if pattern == "random":
            score = torch.rand(B, len(p), G, nb, generator=gen, device=dev)
        elif pattern == "local":
            score = blk.expand(B, len(p), G, nb).to(torch.float32)
        else:
            raise ValueError(f"pattern must be 'random' or 'local', got {pattern!r}")
        top = score.masked_fill(~ok, float("-inf")).topk(k, dim=-1)
        out.append(torch.where(torch.isinf(top.values), torch.full_like(top.indices, -1), top.indices))
    idx = torch.cat(out, 1)
    if k < topn:
        idx = torch.cat([idx, torch.full((B, S, G, topn - k), -1, dtype=idx.dtype, device=dev)], -1)
    return idx


def nsa_problem(T: int, *, B: int = 1, S: int | None = None, G: int = 4, h: int = 16, D: int = 128,
                bs: int = 64, topn: int = 16, pattern: str = "random", dtype=torch.bfloat16,
                device="cuda", seed: int = 0) -> dict:
    """Inputs of the canonical NSA selection call, generated on ``device`` (prefill: S = T
    queries at positions 0..T-1; decode: S = 1 query at position T-1).

    The one NSA problem builder: the tests, ``bench/`` and ``nsa_ranges`` use it.
    """
    from .contract import block_indices_to_ranges

    dev = torch.device(device)
    gen = torch.Generator(device=dev).manual_seed(seed)
    S = T if S is None else S
    positions = torch.arange(T - S, T, device=dev)
    blocks = nsa_block_indices(B, S, G, T, bs, topn, pattern, gen, positions)
    ranges = block_indices_to_ranges(blocks, bs, T, positions.view(1, S).expand(B, S).contiguous())

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=dev, dtype=torch.float32).to(dtype)

    q, k, v = randn(B, S, G, h, D), randn(B, G, T, D), randn(B, G, T, D)
    lens = (ranges[..., 1] - ranges[..., 0]).clamp_min(0).sum(-1)  # keys per (b, s, g)
    return {"q": q, "k": k, "v": v, "ranges": ranges, "blocks": blocks, "positions": positions,
            "keys": int(lens.sum()), "B": B, "S": S, "G": G, "h": h, "D": D, "T": T, "bs": bs,
            "topn": topn, "pattern": pattern}


def nsa_ranges(B, T, G, n, block, *, seed=0, local=True, device="cpu"):
    """NSA-like selections for the S = T tokens of a sequence: ``[B, T, G, n, 2]`` int32 ranges.

    :func:`nsa_block_indices` with ``local`` (the n most recent blocks: neighbouring tokens share
    them) or random picks, causally clamped to ``t + 1``.
    """
    from .contract import block_indices_to_ranges

    gen = torch.Generator().manual_seed(int(seed))
    idx = nsa_block_indices(B, T, G, T, block, n, "local" if local else "random", gen)
    return block_indices_to_ranges(idx, block, T).to(device)
