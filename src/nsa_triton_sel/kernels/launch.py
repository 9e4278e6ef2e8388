"""Step 5 of the way down: the torch-side launcher.  It launches what a plan says and decides nothing.

:func:`forward` and :func:`backward` take the operator's :class:`nsa_triton_sel.plan.Plan` (``op`` asks
``plan.plan_call`` once per call); :func:`launch` one forward :class:`~nsa_triton_sel.plan.Launch`, ending in
:func:`run` (single-token and decode kernels, strided 5-D views ``[B, S, G, h, D]`` for q/o and
``[B, G, T, D]`` for k/v expressed purely as sizes and strides, so the packed seed-style layouts reuse the
ranges-native kernel without copies) or :func:`run_tokens`.  The backward: the dq kernel, the reader list
(``readers.py``), the dk/dv kernel and the reduction of split tiles (kernels: ``backward.py``).
The kernel-level entry points with explicit choices (tests, benchmarks, the seeds' APIs) live in
``direct.py``.  Every launch names its arguments (``params.packer``: the kernel's signature orders them).
"""

from __future__ import annotations

import torch

from .. import plan as P
from .. import replay
from ..contract import KERNEL_DTYPES, block_indices_to_ranges, resolve_scale
from ..plan.backward import REDUCE_WARPS, BackwardMeta
from ..plan.keymajor import BWD_GLUON_WARPS, DELTA_ROWS, MERGE_WARPS, PARTIAL_DTYPE, WS_REGISTERS, WS_WARPS
from ..plan.tiles import LOG2E
from . import backward as bwd_kernels
from . import bind, forward as fwd_kernels, params
from .readers import ReaderList, keymajor_reader_list, reader_list

NO_STRIDES = (0, 0, 0, 0)


def _interpreter_dot_f32(dtype, dev) -> bool:
    """bf16 ``tl.dot`` is wrong under the Triton interpreter: upcast there (see forward.py, DOT_F32)."""
    return dtype == torch.bfloat16 and dev.interpreter


def _check_kernel_inputs(*named):
    for name, x in named:
        if x.dtype not in KERNEL_DTYPES:
            raise TypeError(f"{name} has dtype {x.dtype}; the Triton kernels accept float16 and bfloat16")


def _tune(tune: dict) -> tuple:
    return tuple(sorted(tune.items()))


def _go(fn, wrap, plan, grid, args, kwargs) -> None:
    """Launch ``fn[grid](*args, **kwargs())``: through ``wrap`` (torch.compile) or the interpreter as
    given, on a GPU through the bound launcher (``bind.py``: no per-call argument binding).  A recording
    call (``replay.py``) is told what launched, and how."""
    rec = getattr(replay.ACTIVE, "recording", None)
    if wrap is not None or not args[0].is_cuda:
        if rec is not None:
            rec.refuse("a launch outside the bound launchers (torch.compile or the interpreter)")
        (fn if wrap is None else wrap(fn))[grid](*args, **kwargs())
        return
    b = bind.bound(fn)
    launcher = b(plan, grid, args, kwargs)  # (an interpreted kernel launches plainly there)
    if rec is None:
        return
    if launcher is not None:
        rec.launches.append((b, launcher, grid, args))
    elif b.off is not None:
        rec.refuse(f"{b.name} launches through JITFunction.run: {b.off}")
    else:
        rec.refuse(f"{b.name} is not bound yet", retry=True)


def _launch(fn, grid, named: dict, **options) -> None:
    """``fn[grid]`` with its arguments by name and its launch options (warps, stages, constexprs) through the
    bound launcher: the options are the launch's plan (``bind.py`` keys a launch on them)."""
    _go(fn, None, _tune(options), grid, bind.bound(fn).pack(**named), options.copy)


def run(plan: P.Launch, q, k, v, o, lse, spans, pos=None, *, sizes, strides, qk_scale: float, block_size: int = 0,
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

    split = plan.num_splits > 1 or meta.SPLIT
    if split:  # (token, group, split) partial results, merged below
        rows = plan.merge_grid[0] * G * plan.num_splits
        op = _empty((rows, h, Dv), torch.float32, q.device)
        lp = _empty((rows, h), torch.float32, q.device)
    else:
        op = lp = dummy
    args = params.packer(fwd_kernels.sel_fwd_kernel)(
        Q=q, K=k, V=v, O=o, LSE=dummy if split else lse_or, SPANS=spans, POS=pos_or, OP=op, LP=lp, S=S, G=G, h=h,
        Dk=Dk, Dv=Dv, n_spans=n, seq_len=T, block_size=block_size, num_splits=plan.num_splits,
        qk_scale=qk_scale, sq=sq, sk=sk, sv=sv, so=so, sl=sl, sr=sr, sp=sp)
    _go(fwd_kernels.sel_fwd_kernel, wrap, plan, plan.grid, args, fwd_kwargs)
    if not split:
        return
    _go(fwd_kernels.merge_splits_kernel, wrap, plan, plan.merge_grid,
        params.packer(fwd_kernels.merge_splits_kernel)(OP=op, LP=lp, O=o, LSE=lse_or, S=S, G=G, h=h, Dv=Dv,
                                                         num_splits=plan.num_splits, so=so, sl=sl),
        lambda: dict(BLOCK_H=meta.BLOCK_H, BLOCK_DV=meta.BLOCK_DV, HAS_LSE=meta.HAS_LSE, num_warps=4))


def run_tokens(plan: P.Launch, q, k, v, o, lse, ranges, *, qk_scale: float, wrap=None):
    """Launch ``sel_fwd_tok_kernel`` as ``plan`` says on 5-D q/o and ranges; fills ``o`` and ``lse``."""
    meta = plan.meta
    S, G, h, Dk = q.shape[1:]
    sl = lse.stride() if lse is not None else NO_STRIDES
    args = params.packer(fwd_kernels.sel_fwd_tok_kernel)(
        Q=q, K=k, V=v, O=o, LSE=lse if lse is not None else o, SPANS=ranges, S=S, G=G, h=h, Dk=Dk, Dv=v.shape[3],
        n_spans=ranges.shape[3], seq_len=k.shape[2], qk_scale=qk_scale, sq=q.stride(), sk=k.stride(),
        sv=v.stride(), so=o.stride(), sl=sl, sr=ranges.stride())
    _go(fwd_kernels.sel_fwd_tok_kernel, wrap, plan, plan.grid, args,
        lambda: dict(num_warps=meta.num_warps, num_stages=meta.num_stages, **meta.constexprs()))


def run_keymajor(plan: P.Launch, q, k, v, o, lse, ranges, *, qk_scale: float, readers_out: list | None = None):
    """Launch the key-major forward as ``plan`` says on 5-D q/o and ranges clamped into ``[0, T]``: per pass over
    ``meta.groups_per_pass`` KV heads (strided views, no copies), the reader list, one scaled partial result
    (``plan.keymajor.PARTIAL_DTYPE``) per (row, key tile, head) and their merge; fills ``o`` and ``lse``.  Device
    work only (the reader list is sized from the shapes), so it captures in a CUDA graph; not traceable by Inductor
    (the reader list sorts with torch), so a traced launch never plans it.  ``readers_out``: each pass's reader
    list is appended (the backward's passes read the same lists)."""
    meta = plan.meta
    B, S, G, h, _ = q.shape
    gpp = meta.groups_per_pass
    slots = B * S * gpp * meta.per_row
    op = torch.empty((slots, h, v.shape[3]), dtype=getattr(torch, PARTIAL_DTYPE), device=q.device)
    op_scale = torch.empty((slots, h), dtype=torch.float32, device=q.device)
    lp = torch.empty((slots, h), dtype=torch.float32, device=q.device)
    for g0 in range(0, G, gpp):
        g1 = min(g0 + gpp, G)
        readers = _forward_keymajor_pass(plan, q[:, :, g0:g1], k[:, g0:g1], v[:, g0:g1], o[:, :, g0:g1],
                                         lse[:, :, g0:g1] if lse is not None else None, ranges[:, :, g0:g1], op,
                                         op_scale, lp, qk_scale)
        if readers_out is not None:
            readers_out.append(readers)


def _forward_keymajor_pass(plan: P.Launch, q, k, v, o, lse, ranges, op, op_scale, lp, qk_scale: float) -> ReaderList:
    meta = plan.meta
    B, S, G, h, Dk = q.shape
    T, Dv = k.shape[2], v.shape[3]
    readers = keymajor_reader_list(ranges, T, meta)
    if meta.ws and _rows_for_cp_async(readers, q, k, v):
        from .keymajor_ws import sel_fwd_keymajor_ws_kernel as fn  # Gluon: imported where the Triton has it

        args = params.packer(fn)(Q=q, K=k, V=v, OP=op, OP_SCALE=op_scale, LP=lp, ENTRIES=readers.entries,
                                 ORIGIN=readers.origin, CHUNKS=readers.chunks, G=G, h=h, T=T, NT=readers.n_tiles,
                                 qk_scale=qk_scale, sq=q.stride()[:4], sk=k.stride()[:3], sv=v.stride()[:3])
        _go(fn, None, plan, (readers.chunks.shape[0],), args,
            lambda: dict(num_warps=WS_WARPS, maxnreg=WS_REGISTERS, **meta.ws_constexprs()))
    else:
        fn = fwd_kernels.sel_fwd_keymajor_kernel
        args = params.packer(fn)(Q=q, K=k, V=v, OP=op, OP_SCALE=op_scale, LP=lp, ENTRIES=readers.entries,
                                 ORIGIN=readers.origin, CHUNKS=readers.chunks, G=G, h=h, Dk=Dk, Dv=Dv, T=T,
                                 NT=readers.n_tiles, qk_scale=qk_scale, sq=q.stride(), sk=k.stride(), sv=v.stride())
        _go(fn, None, plan, (readers.chunks.shape[0],), args,
            lambda: dict(num_warps=meta.num_warps, num_stages=meta.num_stages, **meta.kernel_constexprs()))
    merge = fwd_kernels.sel_fwd_keymajor_merge_kernel
    args = params.packer(merge)(OP=op, OP_SCALE=op_scale, LP=lp, SPANS=ranges, O=o,
                                LSE=lse if lse is not None else o, S=S, G=G, h=h, Dv=Dv, n_spans=ranges.shape[3],
                                T=T, per_row=meta.per_row, n_rows=B * S * G,
                                sr=ranges.stride(), so=o.stride(), sl=lse.stride() if lse is not None else NO_STRIDES)
    _go(merge, None, plan, (P.cdiv(B * S * G, meta.merge_rows_per_program()),), args,
        lambda: dict(num_warps=MERGE_WARPS, num_stages=1, **meta.merge_constexprs()))
    return readers


def _rows_for_cp_async(readers: ReaderList, *rows) -> bool:
    """Whether the key-major Gluon kernels take these tensors (q, k, v; dO for the backward's): bf16 rows they
    copy 16 bytes at a time (unit last strides, the other strides and the addresses multiples of 16 bytes) and a
    reader list their int32 positions address (fewer than 2^30 entries).  Otherwise the Triton kernel runs (the
    same results)."""
    if readers.entries.shape[0] >= 1 << 30:
        return False
    for x in rows:
        if x.dtype != torch.bfloat16 or x.stride(-1) != 1 or x.data_ptr() % 16 \
                or any(st % 8 for st in x.stride()[:-1]):
            return False
    return True


def _empty(shape, dtype, device):
    """``torch.empty``, noted by a recording call (``replay.py``): the launcher's outputs and workspaces."""
    t = torch.empty(shape, dtype=dtype, device=device)
    rec = getattr(replay.ACTIVE, "recording", None)
    if rec is not None:
        rec.allocs.append((t, tuple(shape), dtype))
    return t


def _outputs(shape_o, shape_l, dtype, device, return_lse, out=None, lse_out=None):
    o = _empty(shape_o, dtype, device) if out is None else out
    lse = (_empty(shape_l, torch.float32, device) if lse_out is None else lse_out) if return_lse else None
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


def launch(plan: P.Launch, q, k, v, spans, *, scale=None, return_lse=False, out=None, lse_out=None, positions=None,
           block_size=0, wrap=None, readers_out: list | None = None):
    """Launch ``plan`` on a 5-D call: ``spans`` is ``ranges [B, S, G, n, 2]`` or, with ``block_size``,
    ``block_indices [B, S, G, n]`` (``positions`` ``[S]``/``[B, S]`` optional; the multi-token kernel reads
    ranges, so block indices are converted for it).  The decode step's hot path: two allocations and
    the launch.  ``readers_out``: the key-major forward's reader lists (:func:`run_keymajor`)."""
    B, S, G, h, Dk = q.shape
    T, Dv = k.shape[2], v.shape[3]
    blocks = spans.dim() == 4
    n = spans.shape[3]
    if q.dtype not in KERNEL_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        _check_kernel_inputs(("q", q), ("k", k), ("v", v))
    o, lse = _outputs((B, S, G, h, Dv), (B, S, G, h), v.dtype, q.device, return_lse, out, lse_out)
    if n == 0:
        return _empty_rows(o, lse, return_lse)
    qk_scale = (scale if type(scale) is float else resolve_scale(scale, Dk)) * LOG2E
    if plan.kernel in ("tokens", "keymajor"):
        if blocks:
            spans = block_indices_to_ranges(spans, block_size, T, positions, validate=False)
        if plan.kernel == "tokens":
            run_tokens(plan, q, k, v, o, lse, spans, qk_scale=qk_scale, wrap=wrap)
        else:
            run_keymajor(plan, q, k, v, o, lse, spans, qk_scale=qk_scale, readers_out=readers_out)
        return (o, lse) if return_lse else o
    sr = spans.stride() + (0,) if blocks else spans.stride()
    run(plan, q, k, v, o, lse, spans, positions,
        sizes=(S, G, h, Dk, Dv, n, T),
        strides=(q.stride(), k.stride(), v.stride(), o.stride(), lse.stride() if lse is not None else NO_STRIDES,
                 sr, pos_strides(positions)),
        qk_scale=qk_scale, block_size=min(block_size, max(T, 1)) if blocks else 0, wrap=wrap)
    return (o, lse) if return_lse else o


def forward(p: P.Plan, q, k, v, spans, positions, *, scale: float, block_size: int, wrap=None,
            readers_out: list | None = None):
    """The forward of an operator call: ``(out [B, S, G, h, Dv], lse [B, S, G, h] float32)``, contiguous (as the
    operator's fake implementation says: a compiled graph assumes those strides).  ``readers_out`` (where
    ``p.backward_reads_forward_readers``) receives the key-major forward's reader lists for :func:`backward`."""
    if not p.rows_as_batch:
        return launch(p.forward, q, k, v, spans, scale=scale, return_lse=True, positions=positions,
                      block_size=block_size, wrap=wrap, readers_out=readers_out)
    # A packed batch's few rows: each row a batch entry of one query over the shared keys (batch stride 0),
    # so the split-L decode kernel runs them as it runs a fixed batch (exact: the ranges are global).
    B, S, G, h, _ = q.shape
    out = torch.empty((B, S, G, h, v.shape[3]), dtype=v.dtype, device=q.device)
    lse = torch.empty((B, S, G, h), dtype=torch.float32, device=q.device)
    launch(p.forward, q.transpose(0, 1), k.expand(S, *k.shape[1:]), v.expand(S, *v.shape[1:]), spans.transpose(0, 1),
           scale=scale, return_lse=True, out=out.transpose(0, 1), lse_out=lse.transpose(0, 1), wrap=wrap)
    return out, lse


def backward(p: P.Plan, q, k, v, ranges, out, lse, grad_out, grad_lse, *, scale: float, readers: list | None = None):
    """``(dq, dk, dv)`` of an operator call, deterministic (no atomics), with no host read.

    ``ranges`` are the forward's spans as ranges clamped into ``[0, T]``; ``grad_lse`` (or None) is the
    gradient of the LSE output, folded into ``delta`` by the dq kernel.  ``readers``: the key-major forward's
    reader lists (:func:`forward`'s ``readers_out``), one per pass; the key-major backward takes them out of the
    list as it goes (so each is freed after its pass) and builds its own where the list is empty."""
    meta = p.backward
    B, S, G, h, Dk = q.shape
    T, Dv = k.shape[2], v.shape[3]
    n = ranges.shape[3]
    dq = torch.empty((B, S, G, h, Dk), dtype=q.dtype, device=q.device)
    dk = torch.empty((B, G, T, Dk), dtype=k.dtype, device=q.device)
    dv = torch.empty((B, G, T, Dv), dtype=v.dtype, device=q.device)
    if n == 0 or T == 0 or B * S * G == 0:  # no key is read: every gradient is zero
        return dq.zero_(), dk.zero_(), dv.zero_()
    if grad_lse is None:
        grad_lse = torch.zeros((), dtype=torch.float32, device=q.device).expand(B, S, G, h)
    delta = torch.empty((B, S, G, h), dtype=torch.float32, device=q.device)
    if p.delta_forward is not None:  # delta="fp32": rowsum(dO * O) with O recomputed in fp32
        o32 = torch.empty(grad_out.shape, dtype=torch.float32, device=q.device)
        launch(p.delta_forward, q, k, v, ranges, scale=scale, out=o32)
        torch.sum(grad_out.float() * o32, dim=-1, out=delta)
    nonfinite = torch.zeros((1,), dtype=torch.int32, device=q.device)  # raised by the dq kernel, read by dk/dv
    if p.dq_groups_per_pass:
        _backward_keymajor(p, q, k, v, ranges, out, lse, grad_out, grad_lse, dq, dk, dv, delta, nonfinite, scale,
                           readers)
        return dq, dk, dv
    _launch_dq(q, k, v, ranges, out, lse, grad_out, grad_lse, dq, delta, nonfinite, meta, scale)
    readers = reader_list(ranges, T, meta, per_row=p.reader_per_row, chunk=p.reader_chunk)
    _launch_dkdv(q, k, v, lse, grad_out, delta, nonfinite, dk, dv, readers, meta, scale)
    return dq, dk, dv


def _launch_dq(q, k, v, ranges, out, lse, grad_out, grad_lse, dq, delta, nonfinite, meta: BackwardMeta, sc: float):
    """The dq kernel; it also stores delta (minus dlse) for the dk/dv kernel and sets ``nonfinite`` to 1 when a
    row's q or dO is not finite (the dk/dv kernel then isolates such rows)."""
    B, S, G, h, Dk = q.shape
    named = dict(Q=q, K=k, V=v, O=out, DO=grad_out, LSE=lse, DLSE=grad_lse, DELTA=delta, DQ=dq, SPANS=ranges,
                 NONFINITE=nonfinite, S=S, G=G, h=h, Dk=Dk, Dv=v.shape[3], n_spans=ranges.shape[3],
                 qk_scale=sc * LOG2E, scale=sc, sq=q.stride(), sk=k.stride(), sv=v.stride(), so=out.stride(),
                 sdo=grad_out.stride(), sl=lse.stride(), sdl=grad_lse.stride(), sr=ranges.stride())
    if meta.TOK:
        _launch(bwd_kernels.sel_bwd_dq_tok_kernel, (B * -(-S // meta.TOK), G), named, num_warps=meta.tok_warps,
                num_stages=meta.tok_stages, **meta.dq_tok_constexprs())
        return
    _launch(bwd_kernels.sel_bwd_dq_kernel, (B * S, G * -(-h // meta.BLOCK_H)), named, num_warps=meta.dq_warps,
            num_stages=meta.dq_stages, **meta.dq_constexprs())


def _backward_keymajor(p: P.Plan, q, k, v, ranges, out, lse, grad_out, grad_lse, dq, dk, dv, delta, nonfinite,
                       sc: float, readers: list | None):
    """The key-major backward (small groups): delta and the non-finite flag first (one streaming kernel), then per
    pass over ``p.dq_groups_per_pass`` KV heads (strided views) the forward's reader list (the one the forward
    built, from ``readers``, or built again: its tile, bound and slots), cut into ``p.reader_chunk`` entries per
    program: ``sel_bwd_keymajor_kernel`` computes dk and dv and one scaled partial dq per (row, key tile, head)
    (where the plan says so, ``keymajor_bwd_gluon.sel_bwd_keymajor_gluon_kernel`` walks the chunks it covers
    first, with the same results, and the Triton kernel the chunks it hands on), split tiles are reduced as the
    dk/dv kernel's, and each row's partials are summed in slot order."""
    B, S, G, h, Dk = q.shape
    meta = p.forward.meta
    n_rows = B * S * G * h
    do_l1_log2 = torch.empty_like(delta)
    _launch(bwd_kernels.sel_bwd_dq_keymajor_delta_kernel, (P.cdiv(n_rows, DELTA_ROWS),),
            dict(Q=q, O=out, DO=grad_out, DLSE=grad_lse, DELTA=delta, DO_L1_LOG2=do_l1_log2, NONFINITE=nonfinite,
                 S=S, G=G, h=h, Dk=Dk, Dv=v.shape[3], n_rows=n_rows, sq=q.stride(), so=out.stride(),
                 sdo=grad_out.stride(), sdl=grad_lse.stride()),
            num_warps=MERGE_WARPS, num_stages=1, **meta.delta_constexprs(load_delta=p.delta_forward is not None))
    gpp = p.dq_groups_per_pass
    dqp = torch.empty((B * S * gpp * meta.per_row, h, Dk), dtype=getattr(torch, PARTIAL_DTYPE), device=q.device)
    dqp_scale = torch.empty((B * S * gpp * meta.per_row, h), dtype=torch.float32, device=q.device)
    for g0 in range(0, G, gpp):
        g = slice(g0, min(g0 + gpp, G))
        _backward_keymajor_pass(p, q[:, :, g], k[:, g], v[:, g], ranges[:, :, g], lse[:, :, g], grad_out[:, :, g],
                                delta[:, :, g], do_l1_log2[:, :, g], nonfinite, dq[:, :, g], dk[:, g], dv[:, g], dqp,
                                dqp_scale, sc,
                                readers.pop(0) if readers else None)


def _backward_keymajor_pass(p: P.Plan, q, k, v, ranges, lse, grad_out, delta, do_l1_log2, nonfinite, dq, dk, dv, dqp,
                            dqp_scale, sc: float, forward_readers: ReaderList | None):
    """One pass of the key-major backward over the KV heads of its views.  Its reader list and workspace are
    freed on return, before the next pass (with the partials, they set the backward's peak)."""
    B, S, G, h, Dk = q.shape
    T, Dv = k.shape[2], v.shape[3]
    meta = p.forward.meta
    if forward_readers is not None:
        readers = forward_readers.with_chunk(p.reader_chunk)
    else:
        readers = keymajor_reader_list(ranges, T, meta, p.reader_chunk)
    ws = torch.empty((max(readers.slots, 1), meta.BLOCK_N, meta.DK1 + meta.DK2 + meta.BLOCK_DV), dtype=torch.float32,
                     device=q.device)
    named = dict(Q=q, K=k, V=v, DO=grad_out, LSE=lse, DELTA=delta, DO_L1_LOG2=do_l1_log2, DK=dk, DV=dv, DQP=dqp,
                 DQP_SCALE=dqp_scale, WS=ws, ENTRIES=readers.entries, ORIGIN=readers.origin, CHUNKS=readers.chunks,
                 NONFINITE=nonfinite, G=G, h=h, T=T, NT=readers.n_tiles, qk_scale=sc * LOG2E, scale=sc)
    chunks = readers.chunks
    if meta.bwd_gluon and _rows_for_cp_async(readers, q, k, v, grad_out) \
            and all(x.stride(-1) == 1 for x in (dk, dv)):
        from .keymajor_bwd_gluon import sel_bwd_keymajor_gluon_kernel as fn  # Gluon: imported where the Triton has it

        # the chunks it walks come back with tile id -1, and the Triton kernel walks the others
        chunks = torch.empty_like(readers.chunks)
        _launch(fn, (readers.chunks.shape[0],),
                dict(named, CHUNKS_LEFT=chunks, sq=q.stride()[:4], sk=k.stride()[:3], sv=v.stride()[:3],
                     sdo=grad_out.stride()[:4], sl=lse.stride(), sd=delta.stride(), sdk=dk.stride()[:3],
                     sdv=dv.stride()[:3]),
                num_warps=BWD_GLUON_WARPS, **meta.bwd_gluon_constexprs())
    _launch(bwd_kernels.sel_bwd_keymajor_kernel, (readers.chunks.shape[0],),
            dict(named, CHUNKS=chunks, Dk=Dk, Dv=Dv, sq=q.stride(), sk=k.stride(), sv=v.stride(),
                 sdo=grad_out.stride(), sl=lse.stride(), sd=delta.stride(), sdk=dk.stride()[:3], sdv=dv.stride()[:3]),
            num_warps=meta.bwd_warps, num_stages=meta.bwd_stages, **meta.bwd_constexprs())
    if readers.slots:
        _reduce_split_tiles(ws, readers, dk, dv, p.backward)
    _launch(bwd_kernels.sel_bwd_dq_keymajor_merge_kernel, (P.cdiv(B * S * G, meta.merge_rows_per_program()),),
            dict(DQP=dqp, DQP_SCALE=dqp_scale, SPANS=ranges, DQ=dq, S=S, G=G, h=h, Dk=Dk, n_spans=ranges.shape[3],
                 T=T, per_row=meta.per_row, n_rows=B * S * G, sr=ranges.stride(), sdq=dq.stride()),
            num_warps=MERGE_WARPS, num_stages=1, **meta.dq_merge_constexprs(Dk))


def _launch_dkdv(q, k, v, lse, grad_out, delta, nonfinite, dk, dv, readers: ReaderList, meta: BackwardMeta,
                 sc: float):
    B, S, G, h, Dk = q.shape
    T, Dv = k.shape[2], v.shape[3]
    width = meta.DK1 + meta.DK2 + meta.BLOCK_DV
    ws = torch.empty((max(readers.slots, 1), meta.KV_BLOCK_N, width), dtype=torch.float32, device=q.device)
    _launch(bwd_kernels.sel_bwd_dkdv_kernel, (readers.chunks.shape[0],),
            dict(Q=q, K=k, V=v, DO=grad_out, LSE=lse, DELTA=delta, DK=dk, DV=dv, WS=ws, ENTRIES=readers.entries,
                 CHUNKS=readers.chunks, NONFINITE=nonfinite, G=G, h=h, Dk=Dk, Dv=Dv, T=T, NT=readers.n_tiles,
                 qk_scale=sc * LOG2E, scale=sc, sq=q.stride(), sk=k.stride(), sv=v.stride(), sdo=grad_out.stride(),
                 sl=lse.stride(), sd=delta.stride(), sdk=dk.stride()[:3], sdv=dv.stride()[:3]),
            num_warps=meta.kv_warps, num_stages=meta.kv_stages, **meta.dkdv_constexprs())
    if readers.slots:
        _reduce_split_tiles(ws, readers, dk, dv, meta)


def _reduce_split_tiles(ws, readers: ReaderList, dk, dv, meta: BackwardMeta):
    """Sum the workspace slots of the key tiles whose readers were split over several programs into dk, dv."""
    _launch(bwd_kernels.sel_bwd_reduce_kernel, (readers.tile_slots.shape[0],),
            dict(WS=ws, TILE_SLOTS=readers.tile_slots, DK=dk, DV=dv, G=dk.shape[1], T=dk.shape[2], NT=readers.n_tiles,
                 Dk=dk.shape[3], Dv=dv.shape[3], sdk=dk.stride()[:3], sdv=dv.stride()[:3]),
            num_warps=REDUCE_WARPS, num_stages=1, **meta.reduce_constexprs())
