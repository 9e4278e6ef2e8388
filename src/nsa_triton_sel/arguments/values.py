"""``validate=True``: the values of the spans (and cu_seqlens), read with one host sync, before or beside the kernel.

The flags are computed on the device (``contract.range_flags`` / ``block_flags``, :func:`packed_flags`) and
read once.  Before the kernel, that sync leaves the GPU idle while the host then launches the kernel; on
the kernel path the kernel can instead be enqueued right behind the checks before the host waits for
them (``beside``), because the kernels clamp every span into ``[0, T)`` and packed rows are clamped into
their own sequence (``layouts.global_ranges``): bad values cannot make them read out of bounds.  The
packed-SDPA paths gather by index, so there the checks run first.  Messages name the row (and, packed,
its sequence and its position there).

Measured on the H100 (Triton 3.6, T = 8K prefill): checks first cost +16 % (random) and +31 % (local) over
``validate=False``; beside the kernel +6.5 % and +9.3 % (README, "The dispatcher and its flags").
"""

from __future__ import annotations

import torch

from .. import caches
from ..contract import (_span_order, block_flags, n_blocks, raise_block_errors, raise_range_errors, range_flags)

# (device, shape, dtype) -> (pinned host buffer, event): allocating pinned memory costs hundreds of
# microseconds, more than the checked call itself.  Reuse is safe:
# calls are sequential, and a later copy into the buffer is ordered after an earlier one on the stream,
# whose event the reader waits for.
_LANDINGS: dict = caches.register("value_check_landings", {})


def _read(flags: torch.Tensor, beside: bool):
    """``(values, None)`` read now, or ``(None, wait)`` where ``wait()`` gives the values once the copy landed."""
    if not (beside and flags.device.type == "cuda"):
        return flags.tolist(), None
    key = (flags.device, tuple(flags.shape), flags.dtype)
    hit = _LANDINGS.get(key)
    if hit is None:
        hit = _LANDINGS[key] = (torch.empty(flags.shape, dtype=flags.dtype, pin_memory=True), torch.cuda.Event())
    host, done = hit
    host.copy_(flags, non_blocking=True)
    done.record(torch.cuda.current_stream(flags.device))

    def wait():
        done.synchronize()
        return host.tolist()

    return None, wait


def _checked(flags, beside, report):
    """Run ``report(values)`` now, or return ``finish()`` that waits for the flags and runs it."""
    values, wait = _read(flags, beside)
    if wait is None:
        report(values)
        return None
    return lambda: report(wait())


def start(spans, positions, block_size: int, T: int, *, beside: bool):
    """The value checks of a fixed-length call: ``None`` when they already ran (and passed), else
    ``finish()``, to be called once the kernel is enqueued (it waits for the checks only and raises)."""
    if spans.dim() == 5:
        return _checked(range_flags(spans, T), beside, lambda values: raise_range_errors(spans, T, values))
    n_blk = n_blocks(T, block_size)
    return _checked(block_flags(spans, n_blk, positions), beside,
                    lambda values: raise_block_errors(spans, n_blk, positions, values))


def fixed_repeats(block_indices, block_size, T: int, positions) -> None:
    """The drop-ins at fixed length: the blocks the peers ignore (negative, past T) are padding; a
    repeated block (or a negative position) still raises.  One host sync."""
    n_blk = n_blocks(T, block_size)
    idx = torch.where((block_indices >= 0) & (block_indices < n_blk), block_indices, -1)
    raise_block_errors(idx, n_blk, positions, block_flags(idx, n_blk, positions).tolist())


# -- packed batches --

def _cu_flags(cu_q, cu_k, S: int, T: int) -> torch.Tensor:
    len_q, len_k = cu_q[1:] - cu_q[:-1], cu_k[1:] - cu_k[:-1]
    return torch.stack([(cu_q[0] != 0) | (cu_k[0] != 0), (len_q < 0).any() | (len_k < 0).any(),
                        cu_q[-1] != S, cu_k[-1] != T, (len_q > len_k).any()])


def _span_flags(spans, positions, block_size, n_key, lenient):
    """Flags of the spans against each row's sequence length ``n_key`` ([S, 1, 1])."""
    if block_size is None:
        start, end = spans[0].unbind(-1)
        s_sorted, order, big = _span_order(start, end)
        overlap = (s_sorted[..., 1:] < end.gather(-1, order)[..., :-1]) & (s_sorted[..., 1:] != big)
        return torch.stack([(start < 0).any(), (start > end).any(), (end > n_key).any(), overlap.any()])
    idx = spans[0]
    n_blk = (n_key + block_size - 1) // block_size
    inside = (idx >= 0) & (idx < n_blk)
    oob = torch.zeros((), dtype=torch.bool, device=idx.device) if lenient else ((idx < -1) | (idx >= n_blk)).any()
    srt = torch.where(inside, idx, -1).sort(-1).values
    dup = ((srt[..., 1:] == srt[..., :-1]) & (srt[..., 1:] >= 0)).any()
    neg = (positions < 0).any() if positions is not None else torch.zeros_like(dup)
    return torch.stack([oob, dup, neg, torch.zeros_like(dup)])


def packed_flags(spans, positions, block_size, cu_q, cu_k, r, T: int, lenient: bool) -> torch.Tensor:
    """``[cu x 5, spans x 4]`` as one bool tensor on the device (no sync)."""
    n_key = (cu_k[1:][r.seq] - r.bos)[:, None, None]
    return torch.cat([_cu_flags(cu_q, cu_k, spans.shape[1], T),
                      _span_flags(spans, positions, block_size, n_key, lenient)])


def start_packed(spans, positions, block_size, cu_q, cu_k, r, rank: int, T: int, *, lenient: bool, beside: bool):
    """The value checks of a packed call (spans sequence-local, ``r`` the rows): as :func:`start`."""
    f = packed_flags(spans, positions, block_size, cu_q, cu_k, r, T, lenient)
    return _checked(f, beside, lambda values: raise_packed_errors(values, spans, positions, block_size, cu_q, cu_k,
                                                                  rank, T))


def _row_name(row: int, cu_q: list, what: str, rank: int, g: int, slot: str) -> str:
    seq = max(i for i in range(len(cu_q) - 1) if cu_q[i] <= row) if row >= cu_q[0] else 0
    where = f"[b=0, s={row}, g={g}{slot}]" if rank == 5 else f"[t={row}, h={g}{slot}]" if rank == 3 else \
        f"[b=0, t={row}, h={g}{slot}]"
    return f"{what}{where} (sequence {seq}, position {row - cu_q[seq]})"


def _cu_message(which: int, cu_q, cu_k, S: int, T: int) -> str:
    show = lambda cu: cu if len(cu) <= 12 else cu[:6] + ["..."] + cu[-5:]  # noqa: E731
    what = ("must start at 0", "must never decrease (cumulative lengths)",
            f"must end at the number of packed query rows S={S}", f"must end at the number of packed keys T={T}",
            "give a sequence more queries than keys (its queries are its last len_q tokens)")[which]
    if which in (2, 3):
        return f"{('cu_seqlens_q', 'cu_seqlens_k')[which - 2]} = {show((cu_q, cu_k)[which - 2])}: {what}"
    return f"cu_seqlens_q / cu_seqlens_k (or cu_seqlens) = {show(cu_q)} / {show(cu_k)}: {what}"


def raise_packed_errors(values, spans, positions, block_size, cu_q, cu_k, rank: int, T: int) -> None:
    """The ValueError of the first failed check of :func:`packed_flags` (nothing when all passed)."""
    if not any(values):
        return
    S = spans.shape[1]
    cq, ck = cu_q.tolist(), cu_k.tolist()
    for i in range(5):
        if values[i]:
            raise ValueError(_cu_message(i, cq, ck, S, T))
    seq = torch.searchsorted(cu_q[1:-1].cpu().contiguous(), torch.arange(1, S + 1, dtype=cu_q.dtype))
    n_key = (cu_k.cpu()[1:] - cu_k.cpu()[:-1])[seq].to(torch.int64)[:, None, None]
    s = spans[0].cpu().to(torch.int64)
    if block_size is None:
        bad = [(s[..., 0] < 0, "start < 0"), (s[..., 0] > s[..., 1], "start > end"),
               (s[..., 1] > n_key, "end > the length of its sequence (it would read the next sequence's keys)")]
        for flag, (mask, what) in zip(values[5:8], bad):
            if flag:
                row, g, j = (int(i) for i in mask.nonzero()[0])
                raise ValueError(f"{_row_name(row, cq, 'ranges', rank, g, f', span={j}')} = {s[row, g, j].tolist()}: "
                                 f"{what}; each span [start, end) counts from its sequence's first key and must "
                                 f"satisfy 0 <= start <= end <= len (len={int(n_key[row, 0, 0])} here)")
        _raise_overlap(s, cq, rank)
    n_blk = (n_key + block_size - 1) // block_size
    if values[5]:
        row, g, j = (int(i) for i in ((s < -1) | (s >= n_blk)).nonzero()[0])
        raise ValueError(f"{_row_name(row, cq, 'block_indices', rank, g, f', slot={j}')} = {int(s[row, g, j])}: out of "
                         f"range; block indices count from the start of each sequence: accepted -1 (no block) or "
                         f"0 <= index < {int(n_blk[row, 0, 0])} (a sequence of {int(n_key[row, 0, 0])} keys, "
                         f"blocks of {block_size})")
    if values[6]:
        inside = torch.where((s >= 0) & (s < n_blk), s, -1)
        srt = inside.sort(-1).values
        row, g, _ = (int(i) for i in ((srt[..., 1:] == srt[..., :-1]) & (srt[..., 1:] >= 0)).nonzero()[0])
        raise ValueError(f"{_row_name(row, cq, 'block_indices', rank, g, '')} = {s[row, g].tolist()} repeats a "
                         f"block; the selected blocks of a row must be distinct (use -1 for padding)")
    raise_block_errors(s[None], 1 << 62, positions.cpu() if positions is not None else None, [False, False, True])


def _raise_overlap(s, cq, rank):
    start, end = s[..., 0], s[..., 1]
    srt, order, big = _span_order(start, end)
    e = end.gather(-1, order)
    row, g, j = (int(i) for i in ((srt[..., 1:] < e[..., :-1]) & (srt[..., 1:] != big)).nonzero()[0])
    i0, i1 = int(order[row, g, j]), int(order[row, g, j + 1])
    raise ValueError(f"{_row_name(row, cq, 'ranges', rank, g, '')}: spans {i0} {s[row, g, i0].tolist()} and {i1} "
                     f"{s[row, g, i1].tolist()} overlap; the non-empty spans of a row must be disjoint")
