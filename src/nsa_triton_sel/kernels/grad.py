"""Gradients of NSA selection attention: the torch launcher of the backward kernels.

- :func:`sel_attn_backward` ``(q, k, v, ranges, out, lse, grad_out) -> (dq, dk, dv)``: the
  backward of ``launch.sel_attn_ranges(..., return_lse=True)``; gradients in the inputs'
  dtypes and shapes (contiguous).  Deterministic (see ``backward.py``).
- :func:`reader_csr`: the selection inverted per key tile (which rows read each tile), built
  on the device with torch ops and one host synchronisation (the number of entries, which
  sizes the arrays; the launcher overlaps it with the dq kernel, so the stream is never
  drained, but the call cannot be captured in a CUDA graph).
- :class:`SelectionAttentionFn` / :func:`sel_attn_train`: a plain autograd Function
  (forward = the forward kernel with LSE, backward = these kernels) for tests and benchmarks;
  the library's op registers :func:`sel_attn_backward` as its autograd formula instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..contract import clamp_ranges, resolve_scale
from ..device import device_of
from ..plan.backward import REDUCE_WARPS, BackwardMeta, backward_meta, chunk_size, dq_tokens_per_program
from ..plan.tiles import LOG2E
from . import backward
from .launch import _check_kernel_inputs, _interpreter_dot_f32


@dataclass
class ReaderCSR:
    """The readers of every key tile, in launch form (see ``sel_bwd_dkdv_kernel``).

    ``entries [E, 2]`` int32 ``(token, lo | hi << 16)`` grouped by tile (tile-major, then
    token, then span slot); ``chunks [P, 4]`` int64 ``(tile, e0, e1, slot)`` one row per
    dk/dv program (``tile = -1``: padding); ``tile_slots [tiles, 2]`` int64 ``(first slot,
    count)`` for the reduction; ``slots`` workspace slots to allocate.
    """

    entries: torch.Tensor
    chunks: torch.Tensor
    tile_slots: torch.Tensor
    slots: int
    n_tiles: int  # key tiles per (b, g)
    chunk: int
    n_entries: int


def _span_tiles(ranges: torch.Tensor, block_n: int):
    """Per span: first tile, tile count (0 for padding), start and end, flattened in (b, s, g, slot) order."""
    r = ranges.to(torch.int64)
    start, end = r[..., 0].reshape(-1), r[..., 1].reshape(-1)
    nonempty = end > start
    t_lo = torch.div(start, block_n, rounding_mode="floor")
    t_hi = torch.div(end - 1, block_n, rounding_mode="floor")
    count = torch.where(nonempty, t_hi - t_lo + 1, torch.zeros_like(t_lo))
    return t_lo, count, start, end


@dataclass
class ReaderCounts:
    """First phase of the CSR (no host synchronisation): readers per tile and per span."""

    per_tile: torch.Tensor  # [B * G * nt] int64
    offsets: torch.Tensor   # [B * G * nt + 1] int64, exclusive prefix sum of per_tile
    t_lo: torch.Tensor      # per span (flattened in (b, s, g, slot) order): first tile
    count: torch.Tensor     # per span: tiles it touches (0 for padding)
    start: torch.Tensor
    end: torch.Tensor
    base: torch.Tensor      # per span: global id of tile 0 of its (b, g)
    shape: tuple            # (B, S, G, n)
    nt: int
    block_n: int


def count_readers(ranges: torch.Tensor, T: int, block_n: int) -> ReaderCounts:
    """How many reader entries each ``block_n``-key tile of each ``(b, g)`` has (device ops only)."""
    B, S, G, n, _ = ranges.shape
    dev = ranges.device
    nt = -(-T // block_n)
    n_tiles = B * G * nt
    t_lo, count, start, end = _span_tiles(ranges, block_n)
    bg = (torch.arange(B, device=dev).view(B, 1, 1, 1) * G + torch.arange(G, device=dev).view(1, 1, G, 1))
    base = (bg * nt).expand(B, S, G, n).reshape(-1)
    # Readers per tile from a difference array (+1 at a span's first tile, -1 past its last).
    diff = torch.zeros(n_tiles + 1, dtype=torch.int64, device=dev)
    live = count > 0
    spill = torch.full_like(base, n_tiles)
    diff.index_add_(0, torch.where(live, base + t_lo, spill), live.to(torch.int64))
    diff.index_add_(0, torch.where(live, base + t_lo + count, spill), -live.to(torch.int64))
    per_tile = diff.cumsum(0)[:n_tiles]
    offsets = torch.zeros(n_tiles + 1, dtype=torch.int64, device=dev)
    torch.cumsum(per_tile, 0, out=offsets[1:])
    return ReaderCounts(per_tile, offsets, t_lo, count, start, end, base, (B, S, G, n), nt, block_n)


def reader_csr(ranges: torch.Tensor, T: int, block_n: int, *, h: int, rows_per_step: int,
               chunk: int | None = None, programs: int | None = None) -> ReaderCSR:
    """Invert ``ranges [B, S, G, n, 2]`` into the readers of each ``block_n``-key tile of each ``(b, g)``.

    A reader entry is one (row, span) pair intersecting the tile, with the keys ``[lo, hi)``
    of the tile it reads.  Entries are ordered by a stable sort on the tile, so within a tile
    they follow (token, span slot): the order, and with it every sum the kernels make, is
    fixed.  Each tile's entries are cut into chunks of at most ``chunk`` (default: about
    ``entries / programs``), one dk/dv program each; the programs are ordered longest first so
    the split tiles' chunks do not trail at the end of the launch.  One host synchronisation
    (the entry count); :func:`sel_attn_backward` overlaps it with the dq kernel.
    """
    counts = count_readers(ranges, T, block_n)
    return fill_readers(counts, int(counts.offsets[-1]), h=h, rows_per_step=rows_per_step, chunk=chunk,
                        programs=programs)


def fill_readers(c: ReaderCounts, n_entries: int, *, h: int, rows_per_step: int, chunk: int | None = None,
                 programs: int | None = None) -> ReaderCSR:
    """Second phase of the CSR, once the entry count is known on the host (device ops only)."""
    B, S, G, n = c.shape
    dev = c.per_tile.device
    if chunk is None:
        chunk = chunk_size(n_entries, programs or 1, rows_per_step, h)
    # Entries in (b, s, g, slot, tile) order, then a stable sort by global tile id.
    span = torch.repeat_interleave(torch.arange(c.count.numel(), device=dev), c.count, output_size=n_entries)
    first_entry = torch.cumsum(c.count, 0) - c.count
    tile = c.t_lo[span] + (torch.arange(n_entries, device=dev) - first_entry[span])
    key = c.base[span] + tile
    key = key.to(torch.int32) if c.per_tile.numel() < 2**31 else key
    order = torch.sort(key, stable=True).indices
    span, tile = span[order], tile[order]
    tok = torch.div(span, G * n, rounding_mode="floor") % S
    k0 = tile * c.block_n
    lo = (c.start[span] - k0).clamp_min(0)
    hi = (c.end[span] - k0).clamp_max(c.block_n)
    entries = torch.stack([tok, lo | (hi << 16)], dim=-1).to(torch.int32)
    chunks, tile_slots, slots = _chunk_table(c.per_tile, c.offsets, n_entries, chunk)
    return ReaderCSR(entries, chunks, tile_slots, slots, c.nt, chunk, n_entries)


def _host_ints_later(x: torch.Tensor):
    """A callable returning ``x.tolist()`` (a few int64), copied to the host without draining the
    stream: on CUDA the copy is asynchronous and the callable waits on an event recorded right
    after it, so kernels enqueued in between keep running."""
    if x.device.type != "cuda":
        values = x.tolist()
        return lambda: values
    buf = torch.empty(x.shape, dtype=x.dtype, pin_memory=True)
    buf.copy_(x, non_blocking=True)
    done = torch.cuda.Event()
    done.record(torch.cuda.current_stream(x.device))

    def get():
        done.synchronize()
        return buf.tolist()

    return get


def _nonfinite_rows(q, grad_out) -> torch.Tensor:
    """``[B, S, G, h]`` bool: the (row, head) pairs whose q or dO holds an inf or NaN."""
    return ~(torch.isfinite(q).all(-1) & torch.isfinite(grad_out).all(-1))


def _maybe_nonfinite(q, grad_out) -> torch.Tensor:
    """A one-element int64, 0 when q and dO are surely finite: their fp32 sums are.

    An inf or NaN anywhere makes a sum inf or NaN; a finite sum can also overflow (values near
    the fp32 limit), which only sends the call to the exact per-row test (:func:`_nonfinite_rows`,
    run after the host read) for nothing.  Two reductions reading q and dO once, where the
    per-row test's isfinite / all / and / not chain cost 0.9 ms per call at T = 8K on the H100
    (bench/profile_train.py)."""
    sums = torch.stack([q.sum(dtype=torch.float32), grad_out.sum(dtype=torch.float32)])
    return (~torch.isfinite(sums)).any().reshape(1).to(torch.int64)


def _isolate(q, grad_out, lse, bad):
    """q, dO and LSE for the dk/dv kernel with the non-finite (row, head) pairs isolated.

    A key tile's dot products mix every reader of the tile, so one inf in q or dO would turn the
    0 weights of the keys its row never read into NaN (0 * inf) in their dk/dv.  Such pairs get
    q = dO = 0 and LSE = NaN instead: their own keys still get NaN (as in exact arithmetic), the
    other keys of the tile nothing.  Runs only when the host already knows there is such a pair."""
    zero = torch.zeros((), dtype=q.dtype, device=q.device)
    nan = torch.full((), float("nan"), device=q.device)
    return (torch.where(bad[..., None], zero, q), torch.where(bad[..., None], zero, grad_out),
            torch.where(bad, nan, lse))


def _chunk_table(per_tile, offsets, n_entries: int, chunk: int):
    """One row ``(tile, e0, e1, slot)`` per dk/dv program, padded to a bound known on the host.

    Every tile gets at least one program (a tile nobody reads still stores zeros).  A tile
    with several chunks gets consecutive workspace slots.  The number of programs is at most
    ``tiles + entries // chunk`` and the number of slots at most ``2 * entries // chunk``
    (a split tile has more than ``chunk`` entries), so nothing here waits for the GPU.
    """
    dev = per_tile.device
    n_tiles = per_tile.numel()
    n_ch = torch.div(per_tile + chunk - 1, chunk, rounding_mode="floor").clamp_min(1)
    ch_end = torch.cumsum(n_ch, 0)
    bound = n_tiles + n_entries // chunk
    p = torch.arange(bound, device=dev)
    tile = torch.searchsorted(ch_end, p, right=True)
    valid = tile < n_tiles
    tile_c = tile.clamp_max(n_tiles - 1)
    j = p - (ch_end - n_ch)[tile_c]
    e0 = offsets[tile_c] + j * chunk
    e1 = torch.minimum(e0 + chunk, offsets[tile_c + 1])
    split = n_ch > 1
    slots_per_tile = torch.where(split, n_ch, torch.zeros_like(n_ch))
    first_slot = torch.cumsum(slots_per_tile, 0) - slots_per_tile
    slot = torch.where(split[tile_c] & valid, first_slot[tile_c] + j, torch.full_like(j, -1))
    chunks = torch.stack([torch.where(valid, tile_c, torch.full_like(tile_c, -1)),
                          e0, torch.where(valid, e1, e0), slot], dim=-1)
    # Longest first (stable: equal chunks keep tile order, so neighbouring tiles run together).
    size = chunks[:, 2] - chunks[:, 1]
    chunks = chunks[torch.sort(-size, stable=True).indices].contiguous()
    tile_slots = torch.stack([first_slot, slots_per_tile], dim=-1).contiguous()
    return chunks, tile_slots, 2 * n_entries // chunk


def _check_backward_inputs(q, k, v, ranges, out, lse, grad_out):
    _check_kernel_inputs(("q", q), ("k", k), ("v", v))
    B, S, G, h, Dk = q.shape
    Dv = v.shape[3]
    want = {"out": (out, (B, S, G, h, Dv)), "grad_out": (grad_out, (B, S, G, h, Dv)), "lse": (lse, (B, S, G, h))}
    for name, (x, shape) in want.items():
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(x).__name__}")
        if tuple(x.shape) != shape:
            raise ValueError(f"{name} has shape {list(x.shape)}; expected {list(shape)} from q {list(q.shape)} "
                             f"and v {list(v.shape)}")
        if x.device != q.device:
            raise ValueError(f"{name} is on {x.device} but q is on {q.device}")
    if lse.dtype != torch.float32:
        raise TypeError(f"lse has dtype {lse.dtype}; the forward stores it as float32")
    if ranges.dim() != 5 or tuple(ranges.shape[:3]) != (B, S, G) or ranges.shape[4] != 2:
        raise ValueError(f"ranges has shape {list(ranges.shape)}; expected [B, S, G, n, 2] = [{B}, {S}, {G}, n, 2]")


def sel_attn_backward(q, k, v, ranges, out, lse, grad_out, *, scale=None, plan: BackwardMeta | None = None,
                      **tune):
    """Gradients ``(dq, dk, dv)`` of ``out = sel_attn_ranges(q, k, v, ranges, scale=scale)``.

    ``out`` and ``lse`` are the forward's outputs, ``grad_out`` the gradient of ``out``.  Always
    deterministic (no atomics).  ``plan`` is the launch configuration (the operator passes
    ``plan.backward.for_call``'s); without it, ``backward_meta`` is asked with the device's row cap
    and ``tune``'s overrides (its keywords: ``dq_block_n``, ``dq_warps``, ``dq_stages``,
    ``kv_block_n``, ``rows``, ``kv_warps``, ``kv_stages``, ``chunk``, ``programs_per_sm``,
    ``dq_tokens`` (the multi-token dq kernel), ``tok_block_n``, ``tok_warps``, ``tok_stages``,
    ``delta`` (``"output"`` or ``"fp32"``, see :func:`_fill_delta`)).  Trusts its caller like the
    forward launchers: the ranges must satisfy the contract.
    """
    _check_backward_inputs(q, k, v, ranges, out, lse, grad_out)
    B, S, G, h, Dk = q.shape
    T, Dv = k.shape[2], v.shape[3]
    # Clamped like the forward kernels clamp them: no value can make the dq kernel or the reader
    # list (which indexes by span) leave [0, T), with validate=False too.  One small op on the device.
    ranges = clamp_ranges(ranges, T)
    n = ranges.shape[3]
    dev = device_of(q.device)
    if plan is None:
        tune.setdefault("max_rows", dev.max_rows)
        plan = backward_meta(h=h, Dk=Dk, Dv=Dv, n_spans=max(n, 1), dot_f32=_interpreter_dot_f32(q.dtype, dev),
                             **tune)
    elif tune:
        raise TypeError(f"pass either plan or launch overrides, not both (got {sorted(tune)})")
    meta = plan
    dq = torch.empty((B, S, G, h, Dk), dtype=q.dtype, device=q.device)
    dk = torch.empty((B, G, T, Dk), dtype=k.dtype, device=q.device)
    dv = torch.empty((B, G, T, Dv), dtype=v.dtype, device=q.device)
    if n == 0 or T == 0 or B * S * G == 0:  # no key is read: every gradient is zero
        return dq.zero_(), dk.zero_(), dv.zero_()
    sc = resolve_scale(scale, Dk)
    delta = torch.empty((B, S, G, h), dtype=torch.float32, device=q.device)
    # The CSR's entry count goes to the host while the dq kernel runs: the dk/dv work is
    # enqueued behind it, so the GPU never waits for the host.
    counts = count_readers(ranges, T, meta.KV_BLOCK_N)
    # The entry count and "maybe a non-finite q or dO" reach the host in one copy, behind the dq kernel.
    host = _host_ints_later(torch.cat([counts.offsets[-1:], _maybe_nonfinite(q, grad_out)]))
    exact = meta.delta == "fp32"
    if exact:
        _fill_delta(q, k, v, ranges, grad_out, delta, sc)
    _launch_dq(q, k, v, ranges, out, lse, grad_out, dq, delta, meta, sc)
    n_entries, nonfinite = host()
    csr = fill_readers(counts, n_entries, h=h, rows_per_step=meta.ROWS, chunk=meta.chunk_for(n_entries, h, dev.sm_count))
    qk, gk, lk = _isolate(q, grad_out, lse, _nonfinite_rows(q, grad_out)) if nonfinite else (q, grad_out, lse)
    _launch_dkdv(qk, k, v, lk, gk, delta, dk, dv, csr, meta, sc)
    return dq, dk, dv


def _fill_delta(q, k, v, ranges, grad_out, delta, sc: float):
    """``delta = rowsum(dO * O)`` into its buffer with O recomputed in fp32 by the forward kernel (its
    accumulator stored without rounding to q's dtype), for the dq kernel to load (``delta="fp32"``,
    see ``plan.backward.DELTA``).  The default (``"output"``) has the dq kernel compute delta from the
    stored output, like FlashAttention."""
    from .launch import selection

    o32 = selection(q, k, v, ranges, scale=sc, out=torch.empty(grad_out.shape, dtype=torch.float32,
                                                                device=q.device), decode=False)
    torch.sum(grad_out.float() * o32, dim=-1, out=delta)


def _launch_dq(q, k, v, ranges, out, lse, grad_out, dq, delta, meta: BackwardMeta, sc: float):
    """The dq kernel (it reads delta from its buffer with ``delta="fp32"``, else computes it)."""
    B, S, G, h, Dk = q.shape
    args = (q, k, v, out, grad_out, lse, delta, dq, ranges,
            S, G, h, Dk, v.shape[3], ranges.shape[3], sc * LOG2E, sc,
            *q.stride(), *k.stride(), *v.stride(), *out.stride(), *grad_out.stride(), *lse.stride(),
            *ranges.stride())
    if meta.TOK:
        backward.sel_bwd_dq_tok_kernel[(B * -(-S // meta.TOK), G)](
            *args, num_warps=meta.tok_warps, num_stages=meta.tok_stages, **meta.dq_tok_constexprs())
        return
    backward.sel_bwd_dq_kernel[(B * S, G * -(-h // meta.BLOCK_H))](
        *args, num_warps=meta.dq_warps, num_stages=meta.dq_stages, **meta.dq_constexprs())


def _launch_dkdv(q, k, v, lse, grad_out, delta, dk, dv, csr: ReaderCSR, meta: BackwardMeta, sc: float):
    B, S, G, h, Dk = q.shape
    T, Dv = k.shape[2], v.shape[3]
    width = meta.DK1 + meta.DK2 + meta.BLOCK_DV
    ws = torch.empty((max(csr.slots, 1), meta.KV_BLOCK_N, width), dtype=torch.float32, device=q.device)
    backward.sel_bwd_dkdv_kernel[(csr.chunks.shape[0],)](
        q, k, v, grad_out, lse, delta, dk, dv, ws, csr.entries, csr.chunks,
        S, G, h, Dk, Dv, T, csr.n_tiles, sc * LOG2E, sc,
        *q.stride(), *k.stride(), *v.stride(), *grad_out.stride(), *lse.stride(),
        num_warps=meta.kv_warps, num_stages=meta.kv_stages, **meta.dkdv_constexprs(),
    )
    if csr.slots:
        backward.sel_bwd_reduce_kernel[(csr.tile_slots.shape[0],)](
            ws, csr.tile_slots, dk, dv, T, csr.n_tiles, Dk, Dv,
            num_warps=REDUCE_WARPS, num_stages=1, **meta.reduce_constexprs(),
        )


class SelectionAttentionFn(torch.autograd.Function):
    """``out = sel_attn_ranges(q, k, v, ranges)`` (or ``sel_attn_tokens``) with these kernels as its backward."""

    @staticmethod
    def forward(ctx, q, k, v, ranges, scale, forward, tune):
        from . import launch

        fwd = {"ranges": launch.sel_attn_ranges, "tokens": launch.sel_attn_tokens}[forward]
        out, lse = fwd(q, k, v, ranges, scale=scale, return_lse=True)
        if forward == "tokens" and "dq_tokens" not in tune:  # the same locality serves the dq kernel
            tune = {**tune, "dq_tokens": dq_tokens_per_program(q.shape[3], device_of(q.device).max_rows) or None}
        ctx.save_for_backward(q, k, v, ranges, out, lse)
        ctx.scale, ctx.tune = scale, tune
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, ranges, out, lse = ctx.saved_tensors
        dq, dk, dv = sel_attn_backward(q, k, v, ranges, out, lse, grad_out, scale=ctx.scale, **ctx.tune)
        return dq, dk, dv, None, None, None, None


def sel_attn_train(q, k, v, ranges, *, scale=None, forward="ranges", **tune):
    """Differentiable selection attention on the Triton kernels (forward and backward).

    ``forward`` picks the forward kernel: ``"ranges"`` (one program per token) or
    ``"tokens"`` (several neighbouring tokens per program: faster when they share their
    selections); ``tune`` goes to :func:`sel_attn_backward`.
    """
    if forward not in ("ranges", "tokens"):
        raise ValueError(f"forward must be 'ranges' or 'tokens', got {forward!r}")
    return SelectionAttentionFn.apply(q, k, v, ranges, scale, forward, tune)
