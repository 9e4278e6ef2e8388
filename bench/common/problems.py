"""Benchmark problems: span layouts of the seeds' sweeps (few / many / mixed spans, decode) and
the canonical NSA selection (random or local top-n blocks), plus the contenders' adapters
(fla-core's ``parallel_nsa_fwd``, FlexAttention).
"""

from __future__ import annotations

import torch

from .csvio import DISTS


def spans_from_lengths(lens: torch.Tensor, T: int, gen: torch.Generator) -> torch.Tensor:
    """Place spans of lengths ``lens [N, n]`` (0 = padding) disjointly, in order, at random
    offsets of a ``T``-long key sequence; returns int32 ``[N, n, 2]``.

    The free keys (T - L) are split into n + 1 random gaps by sorted uniform cuts, so
    spans are scattered over the whole sequence rather than packed at its start.
    """
    N, n = lens.shape
    L = lens.sum(-1, keepdim=True)
    free = (T - L).clamp_min(0)
    cuts = (torch.rand(N, n, generator=gen) * (free + 1)).floor().clamp(max=free).to(torch.int64)
    cuts = cuts.sort(dim=-1).values  # gap before span j = cuts[j] - cuts[j-1]
    before = torch.cumsum(lens, -1) - lens  # keys of earlier spans
    start = cuts + before
    end = start + lens
    start = torch.where(lens > 0, start, end)  # padding: an empty span
    return torch.stack([start, end], -1).to(torch.int32)


def span_lengths(dist: str, N: int, L: int, gen: torch.Generator, n_max: int = 8) -> torch.Tensor:
    """Span lengths ``[N, slots]`` summing to L per row.

    few: one span of L.  many: 8 equal spans (the first L % 8 get one key more).
    mixed: 2, 4 or 8 spans (random per row) of random positive lengths; unused slots
    of the 8 are padding (length 0).
    """
    if dist == "few":
        return torch.full((N, 1), L, dtype=torch.int64)
    if dist == "many":
        base = torch.full((N, n_max), L // n_max, dtype=torch.int64)
        base[:, : L % n_max] += 1
        return base
    if dist == "mixed":
        choices = torch.tensor([2, 4, 8])
        n_row = choices[torch.randint(0, 3, (N,), generator=gen)].clamp(max=max(1, L))
        lens = torch.zeros(N, n_max, dtype=torch.int64)
        for n in n_row.unique().tolist():
            rows = (n_row == n).nonzero().flatten()
            # n - 1 distinct cut points in 1..L-1 give n positive parts.
            cut = torch.rand(len(rows), L - 1, generator=gen).argsort(-1)[:, : n - 1] + 1
            edges = torch.cat([torch.zeros(len(rows), 1, dtype=torch.int64), cut.sort(-1).values,
                               torch.full((len(rows), 1), L, dtype=torch.int64)], -1)
            lens[rows, :n] = edges.diff(dim=-1)
        return lens
    raise ValueError(f"dist must be one of {DISTS}, got {dist!r}")


def decode_lengths(N: int, L: int, l_sel: int, T: int, gen: torch.Generator) -> torch.Tensor:
    """Decode ranges ``[N, nb, 2]``: ``nb = L / l_sel`` distinct random blocks of ``l_sel`` keys
    among the ``T / l_sel`` blocks of the cache, sorted (adjacent blocks stay separate spans,
    as an unmerged top-n selection would give them)."""
    if L % l_sel:
        raise ValueError(f"decode needs L to be a multiple of l_sel={l_sel}, got L={L}")
    nb, n_blocks = L // l_sel, T // l_sel
    if nb > n_blocks:
        raise ValueError(f"decode: L={L} needs {nb} blocks but T={T} has only {n_blocks}")
    blocks = torch.rand(N, n_blocks, generator=gen).argsort(-1)[:, :nb].sort(-1).values
    start = blocks * l_sel
    return torch.stack([start, start + l_sel], -1).to(torch.int32)


def gather_index(spans: torch.Tensor, L: int) -> torch.Tensor:
    """Key index ``[N, L]`` of every selected key, in span order, for spans ``[N, n, 2]``
    whose lengths sum to exactly L per row."""
    lens = (spans[..., 1] - spans[..., 0]).to(torch.int64)
    cum = lens.cumsum(-1)
    slot = torch.arange(L).expand(spans.shape[0], L)
    j = torch.searchsorted(cum, slot.contiguous(), right=True)
    first = (cum - lens).gather(-1, j)
    return spans[..., 0].to(torch.int64).gather(-1, j) + slot - first


def nsa_problem(T: int, **kw) -> dict:
    """Inputs of the canonical NSA selection call: ``nsa_triton_sel.testing.nsa_problem`` (the one builder)."""
    from nsa_triton_sel.testing import nsa_problem as build

    return build(T, **kw)


def nsa_work(p: dict) -> tuple[int, int]:
    """(effective bytes, FLOPs) of an NSA problem: q, o once; selected K/V once per (token, group)."""
    elem = p["q"].element_size()
    qo = p["B"] * p["S"] * p["G"] * p["h"] * 2 * p["D"] * elem
    kv = p["keys"] * 2 * p["D"] * elem
    return qo + kv, 4 * p["keys"] * p["h"] * p["D"]


def fla_contender(p: dict):
    """A zero-argument callable running fla-core's ``parallel_nsa_fwd`` on ``p``, or raise
    ImportError/TypeError with the reason (signatures differ across fla releases)."""
    import inspect

    from fla.ops.nsa.parallel import parallel_nsa_fwd  # noqa: PLC0415

    B, S, G, h, D, T = p["B"], p["S"], p["G"], p["h"], p["D"], p["T"]
    if S != T:
        raise TypeError("fla parallel_nsa_fwd benchmarks prefill only (S == T)")
    q = p["q"].reshape(B, T, G * h, D).contiguous()
    k = p["k"].transpose(1, 2).contiguous()  # [B, T, G, D]
    v = p["v"].transpose(1, 2).contiguous()
    blocks = p["blocks"]  # [B, S, G, n]
    # fla marks "no block" with an index past the causal limit; its kernel masks those.
    bi = torch.where(blocks < 0, torch.full_like(blocks, T), blocks).to(torch.long).contiguous()
    kw = {"q": q, "k": k, "v": v, "block_indices": bi, "block_counts": p["topn"],
          "block_size": p["bs"], "scale": D ** -0.5, "window_size": 0}
    params = inspect.signature(parallel_nsa_fwd).parameters
    missing = [n for n, prm in params.items() if prm.default is inspect.Parameter.empty and n not in kw]
    if missing:
        raise TypeError(f"unsupported fla parallel_nsa_fwd signature: needs {missing}")
    kw = {n: v for n, v in kw.items() if n in params}
    return lambda: parallel_nsa_fwd(**kw)


def flex_contender(p: dict):
    """FlexAttention on the same selection: the h heads of a group become h query rows per
    token (query index s*h + j), so the block mask is per (b, group); mask = selected
    block and causal.  Returns a zero-argument callable (compiles on first call)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    B, S, G, h, D, T, bs = p["B"], p["S"], p["G"], p["h"], p["D"], p["T"], p["bs"]
    nb = -(-T // bs)
    sel = torch.zeros(B, G, S, nb + 1, dtype=torch.bool, device=p["q"].device)
    blocks = p["blocks"].permute(0, 2, 1, 3)  # [B, G, S, n]
    sel.scatter_(-1, torch.where(blocks < 0, nb, blocks), True)
    sel = sel[..., :nb].contiguous()
    pos = p["positions"]

    def mask_mod(b, g, qi, kv):
        s = qi // h
        return sel[b, g, s, kv // bs] & (kv <= pos[s])

    # _compile=True fuses the mask evaluation: the eager path would materialise
    # [B, G, S*h, T] booleans plus int64 index temporaries (tens of GB at T=4096).
    bm = create_block_mask(mask_mod, B, G, S * h, T, device=p["q"].device, _compile=p["q"].is_cuda)
    q = p["q"].permute(0, 2, 1, 3, 4).reshape(B, G, S * h, D)
    fn = torch.compile(flex_attention, dynamic=False)
    return lambda: fn(q, p["k"], p["v"], block_mask=bm, scale=D ** -0.5)
