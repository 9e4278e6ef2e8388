"""Which path a call takes, and why: the kernels (through the operator) or a reference path.

In order: the ``backend`` argument (``"triton"``, ``"sdpa"``, ``"reference"`` = packed SDPA in float32,
``"oracle"`` = float64; ``"auto"`` goes on), ``NSA_FORCE_PARITY=1``, ``NSA_USE_TRITON_SEL=0``, whether the
kernels can take the inputs (``failures.blocker``: Triton importable, device, dtype, head dims, an earlier
kernel failure), then ``sel_triton_min_L`` (``NSA_SEL_TRITON_MIN_L``, else the ``data/thresholds.json``
entry measured on exactly this GPU and Triton release, else 1: the kernels take every call).

A traced call (``torch.compile``) takes its route once, at trace time, from :func:`traced`, which Dynamo
runs as plain Python and folds into a constant: it returns plain values only (old Dynamo releases, torch
2.4, cannot compare a user object's attribute, nor fold ``os.environ`` lookups inside a trace).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch

from .. import config, failures
from ..device import device_of
from ..contract import as_ranges

log = logging.getLogger("nsa_triton_sel")

BACKENDS = ("auto", "triton", "sdpa", "reference", "oracle")


@dataclass(frozen=True)
class Route:
    """The path one call takes, and why (``NSA_DEBUG_SHAPES=1`` logs it)."""

    path: str  # "triton", "sdpa", "reference" or "oracle"
    reason: str
    min_L: int | None = None  # a call whose rows all have fewer keys goes to packed SDPA (eager only)
    per_head: bool = False  # NSA_SEL_TRITON_GROUP=0
    tokens: int = 0  # NSA_SEL_TRITON_TOKENS (1 or N), 0: the planner decides
    op: str = "custom"  # NSA_SEL_OP: the operator torch.compile sees
    kernels: bool = field(init=False)  # path == "triton" (a field, read on every call: no property call)

    def __post_init__(self):
        object.__setattr__(self, "kernels", self.path == "triton")


def route(backend, device, dtype, h: int, Dk: int, Dv: int, flags: config.Flags) -> Route:
    """The path of a call with these properties (the caller caches it per signature)."""
    if backend in ("sdpa", "reference", "oracle"):
        return Route(backend, f"backend={backend!r}")
    knobs = dict(per_head=not flags.group, tokens=flags.tokens or 0, op=flags.op)
    if device.type == "meta":
        return Route("triton", "meta tensors: shapes through the operator's fake implementation", 0, **knobs)
    explicit = backend == "triton"
    if not explicit:
        if flags.force_parity:
            return Route("reference", "NSA_FORCE_PARITY=1")
        if flags.use_triton is False:
            return Route("sdpa", "NSA_USE_TRITON_SEL=0")
    dev = device_of(device)
    blocker = failures.blocker(dev, device, dtype, Dk, Dv, h, failures.FORWARD)
    if blocker:
        if explicit:
            raise ValueError(f"backend='triton' cannot run these inputs: {blocker}")
        return Route("sdpa", blocker)
    if explicit:
        return Route("triton", "backend='triton'", 0, **knobs)
    if flags.min_L_override is not None:
        min_L, why = flags.min_L_override, f"NSA_SEL_TRITON_MIN_L={flags.min_L_override}"
    else:
        t = config.threshold_for(dev.name, dev.triton)
        min_L, why = t.min_L, t.why
        log.debug("selection_attention: sel_triton_min_L=%s on %s (cc %s), Triton %s: %s",
                  t.min_L, dev.name, dev.cc, dev.triton, t.why)
    if min_L is None:
        return Route("sdpa", f"sel_triton_min_L is null (packed SDPA measured faster at every L): {why}")
    return Route("triton", f"sel_triton_min_L={min_L}: {why}", min_L, **knobs)


def _traced(backend: str, device, dtype, h: int, Dk: int, Dv: int) -> tuple:
    """``(path, per_head, tokens, op)`` of a traced call: plain values, folded into the graph."""
    r = route(backend, device, dtype, h, Dk, Dv, config.flags())
    return r.path, r.per_head, r.tokens, r.op


_traced = getattr(torch.compiler, "assume_constant_result", torch._dynamo.assume_constant_result)(_traced)


def traced(backend, device, dtype, h: int, Dk: int, Dv: int) -> Route:
    """The route of a call being traced (``torch.compile``), taken once at trace time."""
    path, per_head, tokens, op = _traced(backend, device, dtype, h, Dk, Dv)
    return Route(path, "traced", 0, per_head, tokens, op)


def under_transform(backend, transform: str) -> Route:
    """The route of a call under a ``torch.func`` transform (the operator has no functorch rule)."""
    if backend == "triton":
        raise NotImplementedError(
            f"backend='triton' is not supported under torch.func transforms ({transform}): the Triton operator "
            f"has no functorch rule; accepted: torch.autograd (loss.backward(), torch.autograd.grad) and a real "
            f"batch dimension B instead of vmap, or backend='auto'/'sdpa'/'reference'/'oracle' under torch.func")
    if backend == "auto":
        return Route("sdpa", f"torch.func {transform}: the packed-SDPA path (the Triton operator has no functorch rule)")
    return Route(backend, f"backend={backend!r} under torch.func {transform}")


def below_threshold(r: Route, spans, positions, block_size: int, T: int) -> Route:
    """``r``, or the packed-SDPA route when every row selects fewer than ``r.min_L`` keys (the seeds' gate;
    one host sync, only where a measured entry or ``NSA_SEL_TRITON_MIN_L`` raised ``min_L`` above 1)."""
    if not r.kernels or r.min_L is None or r.min_L <= 1:
        return r
    ranges = as_ranges(spans, positions, block_size, T)
    if ranges.numel():
        lens = (ranges[..., 1].to(torch.int64) - ranges[..., 0].to(torch.int64)).clamp_min(0).sum(-1)
        if int(lens.max()) >= r.min_L:
            return r
    return Route("sdpa", f"every row has fewer than sel_triton_min_L={r.min_L} keys ({r.reason})")
