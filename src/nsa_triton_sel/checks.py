"""The checks of a ``selection_attention`` call: its structure, then its values (before the kernel, or beside it).

:func:`structure` runs ``contract``'s checks of ranks, shapes, dtypes and devices (no value read;
a repeated eager signature is remembered).

``validate=True`` reads the spans' values (``contract.range_flags`` / ``block_flags``): one host
sync.  Before the kernel, that sync leaves the GPU idle while the host then launches the kernel;
on the Triton path the kernel can instead be enqueued right behind the checks before the host waits
for them, because the kernels clamp every span into ``[0, T)`` and so never read out of bounds,
whatever the values.
"""

from __future__ import annotations

import torch

from .contract import (block_flags, check_block_indices, check_block_size, check_positions, check_qkv,
                       check_ranges, n_blocks, raise_block_errors, raise_range_errors, range_flags)


def _spans(ranges, block_indices, block_size, positions, dims, device):
    """The spans argument (ranges, or block indices) checked for structure: ``(spans, block_size)``."""
    if (ranges is None) == (block_indices is None):
        raise ValueError("pass exactly one of ranges [B, S, G, n, 2] or block_indices [B, S, G, n] (with block_size)")
    if ranges is not None:
        if block_size is not None or positions is not None:
            given = ", ".join(n for n, x in (("block_size", block_size), ("positions", positions)) if x is not None)
            raise ValueError(f"{given} given with ranges: block_size and positions go with block_indices "
                             f"(ranges already carry the causal clamp); pass one or the other")
        check_ranges(ranges, dims, device, validate=False)
        return ranges, 0
    check_block_indices(block_indices)
    if block_size is None:
        raise ValueError("block_indices needs block_size (the number of keys per block)")
    block_size = check_block_size(block_size)
    if block_indices.device != device:
        raise ValueError(f"block_indices is on {block_indices.device}; it must be on q's device {device}")
    if tuple(block_indices.shape[:3]) != (dims.B, dims.S, dims.G):
        raise ValueError(f"block_indices has shape {list(block_indices.shape)}; expected [B, S, G, n] = "
                         f"[{dims.B}, {dims.S}, {dims.G}, n] to match q")
    if positions is not None:
        check_positions(positions, dims.B, dims.S, device)
    return block_indices, block_size


_CHECKED: dict[tuple, tuple] = {}  # call signature -> (Dims, block_size) of a call whose structure passed


def structure(q, k, v, ranges, block_indices, block_size, positions, eager: bool):
    """``(dims, spans, block_size)`` after the structural checks of ``contract`` (no value is read).

    Those checks are pure functions of the shapes, dtypes, devices and layouts, so an eager call
    remembers the signature that passed and a repeated call (a decode step) skips them: measured
    on this project's CPU box, 15 of the dispatcher's 33 us per call were these checks.
    """
    spans = ranges if block_indices is None else block_indices
    key = None
    # Only a signature of real tensors and a plain int block_size is remembered: a numpy array, a list or
    # block_size=8.0 / True must reach the checks (and raise) on every call, not match a cached 8 / 1.
    cacheable = (all(isinstance(x, torch.Tensor) for x in (q, k, v, spans))
                 and (block_size is None or type(block_size) is int)
                 and (positions is None or isinstance(positions, torch.Tensor)))
    if eager and cacheable and (ranges is None or block_indices is None):
        pos = None if positions is None else (positions.shape, positions.dtype, positions.device, positions.layout)
        key = (q.shape, k.shape, v.shape, spans.shape, q.dtype, k.dtype, v.dtype, spans.dtype, q.device, k.device,
               v.device, spans.device, q.layout, k.layout, v.layout, spans.layout, ranges is None, block_size, pos)
        hit = _CHECKED.get(key)
        if hit is not None:
            return hit[0], spans, hit[1]
    dims = check_qkv(q, k, v, allow_fp32=True)
    spans, block_size = _spans(ranges, block_indices, block_size, positions, dims, q.device)
    if key is not None and len(_CHECKED) < 4096:
        _CHECKED[key] = (dims, block_size)
    return dims, spans, block_size


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

    The kernels clamp every span into ``[0, T)`` (``kernels/common.py _clamp_spans``; block indices are
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
    ordered after an earlier one on the stream, whose event the reader waits for."""
    key = (device, tuple(flags.shape), flags.dtype)
    hit = _LANDINGS.get(key)
    if hit is None:
        hit = _LANDINGS[key] = (torch.empty(flags.shape, dtype=flags.dtype, pin_memory=True), torch.cuda.Event())
    return hit


def start_beside(spans, positions, block_size, dims, device):
    """Enqueue the value checks on the caller's stream, just before the kernel; returns ``finish()``, which
    waits for them only (the kernel, enqueued behind them before the host waits, keeps the GPU busy) and
    raises what they found."""
    flags = value_flags(spans, positions, block_size, dims)
    host, done = _landing(device, flags)
    host.copy_(flags, non_blocking=True)
    done.record(torch.cuda.current_stream(device))

    def finish():
        done.synchronize()
        raise_value_errors(spans, positions, block_size, dims, host.tolist())

    return finish


def before_the_kernel(spans, positions, block_size, dims) -> None:
    """The value checks, with one host sync, before anything reads the spans."""
    raise_value_errors(spans, positions, block_size, dims, value_flags(spans, positions, block_size, dims).tolist())
