"""The decode step's express lane: a repeated plain call skips the dispatcher's steps (issue 22).

A decode step calls ``selection_attention`` with the same shapes, strides, dtypes and options on
every token, and every step of the hall (``dispatch`` -> ``checks`` -> ``op`` -> ``plan``) gives
the same answer each time: the structure passed, the route is a kernel, the plan is the same.  A
call that took that way once is remembered here, and a later call with the same signature goes
straight to ``kernels.launch.launch`` with the remembered plan.

Only calls whose answers cannot depend on anything but the signature use the lane:

- one query position (``S == 1``): the plan reads no span value (no multi-token decision);
- ``validate=False``: the value checks read values (and sync);
- a plain eager call: no grad wanted, no ``torch.func`` transform, no tracing, no fake tensors,
  no CUDA-graph capture, no debug flag;
- the kernel route without the ``sel_triton_min_L`` gate (which reads the spans' lengths).

The signature holds every shape, stride, dtype and device the dispatcher's checks looked at, the
options, and the flags object (``config.refresh`` makes a new one).  A kernel failure, a refresh or
a new known-bad window clears the lane (:func:`clear`); so does any error in the lane itself, and
the call then takes the full way, which raises or recovers as before.
"""

from __future__ import annotations

import torch

from . import config, transforms
from .kernels import launch

ENABLED = True  # benchmarks switch it off to measure the full way
MAX_ENTRIES = 1024
_LANES: dict = {}
_functorch = torch._C._functorch.is_functorch_wrapped_tensor


def _signature(q, k, v, spans, positions, block_size, scale, backend, return_lse, flags):
    pos = None if positions is None else (positions.shape, positions.stride(), positions.dtype, positions.device)
    return (q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), spans.shape, spans.stride(), pos,
            q.dtype, k.dtype, v.dtype, spans.dtype, q.device, k.device, v.device, spans.device,
            block_size, scale, backend, return_lse, id(flags))


def _plain(q, k, v) -> bool:
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return False
    if _functorch(q) or _functorch(k) or _functorch(v):
        return False
    return transforms.plain_eager(q)


def lookup(q, k, v, spans, positions, block_size, scale, backend, return_lse):
    """The call's result through the lane, or None (not remembered, or not a lane call)."""
    if not ENABLED or not _LANES or type(spans) is not torch.Tensor or (
            positions is not None and type(positions) is not torch.Tensor):
        return None
    flags = config.flags()
    try:
        entry = _LANES.get(_signature(q, k, v, spans, positions, block_size, scale, backend, return_lse, flags))
    except Exception:  # noqa: BLE001 - not tensors, an unhashable scale, ...: the full way says what is wrong
        return None
    if entry is None or not _plain(q, k, v):
        return None
    plan, resolved_scale, kernel_block_size, _ = entry
    try:
        out, lse = launch.launch(plan, q, k, v, spans, scale=resolved_scale, return_lse=True, positions=positions,
                                 block_size=kernel_block_size)
    except Exception:  # noqa: BLE001 - the full way raises (or recovers) with its own message
        clear()
        return None
    return (out, lse) if return_lse else out


def remember(q, k, v, spans, positions, block_size, scale, backend, return_lse, *, plan, resolved_scale: float,
             kernel_block_size: int):
    """Remember a call that took the kernel way with ``plan`` (the dispatcher says when it qualifies).

    ``block_size`` and ``scale`` are the caller's arguments (the signature); ``resolved_scale`` and
    ``kernel_block_size`` what the dispatcher made of them (what the launch needs)."""
    if not ENABLED or type(spans) is not torch.Tensor or (positions is not None and type(positions) is not torch.Tensor):
        return
    if not (scale is None or type(scale) in (int, float)) or not (block_size is None or type(block_size) is int):
        return  # a tensor scale (hashed by identity) would never hit again and would stay alive in the key
    flags = config.flags()
    if flags.debug_shapes or flags.debug_timing or flags.debug_compare:
        return
    try:
        key = _signature(q, k, v, spans, positions, block_size, scale, backend, return_lse, flags)
        hash(key)
    except Exception:  # noqa: BLE001 - e.g. a tensor scale: such calls keep the full way
        return
    if len(_LANES) >= MAX_ENTRIES:
        _LANES.clear()
    _LANES[key] = (
        plan, resolved_scale, kernel_block_size, flags)  # the flags object stays alive with its entry (its id
    # is part of the signature and must not be reused)


def clear() -> None:
    _LANES.clear()


config.REFRESH_HOOKS.append(clear)
