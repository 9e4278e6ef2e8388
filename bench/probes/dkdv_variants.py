"""Loop variants of the dk/dv kernel, timed against the shipped kernel and the gather-copy ceiling on one GPU.

    python -m bench.probes.dkdv_variants [--T 8192,32768,65536] [--sel random,local] [--only NAMES] [--json out.json]
    python -m bench.probes.dkdv_variants --aot [--only NAMES] [--python OTHER_VENV_PYTHON]   # no GPU

``sel_bwd_dkdv_kernel`` walks a key tile's (entry, head) pairs ``ROWS`` at a time; each step gathers the q and
dO rows of its pairs, then runs four small MMAs.  At 255 registers a program (two per SM) nothing but its own
pipelining hides the latency of that chain.  The variant kernel here keeps the kernel's arithmetic (``ORDER 2``
also its sums, bit for bit, on the GPUs measured) and changes how the walk is fed and ordered (``shipped-walk``:
the flat walk with a division by h and the entries loaded in their own step, which the kernel had until
``hp-pf1-s3`` measured best and became it; the shipped kernel also carries the isolating walk, chosen on the
device):

- ``HP > 0``: pairs are laid out ``[ROWS // HP entries, HP heads]`` (``HP`` = next power of two of h, a
  constexpr), so a pair's entry and head are a shift and a mask instead of a division by the runtime h;
- ``PREFETCH = 1``: the next step's entries are loaded during this step (loop-carried), so the gather's
  addresses never wait on a load of the same step and the pipeliner can start it a step ahead;
- ``PREFETCH = 2``: as 1, entries two steps ahead, and the next step's q/dO rows gathered into registers
  during this step (a manual double buffer, independent of the pipeliner);
- ``PREFETCH = 3`` (``mma-only-*``: a measurement, its gradients are not the kernel's): step 0's rows folded in
  at every step, no gather in the loop, so the time is the MMA chain, the softmax and the loop alone;
- ``ORDER = 1``: both score MMAs (``K q^T``, ``V dO^T``) written before either result is used (Triton 3.6 still
  waits for each right after it on sm_90: the gain is in instruction scheduling);
- ``ORDER = 2``: query-major scores (pairs as the MMA's rows, ``q K^T``), P and dS transposed into the dv and dk
  MMAs;
- ``PREFETCH = 5`` (the scalar feed): a step's ``ROWS // HP`` entries loaded as scalars (not once per pair and
  layout), each pair's row offsets chosen from the entries' (int32), LSE and delta read from one interleaved
  float32 array (the probe builds it; the dq kernel, which writes delta, could write both);
- ``LEAN``: bit 8, a chunk whose entries all read the whole tile walks without the key mask (checked once per
  chunk before the walk: a second copy of the walk); bit 2, int32 row offsets (every gathered tensor under 2^31 elements); bit 4, no column mask (Dk and
  Dv powers of two);
- ``SPLIT``: dv and dk in two programs of a chunk (grid ``(chunks, 2)``), one accumulator each, so a program
  holds fewer registers and more programs share an SM; the rows are gathered twice.

Every variant's dk and dv are compared with the shipped kernel's on the same reader list before it is timed
(``bitwise``; ``mma-only`` rows are never equal).  ``--aot`` compiles the variants for sm_90 the way a launch on
contiguous tensors specialises them and prints registers, spills, shared memory, the MMA kind, the ``cp.async``
copies and the instructions in the walk's loop (SASS).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[2]


@triton.jit
def _pairs(p0, p_hi, r, h, HP: tl.constexpr):
    """(entry, head, ok) of the step starting at position ``p0``: an entry index with ``HP`` heads each, or a
    flat pair index ``entry * h + head``."""
    if HP > 0:
        ent = p0 + r // HP
        head = r % HP
        ok = (ent < p_hi) & (head < h)
    else:
        f = p0 + r
        ok = f < p_hi
        ent = f // h
        head = f % h
    return ent, head, ok


@triton.jit
def _rows(Q, DO, LSE, DELTA, tok, head, ok, b, g, S, G, h, Dk, Dv,
          sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d, sl_b, sl_s, sl_g, sl_h,
          DK1: tl.constexpr, BLOCK_DV: tl.constexpr, LEAN: tl.constexpr):
    """The step's q, dO rows, log2 LSE and delta.  ``LEAN & 2``: int32 row offsets (every tensor under 2^31
    elements); ``LEAN & 4``: no column mask (``Dk == DK1``, ``Dv == BLOCK_DV``)."""
    if (LEAN & 2) != 0:
        rt = tok
        rh = head
    else:
        rt = tok.to(tl.int64)
        rh = head.to(tl.int64)
    q_off = b * sq_b + rt * sq_s + g * sq_g + rh * sq_h
    do_off = b * sdo_b + rt * sdo_s + g * sdo_g + rh * sdo_h
    l_off = b * sl_b + rt * sl_s + g * sl_g + rh * sl_h
    offs_k = tl.arange(0, DK1)
    offs_v = tl.arange(0, BLOCK_DV)
    if (LEAN & 4) != 0:
        q1 = tl.load(Q + q_off[:, None] + offs_k[None, :] * sq_d, mask=ok[:, None], other=0.0)
        do = tl.load(DO + do_off[:, None] + offs_v[None, :] * sdo_d, mask=ok[:, None], other=0.0)
    else:
        q1 = tl.load(Q + q_off[:, None] + offs_k[None, :] * sq_d, mask=ok[:, None] & (offs_k[None, :] < Dk),
                     other=0.0)
        do = tl.load(DO + do_off[:, None] + offs_v[None, :] * sdo_d, mask=ok[:, None] & (offs_v[None, :] < Dv),
                     other=0.0)
    lse2 = tl.load(LSE + l_off, mask=ok, other=0.0) * 1.4426950408889634
    delta = tl.load(DELTA + ((b * S + rt) * G + g) * h + rh, mask=ok, other=0.0)
    return q1, do, lse2, delta


@triton.jit
def _entry_bases(ENTRIES, p0, p_hi, r_ent, b, g, S, G, h, sq_b, sq_s, sq_g, sdo_b, sdo_s, sdo_g,
                 STEP: tl.constexpr):
    """The scalar feed (``PREFETCH = 5``): per pair of the step starting at entry ``p0`` (``STEP`` entries of
    ``HP`` heads), the int32 q and dO row offsets without the head's, the (log2 LSE, delta) pair index without
    the head, and the key bounds, from one scalar load per entry field instead of one load per pair and layout."""
    qb = tl.zeros_like(r_ent)
    dob = tl.zeros_like(r_ent)
    pb = tl.zeros_like(r_ent)
    bnd = tl.zeros_like(r_ent)
    bi = b.to(tl.int32)
    gi = g.to(tl.int32)
    for j in tl.static_range(STEP):
        live = p0 + j < p_hi
        t = tl.load(ENTRIES + (p0 + j) * 2, mask=live, other=0)
        bj = tl.load(ENTRIES + (p0 + j) * 2 + 1, mask=live, other=0)
        sel = r_ent == j
        qb = tl.where(sel, bi * sq_b + t * sq_s + gi * sq_g, qb)
        dob = tl.where(sel, bi * sdo_b + t * sdo_s + gi * sdo_g, dob)
        pb = tl.where(sel, ((bi * S + t) * G + gi) * h, pb)
        bnd = tl.where(sel, bj, bnd)
    return qb, dob, pb, bnd


@triton.jit
def _rows_fed(Q, DO, LD, qb, dob, pb, head, ok, sq_h, sq_d, sdo_h, sdo_d,
              DK1: tl.constexpr, BLOCK_DV: tl.constexpr):
    """The step's rows from the scalar feed's bases: q, dO (no column mask) and (log2 LSE, delta) from the
    interleaved float32 pairs ``LD`` (one address for both)."""
    offs_k = tl.arange(0, DK1)
    offs_v = tl.arange(0, BLOCK_DV)
    q1 = tl.load(Q + (qb + head * sq_h)[:, None] + offs_k[None, :] * sq_d, mask=ok[:, None], other=0.0)
    do = tl.load(DO + (dob + head * sdo_h)[:, None] + offs_v[None, :] * sdo_d, mask=ok[:, None], other=0.0)
    pair = (pb + head) * 2
    lse2 = tl.load(LD + pair, mask=ok, other=0.0)
    delta = tl.load(LD + pair + 1, mask=ok, other=0.0)
    return q1, do, lse2, delta


@triton.jit
def _step(k1, v, q1, do, lse2, delta, bnd, offs_n, qk_scale, dk1, dv_acc, PART: tl.constexpr,
          ORDER: tl.constexpr, LEAN: tl.constexpr):
    """Fold one step's pairs into ``dk1``/``dv_acc``; ``PART``: 0 dk and dv, 1 dv only (two MMAs), 2 dk only
    (three); ``ORDER`` as in the module's docstring."""
    lo = bnd & 0xFFFF
    hi = bnd >> 16
    if ORDER == 2:
        # query-major scores: pairs are rows (M = ROWS), keys columns; P and dS transposed into the dv/dk MMAs
        s = tl.dot(q1, tl.trans(k1))
        inside_q = (offs_n[None, :] >= lo[:, None]) & (offs_n[None, :] < hi[:, None])
        p = tl.where(inside_q, tl.exp2(tl.minimum(s * qk_scale - lse2[:, None], 0.0)), 0.0)
        if PART != 2:
            dv_acc += tl.dot(tl.trans(p.to(do.dtype)), do)
        if PART != 1:
            dp = tl.dot(do, tl.trans(v))
            ds = tl.where(inside_q, p * (dp - delta[:, None]), 0.0).to(q1.dtype)
            dk1 += tl.dot(tl.trans(ds), q1)
        return dk1, dv_acc
    st = tl.dot(k1, tl.trans(q1))
    if ORDER == 1:
        if PART != 1:
            dpt0 = tl.dot(v, tl.trans(do))
    if (LEAN & 16) != 0:
        # every pair of the chunk reads the whole tile: no key mask (a padding pair's q and dO rows are 0, so its
        # P^T of 1 and its dS^T of 0 add nothing)
        pt = tl.exp2(tl.minimum(st * qk_scale - lse2[None, :], 0.0))
    else:
        inside = (offs_n[:, None] >= lo[None, :]) & (offs_n[:, None] < hi[None, :])
        pt = tl.where(inside, tl.exp2(tl.minimum(st * qk_scale - lse2[None, :], 0.0)), 0.0)
    if PART != 2:
        dv_acc += tl.dot(pt.to(do.dtype), do)
    if PART != 1:
        if ORDER == 1:
            dpt = dpt0
        else:
            dpt = tl.dot(v, tl.trans(do))
        if (LEAN & 16) != 0:
            dst = (pt * (dpt - delta[None, :])).to(q1.dtype)
        else:
            dst = tl.where(inside, pt * (dpt - delta[None, :]), 0.0).to(q1.dtype)
        dk1 += tl.dot(dst, q1)
    return dk1, dv_acc


@triton.jit
def _chunk_whole(ENTRIES, e0, e1, BLOCK_N: tl.constexpr):
    """Whether every entry of ``[e0, e1)`` reads the whole tile (bounds ``0 | BLOCK_N << 16``): one pass over the
    chunk's key bounds before the walk, so the walk's loop carries no branch (a branch in it stops Triton 3.6's
    pipelining)."""
    whole = 1
    for e in range(e0, e1, 256):
        offs = e + tl.arange(0, 256)
        bnd = tl.load(ENTRIES + offs * 2 + 1, mask=offs < e1, other=BLOCK_N << 16)
        whole = tl.minimum(whole, tl.min((bnd == (BLOCK_N << 16)).to(tl.int32), 0))
    return whole > 0


@triton.jit
def dkdv_variant_kernel(
    Q, K, V, DO, LSE, DELTA, DK, DV, WS, ENTRIES, CHUNKS,
    S, G, h, Dk, Dv, T, NT, qk_scale, scale,
    sq_b, sq_s, sq_g, sq_h, sq_d,
    sk_b, sk_g, sk_t, sk_d,
    sv_b, sv_g, sv_t, sv_d,
    sdo_b, sdo_s, sdo_g, sdo_h, sdo_d,
    sl_b, sl_s, sl_g, sl_h,
    BLOCK_N: tl.constexpr, ROWS: tl.constexpr, DK1: tl.constexpr, BLOCK_DV: tl.constexpr,
    HP: tl.constexpr, PREFETCH: tl.constexpr, STEP: tl.constexpr, SPLIT: tl.constexpr, ORDER: tl.constexpr,
    LEAN: tl.constexpr,
):
    """The shipped dk/dv kernel's common walk (Dk a power of two, no non-finite isolation) with the feeds above.
    ``SPLIT``: dv and dk in two programs of a chunk (grid ``(chunks, 2)``), each with one accumulator: fewer
    registers a program, the chunk's rows gathered twice."""
    pid = tl.program_id(0)
    chunk = CHUNKS + pid.to(tl.int64) * 4
    tile_id = tl.load(chunk)
    if tile_id < 0:
        return
    e0 = tl.load(chunk + 1)
    e1 = tl.load(chunk + 2)
    slot = tl.load(chunk + 3)
    bg = tile_id // NT
    b = bg // G
    g = bg % G
    k0 = (tile_id % NT) * BLOCK_N
    offs_n = tl.arange(0, BLOCK_N)
    n_ok = (k0 + offs_n) < T
    offs_d1 = tl.arange(0, DK1)
    offs_dv = tl.arange(0, BLOCK_DV)
    k_off = b * sk_b + g * sk_g + (k0 + offs_n).to(tl.int64) * sk_t
    v_off = b * sv_b + g * sv_g + (k0 + offs_n).to(tl.int64) * sv_t
    k1 = tl.load(K + k_off[:, None] + offs_d1[None, :] * sk_d, mask=n_ok[:, None] & (offs_d1[None, :] < Dk), other=0.0)
    v = tl.load(V + v_off[:, None] + offs_dv[None, :] * sv_d, mask=n_ok[:, None] & (offs_dv[None, :] < Dv), other=0.0)
    dk1 = tl.zeros((BLOCK_N, DK1), tl.float32)
    dv_acc = tl.zeros((BLOCK_N, BLOCK_DV), tl.float32)
    if SPLIT:
        if tl.program_id(1) == 0:
            _walk(Q, K, V, DO, LSE, DELTA, DK, DV, WS, ENTRIES, S, G, h, Dk, Dv, T, qk_scale, scale,
                  sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d, sl_b, sl_s, sl_g, sl_h,
                  e0, e1, slot, bg, b, g, k0, k1, v, dk1, dv_acc, BLOCK_N, ROWS, DK1, BLOCK_DV, HP, PREFETCH, STEP,
                  1, ORDER, LEAN)
        else:
            _walk(Q, K, V, DO, LSE, DELTA, DK, DV, WS, ENTRIES, S, G, h, Dk, Dv, T, qk_scale, scale,
                  sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d, sl_b, sl_s, sl_g, sl_h,
                  e0, e1, slot, bg, b, g, k0, k1, v, dk1, dv_acc, BLOCK_N, ROWS, DK1, BLOCK_DV, HP, PREFETCH, STEP,
                  2, ORDER, LEAN)
    elif (LEAN & 8) != 0 and _chunk_whole(ENTRIES, e0, e1, BLOCK_N):
        _walk(Q, K, V, DO, LSE, DELTA, DK, DV, WS, ENTRIES, S, G, h, Dk, Dv, T, qk_scale, scale,
              sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d, sl_b, sl_s, sl_g, sl_h,
              e0, e1, slot, bg, b, g, k0, k1, v, dk1, dv_acc, BLOCK_N, ROWS, DK1, BLOCK_DV, HP, PREFETCH, STEP,
              0, ORDER, LEAN | 16)
    else:
        _walk(Q, K, V, DO, LSE, DELTA, DK, DV, WS, ENTRIES, S, G, h, Dk, Dv, T, qk_scale, scale,
              sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d, sl_b, sl_s, sl_g, sl_h,
              e0, e1, slot, bg, b, g, k0, k1, v, dk1, dv_acc, BLOCK_N, ROWS, DK1, BLOCK_DV, HP, PREFETCH, STEP,
              0, ORDER, LEAN)


@triton.jit
def _walk(Q, K, V, DO, LSE, DELTA, DK, DV, WS, ENTRIES, S, G, h, Dk, Dv, T, qk_scale, scale,
          sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d, sl_b, sl_s, sl_g, sl_h,
          e0, e1, slot, bg, b, g, k0, k1, v, dk1, dv_acc,
          BLOCK_N: tl.constexpr, ROWS: tl.constexpr, DK1: tl.constexpr, BLOCK_DV: tl.constexpr,
          HP: tl.constexpr, PREFETCH: tl.constexpr, STEP: tl.constexpr, PART: tl.constexpr,
          ORDER: tl.constexpr, LEAN: tl.constexpr):
    """A chunk's walk and store, for ``PART`` (``_step``)."""
    offs_n = tl.arange(0, BLOCK_N)
    n_ok = (k0 + offs_n) < T
    offs_d1 = tl.arange(0, DK1)
    offs_dv = tl.arange(0, BLOCK_DV)
    r = tl.arange(0, ROWS)
    if HP > 0:
        p_lo = e0
        p_hi = e1
    else:
        p_lo = e0 * h
        p_hi = e1 * h
    if PREFETCH == 0:
        for p0 in range(p_lo, p_hi, STEP):
            ent, head, ok = _pairs(p0, p_hi, r, h, HP)
            tok = tl.load(ENTRIES + ent * 2, mask=ok, other=0)
            bnd = tl.load(ENTRIES + ent * 2 + 1, mask=ok, other=0)
            q1, do, lse2, delta = _rows(Q, DO, LSE, DELTA, tok, head, ok, b, g, S, G, h, Dk, Dv,
                                        sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d,
                                        sl_b, sl_s, sl_g, sl_h, DK1, BLOCK_DV, LEAN)
            dk1, dv_acc = _step(k1, v, q1, do, lse2, delta, bnd, offs_n, qk_scale, dk1, dv_acc, PART, ORDER, LEAN)
    elif PREFETCH == 1:
        ent, head, ok = _pairs(p_lo, p_hi, r, h, HP)
        tok = tl.load(ENTRIES + ent * 2, mask=ok, other=0)
        bnd = tl.load(ENTRIES + ent * 2 + 1, mask=ok, other=0)
        for p0 in range(p_lo, p_hi, STEP):
            q1, do, lse2, delta = _rows(Q, DO, LSE, DELTA, tok, head, ok, b, g, S, G, h, Dk, Dv,
                                        sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d,
                                        sl_b, sl_s, sl_g, sl_h, DK1, BLOCK_DV, LEAN)
            ent_n, head_n, ok_n = _pairs(p0 + STEP, p_hi, r, h, HP)
            tok_n = tl.load(ENTRIES + ent_n * 2, mask=ok_n, other=0)
            bnd_n = tl.load(ENTRIES + ent_n * 2 + 1, mask=ok_n, other=0)
            dk1, dv_acc = _step(k1, v, q1, do, lse2, delta, bnd, offs_n, qk_scale, dk1, dv_acc, PART, ORDER, LEAN)
            tok = tok_n
            bnd = bnd_n
            head = head_n
            ok = ok_n
    elif PREFETCH == 5:
        # the scalar feed: entries as scalars, bases chosen per pair, (LSE, delta) interleaved (LSE is LD here)
        r_ent = r // HP
        head = r % HP
        qb, dob, pb, bnd = _entry_bases(ENTRIES, p_lo, p_hi, r_ent, b, g, S, G, h, sq_b, sq_s, sq_g,
                                        sdo_b, sdo_s, sdo_g, STEP)
        ok = (p_lo + r_ent < p_hi) & (head < h)
        for p0 in range(p_lo, p_hi, STEP):
            q1, do, lse2, delta = _rows_fed(Q, DO, LSE, qb, dob, pb, head, ok, sq_h, sq_d, sdo_h, sdo_d,
                                            DK1, BLOCK_DV)
            qb_n, dob_n, pb_n, bnd_n = _entry_bases(ENTRIES, p0 + STEP, p_hi, r_ent, b, g, S, G, h, sq_b, sq_s,
                                                    sq_g, sdo_b, sdo_s, sdo_g, STEP)
            ok_n = (p0 + STEP + r_ent < p_hi) & (head < h)
            dk1, dv_acc = _step(k1, v, q1, do, lse2, delta, bnd, offs_n, qk_scale, dk1, dv_acc, PART, ORDER, LEAN)
            qb = qb_n
            dob = dob_n
            pb = pb_n
            bnd = bnd_n
            ok = ok_n
    elif PREFETCH == 3:
        # the MMA chain alone: step 0's rows gathered once and folded in at every step (each step still loads
        # its entries' key bounds), so the time is the MMAs, the softmax and the loop without the gathers
        ent, head, ok = _pairs(p_lo, p_hi, r, h, HP)
        tok = tl.load(ENTRIES + ent * 2, mask=ok, other=0)
        q1, do, lse2, delta = _rows(Q, DO, LSE, DELTA, tok, head, ok, b, g, S, G, h, Dk, Dv,
                                    sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d,
                                    sl_b, sl_s, sl_g, sl_h, DK1, BLOCK_DV, LEAN)
        for p0 in range(p_lo, p_hi, STEP):
            ent, head, ok = _pairs(p0, p_hi, r, h, HP)
            bnd = tl.load(ENTRIES + ent * 2 + 1, mask=ok, other=0)
            dk1, dv_acc = _step(k1, v, q1, do, lse2, delta, bnd, offs_n, qk_scale, dk1, dv_acc, PART, ORDER, LEAN)
    else:
        # step 0's rows and step 1's entries before the loop; each step gathers the next step's rows and loads
        # the entries of the step after that before it computes its own.
        ent, head, ok = _pairs(p_lo, p_hi, r, h, HP)
        tok = tl.load(ENTRIES + ent * 2, mask=ok, other=0)
        bnd = tl.load(ENTRIES + ent * 2 + 1, mask=ok, other=0)
        q1, do, lse2, delta = _rows(Q, DO, LSE, DELTA, tok, head, ok, b, g, S, G, h, Dk, Dv,
                                    sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d,
                                    sl_b, sl_s, sl_g, sl_h, DK1, BLOCK_DV, LEAN)
        ent_n, head_n, ok_n = _pairs(p_lo + STEP, p_hi, r, h, HP)
        tok_n = tl.load(ENTRIES + ent_n * 2, mask=ok_n, other=0)
        bnd_n = tl.load(ENTRIES + ent_n * 2 + 1, mask=ok_n, other=0)
        for p0 in range(p_lo, p_hi, STEP):
            q1_n, do_n, lse2_n, delta_n = _rows(Q, DO, LSE, DELTA, tok_n, head_n, ok_n, b, g, S, G, h, Dk, Dv,
                                                sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d,
                                                sl_b, sl_s, sl_g, sl_h, DK1, BLOCK_DV, LEAN)
            ent_2, head_2, ok_2 = _pairs(p0 + 2 * STEP, p_hi, r, h, HP)
            tok_2 = tl.load(ENTRIES + ent_2 * 2, mask=ok_2, other=0)
            bnd_2 = tl.load(ENTRIES + ent_2 * 2 + 1, mask=ok_2, other=0)
            dk1, dv_acc = _step(k1, v, q1, do, lse2, delta, bnd, offs_n, qk_scale, dk1, dv_acc, PART, ORDER, LEAN)
            q1 = q1_n
            do = do_n
            lse2 = lse2_n
            delta = delta_n
            bnd = bnd_n
            tok_n = tok_2
            bnd_n = bnd_2
            head_n = head_2
            ok_n = ok_2
    if slot < 0:
        t_idx = bg * T + k0 + offs_n
        if PART != 1:
            tl.store(DK + t_idx[:, None] * Dk + offs_d1[None, :], (dk1 * scale).to(DK.dtype.element_ty),
                     mask=n_ok[:, None] & (offs_d1[None, :] < Dk))
        if PART != 2:
            tl.store(DV + t_idx[:, None] * Dv + offs_dv[None, :], dv_acc.to(DV.dtype.element_ty),
                     mask=n_ok[:, None] & (offs_dv[None, :] < Dv))
    else:
        width = DK1 + BLOCK_DV
        ws = WS + slot * (BLOCK_N * width) + offs_n[:, None] * width
        if PART != 1:
            tl.store(ws + offs_d1[None, :], dk1 * scale)
        if PART != 2:
            tl.store(ws + DK1 + offs_dv[None, :], dv_acc)


# (name, HP from h?, PREFETCH, ROWS, warps, stages, SPLIT, ORDER)
VARIANTS = [
    ("shipped-walk", False, 0, 32, 4, 2, False, 0),
    ("hp", True, 0, 32, 4, 2, False, 0),
    ("hp-pf1", True, 1, 32, 4, 2, False, 0),
    ("hp-pf1-s3", True, 1, 32, 4, 3, False, 0),
    ("hp-pf2", True, 2, 32, 4, 2, False, 0),
    ("hp-pf2-s1", True, 2, 32, 4, 1, False, 0),
    ("hp-r16", True, 0, 16, 4, 2, False, 0),
    ("hp-r16-s3", True, 0, 16, 4, 3, False, 0),
    ("hp-r16-s4", True, 0, 16, 4, 4, False, 0),
    ("hp-pf1-r16", True, 1, 16, 4, 2, False, 0),
    ("hp-pf1-r16-s3", True, 1, 16, 4, 3, False, 0),
    ("hp-pf1-r16-s4", True, 1, 16, 4, 4, False, 0),
    ("hp-pf2-r16", True, 2, 16, 4, 2, False, 0),
    ("hp-pf2-r16-s1", True, 2, 16, 4, 1, False, 0),
    ("hp-r64", True, 0, 64, 4, 2, False, 0),
    ("hp-pf1-r64", True, 1, 64, 4, 2, False, 0),
    ("hp-pf1-s3-split", True, 1, 32, 4, 3, True, 0),
    ("hp-pf1-s2-split", True, 1, 32, 4, 2, True, 0),
    ("hp-pf1-r64-s3-split", True, 1, 64, 4, 3, True, 0),
    ("hp-pf1-r64-s3-split-w8", True, 1, 64, 8, 3, True, 0),
    ("hp-pf1-r16-s4-split", True, 1, 16, 4, 4, True, 0),
    ("hp-pf1-s3-o1", True, 1, 32, 4, 3, False, 1),
    ("hp-pf1-s4-o1", True, 1, 32, 4, 4, False, 1),
    ("hp-pf1-s3-w8", True, 1, 32, 8, 3, False, 0),
    ("hp-pf1-s3-w8-o1", True, 1, 32, 8, 3, False, 1),
    ("hp-pf1-s4-w8", True, 1, 32, 8, 4, False, 0),
    ("hp-pf1-r64-s2-w8", True, 1, 64, 8, 2, False, 0),
    ("hp-pf1-r64-s3-w8", True, 1, 64, 8, 3, False, 0),
    ("hp-pf1-r64-s3-w8-o1", True, 1, 64, 8, 3, False, 1),
    ("hp-pf1-s3-split-o1", True, 1, 32, 4, 3, True, 1),
    ("hp-pf1-r64-s3-split-w8-o1", True, 1, 64, 8, 3, True, 1),
    # no gathers in the loop (PREFETCH 3): the MMA chain's own time, not a result (never bitwise)
    ("mma-only-s3", True, 3, 32, 4, 3, False, 0),
    ("mma-only-s3-o1", True, 3, 32, 4, 3, False, 1),
    ("mma-only-s1-o1", True, 3, 32, 4, 1, False, 1),
    ("mma-only-s3-w8", True, 3, 32, 8, 3, False, 0),
    ("mma-only-r64-s3-w8", True, 3, 64, 8, 3, False, 0),
    ("hp-pf1-s2-w8", True, 1, 32, 8, 2, False, 0),
    ("hp-pf1-r64-s4-w8", True, 1, 64, 8, 4, False, 0),
    ("hp-pf1-r16-s4-w8", True, 1, 16, 8, 4, False, 0),
    # ORDER 2: query-major scores (M = pairs), so the score MMAs reduce over Dk with N = 64 keys
    ("qm-s3", True, 1, 32, 4, 3, False, 2),
    ("qm-s2", True, 1, 32, 4, 2, False, 2),
    ("qm-r64-s2", True, 1, 64, 4, 2, False, 2),
    ("qm-r64-s3", True, 1, 64, 4, 3, False, 2),
    ("qm-r64-s2-w8", True, 1, 64, 8, 2, False, 2),
    ("qm-r64-s3-w8", True, 1, 64, 8, 3, False, 2),
    ("qm-r128-s2-w8", True, 1, 128, 8, 2, False, 2),
    ("mma-only-qm-r64-s2", True, 3, 64, 4, 2, False, 2),
    ("mma-only-qm-r64-s2-w8", True, 3, 64, 8, 2, False, 2),
    # LEAN bits: 2 int32 row offsets (every gathered tensor under 2^31 elements), 4 no column mask (Dk == DK1,
    # Dv == BLOCK_DV).  (A third, skipping the key mask on steps whose pairs all read the whole tile, is a branch
    # around the MMAs inside the loop: Triton 3.6 then pipelines nothing, --aot shows no cp.async.)
    ("lean2-s3", True, 1, 32, 4, 3, False, 0, 2),
    ("lean4-s3", True, 1, 32, 4, 3, False, 0, 4),
    ("lean6-s3", True, 1, 32, 4, 3, False, 0, 6),
    ("lean6-s3-o1", True, 1, 32, 4, 3, False, 1, 6),
    ("lean6-s4-o1", True, 1, 32, 4, 4, False, 1, 6),
    ("lean6-s2-o1", True, 1, 32, 4, 2, False, 1, 6),
    ("mma-only-lean6-s3-o1", True, 3, 32, 4, 3, False, 1, 6),
    # PREFETCH 5: the scalar feed (int32 offsets, no column mask, LSE and delta interleaved)
    ("feed-s3", True, 5, 32, 4, 3, False, 0, 6),
    ("feed-s3-o1", True, 5, 32, 4, 3, False, 1, 6),
    ("feed-s4-o1", True, 5, 32, 4, 4, False, 1, 6),
    ("feed-s2-o1", True, 5, 32, 4, 2, False, 1, 6),
    # LEAN bit 8: a chunk whose entries all read the whole tile walks without the key mask (chosen once per chunk,
    # before the loop; the second walk takes its own shared memory).  A step's own check, a branch around the
    # softmax alone inside the loop, makes Triton 3.6's pipeliner fail (TritonGPUPipeline: PassManager::run failed).
    ("hp-pf1-s3-w", True, 1, 32, 4, 3, False, 0, 8),
    ("lean14-s3-o1", True, 1, 32, 4, 3, False, 1, 14),
    ("feed-s4-o1-w", True, 5, 32, 4, 4, False, 1, 14),
    ("feed-s3-o1-w", True, 5, 32, 4, 3, False, 1, 14),
    ("feed-s2-o1-w", True, 5, 32, 4, 2, False, 1, 14),
    ("lean14-s2-o1", True, 1, 32, 4, 2, False, 1, 14),
]

def chosen(names: list[str]) -> list[tuple]:
    """The variants named (in the order named; an unknown name is an error), or all of them."""
    by_name = {v[0]: tuple(v) + (0,) * (9 - len(v)) for v in VARIANTS}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}; known: {', '.join(by_name)}")
    return [by_name[n] for n in names] if names else list(by_name.values())


KERNEL_TYPES = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "DO": "*bf16", "LSE": "*fp32", "DELTA": "*fp32",
                "DK": "*bf16", "DV": "*bf16", "WS": "*fp32", "ENTRIES": "*i32", "CHUNKS": "*i64",
                "qk_scale": "fp32", "scale": "fp32"}
ONES = ("sq_d", "sk_d", "sv_d", "sdo_d", "sl_h")
DIV16 = ("Dk", "Dv", "sq_b", "sq_s", "sq_g", "sq_h", "sk_b", "sk_g", "sk_t", "sv_b", "sv_g", "sv_t",
         "sdo_b", "sdo_s", "sdo_g", "sdo_h", "sdo_d", "sl_b", "sl_s")

def sass_loop_instructions(cubin: bytes):
    """The SASS instructions of a cubin's longest loop (the walk), from Triton's own dump (cuobjdump + nvdisasm);
    None where the tools are missing or no backward branch is found."""
    import re

    try:
        from triton.tools.disasm import get_sass

        lines = get_sass(cubin).splitlines()
    except Exception:
        return None
    label = {m.group(1): i for i, l in enumerate(lines) if (m := re.match(r"\s*(\w+):\s*$", l))}
    spans = [(label[m.group(1)], i) for i, l in enumerate(lines)
             if (m := re.search(r"\bBRA\s+`?\(?\.?(\w+)", l)) and label.get(m.group(1), i + 1) < i]
    if not spans:
        return None
    a, b = max(spans, key=lambda x: x[1] - x[0])
    return sum(1 for l in lines[a:b + 1] if re.search(r"\t(?:@!?U?P\w+\s+)?[A-Z][A-Z0-9_.]*", l))


AOT_CHILD = r'''
import json, sys
from nsa_triton_sel.compat.smoke import aot
name, hp, pf, rows, warps, stages, split, order, lean, types, ones, div16, arch = json.loads(sys.argv[1])
triton, ASTSource, GPUTarget, family = aot.triton_api()
fn = aot._load_kernel("bench.probes.dkdv_variants:dkdv_variant_kernel")
ce = {"BLOCK_N": 64, "ROWS": rows, "DK1": 128, "BLOCK_DV": 128, "HP": 16 if hp else 0, "PREFETCH": pf,
      "STEP": rows // 16 if hp else rows, "SPLIT": split, "ORDER": order, "LEAN": lean}
sig = {n: types.get(n, "i32") for n in fn.arg_names if n not in ce}
for n in ones:
    sig.pop(n)
    ce[n] = 1
aligned = [n for n, t in sig.items() if t.startswith("*") or n in div16]
src = aot.make_source(ASTSource, family, fn, sig, ce, aligned=aligned)
c = triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": warps, "num_stages": stages})
met = aot.collect_metrics(c)
ttgir = c.asm["ttgir"]
from bench.probes.dkdv_variants import sass_loop_instructions
loop = sass_loop_instructions(c.asm["cubin"])
print(json.dumps({"name": name, **{k: met.get(k) for k in ("registers", "spills", "shared", "mma")},
                  "async_copies": ttgir.count("async_copy_global_to_local"), "loop_instructions": loop}))
'''


def aot_report(python: str, names: list[str], arch: int = 90) -> int:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    env.pop("TRITON_INTERPRET", None)
    for name, hp, pf, rows, warps, stages, split, order, lean in chosen(names):
        job = json.dumps([name, hp, pf, rows, warps, stages, split, order, lean, KERNEL_TYPES, ONES, DIV16, arch])
        res = subprocess.run([python, "-c", AOT_CHILD, job], capture_output=True, text=True, env=env)
        if res.returncode:
            print(f"{name:26s} FAILED {(res.stderr.strip().splitlines() or ['?'])[-1][:300]}")
            continue
        r = json.loads(res.stdout.strip().splitlines()[-1])
        print(f"{name:26s} rows={rows} warps={warps} stages={stages}: regs={r['registers']} spills={r['spills']} "
              f"shared={r['shared']} {r['mma']} cp.async={r['async_copies']} loop={r['loop_instructions']}", flush=True)
    return 0


def launch_variant(q, k, v, lse, go, delta, dk, dv, readers, meta, scale, *, hp, pf, rows, warps, stages, split,
                   order, lean):
    """The variant over ``readers`` (the shipped reduction adds split tiles' slots)."""
    import torch

    from nsa_triton_sel.kernels import backward as bwd_kernels
    from nsa_triton_sel.plan.tiles import next_pow2

    B, S, G, h, Dk = q.shape
    T, Dv = k.shape[2], v.shape[3]
    width = meta.DK1 + meta.BLOCK_DV
    ws = torch.empty((max(readers.slots, 1), meta.KV_BLOCK_N, width), dtype=torch.float32, device=q.device)
    HP = next_pow2(h) if hp and next_pow2(h) <= rows else 0
    if lean & 2 and max(x.numel() for x in (q, go, lse, delta)) >= 2**31:
        raise ValueError("int32 row offsets (LEAN & 2) need every gathered tensor under 2^31 elements")
    if lean & 4 and (Dk != meta.DK1 or Dv != meta.BLOCK_DV):
        raise ValueError("no column mask (LEAN & 4) needs Dk == DK1 and Dv == BLOCK_DV")
    if pf == 5:
        if not (hp and HP and rows // HP <= 4) or not lean & 6 == 6:
            raise ValueError("the scalar feed (PREFETCH 5) needs HP > 0, at most 4 entries a step and LEAN 6")
        # (log2 LSE, delta) interleaved per (b, s, g, head), in delta's [B, S, G, h] order (the dq kernel, which
        # writes delta, would write both)
        lse = torch.stack([lse.float() * 1.4426950408889634, delta.reshape(lse.shape)], dim=-1).contiguous()
    compiled = dkdv_variant_kernel[(readers.chunks.shape[0], 2 if split else 1)](
        q, k, v, go, lse, delta, dk, dv, ws, readers.entries, readers.chunks,
        S, G, h, Dk, Dv, T, readers.n_tiles, scale * 1.4426950408889634, scale,
        *q.stride(), *k.stride(), *v.stride(), *go.stride(), *lse.stride()[:4],
        BLOCK_N=meta.KV_BLOCK_N, ROWS=rows, DK1=meta.DK1, BLOCK_DV=meta.BLOCK_DV, HP=HP, PREFETCH=pf,
        STEP=rows // HP if HP else rows, SPLIT=split, ORDER=order, LEAN=lean, num_warps=warps, num_stages=stages)
    if readers.slots:
        bwd_kernels.sel_bwd_reduce_kernel[(readers.tile_slots.shape[0],)](
            ws, readers.tile_slots, dk, dv, G, T, readers.n_tiles, Dk, Dv, *dk.stride()[:3], *dv.stride()[:3],
            num_warps=4, num_stages=1, **meta.reduce_constexprs())
    return compiled


def timed_against_shipped(x, T: int, sel: str, rep_ms: int, width: int, shipped_extra: dict):
    """The shipped kernel's dk and dv on ``x`` (what every variant is compared with), the rows, and ``row(name, fn,
    extra)``: ``fn`` timed (median of ``triton.testing.do_bench``), its rate over ``x.nbytes``, printed and kept.
    The first two rows are the shipped kernel and the gather-copy ceiling."""
    import torch
    import triton.testing as tt

    dk0, dv0 = torch.empty_like(x.k), torch.empty_like(x.v)
    x.dkdv(dk0, dv0)
    sink = torch.empty(x.readers.chunks.shape[0], dtype=torch.float32, device=x.q.device)
    rows = []

    def row(name, fn, extra):
        ms = tt.do_bench(fn, rep=rep_ms, return_mode="median")
        rows.append({"T": T, "sel": sel, "name": name, "ms": ms, "gbs": x.nbytes / ms / 1e6, **extra})
        print(f"{T:>6} {sel:>7} {name:>{width}} {ms:8.3f} ms {x.nbytes / ms / 1e6:6.0f} GB/s "
              + " ".join(f"{a}={b}" for a, b in extra.items()), flush=True)

    row("shipped", lambda: x.dkdv(dk0, dv0), shipped_extra)
    row("gather-ceiling", lambda: x.gather(sink), {})
    return dk0, dv0, rows, row


def against(dk, dv, dk0, dv0) -> tuple[bool, str]:
    """Whether a variant's dk and dv equal the shipped kernel's bit for bit, and the larger relative difference."""
    import torch

    err = max(float((dk.float() - dk0.float()).abs().max() / dk0.float().abs().max()),
              float((dv.float() - dv0.float()).abs().max() / dv0.float().abs().max()))
    return bool(torch.equal(dk, dk0) and torch.equal(dv, dv0)), f"{err:.1e}"


def measure(T: int, sel: str, rep_ms: int, names: list[str]) -> list[dict]:
    import torch

    from bench.probes.dkdv_ceiling import dkdv_inputs

    x = dkdv_inputs(T, sel)
    q, k, v, go, lse, delta, meta, readers, scale = x.q, x.k, x.v, x.go, x.lse, x.delta, x.meta, x.readers, x.scale
    dk0, dv0, rows, row = timed_against_shipped(
        x, T, sel, rep_ms, 26, {"rows": meta.ROWS, "warps": meta.kv_warps, "stages": meta.kv_stages,
                                "chunk": readers.chunk})
    for name, hp, pf, r, w, s, split, order, lean in chosen(names):
        dk, dv = torch.empty_like(k), torch.empty_like(v)
        kw = dict(hp=hp, pf=pf, rows=r, warps=w, stages=s, split=split, order=order, lean=lean)
        try:
            compiled = launch_variant(q, k, v, lse, go, delta, dk, dv, readers, meta, scale, **kw)
        except Exception as exc:  # a variant that does not compile is a finding, not the end of the run
            print(f"{T:>6} {sel:>7} {name:>26} FAILED {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            continue
        same, err = against(dk, dv, dk0, dv0)
        row(name, lambda: launch_variant(q, k, v, lse, go, delta, dk, dv, readers, meta, scale, **kw),
            {"rows": r, "warps": w, "stages": s, "regs": getattr(compiled, "n_regs", None),
             "spills": getattr(compiled, "n_spills", None), "bitwise": same, "rel_err": err})
    torch.cuda.empty_cache()
    return rows


def run_cli(argv, description: str, measure, aot_report) -> int:
    """The command line shared by the dk/dv walk probes: ``measure(T, sel, rep_ms, names)`` over the grid on the GPU
    (rows to ``--json``), or ``aot_report(python, names)`` with ``--aot`` (no GPU)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--T", default="8192,32768,65536")
    ap.add_argument("--sel", default="random,local")
    ap.add_argument("--only", default="", help="comma-separated variant names")
    ap.add_argument("--rep-ms", type=int, default=100)
    ap.add_argument("--json")
    ap.add_argument("--aot", action="store_true", help="compile the variants for sm_90 (no GPU) and report")
    ap.add_argument("--python", default=sys.executable)
    a = ap.parse_args(argv)
    names = [x for x in a.only.split(",") if x]
    if a.aot:
        return aot_report(a.python, names)
    import torch

    if not torch.cuda.is_available():
        print(f"{ap.prog} needs a CUDA device (or --aot)", file=sys.stderr)
        return 2
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}", flush=True)
    rows = []
    for T in [int(x) for x in a.T.split(",")]:
        for sel in a.sel.split(","):
            rows += measure(T, sel, a.rep_ms, names)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


def main(argv=None) -> int:
    return run_cli(argv, __doc__.splitlines()[0], measure, aot_report)


if __name__ == "__main__":
    raise SystemExit(main())
