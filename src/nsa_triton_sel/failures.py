"""Kernel failures: whether the kernels can take a call, and what happens when they fail.

The first failure of a configuration ``(device, dtype, Dk, Dv, h)`` is reported once (a
``RuntimeWarning`` with its reason), remembered and answered by the packed-SDPA path; later
calls of that configuration go there directly.  Only the kernel call is guarded: an error the
packed-SDPA path then hits on the same inputs is the inputs' fault (it is raised and nothing is
remembered), and a :class:`~nsa_triton_sel.plan.PlanError` (a bad flag) is raised as it is.
The forward (the dispatcher) and the backward (the operator) keep one record each.
"""

from __future__ import annotations

import warnings

from . import caches
from .contract import KERNEL_DTYPES
from .plan.tiles import MAX_HEAD_DIM
from .plan.tokens import PlanError


def key(device, dtype, Dk: int, Dv: int, h: int) -> tuple:
    return (str(device), dtype, Dk, Dv, h)


def key_of(q, v) -> tuple:
    """The configuration of ``q [B, S, G, h, Dk]`` and ``v [B, G, T, Dv]``."""
    return key(q.device, q.dtype, q.shape[-1], v.shape[-1], q.shape[3])


class Failures(dict):
    """``{configuration key: reason of its first failure}`` for one set of kernels."""

    def __init__(self, kernels: str, instead: str):
        super().__init__()
        self.kernels, self.instead = kernels, instead

    def recover(self, k: tuple, exc: Exception, fallback, *, stacklevel: int):
        """After the kernels raised ``exc`` for configuration ``k``: ``(fallback(), reason)``, the failure
        remembered and reported once.  ``exc`` itself is raised where it is a :class:`PlanError` or where
        the fallback fails too (the inputs' fault: nothing is remembered, the next call tries again)."""
        if isinstance(exc, PlanError):
            raise exc
        try:
            result = fallback()
        except Exception:  # noqa: BLE001 - the fallback fails too: the inputs, not the kernels
            raise exc from None
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        self[k] = reason
        warnings.warn(f"nsa_triton_sel: {self.kernels} failed for device={k[0]}, dtype={k[1]}, Dk={k[2]}, "
                      f"Dv={k[3]}, h={k[4]} ({reason}); {self.instead} for this configuration from now on",
                      RuntimeWarning, stacklevel=stacklevel + 1)
        return result, reason


FORWARD = caches.register("forward_failures", Failures("the Triton selection kernel", "using the packed-SDPA path"))
BACKWARD = caches.register("backward_failures", Failures("the Triton backward kernels", "using the packed-SDPA gradients"))


def blocker(dev, device, dtype, Dk: int, Dv: int, h: int, failures: Failures) -> str | None:
    """Why the kernels cannot take these inputs on ``dev`` (a ``device.Device``), or None."""
    if not dev.triton:
        return "triton is not importable"
    if device.type != "cuda" and not dev.interpreter:
        return f"tensors are on {device} (Triton needs CUDA, or TRITON_INTERPRET=1)"
    if dtype not in KERNEL_DTYPES:
        return f"dtype {dtype} (the kernels take float16 and bfloat16)"
    if max(Dk, Dv) > MAX_HEAD_DIM:
        return f"head dims Dk={Dk}, Dv={Dv} (the kernels take up to {MAX_HEAD_DIM})"
    failed = failures.get(key(device, dtype, Dk, Dv, h))
    if failed:
        return f"the kernels failed earlier for this configuration: {failed}"
    return None
