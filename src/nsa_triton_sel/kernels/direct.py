"""Kernel-level entry points with explicit choices: the kernels without the dispatcher or the operator.

For tests, benchmarks and the seeds' kernel-level APIs.  Each asks the planner for an explicit plan with
the given choices (``**tune`` overrides the planned launch: block_n, num_warps, num_stages, max_rows,
rows_hint, keys_hint; the backward's keywords are ``plan.backward.backward_meta``'s) and hands it to the
launcher (``launch.py``), as the operator does with ``plan.plan_call``'s plan.

- ``sel_attn_ranges``: ``q [B, S, G, h, Dk]``, ``k/v [B, G, T, D]``, ``ranges [B, S, G, n, 2]``;
- ``sel_attn_blocks``: the same with ``block_indices [B, S, G, n]`` read by the kernel itself;
- ``sel_attn_decode``: the ranges contract, split-L over the keys (flash-decoding);
- ``sel_attn_tokens``: several consecutive tokens per program (shared selections);
- ``sel_attn_keymajor``: one program per key tile's readers, partial results merged per row (small groups);
- ``sel_attn_fwd_dense``: ``q [N, H, Dk]``, ``k [N, L, Dk]``, ``v [N, L, Dv]``;
- ``sel_attn_fwd_varlen``: ``q [N, H, Dk]``, ``k_all [total, Dk]``, ``v_all [total, Dv]``, ``cu_seqlens [N + 1]``;
- ``sel_attn_backward``: ``(dq, dk, dv)`` of ``sel_attn_ranges`` (no autograd: the library's one autograd
  formula is the operator's, ``op.py``).

These functions trust their caller (the dispatcher validates); they check only what would make the
kernel read out of bounds or compile something unsupported.
"""

from __future__ import annotations

import torch

from .. import plan as P
from ..contract import clamp_ranges, resolve_scale
from ..device import ROWS, device_of, shared_limit
from ..plan.backward import backward_meta
from ..plan.tiles import LOG2E, MODE_BLOCKS, MODE_CU, MODE_DENSE, MODE_RANGES, tokens_per_program, tokens_problem
from .launch import NO_STRIDES, _check_kernel_inputs, _interpreter_dot_f32, _outputs, _tune, backward, launch, run


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


def sel_attn_keymajor(q, k, v, spans, *, scale=None, return_lse=False, out=None, positions=None, block_size=0,
                      span_len=0, **tune):
    """Key-major forward (small groups): each key tile is loaded once for every (token, head) that selected it,
    partial results merged per row by LSE.  ``spans``: ranges, or block indices with ``block_size``;
    ``span_len`` bounds a span's keys (0: unbounded ranges, whose workspace grows with T).  ``**tune``: block_n,
    pairs, num_warps, num_stages, chunk, max_rows, gluon_ws (False: the Triton partial kernel where the
    warp-specialised Gluon one would run)."""
    B, S, G, h, Dk = q.shape
    dev = device_of(q.device)
    if "keymajor" in dev.avoided:  # the compiler would crash the process: say so instead
        raise RuntimeError(f"the key-major forward does not compile with Triton {dev.triton} on sm_{dev.arch} "
                           "(a known-bad window names the path there: data/known_bad.toml); use selection_attention, which "
                           "runs token-major there, or Triton >= 3.3")
    blocks = spans.dim() == 4
    plan = P.keymajor(B, S, G, h, Dk, v.shape[3], k.shape[2], spans.shape[3], dev=dev,
                      span_len=block_size if blocks else span_len, aligned=blocks, has_lse=return_lse,
                      dot_f32=_interpreter_dot_f32(q.dtype, dev), bf16=q.dtype == torch.bfloat16,
                      tune=_tune(tune) if tune else ())
    return launch(plan, q, k, v, spans, scale=scale, return_lse=return_lse, out=out, positions=positions,
                  block_size=block_size)


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


def sel_attn_backward(q, k, v, ranges, out, lse, grad_out, *, scale=None, grad_lse=None, **tune):
    """Gradients ``(dq, dk, dv)`` of ``out, lse = sel_attn_ranges(q, k, v, ranges, scale=scale, return_lse=True)``.

    ``grad_out`` is the gradient of ``out``, ``grad_lse`` (optional) that of ``lse``.  Deterministic (no
    atomics).  ``tune``: ``plan.backward.backward_meta``'s keywords (``dq_block_n``, ``dq_warps``,
    ``dq_stages``, ``kv_block_n``, ``rows``, ``kv_warps``, ``kv_stages``, ``chunk``, ``programs_per_sm``,
    ``dq_tokens``, ``tok_block_n``, ``tok_warps``, ``tok_stages``, ``delta``, and ``shared``: the bytes of shared
    memory a program may use, which size the dk/dv step; default: this GPU's, ``device.shared_limit``).
    """
    _check_backward_inputs(q, k, v, ranges, out, lse, grad_out)
    B, S, G, h, Dk = q.shape
    T, Dv = k.shape[2], v.shape[3]
    n = ranges.shape[3]
    dev = device_of(q.device)
    tune.setdefault("max_rows", dev.max_rows)
    tune.setdefault("shared", shared_limit(dev.arch))
    meta = backward_meta(h=h, Dk=Dk, Dv=Dv, n_spans=max(n, 1), dot_f32=_interpreter_dot_f32(q.dtype, dev), **tune)
    per_row = P.entries_per_row(n, T, meta.KV_BLOCK_N, 0, aligned=False)
    delta_forward = None
    if meta.delta == "fp32":
        delta_forward = P.selection(B, S, G, h, Dk, Dv, T, n, dev=dev, has_lse=False, decode=False,
                                    dot_f32=_interpreter_dot_f32(q.dtype, dev))
    p = P.Plan(None, meta, 1, False, per_row, meta.chunk_for(B * S * G * per_row, h, dev.sm_count), delta_forward)
    return backward(p, q, k, v, clamp_ranges(ranges, T), out, lse, grad_out, grad_lse, scale=resolve_scale(scale, Dk))


def _check_backward_inputs(q, k, v, ranges, out, lse, grad_out):
    _check_kernel_inputs(("q", q), ("k", k), ("v", v))
    B, S, G, h, Dk = q.shape
    Dv = v.shape[3]
    want = {"out": (out, (B, S, G, h, Dv)), "grad_out": (grad_out, (B, S, G, h, Dv)), "lse": (lse, (B, S, G, h))}
    for name, (x, shape) in want.items():
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(x).__name__}")
        if tuple(x.shape) != shape:
            raise ValueError(f"{name} has shape {list(x.shape)}; expected {list(shape)} from q {list(q.shape)} "
                             f"and v {list(v.shape)}")
        if x.device != q.device:
            raise ValueError(f"{name} is on {x.device} but q is on {q.device}")
    if lse.dtype != torch.float32:
        raise TypeError(f"lse has dtype {lse.dtype}; the forward stores it as float32")
    if ranges.dim() != 5 or tuple(ranges.shape[:3]) != (B, S, G) or ranges.shape[4] != 2:
        raise ValueError(f"ranges has shape {list(ranges.shape)}; expected [B, S, G, n, 2] = [{B}, {S}, {G}, n, 2]")
