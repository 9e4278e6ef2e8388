"""The value checks of a ``selection_attention`` call: before the kernel, or beside it.

``validate=True`` reads the spans' values (``contract.range_flags`` / ``block_flags``): one host
sync.  Before the kernel, that sync leaves the GPU idle while the host then launches the kernel;
on the Triton path the kernel can instead be enqueued right behind the checks before the host waits
for them, because the kernels clamp every span into ``[0, T)`` and so never read out of bounds,
whatever the values.
"""

from __future__ import annotations

import torch

from . import plan, share
from .contract import block_flags, n_blocks, raise_block_errors, raise_range_errors, range_flags


_SIDE_STREAMS: dict = {}  # device -> the stream the value checks run on beside the kernel


def value_flags(spans, positions, block_size, dims):
    if spans.dim() == 5:
        return range_flags(spans, dims.T)
    return block_flags(spans, n_blocks(dims.T, block_size), positions)


def raise_value_errors(spans, positions, block_size, dims, values):
    if spans.dim() == 5:
        raise_range_errors(spans, dims.T, values)
    else:
        raise_block_errors(spans, n_blocks(dims.T, block_size), positions, values)


def beside_the_kernel(r, device) -> bool:
    """Whether the value checks may run beside the kernel instead of before it.

    The kernels clamp every span into ``[0, T)`` (``forward._clamp_spans``; block indices are
    clamped by construction), so invalid values cannot make them read out of bounds: the checks
    are enqueued with the kernel right behind them, and raise when they answer.  The packed-SDPA
    paths (other routes, the ``sel_triton_min_L`` gate) gather by index and must not see bad
    values: their checks run first.  Measured on the H100 (Triton 3.6, T = 8K prefill): checks
    first cost +16 % (random) and +31 % (local) over ``validate=False``.
    """
    return device.type == "cuda" and r.path == "triton" and (r.min_L is None or r.min_L <= 1)


_LANDINGS: dict = {}  # (device, shape, dtype) -> (pinned host buffer, event): reused by every call


def _landing(device, flags):
    """A pinned host buffer and an event for the flags' copy, made once per signature: allocating pinned
    memory costs hundreds of microseconds (H100 host: validate=True 816 us per decode call with a
    fresh buffer per call).  Reuse is safe: calls are sequential, and a later copy into the buffer is
    ordered after an earlier one on the side stream, whose event the reader waits for."""
    key = (device, tuple(flags.shape), flags.dtype)
    hit = _LANDINGS.get(key)
    if hit is None:
        hit = _LANDINGS[key] = (torch.empty(flags.shape, dtype=flags.dtype, pin_memory=True), torch.cuda.Event())
    return hit


PLACEMENTS = ("stream", "side")
# Where the checks beside the kernel run: "stream" = on the caller's stream, just before the kernel
# (the kernel is enqueued behind them before the host waits, so the GPU never idles); "side" = on a
# high-priority side stream that first waits for the caller's stream, running beside the kernel.
PLACEMENT = "stream"


def start_beside(spans, positions, block_size, dims, device):
    """Enqueue the value checks (see ``PLACEMENT``); returns ``finish()``, which waits for them only
    (not for the kernel enqueued meanwhile) and raises what they found."""
    current = torch.cuda.current_stream(device)
    stream = current if PLACEMENT == "stream" else _side_stream(device)
    if stream is not current:
        stream.wait_stream(current)  # the caller's spans are written on its stream
    with torch.cuda.stream(stream):
        flags = value_flags(spans, positions, block_size, dims)
        host, done = _landing(device, flags)
        host.copy_(flags, non_blocking=True)
        done.record(stream)
    if stream is not current:
        for x in (spans, positions):  # read on the side stream: keep their memory until it is done
            if isinstance(x, torch.Tensor) and x.device.type == "cuda":
                x.record_stream(stream)

    def finish():
        done.synchronize()
        raise_value_errors(spans, positions, block_size, dims, host.tolist())

    return finish


def _side_stream(device):
    side = _SIDE_STREAMS.get(device)
    if side is None:
        side = _SIDE_STREAMS[device] = torch.cuda.Stream(device, priority=-1)  # ahead of the kernel's blocks
    return side


def before_the_kernel(spans, positions, block_size, dims, r, device) -> int | None:
    """The value checks, with one host sync; returns the tokens per program (read in the same sync)."""
    flags = value_flags(spans, positions, block_size, dims)
    dev = plan.device_of(device) if r.path == "triton" else None
    tok = plan.auto_tokens(dims.h, dims.S, dev) if r.path == "triton" and r.tokens is None else 1
    if tok > 1:
        values = torch.cat([flags.float(), share.share_fraction(spans).reshape(1)]).tolist()
    else:
        values = flags.tolist()
    raise_value_errors(spans, positions, block_size, dims, values)
    if tok > 1:
        return tok if share.remember(spans, values[-1]) else 1
    return r.tokens
