"""Step 2 of the way down: a call's arguments, normalised and checked once, into one :class:`Call`.

:func:`parse` is the only place ``selection_attention``'s arguments are read.  In order:

1. the options (``backend``, ``return_lse``, ``validate``: exact types, every call);
2. the layout (``layouts.LAYOUTS``: native views of the peers' layouts) and packed batches (``cu_seqlens``:
   the sequence-local spans become global ranges on the device, ``layouts.global_ranges``);
3. the structure of q, k, v and the spans (``contract``: ranks, shapes, dtypes, devices; no value read),
   remembered per signature for plain eager calls, so a repeated call (a decode step) pays a dict lookup;
4. the scale and the kind of call (``kind``: eager, traced, ``torch.func``, shapes only);
5. the route (``route``: the kernels or a reference path, and why);
6. with ``validate``, the values (``values``): one host sync, beside the kernel on the kernel path.

The result carries everything the later steps need: the operator's arguments (native views, spans,
scale, the planner's knobs) and how to give the output back in the caller's layout.  Inside a trace
(``torch.compile``) or a CUDA-graph capture nothing may wait for the GPU: no value validation, no
``sel_triton_min_L`` gate, the route fixed at trace time.
"""

from __future__ import annotations

import contextlib
import operator
from dataclasses import dataclass
from typing import Callable

import torch

from .. import caches, config
from . import kind as kinds
from . import layouts, route as routes, values
from ..contract import (MAX_SCALE, Dims, check_block_indices, check_block_size, check_positions, check_qkv,
                       check_ranges, is_compiling, require_tensor, resolve_scale)
from .route import BACKENDS, Route

__all__ = ["BACKENDS", "Call", "Route", "forget_routes", "parse", "route_of"]


@dataclass(frozen=True, eq=False)
class Call:
    """One call, checked: native views, spans, options, its route, and how to give the result back."""

    q: torch.Tensor  # [B, S, G, h, Dk]
    k: torch.Tensor  # [B, G, T, Dk]
    v: torch.Tensor  # [B, G, T, Dv]
    spans: torch.Tensor  # ranges [B, S, G, n, 2] or block indices [B, S, G, n]
    positions: torch.Tensor | None
    block_size: int  # block indices: keys per block; ranges: 0
    span_len: int  # most keys one span holds (spans made from blocks), 0: unbounded (ranges)
    packed: bool  # a packed batch: k/v are shared by every row (B = 1), rows are independent
    scale: float
    route: Route
    kind: str  # "eager", "traced" (torch.compile, CUDA-graph capture, a dispatch mode), "functorch", "shapes"
    return_lse: bool
    layout: layouts.Layout
    flags: config.Flags
    finish: Callable | None = None  # the value checks enqueued beside the kernel: wait for them, raise
    op_args: tuple = ()  # the operator's arguments (``op.sel_fwd``), on the kernel route

    def __post_init__(self):
        r = self.route
        object.__setattr__(self, "op_args", (self.q, self.k, self.v, self.spans, self.positions, self.scale,
                                             self.block_size, self.span_len, r.per_head, r.tokens, self.packed))



def _options(backend, return_lse, validate) -> None:
    """The options, exactly typed: ``validate="no"`` or ``return_lse=1`` are mistakes, not truthy values."""
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}; accepted: {', '.join(BACKENDS)}")
    for name, x in (("return_lse", return_lse), ("validate", validate)):
        if type(x) is not bool:
            raise TypeError(f"{name} must be True or False, got {type(x).__name__} {x!r}")


_STRUCTURE: dict = caches.register("call_structure", {})  # eager signature -> (dims, block_size, route, flags)
_MAX_STRUCTURE = 4096


def forget_routes() -> None:
    """Forget the remembered signatures (a kernel failure changes the route of its configuration)."""
    _STRUCTURE.clear()


def route_of(q, k, v, *, backend: str = "auto") -> Route:
    """The route a call on these native ``q``, ``k``, ``v`` takes now, and why (flags and the thresholds file
    as read now; the value-dependent ``sel_triton_min_L`` gate aside)."""
    _options(backend, False, True)
    dims = check_qkv(q, k, v, allow_fp32=True)
    return routes.route(backend, q.device, q.dtype, dims.h, dims.Dk, dims.Dv, config.flags())


def _spans_structure(ranges, block_indices, block_size, positions, dims: Dims, device):
    """The spans (ranges, or block indices with block_size) checked for structure: ``(spans, block_size)``."""
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
                         f"[{dims.B}, {dims.S}, {dims.G}, n] to match q (in its layout: spans follow q)")
    if positions is not None:
        check_positions(positions, dims.B, dims.S, device)
    return block_indices, block_size


def _tensor(name: str, x) -> None:
    if type(x) is not torch.Tensor:
        require_tensor(name, x)  # a subclass passes; anything else raises, naming the argument


def parse(q, k, v, ranges=None, *, block_indices=None, block_size=None, positions=None, scale=None, backend="auto",
          return_lse=False, validate=True, cu_seqlens=None, cu_seqlens_q=None, cu_seqlens_k=None,
          lenient=False) -> Call:
    """``selection_attention``'s arguments as a :class:`Call` (see the module docstring).

    ``lenient`` (the drop-ins): block indices the peers ignore (negative, in the query's future, past the
    sequence) are padding instead of errors; repeated blocks still raise.

    A repeated plain eager call (a decode step, the next training step) finds its signature remembered:
    the structure, the route and the default scale; its options and scale are checked every time.
    """
    _options(backend, return_lse, validate)
    if (ranges is None) == (block_indices is None):
        raise ValueError("pass exactly one of ranges [..., n, 2] or block_indices [..., n] (with block_size)")
    spans_in = ranges if block_indices is None else block_indices
    _tensor("ranges" if block_indices is None else "block_indices", spans_in)
    for name, x in (("q", q), ("k", k), ("v", v)):
        _tensor(name, x)
    if positions is not None:
        _tensor("positions", positions)
    lay = layouts.NATIVE if q.dim() == 5 and k.dim() == 4 and v.dim() == 4 else layouts.layout_of(q, k, v)
    q5, k5, v5 = (q, k, v) if lay.native is None else lay.native(q, k, v)
    if lay.spans is not None:
        spans_in = lay.spans(spans_in)
        ranges, block_indices = (spans_in, None) if block_indices is None else (None, spans_in)
    packed = cu_seqlens is not None or cu_seqlens_q is not None or cu_seqlens_k is not None
    cu_q, cu_k = layouts.cu_pair(cu_seqlens, cu_seqlens_q, cu_seqlens_k, q5.device) if packed else (None, None)
    kind, transform = kinds.kind_of(q5, k5, v5, spans_in, positions)
    eager = kind == "eager"

    hit = key = None
    if eager and not packed and (block_size is None or type(block_size) is int):
        key = (q5.shape, k5.shape, v5.shape, spans_in.shape, q5.dtype, k5.dtype, v5.dtype, spans_in.dtype,
               q5.device, k5.device, v5.device, spans_in.device, q5.layout, k5.layout, v5.layout, spans_in.layout,
               ranges is None, block_size, None if positions is None else (positions.shape, positions.dtype,
               positions.device, positions.layout), backend)
        hit = _STRUCTURE.get(key)
    if hit is None:
        hit = _structure(q5, k5, v5, ranges, block_indices, block_size, positions, q, packed, kind, transform, backend)
        if key is not None and len(_STRUCTURE) < _MAX_STRUCTURE:
            _STRUCTURE[key] = hit
    dims, block_size, route, flags, default_scale = hit
    spans = spans_in
    if scale is None:
        scale = default_scale
    elif not (type(scale) is float and -MAX_SCALE <= scale <= MAX_SCALE):  # (NaN fails the comparison too)
        scale = resolve_scale(scale, dims.Dk)
    checks = validate and kind in ("eager", "functorch") and spans.numel() > 0
    beside = eager and route.kernels and q5.is_cuda and (route.min_L is None or route.min_L <= 1)
    finish, span_len, T = None, block_size, dims.T
    if packed:
        blocks = spans.dim() == 4
        r = layouts.cached_rows(cu_q, cu_k, dims.S, T, positions, block_size if blocks else None, eager)
        if checks:
            finish = values.start_packed(spans, positions, block_size if blocks else None, cu_q, cu_k, r,
                                         q.dim(), T, lenient=lenient, beside=beside)
        spans = layouts.global_ranges(spans, r, block_size if blocks else None)
        positions, block_size = None, 0
    elif checks:
        # Under torch.func the spans are plain tensors, but torch 2.4 wraps what is computed from them (no
        # storage to read): the checks run with functorch switched off, as the plain call they are.
        with torch._C._DisableFuncTorch() if kind == "functorch" else contextlib.nullcontext():
            if lenient and spans.dim() == 4:
                values.fixed_repeats(spans, block_size, T, positions)
            else:
                finish = values.start(spans, positions, block_size, T, beside=beside)
    if eager and route.min_L is not None and route.min_L > 1:
        route = routes.below_threshold(route, spans, positions, block_size, T)
    return Call(q5, k5, v5, spans, positions, block_size, span_len, packed, scale, route, kind, return_lse, lay,
                flags, finish)


def _structure(q5, k5, v5, ranges, block_indices, block_size, positions, q_in, packed, kind, transform, backend):
    """What a signature decides: ``(dims, block_size, route, flags, default scale)``, after the structural
    checks of ``contract`` (no value read)."""
    # Inside a torch.compile trace the flags are not read (torch 2.4's Dynamo cannot fold os.environ): the route
    # reads them as plain values (route.traced), and the debug flags are off there.
    flags = config.QUIET if kind == "traced" and is_compiling() else config.flags()
    dims = check_qkv(q5, k5, v5, allow_fp32=True)
    if packed:
        spans, block_size = _packed_structure(ranges, block_indices, block_size, positions, dims, q5.device, q_in)
    else:
        spans, block_size = _spans_structure(ranges, block_indices, block_size, positions, dims, q5.device)
    if kind == "functorch":
        route = routes.under_transform(backend, transform)
    elif kind == "eager":
        route = routes.route(backend, q5.device, q5.dtype, dims.h, dims.Dk, dims.Dv, flags)
    else:
        # h, Dk and Dv are kernel constants: operator.index specialises a symbolic size (dynamic=True,
        # mark_dynamic) to its value behind a guard, where int() would hand Dynamo a symbol it cannot fold.
        # The token, batch and packed sizes stay symbolic: one compile serves every length.
        route = routes.traced(backend, q5.device, q5.dtype, operator.index(dims.h), operator.index(dims.Dk),
                              operator.index(dims.Dv))
    return dims, block_size, route, flags, resolve_scale(None, dims.Dk)


def _packed_structure(ranges, block_indices, block_size, positions, dims: Dims, device, q_in):
    """The sequence-local spans of a packed call checked for structure: ``(spans, block_size or 0)``."""
    if dims.B != 1:
        raise ValueError(f"with cu_seqlens the batch is packed: q must be [total, HQ, Dk], [1, total, HQ, Dk] or "
                         f"[1, total, G, h, Dk]; got B={dims.B} (shape {list(q_in.shape)})")
    if ranges is not None:
        if block_size is not None or positions is not None:
            raise ValueError("block_size and positions go with block_indices; ranges already carry the causal clamp")
        check_ranges(ranges, Dims(dims.B, dims.S, dims.G, 1, 1, 0, 1), device, validate=False)
        return ranges, 0
    return _spans_structure(None, block_indices, block_size, positions, dims, device)
