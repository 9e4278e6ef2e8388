"""The key-major forward's partial kernel, warp-specialised, in Gluon (Triton >= 3.6, sm_90).

:func:`sel_fwd_keymajor_ws_kernel` computes what ``forward.sel_fwd_keymajor_kernel`` computes, bit for bit
(the same reader list, the same partial slots, the same float16 results and scales, NaN where it has NaN), for
the calls it covers: bf16, Dk = Dv = 128, 64-key tiles, 64 (entry, head) pairs a step.  The planner takes it
where the device and Triton have it (``device.gluon_ws``, ``plan.keymajor.takes_ws``); the launcher checks the
tensors (``launch._rows_for_cp_async``) and otherwise launches the Triton kernel.

Why: the Triton kernel runs at about 55 % of the memory ceiling of its own access pattern on an H200 (two
programs of 4 warps an SM, 254 registers a thread, 0.43 eligible warps a scheduler), because a step's q
gathers, score MMA, softmax, P V MMA and partial stores follow one another in the same warps.  Here they are
split between two partitions of one program:

- the gather partition (the program's 4 warps) copies each step's q rows by ``cp.async`` into one of
  ``SLOTS`` shared-memory slots once the slot is free, and arrives on the slot's ``ready`` barrier;
- the MMA partition (4 warps, ``REGISTERS`` registers a thread) waits for a slot, runs the score MMA
  (``q K^T``), frees the slot (only that MMA reads q), takes the softmax over the tile's keys, runs ``P V``
  and stores the partial result through a row-major layout (16-byte stores).

So the gathers of the next steps run while a step computes.  The key and value tile sit in shared memory for
the whole chunk.  A value tile with a non-finite value takes a walk of its own (the Triton kernel's isolating
step: its values are read as 0 and the columns a pair reads from such a key become NaN), so its extra MMA
costs the common walk no registers.  Offsets of q rows, key rows and partial slots are int64; reader-list
positions are int32 (the launcher checks that the list has fewer than 2^30 entries).

This module imports Triton's Gluon (``triton.experimental.gluon``), which Triton 3.0-3.5 do not have in this
form: only the launcher imports it, and only where ``device.gluon_ws`` says the Triton has it.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import async_copy, fence_async_shared, mbarrier, \
    warpgroup_mma, warpgroup_mma_wait

# Names that moved between releases: a CTA-wide barrier (``thread_barrier`` up to 3.6, ``barrier`` after) and
# the cp.async copy into shared memory (``async_copy_global_to_shared`` up to 3.8, ``async_load`` from 3.9).
_cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier
_async_gather = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared

WARPS = 4  # the gather partition (the program's own warps); the MMA partition has 4 too


@gluon.jit
def _chunk(CHUNKS, NT, G, BLOCK_N: gl.constexpr):
    """This program's reader-list chunk ``(tile, e0, e1, _)``: ``(tile_id, e0, e1, b, g, k0)``; ``tile_id < 0``
    is a padding chunk."""
    chunk = CHUNKS + gl.program_id(0).to(gl.int64) * 4
    tile_id = gl.load(chunk)
    e0 = gl.load(chunk + 1).to(gl.int32)
    e1 = gl.load(chunk + 2).to(gl.int32)
    bg = tile_id // NT
    return tile_id, e0, e1, bg // G, bg % G, (tile_id % NT) * BLOCK_N


@gluon.jit
def _key_tile(K, V, b, g, k0, T, sk_b, sk_g, sk_t, sv_b, sv_g, sv_t, BLOCK_N: gl.constexpr, D: gl.constexpr):
    """The key tile's k and v ``[BLOCK_N, D]`` in shared memory (keys past ``T`` as 0)."""
    tile_sh: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D], gl.bfloat16)
    k, v = _key_value_rows(K, V, b, g, k0, T, sk_b, sk_g, sk_t, sv_b, sv_g, sv_t, BLOCK_N, D)
    return (gl.allocate_shared_memory(gl.bfloat16, [BLOCK_N, D], tile_sh, k),
            gl.allocate_shared_memory(gl.bfloat16, [BLOCK_N, D], tile_sh, v))


@gluon.jit
def _key_value_rows(K, V, b, g, k0, T, sk_b, sk_g, sk_t, sv_b, sv_g, sv_t, BLOCK_N: gl.constexpr, D: gl.constexpr):
    """The key tile's k and v ``[BLOCK_N, D]`` in registers (keys past ``T`` as 0), 16 bytes a thread a load."""
    gather: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])
    offs_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, gather))
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, gather))
    n_ok = (k0 + offs_n) < T
    t_idx = (k0 + offs_n).to(gl.int64)
    kv_m = gl.expand_dims(n_ok, 1) & gl.expand_dims(offs_d < D, 0)
    k = gl.load(K + gl.expand_dims(b * sk_b + g * sk_g + t_idx * sk_t, 1) + gl.expand_dims(offs_d, 0),
                mask=kv_m, other=0.0)
    v = gl.load(V + gl.expand_dims(b * sv_b + g * sv_g + t_idx * sv_t, 1) + gl.expand_dims(offs_d, 0),
                mask=kv_m, other=0.0)
    return k, v


@gluon.jit
def _value_tile(v_sh, vbad_sh, BLOCK_N: gl.constexpr, D: gl.constexpr):
    """Prepare the value tile in ``v_sh`` as the Triton kernel does: its non-finite values set to 0 there and
    marked (1.0) in ``vbad_sh``.  Returns the tile's power of two for the partial results (the Triton kernel's
    ``_partial_exponent`` of its largest finite |v|) and whether any value is not finite."""
    blocked: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])
    v = v_sh.load(blocked)
    a = gl.abs(v.to(gl.float32))
    bad = gl.where(a < float("inf"), 0, 1) > 0  # NaN fails the comparison too
    v_max = gl.max(gl.max(gl.where(bad, 0.0, a), 1), 0)
    any_bad = gl.max(gl.max(bad.to(gl.int32), 1), 0) > 0
    if any_bad:  # only such a tile's walk reads the marks
        v_sh.store(gl.where(bad, 0.0, v).to(v.dtype))
        vbad_sh.store(bad.to(gl.float16))
    e = gl.ceil(gl.log2(v_max)) - 15.0
    e = gl.where(e < 126.0, e, 126.0)
    return gl.where(e > -126.0, e, -126.0), any_bad


@gluon.jit
def _gather(Q, ENTRIES, q_sh, ready, empty, e0, e1, b, g, h, sq_b, sq_s, sq_g, sq_h,
            ROWS: gl.constexpr, D: gl.constexpr, HP: gl.constexpr, SLOTS: gl.constexpr):
    """The gather partition: step ``j``'s q rows by ``cp.async`` into slot ``j % SLOTS`` once the slot is free
    (masked pairs zero-filled); every thread's copies arrive on the slot's ``ready`` barrier."""
    STEP: gl.constexpr = ROWS // HP
    gather: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, gather))
    r = gl.arange(0, ROWS, layout=gl.SliceLayout(1, gather))
    n_steps = gl.cdiv(e1 - e0, STEP)
    for j in range(n_steps):
        s = j % SLOTS
        mbarrier.wait(empty.index(s), ((j // SLOTS) + 1) & 1, pred=j >= SLOTS)
        ent = e0 + j * STEP + r // HP
        head = r % HP
        ok = (ent < e1) & (head < h)
        tok = gl.load(ENTRIES + ent * 2, mask=ok, other=0)
        q_off = b * sq_b + tok.to(gl.int64) * sq_s + g * sq_g + head.to(gl.int64) * sq_h
        m = gl.expand_dims(ok, 1) & gl.expand_dims(offs_d < D, 0)
        _async_gather(q_sh.index(s), Q + gl.expand_dims(q_off, 1) + gl.expand_dims(offs_d, 0), mask=m)
        async_copy.mbarrier_arrive(ready.index(s), increment_count=False)


@gluon.jit
def _compute(k_sh, v_sh, vbad_sh, any_bad, q_sh, ready, empty, OP, OP_SCALE, LP, ENTRIES, ORIGIN, e0, e1, h,
             qk_scale, e_tile, BLOCK_N: gl.constexpr, ROWS: gl.constexpr, D: gl.constexpr, HP: gl.constexpr,
             SLOTS: gl.constexpr):
    """The MMA partition: every step of the chunk (:func:`_walk`), the isolating walk where the value tile has a
    non-finite value."""
    if any_bad:
        _walk(k_sh, v_sh, vbad_sh, q_sh, ready, empty, OP, OP_SCALE, LP, ENTRIES, ORIGIN, e0, e1, h, qk_scale, e_tile,
              BLOCK_N, ROWS, D, HP, SLOTS, True)
    else:
        _walk(k_sh, v_sh, vbad_sh, q_sh, ready, empty, OP, OP_SCALE, LP, ENTRIES, ORIGIN, e0, e1, h, qk_scale, e_tile,
              BLOCK_N, ROWS, D, HP, SLOTS, False)


@gluon.jit
def _walk(k_sh, v_sh, vbad_sh, q_sh, ready, empty, OP, OP_SCALE, LP, ENTRIES, ORIGIN, e0, e1, h, qk_scale, e_tile,
          BLOCK_N: gl.constexpr, ROWS: gl.constexpr, D: gl.constexpr, HP: gl.constexpr, SLOTS: gl.constexpr,
          ISOLATE: gl.constexpr):
    """The steps of the chunk, each the Triton kernel's step on the slot's q rows.  ``ISOLATE``: the value tile
    holds a non-finite value (read as 0 from ``v_sh``, marked in ``vbad_sh``)."""
    STEP: gl.constexpr = ROWS // HP
    mma_s: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                    instr_shape=[16, BLOCK_N, 16])
    mma_o: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    p_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_o, k_width=2)
    out_l: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])  # 8 halves (16 bytes) a thread
    srow: gl.constexpr = gl.SliceLayout(1, mma_s)
    orow: gl.constexpr = gl.SliceLayout(1, out_l)
    n_steps = gl.cdiv(e1 - e0, STEP)
    zero_s = gl.zeros([ROWS, BLOCK_N], gl.float32, mma_s)
    zero_o = gl.zeros([ROWS, D], gl.float32, mma_o)
    offs_n = gl.expand_dims(gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma_s)), 0)
    offs_d = gl.expand_dims(gl.arange(0, D, layout=gl.SliceLayout(0, out_l)), 0)
    r_s = gl.arange(0, ROWS, layout=srow)
    r_o = gl.arange(0, ROWS, layout=orow)
    inv_tile = gl.exp2(-e_tile)
    for j in range(n_steps):
        sl = j % SLOTS
        # the step's key bounds (score rows) and partial slots (output rows), loaded before the wait
        ent_s = e0 + j * STEP + r_s // HP
        bnd = gl.load(ENTRIES + ent_s * 2 + 1, mask=(ent_s < e1) & (r_s % HP < h), other=0)
        ent_o = e0 + j * STEP + r_o // HP
        head_o = r_o % HP
        ok_o = (ent_o < e1) & (head_o < h)
        slot = gl.load(ORIGIN + ent_o, mask=ok_o, other=0) * h + head_o
        # -- scores: q K^T; the slot is free once this MMA has read it --
        mbarrier.wait(ready.index(sl), (j // SLOTS) & 1)
        fence_async_shared()
        s_cur = warpgroup_mma(q_sh.index(sl), k_sh.permute((1, 0)), zero_s, use_acc=False, is_async=True)
        s_cur = warpgroup_mma_wait(0, deps=(s_cur,))
        mbarrier.arrive(empty.index(sl))
        # -- softmax over the pair's keys of the tile (log2 domain) --
        lo = gl.expand_dims(bnd & 0xFFFF, 1)
        hi = gl.expand_dims(bnd >> 16, 1)
        x = gl.where((offs_n >= lo) & (offs_n < hi), s_cur * qk_scale, float("-inf"))
        m = gl.max(x, 1)
        m_safe = gl.where(m == float("-inf"), 0.0, m)
        p = gl.exp2(x - gl.expand_dims(m_safe, 1))
        l = gl.sum(p, 1)
        # -- P V --
        o = warpgroup_mma(gl.convert_layout(p.to(gl.bfloat16), p_op), v_sh, zero_o, use_acc=False, is_async=True)
        o = warpgroup_mma_wait(0, deps=(o,))
        if ISOLATE:  # a pair that reads a non-finite value of the tile gets NaN in that column
            inside = gl.where((offs_n >= lo) & (offs_n < hi), 1.0, 0.0).to(gl.float16)  # recomputed: not kept live
            reads_bad = warpgroup_mma(gl.convert_layout(inside, p_op), vbad_sh, zero_o, use_acc=False, is_async=True)
            reads_bad = warpgroup_mma_wait(0, deps=(reads_bad,))
            o = gl.where(reads_bad > 0.0, float("nan"), o)
        # -- the partial result: float16, divided by the tile's power of two; its scale and log2 LSE --
        empty_row = l == 0.0
        l_safe = gl.where(empty_row, 1.0, l)
        lse2 = gl.convert_layout(gl.where(empty_row, float("-inf"), m_safe + gl.log2(l_safe)), orow)
        f = gl.convert_layout(inv_tile / l_safe, gl.SliceLayout(1, mma_o))
        val = gl.convert_layout((o * gl.expand_dims(f, 1)).to(gl.float16), out_l)
        gl.store(OP + gl.expand_dims(slot * D, 1) + offs_d, val, mask=gl.expand_dims(ok_o, 1))
        gl.store(OP_SCALE + slot, gl.exp2(e_tile) + gl.zeros_like(lse2), mask=ok_o)
        gl.store(LP + slot, lse2, mask=ok_o)


@gluon.jit
def sel_fwd_keymajor_ws_kernel(
    Q, K, V, OP, OP_SCALE, LP, ENTRIES, ORIGIN, CHUNKS,
    G, h, T, NT, qk_scale,
    sq_b, sq_s, sq_g, sq_h,
    sk_b, sk_g, sk_t,
    sv_b, sv_g, sv_t,
    BLOCK_N: gl.constexpr, ROWS: gl.constexpr, D: gl.constexpr, HP: gl.constexpr, SLOTS: gl.constexpr,
    REGISTERS: gl.constexpr,
):
    """Partial selection attention of one chunk of one key tile's readers, warp-specialised (see the module
    docstring).  Arguments as ``sel_fwd_keymajor_kernel``'s (unit last strides, ``D = Dk = Dv``); ``SLOTS``
    q slots in shared memory, ``REGISTERS`` a thread of the MMA partition."""
    gl.static_assert(SLOTS >= 2, "the gather partition needs a slot besides the one being read")
    rows_sh: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, D], gl.bfloat16)
    tile_id, e0, e1, b, g, k0 = _chunk(CHUNKS, NT, G, BLOCK_N)
    if tile_id >= 0:
        k_sh, v_sh = _key_tile(K, V, b, g, k0, T, sk_b, sk_g, sk_t, sv_b, sv_g, sv_t, BLOCK_N, D)
        vbad_sh = gl.allocate_shared_memory(gl.float16, [BLOCK_N, D],
                                            gl.NVMMASharedLayout.get_default_for([BLOCK_N, D], gl.float16))
        e_tile, any_bad = _value_tile(v_sh, vbad_sh, BLOCK_N, D)
        _cta_barrier()
        q_sh = gl.allocate_shared_memory(gl.bfloat16, [SLOTS, ROWS, D], rows_sh)
        ready = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
        for j in gl.static_range(SLOTS):
            mbarrier.init(ready.index(j), count=128)  # every thread of the gather partition arrives
            mbarrier.init(empty.index(j), count=1)
        fence_async_shared()
        gl.warp_specialize(
            [(_gather, (Q, ENTRIES, q_sh, ready, empty, e0, e1, b, g, h, sq_b, sq_s, sq_g, sq_h, ROWS, D, HP,
                        SLOTS)),
             (_compute, (k_sh, v_sh, vbad_sh, any_bad, q_sh, ready, empty, OP, OP_SCALE, LP, ENTRIES, ORIGIN,
                         e0, e1, h, qk_scale, e_tile, BLOCK_N, ROWS, D, HP, SLOTS))],
            [4], [REGISTERS])
