"""Torch-side launchers of the selection kernels.

All entry points end in :func:`_launch`, which takes 5-D views (``[B, S, G, h, D]`` for
q/o, ``[B, G, T, D]`` for k/v) expressed purely as sizes and strides, so the packed
seed-style layouts reuse the ranges-native kernel without copies:

- ``sel_attn_ranges``: ``q [B, S, G, h, Dk]``, ``k/v [B, G, T, D]``, ``ranges [B, S, G, n, 2]``;
- ``sel_attn_decode``: the same contract, split-L over the keys (flash-decoding);
- ``sel_attn_fwd_dense``: ``q [N, H, Dk]``, ``k [N, L, Dk]``, ``v [N, L, Dv]``;
- ``sel_attn_fwd_varlen``: ``q [N, H, Dk]``, ``k_all [total, Dk]``, ``v_all [total, Dv]``,
  ``cu_seqlens [N + 1]``.

These functions trust their caller (the dispatcher validates); they check only what
would make the kernel read out of bounds or compile something unsupported.
"""

from __future__ import annotations

import functools
import math
import os

import torch
from packaging.version import Version

from . import forward
from .meta import MODE_CU, MODE_DENSE, MODE_RANGES, KernelMeta, kernel_meta, tok_meta

LOG2E = 1.4426950408889634
KERNEL_DTYPES = (torch.float16, torch.bfloat16)


def _interpreter_dot_f32(dtype) -> bool:
    """bf16 ``tl.dot`` is wrong under the Triton interpreter: upcast there (see forward.py)."""
    return dtype == torch.bfloat16 and os.environ.get("TRITON_INTERPRET") == "1"


@functools.lru_cache(maxsize=8)
def max_rows(device: torch.device) -> int:
    """Largest M tile the installed Triton compiles for this device.

    Triton 3.0 aborts the process (``mma -> mma layout conversion is only supported on
    Ampere``) when a 64-row dot takes the Hopper wgmma path; 32 rows stay on mma.sync.
    Found by the compile-smoke harness (sm_90, h = 64), so it is a version window, not a
    feature to detect.
    """
    import triton

    if device.type == "cuda" and torch.cuda.get_device_capability(device)[0] == 9:
        if Version(triton.__version__).release < (3, 1):
            return 32
    return 64


def _check_kernel_inputs(*named):
    for name, x in named:
        if x.dtype not in KERNEL_DTYPES:
            raise TypeError(f"{name} has dtype {x.dtype}; the Triton kernels accept float16 and bfloat16")


def sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 8  # the interpreter: any small number exercises the split path


def _launch(
    q, k, v, o, lse, spans, *,
    B, S, G, h, Dk, Dv, n_spans, seq_len,
    sq, sk, sv, so, sl, sr,
    meta: KernelMeta, scale: float, num_splits: int = 1,
):
    """Run ``sel_fwd_kernel`` (and the split merge) on strided views; fills ``o`` and ``lse``."""
    qk_scale = scale * LOG2E
    n_hc = triton_cdiv(h, meta.BLOCK_H)
    rows = B * S
    dummy = o  # never dereferenced when the constexpr that guards it is off
    if not meta.SPLIT:
        grid = (rows, G * n_hc)
        forward.sel_fwd_kernel[grid](
            q, k, v, o, lse if lse is not None else dummy, spans, dummy, dummy,
            S, G, h, Dk, Dv, n_spans, seq_len, 1, qk_scale,
            *sq, *sk, *sv, *so, *sl, *sr,
            num_warps=meta.num_warps, num_stages=meta.num_stages, **meta.constexprs(),
        )
        return
    op = torch.empty((rows * G * num_splits, h, Dv), device=q.device, dtype=torch.float32)
    lp = torch.empty((rows * G * num_splits, h), device=q.device, dtype=torch.float32)
    forward.sel_fwd_kernel[(rows * num_splits, G * n_hc)](
        q, k, v, o, dummy, spans, op, lp,
        S, G, h, Dk, Dv, n_spans, seq_len, num_splits, qk_scale,
        *sq, *sk, *sv, *so, *sl, *sr,
        num_warps=meta.num_warps, num_stages=meta.num_stages, **meta.constexprs(),
    )
    forward.merge_splits_kernel[(rows, G * n_hc)](
        op, lp, o, lse if lse is not None else dummy,
        S, G, h, Dv, num_splits,
        *so, *sl,
        BLOCK_H=meta.BLOCK_H, BLOCK_DV=meta.BLOCK_DV, HAS_LSE=meta.HAS_LSE, num_warps=4,
    )


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _scale(scale, Dk):
    return 1.0 / math.sqrt(Dk) if scale is None else float(scale)


def _outputs(shape_o, shape_l, dtype, device, return_lse, out=None):
    o = torch.empty(shape_o, dtype=dtype, device=device) if out is None else out
    lse = torch.empty(shape_l, dtype=torch.float32, device=device) if return_lse else None
    return o, lse


def _ranges_call(q, k, v, ranges, *, scale, return_lse, out, split, per_head, num_splits, **tune):
    B, S, G, h, Dk = q.shape
    T, Dv = k.shape[2], v.shape[3]
    n = ranges.shape[3]
    _check_kernel_inputs(("q", q), ("k", k), ("v", v))
    o, lse = _outputs((B, S, G, h, Dv), (B, S, G, h), v.dtype, q.device, return_lse, out)
    tune.setdefault("rows_hint", B * S * G)
    tune.setdefault("keys_hint", T)
    tune.setdefault("max_rows", max_rows(q.device))
    meta = kernel_meta(mode=MODE_RANGES, h=h, Dk=Dk, Dv=Dv, n_spans=max(n, 1), has_lse=return_lse,
                       split=split, per_head=per_head, dot_f32=_interpreter_dot_f32(q.dtype), **tune)
    if n == 0:  # no span at all: every row is empty
        o.zero_()
        if lse is not None:
            lse.fill_(float("-inf"))
        return (o, lse) if return_lse else o
    sl = lse.stride() if lse is not None else (0, 0, 0, 0)
    _launch(
        q, k, v, o, lse, ranges,
        B=B, S=S, G=G, h=h, Dk=Dk, Dv=Dv, n_spans=n, seq_len=T,
        sq=q.stride(), sk=k.stride(), sv=v.stride(), so=o.stride(), sl=sl, sr=ranges.stride(),
        meta=meta, scale=_scale(scale, Dk), num_splits=num_splits,
    )
    return (o, lse) if return_lse else o


def sel_attn_ranges(q, k, v, ranges, *, scale=None, return_lse=False, out=None, per_head=False, **tune):
    """Ranges-native selection attention: one program per (token, group), no host packing."""
    return _ranges_call(q, k, v, ranges, scale=scale, return_lse=return_lse, out=out,
                        split=False, per_head=per_head, num_splits=1, **tune)


def sel_attn_tokens(q, k, v, ranges, *, scale=None, return_lse=False, out=None, tokens=None, **tune):
    """Multi-token kernel: ``tokens`` consecutive query positions share each K/V tile they all selected.

    Fastest when neighbouring tokens select mostly the same blocks (real NSA selections);
    correct for any selections.
    """
    B, S, G, h, Dk = q.shape
    Dv = v.shape[3]
    n = ranges.shape[3]
    _check_kernel_inputs(("q", q), ("k", k), ("v", v))
    o, lse = _outputs((B, S, G, h, Dv), (B, S, G, h), v.dtype, q.device, return_lse, out)
    tune.setdefault("max_rows", max_rows(q.device))
    meta = tok_meta(h=h, Dk=Dk, Dv=Dv, n_spans=max(n, 1), has_lse=return_lse,
                    dot_f32=_interpreter_dot_f32(q.dtype), tokens=tokens, **tune)
    if n == 0:
        o.zero_()
        if lse is not None:
            lse.fill_(float("-inf"))
        return (o, lse) if return_lse else o
    sl = lse.stride() if lse is not None else (0, 0, 0, 0)
    grid = (B * triton_cdiv(S, meta.TOK), G)
    forward.sel_fwd_tok_kernel[grid](
        q, k, v, o, lse if lse is not None else o, ranges,
        S, G, h, Dk, Dv, n, _scale(scale, Dk) * LOG2E,
        *q.stride(), *k.stride(), *v.stride(), *o.stride(), *sl, *ranges.stride(),
        num_warps=meta.num_warps, num_stages=meta.num_stages, **meta.constexprs(),
    )
    return (o, lse) if return_lse else o


# Each extra split adds one partial result that the merge kernel reads in a serial loop
# (about 0.4 us per split on the H100), while a decode row selects only L keys (16 blocks of
# 64 in NSA), which the host does not know without a sync.  Measured on seed-002 shapes
# (bench/decode_splits.py, H100): the best split count is 1-8, and the default this cap
# gives is within 1.6 us of the best on every shape from 4 to 256 rows, where the old cap
# (128: 66 splits for 4 rows) took 27 us instead of 9-13 us.
MAX_DECODE_SPLITS = 4


def decode_splits(rows: int, T: int, block_n: int, device: torch.device) -> int:
    """How many programs share one row's keys: enough to fill the GPU twice over, at most
    ``MAX_DECODE_SPLITS`` and never more than the row could have key tiles."""
    want = triton_cdiv(2 * sm_count(device), max(rows, 1))
    return int(max(1, min(want, triton_cdiv(max(T, 1), block_n), MAX_DECODE_SPLITS)))


def sel_attn_decode(q, k, v, ranges, *, scale=None, return_lse=False, out=None, num_splits=None,
                    per_head=False, **tune):
    """Flash-decoding: each row's key tiles are split over ``num_splits`` programs, merged by LSE."""
    B, S, G, h, _ = q.shape
    if num_splits is None:
        tune.setdefault("max_rows", max_rows(q.device))
        meta = kernel_meta(mode=MODE_RANGES, h=h, Dk=q.shape[4], Dv=v.shape[3], split=True,
                           per_head=per_head, **tune)
        n_hc = triton_cdiv(h, meta.BLOCK_H)
        num_splits = decode_splits(B * S * G * n_hc, k.shape[2], meta.BLOCK_N, q.device)
    if num_splits < 1:
        raise ValueError(f"num_splits must be >= 1, got {num_splits}")
    return _ranges_call(q, k, v, ranges, scale=scale, return_lse=return_lse, out=out,
                        split=True, per_head=per_head, num_splits=int(num_splits), **tune)


def _check_packed(q, k, v, k_name, v_name):
    if q.dim() != 3:
        raise ValueError(f"q must be [N, H, Dk], got shape {list(q.shape)}")
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"{k_name} has Dk={k.shape[-1]} but q has Dk={q.shape[-1]}")
    if k.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"{k_name} {list(k.shape)} and {v_name} {list(v.shape)} must agree except in the last dim")
    _check_kernel_inputs(("q", q), (k_name, k), (v_name, v))


def sel_attn_fwd_dense(q, k, v, *, scale=None, return_lse=False, out=None, **tune):
    """Seed API: ``q [N, H, Dk]``; every head of row i attends all of ``k[i] [L, Dk]``."""
    _check_packed(q, k, v, "k", "v")
    if k.dim() != 3 or k.shape[0] != q.shape[0]:
        raise ValueError(f"k must be [N, L, Dk] with N={q.shape[0]}, got {list(k.shape)}")
    N, H, Dk = q.shape
    L, Dv = k.shape[1], v.shape[2]
    o, lse = _outputs((N, H, Dv), (N, H), v.dtype, q.device, return_lse, out)
    tune.setdefault("rows_hint", N)
    tune.setdefault("keys_hint", L)
    tune.setdefault("max_rows", max_rows(q.device))
    meta = kernel_meta(mode=MODE_DENSE, h=H, Dk=Dk, Dv=Dv, has_lse=return_lse,
                       dot_f32=_interpreter_dot_f32(q.dtype), **tune)
    _launch(
        q, k, v, o, lse, q,  # SPANS unused in dense mode
        B=N, S=1, G=1, h=H, Dk=Dk, Dv=Dv, n_spans=1, seq_len=L,
        sq=(q.stride(0), 0, 0, q.stride(1), q.stride(2)),
        sk=(k.stride(0), 0, k.stride(1), k.stride(2)),
        sv=(v.stride(0), 0, v.stride(1), v.stride(2)),
        so=(o.stride(0), 0, 0, o.stride(1), o.stride(2)),
        sl=(lse.stride(0), 0, 0, lse.stride(1)) if lse is not None else (0, 0, 0, 0),
        sr=(0, 0, 0, 0, 0), meta=meta, scale=_scale(scale, Dk),
    )
    return (o, lse) if return_lse else o


def sel_attn_fwd_varlen(q, k_all, v_all, cu_seqlens, *, scale=None, return_lse=False, out=None, **tune):
    """Seed API: row i attends ``k_all[cu_seqlens[i]:cu_seqlens[i + 1]]`` (rows of any length)."""
    _check_packed(q, k_all, v_all, "k_all", "v_all")
    N, H, Dk = q.shape
    if k_all.dim() != 2:
        raise ValueError(f"k_all must be [total, Dk], got {list(k_all.shape)}")
    if cu_seqlens.dim() != 1 or cu_seqlens.shape[0] != N + 1:
        raise ValueError(f"cu_seqlens must be [N + 1] = [{N + 1}], got {list(cu_seqlens.shape)}")
    if cu_seqlens.dtype.is_floating_point:
        raise TypeError(f"cu_seqlens must be an integer tensor, got {cu_seqlens.dtype}")
    Dv = v_all.shape[1]
    o, lse = _outputs((N, H, Dv), (N, H), v_all.dtype, q.device, return_lse, out)
    tune.setdefault("max_rows", max_rows(q.device))
    meta = kernel_meta(mode=MODE_CU, h=H, Dk=Dk, Dv=Dv, has_lse=return_lse,
                       dot_f32=_interpreter_dot_f32(q.dtype), **tune)
    _launch(
        q, k_all, v_all, o, lse, cu_seqlens,
        B=N, S=1, G=1, h=H, Dk=Dk, Dv=Dv, n_spans=1, seq_len=k_all.shape[0],
        sq=(q.stride(0), 0, 0, q.stride(1), q.stride(2)),
        sk=(0, 0, k_all.stride(0), k_all.stride(1)),
        sv=(0, 0, v_all.stride(0), v_all.stride(1)),
        so=(o.stride(0), 0, 0, o.stride(1), o.stride(2)),
        sl=(lse.stride(0), 0, 0, lse.stride(1)) if lse is not None else (0, 0, 0, 0),
        sr=(0, 0, 0, 0, 0), meta=meta, scale=_scale(scale, Dk),
    )
    return (o, lse) if return_lse else o
