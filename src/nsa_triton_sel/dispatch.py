"""The dispatcher: ``selection_attention`` picks the Triton kernels or a reference path.

Following ``q`` through one call:

1. structural checks (``contract``: ranks, shapes, dtypes, devices, the scale; no values read);
2. :func:`route`, cached per signature (backend, grad, device, dtype, shapes) until
   ``config.refresh()``: the ``backend`` argument (``"triton"``, ``"sdpa"``, ``"reference"`` =
   packed SDPA in float32, ``"oracle"`` = float64; ``"auto"`` goes on), ``NSA_FORCE_PARITY=1``,
   ``NSA_USE_TRITON_SEL=0``, whether Triton can take the inputs (device, dtype, head dims, an earlier kernel failure), then
   ``sel_triton_min_L`` (``NSA_SEL_TRITON_MIN_L``, else the ``data/thresholds.json`` entry measured
   on exactly this GPU and Triton release, else 1: the kernels take every call).  For Triton it also fixes per-head programs and tokens per program (``plan``);
3. with ``validate``, the value checks: one host sync.  On the Triton path (CUDA, sel_triton_min_L <= 1) they
   run on a side stream beside the kernel and the call waits for them only, after enqueueing the
   kernel (the kernels clamp spans, so bad values cannot make them read out of bounds); elsewhere
   they run first, and that sync also reads the multi-token switch;
4. the path: Triton through the operator (``op.sel_fwd``; a plain eager call without autograd
   runs its implementation directly); a call whose rows all select fewer than ``sel_triton_min_L``
   keys (only where a measurement raised it above 1) goes through packed SDPA instead.
   Inputs that require grad take the operator, whose backward is the Triton backward kernels
   (``op.kernel_backward``).

A Triton failure in an eager call is reported once with its reason, remembered for that
(device, dtype, Dk, Dv, h) and answered by the packed-SDPA path.  Only the kernel call is
guarded: a bad flag or a bad input raises and is never remembered as a kernel failure, nor is
an error the packed-SDPA path then hits on the same inputs (it is raised).  Under ``torch.func``
transforms the call takes the torch paths (``transforms``); meta tensors and FakeTensors get
their shapes from the operator's fake implementation on every backend.

Inside ``torch.compile`` (and during CUDA-graph capture) nothing may wait for the GPU, so the
decisions that would need the host are fixed when the graph is traced: no value validation
(``validate`` is ignored: validate a producer eagerly once), no ``sel_triton_min_L`` gate
(every row goes through the kernel, which is exact for any row; a GPU whose thresholds entry is
null still routes to packed SDPA, which breaks the graph), no fallback on a kernel failure (the
error propagates).  The route itself (flags, thresholds, device) is computed once at trace
time.  The multi-token switch is taken at run time without a sync (see ``share``), and frozen
into a captured CUDA graph.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import warnings
from dataclasses import dataclass

import torch

from . import checks as value_checks
from . import config, contract, known_bad, op, plan, reference, share, transforms, varlen
from .contract import (
    block_indices_to_ranges,
    check_block_indices,
    check_block_size,
    check_positions,
    check_qkv,
    check_ranges,
    resolve_scale,
)

log = logging.getLogger("nsa_triton_sel")

BACKENDS = ("auto", "triton", "sdpa", "reference", "oracle")

known_bad.warn_if_known_bad()  # once, at import: the installed Triton inside a window for this GPU
_FAILED: dict[tuple, str] = {}  # (device, dtype, Dk, Dv, h) -> reason of the first kernel failure
_ROUTES: dict[tuple, Route] = {}


@dataclass(frozen=True)
class Route:
    """The path one call takes, and why (``NSA_DEBUG_SHAPES=1`` logs it)."""

    path: str  # "triton", "sdpa", "reference" or "oracle"
    reason: str
    min_L: int | None = None  # a call whose rows all have fewer keys goes to packed SDPA (eager only)
    decode: bool = False  # split-L flash-decoding kernel
    per_head: bool = False  # NSA_SEL_TRITON_GROUP=0
    tokens: int | None = None  # tokens per program: 1, a forced N, or None = decide from the spans


def _clear_routes() -> None:
    _ROUTES.clear()
    share.clear()


config.REFRESH_HOOKS.append(_clear_routes)
_is_compiling = contract._is_compiling
_dispatch_mode = torch.utils._python_dispatch._get_current_dispatch_mode


def _failure_key(device, dtype, Dk, Dv, h) -> tuple:
    return (str(device), dtype, Dk, Dv, h)


def _triton_blocker(dev: plan.Device, device, dtype, Dk, Dv, h) -> str | None:
    """Why the Triton kernels cannot take these inputs, or None."""
    if not dev.triton:
        return "triton is not importable"
    if device.type != "cuda" and not dev.interpreter:
        return f"tensors are on {device} (Triton needs CUDA, or TRITON_INTERPRET=1)"
    if dtype not in contract.KERNEL_DTYPES:
        return f"dtype {dtype} (the kernels take float16 and bfloat16)"
    if max(Dk, Dv) > 256:
        return f"head dims Dk={Dk}, Dv={Dv} (the kernels take up to 256)"
    failed = _FAILED.get(_failure_key(device, dtype, Dk, Dv, h))
    if failed:
        return f"the kernel failed earlier for this configuration: {failed}"
    return None


def _min_L(dev: plan.Device, flags: config.Flags) -> tuple[int | None, str]:
    if flags.min_L_override is not None:
        return flags.min_L_override, f"NSA_SEL_TRITON_MIN_L={flags.min_L_override}"
    t = config.threshold_for(dev.name, dev.triton)
    log.debug("selection_attention: sel_triton_min_L=%s on %s (cc %s), Triton %s: %s",
              t.min_L, dev.name, dev.cc, dev.triton, t.why)
    return t.min_L, t.why


def _tokens(S: int | None, h: int, flags: config.Flags, per_head: bool, decode: bool,
            dev: plan.Device) -> int | None:
    """Tokens per program: 1, the forced count (checked here: a flag error, never a kernel failure),
    or None ("look at the spans"; also when S is unknown, in a trace)."""
    if per_head or decode:
        return 1
    if flags.tokens is not None:
        problem = plan.tokens_problem(flags.tokens, h, dev) if flags.tokens > 1 else None
        if problem:
            raise ValueError(f"NSA_SEL_TRITON_TOKENS={flags.tokens} cannot run these inputs: {problem}; "
                             f"accepted here: auto, 1, or such a power of two")
        return flags.tokens
    return None if S is None or plan.auto_tokens(h, S, dev) > 1 else 1


def _route(backend, grad, traced, device, dtype, shape, Dv, flags) -> Route:
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}; accepted: {', '.join(BACKENDS)}")
    if backend in ("sdpa", "reference", "oracle"):
        return Route(backend, f"backend={backend!r}")
    B, S, G, h, Dk = shape
    if device.type == "meta":
        return Route("triton", "meta tensors: shapes through the operator's fake implementation", 0)
    explicit = backend == "triton"
    if not explicit:
        if flags.force_parity:
            return Route("reference", "NSA_FORCE_PARITY=1")
        if flags.use_triton is False:
            return Route("sdpa", "NSA_USE_TRITON_SEL=0")
    dev = plan.device_of(device)
    blocker = _triton_blocker(dev, device, dtype, Dk, Dv, h)
    if blocker:
        if explicit:
            raise ValueError(f"backend='triton' cannot run these inputs: {blocker}")
        return Route("sdpa", blocker)
    per_head = not flags.group
    decode = S is not None and plan.use_decode(B, S, G, h, per_head, dev)  # a trace leaves it to the planner
    tokens = _tokens(S, h, flags, per_head, decode, dev)
    if explicit:
        return Route("triton", "backend='triton'", 0, decode, per_head, tokens)
    min_L, why = _min_L(dev, flags)
    if min_L is None:
        return Route("sdpa", f"sel_triton_min_L is null (packed SDPA measured faster at every L): {why}")
    return Route("triton", f"sel_triton_min_L={min_L}: {why}", min_L, decode, per_head, tokens)


def _route_traced(backend, grad, device, dtype, G, h, Dk, Dv) -> Route:
    """:func:`_route` for a call being traced: torch.compile runs it once, as plain Python, on the sizes
    that do not vary (B and S may be dynamic: the decode split is left to the planner, the multi-token
    switch to the run time)."""
    return _route(backend, grad, True, device, dtype, (None, None, G, h, Dk), Dv, config.flags())


_route_traced = getattr(torch.compiler, "assume_constant_result", torch._dynamo.assume_constant_result)(_route_traced)


def route(q, k, v, *, backend: str = "auto", flags: config.Flags | None = None, traced: bool = False) -> Route:
    """The path ``selection_attention`` takes for these inputs, and why (cached per signature)."""
    grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    if flags is not None:
        return _route(backend, grad, traced, q.device, q.dtype, tuple(q.shape), v.shape[-1], flags)
    key = (backend, grad, traced, q.device, q.dtype, q.shape, v.shape[-1])
    hit = _ROUTES.get(key)
    if hit is None:
        hit = _ROUTES[key] = _route(backend, grad, traced, q.device, q.dtype, tuple(q.shape), v.shape[-1],
                                    config.flags())
    return hit


def __getattr__(name: str):
    if name in ("decide", "Decision"):  # the names before issue 15 (compat.upgrade has its own Decision)
        warnings.warn(f"nsa_triton_sel.dispatch.{name} is now {'route' if name == 'decide' else 'Route'}",
                      DeprecationWarning, stacklevel=2)
        return route if name == "decide" else Route
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _plain_eager(q) -> bool:
    """A plain eager call: real tensors, no tracing, no dispatch mode, no CUDA-graph capture."""
    if _is_compiling():
        return False
    if type(q) not in (torch.Tensor, torch.nn.Parameter) or q.device.type == "meta":
        return False
    if _dispatch_mode() is not None:  # FakeTensorMode, FlopCounterMode, ...: the operator handles it
        return False
    return not (q.is_cuda and torch.cuda.is_current_stream_capturing())


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


def _structure(q, k, v, ranges, block_indices, block_size, positions, eager: bool):
    """``(dims, spans, block_size)`` after the structural checks of ``contract``.

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


def _as_ranges(spans, positions, block_size, T):
    return spans if spans.dim() == 5 else block_indices_to_ranges(spans, block_size, T, positions, validate=False)


def _reference_path(path, q, k, v, ranges, scale):
    if path == "reference":
        out, lse = reference.packed_sdpa(q.float(), k.float(), v.float(), ranges, scale=scale, return_lse=True,
                                         validate=False)
        return out.to(v.dtype), lse
    if path == "oracle":
        out, lse = reference.oracle(q, k, v, ranges, scale=scale, return_lse=True, validate=False)
        return out.to(device=q.device, dtype=v.dtype), lse.to(device=q.device, dtype=torch.float32)
    return reference.packed_sdpa(q, k, v, ranges, scale=scale, return_lse=True, validate=False)


def _kernel_call(q, k, v, spans, positions, block_size, scale, r: Route, tokens, eager: bool):
    """The operator (autograd, tracing, meta) or, in a plain eager call without grad, its implementation."""
    args = (q, k, v, spans, positions, scale, block_size, r.per_head, 0 if tokens is None else tokens)
    grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    if eager and not grad:
        return op.forward(*args)
    return op.operator(config.flags().op)(*args)


def _below_threshold(spans, positions, block_size, T: int, min_L: int) -> bool:
    """Whether every row selects fewer than ``min_L`` keys (the seeds' gate: then the whole call
    goes through packed SDPA).  One host sync; only asked where a measured thresholds entry (or
    ``NSA_SEL_TRITON_MIN_L``) raised ``min_L`` above 1."""
    ranges = _as_ranges(spans, positions, block_size, T)
    if ranges.numel() == 0:
        return True
    lens = (ranges[..., 1].to(torch.int64) - ranges[..., 0].to(torch.int64)).clamp_min(0).sum(-1)
    return int(lens.max()) < min_L


def _compute(q, k, v, spans, positions, block_size, scale, r: Route, tokens, eager: bool, checks=None):
    if r.path != "triton":
        if transforms.shapes_only(q):  # no values to compute with: the operator's fake implementation gives the shapes
            return _kernel_call(q, k, v, spans, positions, block_size, scale, r, None, False), r
        return _reference_path(r.path, q, k, v, _as_ranges(spans, positions, block_size, k.shape[2]), scale), r
    if not eager:  # traced, captured or meta: no host decision, no fallback
        return _kernel_call(q, k, v, spans, positions, block_size, scale, r, tokens, False), r
    if r.min_L is not None and r.min_L > 1 and _below_threshold(spans, positions, block_size, k.shape[2], r.min_L):
        # (the value checks ran before: with min_L > 1 they never run beside the kernel)
        below = Route("sdpa", f"every row has fewer than sel_triton_min_L={r.min_L} keys ({r.reason})")
        return _reference_path("sdpa", q, k, v, _as_ranges(spans, positions, block_size, k.shape[2]), scale), below
    try:
        return _kernel_call(q, k, v, spans, positions, block_size, scale, r, tokens, True), r
    except Exception as exc:  # noqa: BLE001 - a kernel failure falls back, once per config
        if checks is not None:
            checks()  # the fallback gathers by index: bad values must raise before it runs
        ranges = _as_ranges(spans, positions, block_size, k.shape[2])
        try:
            result = _reference_path("sdpa", q, k, v, ranges, scale)
        except Exception:  # noqa: BLE001 - the fallback fails too: the inputs, not the kernel
            raise exc from None  # nothing is remembered: the next call tries the kernel again
        key = _failure_key(q.device, q.dtype, q.shape[-1], v.shape[-1], q.shape[3])
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        _FAILED[key] = reason
        _ROUTES.clear()
        warnings.warn(
            f"nsa_triton_sel: the Triton selection kernel failed for device={key[0]}, dtype={key[1]}, "
            f"Dk={key[2]}, Dv={key[3]}, h={key[4]} ({reason}); using the packed-SDPA path for this "
            f"configuration from now on",
            RuntimeWarning,
            stacklevel=4,
        )
        return result, Route("sdpa", f"Triton failed: {reason}")


def _debug(flags, stage, q, k, v, spans, positions, block_size, scale, r, out, t0):
    if stage == "route" and flags.debug_shapes:
        log.info("selection_attention q=%s%s k=%s%s v=%s%s spans=%s %s -> %s (%s)",
                 list(q.shape), q.stride(), list(k.shape), k.stride(), list(v.shape), v.stride(),
                 list(spans.shape), q.dtype, r.path, r.reason)
    if stage == "done" and flags.debug_timing:
        if q.device.type == "cuda":
            torch.cuda.synchronize(q.device)
        log.info("selection_attention path=%s%s time=%.3f ms", r.path, " (decode)" if r.decode else "",
                 (time.perf_counter() - t0) * 1e3)
    if stage == "done" and flags.debug_compare:
        ref = reference.packed_sdpa(q, k, v, _as_ranges(spans, positions, block_size, k.shape[2]), scale=scale,
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
        return varlen.call(selection_attention, q, k, v, ranges, block_indices=block_indices, block_size=block_size,
                           positions=positions, scale=scale, backend=backend, return_lse=return_lse,
                           validate=validate, cu_seqlens=cu_seqlens, cu_seqlens_q=cu_seqlens_q,
                           cu_seqlens_k=cu_seqlens_k)
    flags = config.flags()
    eager = _plain_eager(q)
    dims, spans, block_size = _structure(q, k, v, ranges, block_indices, block_size, positions, eager)
    scale = resolve_scale(scale, dims.Dk)
    transform = transforms.transform_of(q, k, v, spans, positions) if eager else None
    if transform:  # torch.func: the torch paths, never the operator (no functorch rule)
        eager, r = False, Route(*transforms.route_under(backend, transform, BACKENDS))
    elif eager:
        r = route(q, k, v, backend=backend)
    else:
        grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
        r = _route_traced(backend, grad, q.device, q.dtype, int(dims.G), int(dims.h), int(dims.Dk), int(dims.Dv))
        if r.tokens is not None and r.tokens > 1 and dims.S == 1:
            r = dataclasses.replace(r, tokens=1)  # one query position: no multi-token program
    tokens = r.tokens
    checks = None
    if validate and (eager or transform) and spans.numel():
        if value_checks.beside_the_kernel(r, q.device):
            checks = value_checks.start_beside(spans, positions, block_size, dims, q.device)
        else:
            tokens = value_checks.before_the_kernel(spans, positions, block_size, dims, r, q.device)
    debug = flags.debug_shapes or flags.debug_timing or flags.debug_compare
    if debug:
        _debug(flags, "route", q, k, v, spans, positions, block_size, scale, r, None, 0.0)
    t0 = time.perf_counter() if debug else 0.0
    (out, lse), r = _compute(q, k, v, spans, positions, block_size, scale, r, tokens, eager, checks)
    if checks is not None:
        checks()  # waits for the value checks only; the kernel keeps running
    if debug:
        _debug(flags, "done", q, k, v, spans, positions, block_size, scale, r, out, t0)
    return (out, lse) if return_lse else out
