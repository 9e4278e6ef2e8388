"""Float64 references of the peers' selection semantics, written from their documentation (no peer code).

``fla``: fla-core 0.6.0 ``parallel_nsa`` (selection branch); ``xunhaolai``: XunhaoLai's
``topk_sparse_attention``.  Both: block ``i`` is keys ``[i * bs, (i + 1) * bs)`` of the query's own
sequence, a query at position ``t`` sees keys ``<= t`` only, negative and future blocks are ignored,
GQA maps query head ``j`` to key/value head ``j // (HQ // H)``.  A token with no key gets zeros (our
definition; the peers give NaN or garbage there).  Differentiable (float64 autograd is the gradient
reference).
"""

from __future__ import annotations

import math

import torch


def attend(q, k, v, keys_of, scale=None):
    """``out [Tq, HQ, Dv]`` (float64): row ``(t, j)`` attends to ``keys_of(t, j // (HQ // H))``."""
    q, k, v = (x.to(torch.float64) for x in (q, k, v))
    Tq, HQ, D = q.shape
    H = k.shape[1]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    rows = []
    for t in range(Tq):
        for j in range(HQ):
            keys = keys_of(t, j // (HQ // H))
            if not keys:
                rows.append(q.new_zeros(v.shape[-1]))
                continue
            sel = torch.tensor(keys)
            p = torch.softmax(scale * (k[sel, j // (HQ // H)] @ q[t, j]), 0)
            rows.append(p @ v[sel, j // (HQ // H)])
    return torch.stack(rows).reshape(Tq, HQ, v.shape[-1])


def _seq_of(t: int, cu: list) -> int:
    return max(i for i in range(len(cu) - 1) if cu[i] <= t and cu[i + 1] > t)


def _block_keys(blocks, bos: int, pos: int, bs: int) -> list:
    keys = []
    for b in blocks:
        if b < 0 or b * bs > pos:
            continue
        keys += [bos + b * bs + o for o in range(bs) if b * bs + o <= pos]
    return keys


def fla(q, k, v, block_indices, block_counts, bs, cu_q, cu_k, scale=None):
    """fla's parallel_nsa on packed ``q [Tq, HQ, K]``, ``k/v [Tk, H, *]``, ``block_indices [Tq, H, S]``;
    ``block_counts`` None, an int or ``[Tq, H]`` (the leading slots used); queries are the last tokens."""
    idx, cq, ck = block_indices.tolist(), list(map(int, cu_q)), list(map(int, cu_k))
    S = block_indices.shape[-1]
    counts = block_counts.tolist() if isinstance(block_counts, torch.Tensor) else None

    def keys_of(t, h):
        i = _seq_of(t, cq)
        pos = (ck[i + 1] - ck[i]) - (cq[i + 1] - cq[i]) + (t - cq[i])
        n = S if block_counts is None else counts[t][h] if counts is not None else block_counts
        return _block_keys(idx[t][h][:max(0, min(n, S))], ck[i], pos, bs)

    return attend(q, k, v, keys_of, scale)


def xunhaolai(q, k, v, topk_idx, bs, cu, scale=None):
    """XunhaoLai's topk_sparse_attention: ``q [T, HQ, D]``, ``k/v [T, H, D]``, ``topk_idx [H, T, k]``."""
    idx, c = topk_idx.tolist(), list(map(int, cu))

    def keys_of(t, h):
        i = _seq_of(t, c)
        return _block_keys(idx[h][t], c[i], t - c[i], bs)

    return attend(q, k, v, keys_of, scale)


def random_blocks(cu_q, cu_k, H: int, S: int, bs: int, gen, *, extra: bool = True):
    """``[Tq, H, S]`` int64 distinct blocks per row among those its query may see, -1 padded, in random
    slots; with ``extra``, some slots hold what the peers ignore (future blocks, blocks past the
    sequence, negative values other than -1)."""
    cq, ck = list(map(int, cu_q)), list(map(int, cu_k))
    out = torch.full((cq[-1], H, S), -1, dtype=torch.int64)
    for i in range(len(cq) - 1):
        len_q, len_k = cq[i + 1] - cq[i], ck[i + 1] - ck[i]
        for t in range(len_q):
            pos = len_k - len_q + t
            for h in range(H):
                seen = torch.randperm(pos // bs + 1, generator=gen)[: int(torch.randint(0, S + 1, (1,), generator=gen))]
                row = seen.tolist() + [-1] * (S - len(seen))
                if extra and len(seen) < S:
                    row[-1] = int(torch.randint(pos // bs + 1, pos // bs + 40, (1,), generator=gen))
                    if len(seen) < S - 1:
                        row[-2] = -7
                perm = torch.randperm(S, generator=gen).tolist()
                out[cq[i] + t, h] = torch.tensor([row[p] for p in perm])
    return out
