"""The key-major backward's kernel in Gluon (Triton >= 3.6, sm_90): dk, dv and the partial dq of a chunk.

:func:`sel_bwd_keymajor_gluon_kernel` computes what ``backward.sel_bwd_keymajor_kernel`` computes on its common
walk, bit for bit (the same dk and dv, or float32 partial sums in the same workspace slots; the same float16
partial dq and scales in the same slots), for the calls it covers: bf16, Dk = Dv = 128, 64-key tiles, 32 (entry,
head) pairs a step.  The planner takes it where the device and Triton have it (``device.gluon_ws``,
``plan.keymajor.takes_gluon_backward``); the launcher checks the tensors (``launch._rows_for_cp_async``).

A chunk it does not walk it hands on: where a q or dO row of the call is not finite (``NONFINITE``) or its key
tile holds a non-finite k or v value, the Triton kernel's isolating walk is what the call needs.  Each program
copies its chunk row to ``CHUNKS_LEFT`` with the tile id set to -1 where it walked the chunk, and the launcher then
runs the Triton kernel over ``CHUNKS_LEFT``: its programs return at once on the -1 rows and walk the rest.  Every
chunk is walked by exactly one of the two, with no host read.

Why: the Triton kernel runs at 32-39 % of the memory ceiling of its access pattern on an H200 (255 registers a
thread, two programs of 4 warps an SM, latency-bound: a step's gathers, score MMAs, softmax and its three gradient
MMAs follow one another).  Here the order of the asynchronous work is written out:

- each step's q and dO rows are gathered by ``cp.async`` into one of ``SLOTS`` shared-memory slots, ``SLOTS - 1``
  steps ahead of their use;
- step ``i + 1``'s score MMAs (``K q^T``, ``V dO^T``) are issued before step ``i``'s ``dv += P^T dO`` and ``dk +=
  dS^T q``, which stay in flight across step ``i + 1``'s softmax;
- the partial dq is one MMA, ``dq^T [D, ROWS] = K^T dS^T``, from the key tile already in shared memory and the
  step's ``dS^T`` in a two-slot shared ring: issued after the softmax, it runs while step ``i + 1``'s MMA
  operands are prepared, and its rows are stored through a row-major layout (16-byte stores);
- the LSE, delta, key bounds and partial slots of a step are loaded two steps ahead, one value a thread, and pass
  through a two-slot shared ring into the layouts that read them; the step's power of two for its partial dq
  comes from the same bound as the Triton kernel's (keys read, the tile's largest ``|k|`` and ``|v|``, each
  pair's ``rowsum |dO|`` and ``|delta|``).

Offsets of q, dO, k, v, dk, dv rows and of partial slots are int64; reader-list positions are int32 (the launcher
checks that the list has fewer than 2^30 entries).  This module imports Triton's Gluon, which Triton 3.0-3.5 do not
have in this form: only the launcher imports it, and only where ``device.gluon_ws`` says the Triton has it.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import async_copy, fence_async_shared, warpgroup_mma, \
    warpgroup_mma_wait

from .keymajor_ws import _async_gather, _cta_barrier, _key_value_rows

WARPS = 4  # one warpgroup: every MMA of a step is a warpgroup MMA


@gluon.jit
def _chunk_row(CHUNKS, NT, G, BLOCK_N: gl.constexpr):
    """This program's reader-list chunk row ``(tile, e0, e1, slot)`` (as ``sel_bwd_keymajor_kernel`` reads it):
    ``(tile_id, e0, e1, slot, b, g, k0)``; ``tile_id < 0`` is a padding chunk."""
    chunk = CHUNKS + gl.program_id(0).to(gl.int64) * 4
    tile_id = gl.load(chunk)
    e0 = gl.load(chunk + 1).to(gl.int32)
    e1 = gl.load(chunk + 2).to(gl.int32)
    slot = gl.load(chunk + 3)
    bg = tile_id // NT
    return tile_id, e0, e1, slot, bg // G, bg % G, (tile_id % NT) * BLOCK_N


@gluon.jit
def _key_tile_max(K, V, b, g, k0, T, sk_b, sk_g, sk_t, sv_b, sv_g, sv_t, BLOCK_N: gl.constexpr, D: gl.constexpr):
    """The key tile's k and v ``[BLOCK_N, D]`` in shared memory (keys past ``T`` as 0), the log2 of their largest
    magnitudes, and whether every value is finite."""
    tile_sh: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D], gl.bfloat16)
    k, v = _key_value_rows(K, V, b, g, k0, T, sk_b, sk_g, sk_t, sv_b, sv_g, sv_t, BLOCK_N, D)
    k_abs = gl.abs(k.to(gl.float32))
    v_abs = gl.abs(v.to(gl.float32))
    # a comparison, not the maxima: NaN fails it (and a maximum may drop it)
    finite = gl.min(gl.min(((k_abs < float("inf")) & (v_abs < float("inf"))).to(gl.int32), 1), 0)
    return (gl.allocate_shared_memory(gl.bfloat16, [BLOCK_N, D], tile_sh, k),
            gl.allocate_shared_memory(gl.bfloat16, [BLOCK_N, D], tile_sh, v),
            gl.log2(gl.max(gl.max(k_abs, 1), 0)), gl.log2(gl.max(gl.max(v_abs, 1), 0)), finite)


@gluon.jit
def _step_tokens(ENTRIES, p0, e1, h, ROWS: gl.constexpr, HP: gl.constexpr, layout: gl.constexpr):
    """The tokens, heads and mask ``[ROWS]`` of the step whose pairs start at entry ``p0`` (pair ``r``: entry
    ``p0 + r // HP``, head ``r % HP``), in ``layout``."""
    r = gl.arange(0, ROWS, layout=layout)
    ent = p0 + r // HP
    head = r % HP
    ok = (ent < e1) & (head < h)
    tok = gl.load(ENTRIES + ent * 2, mask=ok, other=0)
    return tok, head, ok


@gluon.jit
def _gather_step(Q, DO, q_slot, do_slot, tok, ok, b, g, sq_b, sq_s, sq_g, sq_h, sdo_b, sdo_s, sdo_g, sdo_h,
                 head, D: gl.constexpr, gather: gl.constexpr, I32: gl.constexpr = False):
    """Start the ``cp.async`` copies of one step's q and dO rows (pairs ``[ROWS]``: token ``tok``, head ``head``)
    into ``q_slot``/``do_slot`` ``[ROWS, D]``; masked pairs are zero-filled.  One commit group.  ``I32``: int32
    row offsets (every gathered tensor under 2^31 elements)."""
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, gather))
    if I32:
        q_off = b.to(gl.int32) * sq_b + tok * sq_s + g.to(gl.int32) * sq_g + head * sq_h
        do_off = b.to(gl.int32) * sdo_b + tok * sdo_s + g.to(gl.int32) * sdo_g + head * sdo_h
    else:
        q_off = b * sq_b + tok.to(gl.int64) * sq_s + g * sq_g + head.to(gl.int64) * sq_h
        do_off = b * sdo_b + tok.to(gl.int64) * sdo_s + g * sdo_g + head.to(gl.int64) * sdo_h
    m = gl.expand_dims(ok, 1) & gl.expand_dims(offs_d < D, 0)
    _async_gather(q_slot, Q + gl.expand_dims(q_off, 1) + gl.expand_dims(offs_d, 0), mask=m)
    _async_gather(do_slot, DO + gl.expand_dims(do_off, 1) + gl.expand_dims(offs_d, 0), mask=m)
    async_copy.commit_group()


@gluon.jit
def _step_vectors(ENTRIES, ORIGIN, LSE, DELTA, DO_L1_LOG2, p0, e1, b, g, h, sl_b, sl_s, sl_g, sl_h,
                  sd_b, sd_s, sd_g, sd_h, ROWS: gl.constexpr, HP: gl.constexpr, vec: gl.constexpr):
    """The step whose pairs start at entry ``p0``, one value a pair ``[ROWS]`` (compact, ``vec``): log2 LSE (a row
    without keys, LSE -inf, as +inf), delta, key bounds ``lo | hi << 16``, the partial dq's slot ``origin * h +
    head`` (-1 for a masked pair) and the log2 of ``rowsum |dO|``.  Masked pairs: bounds 0 (no key), delta 0."""
    r = gl.arange(0, ROWS, layout=vec)
    ent = p0 + r // HP
    head = r % HP
    ok = (ent < e1) & (head < h)
    tok = gl.load(ENTRIES + ent * 2, mask=ok, other=0)
    bnd = gl.load(ENTRIES + ent * 2 + 1, mask=ok, other=0)
    origin = gl.load(ORIGIN + ent, mask=ok, other=0)
    l_off = b * sl_b + tok.to(gl.int64) * sl_s + g * sl_g + head.to(gl.int64) * sl_h
    d_off = b * sd_b + tok.to(gl.int64) * sd_s + g * sd_g + head.to(gl.int64) * sd_h
    lse2 = gl.load(LSE + l_off, mask=ok, other=0.0) * 1.4426950408889634
    lse2 = gl.where(lse2 == float("-inf"), float("inf"), lse2)
    delta = gl.load(DELTA + d_off, mask=ok, other=0.0)
    do_l1_log2 = gl.load(DO_L1_LOG2 + d_off, mask=ok, other=0.0)
    slot = gl.where(ok, origin * h + head, -1)
    return lse2, delta, bnd, slot, do_l1_log2


@gluon.jit
def _step_exponent(delta, bnd, do_l1_log2, log2_kmax, log2_vmax):
    """The step's power of two for its partial dq, as the Triton kernel takes it (``backward._keymajor_pairs``):
    per pair, with ``n`` keys read, ``log2(n) + log2 max|k| + max(log2 max|v| + log2 rowsum|dO|, log2 |delta|) +
    1``; the step's largest, then ``ceil - 15`` clamped to [-126, 126] (``common._partial_exponent``)."""
    n_keys = ((bnd >> 16) - (bnd & 0xFFFF)).to(gl.float32)
    log2_bound = (gl.log2(n_keys) + log2_kmax
                  + gl.maximum(log2_vmax + do_l1_log2, gl.log2(gl.abs(delta))) + 1.0)
    e = gl.ceil(gl.max(log2_bound, 0)) - 15.0
    e = gl.where(e < 126.0, e, 126.0)  # where, not minimum: NaN goes one way on every backend
    return gl.where(e > -126.0, e, -126.0)


@gluon.jit
def _softmax_tiles(st, dpt, lse2, delta, bnd, qk_scale, BLOCK_N: gl.constexpr, mma_s: gl.constexpr,
                   FAST: gl.constexpr = False):
    """``P^T`` and ``dS^T`` ``[BLOCK_N, ROWS]`` of one step in float32, in the score tile's layout ``mma_s``, from
    the transposed scores ``st`` and ``dpt = (dO V^T)^T``: ``P^T = exp2(st * qk_scale - lse2)`` over the keys each
    pair reads (``[lo, hi)`` of its bounds), ``dS^T = P^T (dpt - delta)``.  ``FAST``: a step whose every pair reads
    the whole tile skips the key mask (the same values)."""
    x = st * qk_scale - gl.expand_dims(lse2, 0)
    x = gl.where(x > 0.0, 0.0, x)
    whole = False
    if FAST:
        whole = gl.min((bnd == (BLOCK_N << 16)).to(gl.int32), 0) > 0
    if whole:
        pt = gl.exp2(x)
        dst = pt * (dpt - gl.expand_dims(delta, 0))
    else:
        offs_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, mma_s))
        lo = bnd & 0xFFFF
        hi = bnd >> 16
        n2 = gl.expand_dims(offs_n, 1)
        inside = (n2 >= gl.expand_dims(lo, 0)) & (n2 < gl.expand_dims(hi, 0))
        pt = gl.where(inside, gl.exp2(x), 0.0)
        # where, not pt * ...: a key the pair does not read stays out of its gradients
        dst = gl.where(inside, pt * (dpt - gl.expand_dims(delta, 0)), 0.0)
    return pt, dst


@gluon.jit
def _store_partial_dq(DQP, DQP_SCALE, dq_t, slot_sh, e, scale, ROWS: gl.constexpr, D: gl.constexpr):
    """Store a step's partial dq (``dq_t [D, ROWS]``, float32, transposed) at its pairs' slots of ``DQP`` in
    float16 divided by ``2**e``, and ``scale * 2**e`` in ``DQP_SCALE`` (``slot_sh``: the slots, -1 for a masked
    pair, which stores nothing)."""
    st_l: gl.constexpr = gl.BlockedLayout([8, 1], [16, 2], [1, 4], [0, 1])
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    vals = gl.convert_layout((dq_t * gl.exp2(-e)).to(gl.float16), st_l)
    slot = slot_sh.load(gl.SliceLayout(0, st_l))
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(1, st_l))
    m = gl.expand_dims(slot >= 0, 0) & gl.expand_dims(offs_d < D, 1)
    gl.store(DQP + gl.expand_dims(slot * D, 0) + gl.expand_dims(offs_d, 1), vals, mask=m)
    slot_v = slot_sh.load(one)
    gl.store(DQP_SCALE + slot_v, gl.zeros([ROWS], gl.float32, one) + gl.exp2(e) * scale, mask=slot_v >= 0)


@gluon.jit
def _store_tile(DK, DV, WS, slot, b, g, k0, T, dk, dv, scale, sdk_b, sdk_g, sdk_t, sdv_b, sdv_g, sdv_t,
                BLOCK_N: gl.constexpr, D: gl.constexpr, mma_d: gl.constexpr):
    """Store a key tile's dk (times ``scale``) and dv: directly when the chunk is the tile's only one (``slot <
    0``), else as float32 partial sums in workspace slot ``slot`` for ``sel_bwd_reduce_kernel`` (the layout of
    ``backward._store_tile_grads``)."""
    offs_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, mma_d))
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, mma_d))
    if slot < 0:
        t_idx = (k0 + offs_n).to(gl.int64)
        m = gl.expand_dims((k0 + offs_n) < T, 1) & gl.expand_dims(offs_d < D, 0)
        gl.store(DK + gl.expand_dims(b * sdk_b + g * sdk_g + t_idx * sdk_t, 1) + gl.expand_dims(offs_d, 0),
                 (dk * scale).to(gl.bfloat16), mask=m)
        gl.store(DV + gl.expand_dims(b * sdv_b + g * sdv_g + t_idx * sdv_t, 1) + gl.expand_dims(offs_d, 0),
                 dv.to(gl.bfloat16), mask=m)
    else:
        ws = WS + slot * (BLOCK_N * 2 * D) + gl.expand_dims(offs_n * (2 * D), 1) + gl.expand_dims(offs_d, 0)
        gl.store(ws, dk * scale)
        gl.store(ws + D, dv)


@gluon.jit
def _walk(Q, DO, LSE, DELTA, DO_L1_LOG2, DK, DV, DQP, DQP_SCALE, WS, ENTRIES, ORIGIN, k_sh, v_sh, log2_kmax,
          log2_vmax, e0, e1, slot, b, g, k0, h, T, qk_scale, scale,
          sq_b, sq_s, sq_g, sq_h, sdo_b, sdo_s, sdo_g, sdo_h, sl_b, sl_s, sl_g, sl_h, sd_b, sd_s, sd_g, sd_h,
          sdk_b, sdk_g, sdk_t, sdv_b, sdv_g, sdv_t,
          BLOCK_N: gl.constexpr, ROWS: gl.constexpr, D: gl.constexpr, HP: gl.constexpr, SLOTS: gl.constexpr):
    """The common walk over the chunk's entries ``[e0, e1)``, ``ROWS // HP`` whole entries a step, then the
    tile's dk and dv stored (module docstring)."""
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

    q_sh = gl.allocate_shared_memory(gl.bfloat16, [SLOTS, ROWS, D], rows_sh)
    do_sh = gl.allocate_shared_memory(gl.bfloat16, [SLOTS, ROWS, D], rows_sh)
    ds_sh = gl.allocate_shared_memory(gl.bfloat16, [2, BLOCK_N, ROWS], ds_shl)
    lse_sh = gl.allocate_shared_memory(gl.float32, [2, ROWS], vec_sh)
    delta_sh = gl.allocate_shared_memory(gl.float32, [2, ROWS], vec_sh)
    bnd_sh = gl.allocate_shared_memory(gl.int32, [2, ROWS], vec_sh)
    slot_sh = gl.allocate_shared_memory(gl.int64, [2, ROWS], vec_sh)

    # -- steps 0 .. SLOTS-2 in flight; step SLOTS-1's tokens and steps 0, 1's vectors loaded --
    for j in gl.static_range(SLOTS - 1):
        tok, head, ok = _step_tokens(ENTRIES, e0 + j * STEP, e1, h, ROWS, HP, row)
        _gather_step(Q, DO, q_sh.index(j), do_sh.index(j), tok, ok, b, g, sq_b, sq_s, sq_g, sq_h,
                     sdo_b, sdo_s, sdo_g, sdo_h, head, D, gather)
    tok_n, head_n, ok_n = _step_tokens(ENTRIES, e0 + (SLOTS - 1) * STEP, e1, h, ROWS, HP, row)
    lse2, delta, bnd, pslot, dol1 = _step_vectors(ENTRIES, ORIGIN, LSE, DELTA, DO_L1_LOG2, e0, e1, b, g, h,
                                                  sl_b, sl_s, sl_g, sl_h, sd_b, sd_s, sd_g, sd_h, ROWS, HP, vec)
    lse_sh.index(0).store(lse2)
    delta_sh.index(0).store(delta)
    bnd_sh.index(0).store(bnd)
    slot_sh.index(0).store(pslot)
    e_cur = _step_exponent(delta, bnd, dol1, log2_kmax, log2_vmax)
    lse2, delta, bnd, pslot, dol1 = _step_vectors(ENTRIES, ORIGIN, LSE, DELTA, DO_L1_LOG2, e0 + STEP, e1, b, g, h,
                                                  sl_b, sl_s, sl_g, sl_h, sd_b, sd_s, sd_g, sd_h, ROWS, HP, vec)
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
    async_copy.wait_group(SLOTS - 2)
    _cta_barrier()
    fence_async_shared()
    st = warpgroup_mma(k_sh, q_sh.index(0).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    dpt = warpgroup_mma(v_sh, do_sh.index(0).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    st, dpt = warpgroup_mma_wait(0, deps=(st, dpt))
    pt, dst = _softmax_tiles(st, dpt, lse_sh.index(0).load(col), delta_sh.index(0).load(col),
                             bnd_sh.index(0).load(col), qk_scale, BLOCK_N, mma_s)
    dst = dst.to(gl.bfloat16)
    ds_sh.index(0).store(dst)
    p = gl.convert_layout(pt.to(gl.bfloat16), a_op)
    ds = gl.convert_layout(dst, a_op)

    for i in range(gl.cdiv(e1 - e0, STEP)):
        cur = i % SLOTS
        nxt = (i + 1) % SLOTS
        # step i+2's vectors start loading now, stored after the softmax
        lse2, delta, bnd, pslot, dol1 = _step_vectors(ENTRIES, ORIGIN, LSE, DELTA, DO_L1_LOG2, e0 + (i + 2) * STEP,
                                                      e1, b, g, h, sl_b, sl_s, sl_g, sl_h, sd_b, sd_s, sd_g, sd_h,
                                                      ROWS, HP, vec)
        # -- step i+1's rows are in: its score MMAs go first, then step i's dv/dk MMAs (kept in flight) --
        async_copy.wait_group(SLOTS - 3)
        _cta_barrier()
        fence_async_shared()
        st = warpgroup_mma(k_sh, q_sh.index(nxt).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        dpt = warpgroup_mma(v_sh, do_sh.index(nxt).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        dv = warpgroup_mma(p, do_sh.index(cur), dv, is_async=True)
        dk = warpgroup_mma(ds, q_sh.index(cur), dk, is_async=True)
        st, dpt, dv, dk, p, ds = warpgroup_mma_wait(2, deps=(st, dpt, dv, dk, p, ds))
        # -- step i-1's slot is free (its MMAs are done): step i+SLOTS-1's rows into it --
        _gather_step(Q, DO, q_sh.index((i + SLOTS - 1) % SLOTS), do_sh.index((i + SLOTS - 1) % SLOTS), tok_n, ok_n,
                     b, g, sq_b, sq_s, sq_g, sq_h, sdo_b, sdo_s, sdo_g, sdo_h, head_n, D, gather)
        tok_n, head_n, ok_n = _step_tokens(ENTRIES, e0 + (i + SLOTS) * STEP, e1, h, ROWS, HP, row)
        # -- step i+1's softmax while step i's dv/dk MMAs run --
        vs = (i + 1) % 2
        pt, dst = _softmax_tiles(st, dpt, lse_sh.index(vs).load(col), delta_sh.index(vs).load(col),
                                 bnd_sh.index(vs).load(col), qk_scale, BLOCK_N, mma_s)
        dst = dst.to(gl.bfloat16)
        dv, dk = warpgroup_mma_wait(0, deps=(dv, dk))
        # -- step i's partial dq: its MMA runs while step i+1's operands are prepared (it reads ring slot i % 2;
        # step i+1's dS^T goes to the other, whose last reader, step i-1's dq MMA, is done) --
        dq = warpgroup_mma(k_sh.permute((1, 0)), ds_sh.index(i % 2), zero_q, use_acc=False, is_async=True)
        p = gl.convert_layout(pt.to(gl.bfloat16), a_op)
        ds = gl.convert_layout(dst, a_op)
        ds_sh.index(vs).store(dst)
        dq = warpgroup_mma_wait(0, deps=(dq,))
        _store_partial_dq(DQP, DQP_SCALE, dq, slot_sh.index(i % 2), e_cur, scale, ROWS, D)
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


@gluon.jit
def sel_bwd_keymajor_gluon_kernel(
    Q, K, V, DO, LSE, DELTA, DO_L1_LOG2, DK, DV, DQP, DQP_SCALE, WS, ENTRIES, ORIGIN, CHUNKS, CHUNKS_LEFT, NONFINITE,
    G, h, T, NT, qk_scale, scale,
    sq_b, sq_s, sq_g, sq_h,
    sk_b, sk_g, sk_t,
    sv_b, sv_g, sv_t,
    sdo_b, sdo_s, sdo_g, sdo_h,
    sl_b, sl_s, sl_g, sl_h,
    sd_b, sd_s, sd_g, sd_h,
    sdk_b, sdk_g, sdk_t,
    sdv_b, sdv_g, sdv_t,
    BLOCK_N: gl.constexpr,
    ROWS: gl.constexpr,
    D: gl.constexpr,
    HP: gl.constexpr,
    SLOTS: gl.constexpr,
):
    """dk, dv and the partial dq of one chunk of one key tile's readers (``CHUNKS``/``ENTRIES``/``ORIGIN``/``WS``/
    ``DQP``/``DQP_SCALE``/``DELTA``/``DO_L1_LOG2`` as ``backward.sel_bwd_keymajor_kernel``), where the common walk
    applies (no non-finite q or dO row in the call, the tile's k and v finite); the chunk row copied to
    ``CHUNKS_LEFT``, its tile id -1 where this program walked it (module docstring)."""
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    qk_scale = qk_scale.to(gl.float32)
    scale = scale.to(gl.float32)
    tile_id, e0, e1, slot, b, g, k0 = _chunk_row(CHUNKS, NT, G, BLOCK_N)
    walked = 0
    if tile_id >= 0:
        k_sh, v_sh, log2_kmax, log2_vmax, finite = _key_tile_max(K, V, b, g, k0, T, sk_b, sk_g, sk_t, sv_b, sv_g,
                                                                 sv_t, BLOCK_N, D)
        if (finite != 0) & (gl.load(NONFINITE) == 0):
            _walk(Q, DO, LSE, DELTA, DO_L1_LOG2, DK, DV, DQP, DQP_SCALE, WS, ENTRIES, ORIGIN, k_sh, v_sh, log2_kmax,
                  log2_vmax, e0, e1, slot, b, g, k0, h, T, qk_scale, scale,
                  sq_b, sq_s, sq_g, sq_h, sdo_b, sdo_s, sdo_g, sdo_h, sl_b, sl_s, sl_g, sl_h, sd_b, sd_s, sd_g, sd_h,
                  sdk_b, sdk_g, sdk_t, sdv_b, sdv_g, sdv_t, BLOCK_N, ROWS, D, HP, SLOTS)
            walked = 1
    w = gl.arange(0, 4, layout=one)
    chunk = gl.program_id(0).to(gl.int64) * 4 + w
    words = gl.load(CHUNKS + chunk)
    gl.store(CHUNKS_LEFT + chunk, gl.where((w == 0) & (walked != 0), -1, words))
