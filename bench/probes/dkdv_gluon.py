"""The dk/dv walk written in Gluon (Triton 3.6, sm_90): the MMA waits placed by hand, timed against the shipped kernel.

    python -m bench.probes.dkdv_gluon [--T 8192,32768,65536] [--sel random,local] [--only NAMES] [--json out.json]
    python -m bench.probes.dkdv_gluon --aot [--only NAMES] [--python PYTHON_WITH_TRITON_3_6]   # no GPU

In Triton 3.6 the shipped dk/dv kernel waits for each score MMA right after issuing it (``warp_group_dot_wait
{pendings = 0}``), which also drains the previous step's dv/dk MMAs: a program's step is a serial chain and only
the SM's other program fills its gaps (``bench/results/2026-11-28-h200-triton3.6-dkdv-limits/``).  Here the
walk is the same arithmetic with the order of the asynchronous work written out:

- each step's q and dO rows are gathered by ``cp.async`` into one of ``NB`` shared-memory slots, ``NB - 1``
  steps ahead of their use (no register round trip, no pipeliner);
- step ``i + 1``'s score MMAs (``K q^T``, ``V dO^T``) are issued *before* step ``i``'s ``dv += P dO`` and
  ``dk += dS q``, and the wait keeps those two in flight (``warpgroup_mma_wait(2)``, in-order completion), so
  the tensor cores run step ``i``'s accumulation while the warps compute step ``i + 1``'s softmax;
- the LSE, delta and key bounds of a step are loaded two steps ahead, one value a thread, and pass through a
  two-slot shared ring into the score tile's column layout (registers are the scarce resource: the dk and dv
  accumulators take 128 a thread).

Variants (``VARIANTS``): slots (``g-nb3/4/5``), every MMA waited for at once (``-serial``), measurement modes
without the gathers or the softmax (``-nogather``, ``-nosoftmax``, ``-mma-only``), no key mask in a step whose
pairs all read the whole tile (``-fast``) and int32 row offsets (``-i32``); and ``dkdv_ws_kernel`` (``ws*``), the
same walk warp-specialised: the kernel's 4 warps gather (mbarriers a slot each way), one or two partitions of 4
warps run the MMAs and the softmax, asking for more registers (``setmaxnreg``).

The kernels cover the canonical case only (bf16, Dk = Dv = 128, heads a power-of-two pad ``HP`` with ``ROWS //
HP`` entries a step, no non-finite isolation: the shipped kernel's common walk) and are compared with the shipped
kernel on the same reader list before they are timed (``bitwise``, ``repeatable`` and the relative error).  What
they measured: ``bench/results/2026-11-28-h200-triton3.6-dkdv-gluon/``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import async_copy, fence_async_shared, mbarrier, \
    warpgroup_mma, warpgroup_mma_wait

from bench.probes.dkdv_variants import against, run_cli, timed_against_shipped
# a CTA-wide barrier, the cp.async copy into shared memory and the key tile's k and v in shared memory, as the
# shipped warp-specialised forward has them
from nsa_triton_sel.kernels.keymajor_bwd_gluon import _gather_step, _softmax_tiles, _step_tokens
from nsa_triton_sel.kernels.keymajor_ws import _async_gather, _cta_barrier, _key_tile

ROOT = Path(__file__).resolve().parents[2]
LOG2E = 1.4426950408889634


@gluon.jit
def _step_rows(ENTRIES, LSE, DELTA, p0, e1, b, g, h, sl_b, sl_s, sl_g, sl_h,
               ROWS: gl.constexpr, HP: gl.constexpr, col: gl.constexpr):
    """The log2 LSE, delta and key bounds ``lo | hi << 16`` of the step starting at entry ``p0``, as ``[ROWS]`` in
    the score tile's column layout (masked pairs: bounds 0, so they see no key)."""
    r = gl.arange(0, ROWS, layout=col)
    ent = p0 + r // HP
    head = r % HP
    ok = (ent < e1) & (head < h)
    tok = gl.load(ENTRIES + ent * 2, mask=ok, other=0)
    bnd = gl.load(ENTRIES + ent * 2 + 1, mask=ok, other=0)
    off = b * sl_b + tok.to(gl.int64) * sl_s + g * sl_g + head.to(gl.int64) * sl_h
    lse2 = gl.load(LSE + off, mask=ok, other=0.0) * 1.4426950408889634
    lse2 = gl.where(lse2 == float("-inf"), float("inf"), lse2)
    delta = gl.load(DELTA + off, mask=ok, other=0.0)
    return lse2, delta, bnd


@gluon.jit
def _softmax(st, dpt, lse2, delta, bnd, qk_scale, BLOCK_N: gl.constexpr, mma_s: gl.constexpr,
             a_op: gl.constexpr, FAST: gl.constexpr = False):
    """``P^T`` and ``dS^T`` ``[BLOCK_N, ROWS]`` of one step as the dv/dk MMAs' register operands (bf16).
    ``FAST``: a step whose every pair reads the whole tile skips the key mask (the same values)."""
    pt, dst = _softmax_tiles(st, dpt, lse2, delta, bnd, qk_scale, BLOCK_N, mma_s, FAST)
    return gl.convert_layout(pt.to(gl.bfloat16), a_op), gl.convert_layout(dst.to(gl.bfloat16), a_op)


@gluon.jit
def _chunk(CHUNKS, NT, G, BLOCK_N: gl.constexpr):
    """This program's reader-list chunk (its row ``(tile, e0, e1, slot)``, as ``sel_bwd_dkdv_kernel`` reads it):
    ``(tile_id, e0, e1, slot, bg, b, g, k0)``; ``tile_id < 0`` is a padding chunk."""
    chunk = CHUNKS + gl.program_id(0).to(gl.int64) * 4
    tile_id = gl.load(chunk)
    e0 = gl.load(chunk + 1).to(gl.int32)  # the probe's reader lists are far below 2^31 entries
    e1 = gl.load(chunk + 2).to(gl.int32)
    slot = gl.load(chunk + 3)
    bg = tile_id // NT
    return tile_id, e0, e1, slot, bg, bg // G, bg % G, (tile_id % NT) * BLOCK_N


@gluon.jit
def _store_tile(DK, DV, WS, slot, bg, k0, T, dk, dv, scale, BLOCK_N: gl.constexpr, D: gl.constexpr,
                mma_d: gl.constexpr):
    """Store a key tile's dk (times ``scale``) and dv: directly when the chunk is the tile's only one, else as
    float32 partial sums in workspace slot ``slot`` for ``sel_bwd_reduce_kernel``."""
    offs_sn = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, mma_d))
    offs_sd = gl.arange(0, D, layout=gl.SliceLayout(0, mma_d))
    if slot < 0:
        rows_t = (bg * T + k0 + offs_sn).to(gl.int64)
        sm = gl.expand_dims((k0 + offs_sn) < T, 1) & gl.expand_dims(offs_sd < D, 0)
        gl.store(DK + gl.expand_dims(rows_t * D, 1) + gl.expand_dims(offs_sd, 0), (dk * scale).to(gl.bfloat16),
                 mask=sm)
        gl.store(DV + gl.expand_dims(rows_t * D, 1) + gl.expand_dims(offs_sd, 0), dv.to(gl.bfloat16), mask=sm)
    else:
        ws = WS + slot * (BLOCK_N * 2 * D) + gl.expand_dims(offs_sn * (2 * D), 1) + gl.expand_dims(offs_sd, 0)
        gl.store(ws, dk * scale)
        gl.store(ws + D, dv)


@gluon.jit
def dkdv_gluon_kernel(
    Q, K, V, DO, LSE, DELTA, DK, DV, WS, ENTRIES, CHUNKS,
    G, h, T, NT, qk_scale, scale,
    sq_b, sq_s, sq_g, sq_h,
    sk_b, sk_g, sk_t,
    sv_b, sv_g, sv_t,
    sdo_b, sdo_s, sdo_g, sdo_h,
    sl_b, sl_s, sl_g, sl_h,
    BLOCK_N: gl.constexpr, ROWS: gl.constexpr, D: gl.constexpr, HP: gl.constexpr, NB: gl.constexpr,
    OVERLAP: gl.constexpr, MODE: gl.constexpr,
):
    """dk, dv of one chunk of one key tile's readers (``CHUNKS``/``ENTRIES``/``WS`` as ``sel_bwd_dkdv_kernel``).
    ``OVERLAP = 0``: every MMA waited for at once (the shipped order, for comparison).  ``MODE`` (measurements, the
    gradients are not the kernel's): bit 1, no gathers in the walk (the slots keep the prologue's rows); bit 2, no
    softmax (``P^T`` and ``dS^T`` are the scores cast to bf16).  Bit 4: no key mask in a step whose pairs all read
    the whole tile; bit 8: int32 row offsets (both keep the kernel's values)."""
    STEP: gl.constexpr = ROWS // HP
    gather: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])
    row: gl.constexpr = gl.SliceLayout(1, gather)
    mma_s: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, ROWS, 16])
    mma_d: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    a_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_d, k_width=2)
    col: gl.constexpr = gl.SliceLayout(0, mma_s)
    vec: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    rows_sh: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, D], gl.bfloat16)

    tile_id, e0, e1, slot, bg, b, g, k0 = _chunk(CHUNKS, NT, G, BLOCK_N)
    if tile_id >= 0:
        k_sh, v_sh = _key_tile(K, V, b, g, k0, T, sk_b, sk_g, sk_t, sv_b, sv_g, sv_t, BLOCK_N, D)
        q_sh = gl.allocate_shared_memory(gl.bfloat16, [NB, ROWS, D], rows_sh)
        do_sh = gl.allocate_shared_memory(gl.bfloat16, [NB, ROWS, D], rows_sh)

        # small per-step vectors (log2 LSE, delta, key bounds) pass through a two-slot shared ring: loaded compact
        # (one value a thread) a step ahead, stored after the softmax, read in the score tile's column layout
        vec_sh: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
        lse_sh = gl.allocate_shared_memory(gl.float32, [2, ROWS], vec_sh)
        delta_sh = gl.allocate_shared_memory(gl.float32, [2, ROWS], vec_sh)
        bnd_sh = gl.allocate_shared_memory(gl.int32, [2, ROWS], vec_sh)

        # -- steps 0 .. NB-2 in flight; step NB-1's tokens and steps 0, 1's LSE/delta/bounds loaded --
        for j in gl.static_range(NB - 1):
            tok, head, ok = _step_tokens(ENTRIES, e0 + j * STEP, e1, h, ROWS, HP, row)
            _gather_step(Q, DO, q_sh.index(j), do_sh.index(j), tok, ok, b, g, sq_b, sq_s, sq_g, sq_h,
                         sdo_b, sdo_s, sdo_g, sdo_h, head, D, gather, (MODE & 8) != 0)
        tok_n, head_n, ok_n = _step_tokens(ENTRIES, e0 + (NB - 1) * STEP, e1, h, ROWS, HP, row)
        lse2, delta, bnd = _step_rows(ENTRIES, LSE, DELTA, e0, e1, b, g, h, sl_b, sl_s, sl_g, sl_h, ROWS, HP, vec)
        lse_sh.index(0).store(lse2)
        delta_sh.index(0).store(delta)
        bnd_sh.index(0).store(bnd)
        lse2, delta, bnd = _step_rows(ENTRIES, LSE, DELTA, e0 + STEP, e1, b, g, h, sl_b, sl_s, sl_g, sl_h,
                                      ROWS, HP, vec)
        lse_sh.index(1).store(lse2)
        delta_sh.index(1).store(delta)
        bnd_sh.index(1).store(bnd)
        fence_async_shared()

        dk = gl.zeros([BLOCK_N, D], gl.float32, mma_d)
        dv = gl.zeros([BLOCK_N, D], gl.float32, mma_d)
        zero_s = gl.zeros([BLOCK_N, ROWS], gl.float32, mma_s)

        # -- step 0's scores and softmax --
        async_copy.wait_group(NB - 2)
        _cta_barrier()
        fence_async_shared()
        st = warpgroup_mma(k_sh, q_sh.index(0).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        dpt = warpgroup_mma(v_sh, do_sh.index(0).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        st, dpt = warpgroup_mma_wait(0, deps=(st, dpt))
        p, ds = _softmax(st, dpt, lse_sh.index(0).load(col), delta_sh.index(0).load(col), bnd_sh.index(0).load(col),
                         qk_scale, BLOCK_N, mma_s, a_op)

        n_steps = gl.cdiv(e1 - e0, STEP)
        for i in range(n_steps):
            cur = i % NB
            nxt = (i + 1) % NB
            # step i+2's LSE/delta/bounds start loading now, stored after the softmax
            lse2, delta, bnd = _step_rows(ENTRIES, LSE, DELTA, e0 + (i + 2) * STEP, e1, b, g, h,
                                          sl_b, sl_s, sl_g, sl_h, ROWS, HP, vec)
            # -- step i+1's rows are in; its score MMAs go first, then step i's dv/dk MMAs --
            async_copy.wait_group(NB - 3)
            _cta_barrier()
            fence_async_shared()
            st = warpgroup_mma(k_sh, q_sh.index(nxt).permute((1, 0)), zero_s, use_acc=False, is_async=True)
            dpt = warpgroup_mma(v_sh, do_sh.index(nxt).permute((1, 0)), zero_s, use_acc=False, is_async=True)
            dv = warpgroup_mma(p, do_sh.index(cur), dv, is_async=True)
            dk = warpgroup_mma(ds, q_sh.index(cur), dk, is_async=True)
            if OVERLAP:
                st, dpt, dv, dk, p, ds = warpgroup_mma_wait(2, deps=(st, dpt, dv, dk, p, ds))
            else:
                st, dpt, dv, dk, p, ds = warpgroup_mma_wait(0, deps=(st, dpt, dv, dk, p, ds))
            # -- step i-1's slot is free (its MMAs are done): step i+NB-1's rows into it --
            if (MODE & 1) == 0:
                _gather_step(Q, DO, q_sh.index((i + NB - 1) % NB), do_sh.index((i + NB - 1) % NB), tok_n,
                             ok_n, b, g, sq_b, sq_s, sq_g, sq_h, sdo_b, sdo_s, sdo_g, sdo_h, head_n, D, gather,
                             (MODE & 8) != 0)
                tok_n, head_n, ok_n = _step_tokens(ENTRIES, e0 + (i + NB) * STEP, e1, h, ROWS, HP, row)
            # -- step i+1's softmax while step i's dv/dk MMAs run --
            vs = (i + 1) % 2
            if (MODE & 2) == 0:
                p, ds = _softmax(st, dpt, lse_sh.index(vs).load(col), delta_sh.index(vs).load(col),
                                 bnd_sh.index(vs).load(col), qk_scale, BLOCK_N, mma_s, a_op, (MODE & 4) != 0)
            else:
                p = gl.convert_layout(st.to(gl.bfloat16), a_op)
                ds = gl.convert_layout(dpt.to(gl.bfloat16), a_op)
            _cta_barrier()
            lse_sh.index(i % 2).store(lse2)
            delta_sh.index(i % 2).store(delta)
            bnd_sh.index(i % 2).store(bnd)
        dv, dk = warpgroup_mma_wait(0, deps=(dv, dk))
        async_copy.wait_group(0)

        _store_tile(DK, DV, WS, slot, bg, k0, T, dk, dv, scale, BLOCK_N, D, mma_d)


@gluon.jit
def _ws_producer(Q, DO, LSE, DELTA, ENTRIES, q_sh, do_sh, lse_sh, delta_sh, bnd_sh, ready, empty, e0, e1, b, g, h,
                 sq_b, sq_s, sq_g, sq_h, sdo_b, sdo_s, sdo_g, sdo_h, sl_b, sl_s, sl_g, sl_h,
                 ROWS: gl.constexpr, D: gl.constexpr, HP: gl.constexpr, NB: gl.constexpr, PW: gl.constexpr):
    """The gather partition (``PW`` warps): step ``j``'s q and dO rows, LSE, delta and key bounds by ``cp.async``
    into slot ``j % NB`` once its consumer has released the slot; every thread's copies arrive on ``ready``."""
    STEP: gl.constexpr = ROWS // HP
    gather: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [PW, 1], [1, 0])
    row: gl.constexpr = gl.SliceLayout(1, gather)
    vec: gl.constexpr = gl.BlockedLayout([1], [32], [PW], [0])
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, gather))
    r = gl.arange(0, ROWS, layout=row)
    rv = gl.arange(0, ROWS, layout=vec)
    n_steps = gl.cdiv(e1 - e0, STEP)
    for j in range(n_steps):
        s = j % NB
        mbarrier.wait(empty.index(s), ((j // NB) + 1) & 1, pred=j >= NB)
        ent = e0 + j * STEP + r // HP
        head = r % HP
        ok = (ent < e1) & (head < h)
        tok = gl.load(ENTRIES + ent * 2, mask=ok, other=0)
        q_off = b * sq_b + tok.to(gl.int64) * sq_s + g * sq_g + head.to(gl.int64) * sq_h
        do_off = b * sdo_b + tok.to(gl.int64) * sdo_s + g * sdo_g + head.to(gl.int64) * sdo_h
        m = gl.expand_dims(ok, 1) & gl.expand_dims(offs_d < D, 0)
        _async_gather(q_sh.index(s), Q + gl.expand_dims(q_off, 1) + gl.expand_dims(offs_d, 0),
                                               mask=m)
        _async_gather(do_sh.index(s),
                                               DO + gl.expand_dims(do_off, 1) + gl.expand_dims(offs_d, 0), mask=m)
        ent_v = e0 + j * STEP + rv // HP
        head_v = rv % HP
        ok_v = (ent_v < e1) & (head_v < h)
        tok_v = gl.load(ENTRIES + ent_v * 2, mask=ok_v, other=0)
        l_off = b * sl_b + tok_v.to(gl.int64) * sl_s + g * sl_g + head_v.to(gl.int64) * sl_h
        _async_gather(lse_sh.index(s), LSE + l_off, mask=ok_v)
        _async_gather(delta_sh.index(s), DELTA + l_off, mask=ok_v)
        _async_gather(bnd_sh.index(s), ENTRIES + ent_v * 2 + 1, mask=ok_v)
        async_copy.mbarrier_arrive(ready.index(s), increment_count=False)


@gluon.jit
def _ws_consumer(k_sh, v_sh, q_sh, do_sh, lse_sh, delta_sh, bnd_sh, ready, empty, comb_sh, done,
                 DK, DV, WS, slot, bg, k0, T, e0, e1, qk_scale, scale,
                 C: gl.constexpr, NC: gl.constexpr,
                 BLOCK_N: gl.constexpr, ROWS: gl.constexpr, D: gl.constexpr, HP: gl.constexpr, NB: gl.constexpr):
    """MMA partition ``C`` of ``NC`` (4 warps): steps ``C, C + NC, ...``; for each, the next one's score MMAs, then
    its dv/dk MMAs, the wait that keeps the latter in flight, the release of the previous one's slot, the next
    one's softmax.  Partition 0 adds the others' sums (through ``comb_sh``) and stores."""
    STEP: gl.constexpr = ROWS // HP
    mma_s: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, ROWS, 16])
    mma_d: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    a_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_d, k_width=2)
    col: gl.constexpr = gl.SliceLayout(0, mma_s)
    n_steps = gl.cdiv(e1 - e0, STEP)
    n_mine = gl.maximum(gl.cdiv(n_steps - C, NC), 0)
    dk = gl.zeros([BLOCK_N, D], gl.float32, mma_d)
    dv = gl.zeros([BLOCK_N, D], gl.float32, mma_d)
    zero_s = gl.zeros([BLOCK_N, ROWS], gl.float32, mma_s)

    j0 = C
    mbarrier.wait(ready.index(j0 % NB), (j0 // NB) & 1, pred=n_mine > 0)
    fence_async_shared()
    st = warpgroup_mma(k_sh, q_sh.index(j0 % NB).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    dpt = warpgroup_mma(v_sh, do_sh.index(j0 % NB).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    st, dpt = warpgroup_mma_wait(0, deps=(st, dpt))
    p, ds = _softmax_lse(st, dpt, lse_sh.index(j0 % NB).load(col), delta_sh.index(j0 % NB).load(col),
                         bnd_sh.index(j0 % NB).load(col), qk_scale, BLOCK_N, mma_s, a_op)
    for kk in range(n_mine):
        j = C + kk * NC
        jn = j + NC
        cur = j % NB
        nxt = jn % NB
        mbarrier.wait(ready.index(nxt), (jn // NB) & 1, pred=kk + 1 < n_mine)
        fence_async_shared()
        st = warpgroup_mma(k_sh, q_sh.index(nxt).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        dpt = warpgroup_mma(v_sh, do_sh.index(nxt).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        dv = warpgroup_mma(p, do_sh.index(cur), dv, is_async=True)
        dk = warpgroup_mma(ds, q_sh.index(cur), dk, is_async=True)
        st, dpt, dv, dk, p, ds = warpgroup_mma_wait(2, deps=(st, dpt, dv, dk, p, ds))
        mbarrier.arrive(empty.index((j + NB - NC) % NB), pred=kk >= 1)
        p, ds = _softmax_lse(st, dpt, lse_sh.index(nxt).load(col), delta_sh.index(nxt).load(col),
                             bnd_sh.index(nxt).load(col), qk_scale, BLOCK_N, mma_s, a_op)
    dv, dk = warpgroup_mma_wait(0, deps=(dv, dk))

    if NC > 1:
        if C > 0:
            comb_sh.index(0).store(dk)
            comb_sh.index(1).store(dv)
            _cta_barrier()
            mbarrier.arrive(done)
        else:
            mbarrier.wait(done, 0)
            dk += comb_sh.index(0).load(mma_d)
            dv += comb_sh.index(1).load(mma_d)
    if C == 0:
        _store_tile(DK, DV, WS, slot, bg, k0, T, dk, dv, scale, BLOCK_N, D, mma_d)


@gluon.jit
def _softmax_lse(st, dpt, lse, delta, bnd, qk_scale, BLOCK_N: gl.constexpr, mma_s: gl.constexpr,
                 a_op: gl.constexpr):
    """:func:`_softmax` from the natural-log LSE as stored (``-inf``: a row without keys, taken as ``+inf``)."""
    lse2 = lse * 1.4426950408889634
    lse2 = gl.where(lse2 == float("-inf"), float("inf"), lse2)
    return _softmax(st, dpt, lse2, delta, bnd, qk_scale, BLOCK_N, mma_s, a_op)


@gluon.jit
def dkdv_ws_kernel(
    Q, K, V, DO, LSE, DELTA, DK, DV, WS, ENTRIES, CHUNKS,
    G, h, T, NT, qk_scale, scale,
    sq_b, sq_s, sq_g, sq_h,
    sk_b, sk_g, sk_t,
    sv_b, sv_g, sv_t,
    sdo_b, sdo_s, sdo_g, sdo_h,
    sl_b, sl_s, sl_g, sl_h,
    BLOCK_N: gl.constexpr, ROWS: gl.constexpr, D: gl.constexpr, HP: gl.constexpr, NB: gl.constexpr,
    NC: gl.constexpr, CREGS: gl.constexpr,
):
    """dk, dv of one chunk, warp-specialised: the kernel's 4 warps gather (``cp.async`` into ``NB`` slots, an
    mbarrier a slot each way), ``NC`` (1 or 2) partitions of 4 warps with ``CREGS`` registers run the MMAs and
    the softmax of alternate steps (register reallocation: the gather warps keep what is left).  A partition
    releases a step's slot when it issues its next step's MMAs and first waits for the step after that, so
    ``NB >= 3 * NC`` (fewer slots deadlock: the gather warps wait for a release that waits for them)."""
    gl.static_assert(NB >= 3 * NC, "the warp-specialised walk needs NB >= 3 * NC slots")
    rows_sh: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, D], gl.bfloat16)
    vec_sh: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    comb_l: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])

    tile_id, e0, e1, slot, bg, b, g, k0 = _chunk(CHUNKS, NT, G, BLOCK_N)
    if tile_id >= 0:
        k_sh, v_sh = _key_tile(K, V, b, g, k0, T, sk_b, sk_g, sk_t, sv_b, sv_g, sv_t, BLOCK_N, D)
        q_sh = gl.allocate_shared_memory(gl.bfloat16, [NB, ROWS, D], rows_sh)
        do_sh = gl.allocate_shared_memory(gl.bfloat16, [NB, ROWS, D], rows_sh)
        lse_sh = gl.allocate_shared_memory(gl.float32, [NB, ROWS], vec_sh)
        delta_sh = gl.allocate_shared_memory(gl.float32, [NB, ROWS], vec_sh)
        bnd_sh = gl.allocate_shared_memory(gl.int32, [NB, ROWS], vec_sh)
        comb_sh = gl.allocate_shared_memory(gl.float32, [2, BLOCK_N, D] if NC > 1 else [2, 8, 8], comb_l)
        ready = gl.allocate_shared_memory(gl.int64, [NB, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [NB, 1], mbarrier.MBarrierLayout())
        done = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        for j in gl.static_range(NB):
            mbarrier.init(ready.index(j), count=128)
            mbarrier.init(empty.index(j), count=1)
        mbarrier.init(done, count=1)
        fence_async_shared()

        if NC == 1:
            gl.warp_specialize(
                [(_ws_producer, (Q, DO, LSE, DELTA, ENTRIES, q_sh, do_sh, lse_sh, delta_sh, bnd_sh, ready, empty,
                                 e0, e1, b, g, h, sq_b, sq_s, sq_g, sq_h, sdo_b, sdo_s, sdo_g, sdo_h,
                                 sl_b, sl_s, sl_g, sl_h, ROWS, D, HP, NB, 4)),
                 (_ws_consumer, (k_sh, v_sh, q_sh, do_sh, lse_sh, delta_sh, bnd_sh, ready, empty, comb_sh, done,
                                 DK, DV, WS, slot, bg, k0, T, e0, e1, qk_scale, scale, 0, 1,
                                 BLOCK_N, ROWS, D, HP, NB))],
                [4], [CREGS])
        else:
            gl.warp_specialize(
                [(_ws_producer, (Q, DO, LSE, DELTA, ENTRIES, q_sh, do_sh, lse_sh, delta_sh, bnd_sh, ready, empty,
                                 e0, e1, b, g, h, sq_b, sq_s, sq_g, sq_h, sdo_b, sdo_s, sdo_g, sdo_h,
                                 sl_b, sl_s, sl_g, sl_h, ROWS, D, HP, NB, 4)),
                 (_ws_consumer, (k_sh, v_sh, q_sh, do_sh, lse_sh, delta_sh, bnd_sh, ready, empty, comb_sh, done,
                                 DK, DV, WS, slot, bg, k0, T, e0, e1, qk_scale, scale, 0, 2,
                                 BLOCK_N, ROWS, D, HP, NB)),
                 (_ws_consumer, (k_sh, v_sh, q_sh, do_sh, lse_sh, delta_sh, bnd_sh, ready, empty, comb_sh, done,
                                 DK, DV, WS, slot, bg, k0, T, e0, e1, qk_scale, scale, 1, 2,
                                 BLOCK_N, ROWS, D, HP, NB))],
                [4, 4], [CREGS, CREGS])


# (name, ROWS, NB, OVERLAP, MODE, NC, CREGS, MAXNREG): NC > 0 is the warp-specialised kernel (NC MMA partitions
# asking for CREGS registers, the launch capped at MAXNREG a thread; OVERLAP and MODE do not apply to it)
VARIANTS = [
    ("g-nb3", 32, 3, 1, 0, 0, 0, 0),
    ("g-nb4", 32, 4, 1, 0, 0, 0, 0),
    ("g-nb5", 32, 5, 1, 0, 0, 0, 0),
    ("g-nb4-serial", 32, 4, 0, 0, 0, 0, 0),
    ("g-r64-nb3", 64, 3, 1, 0, 0, 0, 0),
    ("g-nb4-nogather", 32, 4, 1, 1, 0, 0, 0),
    ("g-nb4-nosoftmax", 32, 4, 1, 2, 0, 0, 0),
    ("g-nb4-mma-only", 32, 4, 1, 3, 0, 0, 0),
    ("g-nb4-serial-mma-only", 32, 4, 0, 3, 0, 0, 0),
    ("g-nb4-fast", 32, 4, 1, 4, 0, 0, 0),
    ("g-nb4-i32", 32, 4, 1, 8, 0, 0, 0),
    ("g-nb4-fast-i32", 32, 4, 1, 12, 0, 0, 0),
    ("g-nb3-fast-i32", 32, 3, 1, 12, 0, 0, 0),
    ("ws1-nb4", 32, 4, 1, 0, 1, 208, 128),
    ("ws1-nb4-r240", 32, 4, 1, 0, 1, 240, 240),
    ("ws1-nb6-r240", 32, 6, 1, 0, 1, 240, 240),
    ("ws2-nb6", 32, 6, 1, 0, 2, 232, 168),
]


def chosen(names: list[str]) -> list[tuple]:
    by_name = {v[0]: v for v in VARIANTS}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}; known: {', '.join(by_name)}")
    return [by_name[n] for n in names] if names else list(VARIANTS)


AOT_CHILD = r'''
import json, subprocess, sys
from pathlib import Path
name, rows, nb, overlap, mode, pw, pregs, maxnreg, arch = json.loads(sys.argv[1])
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from bench.probes.dkdv_gluon import dkdv_gluon_kernel, dkdv_ws_kernel
fn = dkdv_ws_kernel if pw else dkdv_gluon_kernel
ce = {"BLOCK_N": 64, "ROWS": rows, "D": 128, "HP": 16, "NB": nb}
ce.update({"NC": pw, "CREGS": pregs} if pw else {"OVERLAP": overlap, "MODE": mode})
types = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "DO": "*bf16", "LSE": "*fp32", "DELTA": "*fp32",
         "DK": "*bf16", "DV": "*bf16", "WS": "*fp32", "ENTRIES": "*i32", "CHUNKS": "*i64",
         "qk_scale": "fp32", "scale": "fp32"}
sig = {n: types.get(n, "i32") for n in fn.arg_names if n not in ce}
sig.update({n: "constexpr" for n in ce})
attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n, t in sig.items()
         if t.startswith("*") or n in ("sq_b", "sq_s", "sq_g", "sq_h", "sk_b", "sk_g", "sk_t", "sv_b", "sv_g",
                                        "sv_t", "sdo_b", "sdo_s", "sdo_g", "sdo_h", "sl_b", "sl_s")}
src = GluonASTSource(fn, sig, ce, attrs)
c = triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": 4, **({"maxnreg": maxnreg} if pw else {})})
import re
from bench.probes.dkdv_variants import sass_loop_instructions
loop = sass_loop_instructions(c.asm["cubin"])
ptx = c.asm["ptx"]
from nsa_triton_sel.compat.smoke import aot
met = aot.collect_metrics(c)
import tempfile
from triton.backends.nvidia.compiler import get_ptxas
with tempfile.TemporaryDirectory() as d:  # ptxas's own notes (wgmma serialisation) on the same PTX
    Path(d, "k.ptx").write_text(ptx)
    notes = subprocess.run([get_ptxas(arch).path, "-arch=sm_90a", "-v", "-o", str(Path(d, "k.o")), str(Path(d, "k.ptx"))],
                           capture_output=True, text=True)
    notes = [l.strip() for l in (notes.stdout + notes.stderr).splitlines() if "wgmma" in l.lower()]
print(json.dumps({"name": name, "num_warps": c.metadata.num_warps, "setmaxnreg": re.findall(r"setmaxnreg\S*\s+(\d+)", ptx), **{k: met.get(k) for k in ("registers", "spills", "shared")}, "ptxas": notes,
                  "wgmma": ptx.count("wgmma.mma_async"), "wgmma_wait": re.findall(r"wgmma.wait_group.sync.aligned (\d+)", ptx),
                  "cp_async": ptx.count("cp.async.ca") + ptx.count("cp.async.cg"), "loop_instructions": loop}))
'''


def aot_report(python: str, names: list[str], arch: int = 90) -> int:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    for name, rows, nb, overlap, mode, pw, pregs, maxnreg in chosen(names):
        res = subprocess.run([python, "-c", AOT_CHILD, json.dumps([name, rows, nb, overlap, mode, pw, pregs, maxnreg, arch])],
                             capture_output=True, text=True, env=env)
        if res.returncode:
            print(f"{name:16s} FAILED\n{res.stderr[-3000:]}")
            continue
        print(res.stdout.strip().splitlines()[-1], flush=True)
    return 0


def launch(x, dk, dv, rows, nb, overlap, mode, pw=0, pregs=0, maxnreg=0):
    """The Gluon walk over ``x``'s reader list (and the shipped reduction of split tiles)."""
    import torch

    from nsa_triton_sel.kernels import backward as bwd_kernels
    from nsa_triton_sel.plan.tiles import next_pow2

    q, k, v, go, lse, delta, meta, readers, scale = x.q, x.k, x.v, x.go, x.lse, x.delta, x.meta, x.readers, x.scale
    B, S, G, h, Dk = q.shape
    T, Dv = k.shape[2], v.shape[3]
    if Dk != 128 or Dv != 128 or q.dtype != torch.bfloat16 or meta.KV_BLOCK_N != 64:
        raise ValueError("the Gluon walk covers bf16, Dk = Dv = 128, 64-key tiles only")
    if not (k.is_contiguous() and v.is_contiguous() and dk.is_contiguous() and dv.is_contiguous()):
        raise ValueError("the Gluon walk needs contiguous k, v, dk, dv")
    HP = next_pow2(h)
    if HP > rows:
        raise ValueError(f"h = {h} needs more than {rows} rows a step")
    ws = torch.empty((max(readers.slots, 1), 64, 2 * 128), dtype=torch.float32, device=q.device)
    lse4 = lse.reshape(B, S, G, h) if lse.dim() != 4 else lse
    kernel, extra = ((dkdv_ws_kernel, dict(NC=pw, CREGS=pregs, maxnreg=maxnreg)) if pw
                     else (dkdv_gluon_kernel, dict(OVERLAP=overlap, MODE=mode)))
    kernel[(readers.chunks.shape[0],)](
        q, k, v, go, lse4, delta, dk, dv, ws, readers.entries, readers.chunks,
        G, h, T, readers.n_tiles, scale * LOG2E, scale,
        q.stride(0), q.stride(1), q.stride(2), q.stride(3),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        go.stride(0), go.stride(1), go.stride(2), go.stride(3),
        *lse4.stride()[:4],
        BLOCK_N=64, ROWS=rows, D=128, HP=HP, NB=nb, **extra, num_warps=4)
    if readers.slots:
        bwd_kernels.sel_bwd_reduce_kernel[(readers.tile_slots.shape[0],)](
            ws, readers.tile_slots, dk, dv, G, T, readers.n_tiles, Dk, Dv, *dk.stride()[:3], *dv.stride()[:3],
            num_warps=4, num_stages=1, **meta.reduce_constexprs())


def measure(T: int, sel: str, rep_ms: int, names: list[str]) -> list[dict]:
    import torch

    from bench.probes.dkdv_ceiling import dkdv_inputs

    x = dkdv_inputs(T, sel)
    dk0, dv0, out, row = timed_against_shipped(x, T, sel, rep_ms, 16, {})
    for name, rows, nb, overlap, mode, pw, pregs, maxnreg in chosen(names):
        dk, dv = torch.empty_like(x.k), torch.empty_like(x.v)
        try:
            launch(x, dk, dv, rows, nb, overlap, mode, pw, pregs, maxnreg)
            torch.cuda.synchronize()
        except Exception as exc:
            print(f"{T:>6} {sel:>7} {name:>16} FAILED {type(exc).__name__}: {str(exc)[:400]}", flush=True)
            continue
        same, err = against(dk, dv, dk0, dv0)
        dk2, dv2 = torch.empty_like(dk), torch.empty_like(dv)
        launch(x, dk2, dv2, rows, nb, overlap, mode, pw, pregs, maxnreg)
        again = bool(torch.equal(dk, dk2) and torch.equal(dv, dv2))
        row(name, lambda: launch(x, dk, dv, rows, nb, overlap, mode, pw, pregs, maxnreg),
            {"rows": rows, "nb": nb, "bitwise": same, "repeatable": again, "rel_err": err})
    torch.cuda.empty_cache()
    return out


def main(argv=None) -> int:
    return run_cli(argv, __doc__.splitlines()[0], measure, aot_report)


if __name__ == "__main__":
    raise SystemExit(main())
