"""What kind of call this is: plain eager, traced (``torch.compile``, CUDA-graph capture), ``torch.func``, or shapes only.

- ``torch.func`` (``vmap``, ``grad``, ``jacrev``, ...) wraps q, k, v in functorch tensors.  The Triton
  operator has no functorch rule (``custom_op`` autograd refuses them), so such a call takes the torch
  paths, which functorch transforms like any torch code (``route.under_transform``).  Never a kernel
  failure, so nothing is remembered.
- Meta tensors, and FakeTensors outside a trace, have no values: every backend gives the shapes
  through the operator's fake implementation (the reference paths would read the spans' values).
"""

from __future__ import annotations

import torch
import torch.fx.experimental.proxy_tensor
from torch._subclasses.fake_tensor import is_fake

from ..contract import is_compiling

_dispatch_mode = torch.utils._python_dispatch._get_current_dispatch_mode


def plain_eager(q) -> bool:
    """A plain eager call: real tensors, no tracing, no dispatch mode, no CUDA-graph capture."""
    if is_compiling():
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
    return is_fake(q) and not is_compiling() and proxy() is None


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


_PLAIN = (torch.Tensor, torch.nn.Parameter)
_wrapped = torch._C._functorch.is_functorch_wrapped_tensor


def _plain(x) -> bool:
    """A real tensor that no subclass, functorch transform or functionalization wraps (none can be fake)."""
    return type(x) in _PLAIN and not _wrapped(x) and not torch._is_functional_tensor(x)


def kind_of(q, k, v, spans, positions) -> tuple[str, str | None]:
    """``(kind, torch.func transform or None)`` of a call: ``"traced"`` (``torch.compile``, CUDA-graph capture, a
    dispatch mode), ``"shapes"`` (meta / fake tensors), ``"functorch"`` or ``"eager"``.  ``is_compiling`` is
    asked first: nothing a trace could not follow runs before it.  Plain tensors (every step of a model's
    eager loop) are answered first, without the fake-tensor and transform probes they cannot need."""
    if is_compiling():
        return "traced", None
    if _plain(q) and _plain(k) and _plain(v) and not q.is_meta and _dispatch_mode() is None:
        return ("traced", None) if q.is_cuda and torch.cuda.is_current_stream_capturing() else ("eager", None)
    if shapes_only(q):
        return "shapes", None
    if not plain_eager(q):
        return "traced", None
    transform = transform_of(q, k, v, spans, positions)
    return ("functorch", transform) if transform else ("eager", None)
