"""The kernel path of ``selection_attention`` as a PyTorch operator (``torch.library``).

``torch.ops.nsa_triton_sel.sel_fwd(q, k, v, spans, positions, scale, block_size, per_head, tokens)``
returns ``(out, lse)``.  ``spans`` is ``ranges [B, S, G, n, 2]``, or ``block_indices [B, S, G, n]``
with ``block_size > 0`` (``positions`` ``[S]``/``[B, S]`` or None); ``tokens`` is 1 (single-token
kernel), N (N tokens per program) or 0 (choose from the spans at run time, see :mod:`.share`).
Everything else (decode split, head blocks, tiles) is planned from the shapes (:mod:`.plan`).

- A fake implementation gives the output shapes without running anything, so meta tensors,
  FakeTensors and ``torch.compile`` propagate shapes; ``torch.library.opcheck`` passes.
- Autograd: gradients flow to q, k and v through ``sel_bwd``, whose implementation calls
  :data:`backward` - ONE replaceable function ``(q, k, v, ranges, out, lse, grad_out, scale)
  -> (dq, dk, dv)``, by default :func:`kernel_backward`: the Triton backward kernels
  (``kernels/grad.py``; deterministic, no atomics), with the multi-token dq kernel where the
  forward's switch (:mod:`.share`) says neighbouring tokens share their spans.  A kernel failure
  is reported once (a warning with the reason), remembered for that configuration and answered
  by :func:`reference_backward` (the packed-SDPA gradients in float32, written out: an
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
"reduce-overhead", where the CUDA graph makes both equal, and ``custom`` works from torch 2.4.  Eager calls that need no
autograd skip the operator layer (measured on this project's CPU box: 17-26 us per call through
``torch.ops``, 6 us calling the same Python directly) and call :func:`forward` directly.
"""

# No ``from __future__ import annotations`` here: torch.library reads the operator's schema from the
# annotations, and older torch releases (2.4) do not resolve annotations given as strings.
from typing import Optional

import torch
from packaging.version import Version

import warnings

from . import plan, reference, share
from .contract import KERNEL_DTYPES, block_indices_to_ranges, clamp_ranges

try:
    from .kernels import launch
except ImportError:  # no Triton: the dispatcher routes around the kernels
    launch = None

NAMESPACE = "nsa_triton_sel"
TORCH = Version(torch.__version__.split("+")[0])
HAS_TRITON_OP = TORCH >= Version("2.6") and hasattr(torch.library, "triton_op")


def _ranges_of(spans, positions, block_size: int, T: int):
    return spans if spans.dim() == 5 else block_indices_to_ranges(spans, block_size, T, positions, validate=False)


def forward(q, k, v, spans, positions, scale: float, block_size: int, per_head: bool, tokens: int,
            wrap=None):
    """The operator's implementation: ``(out [B, S, G, h, Dv], lse [B, S, G, h] float32)``."""
    dev = plan.device_of(q.device)
    if q.device.type != "cuda" and not dev.interpreter:
        out, lse = reference.packed_sdpa(q.float(), k.float(), v.float(), _ranges_of(spans, positions, block_size,
                                         k.shape[2]), scale=scale, return_lse=True, validate=False)
        return out.to(v.dtype), lse
    if tokens == 0:
        tokens = 1 if wrap is not None else share.choose_tokens(spans, q.shape[3], dev)
    return launch.selection(q, k, v, spans, scale=scale, return_lse=True, per_head=per_head, tokens=tokens,
                            positions=positions, block_size=block_size, wrap=wrap, dev=dev)


def _fake_forward(q, k, v, spans, positions, scale, block_size, per_head, tokens):
    B, S, G, h, _ = q.shape
    return q.new_empty((B, S, G, h, v.shape[3]), dtype=v.dtype), q.new_empty((B, S, G, h), dtype=torch.float32)


def reference_backward(q, k, v, ranges, out, lse, grad_out, scale):
    """Gradients from the packed reference in float32 (``reference.packed_backward``): the fallback of
    :func:`kernel_backward`.  ``out`` and ``lse`` are unused here (the kernels use them)."""
    dq, dk, dv = reference.packed_backward(q, k, v, clamp_ranges(ranges, k.shape[2]), grad_out, scale=scale)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


_BWD_FAILED: dict[tuple, str] = {}  # (device, dtype, Dk, Dv, h) -> reason of the first backward kernel failure


def _backward_blocker(q, v, dev: plan.Device) -> str | None:
    """Why the backward kernels cannot take these inputs (the reference gradients then), or None."""
    if launch is None:
        return "triton is not importable"
    if q.device.type != "cuda" and not dev.interpreter:
        return f"tensors are on {q.device}"
    if q.dtype not in KERNEL_DTYPES or max(q.shape[-1], v.shape[-1]) > 256:
        return f"dtype {q.dtype}, Dk={q.shape[-1]}, Dv={v.shape[-1]}"
    return _BWD_FAILED.get((str(q.device), q.dtype, q.shape[-1], v.shape[-1], q.shape[3]))


def kernel_backward(q, k, v, ranges, out, lse, grad_out, scale):
    """``(dq, dk, dv)`` from the Triton backward kernels; the reference gradients where they cannot run."""
    dev = plan.device_of(q.device)
    if _backward_blocker(q, v, dev):
        return reference_backward(q, k, v, ranges, out, lse, grad_out, scale)
    from .kernels import grad
    from .kernels.backward_meta import dq_tokens_per_program

    tune = {}
    if share.choose_tokens(ranges, q.shape[3], dev) > 1:  # the forward took the multi-token kernel
        tune["dq_tokens"] = dq_tokens_per_program(q.shape[3], dev.max_rows) or None
    try:
        return grad.sel_attn_backward(q, k, v, ranges, out, lse, grad_out, scale=scale, **tune)
    except Exception as exc:  # noqa: BLE001 - a kernel failure falls back, once per configuration
        try:
            grads = reference_backward(q, k, v, ranges, out, lse, grad_out, scale)
        except Exception:  # noqa: BLE001 - the fallback fails too: the inputs, not the kernels
            raise exc from None  # nothing is remembered: the next backward tries the kernels again
        key = (str(q.device), q.dtype, q.shape[-1], v.shape[-1], q.shape[3])
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        _BWD_FAILED[key] = reason
        warnings.warn(f"nsa_triton_sel: the Triton backward kernels failed for device={key[0]}, dtype={key[1]}, "
                      f"Dk={key[2]}, Dv={key[3]}, h={key[4]} ({reason}); using the packed-SDPA gradients for this "
                      f"configuration from now on", RuntimeWarning, stacklevel=2)
        return grads


backward = kernel_backward  # (q, k, v, ranges, out, lse, grad_out, scale) -> (dq, dk, dv): replaceable


def _backward_impl(q, k, v, spans, positions, block_size, out, lse, grad_out, scale):
    ranges = _ranges_of(spans, positions, block_size, k.shape[2])
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
