"""Calls that are not plain eager calls on real values: ``torch.func`` transforms, meta and fake tensors.

- ``torch.func`` (``vmap``, ``grad``, ``jacrev``, ...) wraps q, k, v in functorch tensors.  The Triton
  operator has no functorch rule (``custom_op`` autograd refuses them), so such a call takes the torch
  paths, which functorch transforms like any torch code: ``backend="auto"`` the packed-SDPA path,
  ``"sdpa"``/``"reference"``/``"oracle"`` themselves; ``backend="triton"`` raises ``NotImplementedError``.
  Never a kernel failure, so nothing is remembered.
- Meta tensors, and FakeTensors outside a trace, have no values: every backend gives the shapes
  through the operator's fake implementation (the reference paths would read the spans' values).
"""

from __future__ import annotations

import torch
import torch.fx.experimental.proxy_tensor
from torch._subclasses.fake_tensor import is_fake

from .contract import _is_compiling

_dispatch_mode = torch.utils._python_dispatch._get_current_dispatch_mode


def plain_eager(q) -> bool:
    """A plain eager call: real tensors, no tracing, no dispatch mode, no CUDA-graph capture."""
    if _is_compiling():
        return False
    if type(q) not in (torch.Tensor, torch.nn.Parameter) or q.device.type == "meta":
        return False
    if _dispatch_mode() is not None:  # FakeTensorMode, FlopCounterMode, ...: the operator handles it
        return False
    return not (q.is_cuda and torch.cuda.is_current_stream_capturing())


def shapes_only(q) -> bool:
    """Meta tensors, or FakeTensors outside a trace (a trace records the reference path itself)."""
    if q.device.type == "meta":
        return True
    proxy = getattr(torch.fx.experimental.proxy_tensor, "get_proxy_mode", lambda: None)
    return is_fake(q) and not _is_compiling() and proxy() is None


def transform_of(q, k, v, spans, positions) -> str | None:
    """``"vmap"`` or ``"grad"`` when a ``torch.func`` transform wraps q, k or v, else None."""
    fc = torch._C._functorch
    if not any(fc.is_functorch_wrapped_tensor(x) for x in (q, k, v)):
        return None
    for name, x in (("the spans", spans), ("positions", positions)):
        if isinstance(x, torch.Tensor) and fc.is_functorch_wrapped_tensor(x):
            raise NotImplementedError(f"selection_attention under torch.func: {name} are transformed too; "
                                      f"accepted: plain integer tensors (transform q, k, v only)")
    return "vmap" if any(fc.is_batchedtensor(x) for x in (q, k, v)) else "grad"


def route_under(backend, transform: str, backends) -> tuple[str, str]:
    """``(path, reason)`` of a call under a ``torch.func`` transform."""
    if backend not in backends:
        raise ValueError(f"backend={backend!r}; accepted: {', '.join(backends)}")
    if backend == "triton":
        raise NotImplementedError(
            f"backend='triton' is not supported under torch.func transforms ({transform}): the Triton operator "
            f"has no functorch rule; accepted: torch.autograd (loss.backward(), torch.autograd.grad) and a real "
            f"batch dimension B instead of vmap, or backend='auto'/'sdpa'/'reference'/'oracle' under torch.func")
    if backend == "auto":
        return "sdpa", f"torch.func {transform}: the packed-SDPA path (the Triton operator has no functorch rule)"
    return backend, f"backend={backend!r} under torch.func {transform}"
