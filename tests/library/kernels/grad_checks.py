"""Gradient checks of the backward kernels against float64 autograd, shared by the interpreter and GPU tests.

The oracle is a differentiable dense-masked float64 attention: every query row scores all T
keys, the keys outside the row's spans are masked to -inf, and a row without keys gets zero
output and zero gradients.  At test sizes (T <= a few hundred on the CPU, T = 2048 on the GPU)
that is cheap and obviously right; ``test_masked_oracle_matches_reference`` ties it to
``reference.oracle``.

The training bound: each gradient's relative error ``||g - ref|| / ||ref||`` is
at most ``factor`` x the packed-SDPA path's (``reference.packed_sdpa``, differentiable, same
dtype, same inputs and upstream gradient), with a floor for the case where SDPA is nearly exact.
"""

from __future__ import annotations

import math

import torch

import kernel_checks
from nsa_triton_sel import reference

FLOOR = {torch.float16: 4e-4, torch.bfloat16: 3e-3}


def selected_mask(ranges: torch.Tensor, T: int) -> torch.Tensor:
    """``[B, S, G, T]`` bool: key t is in one of the row's spans."""
    r = ranges.to(torch.int64)
    pos = torch.arange(T, device=ranges.device)
    return ((pos >= r[..., 0, None]) & (pos < r[..., 1, None])).any(-2)


def masked_attention(q, k, v, ranges, scale=None):
    """Differentiable selection attention in q's dtype: ``[B, S, G, h, Dv]`` (zeros for empty rows)."""
    T = k.shape[2]
    sc = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    mask = selected_mask(ranges, T)
    s = torch.einsum("bsghd,bgtd->bsght", q, k) * sc
    s = s.masked_fill(~mask[:, :, :, None, :], float("-inf"))
    empty = ~mask.any(-1)[..., None, None]
    p = torch.softmax(torch.where(empty, torch.zeros_like(s), s), dim=-1)
    p = torch.where(empty, torch.zeros_like(p), p)
    return torch.einsum("bsght,bgtd->bsghd", p, v)


def autograd_grads(fn, q, k, v, grad_out, dtype=None):
    """``(out, dq, dk, dv)`` of ``fn(q, k, v)`` (inputs cast to ``dtype``) for upstream ``grad_out``."""
    xs = [x.detach().to(dtype or x.dtype).requires_grad_() for x in (q, k, v)]
    out = fn(*xs)
    out.backward(grad_out.to(out.dtype))
    return (out.detach(), *(x.grad for x in xs))


def oracle_grads(q, k, v, ranges, grad_out, scale=None):
    """Float64 (CPU) output and gradients."""
    cpu = [x.detach().cpu() for x in (q, k, v, grad_out)]
    r = ranges.cpu()
    return autograd_grads(lambda a, b, c: masked_attention(a, b, c, r, scale), *cpu[:3], cpu[3].double(),
                          dtype=torch.float64)


def sdpa_grads(q, k, v, ranges, grad_out, scale=None):
    return autograd_grads(lambda a, b, c: reference.packed_sdpa(a, b, c, ranges, scale=scale), q, k, v, grad_out)


def check_grads(got, q, k, v, ranges, grad_out, *, scale=None, factor=2.0, what="", sdpa=None, ref=None):
    """Assert ``got = (dq, dk, dv)`` is within ``factor`` x packed SDPA's error of the float64
    oracle; returns ``{name: (rel_err, bound)}``.  Also: shapes, dtypes, no NaN, zero dq on
    empty rows and zero dk/dv on keys no row selects."""
    ref = ref or oracle_grads(q, k, v, ranges, grad_out, scale)
    sdpa = sdpa or sdpa_grads(q, k, v, ranges, grad_out, scale)
    mask = selected_mask(ranges, k.shape[2]).cpu()
    report = {}
    for i, (name, x) in enumerate(zip(("dq", "dk", "dv"), (q, k, v))):
        g = got[i]
        assert g.shape == x.shape and g.dtype == x.dtype, f"{what}: {name} is {g.dtype} {list(g.shape)}"
        gc = g.detach().double().cpu()
        assert not torch.isnan(gc).any(), f"{what}: NaN in {name}"
        r_ref = ref[i + 1]
        err = kernel_checks.rel_err(gc, r_ref)
        bound = max(factor * kernel_checks.rel_err(sdpa[i + 1], r_ref), FLOOR[x.dtype])
        kernel_checks.ERRORS.append({"rel_err": err, "sdpa_rel_err": bound / factor,
                                     "max_abs_err": float((gc - r_ref).abs().max()) if gc.numel() else 0.0,
                                     "mean_abs_err": float((gc - r_ref).abs().mean()) if gc.numel() else 0.0})
        report[name] = (err, bound)
        assert err <= bound, f"{what}: {name} relative error {err:.3e} > {bound:.3e} ({factor}x packed SDPA's)"
    empty_rows = ~mask.any(-1)  # [B, S, G]
    assert float(got[0].detach().cpu()[empty_rows].abs().sum()) == 0.0, f"{what}: dq not zero on an empty row"
    unread = ~mask.any(1)  # [B, G, T]: keys no query of the (b, g) selects
    for i, name in ((1, "dk"), (2, "dv")):
        assert float(got[i].detach().cpu()[unread].abs().sum()) == 0.0, f"{what}: {name} not zero on an unread key"
    return report


def kernel_grads(q, k, v, ranges, grad_out=None, *, scale=None, forward="ranges", grad_lse=None, **tune):
    """``((dq, dk, dv), grad_out)`` from the kernels called directly (``kernels/direct.py``): the forward
    (``forward="tokens"``: the multi-token kernel, then the multi-token dq kernel as the planner pairs them),
    then ``sel_attn_backward`` with ``tune``'s launch overrides.  ``grad_out`` None: a seeded random one."""
    from nsa_triton_sel.device import device_of
    from nsa_triton_sel.kernels import direct
    from nsa_triton_sel.plan.backward import dq_tokens_per_program

    fwd = {"ranges": direct.sel_attn_ranges, "tokens": direct.sel_attn_tokens}[forward]
    out, lse = fwd(q, k, v, ranges, scale=scale, return_lse=True)
    if forward == "tokens" and "dq_tokens" not in tune:  # as the planner pairs them, under this GPU's row cap
        tune["dq_tokens"] = dq_tokens_per_program(q.shape[3], device_of(q.device).max_rows) or None
    if grad_out is None:
        g = torch.Generator(device=out.device).manual_seed(1)
        grad_out = torch.randn(out.shape, generator=g, device=out.device).to(out.dtype)
    grads = direct.sel_attn_backward(q, k, v, ranges, out, lse, grad_out, scale=scale, grad_lse=grad_lse, **tune)
    return grads, grad_out
