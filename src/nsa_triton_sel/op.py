"""Step 3 of the way down: the kernel path as a PyTorch operator (``torch.library``), with one autograd formula.

``torch.ops.nsa_triton_sel.sel_fwd(q, k, v, spans, positions, scale, block_size, span_len, per_head, tokens,
packed)`` returns ``(out, lse)``; ``sel_bwd`` is its backward.  ``spans`` is ``ranges [B, S, G, n, 2]``, or
``block_indices [B, S, G, n]`` with ``block_size > 0`` (``positions`` ``[S]``/``[B, S]`` or None);
``span_len`` the most keys one span holds (0: unbounded); ``tokens`` 1, N or 0 (the planner decides);
``packed``: the rows of a packed batch, which share k and v.  The implementation asks the planner once
(``plan.plan_call``) and hands the plan to the launcher (``kernels.launch``).

- A fake implementation gives the output shapes without running anything, so meta tensors, FakeTensors
  and ``torch.compile`` propagate shapes; ``torch.library.opcheck`` passes.
- Autograd, one formula for both registrations below: gradients flow to q, k and v, **through the LSE
  too** (``dlse`` is folded into the backward's ``delta``: ``dS = P * (dO V^T - (rowsum(dO * O) - dlse))``).
  In an eager call the plan of the forward travels in the autograd context to the backward (the forward
  leaves it keyed by its LSE output, which ``setup_context`` receives); inside a
  compiled graph the backward operator plans for itself at run time.  The backward reads nothing back to
  the host (its reader list is sized by ``Plan.entries_per_row``), so a whole training step captures in a
  CUDA graph.  A backward kernel failure is reported once, remembered (``failures.BACKWARD``) and answered
  by the packed-SDPA gradients (``reference.packed_backward``, float32, written out: an operator's
  implementation runs below autograd).
- Implementation per device: CUDA tensors, and CPU tensors under ``TRITON_INTERPRET=1``, run the Triton
  kernels; other CPU tensors run the packed-SDPA path in float32, so the op is defined everywhere.

Registration: ``custom_op`` (torch >= 2.4) makes the op opaque to ``torch.compile``: Inductor calls it and
its Python implementation runs at run time.  From torch 2.6, ``triton_op`` + ``wrap_triton`` registers
``sel_fwd_traced``, whose kernels Inductor sees and launches itself (CUDA only).  ``NSA_SEL_OP=triton``
picks it under ``torch.compile``; the default stays ``custom`` (the host cost per compiled call is about the
same, and ``custom`` works from torch 2.4).  Eager calls that need no autograd skip the operator layer
(``torch.ops`` dispatch costs the host several times the Python it reaches) and call :func:`forward`
directly.
"""

# No ``from __future__ import annotations`` here: torch.library reads the operator's schema from the
# annotations, and older torch releases (2.4) do not resolve annotations given as strings.
from typing import Optional

import torch
from packaging.version import Version
from torch.utils.weak import WeakTensorKeyDictionary

from . import failures, plan, reference
from .contract import as_ranges
from .device import device_of

try:
    from .kernels import launch
except ImportError:  # no Triton: the dispatcher routes around the kernels
    launch = None

NAMESPACE = "nsa_triton_sel"
TORCH = Version(torch.__version__.split("+")[0])
HAS_TRITON_OP = TORCH >= Version("2.6") and hasattr(torch.library, "triton_op")
# The plan that produced an eager forward's LSE output, until the autograd context takes it (setup_context
# receives the very output tensors the implementation returned).  Weak: an output nobody differentiates takes
# its entry with it.
_PLAN_OF = WeakTensorKeyDictionary()


def _runs_kernels(device) -> bool:
    """CUDA, or the CPU under ``TRITON_INTERPRET=1`` (read once per device: ``device.py``)."""
    return device.type == "cuda" or device_of(device).interpreter


def forward(q, k, v, spans, positions, scale: float, block_size: int, span_len: int, per_head: bool, tokens: int,
            packed: bool, wrap=None):
    """The operator's implementation: ``(out [B, S, G, h, Dv], lse [B, S, G, h] float32)``."""
    if not _runs_kernels(q.device):
        out, lse = reference.packed_sdpa(q.float(), k.float(), v.float(), as_ranges(spans, positions, block_size,
                                         k.shape[2]), scale=scale, return_lse=True, validate=False)
        return out.to(v.dtype), lse
    # Only an eager call that autograd will differentiate carries its plan: a traced launch (triton_op under
    # torch.compile) and a compiled graph's run-time call (detached inputs) have no eager backward to carry it to.
    grad = wrap is None and (q.requires_grad or k.requires_grad or v.requires_grad)
    p = plan.plan_call(q, k, v, spans, positions, per_head=per_head, tokens=tokens, span_len=span_len,
                       packed=packed, traced=wrap is not None, grad=grad)
    # The key-major forward's reader lists go with the plan: the backward reads them instead of sorting again
    readers = [] if grad and p.backward_reads_forward_readers else None
    out, lse = launch.forward(p, q, k, v, spans, positions, scale=scale, block_size=block_size, wrap=wrap,
                              readers_out=readers)
    if grad:
        _PLAN_OF[lse] = (p, readers)
    return out, lse


def _fake_forward(q, k, v, spans, positions, scale, block_size, span_len, per_head, tokens, packed):
    B, S, G, h, _ = q.shape
    return q.new_empty((B, S, G, h, v.shape[3]), dtype=v.dtype), q.new_empty((B, S, G, h), dtype=torch.float32)


def _reference_backward(q, k, v, ranges, grad_out, grad_lse, scale):
    """The packed reference's gradients in float32, in the inputs' dtypes."""
    dq, dk, dv = reference.packed_backward(q, k, v, ranges, grad_out, scale=scale, grad_lse=grad_lse)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def backward(q, k, v, spans, positions, block_size: int, span_len: int, per_head: bool, tokens: int, packed: bool,
             out, lse, grad_out, grad_lse, scale: float, p=None, readers=None):
    """``(dq, dk, dv)``: the Triton backward kernels with plan ``p`` (planned here if not given: inside a
    compiled graph) and the forward's reader lists where it kept them (``readers``, taken out as they are read),
    or the reference gradients where the kernels cannot run or failed."""
    T = k.shape[2]
    ranges = as_ranges(spans, positions, block_size, T)  # as the forward kernels read them
    if grad_out is None:  # only the LSE was used
        grad_out = torch.zeros((), dtype=v.dtype, device=v.device).expand(out.shape)
    if launch is None or not _runs_kernels(q.device) or failures.blocker(
            device_of(q.device), q.device, q.dtype, q.shape[-1], v.shape[-1], q.shape[3], failures.BACKWARD):
        return _reference_backward(q, k, v, ranges, grad_out, grad_lse, scale)
    if p is None:
        p = plan.plan_call(q, k, v, spans, positions, per_head=per_head, tokens=tokens, span_len=span_len,
                           packed=packed, grad=True)
    try:
        return launch.backward(p, q, k, v, ranges, out, lse, grad_out, grad_lse, scale=scale, readers=readers)
    except Exception as exc:  # noqa: BLE001 - a kernel failure falls back, once per configuration
        grads, _ = failures.BACKWARD.recover(failures.key_of(q, v), exc, lambda: _reference_backward(
            q, k, v, ranges, grad_out, grad_lse, scale), stacklevel=2)
        return grads


def _fake_backward(q, k, v, spans, positions, block_size, span_len, per_head, tokens, packed, out, lse, grad_out,
                   grad_lse, scale):
    # contiguous, as the implementation returns them (empty_like would keep a permuted view's strides, and a
    # compiled graph trusts these)
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, spans, positions, scale, block_size, span_len, per_head, tokens, packed = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, spans, positions, out, lse)
    ctx.options = (block_size, span_len, per_head, tokens, packed)
    ctx.scale = scale
    # The plan of this forward and, where the backward reads them, the key-major forward's reader lists (eager);
    # None inside a trace, whose backward plans at run time.
    ctx.plan, ctx.readers = _PLAN_OF.pop(lse, (None, None))


def _autograd_backward(ctx, grad_out, grad_lse):
    q, k, v, spans, positions, out, lse = ctx.saved_tensors
    args = (q, k, v, spans, positions, *ctx.options, out, lse, grad_out, grad_lse, ctx.scale)
    if ctx.plan is not None:  # eager: the forward's plan, carried here
        dq, dk, dv = backward(*args, p=ctx.plan, readers=ctx.readers)
    else:
        dq, dk, dv = sel_bwd(*args)
    return dq, dk, dv, None, None, None, None, None, None, None, None


@torch.library.custom_op(f"{NAMESPACE}::sel_fwd", mutates_args=())
def sel_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spans: torch.Tensor,
            positions: Optional[torch.Tensor], scale: float, block_size: int, span_len: int, per_head: bool,
            tokens: int, packed: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Selection attention forward (opaque to torch.compile)."""
    return forward(q, k, v, spans, positions, scale, block_size, span_len, per_head, tokens, packed)


@torch.library.custom_op(f"{NAMESPACE}::sel_bwd", mutates_args=())
def sel_bwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spans: torch.Tensor,
            positions: Optional[torch.Tensor], block_size: int, span_len: int, per_head: bool, tokens: int,
            packed: bool, out: torch.Tensor, lse: torch.Tensor, grad_out: Optional[torch.Tensor],
            grad_lse: Optional[torch.Tensor], scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Selection attention backward: ``(dq, dk, dv)``, planned at run time."""
    dq, dk, dv = backward(q, k, v, spans, positions, block_size, span_len, per_head, tokens, packed, out, lse,
                          grad_out, grad_lse, scale)
    return dq.contiguous(), dk.contiguous(), dv.contiguous()


sel_fwd.register_fake(_fake_forward)
sel_bwd.register_fake(_fake_backward)
sel_fwd.register_autograd(_autograd_backward, setup_context=_setup_context)

sel_fwd_traced = None
if HAS_TRITON_OP:

    @torch.library.triton_op(f"{NAMESPACE}::sel_fwd_traced", mutates_args=())
    def sel_fwd_traced(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spans: torch.Tensor,
                       positions: Optional[torch.Tensor], scale: float, block_size: int, span_len: int,
                       per_head: bool, tokens: int, packed: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Selection attention forward whose Triton launches Inductor traces (CUDA, torch >= 2.6)."""
        return forward(q, k, v, spans, positions, scale, block_size, span_len, per_head, tokens, packed,
                       wrap=torch.library.wrap_triton)

    sel_fwd_traced.register_autograd(_autograd_backward, setup_context=_setup_context)


def operator(kind: str = "custom"):
    """The registered forward: ``"custom"`` (custom_op) or ``"triton"`` (triton_op, torch >= 2.6)."""
    if kind == "triton" and sel_fwd_traced is not None:
        return sel_fwd_traced
    return sel_fwd
