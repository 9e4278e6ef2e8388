"""``validate=True`` for packed batches: cu_seqlens, and that no row reads across its sequence's boundary.

The flags are computed on the device from the sequence-local spans and read with one host sync.
On the Triton path (CUDA) that read waits only for the checks, after the kernel has been enqueued
behind them, as ``checks.start_beside`` does for fixed-length calls: the conversion already clamps
every row into its own sequence, so bad values cannot make the kernel read another sequence's keys,
and the call raises before it returns.  Elsewhere (the packed-SDPA paths gather by index) the checks
are read before the call.  Messages name the packed row, its sequence and its position there.
"""

from __future__ import annotations

import torch

from .contract import _span_order, block_flags, n_blocks, raise_block_errors

_LANDINGS: dict = {}  # (device, n) -> (pinned host buffer, event), reused: pinned allocations are slow


def fixed_repeats(block_indices, block_size, T: int, positions) -> None:
    """The drop-ins at fixed length: the blocks the peers ignore (negative, past T) are padding; a
    repeated block (or a negative position) still raises.  One host sync."""
    n_blk = n_blocks(T, block_size)
    idx = torch.where((block_indices >= 0) & (block_indices < n_blk), block_indices, -1)
    raise_block_errors(idx, n_blk, positions, block_flags(idx, n_blk, positions).tolist())


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


def flags(spans, positions, block_size, cu_q, cu_k, r, T: int, lenient: bool) -> torch.Tensor:
    """``[cu x 5, spans x 4]`` as one bool tensor on the device (no sync)."""
    n_key = (cu_k[1:][r.seq] - r.bos)[:, None, None]
    return torch.cat([_cu_flags(cu_q, cu_k, spans.shape[1], T),
                      _span_flags(spans, positions, block_size, n_key, lenient)])


def start(spans, positions, block_size, cu_q, cu_k, r, lay, route, lenient):
    """Enqueue the checks (``route()``: the call's route); returns ``finish()``, which waits for them and
    raises what they found (None inside a trace or a CUDA-graph capture: nothing may wait there, as in
    ``selection_attention``)."""
    from . import checks
    from .transforms import plain_eager

    if not plain_eager(lay.q):
        return None
    T = lay.k.shape[2]
    f = flags(spans, positions, block_size, cu_q, cu_k, r, T, lenient)

    def report(values):
        raise_packed_errors(values, spans, positions, block_size, cu_q, cu_k, lay.rank, T)

    if f.device.type == "cuda" and checks.beside_the_kernel(route(), f.device):
        key = (f.device, f.shape[0])
        if key not in _LANDINGS:
            _LANDINGS[key] = (torch.empty(f.shape, dtype=torch.bool, pin_memory=True), torch.cuda.Event())
        host, done = _LANDINGS[key]
        host.copy_(f, non_blocking=True)
        done.record()

        def finish():
            done.synchronize()
            report(host.tolist())

        return finish
    report(f.tolist())
    return None


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
    """The ValueError of the first failed check of :func:`flags` (nothing when all passed)."""
    if not any(values):
        return
    S = spans.shape[1]
    cq, ck = cu_q.tolist(), cu_k.tolist()
    for i in range(5):
        if values[i]:
            raise ValueError(_cu_message(i, cq, ck, S, T))
    seq = torch.searchsorted(cu_q[1:-1].cpu(), torch.arange(1, S + 1, dtype=cu_q.dtype))
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
