"""Variants of the key-major path's Gluon kernels (Triton >= 3.6, sm_90): the forward's warp-specialised partial
kernel and the backward's kernel.

The library ships one of each (``ws1-nb3-st-r128`` as ``nsa_triton_sel.kernels.keymajor_ws``, ``b-nb4-defer`` as
``nsa_triton_sel.kernels.keymajor_bwd_gluon``); this probe keeps the others, for timing against them.

    python -m bench.probes.keymajor_ceiling --gluon ws2-nb4,ws1-nb4 [--H 4,8]     # timed beside the shipped kernel
    python -m bench.probes.keymajor_ceiling --H 32,8,4 --skip-forward --gluon-bwd b-nb4,b-nb4-defer   # backward
    python -m bench.probes.keymajor_gluon --aot [--only NAMES] [--python PYTHON_WITH_TRITON_3_6]  # no GPU

**The forward.** The Triton partial kernel (``sel_fwd_keymajor_kernel``) runs at about 55 % of the memory ceiling
of its own access pattern on an H200 (``bench.probes.keymajor_ceiling``): two programs of 4 warps an SM (254
registers a thread), 0.43 eligible warps per scheduler, so the q gathers, the MMA waits, the softmax and the partial
stores of a step follow one another.  Here the same step is split between warps:

- the kernel's 4 warps gather each step's q rows by ``cp.async`` into one of ``NB`` shared-memory slots and
  arrive on the slot's ``ready`` barrier;
- ``NC`` partitions of 4 warps (``CREGS`` registers asked for) take alternate steps: wait for the slot, score
  MMA (``q K^T``), release the slot (q is read only by that MMA), softmax over the tile's keys, ``P V``, and store
  the normalised partial result (float16, divided by the tile's power of two), its scale and its log2 LSE, as
  the shipped kernel does.  The key and value tile sit in shared memory for the whole chunk.

While one partition waits for an MMA or issues its stores, the other computes and the gather warps run ahead.
The kernel covers bf16, Dk = Dv = 128, 64-key tiles and reader lists under 2^31 entries; a value tile with
non-finite values takes the shipped kernel's isolating step (its values loaded as 0, NaN given to the columns a pair
reads from such a key).

**The backward** (``bwd_kernel``, variants ``b-*``).  The Triton kernel ``sel_bwd_keymajor_kernel`` walks one chunk
of a key tile's reader list and, per step of 32 (entry, head) pairs, gathers their q and dO rows, computes ``P^T``
and ``dS^T`` once and uses them three times: ``dv += P^T dO``, ``dk += dS^T q`` (kept on chip for the tile) and
each pair's partial ``dq = dS K`` (float16 in the pair's own slot, scaled by a power of two from a bound known
before the MMA).  On an H200 it runs at 32-39 % of the memory ceiling of its access pattern, latency-bound at 255
registers (``bench/results/2026-11-29-h200-triton3.6-keymajor-ceiling/``).  Here it is the dk/dv probe's best Gluon
walk (``dkdv_gluon``'s ``g-nb4-fast-i32``: ``cp.async`` slots ``NB - 1`` steps ahead, the next step's score MMAs
issued before this step's dv/dk MMAs) with the partial dq added as one MMA, ``dq^T [D, ROWS] = K^T dS^T`` (the
key tile already in shared memory, the step's ``dS^T`` in a two-slot shared ring: no M = 32 MMA); ``DQ_EARLY = 1``
issues it with the step's dv/dk MMAs, in flight across the next softmax (more registers live), ``0`` after that
softmax, waited for at once, ``2`` after that softmax, waited for once the next step's MMA operands are ready.
``MODE`` bit 4: no key mask in a step whose pairs all read the whole tile; bit 8: int32 q/dO row offsets.  The
variants cover the Triton kernel's common walk only (bf16, Dk = Dv = 128, 64-key tiles, every q, dO, k and v value
finite).  What they measured: ``bench/results/2026-11-30-h200-triton3.6-keymajor-bwd-gluon/``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import async_copy, fence_async_shared, mbarrier, \
    warpgroup_mma, warpgroup_mma_wait

# the reader-list chunk; the key and value tile in shared memory, the value tile's scale and marks and a CTA-wide
# barrier, as the shipped warp-specialised kernel has them
from bench.probes.dkdv_gluon import _chunk
from nsa_triton_sel.kernels.keymajor_ws import _cta_barrier, _key_tile, _value_tile
# the gather warps: the shipped kernel's gather partition (step j's q rows into slot j % NB)
from nsa_triton_sel.kernels.keymajor_ws import _gather as _producer
# the backward's: the shipped backward kernel's helpers (``b-nb4-defer`` is that kernel,
# ``sel_bwd_keymajor_gluon_kernel``)
from nsa_triton_sel.kernels.keymajor_bwd_gluon import _chunk_row, _gather_step, _key_tile_max, _softmax_tiles, \
    _step_exponent, _step_tokens, _step_vectors, _store_partial_dq, _store_tile

ROOT = Path(__file__).resolve().parents[2]

# (name, NB slots, NC MMA partitions, CREGS registers they ask for, MAXNREG the launch's cap a thread, MODE):
# MODE bit 1 stores the partial rows through a row-major blocked layout (16-byte stores; else straight from the MMA
# layout), bit 2 issues the next step's score MMA before this step's softmax
VARIANTS = [
    ("ws1-nb3", 3, 1, 232, 240, 0),
    ("ws1-nb4", 4, 1, 232, 240, 0),
    ("ws2-nb4", 4, 2, 160, 168, 0),
    ("ws2-nb6", 6, 2, 160, 168, 0),
    ("ws2-nb4-r128", 4, 2, 128, 128, 0),
    ("ws2-nb4-st", 4, 2, 160, 168, 1),
    ("ws2-nb4-ov", 4, 2, 160, 168, 2),
    ("ws2-nb4-st-ov", 4, 2, 160, 168, 3),
    ("ws3-nb5-st", 5, 3, 128, 128, 1),
    ("ws3-nb5-st-ov", 5, 3, 128, 128, 3),
    ("ws1-nb4-st-ov", 4, 1, 232, 240, 3),
    ("ws1-nb4-st-r128", 4, 1, 128, 128, 1),
    ("ws1-nb3-st-ov-r128", 3, 1, 128, 128, 3),
    ("ws1-nb3-st-r128", 3, 1, 128, 128, 1),
    ("ws2-nb4-st-r128", 4, 2, 128, 128, 1),
    ("ws3-nb4-st", 4, 3, 128, 128, 1),
    ("ws3-nb6-st", 6, 3, 128, 128, 1),
]


@gluon.jit
def _consumer(k_sh, v_sh, vbad_sh, any_bad, q_sh, ready, empty, OP, OP_SCALE, LP, ENTRIES, ORIGIN, e0, e1, h, qk_scale,
              e_tile,
              C: gl.constexpr, NC: gl.constexpr, BLOCK_N: gl.constexpr, ROWS: gl.constexpr, D: gl.constexpr,
              HP: gl.constexpr, NB: gl.constexpr, MODE: gl.constexpr):
    """MMA partition ``C`` of ``NC`` (4 warps): steps ``C, C + NC, ...`` of the chunk, each the shipped kernel's
    step (``_keymajor_step``) on the slot's q rows; the walk with the isolating step is a copy of its own, taken
    for the whole chunk, so that its extra accumulator costs the common walk no registers."""
    if any_bad:
        _walk(k_sh, v_sh, vbad_sh, q_sh, ready, empty, OP, OP_SCALE, LP, ENTRIES, ORIGIN, e0, e1, h, qk_scale, e_tile,
              C, NC, BLOCK_N, ROWS, D, HP, NB, MODE, True)
    else:
        _walk(k_sh, v_sh, vbad_sh, q_sh, ready, empty, OP, OP_SCALE, LP, ENTRIES, ORIGIN, e0, e1, h, qk_scale, e_tile,
              C, NC, BLOCK_N, ROWS, D, HP, NB, MODE, False)


@gluon.jit
def _walk(k_sh, v_sh, vbad_sh, q_sh, ready, empty, OP, OP_SCALE, LP, ENTRIES, ORIGIN, e0, e1, h, qk_scale, e_tile,
          C: gl.constexpr, NC: gl.constexpr, BLOCK_N: gl.constexpr, ROWS: gl.constexpr, D: gl.constexpr,
          HP: gl.constexpr, NB: gl.constexpr, MODE: gl.constexpr, ISOLATE: gl.constexpr):
    """The steps of MMA partition ``C`` (see :func:`_consumer`); ``ISOLATE``: the value tile holds a non-finite
    value (loaded as 0 in ``v_sh``, marked in ``vbad_sh``)."""
    STEP: gl.constexpr = ROWS // HP
    mma_s: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                    instr_shape=[16, BLOCK_N, 16])
    mma_o: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    p_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_o, k_width=2)
    # the store's layout: 8 halves (16 bytes) a thread along a row (bit 1), or the MMA's own
    out_l: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0]) if (MODE & 1) != 0 else mma_o
    srow: gl.constexpr = gl.SliceLayout(1, mma_s)
    orow: gl.constexpr = gl.SliceLayout(1, out_l)
    n_steps = gl.cdiv(e1 - e0, STEP)
    n_mine = gl.maximum(gl.cdiv(n_steps - C, NC), 0)
    zero_s = gl.zeros([ROWS, BLOCK_N], gl.float32, mma_s)
    zero_o = gl.zeros([ROWS, D], gl.float32, mma_o)
    offs_n = gl.expand_dims(gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma_s)), 0)
    offs_d = gl.expand_dims(gl.arange(0, D, layout=gl.SliceLayout(0, out_l)), 0)
    r_s = gl.arange(0, ROWS, layout=srow)
    r_o = gl.arange(0, ROWS, layout=orow)
    inv_tile = gl.exp2(-e_tile)
    if (MODE & 2) != 0:  # the first step's score MMA before the loop
        mbarrier.wait(ready.index(C % NB), (C // NB) & 1, pred=n_mine > 0)
        fence_async_shared()
        st = warpgroup_mma(q_sh.index(C % NB), k_sh.permute((1, 0)), zero_s, use_acc=False, is_async=True)
        st = warpgroup_mma_wait(1, deps=(st,))  # a tensor for the loop, still in flight
    for kk in range(n_mine):
        j = C + kk * NC
        sl = j % NB
        # the step's key bounds (score rows) and partial slots (output rows), loaded before the wait
        ent_s = e0 + j * STEP + r_s // HP
        bnd = gl.load(ENTRIES + ent_s * 2 + 1, mask=(ent_s < e1) & (r_s % HP < h), other=0)
        ent_o = e0 + j * STEP + r_o // HP
        head_o = r_o % HP
        ok_o = (ent_o < e1) & (head_o < h)
        slot = gl.load(ORIGIN + ent_o, mask=ok_o, other=0) * h + head_o
        if (MODE & 2) != 0:
            st = warpgroup_mma_wait(0, deps=(st,))
            mbarrier.arrive(empty.index(sl))  # q is read by the score MMA only: the slot can be refilled
            s_cur = st
            jn = j + NC
            mbarrier.wait(ready.index(jn % NB), (jn // NB) & 1, pred=kk + 1 < n_mine)
            fence_async_shared()
            st = warpgroup_mma(q_sh.index(jn % NB), k_sh.permute((1, 0)), zero_s, use_acc=False, is_async=True)
        else:
            mbarrier.wait(ready.index(sl), (j // NB) & 1)
            fence_async_shared()
            s_cur = warpgroup_mma(q_sh.index(sl), k_sh.permute((1, 0)), zero_s, use_acc=False, is_async=True)
            s_cur = warpgroup_mma_wait(0, deps=(s_cur,))
            mbarrier.arrive(empty.index(sl))
        lo = gl.expand_dims(bnd & 0xFFFF, 1)
        hi = gl.expand_dims(bnd >> 16, 1)
        x = gl.where((offs_n >= lo) & (offs_n < hi), s_cur * qk_scale, float("-inf"))
        m = gl.max(x, 1)
        m_safe = gl.where(m == float("-inf"), 0.0, m)
        p = gl.exp2(x - gl.expand_dims(m_safe, 1))
        l = gl.sum(p, 1)
        o = warpgroup_mma(gl.convert_layout(p.to(gl.bfloat16), p_op), v_sh, zero_o, use_acc=False, is_async=True)
        if (MODE & 2) != 0:
            o, st = warpgroup_mma_wait(0, deps=(o, st))
        else:
            o = warpgroup_mma_wait(0, deps=(o,))
        if ISOLATE:  # a pair that reads a non-finite value of the tile gets NaN in that column (the shipped rule)
            inside = gl.where((offs_n >= lo) & (offs_n < hi), 1.0, 0.0).to(gl.float16)  # recomputed: not kept live
            reads_bad = warpgroup_mma(gl.convert_layout(inside, p_op), vbad_sh, zero_o, use_acc=False, is_async=True)
            reads_bad = warpgroup_mma_wait(0, deps=(reads_bad,))
            o = gl.where(reads_bad > 0.0, float("nan"), o)
        empty_row = l == 0.0
        l_safe = gl.where(empty_row, 1.0, l)
        lse2 = gl.convert_layout(gl.where(empty_row, float("-inf"), m_safe + gl.log2(l_safe)), orow)
        f = gl.convert_layout(inv_tile / l_safe, gl.SliceLayout(1, mma_o))
        val = gl.convert_layout((o * gl.expand_dims(f, 1)).to(gl.float16), out_l)
        gl.store(OP + gl.expand_dims(slot * D, 1) + offs_d, val, mask=gl.expand_dims(ok_o, 1))
        gl.store(OP_SCALE + slot, gl.exp2(e_tile) + gl.zeros_like(lse2), mask=ok_o)
        gl.store(LP + slot, lse2, mask=ok_o)


@gluon.jit
def fwd_ws_kernel(
    Q, K, V, OP, OP_SCALE, LP, ENTRIES, ORIGIN, CHUNKS,
    G, h, T, NT, qk_scale,
    sq_b, sq_s, sq_g, sq_h,
    sk_b, sk_g, sk_t,
    sv_b, sv_g, sv_t,
    BLOCK_N: gl.constexpr, ROWS: gl.constexpr, D: gl.constexpr, HP: gl.constexpr, NB: gl.constexpr,
    NC: gl.constexpr, CREGS: gl.constexpr, MODE: gl.constexpr,
):
    """The key-major forward's partial results of one chunk (arguments as ``sel_fwd_keymajor_kernel``'s),
    warp-specialised: see the module docstring.  ``NB > NC`` slots."""
    gl.static_assert(NB > NC, "each MMA partition needs a slot of its own and one being filled")
    rows_sh: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, D], gl.bfloat16)
    tile_id, e0, e1, _, _, b, g, k0 = _chunk(CHUNKS, NT, G, BLOCK_N)
    if tile_id >= 0:
        k_sh, v_sh = _key_tile(K, V, b, g, k0, T, sk_b, sk_g, sk_t, sv_b, sv_g, sv_t, BLOCK_N, D)
        vbad_sh = gl.allocate_shared_memory(gl.float16, [BLOCK_N, D],
                                            gl.NVMMASharedLayout.get_default_for([BLOCK_N, D], gl.float16))
        e_tile, any_bad = _value_tile(v_sh, vbad_sh, BLOCK_N, D)
        _cta_barrier()
        q_sh = gl.allocate_shared_memory(gl.bfloat16, [NB, ROWS, D], rows_sh)
        ready = gl.allocate_shared_memory(gl.int64, [NB, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [NB, 1], mbarrier.MBarrierLayout())
        for j in gl.static_range(NB):
            mbarrier.init(ready.index(j), count=128)
            mbarrier.init(empty.index(j), count=1)
        fence_async_shared()
        if NC == 3:
            gl.warp_specialize(
                [(_producer, (Q, ENTRIES, q_sh, ready, empty, e0, e1, b, g, h, sq_b, sq_s, sq_g, sq_h, ROWS, D, HP,
                              NB)),
                 (_consumer, (k_sh, v_sh, vbad_sh, any_bad, q_sh, ready, empty, OP, OP_SCALE, LP, ENTRIES, ORIGIN,
                              e0, e1, h, qk_scale, e_tile, 0, 3, BLOCK_N, ROWS, D, HP, NB, MODE)),
                 (_consumer, (k_sh, v_sh, vbad_sh, any_bad, q_sh, ready, empty, OP, OP_SCALE, LP, ENTRIES, ORIGIN,
                              e0, e1, h, qk_scale, e_tile, 1, 3, BLOCK_N, ROWS, D, HP, NB, MODE)),
                 (_consumer, (k_sh, v_sh, vbad_sh, any_bad, q_sh, ready, empty, OP, OP_SCALE, LP, ENTRIES, ORIGIN,
                              e0, e1, h, qk_scale, e_tile, 2, 3, BLOCK_N, ROWS, D, HP, NB, MODE))],
                [4, 4, 4], [CREGS, CREGS, CREGS])
        elif NC == 1:
            gl.warp_specialize(
                [(_producer, (Q, ENTRIES, q_sh, ready, empty, e0, e1, b, g, h, sq_b, sq_s, sq_g, sq_h, ROWS, D, HP,
                              NB)),
                 (_consumer, (k_sh, v_sh, vbad_sh, any_bad, q_sh, ready, empty, OP, OP_SCALE, LP, ENTRIES, ORIGIN,
                              e0, e1, h, qk_scale, e_tile, 0, 1, BLOCK_N, ROWS, D, HP, NB, MODE))],
                [4], [CREGS])
        else:
            gl.warp_specialize(
                [(_producer, (Q, ENTRIES, q_sh, ready, empty, e0, e1, b, g, h, sq_b, sq_s, sq_g, sq_h, ROWS, D, HP,
                              NB)),
                 (_consumer, (k_sh, v_sh, vbad_sh, any_bad, q_sh, ready, empty, OP, OP_SCALE, LP, ENTRIES, ORIGIN,
                              e0, e1, h, qk_scale, e_tile, 0, 2, BLOCK_N, ROWS, D, HP, NB, MODE)),
                 (_consumer, (k_sh, v_sh, vbad_sh, any_bad, q_sh, ready, empty, OP, OP_SCALE, LP, ENTRIES, ORIGIN,
                              e0, e1, h, qk_scale, e_tile, 1, 2, BLOCK_N, ROWS, D, HP, NB, MODE))],
                [4, 4], [CREGS, CREGS])


def chosen(names) -> list[tuple]:
    by_name = {v[0]: v for v in VARIANTS}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}; known: {', '.join(by_name)}")
    return [by_name[n] for n in names] if names else list(VARIANTS)


def launch(variant: tuple, q, k, v, op, op_scale, lp, readers, h: int, HP: int, qk_scale: float, rows: int = 64):
    """``fwd_ws_kernel`` of ``variant`` over a pass's views (``q [B, S, G, h, 128]``, ``k``/``v [B, G, T, 128]``,
    bf16, contiguous last dims) and its key-major reader list, into the partial workspaces."""
    _, nb, nc, cregs, maxnreg, mode = variant
    if q.shape[-1] != 128 or v.shape[-1] != 128 or q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
        raise ValueError("the Gluon partial kernel covers Dk = Dv = 128 with unit last strides only")
    fwd_ws_kernel[(readers.chunks.shape[0],)](
        q, k, v, op, op_scale, lp, readers.entries, readers.origin, readers.chunks,
        q.shape[2], h, k.shape[2], readers.n_tiles, qk_scale,
        *q.stride()[:4], *k.stride()[:3], *v.stride()[:3],
        BLOCK_N=64, ROWS=rows, D=128, HP=HP, NB=nb, NC=nc, CREGS=cregs, MODE=mode, num_warps=4,
        maxnreg=maxnreg)


def forward(plan, q, k, v, ranges, sc: float, variant: tuple | None):
    """The key-major forward of ``plan`` (every pass: reader list, partial kernel, merge) as
    ``bench.probes.keymajor_partials.forward_keymajor`` launches it, with the partial kernel of ``variant`` (None:
    the shipped one): ``(out, lse)``."""
    import torch

    from bench.probes.keymajor_partials import forward_keymajor

    meta = plan.forward.meta

    def partial(qs, ks, vs, op, op_scale, lp, readers):
        launch(variant, qs, ks, vs, op.view(-1, op.shape[-1]), op_scale, lp, readers, q.shape[3], meta.HP,
               sc * 1.4426950408889634, rows=meta.ROWS)

    return forward_keymajor(plan, q, k, v, ranges, sc, torch.float16, partial=partial if variant else None)


# -- the backward's kernel (dk, dv and the partial dq of a chunk) --


@gluon.jit
def bwd_kernel(
    Q, K, V, DO, LSE, DELTA, DO_L1_LOG2, DK, DV, DQP, DQP_SCALE, WS, ENTRIES, ORIGIN, CHUNKS,
    G, h, T, NT, qk_scale, scale,
    sq_b, sq_s, sq_g, sq_h,
    sk_b, sk_g, sk_t,
    sv_b, sv_g, sv_t,
    sdo_b, sdo_s, sdo_g, sdo_h,
    sl_b, sl_s, sl_g, sl_h,
    sd_b, sd_s, sd_g, sd_h,
    sdk_b, sdk_g, sdk_t,
    sdv_b, sdv_g, sdv_t,
    BLOCK_N: gl.constexpr, ROWS: gl.constexpr, D: gl.constexpr, HP: gl.constexpr, NB: gl.constexpr,
    DQ_EARLY: gl.constexpr, MODE: gl.constexpr,
):
    """dk, dv and the partial dq of one chunk of one key tile's readers (``CHUNKS``/``ENTRIES``/``ORIGIN``/``WS``/
    ``DQP``/``DQP_SCALE`` as ``sel_bwd_keymajor_kernel``), the common walk.  ``MODE`` bit 4: no key mask in a step
    whose pairs all read the whole tile; bit 8: int32 q/dO row offsets (both keep the kernel's values)."""
    STEP: gl.constexpr = ROWS // HP
    gather: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])
    row: gl.constexpr = gl.SliceLayout(1, gather)
    mma_s: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, ROWS, 16])
    mma_d: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    a_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_d, k_width=2)
    col: gl.constexpr = gl.SliceLayout(0, mma_s)
    vec: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    rows_sh: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, D], gl.bfloat16)
    ds_shl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, ROWS], gl.bfloat16)
    vec_sh: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])

    tile_id, e0, e1, slot, b, g, k0 = _chunk_row(CHUNKS, NT, G, BLOCK_N)
    if tile_id >= 0:
        k_sh, v_sh, log2_kmax, log2_vmax, _ = _key_tile_max(K, V, b, g, k0, T, sk_b, sk_g, sk_t, sv_b, sv_g, sv_t,
                                                            BLOCK_N, D)
        q_sh = gl.allocate_shared_memory(gl.bfloat16, [NB, ROWS, D], rows_sh)
        do_sh = gl.allocate_shared_memory(gl.bfloat16, [NB, ROWS, D], rows_sh)
        ds_sh = gl.allocate_shared_memory(gl.bfloat16, [2, BLOCK_N, ROWS], ds_shl)
        # per-step vectors through a two-slot ring: loaded compact two steps ahead, stored after the softmax
        lse_sh = gl.allocate_shared_memory(gl.float32, [2, ROWS], vec_sh)
        delta_sh = gl.allocate_shared_memory(gl.float32, [2, ROWS], vec_sh)
        bnd_sh = gl.allocate_shared_memory(gl.int32, [2, ROWS], vec_sh)
        slot_sh = gl.allocate_shared_memory(gl.int64, [2, ROWS], vec_sh)

        # -- steps 0 .. NB-2 in flight; step NB-1's tokens and steps 0, 1's vectors loaded --
        for j in gl.static_range(NB - 1):
            tok, head, ok = _step_tokens(ENTRIES, e0 + j * STEP, e1, h, ROWS, HP, row)
            _gather_step(Q, DO, q_sh.index(j), do_sh.index(j), tok, ok, b, g, sq_b, sq_s, sq_g, sq_h,
                         sdo_b, sdo_s, sdo_g, sdo_h, head, D, gather, (MODE & 8) != 0)
        tok_n, head_n, ok_n = _step_tokens(ENTRIES, e0 + (NB - 1) * STEP, e1, h, ROWS, HP, row)
        lse2, delta, bnd, pslot, dol1 = _step_vectors(ENTRIES, ORIGIN, LSE, DELTA, DO_L1_LOG2, e0, e1, b, g, h,
                                                      sl_b, sl_s, sl_g, sl_h, sd_b, sd_s, sd_g, sd_h, ROWS, HP, vec)
        lse_sh.index(0).store(lse2)
        delta_sh.index(0).store(delta)
        bnd_sh.index(0).store(bnd)
        slot_sh.index(0).store(pslot)
        e_cur = _step_exponent(delta, bnd, dol1, log2_kmax, log2_vmax)
        lse2, delta, bnd, pslot, dol1 = _step_vectors(ENTRIES, ORIGIN, LSE, DELTA, DO_L1_LOG2, e0 + STEP, e1, b, g,
                                                      h, sl_b, sl_s, sl_g, sl_h, sd_b, sd_s, sd_g, sd_h, ROWS, HP,
                                                      vec)
        lse_sh.index(1).store(lse2)
        delta_sh.index(1).store(delta)
        bnd_sh.index(1).store(bnd)
        slot_sh.index(1).store(pslot)
        e_next = _step_exponent(delta, bnd, dol1, log2_kmax, log2_vmax)
        fence_async_shared()

        dk = gl.zeros([BLOCK_N, D], gl.float32, mma_d)
        dv = gl.zeros([BLOCK_N, D], gl.float32, mma_d)
        zero_s = gl.zeros([BLOCK_N, ROWS], gl.float32, mma_s)
        zero_q = gl.zeros([D, ROWS], gl.float32, mma_s)

        # -- step 0's scores and softmax; its dS^T into the ring --
        async_copy.wait_group(NB - 2)
        _cta_barrier()
        fence_async_shared()
        st = warpgroup_mma(k_sh, q_sh.index(0).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        dpt = warpgroup_mma(v_sh, do_sh.index(0).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        st, dpt = warpgroup_mma_wait(0, deps=(st, dpt))
        pt, dst = _softmax_tiles(st, dpt, lse_sh.index(0).load(col), delta_sh.index(0).load(col),
                                 bnd_sh.index(0).load(col), qk_scale, BLOCK_N, mma_s, (MODE & 4) != 0)
        dst = dst.to(gl.bfloat16)
        ds_sh.index(0).store(dst)
        p = gl.convert_layout(pt.to(gl.bfloat16), a_op)
        ds = gl.convert_layout(dst, a_op)

        n_steps = gl.cdiv(e1 - e0, STEP)
        for i in range(n_steps):
            cur = i % NB
            nxt = (i + 1) % NB
            # step i+2's vectors start loading now, stored after the softmax
            lse2, delta, bnd, pslot, dol1 = _step_vectors(ENTRIES, ORIGIN, LSE, DELTA, DO_L1_LOG2, e0 + (i + 2) * STEP,
                                                          e1, b, g, h, sl_b, sl_s, sl_g, sl_h, sd_b, sd_s, sd_g, sd_h,
                                                          ROWS, HP, vec)
            # -- step i+1's rows are in (and step i's dS^T in its ring slot): step i+1's score MMAs go first,
            # then step i's dv/dk MMAs (and its dq MMA, DQ_EARLY) --
            async_copy.wait_group(NB - 3)
            _cta_barrier()
            fence_async_shared()
            st = warpgroup_mma(k_sh, q_sh.index(nxt).permute((1, 0)), zero_s, use_acc=False, is_async=True)
            dpt = warpgroup_mma(v_sh, do_sh.index(nxt).permute((1, 0)), zero_s, use_acc=False, is_async=True)
            dv = warpgroup_mma(p, do_sh.index(cur), dv, is_async=True)
            dk = warpgroup_mma(ds, q_sh.index(cur), dk, is_async=True)
            if DQ_EARLY == 1:
                dq = warpgroup_mma(k_sh.permute((1, 0)), ds_sh.index(i % 2), zero_q, use_acc=False, is_async=True)
                st, dpt, dv, dk, dq, p, ds = warpgroup_mma_wait(3, deps=(st, dpt, dv, dk, dq, p, ds))
            else:
                st, dpt, dv, dk, p, ds = warpgroup_mma_wait(2, deps=(st, dpt, dv, dk, p, ds))
            # -- step i-1's slot is free (its MMAs are done): step i+NB-1's rows into it --
            _gather_step(Q, DO, q_sh.index((i + NB - 1) % NB), do_sh.index((i + NB - 1) % NB), tok_n,
                         ok_n, b, g, sq_b, sq_s, sq_g, sq_h, sdo_b, sdo_s, sdo_g, sdo_h, head_n, D, gather,
                         (MODE & 8) != 0)
            tok_n, head_n, ok_n = _step_tokens(ENTRIES, e0 + (i + NB) * STEP, e1, h, ROWS, HP, row)
            # -- step i+1's softmax while step i's MMAs run --
            vs = (i + 1) % 2
            pt, dst = _softmax_tiles(st, dpt, lse_sh.index(vs).load(col), delta_sh.index(vs).load(col),
                                     bnd_sh.index(vs).load(col), qk_scale, BLOCK_N, mma_s, (MODE & 4) != 0)
            dst = dst.to(gl.bfloat16)
            if DQ_EARLY == 1:
                dq, dv, dk = warpgroup_mma_wait(0, deps=(dq, dv, dk))
            else:
                dv, dk = warpgroup_mma_wait(0, deps=(dv, dk))
                dq = warpgroup_mma(k_sh.permute((1, 0)), ds_sh.index(i % 2), zero_q, use_acc=False, is_async=True)
                if DQ_EARLY == 0:
                    dq = warpgroup_mma_wait(0, deps=(dq,))
            if DQ_EARLY == 2:
                # the dq MMA runs while step i+1's operands are prepared; it reads ring slot i % 2 only
                p = gl.convert_layout(pt.to(gl.bfloat16), a_op)
                ds = gl.convert_layout(dst, a_op)
                ds_sh.index(vs).store(dst)
                dq = warpgroup_mma_wait(0, deps=(dq,))
                _store_partial_dq(DQP, DQP_SCALE, dq, slot_sh.index(i % 2), e_cur, scale, ROWS, D)
            else:
                # -- step i's partial dq out; step i+1's dS^T into the other ring slot (its last reader, step
                # i-1's dq MMA, is done) --
                _store_partial_dq(DQP, DQP_SCALE, dq, slot_sh.index(i % 2), e_cur, scale, ROWS, D)
                ds_sh.index(vs).store(dst)
                p = gl.convert_layout(pt.to(gl.bfloat16), a_op)
                ds = gl.convert_layout(dst, a_op)
            _cta_barrier()
            lse_sh.index(i % 2).store(lse2)
            delta_sh.index(i % 2).store(delta)
            bnd_sh.index(i % 2).store(bnd)
            slot_sh.index(i % 2).store(pslot)
            e_cur = e_next
            e_next = _step_exponent(delta, bnd, dol1, log2_kmax, log2_vmax)
        async_copy.wait_group(0)

        _store_tile(DK, DV, WS, slot, b, g, k0, T, dk, dv, scale, sdk_b, sdk_g, sdk_t, sdv_b, sdv_g, sdv_t,
                    BLOCK_N, D, mma_d)


# The backward's variants: (name, ROWS, NB, DQ_EARLY, MODE): DQ_EARLY 1 ("early"), 0 ("late"), 2 ("defer": issued after the softmax, waited
# for after step i+1's operands are ready)
BWD_VARIANTS = [
    ("b-nb4", 32, 4, 1, 0),
    ("b-nb4-fast-i32", 32, 4, 1, 12),
    ("b-nb3-fast-i32", 32, 3, 1, 12),
    ("b-nb4-late-fast-i32", 32, 4, 0, 12),
    ("b-nb3-late-fast-i32", 32, 3, 0, 12),
    ("b-nb3-late", 32, 3, 0, 0),
    ("b-nb3-late-fast", 32, 3, 0, 4),
    ("b-nb3-late-i32", 32, 3, 0, 8),
    ("b-nb4-defer-fast-i32", 32, 4, 2, 12),
    ("b-nb4-defer-fast", 32, 4, 2, 4),
    ("b-nb4-defer", 32, 4, 2, 0),
    ("b-nb3-defer-fast", 32, 3, 2, 4),
    ("b-nb3-defer-fast-i32", 32, 3, 2, 12),
    ("b-r64-nb3-late-fast-i32", 64, 3, 0, 12),
]


def chosen_bwd(names) -> list[tuple]:
    by_name = {v[0]: v for v in BWD_VARIANTS}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise SystemExit(f"unknown backward variant(s) {unknown}; known: {', '.join(by_name)}")
    return [by_name[n] for n in names] if names else list(BWD_VARIANTS)


def launch_bwd(variant: tuple, named: dict, grid: int, HP: int):
    """One launch of ``variant`` over the shipped kernel's arguments ``named`` (``keymajor_ceiling``'s dict for
    ``sel_bwd_keymajor_kernel``); the caller runs the shipped reduction of split tiles, as for the shipped kernel."""
    import torch

    name, rows, nb, early, mode = variant
    q, k, v, go, dk, dv = (named[n] for n in ("Q", "K", "V", "DO", "DK", "DV"))
    if q.dtype != torch.bfloat16 or q.shape[-1] != 128 or v.shape[-1] != 128:
        raise ValueError("the Gluon backward covers bf16, Dk = Dv = 128 only")
    bwd_kernel[(grid,)](
        q, k, v, go, named["LSE"], named["DELTA"], named["DO_L1_LOG2"], dk, dv, named["DQP"], named["DQP_SCALE"],
        named["WS"], named["ENTRIES"], named["ORIGIN"], named["CHUNKS"],
        named["G"], named["h"], named["T"], named["NT"], named["qk_scale"], named["scale"],
        *named["sq"][:4], *named["sk"][:3], *named["sv"][:3], *named["sdo"][:4], *named["sl"][:4], *named["sd"][:4],
        *named["sdk"][:3], *named["sdv"][:3],
        BLOCK_N=64, ROWS=rows, D=128, HP=HP, NB=nb, DQ_EARLY=early, MODE=mode, num_warps=4)


@contextlib.contextmanager
def in_place_of_shipped(variant: tuple | None, HP: int):
    """While open, the library's launches of ``sel_bwd_keymajor_kernel`` run ``variant`` instead (``None``: the
    shipped kernel): the whole backward, every pass, with the Gluon kernel in the shipped one's place."""
    from nsa_triton_sel.kernels import backward as bwd_kernels
    from nsa_triton_sel.kernels import launch as library

    shipped = library._launch

    def swapped(fn, grid, named, **options):
        if fn is bwd_kernels.sel_bwd_keymajor_kernel:
            return launch_bwd(variant, named, grid[0], HP)
        return shipped(fn, grid, named, **options)

    if variant is not None:
        library._launch = swapped
    try:
        yield
    finally:
        library._launch = shipped


BWD_AOT_CHILD = r'''
import json, re, sys
name, rows, nb, early, mode, hp, arch = json.loads(sys.argv[1])
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from bench.probes.keymajor_gluon import bwd_kernel as fn
from bench.probes.dkdv_variants import sass_loop_instructions
from nsa_triton_sel.compat.smoke import aot
ce = {"BLOCK_N": 64, "ROWS": rows, "D": 128, "HP": hp, "NB": nb, "DQ_EARLY": early, "MODE": mode}
types = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "DO": "*bf16", "LSE": "*fp32", "DELTA": "*fp32",
         "DO_L1_LOG2": "*fp32", "DK": "*bf16", "DV": "*bf16", "DQP": "*fp16", "DQP_SCALE": "*fp32", "WS": "*fp32",
         "ENTRIES": "*i32", "ORIGIN": "*i64", "CHUNKS": "*i64", "qk_scale": "fp32", "scale": "fp32"}
sig = {n: types.get(n, "i32") for n in fn.arg_names if n not in ce}
sig.update({n: "constexpr" for n in ce})
attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n, t in sig.items()
         if t.startswith("*") or n in ("sq_b", "sq_s", "sq_g", "sq_h", "sk_b", "sk_g", "sk_t", "sv_b", "sv_g",
                                        "sv_t", "sdo_b", "sdo_s", "sdo_g", "sdo_h")}
c = triton.compile(GluonASTSource(fn, sig, ce, attrs), target=GPUTarget("cuda", arch, 32), options={"num_warps": 4})
met = aot.collect_metrics(c)
ptx = c.asm["ptx"]
print(json.dumps({"name": name, "HP": hp, **{k: met.get(k) for k in ("registers", "spills", "shared")},
                  "wgmma": ptx.count("wgmma.mma_async"), "wgmma_wait": re.findall(r"wgmma.wait_group.sync.aligned (\d+)", ptx),
                  "cp_async": ptx.count("cp.async.ca") + ptx.count("cp.async.cg"),
                  "loop_instructions": sass_loop_instructions(c.asm["cubin"])}))
'''


AOT_CHILD = r'''
import json, re, sys
name, nb, nc, cregs, maxnreg, mode, hp, arch = json.loads(sys.argv[1])
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from bench.probes.keymajor_gluon import fwd_ws_kernel as fn
ce = {"BLOCK_N": 64, "ROWS": 64, "D": 128, "HP": hp, "NB": nb, "NC": nc, "CREGS": cregs, "MODE": mode}
types = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "OP": "*fp16", "OP_SCALE": "*fp32", "LP": "*fp32",
         "ENTRIES": "*i32", "ORIGIN": "*i64", "CHUNKS": "*i64", "qk_scale": "fp32"}
sig = {n: types.get(n, "i32") for n in fn.arg_names if n not in ce}
sig.update({n: "constexpr" for n in ce})
attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n, t in sig.items()
         if t.startswith("*") or n in ("sq_b", "sq_s", "sq_g", "sq_h", "sk_b", "sk_g", "sk_t", "sv_b", "sv_g", "sv_t")}
c = triton.compile(GluonASTSource(fn, sig, ce, attrs), target=GPUTarget("cuda", arch, 32),
                   options={"num_warps": 4, "maxnreg": maxnreg})
from nsa_triton_sel.compat.smoke import aot
met = aot.collect_metrics(c)
ptx = c.asm["ptx"]
print(json.dumps({"name": name, "HP": hp, "setmaxnreg": re.findall(r"setmaxnreg\S*\s+(\d+)", ptx),
                  **{k: met.get(k) for k in ("registers", "spills", "shared")},
                  "wgmma": ptx.count("wgmma.mma_async"), "cp_async": ptx.count("cp.async.ca") + ptx.count("cp.async.cg")}))
'''


def aot_report(python: str, names, hp: int = 8, arch: int = 90) -> int:
    """Compile each variant (the forward's, and the backward's: names ``b-*``) for ``arch`` under ``python`` (no
    GPU) and print registers, spills, shared memory."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    rc = 0
    fwd_names = [n for n in names if not n.startswith("b-")]
    bwd_names = [n for n in names if n.startswith("b-")]
    jobs = ([(v[0], AOT_CHILD, [*v, hp, arch]) for v in (chosen(fwd_names) if fwd_names or not names else [])]
            + [(v[0], BWD_AOT_CHILD, [*v, hp, arch]) for v in (chosen_bwd(bwd_names) if bwd_names or not names else [])])
    for name, child, args in jobs:
        res = subprocess.run([python, "-c", child, json.dumps(args)], capture_output=True, text=True, env=env)
        if res.returncode:
            print(f"{name} FAILED\n{res.stderr[-3000:]}", flush=True)
            rc = 1
            continue
        print(res.stdout.strip().splitlines()[-1], flush=True)
    return rc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aot", action="store_true", help="compile for sm_90 without a GPU and report")
    ap.add_argument("--only", default="", help="comma list of variants (the backward's are named b-*)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter whose Triton compiles (>= 3.6)")
    ap.add_argument("--hp", type=int, default=8, help="the padded group (heads a step's entry holds)")
    a = ap.parse_args(argv)
    names = [n for n in a.only.split(",") if n]
    if not a.aot:
        raise SystemExit("timing runs through bench.probes.keymajor_ceiling --gluon NAMES / --gluon-bwd NAMES (on the "
                         "GPU)")
    return aot_report(a.python, names, a.hp)


if __name__ == "__main__":
    raise SystemExit(main())
