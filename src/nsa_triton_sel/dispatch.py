"""The dispatcher: ``selection_attention`` routes a call to the Triton kernels or a reference path.

The way down to a kernel is described once, in the README ("From selection_attention to a kernel").
What this module does, in order:

1. :func:`checks.structure`: ranks, shapes, dtypes, devices (``contract``; no value read);
2. :func:`route`, cached per signature (backend, device, dtype, shapes) until ``config.refresh()``:
   the ``backend`` argument (``"triton"``, ``"sdpa"``, ``"reference"`` = packed SDPA in float32,
   ``"oracle"`` = float64; ``"auto"`` goes on), ``NSA_FORCE_PARITY=1``, ``NSA_USE_TRITON_SEL=0``,
   whether Triton can take the inputs (``failures.blocker``: device, dtype, head dims, an earlier
   kernel failure), then ``sel_triton_min_L`` (``NSA_SEL_TRITON_MIN_L``, else the
   ``data/thresholds.json`` entry measured on exactly this GPU and Triton release, else 1: the
   kernels take every call);
3. with ``validate``, the value checks: one host sync.  On the Triton path (CUDA, sel_triton_min_L
   <= 1) they are enqueued on the caller's stream just before the kernel, and the call waits for
   them only after enqueueing the kernel (the kernels clamp spans, so bad values cannot make them
   read out of bounds); elsewhere they run first;
4. the path: Triton through the operator (``op.sel_fwd``; a plain eager call without autograd runs
   its implementation, ``op.forward``, directly), whose plan (``plan.for_call``) fixes the kernel,
   tokens per program, decode split and tiles; a call whose rows all select fewer than
   ``sel_triton_min_L`` keys (only where a measurement raised it above 1) goes through packed SDPA
   instead.  Inputs that require grad take the operator, whose backward is the Triton backward
   kernels (``op.kernel_backward``).

A Triton failure in an eager call is reported once with its reason, remembered for that
(device, dtype, Dk, Dv, h) and answered by the packed-SDPA path (``failures.FORWARD``).  Only the
kernel call is guarded: a bad flag or a bad input raises and is never remembered as a kernel
failure, nor is an error the packed-SDPA path then hits on the same inputs (it is raised).  Under
``torch.func`` transforms the call takes the torch paths (``transforms``); meta tensors and
FakeTensors get their shapes from the operator's fake implementation on every backend.

Inside ``torch.compile`` (and during CUDA-graph capture) nothing may wait for the GPU, so the
decisions that would need the host are fixed when the graph is traced: no value validation
(``validate`` is ignored: validate a producer eagerly once), no ``sel_triton_min_L`` gate
(every row goes through the kernel, which is exact for any row; a GPU whose thresholds entry is
null still routes to packed SDPA, which breaks the graph), no fallback on a kernel failure (the
error propagates).  The route itself (flags, thresholds, device) is computed once at trace
time.  The multi-token switch is taken at run time without a sync (``plan/share.py``), and frozen
into a captured CUDA graph.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import torch

from . import checks, config, express, failures, known_bad, op, reference, transforms, varlen
from .contract import as_ranges, resolve_scale, wants_grad
from .device import Device, device_of

log = logging.getLogger("nsa_triton_sel")

BACKENDS = ("auto", "triton", "sdpa", "reference", "oracle")

known_bad.warn_if_known_bad()  # once, at import: the installed Triton inside a window for this GPU
_ROUTES: dict[tuple, Route] = {}


@dataclass(frozen=True)
class Route:
    """The path one call takes, and why (``NSA_DEBUG_SHAPES=1`` logs it)."""

    path: str  # "triton", "sdpa", "reference" or "oracle"
    reason: str
    min_L: int | None = None  # a call whose rows all have fewer keys goes to packed SDPA (eager only)
    per_head: bool = False  # NSA_SEL_TRITON_GROUP=0


config.REFRESH_HOOKS.append(_ROUTES.clear)


def _min_L(dev: Device, flags: config.Flags) -> tuple[int | None, str]:
    if flags.min_L_override is not None:
        return flags.min_L_override, f"NSA_SEL_TRITON_MIN_L={flags.min_L_override}"
    t = config.threshold_for(dev.name, dev.triton)
    log.debug("selection_attention: sel_triton_min_L=%s on %s (cc %s), Triton %s: %s",
              t.min_L, dev.name, dev.cc, dev.triton, t.why)
    return t.min_L, t.why


def _route(backend, device, dtype, h, Dk, Dv, flags) -> Route:
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}; accepted: {', '.join(BACKENDS)}")
    if backend in ("sdpa", "reference", "oracle"):
        return Route(backend, f"backend={backend!r}")
    if device.type == "meta":
        return Route("triton", "meta tensors: shapes through the operator's fake implementation", 0)
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
    per_head = not flags.group
    if explicit:
        return Route("triton", "backend='triton'", 0, per_head)
    min_L, why = _min_L(dev, flags)
    if min_L is None:
        return Route("sdpa", f"sel_triton_min_L is null (packed SDPA measured faster at every L): {why}")
    return Route("triton", f"sel_triton_min_L={min_L}: {why}", min_L, per_head)


def _route_traced(backend, device, dtype, h, Dk, Dv) -> Route:
    """:func:`_route` for a call being traced: torch.compile runs it once, as plain Python, on the sizes
    that do not vary."""
    return _route(backend, device, dtype, h, Dk, Dv, config.flags())


_route_traced = getattr(torch.compiler, "assume_constant_result", torch._dynamo.assume_constant_result)(_route_traced)


def route(q, k, v, *, backend: str = "auto", flags: config.Flags | None = None) -> Route:
    """The path ``selection_attention`` takes for these inputs, and why (cached per signature)."""
    h, Dk, Dv = q.shape[3], q.shape[-1], v.shape[-1]
    if flags is not None:
        return _route(backend, q.device, q.dtype, h, Dk, Dv, flags)
    key = (backend, q.device, q.dtype, h, Dk, Dv)
    hit = _ROUTES.get(key)
    if hit is None:
        hit = _ROUTES[key] = _route(backend, q.device, q.dtype, h, Dk, Dv, config.flags())
    return hit


def _reference_path(path, q, k, v, ranges, scale):
    if path == "reference":
        out, lse = reference.packed_sdpa(q.float(), k.float(), v.float(), ranges, scale=scale, return_lse=True,
                                         validate=False)
        return out.to(v.dtype), lse
    if path == "oracle":
        out, lse = reference.oracle(q, k, v, ranges, scale=scale, return_lse=True, validate=False)
        return out.to(device=q.device, dtype=v.dtype), lse.to(device=q.device, dtype=torch.float32)
    return reference.packed_sdpa(q, k, v, ranges, scale=scale, return_lse=True, validate=False)


def _kernel_call(q, k, v, spans, positions, block_size, scale, r: Route, eager: bool, flags: config.Flags):
    """The operator (autograd, tracing, meta) or, in a plain eager call without grad, its implementation.
    ``tokens``: ``NSA_SEL_TRITON_TOKENS`` (1 or N), or 0 = the planner decides."""
    args = (q, k, v, spans, positions, scale, block_size, r.per_head, flags.tokens or 0)
    if eager and not wants_grad(q, k, v):
        return op.forward(*args)
    return op.operator(flags.op)(*args)


def _below_threshold(spans, positions, block_size, T: int, min_L: int) -> bool:
    """Whether every row selects fewer than ``min_L`` keys (the seeds' gate: then the whole call
    goes through packed SDPA).  One host sync; only asked where a measured thresholds entry (or
    ``NSA_SEL_TRITON_MIN_L``) raised ``min_L`` above 1."""
    ranges = as_ranges(spans, positions, block_size, T)
    if ranges.numel() == 0:
        return True
    lens = (ranges[..., 1].to(torch.int64) - ranges[..., 0].to(torch.int64)).clamp_min(0).sum(-1)
    return int(lens.max()) < min_L


def _compute(q, k, v, spans, positions, block_size, scale, r: Route, eager: bool, flags: config.Flags,
             finish_checks=None):
    if r.path != "triton":
        if transforms.shapes_only(q):  # no values to compute with: the operator's fake implementation gives the shapes
            return _kernel_call(q, k, v, spans, positions, block_size, scale, r, False, flags), r
        return _reference_path(r.path, q, k, v, as_ranges(spans, positions, block_size, k.shape[2]), scale), r
    if not eager:  # traced, captured or meta: no host decision, no fallback
        return _kernel_call(q, k, v, spans, positions, block_size, scale, r, False, flags), r
    if r.min_L is not None and r.min_L > 1 and _below_threshold(spans, positions, block_size, k.shape[2], r.min_L):
        # (the value checks ran before: with min_L > 1 they never run beside the kernel)
        below = Route("sdpa", f"every row has fewer than sel_triton_min_L={r.min_L} keys ({r.reason})")
        return _reference_path("sdpa", q, k, v, as_ranges(spans, positions, block_size, k.shape[2]), scale), below

    def fallback():
        if finish_checks is not None:
            finish_checks()  # the fallback gathers by index: bad values must raise before it runs
        return _reference_path("sdpa", q, k, v, as_ranges(spans, positions, block_size, k.shape[2]), scale)

    try:
        return _kernel_call(q, k, v, spans, positions, block_size, scale, r, True, flags), r
    except Exception as exc:  # noqa: BLE001 - a kernel failure falls back, once per configuration
        result, failed = failures.FORWARD.recover(failures.key_of(q, v), exc, fallback, stacklevel=4)
    _ROUTES.clear()  # the next call of this configuration routes to packed SDPA
    express.clear()
    return result, Route("sdpa", f"Triton failed: {failed}")


def _debug(flags, stage, q, k, v, spans, positions, block_size, scale, r, out, t0):
    if stage == "route" and flags.debug_shapes:
        log.info("selection_attention q=%s%s k=%s%s v=%s%s spans=%s %s -> %s (%s)",
                 list(q.shape), q.stride(), list(k.shape), k.stride(), list(v.shape), v.stride(),
                 list(spans.shape), q.dtype, r.path, r.reason)
    if stage == "done" and flags.debug_timing:
        if q.device.type == "cuda":
            torch.cuda.synchronize(q.device)
        log.info("selection_attention path=%s time=%.3f ms", r.path, (time.perf_counter() - t0) * 1e3)
    if stage == "done" and flags.debug_compare:
        ref = reference.packed_sdpa(q, k, v, as_ranges(spans, positions, block_size, k.shape[2]), scale=scale,
                                    validate=False)
        err = (out.float() - ref.float()).abs()
        log.info("selection_attention compare path=%s vs packed-sdpa: max_abs=%.3e mean_abs=%.3e",
                 r.path, err.max().item() if err.numel() else 0.0, err.mean().item() if err.numel() else 0.0)


def selection_attention(
    q, k, v, ranges=None, *,
    block_indices=None, block_size=None, positions=None,
    scale=None, backend="auto", return_lse=False, validate=True,
    cu_seqlens=None, cu_seqlens_q=None, cu_seqlens_k=None,
):
    """NSA selection attention.

    ``q [B, S, G, h, Dk]``, ``k [B, G, T, Dk]``, ``v [B, G, T, Dv]`` and either ``ranges
    [B, S, G, n, 2]`` (``[start, end)`` spans, ``start == end`` is padding) or
    ``block_indices [B, S, G, n]`` with ``block_size`` (``-1`` = none; ``positions`` are the
    query positions, default ``arange(S)``, used for the causal clamp).  Returns ``out
    [B, S, G, h, Dv]`` in v's dtype and, with ``return_lse``, the natural-log LSE
    ``[B, S, G, h]`` in float32 (``-inf`` and zero output for a row with no key).
    Packed batches (``cu_seqlens``, or ``cu_seqlens_q`` with ``cu_seqlens_k``) and the layouts
    ``q [B, T, HQ, Dk]`` / ``[T, HQ, Dk]`` with ``k/v [B, T, H, D]`` / ``[T, H, D]``: see :mod:`.varlen`.
    """
    if cu_seqlens is not None or cu_seqlens_q is not None or cu_seqlens_k is not None or varlen.other_layout(q):
        return varlen.call(selection_attention, route, q, k, v, ranges, block_indices=block_indices, block_size=block_size,
                           positions=positions, scale=scale, backend=backend, return_lse=return_lse,
                           validate=validate, cu_seqlens=cu_seqlens, cu_seqlens_q=cu_seqlens_q,
                           cu_seqlens_k=cu_seqlens_k)
    lane = not validate and type(q) is torch.Tensor and q.dim() == 5 and q.shape[1] == 1 and (
        ranges is None or block_indices is None)
    if lane:  # a decode step seen before: straight to the kernel (express.py says when)
        hit = express.lookup(q, k, v, ranges if block_indices is None else block_indices, positions, block_size,
                             scale, backend, return_lse)
        if hit is not None:
            return hit
    flags = config.flags()
    eager = transforms.plain_eager(q)
    user_scale, user_block_size = scale, block_size
    dims, spans, block_size = checks.structure(q, k, v, ranges, block_indices, block_size, positions, eager)
    scale = resolve_scale(scale, dims.Dk)
    transform = transforms.transform_of(q, k, v, spans, positions) if eager else None
    if transform:  # torch.func: the torch paths, never the operator (no functorch rule)
        eager, r = False, Route(*transforms.route_under(backend, transform, BACKENDS))
    elif eager:
        r = route(q, k, v, backend=backend)
    else:
        r = _route_traced(backend, q.device, q.dtype, int(dims.h), int(dims.Dk), int(dims.Dv))
    finish_checks = None
    if validate and (eager or transform) and spans.numel():
        if checks.beside_the_kernel(r, q.device):
            finish_checks = checks.start_beside(spans, positions, block_size, dims, q.device)
        else:
            checks.before_the_kernel(spans, positions, block_size, dims)
    debug = flags.debug_shapes or flags.debug_timing or flags.debug_compare
    if debug:
        _debug(flags, "route", q, k, v, spans, positions, block_size, scale, r, None, 0.0)
    t0 = time.perf_counter() if debug else 0.0
    (out, lse), r = _compute(q, k, v, spans, positions, block_size, scale, r, eager, flags, finish_checks)
    if finish_checks is not None:
        finish_checks()  # waits for the value checks only; the kernel keeps running
    elif lane and express.ENABLED and eager and not transform and r.path == "triton" \
            and (r.min_L is None or r.min_L <= 1) and not debug and not wants_grad(q, k, v):
        dev = device_of(q.device)
        if q.is_cuda or dev.interpreter:  # where op.forward launches a kernel
            express.remember(q, k, v, spans, positions, user_block_size, user_scale, backend, return_lse,
                             plan=op.plan_of(q, k, v, spans, positions, r.per_head, flags.tokens or 0, dev),
                             resolved_scale=scale, kernel_block_size=block_size)
    if debug:
        _debug(flags, "done", q, k, v, spans, positions, block_size, scale, r, out, t0)
    return (out, lse) if return_lse else out
