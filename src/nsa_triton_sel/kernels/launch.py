"""Torch-side launchers of the selection kernels: they launch what a plan says and decide nothing.

:func:`launch` takes a :class:`nsa_triton_sel.plan.Plan` (the operator's path: ``op`` asks
``plan.for_call``) and ends in :func:`run` (single-token and decode kernels, strided 5-D views
``[B, S, G, h, D]`` for q/o and ``[B, G, T, D]`` for k/v expressed purely as sizes and strides, so
the packed seed-style layouts reuse the ranges-native kernel without copies) or :func:`run_tokens`.
The entry points below ask the planner for an explicit plan and launch it (tests, benchmarks, the
seeds' APIs):

- ``sel_attn_ranges``: ``q [B, S, G, h, Dk]``, ``k/v [B, G, T, D]``, ``ranges [B, S, G, n, 2]``;
- ``sel_attn_blocks``: the same with ``block_indices [B, S, G, n]`` read by the kernel itself;
- ``sel_attn_decode``: the ranges contract, split-L over the keys (flash-decoding);
- ``sel_attn_tokens``: several consecutive tokens per program (shared selections);
- ``sel_attn_fwd_dense``: ``q [N, H, Dk]``, ``k [N, L, Dk]``, ``v [N, L, Dv]``;
- ``sel_attn_fwd_varlen``: ``q [N, H, Dk]``, ``k_all [total, Dk]``, ``v_all [total, Dv]``,
  ``cu_seqlens [N + 1]``.

These functions trust their caller (the dispatcher validates); they check only what
would make the kernel read out of bounds or compile something unsupported.  ``**tune``
overrides the planned launch (block_n, num_warps, num_stages, max_rows, rows_hint, keys_hint).
"""

from __future__ import annotations

import torch

from .. import plan as P
from ..contract import KERNEL_DTYPES, block_indices_to_ranges, resolve_scale
from ..device import ROWS, Device, device_of
from ..plan.tiles import LOG2E, MODE_BLOCKS, MODE_CU, MODE_DENSE, MODE_RANGES, tokens_per_program, tokens_problem
from . import bind, forward

NO_STRIDES = (0, 0, 0, 0)


def _interpreter_dot_f32(dtype, dev: Device) -> bool:
    """bf16 ``tl.dot`` is wrong under the Triton interpreter: upcast there (see forward.py, DOT_F32)."""
    return dtype == torch.bfloat16 and dev.interpreter


def _check_kernel_inputs(*named):
    for name, x in named:
        if x.dtype not in KERNEL_DTYPES:
            raise TypeError(f"{name} has dtype {x.dtype}; the Triton kernels accept float16 and bfloat16")


def _tune(tune: dict) -> tuple:
    return tuple(sorted(tune.items()))


def _go(fn, wrap, plan, grid, args, kwargs):
    """Launch ``fn[grid](*args, **kwargs())``: through ``wrap`` (torch.compile) or the interpreter as
    given, on a GPU through the bound launcher (``bind.py``: no per-call argument binding)."""
    if wrap is not None:
        return wrap(fn)[grid](*args, **kwargs())
    if not args[0].is_cuda or device_of(args[0].device).interpreter:
        return fn[grid](*args, **kwargs())
    return bind.bound(fn)(plan, grid, args, kwargs)


def run(plan: P.Plan, q, k, v, o, lse, spans, pos=None, *, sizes, strides, qk_scale: float, block_size: int = 0,
        wrap=None):
    """Launch ``sel_fwd_kernel`` (and the split merge) as ``plan`` says; fills ``o`` and ``lse``.

    ``sizes`` = (S, G, h, Dk, Dv, n_spans, seq_len); ``strides`` = (q, k, v, o, lse, spans, pos)
    stride tuples of the 5-D / 4-D views (lse and pos may be ``NO_STRIDES`` / ``(0, 0)``).
    ``wrap`` (``torch.library.wrap_triton``) makes the launches visible to torch.compile.
    """
    meta = plan.meta
    S, G, h, Dk, Dv, n, T = sizes
    sq, sk, sv, so, sl, sr, sp = strides
    dummy = o  # never dereferenced when the constexpr that guards it is off
    lse_or = lse if lse is not None else dummy
    pos_or = pos if pos is not None else dummy

    def fwd_kwargs():
        return dict(num_warps=meta.num_warps, num_stages=meta.num_stages, **meta.constexprs())

    if plan.num_splits == 1 and not meta.SPLIT:
        _go(forward.sel_fwd_kernel, wrap, plan, plan.grid,
            (q, k, v, o, lse_or, spans, pos_or, dummy, dummy, S, G, h, Dk, Dv, n, T, block_size, 1, qk_scale,
             *sq, *sk, *sv, *so, *sl, *sr, *sp), fwd_kwargs)
        return
    rows = plan.merge_grid[0] * G * plan.num_splits  # (token, group, split) partial results
    op = torch.empty((rows, h, Dv), device=q.device, dtype=torch.float32)
    lp = torch.empty((rows, h), device=q.device, dtype=torch.float32)
    _go(forward.sel_fwd_kernel, wrap, plan, plan.grid,
        (q, k, v, o, dummy, spans, pos_or, op, lp, S, G, h, Dk, Dv, n, T, block_size, plan.num_splits, qk_scale,
         *sq, *sk, *sv, *so, *sl, *sr, *sp), fwd_kwargs)
    _go(forward.merge_splits_kernel, wrap, plan, plan.merge_grid,
        (op, lp, o, lse_or, S, G, h, Dv, plan.num_splits, *so, *sl),
        lambda: dict(BLOCK_H=meta.BLOCK_H, BLOCK_DV=meta.BLOCK_DV, HAS_LSE=meta.HAS_LSE, num_warps=4))


def run_tokens(plan: P.Plan, q, k, v, o, lse, ranges, *, qk_scale: float, wrap=None):
    """Launch ``sel_fwd_tok_kernel`` as ``plan`` says on 5-D q/o and ranges; fills ``o`` and ``lse``."""
    meta = plan.meta
    S, G, h, Dk = q.shape[1:]
    sl = lse.stride() if lse is not None else NO_STRIDES
    _go(forward.sel_fwd_tok_kernel, wrap, plan, plan.grid,
        (q, k, v, o, lse if lse is not None else o, ranges,
         S, G, h, Dk, v.shape[3], ranges.shape[3], k.shape[2], qk_scale,
         *q.stride(), *k.stride(), *v.stride(), *o.stride(), *sl, *ranges.stride()),
        lambda: dict(num_warps=meta.num_warps, num_stages=meta.num_stages, **meta.constexprs()))


def _outputs(shape_o, shape_l, dtype, device, return_lse, out=None):
    o = torch.empty(shape_o, dtype=dtype, device=device) if out is None else out
    lse = torch.empty(shape_l, dtype=torch.float32, device=device) if return_lse else None
    return o, lse


def _empty_rows(o, lse, return_lse):
    """No span at all: every row is empty (zeros, LSE = -inf)."""
    o.zero_()
    if lse is not None:
        lse.fill_(float("-inf"))
    return (o, lse) if return_lse else o


def pos_strides(positions) -> tuple[int, int]:
    """Strides ``(b, s)`` of query positions given as ``[S]``, ``[1, S]`` or ``[B, S]`` (``(0, 0)``: none)."""
    if positions is None:
        return (0, 0)
    if positions.dim() == 1:
        return (0, positions.stride(0))
    return (0 if positions.shape[0] == 1 else positions.stride(0), positions.stride(1))


def launch(plan: P.Plan, q, k, v, spans, *, scale=None, return_lse=False, out=None, positions=None,
           block_size=0, wrap=None):
    """Launch ``plan`` on a 5-D call: ``spans`` is ``ranges [B, S, G, n, 2]`` or, with ``block_size``,
    ``block_indices [B, S, G, n]`` (``positions`` ``[S]``/``[B, S]`` optional; the multi-token kernel reads
    ranges, so block indices are converted for it).  The decode step's hot path: two allocations and
    the launch."""
    B, S, G, h, Dk = q.shape
    T, Dv = k.shape[2], v.shape[3]
    blocks = spans.dim() == 4
    n = spans.shape[3]
    if q.dtype not in KERNEL_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        _check_kernel_inputs(("q", q), ("k", k), ("v", v))
    o, lse = _outputs((B, S, G, h, Dv), (B, S, G, h), v.dtype, q.device, return_lse, out)
    if n == 0:
        return _empty_rows(o, lse, return_lse)
    qk_scale = (scale if type(scale) is float else resolve_scale(scale, Dk)) * LOG2E
    if plan.kernel == "tokens":
        if blocks:
            spans = block_indices_to_ranges(spans, block_size, T, positions, validate=False)
        run_tokens(plan, q, k, v, o, lse, spans, qk_scale=qk_scale, wrap=wrap)
        return (o, lse) if return_lse else o
    sr = spans.stride() + (0,) if blocks else spans.stride()
    run(plan, q, k, v, o, lse, spans, positions,
        sizes=(S, G, h, Dk, Dv, n, T),
        strides=(q.stride(), k.stride(), v.stride(), o.stride(), lse.stride() if lse is not None else NO_STRIDES,
                 sr, pos_strides(positions)),
        qk_scale=qk_scale, block_size=min(block_size, max(T, 1)) if blocks else 0, wrap=wrap)
    return (o, lse) if return_lse else o


def selection(q, k, v, spans, *, scale=None, return_lse=False, out=None, per_head=False, tokens=1,
              decode=None, num_splits=None, positions=None, block_size=0, **tune):
    """The plan :func:`plan.selection` gives these explicit choices, launched (:func:`launch`).

    ``tokens > 1``: the multi-token kernel; ``decode``/``num_splits``: split-L (None: the planner decides).
    """
    B, S, G, h, Dk = q.shape
    dev = device_of(q.device)
    plan = P.selection(B, S, G, h, Dk, v.shape[3], k.shape[2], spans.shape[3], dev=dev,
                       span_mode=MODE_BLOCKS if spans.dim() == 4 and tokens == 1 else MODE_RANGES,
                       has_pos=positions is not None, has_lse=return_lse, per_head=per_head, tokens=tokens,
                       decode=decode, num_splits=num_splits, dot_f32=_interpreter_dot_f32(q.dtype, dev),
                       tune=_tune(tune) if tune else ())
    return launch(plan, q, k, v, spans, scale=scale, return_lse=return_lse, out=out, positions=positions,
                  block_size=block_size)


def sel_attn_ranges(q, k, v, ranges, *, scale=None, return_lse=False, out=None, per_head=False, **tune):
    """Ranges-native selection attention: one program per (token, group), no host packing."""
    return selection(q, k, v, ranges, scale=scale, return_lse=return_lse, out=out, per_head=per_head,
                     decode=False, **tune)


def sel_attn_blocks(q, k, v, block_indices, block_size, positions=None, *, scale=None, return_lse=False,
                    out=None, per_head=False, decode=False, num_splits=None, **tune):
    """Block-index selection attention: the kernel reads ``block_indices [B, S, G, n]`` itself.

    Block ``i`` is keys ``[i * block_size, (i + 1) * block_size)``, clamped to ``position + 1`` and to
    T; ``-1`` is no block.  ``positions`` (``[S]`` or ``[B, S]``, default ``arange(S)``) any integer dtype.
    """
    return selection(q, k, v, block_indices, scale=scale, return_lse=return_lse, out=out, per_head=per_head,
                     decode=decode, num_splits=num_splits, positions=positions, block_size=block_size, **tune)


def sel_attn_tokens(q, k, v, ranges, *, scale=None, return_lse=False, out=None, tokens=None, **tune):
    """Multi-token kernel: ``tokens`` consecutive query positions share each K/V tile they all selected.

    Fastest when neighbouring tokens select mostly the same blocks (real NSA selections);
    correct for any selections.  ``tokens`` None: as many as fill 64 rows.
    """
    if tokens is None:
        h = q.shape[3]
        tokens = tokens_per_program(h, min(tune.get("max_rows", ROWS), device_of(q.device).max_rows))
        if tokens < 2:
            raise ValueError(tokens_problem(tokens, h))
    return selection(q, k, v, ranges, scale=scale, return_lse=return_lse, out=out, tokens=tokens, **tune)


def sel_attn_decode(q, k, v, ranges, *, scale=None, return_lse=False, out=None, num_splits=None,
                    per_head=False, **tune):
    """Flash-decoding: each row's key tiles are split over ``num_splits`` programs, merged by LSE."""
    if num_splits is not None and num_splits < 1:
        raise ValueError(f"num_splits must be >= 1, got {num_splits}")
    return selection(q, k, v, ranges, scale=scale, return_lse=return_lse, out=out, per_head=per_head,
                     decode=True, num_splits=num_splits, **tune)


def _check_packed(q, k, v, k_name, v_name):
    if q.dim() != 3:
        raise ValueError(f"q must be [N, H, Dk], got shape {list(q.shape)}")
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"{k_name} has Dk={k.shape[-1]} but q has Dk={q.shape[-1]}")
    if k.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"{k_name} {list(k.shape)} and {v_name} {list(v.shape)} must agree except in the last dim")
    _check_kernel_inputs(("q", q), (k_name, k), (v_name, v))


def _run_packed(mode, q, k, v, spans, o, lse, *, L, seq_len, sk, sv, scale, return_lse, tune):
    """Packed rows as the 5-D contract: B = N rows, S = G = 1, one span per row."""
    N, H, Dk = q.shape
    Dv = v.shape[-1]
    dev = device_of(q.device)
    plan = P.packed(mode, N, H, Dk, Dv, L, dev=dev, has_lse=return_lse,
                    dot_f32=_interpreter_dot_f32(q.dtype, dev), tune=_tune(tune))
    run(plan, q, k, v, o, lse, spans,
        sizes=(1, 1, H, Dk, Dv, 1, seq_len),
        strides=((q.stride(0), 0, 0, q.stride(1), q.stride(2)), sk, sv,
                 (o.stride(0), 0, 0, o.stride(1), o.stride(2)),
                 (lse.stride(0), 0, 0, lse.stride(1)) if lse is not None else NO_STRIDES,
                 (0, 0, 0, 0, 0), (0, 0)),
        qk_scale=resolve_scale(scale, Dk) * LOG2E)
    return (o, lse) if return_lse else o


def sel_attn_fwd_dense(q, k, v, *, scale=None, return_lse=False, out=None, **tune):
    """Seed API: ``q [N, H, Dk]``; every head of row i attends all of ``k[i] [L, Dk]``."""
    _check_packed(q, k, v, "k", "v")
    if k.dim() != 3 or k.shape[0] != q.shape[0]:
        raise ValueError(f"k must be [N, L, Dk] with N={q.shape[0]}, got {list(k.shape)}")
    N, H, _ = q.shape
    L = k.shape[1]
    o, lse = _outputs((N, H, v.shape[2]), (N, H), v.dtype, q.device, return_lse, out)
    return _run_packed(MODE_DENSE, q, k, v, q, o, lse, L=L, seq_len=L,  # SPANS unused in dense mode
                       sk=(k.stride(0), 0, k.stride(1), k.stride(2)), sv=(v.stride(0), 0, v.stride(1), v.stride(2)),
                       scale=scale, return_lse=return_lse, tune=tune)


def sel_attn_fwd_varlen(q, k_all, v_all, cu_seqlens, *, scale=None, return_lse=False, out=None, **tune):
    """Seed API: row i attends ``k_all[cu_seqlens[i]:cu_seqlens[i + 1]]`` (rows of any length)."""
    _check_packed(q, k_all, v_all, "k_all", "v_all")
    N, H, _ = q.shape
    if k_all.dim() != 2:
        raise ValueError(f"k_all must be [total, Dk], got {list(k_all.shape)}")
    if cu_seqlens.dim() != 1 or cu_seqlens.shape[0] != N + 1:
        raise ValueError(f"cu_seqlens must be [N + 1] = [{N + 1}], got {list(cu_seqlens.shape)}")
    if cu_seqlens.dtype.is_floating_point:
        raise TypeError(f"cu_seqlens must be an integer tensor, got {cu_seqlens.dtype}")
    o, lse = _outputs((N, H, v_all.shape[1]), (N, H), v_all.dtype, q.device, return_lse, out)
    return _run_packed(MODE_CU, q, k_all, v_all, cu_seqlens, o, lse, L=None, seq_len=k_all.shape[0],
                       sk=(0, 0, k_all.stride(0), k_all.stride(1)), sv=(0, 0, v_all.stride(0), v_all.stride(1)),
                       scale=scale, return_lse=return_lse, tune=tune)
