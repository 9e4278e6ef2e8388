"""The layouts ``selection_attention`` accepts (one table) and packed batches (``cu_seqlens``) as global ranges.

Every layout becomes the native ``q [B, S, G, h, Dk]``, ``k/v [B, G, T, D]`` through views only (the
kernels accept any strides), told apart by q's rank (:data:`LAYOUTS`):

- 5: the native contract;
- 4: fla / XunhaoLai / FlashAttention's ``q [B, T, HQ, Dk]`` with ``k/v [B, T, H, D]``: ``q.unflatten(2, (H,
  HQ // H))``, ``k.permute(0, 2, 1, 3)``; query head ``j`` reads key/value head ``j // (HQ // H)`` (GQA);
- 3: the same with ``B = 1`` (``[T, HQ, Dk]``, ``[T, H, D]``).

Spans follow q (``block_indices [B, T, H, n]`` / ``[T, H, n]``, ``ranges [..., n, 2]``); out and lse go back
in q's layout.  A new layout is one entry of :data:`LAYOUTS`.

Packed batches: ``cu_seqlens [N + 1]`` (queries and keys packed alike) or ``cu_seqlens_q`` with
``cu_seqlens_k`` (decode, chunked prefill); ``B = 1``.  Block indices and ranges count from each sequence's
first key; positions default to the query's position inside its sequence (with ``cu_seqlens_q !=
cu_seqlens_k`` a sequence's queries are its last ``len_q`` tokens, as fla and FlashAttention's causal
varlen).  :func:`global_ranges` turns the spans into global ranges on the device without a host sync and
clamps every row into its own sequence whatever the values, so no row reads another sequence's keys
(``validate=True`` reports such values: ``values.py``).

Why no ``torch.searchsorted`` over ``cu_seqlens[1:-1]`` to find each row's sequence (the earlier code):
Inductor's CUDA lowering of ``searchsorted`` drops the storage offset of a sliced sequence (torch 2.11,
Triton 3.6: it binary-searched ``cu_seqlens[0:]``), so under ``torch.compile`` every row of a sequence but
the last was given the next sequence's keys, silently; with one sequence (an empty slice) Triton 3.6's
compiler aborts on the generated kernel.  A scatter of the boundaries and a cumulative sum give the same
answer, and lower correctly everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

import torch

from .. import caches
from ..contract import require_tensor


@dataclass(frozen=True)
class Layout:
    """One accepted layout: how its q, k, v and spans become native views, and how out/lse go back."""

    name: str  # q's layout, as error messages show it
    kv: str  # k's and v's layout
    native: Callable | None  # (q, k, v) -> (q5, k4, v4), views; None: already native
    spans: Callable | None  # spans in this layout -> native ([..., n] / [..., n, 2] with the batch dim)
    back: Callable | None  # (out5, lse4 or None) -> this layout's (out, lse)


def _grouped(q, k, v):
    """``q [B, T, HQ, Dk]``, ``k/v [B, T, H, D]`` -> native views (query head j reads kv head j // (HQ // H))."""
    HQ, H = q.shape[2], k.shape[2]
    if H == 0 or HQ % H or v.shape[2] != H:
        raise ValueError(f"q has HQ={HQ} heads, k {H} and v {v.shape[2]}: k and v need the same number H of heads, "
                         f"and H must divide HQ (query head j reads key/value head j // (HQ // H))")
    return q.unflatten(2, (H, HQ // H)), k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)


def _flat_heads(out, lse):
    return out.flatten(2, 3), (None if lse is None else lse.flatten(2, 3))


def _unbatched(out, lse):
    out, lse = _flat_heads(out, lse)
    return out[0], (None if lse is None else lse[0])


NATIVE = Layout("[B, S, G, h, Dk]", "[B, G, T, D]", None, None, None)
LAYOUTS: dict[int, Layout] = {
    5: NATIVE,
    4: Layout("[B, T, HQ, Dk]", "[B, T, H, D]", _grouped, None, _flat_heads),
    3: Layout("[T, HQ, Dk]", "[T, H, D]", lambda q, k, v: _grouped(q[None], k[None], v[None]),
              lambda x: x if x is None else x[None], _unbatched),
}


def layout_of(q, k, v) -> Layout:
    """The layout of this call (told by q's rank), after checking that k and v are in it too."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        require_tensor(name, x)
    lay = LAYOUTS.get(q.dim())
    if lay is None:
        accepted = "; ".join(f"q {x.name} with k/v {x.kv}" for x in LAYOUTS.values())
        raise ValueError(f"q has {q.dim()} dimensions (shape {list(q.shape)}); accepted: {accepted}")
    want = 4 if q.dim() == 5 else q.dim()
    for name, x in (("k", k), ("v", v)):
        if x.dim() != want:
            raise ValueError(f"q is {lay.name} (shape {list(q.shape)}), so {name} must be {lay.kv}; "
                             f"got shape {list(x.shape)}")
    return lay


def cu_pair(cu_seqlens, cu_seqlens_q, cu_seqlens_k, device):
    """``(cu_q, cu_k)`` from the arguments (None, None without packing), checked for structure."""
    if cu_seqlens is not None:
        if cu_seqlens_q is not None or cu_seqlens_k is not None:
            raise ValueError("pass cu_seqlens (queries and keys packed alike) or cu_seqlens_q with cu_seqlens_k, "
                             "not both")
        pair = (("cu_seqlens", cu_seqlens), ("cu_seqlens", cu_seqlens))
    elif (cu_seqlens_q is None) != (cu_seqlens_k is None):
        raise ValueError("cu_seqlens_q and cu_seqlens_k go together (or pass cu_seqlens alone)")
    elif cu_seqlens_q is None:
        return None, None
    else:
        pair = (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k))
    for name, cu in pair:
        require_tensor(name, cu)
        if cu.dtype.is_floating_point or cu.dtype.is_complex or cu.dtype == torch.bool:
            raise TypeError(f"{name} must be an integer tensor (int32 or int64), got {cu.dtype}")
        if cu.dim() != 1 or cu.shape[0] < 2:
            raise ValueError(f"{name} has shape {list(cu.shape)}; accepted: [N + 1] with N >= 1 sequences "
                             f"(cumulative lengths starting at 0, as FlashAttention's varlen API)")
        if cu.device != device:
            raise ValueError(f"{name} is on {cu.device} but q is on {device}")
    (_, cu_q), (_, cu_k) = pair
    if cu_q.shape != cu_k.shape:
        raise ValueError(f"cu_seqlens_q has {cu_q.shape[0] - 1} sequences and cu_seqlens_k {cu_k.shape[0] - 1}; "
                         f"they must describe the same sequences")
    return cu_q, cu_k


class Rows(NamedTuple):
    """Per packed query row: ``seq`` (its sequence), ``bos`` (its sequence's first key), ``hi`` (the end of
    the keys it may see: the causal limit for block indices, the sequence's end for ranges) and ``base2``
    ([S, 2]: ``bos``, ``bos + block_size``), all global key indices."""

    seq: torch.Tensor
    bos: torch.Tensor
    hi: torch.Tensor
    base2: torch.Tensor | None


def sequence_of_rows(cu_q, S: int) -> torch.Tensor:
    """``[S]`` int64: the sequence of each packed query row, i.e. how many inner boundaries
    ``cu_q[1:-1]`` are <= the row.  Boundaries outside ``[0, S)`` are clamped, so every answer lies in
    ``[0, N)`` whatever the values (rows past ``cu_q[-1]`` count as the last sequence)."""
    inner = cu_q[1:-1].to(torch.int64).clamp(0, S)
    marks = torch.zeros(S + 1, dtype=torch.int64, device=cu_q.device).index_add(0, inner, torch.ones_like(inner))
    return marks.cumsum(0)[:S]


def rows(cu_q, cu_k, S: int, T: int, positions, block_size: int | None) -> Rows:
    """The row quantities from cu_seqlens, on the device, in a handful of small ops (no host sync).
    ``bos``/``hi`` are clamped into ``[0, T]``, so every range is, whatever the values."""
    seq = sequence_of_rows(cu_q, S)
    end = torch.arange(1, S + 1, device=cu_q.device, dtype=cu_q.dtype)  # row + 1
    first = cu_k[:-1]
    if block_size is None:  # ranges: the sequence's keys [bos, eos)
        tab = torch.stack([first, cu_k[1:]], -1)[seq].clamp(0, T)
        return Rows(seq, tab[:, 0], tab[:, 1], None)
    cols = [first, first + block_size]
    if positions is not None:
        cols.append(cu_k[1:] - first - 1)  # len_k - 1: the clamp of a position inside its sequence
    elif cu_q is not cu_k:
        cols.append(cu_k[1:] - cu_q[1:])  # len_k - len_q: the queries are the last tokens of their sequence
    tab = torch.stack(cols, -1)[seq]
    bos = tab[:, 0].clamp(0, T)
    if positions is None:
        hi = end if cu_q is cu_k else end + tab[:, 2]
    else:  # min(pos, len_k - 1) first: a position near 2^63 must not overflow
        hi = bos + torch.minimum(positions.reshape(-1), tab[:, 2]) + 1  # int64 when positions are
    return Rows(seq, bos, hi.clamp(0, T), tab[:, :2])


_ROWS: dict = caches.register("packed_rows", {})  # (ids, versions, S, T, block_size) -> (cu_q, cu_k, Rows)
_ROWS_MAX = 8


def cached_rows(cu_q, cu_k, S: int, T: int, positions, block_size: int | None, eager: bool) -> Rows:
    """:func:`rows`, remembered for the same cu_seqlens tensors (every layer of a model reuses them: the row
    quantities are then computed once per step).  Only in plain eager calls on CUDA without ``positions``;
    the entry holds the tensors themselves (their ids cannot be reused meanwhile) and their version
    counters, so an in-place change of cu_seqlens misses the cache (inference tensors are not cached)."""
    if not eager or positions is not None or cu_q.device.type != "cuda" or cu_q.is_inference() or cu_k.is_inference():
        return rows(cu_q, cu_k, S, T, positions, block_size)
    key = (id(cu_q), id(cu_k), cu_q._version, cu_k._version, S, T, block_size)
    hit = _ROWS.get(key)
    if hit is not None and hit[0] is cu_q and hit[1] is cu_k:
        return hit[2]
    r = rows(cu_q, cu_k, S, T, positions, block_size)
    if len(_ROWS) >= _ROWS_MAX:
        _ROWS.pop(next(iter(_ROWS)))
    _ROWS[key] = (cu_q, cu_k, r)
    return r


def global_ranges(spans: torch.Tensor, r: Rows, block_size: int | None) -> torch.Tensor:
    """Sequence-local spans ``[1, S, G, n(, 2)]`` -> global ranges ``[1, S, G, n, 2]`` inside each row's sequence.

    Block ``i`` of a row is ``[bos + i * bs, bos + (i + 1) * bs)`` clamped into ``[bos, hi]``: ``-1`` (any
    negative index), blocks past the query and past the sequence become empty spans ``[x, x)``.  A block
    index is clamped to ``hi`` first, so ``index * block_size`` cannot overflow.
    """
    lo, hi = r.bos[:, None, None, None], r.hi[:, None, None, None]
    # Contiguous whatever the spans' layout (XunhaoLai's [H, total, k] arrives permuted, and the ranges would
    # follow it, groups outermost): the ranges are saved for the backward, and a compiled backward with a
    # symbolic token count checked such a token-dependent stride against its value at trace time (Inductor,
    # torch 2.11).  Contiguous, only the size-1 batch dimension's stride depends on the token count.
    local = spans[0].contiguous().to(torch.int64)  # (to() of the same dtype would keep the layout)
    if block_size is None:
        out = local.clamp(-(1 << 62), 1 << 62) + lo
    else:
        idx = local.clamp(-1, (1 << 62) // max(block_size, 1))
        out = torch.add(r.base2[:, None, None, :], idx[..., None], alpha=block_size)
    return torch.clamp(out, min=lo, max=hi)[None]
