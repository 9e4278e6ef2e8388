"""The input contract of NSA selection attention, enforced.

Shapes (see the README for the full contract):

- ``q``      ``[B, S, G, h, Dk]``  (G key/value groups, h query heads per group)
- ``k``      ``[B, G, T, Dk]``
- ``v``      ``[B, G, T, Dv]``
- ``ranges`` ``[B, S, G, n, 2]``   integer ``[start, end)`` spans into the T keys;
  ``start == end`` is padding.  Spans of one row must not overlap.

Every check raises ``TypeError`` (wrong kind of object or dtype) or ``ValueError``
(wrong shape or value) with a message that names the argument, the offending index
and what is accepted.  The value checks on ``ranges`` are vectorised and cost one
host synchronisation; pass ``validate=False`` to skip them in hot loops.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

KERNEL_DTYPES = (torch.float16, torch.bfloat16)
REFERENCE_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


class Dims(NamedTuple):
    """Sizes of one selection-attention call."""

    B: int
    S: int
    G: int
    h: int
    Dk: int
    T: int
    Dv: int

    @property
    def rows(self) -> int:
        return self.B * self.S * self.G


def _fmt_shape(t: torch.Tensor) -> str:
    return "[" + ", ".join(str(d) for d in t.shape) + "]"


def _require_tensor(name: str, x) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")


def _require_rank(name: str, x: torch.Tensor, rank: int, layout: str) -> None:
    if x.dim() != rank:
        raise ValueError(
            f"{name} must have {rank} dimensions {layout}, got {x.dim()} with shape {_fmt_shape(x)}"
        )


def check_qkv(q, k, v, *, allow_fp32: bool = False) -> Dims:
    """Check q, k, v against the contract and return their sizes."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        _require_tensor(name, x)
    _require_rank("q", q, 5, "[B, S, G, h, Dk]")
    _require_rank("k", k, 4, "[B, G, T, Dk]")
    _require_rank("v", v, 4, "[B, G, T, Dv]")
    accepted = REFERENCE_DTYPES if allow_fp32 else KERNEL_DTYPES
    accepted_txt = ", ".join(str(d).replace("torch.", "") for d in accepted)
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dtype not in accepted:
            raise TypeError(f"{name} has dtype {x.dtype}; accepted: {accepted_txt}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(
            f"q, k and v must share one dtype, got q={q.dtype}, k={k.dtype}, v={v.dtype}"
        )
    if not (q.device == k.device == v.device):
        raise ValueError(
            f"q, k and v must be on one device, got q on {q.device}, k on {k.device}, v on {v.device}"
        )
    B, S, G, h, Dk = q.shape
    Bk, Gk, T, Dkk = k.shape
    Bv, Gv, Tv, Dv = v.shape
    if Bk != B or Gk != G:
        raise ValueError(
            f"k has shape {_fmt_shape(k)}; its batch and group sizes must match q's "
            f"[B={B}, G={G}] (k is [B, G, T, Dk], q is [B, S, G, h, Dk] = {_fmt_shape(q)})"
        )
    if Dkk != Dk:
        raise ValueError(
            f"k has head dim Dk={Dkk} (shape {_fmt_shape(k)}) but q has Dk={Dk} "
            f"(shape {_fmt_shape(q)}); the last dimensions of q and k must be equal"
        )
    if (Bv, Gv, Tv) != (B, G, T):
        raise ValueError(
            f"v has shape {_fmt_shape(v)}; its [B, G, T] must match k's [{B}, {G}, {T}]"
        )
    if min(B, S, G, h, Dk, Dv) == 0:
        raise ValueError(
            f"q {_fmt_shape(q)} and v {_fmt_shape(v)} must have no empty dimension except T"
        )
    return Dims(B, S, G, h, Dk, T, Dv)


def _require_integer(name: str, x: torch.Tensor) -> None:
    if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
        raise TypeError(
            f"{name} must be an integer tensor (int32 or int64 preferred), got {x.dtype}"
        )


def check_ranges(ranges, dims: Dims, device: torch.device, *, validate: bool = True) -> None:
    """Check ``ranges`` ``[B, S, G, n, 2]``.

    Structure (rank, shape, dtype, device) is always checked; it costs nothing.  With
    ``validate`` the values are checked too: ``0 <= start <= end <= T`` and no two
    non-empty spans of one row overlap.  That costs one host synchronisation.
    """
    _require_tensor("ranges", ranges)
    _require_rank("ranges", ranges, 5, "[B, S, G, n, 2]")
    _require_integer("ranges", ranges)
    B, S, G = dims.B, dims.S, dims.G
    if tuple(ranges.shape[:3]) != (B, S, G) or ranges.shape[4] != 2:
        raise ValueError(
            f"ranges has shape {_fmt_shape(ranges)}; expected [B, S, G, n, 2] = [{B}, {S}, {G}, n, 2] "
            f"to match q"
        )
    if ranges.device != device:
        raise ValueError(f"ranges is on {ranges.device} but q, k and v are on {device}")
    if validate and ranges.numel():
        _check_range_values(ranges, dims.T)


def _first_index(mask: torch.Tensor) -> tuple[int, ...]:
    """Index of the first True element of ``mask`` (only used on the error path)."""
    flat = int(torch.nonzero(mask.reshape(-1))[0, 0])
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), mask.shape))


def _check_range_values(ranges: torch.Tensor, T: int) -> None:
    r = ranges.to(torch.int64)
    start, end = r[..., 0], r[..., 1]
    nonempty = end > start
    bad_neg = start < 0
    bad_order = start > end
    bad_end = end > T
    # Overlap: sort the non-empty spans of each row by start; with non-empty spans,
    # two spans overlap somewhere iff some neighbours in that order overlap.
    big = torch.iinfo(torch.int64).max
    key = torch.where(nonempty, start, torch.full_like(start, big))
    order = key.argsort(dim=-1, stable=True)
    s_sorted = start.gather(-1, order)
    e_sorted = end.gather(-1, order)
    ne_sorted = nonempty.gather(-1, order)
    overlap = ne_sorted[..., 1:] & ne_sorted[..., :-1] & (s_sorted[..., 1:] < e_sorted[..., :-1])
    flags = torch.stack(
        [bad_neg.any(), bad_order.any(), bad_end.any(), overlap.any()]
    ).tolist()  # the one host synchronisation
    if not any(flags):
        return
    accepted = f"each span [start, end) must satisfy 0 <= start <= end <= T (T={T}); start == end is padding"
    if flags[0]:
        b, s, g, i = _first_index(bad_neg)
        raise ValueError(
            f"ranges[b={b}, s={s}, g={g}, span={i}] = {r[b, s, g, i].tolist()}: start < 0; {accepted}"
        )
    if flags[1]:
        b, s, g, i = _first_index(bad_order)
        raise ValueError(
            f"ranges[b={b}, s={s}, g={g}, span={i}] = {r[b, s, g, i].tolist()}: start > end; {accepted}"
        )
    if flags[2]:
        b, s, g, i = _first_index(bad_end)
        raise ValueError(
            f"ranges[b={b}, s={s}, g={g}, span={i}] = {r[b, s, g, i].tolist()}: end > T; {accepted}"
        )
    b, s, g, j = _first_index(overlap)
    i0, i1 = int(order[b, s, g, j]), int(order[b, s, g, j + 1])
    raise ValueError(
        f"ranges[b={b}, s={s}, g={g}]: spans {i0} {r[b, s, g, i0].tolist()} and {i1} "
        f"{r[b, s, g, i1].tolist()} overlap; the non-empty spans of a row must be disjoint "
        f"(merge them, or pad with start == end)"
    )


def block_indices_to_ranges(
    block_indices: torch.Tensor,
    block_size: int,
    T: int,
    positions: torch.Tensor | None = None,
    *,
    validate: bool = True,
) -> torch.Tensor:
    """Convert the block-index convention of other NSA kernels into ranges.

    ``block_indices`` is ``[B, S, G, n]``: block ``i`` covers keys
    ``[i * block_size, (i + 1) * block_size)``; ``-1`` means "no block".  ``positions``
    (``[S]`` or ``[B, S]``, default ``arange(S)``) are the query positions: every span
    end is clamped to ``position + 1`` (the causal clamp) and to ``T``; a block wholly
    in the future of its query becomes an empty span.  Returns int32 ranges
    ``[B, S, G, n, 2]``.
    """
    _require_tensor("block_indices", block_indices)
    _require_rank("block_indices", block_indices, 4, "[B, S, G, n]")
    _require_integer("block_indices", block_indices)
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size <= 0:
        raise ValueError(f"block_size must be a positive int, got {block_size!r}")
    if isinstance(T, bool) or not isinstance(T, int) or T < 0:
        raise ValueError(f"T (the number of keys) must be an int >= 0, got {T!r}")
    B, S, G, n = block_indices.shape
    dev = block_indices.device
    if positions is None:
        pos = torch.arange(S, device=dev, dtype=torch.int64).view(1, S)
    else:
        _require_tensor("positions", positions)
        _require_integer("positions", positions)
        if positions.device != dev:
            raise ValueError(f"positions is on {positions.device} but block_indices is on {dev}")
        if positions.dim() == 1 and positions.shape[0] == S:
            pos = positions.to(torch.int64).view(1, S)
        elif positions.dim() == 2 and tuple(positions.shape) in ((B, S), (1, S)):
            pos = positions.to(torch.int64)
        else:
            raise ValueError(
                f"positions has shape {_fmt_shape(positions)}; accepted: [S] or [B, S] with S={S}, B={B}"
            )
    idx = block_indices.to(torch.int64)
    n_blocks = -(-T // block_size)
    if validate and idx.numel():
        bad_low = idx < -1
        bad_high = idx >= n_blocks
        srt = idx.sort(dim=-1).values
        dup = (srt[..., 1:] == srt[..., :-1]) & (srt[..., 1:] >= 0)
        bad_pos = pos < 0
        flags = torch.stack([bad_low.any(), bad_high.any(), dup.any(), bad_pos.any()]).tolist()
        if flags[0] or flags[1]:
            b, s, g, i = _first_index(bad_low | bad_high)
            raise ValueError(
                f"block_indices[b={b}, s={s}, g={g}, slot={i}] = {int(idx[b, s, g, i])}: out of range; "
                f"accepted: -1 (no block) or 0 <= index < ceil(T / block_size) = {n_blocks}"
            )
        if flags[2]:
            b, s, g, _ = _first_index(dup)
            raise ValueError(
                f"block_indices[b={b}, s={s}, g={g}] = {idx[b, s, g].tolist()} repeats a block; "
                f"the selected blocks of a row must be distinct (use -1 for padding)"
            )
        if flags[3]:
            # Index into the caller's tensor ([S] or [B, S]), not our broadcast view.
            where = _first_index(positions < 0)
            raise ValueError(
                f"positions[{', '.join(map(str, where))}] = {int(positions[where])}: "
                f"a query position must be >= 0"
            )
    limit = torch.clamp(pos + 1, max=T).view(pos.shape[0], S, 1, 1)
    start = idx * block_size
    end = torch.minimum(start + block_size, limit)
    valid = (idx >= 0) & (end > start)
    start = torch.where(valid, start, torch.zeros_like(start))
    end = torch.where(valid, end, torch.zeros_like(end))
    return torch.stack([start, end], dim=-1).to(torch.int32)
