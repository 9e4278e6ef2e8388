"""Packed batches (``cu_seqlens``) and the ``[B, T, HQ, D]`` / ``[T, HQ, D]`` layouts of ``selection_attention``.

The layouts of fla, XunhaoLai and FlashAttention become the native ``[B, S, G, h, D]`` /
``[B, G, T, D]`` contract through views only (the kernels accept any strides):

- ``q [B, T, HQ, Dk]`` -> ``q.unflatten(2, (H, HQ // H))``; ``k/v [B, T, H, D]`` -> ``permute(0, 2, 1, 3)``;
  query head ``j`` reads key/value head ``j // (HQ // H)`` (GQA, as in the peers);
- ``[T, HQ, Dk]`` / ``[T, H, D]``: the same with ``B = 1``;
- spans follow q: ``block_indices [B, T, H, n]`` / ``[T, H, n]``, ``ranges [..., n, 2]``; out and lse come
  back in q's layout (``[B, T, HQ, Dv]``, ``[B, T, HQ]``).

Packed batches: ``cu_seqlens [N + 1]`` (queries and keys packed alike) or ``cu_seqlens_q`` with
``cu_seqlens_k`` (decode, chunked prefill); ``B = 1``.  Block indices and ranges count from each
sequence's first key; ``positions`` default to the query's position inside its sequence, and with
``cu_seqlens_q != cu_seqlens_k`` a sequence's queries are its last ``len_q`` tokens (position
``len_k - len_q + i``, as fla and FlashAttention's causal varlen).  The spans are turned into global
ranges on the device, without a host sync: two elementwise ops over the spans
(``bos + idx * bs + [0, bs]``, then a clamp into ``[bos, limit]``) after a few over the rows.
The clamp keeps every row inside its own sequence whatever the values: out-of-range indices and
blocks in the query's future become empty spans; ``validate=True`` reports them (see
``varlen_checks``).  The kernels cannot express a per-row key offset with block indices (their
offsets come from the batch stride), hence the ranges.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from . import config, plan, varlen_checks
from .device import device_of
from .transforms import plain_eager
from .contract import (Dims, _require_tensor, check_block_indices, check_block_size, check_positions, check_ranges,
                       wants_grad)


class Layout(NamedTuple):
    """Native views of q, k, v and how to give out / lse back in the caller's layout."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    rank: int  # q's rank: 5 native, 4 [B, T, HQ, D], 3 [T, HQ, D]

    def spans(self, x):
        """Spans in q's layout as native views (``[T, H, n(, 2)]`` gains the batch dimension)."""
        if x is None or self.rank != 3 or not isinstance(x, torch.Tensor):
            return x
        return x.unsqueeze(0)

    def back(self, out, lse):
        if self.rank != 5:
            out, lse = out.flatten(2, 3), (None if lse is None else lse.flatten(2, 3))
        if self.rank == 3:
            out, lse = out[0], (None if lse is None else lse[0])
        return out, lse


def other_layout(q) -> bool:
    """Whether q is in one of the peers' layouts (``[B, T, HQ, Dk]``, ``[T, HQ, Dk]``): the hook's test."""
    return isinstance(q, torch.Tensor) and q.dim() in (3, 4)


def layout(q, k, v) -> Layout:
    """The native views of q, k, v; the layout is told by q's rank (5 native, 4 or 3 the peers')."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        _require_tensor(name, x)
    r = q.dim()
    if r == 5:
        return Layout(q, k, v, 5)
    if r not in (3, 4):
        raise ValueError(f"q has {r} dimensions (shape {list(q.shape)}); accepted: [B, S, G, h, Dk] (native), "
                         f"[B, T, HQ, Dk] or [T, HQ, Dk] (fla / FlashAttention layouts)")
    names = "[B, T, H, D]" if r == 4 else "[T, H, D]"
    for name, x in (("k", k), ("v", v)):
        if x.dim() != r:
            raise ValueError(f"q is {'[B, T, HQ, Dk]' if r == 4 else '[T, HQ, Dk]'} (shape {list(q.shape)}), so {name} "
                             f"must be {names}; got shape {list(x.shape)}")
    if r == 3:
        q, k, v = q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)
    HQ, H = q.shape[2], k.shape[2]
    if H == 0 or HQ % H or v.shape[2] != H:
        raise ValueError(f"q has HQ={HQ} heads, k {H} and v {v.shape[2]}: k and v need the same number H of heads, "
                         f"and H must divide HQ (query head j reads key/value head j // (HQ // H))")
    return Layout(q.unflatten(2, (H, HQ // H)), k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3), r)


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
        _require_tensor(name, cu)
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
    """Per packed query row: ``bos`` (its sequence's first key), ``hi`` (the end of the keys it may see:
    the causal limit for block indices, the sequence's end for ranges) and ``base2`` ([S, 2]: ``bos``,
    ``bos + block_size``), all global key indices; ``seq`` its sequence."""

    seq: torch.Tensor
    bos: torch.Tensor
    hi: torch.Tensor
    base2: torch.Tensor | None


def rows(cu_q, cu_k, S: int, T: int, positions, block_size: int | None) -> Rows:
    """The row quantities from cu_seqlens, on the device, in a handful of small ops (no host sync).

    Whatever the values, nothing indexes out of bounds: ``seq`` searches only the N - 1 inner
    boundaries, so it stays in ``[0, N)`` (rows past ``cu_q[-1]`` count as the last sequence), and
    ``bos``/``hi`` are clamped into ``[0, T]``, so every range is (a fallback path gathers by index;
    ``varlen_checks`` reports such cu_seqlens).
    """
    end = torch.arange(1, S + 1, device=cu_q.device, dtype=cu_q.dtype)  # row + 1
    seq = torch.searchsorted(cu_q[1:-1], end)  # = number of inner boundaries <= row
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


_ROWS: dict = {}  # (id(cu_q), id(cu_k), versions, S, block_size, ranges?) -> (cu_q, cu_k, Rows); at most _ROWS_MAX
_ROWS_MAX = 8
config.REFRESH_HOOKS.append(_ROWS.clear)


def cached_rows(cu_q, cu_k, S: int, T: int, positions, block_size: int | None, eager: bool) -> Rows:
    """:func:`rows`, remembered for the same cu_seqlens tensors (every layer of a model reuses them:
    the row quantities are then computed once per step, leaving two ops per call).

    Only in plain eager calls on CUDA and without ``positions``; the entry holds the tensors themselves
    (their ids cannot be reused meanwhile) and their version counters, so an in-place change of
    cu_seqlens misses the cache.  (Tensors without version counters, inference tensors, are not cached.)
    """
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
    negative index), blocks past the query and past the sequence become empty spans ``[x, x)``.
    """
    lo, hi = r.bos[:, None, None, None], r.hi[:, None, None, None]
    if block_size is None:
        out = spans[0] + lo
    else:
        out = torch.add(r.base2[:, None, None, :], spans[0][..., None], alpha=block_size)
    return torch.clamp(out, min=lo, max=hi)[None]


def _decode_view(q, k, v, ranges):
    """Packed decode (few query rows): each row as its own batch entry over the shared cache
    (``k``/``v`` expanded with batch stride 0), so the planner takes the split-L decode kernel as it
    would for a fixed batch.  Exact for any rows: the ranges are global."""
    S = q.shape[1]
    return (q.transpose(0, 1), k.expand(S, *k.shape[1:]), v.expand(S, *v.shape[1:]), ranges.transpose(0, 1))


def _wants_decode_view(q5, k5, v5) -> bool:
    grad = wants_grad(q5, k5, v5)
    if grad or q5.device.type == "meta" or q5.shape[1] == 1:
        return False  # the backward would allocate dk per row; one row is a decode call already
    _, S, G, h, _ = q5.shape
    if not all(type(x) is int for x in (S, G, h)):
        return False  # sizes traced as symbols: the fixed-length layout, which the planner handles at run time
    return _decode_rows(q5.device, S, G, h, not config.flags().group)


def _decode_rows(device, S: int, G: int, h: int, per_head: bool) -> bool:
    """Whether S rows of one query each take the split-L decode kernel (a constant to torch.compile: it
    reads the device record once, which a trace must not see being filled in)."""
    return plan.use_decode(S, 1, G, h, per_head, device_of(device))


_decode_rows = getattr(torch.compiler, "assume_constant_result", torch._dynamo.assume_constant_result)(_decode_rows)


def call(inner, route_of, q, k, v, ranges=None, *, block_indices=None, block_size=None, positions=None, scale=None,
         backend="auto", return_lse=False, validate=True, cu_seqlens=None, cu_seqlens_q=None, cu_seqlens_k=None,
         lenient=False):
    """``selection_attention`` for packed batches and the peers' layouts (``inner`` is the native call,
    ``route_of`` the dispatcher's ``route``: whether the value checks may run beside the kernel).

    ``lenient`` (the drop-ins): block indices the peers ignore (negative, in the query's future, past
    the sequence) are padding instead of errors; repeated blocks still raise.
    """
    lay = layout(q, k, v)
    cu_q, cu_k = cu_pair(cu_seqlens, cu_seqlens_q, cu_seqlens_k, lay.q.device)
    ranges, block_indices = lay.spans(ranges), lay.spans(block_indices)
    kw = dict(scale=scale, backend=backend, return_lse=return_lse)
    if cu_q is None:
        if lenient and block_indices is not None and validate:
            varlen_checks.fixed_repeats(block_indices, block_size, lay.k.shape[2], positions)
            validate = False
        res = inner(lay.q, lay.k, lay.v, ranges, block_indices=block_indices, block_size=block_size,
                    positions=positions, validate=validate, **kw)
        return _back(lay, res, return_lse)
    B, S = lay.q.shape[:2]
    if B != 1:
        raise ValueError(f"with cu_seqlens the batch is packed: q must be [total, HQ, Dk], [1, total, HQ, Dk] or "
                         f"[1, total, G, h, Dk]; got B={B} (shape {list(q.shape)})")
    spans, block_size = _packed_spans(ranges, block_indices, block_size, positions, lay)
    r = cached_rows(cu_q, cu_k, S, lay.k.shape[2], positions, block_size, plain_eager(lay.q))
    glob = global_ranges(spans, r, block_size)
    finish = None
    if validate and spans.numel():
        finish = varlen_checks.start(spans, positions, block_size, cu_q, cu_k, r, lay,
                                     lambda: route_of(lay.q, lay.k, lay.v, backend=backend), lenient)
    q5, k5, v5 = lay.q, lay.k, lay.v
    decode = _wants_decode_view(q5, k5, v5)
    if decode:
        q5, k5, v5, glob = _decode_view(q5, k5, v5, glob)
    res = inner(q5, k5, v5, glob, validate=False, **kw)
    if decode:
        res = tuple(x.transpose(0, 1) for x in res) if return_lse else res.transpose(0, 1)
    if finish is not None:
        finish()
    return _back(lay, res, return_lse)


def _back(lay: Layout, res, return_lse: bool):
    out, lse = lay.back(*(res if return_lse else (res, None)))
    return (out, lse) if return_lse else out


def _packed_spans(ranges, block_indices, block_size, positions, lay: Layout):
    """The spans of a packed call checked for structure: ``(spans, block_size or None for ranges)``."""
    B, S, G = lay.q.shape[:3]
    if (ranges is None) == (block_indices is None):
        raise ValueError("pass exactly one of ranges or block_indices (with block_size)")
    if ranges is not None:
        if block_size is not None or positions is not None:
            raise ValueError("block_size and positions go with block_indices; ranges already carry the causal clamp")
        check_ranges(ranges, Dims(B, S, G, 1, 1, 0, 1), lay.q.device, validate=False)
        return ranges, None
    check_block_indices(block_indices)
    if block_size is None:
        raise ValueError("block_indices needs block_size (the number of keys per block)")
    if tuple(block_indices.shape[:3]) != (B, S, G):
        raise ValueError(f"block_indices has shape {list(block_indices.shape)}; expected [1, S, G, n] = "
                         f"[1, {S}, {G}, n] (or [S, G, n] with [T, HQ, D] queries) to match q")
    if block_indices.device != lay.q.device:
        raise ValueError(f"block_indices is on {block_indices.device}; it must be on q's device {lay.q.device}")
    if positions is not None:
        check_positions(positions, 1, S, lay.q.device)
    return block_indices, check_block_size(block_size)
