"""The kernel path of ``selection_attention`` as a PyTorch operator (``torch.library``).

``torch.ops.nsa_triton_sel.sel_fwd(q, k, v, spans, positions, scale, block_size, per_head, tokens)``
returns ``(out, lse)``.  ``spans`` is ``ranges [B, S, G, n, 2]``, or ``block_indices [B, S, G, n]``
with ``block_size > 0`` (``positions`` ``[S]``/``[B, S]`` or None); ``tokens`` is 1 (single-token
kernel), N (N tokens per program, checked) or 0 (choose from the spans at run time).  The planner
(``plan.for_call``) decides everything about the launch; the launcher (``kernels/launch.py``) runs it.

- A fake implementation gives the output shapes without running anything, so meta tensors,
  FakeTensors and ``torch.compile`` propagate shapes; ``torch.library.opcheck`` passes.
- Autograd: gradients flow to q, k and v through ``sel_bwd``, whose implementation calls
  :data:`backward` - ONE replaceable function ``(q, k, v, ranges, out, lse, grad_out, scale)
  -> (dq, dk, dv)``, by default :func:`kernel_backward`: the Triton backward kernels
  (``kernels/grad.py``; deterministic, no atomics), planned by ``plan.backward.for_call`` (the
  multi-token dq kernel where neighbouring tokens share their spans).  A kernel failure is
  reported once (a warning with the reason), remembered for that configuration
  (``failures.BACKWARD``) and answered by :func:`reference_backward` (the packed-SDPA gradients in float32, written out: an
  operator's implementation runs below autograd).  ``lse`` is not differentiable; ``spans``
  and ``positions`` are integers.  ``sel_bwd`` syncs with the host once (the reader-list size
  of the dk/dv kernel), so a captured CUDA graph can hold the forward, not the backward.
- Implementation per device: CUDA tensors, and CPU tensors under ``TRITON_INTERPRET=1``, run the
  Triton kernels; other CPU tensors run the packed-SDPA path in float32 (the reference the
  kernels are checked against), so the op is defined, and opcheck-able, everywhere.

Registration: ``custom_op`` (torch >= 2.4) makes the op opaque to ``torch.compile``: Inductor
calls it, and its Python implementation runs at run time.  From torch 2.6, ``triton_op`` +
``wrap_triton`` registers ``sel_fwd_traced``, whose kernels Inductor sees and launches itself
(CUDA only: the interpreter's kernels cannot be traced).  ``NSA_SEL_OP=triton`` makes the
dispatcher use it under ``torch.compile``.  The default stays ``custom``: measured on the H100
(``python -m bench.host_cost --compiled``, decode step, KV cache static), host us per compiled
call were 176 (custom) vs 168 (triton) in the default mode and 101 vs 105 under
"reduce-overhead", where the CUDA graph makes both equal, and ``custom`` works from torch 2.4.
Eager calls that need no autograd skip the operator layer (measured on this project's CPU box: 17-26 us per call through
``torch.ops``, 6 us calling the same Python directly) and call :func:`forward` directly.
"""

# No ``from __future__ import annotations`` here: torch.library reads the operator's schema from the
# annotations, and older torch releases (2.4) do not resolve annotations given as strings.
from typing import Optional

import torch
from packaging.version import Version

from . import failures, plan, reference
from .contract import as_ranges, clamp_ranges
from .device import device_of
from .plan import backward as backward_plan

try:
    from .kernels import grad, launch
except ImportError:  # no Triton: the dispatcher routes around the kernels
    grad = launch = None

NAMESPACE = "nsa_triton_sel"
TORCH = Version(torch.__version__.split("+")[0])
HAS_TRITON_OP = TORCH >= Version("2.6") and hasattr(torch.library, "triton_op")


def forward(q, k, v, spans, positions, scale: float, block_size: int, per_head: bool, tokens: int,
            wrap=None):
    """The operator's implementation: ``(out [B, S, G, h, Dv], lse [B, S, G, h] float32)``: the plan of
    this call (``plan.for_call``), launched."""
    dev = device_of(q.device)
    if q.device.type != "cuda" and not dev.interpreter:
        out, lse = reference.packed_sdpa(q.float(), k.float(), v.float(), as_ranges(spans, positions, block_size,
                                         k.shape[2]), scale=scale, return_lse=True, validate=False)
        return out.to(v.dtype), lse
    p = plan_of(q, k, v, spans, positions, per_head, tokens, dev, traced=wrap is not None)
    return launch.launch(p, q, k, v, spans, scale=scale, return_lse=True, positions=positions,
                         block_size=block_size, wrap=wrap)


def plan_of(q, k, v, spans, positions, per_head: bool, tokens: int, dev, traced: bool = False):
    """The launch plan :func:`forward` runs for these inputs (``express`` remembers it for a decode step)."""
    return plan.for_call(tuple(q.shape), k.shape[2], v.shape[3], spans, dev=dev, blocks=spans.dim() == 4,
                         has_pos=positions is not None, has_lse=True, per_head=per_head, tokens=tokens,
                         dot_f32=dev.interpreter and q.dtype == torch.bfloat16, traced=traced)


def _fake_forward(q, k, v, spans, positions, scale, block_size, per_head, tokens):
    B, S, G, h, _ = q.shape
    return q.new_empty((B, S, G, h, v.shape[3]), dtype=v.dtype), q.new_empty((B, S, G, h), dtype=torch.float32)


def reference_backward(q, k, v, ranges, out, lse, grad_out, scale):
    """Gradients from the packed reference in float32 (``reference.packed_backward``): the fallback of
    :func:`kernel_backward`.  ``out`` and ``lse`` are unused here (the kernels use them)."""
    dq, dk, dv = reference.packed_backward(q, k, v, clamp_ranges(ranges, k.shape[2]), grad_out, scale=scale)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def kernel_backward(q, k, v, ranges, out, lse, grad_out, scale):
    """``(dq, dk, dv)`` from the Triton backward kernels with the plan of this call
    (``plan.backward.for_call``); the reference gradients where they cannot run or failed
    (``failures.BACKWARD``)."""
    dev = device_of(q.device)
    if grad is None or failures.blocker(dev, q.device, q.dtype, q.shape[-1], v.shape[-1], q.shape[3],
                                        failures.BACKWARD):
        return reference_backward(q, k, v, ranges, out, lse, grad_out, scale)
    p = backward_plan.for_call(tuple(q.shape), v.shape[3], ranges, dev=dev,
                               dot_f32=dev.interpreter and q.dtype == torch.bfloat16)
    try:
        return grad.sel_attn_backward(q, k, v, ranges, out, lse, grad_out, scale=scale, plan=p)
    except Exception as exc:  # noqa: BLE001 - a kernel failure falls back, once per configuration
        grads, _ = failures.BACKWARD.recover(failures.key_of(q, v), exc, lambda: reference_backward(
            q, k, v, ranges, out, lse, grad_out, scale), stacklevel=2)
        return grads


backward = kernel_backward  # (q, k, v, ranges, out, lse, grad_out, scale) -> (dq, dk, dv): replaceable


def _backward_impl(q, k, v, spans, positions, block_size, out, lse, grad_out, scale):
    ranges = as_ranges(spans, positions, block_size, k.shape[2])
    dq, dk, dv = backward(q, k, v, ranges, out, lse, grad_out, scale)
    return dq.contiguous(), dk.contiguous(), dv.contiguous()


def _fake_backward(q, k, v, spans, positions, block_size, out, lse, grad_out, scale):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    q, k, v, spans, positions, scale, block_size, _, _ = inputs
    out, lse = output
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(q, k, v, spans, positions, out, lse)
    ctx.scale, ctx.block_size = scale, block_size


def _autograd_backward(ctx, grad_out, _grad_lse):
    q, k, v, spans, positions, out, lse = ctx.saved_tensors
    dq, dk, dv = sel_bwd(q, k, v, spans, positions, ctx.block_size, out, lse, grad_out.contiguous(), ctx.scale)
    return dq, dk, dv, None, None, None, None, None, None


@torch.library.custom_op(f"{NAMESPACE}::sel_fwd", mutates_args=())
def sel_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spans: torch.Tensor,
            positions: Optional[torch.Tensor], scale: float, block_size: int, per_head: bool,
            tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Selection attention forward (opaque to torch.compile)."""
    return forward(q, k, v, spans, positions, scale, block_size, per_head, tokens)


@torch.library.custom_op(f"{NAMESPACE}::sel_bwd", mutates_args=())
def sel_bwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spans: torch.Tensor,
            positions: Optional[torch.Tensor], block_size: int, out: torch.Tensor, lse: torch.Tensor,
            grad_out: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Selection attention backward: ``(dq, dk, dv)`` through the replaceable :data:`backward`."""
    return _backward_impl(q, k, v, spans, positions, block_size, out, lse, grad_out, scale)


sel_fwd.register_fake(_fake_forward)
sel_bwd.register_fake(_fake_backward)
sel_fwd.register_autograd(_autograd_backward, setup_context=_setup_context)

sel_fwd_traced = None
if HAS_TRITON_OP:

    @torch.library.triton_op(f"{NAMESPACE}::sel_fwd_traced", mutates_args=())
    def sel_fwd_traced(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spans: torch.Tensor,
                       positions: Optional[torch.Tensor], scale: float, block_size: int, per_head: bool,
                       tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Selection attention forward whose Triton launches Inductor traces (CUDA, torch >= 2.6)."""
        return forward(q, k, v, spans, positions, scale, block_size, per_head, tokens,
                       wrap=torch.library.wrap_triton)

    sel_fwd_traced.register_autograd(_autograd_backward, setup_context=_setup_context)


def operator(kind: str = "custom"):
    """The registered forward: ``"custom"`` (custom_op) or ``"triton"`` (triton_op, torch >= 2.6)."""
    if kind == "triton" and sel_fwd_traced is not None:
        return sel_fwd_traced
    return sel_fwd
