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

import math
import numbers
from typing import NamedTuple

import torch

KERNEL_DTYPES = (torch.float16, torch.bfloat16)
# torch.compiler.is_compiling (torch >= 2.3) is safe to call under Dynamo (it is constant-folded there);
# every fast path asks it first, before anything a trace could not follow.
is_compiling = getattr(torch.compiler, "is_compiling", None) or torch._dynamo.is_compiling
# The largest |scale| accepted: scores are formed in float32 (the kernels, packed SDPA), and with a scale
# much larger than this an ordinary logit (|q . k| of a few hundred) overflows to inf, which the softmax
# turns into NaN.  Real models use 1 / sqrt(Dk) or a learnt temperature of order 1.
MAX_SCALE = 1e6
REFERENCE_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


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


def wants_grad(*xs) -> bool:
    """Whether autograd records a call on these tensors (grad mode on and one of them requires grad)."""
    return torch.is_grad_enabled() and any(x.requires_grad for x in xs)


def _fmt_shape(t: torch.Tensor) -> str:
    return "[" + ", ".join(str(d) for d in t.shape) + "]"


def require_tensor(name: str, x) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.layout != torch.strided:
        raise TypeError(f"{name} is a {x.layout} tensor; accepted: dense (strided) tensors (call .to_dense())")


def resolve_scale(scale, Dk: int) -> float:
    """The softmax scale: ``1 / sqrt(Dk)`` for None, else ``scale`` as a finite real number.

    A string, a bool, a complex number or a tensor is a TypeError (``float()`` would accept
    ``"0.5"`` and ``True`` silently); NaN or +-inf is a ValueError (they make every output NaN).
    """
    if scale is None:
        return 1.0 / math.sqrt(Dk)
    if isinstance(scale, bool) or not isinstance(scale, (numbers.Real, torch.SymFloat)):
        raise TypeError(f"scale must be a real number (float or int) or None, got {type(scale).__name__} "
                        f"{scale!r}; accepted: a finite float, or None for 1/sqrt(Dk)")
    if isinstance(scale, torch.SymFloat) or is_compiling():
        return scale  # a float traced by torch.compile is a graph input: its value is checked in eager calls
    try:
        value = float(scale)
    except OverflowError:  # an int beyond the float range (10**400)
        value = math.inf if scale > 0 else -math.inf
    if not math.isfinite(value) or abs(value) > MAX_SCALE:
        what = "is not finite" if not math.isfinite(value) else "is too large (an ordinary score would overflow float32)"
        raise ValueError(f"scale={value!r} {what}; accepted: a finite float with |scale| <= {MAX_SCALE:g}, or None "
                         f"for 1/sqrt(Dk)")
    return value


def check_block_size(block_size) -> int:
    """``block_size`` as a positive Python int (any size: conversions clamp it to ``max(T, 1)``).
    A bool, a float (``8.0``) or a tensor is not an int: ValueError, as for a value <= 0."""
    if isinstance(block_size, bool) or not isinstance(block_size, numbers.Integral) or block_size <= 0:
        raise ValueError(f"block_size must be a positive int, got {type(block_size).__name__} {block_size!r}")
    return int(block_size)


def require_tensors(rank: int, layout: str, **named) -> None:
    """Each of ``named`` must be a ``rank``-D tensor (the drop-ins' first check, before any shape is read)."""
    for name, x in named.items():
        if not isinstance(x, torch.Tensor) or x.dim() != rank:
            raise ValueError(f"{name} must be a {rank}-D tensor {layout}, got {getattr(x, 'shape', type(x).__name__)}")


def _require_rank(name: str, x: torch.Tensor, rank: int, layout: str) -> None:
    if x.dim() != rank:
        raise ValueError(
            f"{name} must have {rank} dimensions {layout}, got {x.dim()} with shape {_fmt_shape(x)}"
        )


def check_qkv(q, k, v, *, allow_fp32: bool = False) -> Dims:
    """Check q, k, v against the contract and return their sizes."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        require_tensor(name, x)
    _require_rank("q", q, 5, "[B, S, G, h, Dk]")
    _require_rank("k", k, 4, "[B, G, T, Dk]")
    _require_rank("v", v, 4, "[B, G, T, Dv]")
    accepted = REFERENCE_DTYPES if allow_fp32 else KERNEL_DTYPES
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dtype not in accepted:
            accepted_txt = ", ".join(str(d).replace("torch.", "") for d in accepted)
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
    if any(d == 0 for d in (B, S, G, h, Dk, Dv)):  # (not min(): torch 2.4's Dynamo cannot min() a symbolic size)
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
    require_tensor("ranges", ranges)
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
    if validate and ranges.numel() and ranges.device.type != "meta":
        raise_range_errors(ranges, dims.T, range_flags(ranges, dims.T).tolist())  # the one host sync


def clamp_ranges(ranges: torch.Tensor, T: int) -> torch.Tensor:
    """``ranges`` as the kernels read them (``kernels/common.py _clamp_spans``): every span clamped into
    ``[0, T]`` with ``end >= start``, then int32.  Valid spans pass unchanged; with any values
    (``validate=False``) nothing outside ``[0, T)`` is read, a value past the int32 range saturates (no
    wrap-around), and the backward differentiates exactly what the forward computed.  Device ops only."""
    r = ranges if ranges.dtype == torch.int64 else ranges.to(torch.int64)
    start = r[..., 0].clamp(0, T)
    end = torch.maximum(r[..., 1], start).clamp_max(T)
    return torch.stack([start, end], dim=-1).to(torch.int32)


def _first_index(mask: torch.Tensor) -> tuple[int, ...]:
    """Index of the first True element of ``mask`` (only used on the error path)."""
    flat = int(torch.nonzero(mask.reshape(-1))[0, 0])
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), mask.shape))


def _span_order(start, end):
    """Spans sorted by start, empty ones last: ``(sorted starts, order, sentinel)``."""
    big = torch.iinfo(start.dtype).max
    key = torch.where(end > start, start, big)
    s_sorted, order = key.sort(dim=-1)
    return s_sorted, order, big


def range_flags(ranges: torch.Tensor, T: int) -> torch.Tensor:
    """``[start < 0, start > end, end > T, overlap]`` anywhere, as a bool tensor ``[4]`` on the device.

    No host sync: the caller reads it (``.tolist()``), alone or stacked with its own flags, and
    passes the list to :func:`raise_range_errors`.  Overlap: with the non-empty spans of a row
    sorted by start (empty ones last), two spans overlap somewhere iff some neighbours do.
    """
    r = ranges if ranges.dtype in (torch.int32, torch.int64) else ranges.to(torch.int64)
    start, end = r.unbind(-1)
    s_sorted, order, big = _span_order(start, end)
    e_sorted = end.gather(-1, order)
    overlap = (s_sorted[..., 1:] < e_sorted[..., :-1]) & (s_sorted[..., 1:] != big)
    return torch.stack([(start < 0).any(), (start > end).any(), (end > T).any(), overlap.any()])


def raise_range_errors(ranges: torch.Tensor, T: int, flags: list) -> None:
    """Raise the ValueError for the first failed check of :func:`range_flags` (nothing if none failed)."""
    if not any(flags[:4]):
        return
    r = ranges.to(torch.int64)
    start, end = r[..., 0], r[..., 1]
    accepted = f"each span [start, end) must satisfy 0 <= start <= end <= T (T={T}); start == end is padding"
    for flag, bad, what in ((flags[0], start < 0, "start < 0"), (flags[1], start > end, "start > end"),
                            (flags[2], end > T, "end > T")):
        if flag:
            b, s, g, i = _first_index(bad)
            raise ValueError(f"ranges[b={b}, s={s}, g={g}, span={i}] = {r[b, s, g, i].tolist()}: {what}; {accepted}")
    s_sorted, order, big = _span_order(start, end)
    e_sorted = end.gather(-1, order)
    b, s, g, j = _first_index((s_sorted[..., 1:] < e_sorted[..., :-1]) & (s_sorted[..., 1:] != big))
    i0, i1 = int(order[b, s, g, j]), int(order[b, s, g, j + 1])
    raise ValueError(
        f"ranges[b={b}, s={s}, g={g}]: spans {i0} {r[b, s, g, i0].tolist()} and {i1} "
        f"{r[b, s, g, i1].tolist()} overlap; the non-empty spans of a row must be disjoint "
        f"(merge them, or pad with start == end)"
    )


def check_positions(positions, B: int, S: int, device) -> None:
    """``positions`` ``[S]``, ``[1, S]`` or ``[B, S]``, integer, on ``device`` (structure only)."""
    require_tensor("positions", positions)
    _require_integer("positions", positions)
    if positions.device != device:
        raise ValueError(f"positions is on {positions.device} but block_indices is on {device}")
    if not ((positions.dim() == 1 and positions.shape[0] == S)
            or (positions.dim() == 2 and tuple(positions.shape) in ((B, S), (1, S)))):
        raise ValueError(f"positions has shape {_fmt_shape(positions)}; accepted: [S] or [B, S] with S={S}, B={B}")


def check_block_indices(block_indices) -> None:
    """``block_indices`` ``[B, S, G, n]``, integer (structure only)."""
    require_tensor("block_indices", block_indices)
    _require_rank("block_indices", block_indices, 4, "[B, S, G, n]")
    _require_integer("block_indices", block_indices)


def n_blocks(T: int, block_size: int) -> int:
    return -(-T // block_size)


def block_flags(block_indices: torch.Tensor, n_blk: int, positions=None) -> torch.Tensor:
    """``[index out of range, repeated block, negative position]`` anywhere, bool ``[3]``, no host sync."""
    idx = block_indices if block_indices.dtype in (torch.int32, torch.int64) else block_indices.to(torch.int64)
    srt = idx.sort(dim=-1).values
    dup = (srt[..., 1:] == srt[..., :-1]) & (srt[..., 1:] >= 0)
    bad_pos = (positions < 0).any() if positions is not None else torch.zeros((), dtype=torch.bool, device=idx.device)
    return torch.stack([((idx < -1) | (idx >= n_blk)).any(), dup.any(), bad_pos])


def raise_block_errors(block_indices: torch.Tensor, n_blk: int, positions, flags: list) -> None:
    """Raise the ValueError for the first failed check of :func:`block_flags` (nothing if none failed)."""
    idx = block_indices.to(torch.int64)
    if flags[0]:
        b, s, g, i = _first_index((idx < -1) | (idx >= n_blk))
        raise ValueError(
            f"block_indices[b={b}, s={s}, g={g}, slot={i}] = {int(idx[b, s, g, i])}: out of range; "
            f"accepted: -1 (no block) or 0 <= index < ceil(T / block_size) = {n_blk}"
        )
    if flags[1]:
        srt = idx.sort(dim=-1).values
        b, s, g, _ = _first_index((srt[..., 1:] == srt[..., :-1]) & (srt[..., 1:] >= 0))
        raise ValueError(
            f"block_indices[b={b}, s={s}, g={g}] = {idx[b, s, g].tolist()} repeats a block; "
            f"the selected blocks of a row must be distinct (use -1 for padding)"
        )
    if flags[2]:
        where = _first_index(positions < 0)  # index into the caller's tensor ([S] or [B, S])
        raise ValueError(f"positions[{', '.join(map(str, where))}] = {int(positions[where])}: "
                         f"a query position must be >= 0")


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
    ``[B, S, G, n, 2]``.  The kernels also read block indices directly (``MODE_BLOCKS``,
    the same rule), so the dispatcher converts only for the reference paths.
    """
    check_block_indices(block_indices)
    block_size = check_block_size(block_size)
    if isinstance(T, bool) or not isinstance(T, int) or T < 0:
        raise ValueError(f"T (the number of keys) must be an int >= 0, got {T!r}")
    B, S, G, n = block_indices.shape
    dev = block_indices.device
    if positions is not None:
        check_positions(positions, B, S, dev)
    n_blk = n_blocks(T, block_size)
    if validate and block_indices.numel() and dev.type != "meta":
        raise_block_errors(block_indices, n_blk, positions, block_flags(block_indices, n_blk, positions).tolist())
    if positions is None:
        pos = torch.arange(S, device=dev, dtype=torch.int64).view(1, S)
    else:
        pos = positions.to(torch.int64).view(-1, S)
    # min(pos, T - 1) + 1, not min(pos + 1, T): a position near 2^63 must not overflow.  The
    # block size is clamped to max(T, 1) and the index to T, so index * size stays far from 2^63.
    limit = (torch.clamp(pos, max=T - 1) + 1).view(pos.shape[0], S, 1, 1)
    bs = min(block_size, max(T, 1))
    idx = block_indices.to(torch.int64)
    start = idx.clamp(max=T) * bs
    end = torch.minimum(start + bs, limit)
    valid = (idx >= 0) & (end > start)
    # Both columns written straight into the int32 result (no int64 stack and second cast): the backward
    # converts once per training step, over every (row, slot).
    out = torch.empty((*idx.shape, 2), dtype=torch.int32, device=dev)
    out[..., 0] = start.masked_fill_(~valid, 0)
    out[..., 1] = end.masked_fill_(~valid, 0)
    return out


def as_ranges(spans: torch.Tensor, positions, block_size: int, T: int) -> torch.Tensor:
    """``spans`` as the kernels read them: int32 ranges ``[B, S, G, n, 2]`` within ``[0, T]``.  Ranges are
    clamped (:func:`clamp_ranges`); block indices ``[B, S, G, n]`` are converted, which already gives spans in
    ``[0, T]`` with ``end >= start`` (a block out of range or in the future is the empty span ``[0, 0)``).
    Already checked: no value validation here."""
    if spans.dim() == 5:
        return clamp_ranges(spans, T)
    return block_indices_to_ranges(spans, block_size, T, positions, validate=False)
