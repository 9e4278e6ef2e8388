"""Step 1 of the way down: ``selection_attention``, the public function.

One way down, each step called once (README, "From selection_attention to a kernel"):

1. here: the public function; a repeated decode step whose signature walked the steps below before runs the
   allocations and launches they made then (``replay.py``: steps 2-5, remembered as generated Python);
2. ``arguments.parse``: layouts, packed batches, the checks, the route -> one ``Call``;
3. ``op``: the ``torch.library`` operator (autograd, ``torch.compile``, fake tensors); a plain eager call
   that needs no autograd runs its implementation directly;
4. ``plan.plan_call``: everything about the launches, forward and backward, remembered per signature;
5. ``kernels.launch``: launches what the plan says (through the bound launcher on a GPU);
6. ``kernels.forward`` / ``kernels.backward``: the Triton kernels.

A reference route (packed SDPA, the float64 oracle) is computed here instead of steps 3-6.  A kernel failure
in an eager call is reported once with its reason, remembered for that (device, dtype, Dk, Dv, h) and
answered by the packed-SDPA path (``failures.FORWARD``); a bad flag or input raises and is never remembered
as a kernel failure, nor is an error the packed-SDPA path then hits on the same inputs.  Traced and captured
calls never fall back (nothing there may wait for the GPU; the error propagates).
"""

from __future__ import annotations

import logging
import time

import torch

from . import arguments, failures, known_bad, op, reference, replay
from .arguments import Call, Route
from .contract import as_ranges, is_compiling

log = logging.getLogger("nsa_triton_sel")

known_bad.warn_if_known_bad()  # once, at import: the installed Triton inside a window for this GPU


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
    ``[B, S, G, h]`` in float32 (``-inf`` and zero output for a row with no key); both are
    differentiable.  Packed batches (``cu_seqlens``, or ``cu_seqlens_q`` with ``cu_seqlens_k``) and
    the layouts ``q [B, T, HQ, Dk]`` / ``[T, HQ, Dk]`` with ``k/v [B, T, H, D]`` / ``[T, H, D]``: see
    ``arguments/layouts.py``.
    """
    replayable = validate is False and cu_seqlens is None and cu_seqlens_q is None and cu_seqlens_k is None
    if replayable and not is_compiling():
        hit = replay.lookup(q, k, v, ranges, block_indices, block_size, positions, scale, backend, return_lse)
        if hit is not None:
            return hit
    call = arguments.parse(q, k, v, ranges, block_indices=block_indices, block_size=block_size,
                           positions=positions, scale=scale, backend=backend, return_lse=return_lse,
                           validate=validate, cu_seqlens=cu_seqlens, cu_seqlens_q=cu_seqlens_q,
                           cu_seqlens_k=cu_seqlens_k)
    if replayable and replay.recordable(call):
        return replay.record(run, call, (q, k, v, ranges, block_indices, block_size, positions, scale, backend,
                                         return_lse))
    return run(call)


def run(call: Call):
    """Compute a parsed call and give the result back in the caller's layout (the drop-ins enter here)."""
    debug = call.flags.debug_shapes or call.flags.debug_timing or call.flags.debug_compare
    t0 = _debug_start(call) if debug else 0.0
    (out, lse), route = _compute(call)
    if call.finish is not None:
        call.finish()  # waits for the value checks only; the kernel keeps running
    if debug:
        _debug_done(call, route, out, t0)
    if call.layout.back is not None:  # back in the caller's layout
        out, lse = call.layout.back(out, lse if call.return_lse else None)
    return (out, lse) if call.return_lse else out


def _reference(path: str, c: Call):
    """A reference path on the spans as the kernels read them (clamped into [0, T]: with validate=False no
    value can make it index out of bounds or wrap around)."""
    T = c.k.shape[2]
    ranges = as_ranges(c.spans, c.positions, c.block_size, T)
    q, k, v = c.q, c.k, c.v
    if path == "reference":
        out, lse = reference.packed_sdpa(q.float(), k.float(), v.float(), ranges, scale=c.scale, return_lse=True,
                                         validate=False)
        return out.to(v.dtype), lse
    if path == "oracle":
        out, lse = reference.oracle(q, k, v, ranges, scale=c.scale, return_lse=True, validate=False)
        return out.to(device=q.device, dtype=v.dtype), lse.to(device=q.device, dtype=torch.float32)
    return reference.packed_sdpa(q, k, v, ranges, scale=c.scale, return_lse=True, validate=False)


def _compute(c: Call) -> tuple[tuple, Route]:
    r = c.route
    if c.kind == "shapes":  # meta / fake tensors: the operator's fake implementation gives the shapes
        return op.operator(r.op)(*c.op_args), r
    if not r.kernels:
        return _reference(r.path, c), r
    if c.kind != "eager":  # traced or captured: no host decision, no fallback
        return op.operator(r.op)(*c.op_args), r
    try:
        if torch.is_grad_enabled() and (c.q.requires_grad or c.k.requires_grad or c.v.requires_grad):
            return op.operator(r.op)(*c.op_args), r  # autograd: the operator's formula, the backward kernels
        return op.forward(*c.op_args), r  # no autograd: the implementation, without torch.ops dispatch
    except Exception as exc:  # noqa: BLE001 - a kernel failure falls back, once per configuration
        def fallback():
            if c.finish is not None:
                c.finish()  # the fallback gathers by index: bad values must raise before it runs
            return _reference("sdpa", c)

        result, failed = failures.FORWARD.recover(failures.key_of(c.q, c.v), exc, fallback, stacklevel=4)
    arguments.forget_routes()  # the next call of this configuration routes to packed SDPA
    replay.forget()
    return result, Route("sdpa", f"Triton failed: {failed}")


def _debug_start(c: Call) -> float:
    if c.flags.debug_shapes:
        q, k, v, s = c.q, c.k, c.v, c.spans
        log.info("selection_attention q=%s%s k=%s%s v=%s%s spans=%s %s -> %s (%s)", list(q.shape), q.stride(),
                 list(k.shape), k.stride(), list(v.shape), v.stride(), list(s.shape), q.dtype, c.route.path,
                 c.route.reason)
    return time.perf_counter()


def _debug_done(c: Call, r: Route, out, t0: float) -> None:
    if c.flags.debug_timing:
        if c.q.device.type == "cuda":
            torch.cuda.synchronize(c.q.device)
        log.info("selection_attention path=%s time=%.3f ms", r.path, (time.perf_counter() - t0) * 1e3)
    if c.flags.debug_compare:
        ref = _reference("sdpa", c)[0]
        err = (out.float() - ref.float()).abs()
        log.info("selection_attention compare path=%s vs packed-sdpa: max_abs=%.3e mean_abs=%.3e",
                 r.path, err.max().item() if err.numel() else 0.0, err.mean().item() if err.numel() else 0.0)
