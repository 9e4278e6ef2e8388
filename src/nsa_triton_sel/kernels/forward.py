"""Triton kernels for NSA selection attention (forward).

This module imports only ``triton``: the compile-smoke harness loads it in child
processes without paying for ``import torch``.

:func:`sel_fwd_kernel` serves every single-token entry point (and, with ``SPLIT``, decode);
a constexpr ``SPAN_MODE`` says where a row's keys come from:

- ``MODE_RANGES``: ``ranges [B, S, G, n, 2]`` read directly, keys from ``k [B, G, T, Dk]``;
- ``MODE_DENSE``: one span ``[0, L)`` per row of ``k [N, L, Dk]`` (seed ``sel_attn_fwd_dense``);
- ``MODE_CU``: one span ``[cu[i], cu[i + 1])`` of ``k_all [total, Dk]`` (seed ``sel_attn_fwd_varlen``).

:func:`sel_fwd_tok_kernel` handles several consecutive tokens per program (ranges only), for
selections that neighbouring tokens share; :func:`merge_splits_kernel` merges decode splits.

Design (group-centric, see ``../shared/notes/perf-anchors.md``):

- grid axis 0 = query token (x ``num_splits`` for split-L decode), axis 1 = group (x head
  chunk): neighbouring programs are neighbouring tokens of one group, which select the
  same blocks, so their K/V loads hit in L2; axis 0 also has no 65535 limit;
- the h heads of the group are the M dimension of ``tl.dot`` (``BLOCK_H >= 16``, padded
  rows masked), so every K/V tile is loaded once for all heads;
- the spans of a row are flattened into one loop over key tiles: tile ``j`` finds its span
  with two small reductions over the loop-invariant span vectors, so the loop has scalar
  bounds, no data-dependent branch, and its loads can be software-pipelined;
- one-pass online softmax in fp32 with ``exp2`` and the scale folded into ``qk_scale``;
- Dk is covered by two power-of-two slices ``DK1 + DK2`` (192 = 128 + 64) rather than one
  padded block, so a non-power-of-two head dim wastes little;
- raw pointers, masks built at the exact tile shape, int64 row offsets;
- ``DOT_F32`` upcasts the dot operands to fp32.  Only the launchers' interpreter mode sets
  it for bf16: the Triton interpreter computes bf16 ``tl.dot`` wrongly (measured on 3.9.0:
  errors of 1e10), so CPU parity checks everything but the bf16 MMA, which the GPU tests cover.

A row with no selected key stores zeros and LSE = -inf.  The LSE is the natural log.
"""

import triton
import triton.language as tl

from .meta import MODE_CU, MODE_DENSE, MODE_RANGES  # noqa: F401  (documented above)


@triton.jit
def _cumsum(x, BLOCK: tl.constexpr):
    """Inclusive prefix sum of a short vector, as a triangular masked reduction.

    ``tl.cumsum`` gives wrong prefix sums on Triton 3.0 for sm_90 (found on the H100:
    every row with two or more spans came out NaN); this form costs BLOCK^2 adds once per
    program and is right on every version.
    """
    offs = tl.arange(0, BLOCK)
    return tl.sum(tl.where(offs[None, :] <= offs[:, None], x[None, :], 0), 1)


@triton.jit
def _tile_bounds(j, starts, ends, first, cum, BLOCK_N: tl.constexpr, MULTI: tl.constexpr):
    """Key positions ``[pos, end)`` of flattened tile ``j`` (``pos + BLOCK_N`` may pass ``end``)."""
    if MULTI:
        sel = (j >= first) & (j < cum)
        pos = tl.sum(tl.where(sel, starts + (j - first) * BLOCK_N, 0), 0)
        end = tl.sum(tl.where(sel, ends, 0), 0)
    else:
        pos = starts + j * BLOCK_N
        end = ends
    return pos, end


@triton.jit
def _attend(
    q1, q2, acc, m_i, l_i,
    k_row, v_row, pos, n_ok, bias,
    sk_t, sk_d, sv_t, sv_d,
    Dk, Dv, qk_scale,
    BLOCK_N: tl.constexpr, DK1: tl.constexpr, DK2: tl.constexpr, BLOCK_DV: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    """Fold the key tile at ``pos`` into the online softmax state.

    ``n_ok [BLOCK_N]`` says which keys of the tile may be loaded; ``bias`` (0 or -inf,
    ``[1, BLOCK_N]`` or ``[M, BLOCK_N]``) says which (row, key) pairs count.
    """
    offs_n = tl.arange(0, BLOCK_N)
    k_tile = k_row + pos.to(tl.int64) * sk_t
    v_tile = v_row + pos.to(tl.int64) * sv_t
    # K is loaded transposed, [D, BLOCK_N], so the dot needs no trans.
    offs_d1 = tl.arange(0, DK1)
    k1 = tl.load(
        k_tile + offs_d1[:, None] * sk_d + offs_n[None, :] * sk_t,
        mask=(offs_d1[:, None] < Dk) & n_ok[None, :],
        other=0.0,
    )
    if DOT_F32:
        k1 = k1.to(tl.float32)
    qk = tl.dot(q1, k1)
    if DK2 > 0:
        offs_d2 = DK1 + tl.arange(0, DK2)
        k2 = tl.load(
            k_tile + offs_d2[:, None] * sk_d + offs_n[None, :] * sk_t,
            mask=(offs_d2[:, None] < Dk) & n_ok[None, :],
            other=0.0,
        )
        if DOT_F32:
            k2 = k2.to(tl.float32)
        qk += tl.dot(q2, k2)
    qk = qk * qk_scale + bias
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(qk - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    offs_dv = tl.arange(0, BLOCK_DV)
    v = tl.load(
        v_tile + offs_n[:, None] * sv_t + offs_dv[None, :] * sv_d,
        mask=n_ok[:, None] & (offs_dv[None, :] < Dv),
        other=0.0,
    )
    if DOT_F32:
        acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32))
    else:
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return acc, m_new, l_i


@triton.jit
def _attend_tile(
    q1, q2, acc, m_i, l_i,
    k_row, v_row, pos, end,
    sk_t, sk_d, sv_t, sv_d,
    Dk, Dv, qk_scale,
    BLOCK_N: tl.constexpr, DK1: tl.constexpr, DK2: tl.constexpr, BLOCK_DV: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    """Fold the keys ``[pos, min(pos + BLOCK_N, end))`` into the state of rows that all see them."""
    n_ok = (pos + tl.arange(0, BLOCK_N)) < end
    # Additive -inf bias on the keys past the span end (a full-shape add, no 1-D where).
    bias = tl.where(n_ok, 0.0, float("-inf"))[None, :]
    return _attend(
        q1, q2, acc, m_i, l_i, k_row, v_row, pos, n_ok, bias,
        sk_t, sk_d, sv_t, sv_d, Dk, Dv, qk_scale,
        BLOCK_N, DK1, DK2, BLOCK_DV, DOT_F32,
    )


@triton.jit
def sel_fwd_kernel(
    Q, K, V, O, LSE, SPANS, OP, LP,
    S, G, h, Dk, Dv, n_spans, seq_len, num_splits, qk_scale,
    sq_b, sq_s, sq_g, sq_h, sq_d,
    sk_b, sk_g, sk_t, sk_d,
    sv_b, sv_g, sv_t, sv_d,
    so_b, so_s, so_g, so_h, so_d,
    sl_b, sl_s, sl_g, sl_h,
    sr_b, sr_s, sr_g, sr_n, sr_e,
    SPAN_MODE: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DK1: tl.constexpr,
    DK2: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_S: tl.constexpr,
    HAS_LSE: tl.constexpr,
    SPLIT: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    """Selection attention of one (query token, group, head chunk[, key split]).

    With ``SPLIT`` the program handles only its share of the row's key tiles and writes
    an fp32 partial output ``OP [rows, num_splits, h, Dv]`` and its log2 LSE
    ``LP [rows, num_splits, h]``; :func:`merge_splits_kernel` combines them.
    """
    pid0 = tl.program_id(0)
    pid1 = tl.program_id(1)
    if SPLIT:
        token = pid0 // num_splits
        split = pid0 % num_splits
    else:
        token = pid0
        split = 0
    n_hc = tl.cdiv(h, BLOCK_H)
    g = pid1 // n_hc
    hc = pid1 % n_hc
    b = token // S
    s = token % S

    offs_h = hc * BLOCK_H + tl.arange(0, BLOCK_H)
    h_ok = offs_h < h
    q_row = Q + b.to(tl.int64) * sq_b + s.to(tl.int64) * sq_s + g.to(tl.int64) * sq_g
    offs_d1 = tl.arange(0, DK1)
    q1 = tl.load(
        q_row + offs_h[:, None] * sq_h + offs_d1[None, :] * sq_d,
        mask=h_ok[:, None] & (offs_d1[None, :] < Dk),
        other=0.0,
    )
    if DK2 > 0:
        offs_d2 = DK1 + tl.arange(0, DK2)
        q2 = tl.load(
            q_row + offs_h[:, None] * sq_h + offs_d2[None, :] * sq_d,
            mask=h_ok[:, None] & (offs_d2[None, :] < Dk),
            other=0.0,
        )
    else:
        q2 = q1  # unused
    if DOT_F32:
        q1 = q1.to(tl.float32)
        q2 = q2.to(tl.float32)
    k_row = K + b.to(tl.int64) * sk_b + g.to(tl.int64) * sk_g
    v_row = V + b.to(tl.int64) * sv_b + g.to(tl.int64) * sv_g

    # The row's spans, and how many BLOCK_N tiles each one needs.
    if SPAN_MODE == 0:
        offs_s = tl.arange(0, BLOCK_S)
        r_row = SPANS + b.to(tl.int64) * sr_b + s.to(tl.int64) * sr_s + g.to(tl.int64) * sr_g
        s_ok = offs_s < n_spans
        starts = tl.load(r_row + offs_s * sr_n, mask=s_ok, other=0).to(tl.int32)
        ends = tl.load(r_row + offs_s * sr_n + sr_e, mask=s_ok, other=0).to(tl.int32)
        tiles = (tl.maximum(ends - starts, 0) + BLOCK_N - 1) // BLOCK_N
        cum = _cumsum(tiles, BLOCK_S)
        first = cum - tiles
        total = tl.sum(tiles, 0)
    else:
        if SPAN_MODE == 1:
            # pid0 * 0, not 0: Triton 3.0/3.1's interpreter runs range() loops with Python ints,
            # and a span start that is a plain int leaves `pos` without .to(); compiled, it folds to 0.
            starts = pid0 * 0
            ends = seq_len
        else:
            starts = tl.load(SPANS + b).to(tl.int32)
            ends = tl.load(SPANS + b + 1).to(tl.int32)
        first = 0
        cum = 0
        total = (tl.maximum(ends - starts, 0) + BLOCK_N - 1) // BLOCK_N
    if SPLIT:
        per_split = tl.cdiv(total, num_splits)
        j_lo = split * per_split
        j_hi = tl.minimum(j_lo + per_split, total)
    else:
        j_lo = 0
        j_hi = total

    m_i = tl.full((BLOCK_H,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_H,), tl.float32)
    acc = tl.zeros((BLOCK_H, BLOCK_DV), tl.float32)
    for j in range(j_lo, j_hi):
        pos, end = _tile_bounds(j, starts, ends, first, cum, BLOCK_N, SPAN_MODE == 0)
        acc, m_i, l_i = _attend_tile(
            q1, q2, acc, m_i, l_i, k_row, v_row, pos, end,
            sk_t, sk_d, sv_t, sv_d, Dk, Dv, qk_scale,
            BLOCK_N, DK1, DK2, BLOCK_DV, DOT_F32,
        )

    # Every tile holds at least one key, so m_i is finite wherever l_i > 0.
    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse2 = tl.where(empty, float("-inf"), m_i + tl.log2(tl.where(empty, 1.0, l_i)))
    offs_dv = tl.arange(0, BLOCK_DV)
    o_mask = h_ok[:, None] & (offs_dv[None, :] < Dv)
    if SPLIT:
        part = ((token * G + g) * num_splits + split).to(tl.int64)
        tl.store(OP + part * h * Dv + offs_h[:, None] * Dv + offs_dv[None, :], out, mask=o_mask)
        tl.store(LP + part * h + offs_h, lse2, mask=h_ok)
    else:
        o_row = O + b.to(tl.int64) * so_b + s.to(tl.int64) * so_s + g.to(tl.int64) * so_g
        tl.store(
            o_row + offs_h[:, None] * so_h + offs_dv[None, :] * so_d,
            out.to(O.dtype.element_ty),
            mask=o_mask,
        )
        if HAS_LSE:
            l_row = LSE + b.to(tl.int64) * sl_b + s.to(tl.int64) * sl_s + g.to(tl.int64) * sl_g
            tl.store(l_row + offs_h * sl_h, lse2 * 0.6931471805599453, mask=h_ok)


@triton.jit
def merge_splits_kernel(
    OP, LP, O, LSE,
    S, G, h, Dv, num_splits,
    so_b, so_s, so_g, so_h, so_d,
    sl_b, sl_s, sl_g, sl_h,
    BLOCK_H: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    HAS_LSE: tl.constexpr,
):
    """Combine the split-L partial results of one (token, group, head chunk) by their LSE."""
    token = tl.program_id(0)
    pid1 = tl.program_id(1)
    n_hc = tl.cdiv(h, BLOCK_H)
    g = pid1 // n_hc
    hc = pid1 % n_hc
    b = token // S
    s = token % S
    offs_h = hc * BLOCK_H + tl.arange(0, BLOCK_H)
    h_ok = offs_h < h
    offs_dv = tl.arange(0, BLOCK_DV)
    o_mask = h_ok[:, None] & (offs_dv[None, :] < Dv)
    row = (token * G + g).to(tl.int64) * num_splits
    # Finite start, so an empty split (lse2 = -inf) adds weight 0 and never NaN.
    m = tl.full((BLOCK_H,), -1.0e30, tl.float32)
    l = tl.zeros((BLOCK_H,), tl.float32)
    acc = tl.zeros((BLOCK_H, BLOCK_DV), tl.float32)
    for sp in range(0, num_splits):
        part = row + sp
        lse_sp = tl.load(LP + part * h + offs_h, mask=h_ok, other=float("-inf"))
        o_sp = tl.load(
            OP + part * h * Dv + offs_h[:, None] * Dv + offs_dv[None, :], mask=o_mask, other=0.0
        )
        m_new = tl.maximum(m, lse_sp)
        alpha = tl.exp2(m - m_new)
        w = tl.exp2(lse_sp - m_new)
        acc = acc * alpha[:, None] + o_sp * w[:, None]
        l = l * alpha + w
        m = m_new
    empty = l == 0.0
    out = acc / tl.where(empty, 1.0, l)[:, None]
    o_row = O + b.to(tl.int64) * so_b + s.to(tl.int64) * so_s + g.to(tl.int64) * so_g
    tl.store(
        o_row + offs_h[:, None] * so_h + offs_dv[None, :] * so_d,
        out.to(O.dtype.element_ty),
        mask=o_mask,
    )
    if HAS_LSE:
        lse = tl.where(empty, float("-inf"), (m + tl.log2(tl.where(empty, 1.0, l))) * 0.6931471805599453)
        l_row = LSE + b.to(tl.int64) * sl_b + s.to(tl.int64) * sl_s + g.to(tl.int64) * sl_g
        tl.store(l_row + offs_h * sl_h, lse, mask=h_ok)


@triton.jit
def _load_q(Q, q_off, rows_ok, sq_d, Dk, DK1: tl.constexpr, DK2: tl.constexpr, DOT_F32: tl.constexpr):
    """The q tile ``[M, DK1]`` (+ ``[M, DK2]``) of rows at element offsets ``q_off [M]``."""
    offs_d1 = tl.arange(0, DK1)
    q1 = tl.load(Q + q_off[:, None] + offs_d1[None, :] * sq_d,
                 mask=rows_ok[:, None] & (offs_d1[None, :] < Dk), other=0.0)
    if DK2 > 0:
        offs_d2 = DK1 + tl.arange(0, DK2)
        q2 = tl.load(Q + q_off[:, None] + offs_d2[None, :] * sq_d,
                     mask=rows_ok[:, None] & (offs_d2[None, :] < Dk), other=0.0)
    else:
        q2 = q1  # unused
    if DOT_F32:
        q1 = q1.to(tl.float32)
        q2 = q2.to(tl.float32)
    return q1, q2


@triton.jit
def sel_fwd_tok_kernel(
    Q, K, V, O, LSE, SPANS,
    S, G, h, Dk, Dv, n_spans, qk_scale,
    sq_b, sq_s, sq_g, sq_h, sq_d,
    sk_b, sk_g, sk_t, sk_d,
    sv_b, sv_g, sv_t, sv_d,
    so_b, so_s, so_g, so_h, so_d,
    sl_b, sl_s, sl_g, sl_h,
    sr_b, sr_s, sr_g, sr_n, sr_e,
    TOK: tl.constexpr,
    HP: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DK1: tl.constexpr,
    DK2: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_S: tl.constexpr,
    HAS_LSE: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    """Selection attention of ``TOK`` consecutive tokens of one group: M = TOK x HP rows.

    Neighbouring NSA tokens select mostly the same blocks.  Phase 1 walks the spans of the
    program's last token (the "leader", whose causal clamp reaches furthest) and folds each
    K/V tile into every row whose token selected those keys, so a shared tile is loaded
    once for TOK tokens.  Phase 2 walks, per other token, only its spans that are not inside
    a leader span, masking out the keys the leader already covered, so every selected key
    of every row is counted exactly once whatever the selections are.
    """
    n_tb = tl.cdiv(S, TOK)
    pid0 = tl.program_id(0)
    g = tl.program_id(1)
    b = pid0 // n_tb
    t0 = (pid0 % n_tb) * TOK

    rows = tl.arange(0, TOK * HP)
    r_tok = rows // HP
    r_head = rows % HP
    r_ok = (r_head < h) & (t0 + r_tok < S)
    q_off = (b.to(tl.int64) * sq_b + (t0 + r_tok).to(tl.int64) * sq_s + g.to(tl.int64) * sq_g
             + r_head.to(tl.int64) * sq_h)
    q1, q2 = _load_q(Q, q_off, r_ok, sq_d, Dk, DK1, DK2, DOT_F32)
    k_row = K + b.to(tl.int64) * sk_b + g.to(tl.int64) * sk_g
    v_row = V + b.to(tl.int64) * sv_b + g.to(tl.int64) * sv_g

    # Spans of all TOK tokens, [TOK, BLOCK_S]; padding and tokens past S are empty.
    r_base = SPANS + b.to(tl.int64) * sr_b + g.to(tl.int64) * sr_g
    offs_t = tl.arange(0, TOK)
    offs_s = tl.arange(0, BLOCK_S)
    sp_ok = ((t0 + offs_t) < S)[:, None] & (offs_s < n_spans)[None, :]
    sp_ptr = r_base + (t0 + offs_t).to(tl.int64)[:, None] * sr_s + offs_s[None, :] * sr_n
    st2 = tl.load(sp_ptr, mask=sp_ok, other=0).to(tl.int32)
    en2 = tl.maximum(tl.load(sp_ptr + sr_e, mask=sp_ok, other=0).to(tl.int32), st2)

    # The leader's spans, [BLOCK_S].
    lead = tl.minimum(TOK - 1, S - 1 - t0)
    l_ok = offs_s < n_spans
    l_ptr = r_base + (t0 + lead).to(tl.int64) * sr_s + offs_s * sr_n
    stL = tl.load(l_ptr, mask=l_ok, other=0).to(tl.int32)
    enL = tl.maximum(tl.load(l_ptr + sr_e, mask=l_ok, other=0).to(tl.int32), stL)
    tilesL = (enL - stL + BLOCK_N - 1) // BLOCK_N
    cumL = _cumsum(tilesL, BLOCK_S)
    firstL = cumL - tilesL
    totalL = tl.sum(tilesL, 0)

    # A finite start keeps rows that see no key of a tile free of inf - inf.
    m_i = tl.full((TOK * HP,), -1.0e30, tl.float32)
    l_i = tl.zeros((TOK * HP,), tl.float32)
    acc = tl.zeros((TOK * HP, BLOCK_DV), tl.float32)
    offs_n = tl.arange(0, BLOCK_N)
    for j in range(0, totalL):
        pos, end = _tile_bounds(j, stL, enL, firstL, cumL, BLOCK_N, True)
        kp = pos + offs_n
        n_ok = kp < end
        inside = (st2[:, :, None] <= kp[None, None, :]) & (kp[None, None, :] < en2[:, :, None])
        member = tl.max(inside.to(tl.int32), 1) > 0  # [TOK, BLOCK_N]
        valid = tl.reshape(tl.broadcast_to(member[:, None, :], (TOK, HP, BLOCK_N)), (TOK * HP, BLOCK_N))
        bias = tl.where(valid & n_ok[None, :], 0.0, float("-inf"))
        acc, m_i, l_i = _attend(
            q1, q2, acc, m_i, l_i, k_row, v_row, pos, n_ok, bias,
            sk_t, sk_d, sv_t, sv_d, Dk, Dv, qk_scale,
            BLOCK_N, DK1, DK2, BLOCK_DV, DOT_F32,
        )

    # Phase 2: the other tokens' spans that are not inside one leader span, as a flat list
    # of TOK * BLOCK_S entries (entry e = token e // BLOCK_S, slot e % BLOCK_S).
    offs_e = tl.arange(0, TOK * BLOCK_S)
    e_tok = offs_e // BLOCK_S
    e_ok = ((t0 + e_tok) < S) & ((offs_e % BLOCK_S) < n_spans)
    e_ptr = r_base + (t0 + e_tok).to(tl.int64) * sr_s + (offs_e % BLOCK_S) * sr_n
    st1 = tl.load(e_ptr, mask=e_ok, other=0).to(tl.int32)
    en1 = tl.maximum(tl.load(e_ptr + sr_e, mask=e_ok, other=0).to(tl.int32), st1)
    within = (stL[None, :] <= st1[:, None]) & (en1[:, None] <= enL[None, :])
    contained = (tl.max(within.to(tl.int32), 1) > 0) | (e_tok == lead)
    tiles2 = tl.where(contained, 0, (en1 - st1 + BLOCK_N - 1) // BLOCK_N)
    cum2 = _cumsum(tiles2, TOK * BLOCK_S)
    first2 = cum2 - tiles2
    total2 = tl.sum(tiles2, 0)
    for j in range(0, total2):
        pos, end = _tile_bounds(j, st1, en1, first2, cum2, BLOCK_N, True)
        sel = (j >= first2) & (j < cum2)
        tok = tl.sum(tl.where(sel, e_tok, 0), 0)
        kp = pos + offs_n
        n_ok = kp < end
        covered = tl.max(((stL[:, None] <= kp[None, :]) & (kp[None, :] < enL[:, None])).to(tl.int32), 0) > 0
        valid = (r_tok == tok)[:, None] & (n_ok & (covered == 0))[None, :]
        bias = tl.where(valid, 0.0, float("-inf"))
        acc, m_i, l_i = _attend(
            q1, q2, acc, m_i, l_i, k_row, v_row, pos, n_ok, bias,
            sk_t, sk_d, sv_t, sv_d, Dk, Dv, qk_scale,
            BLOCK_N, DK1, DK2, BLOCK_DV, DOT_F32,
        )

    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    offs_dv = tl.arange(0, BLOCK_DV)
    o_off = (b.to(tl.int64) * so_b + (t0 + r_tok).to(tl.int64) * so_s + g.to(tl.int64) * so_g
             + r_head.to(tl.int64) * so_h)
    tl.store(O + o_off[:, None] + offs_dv[None, :] * so_d, out.to(O.dtype.element_ty),
             mask=r_ok[:, None] & (offs_dv[None, :] < Dv))
    if HAS_LSE:
        lse = tl.where(empty, float("-inf"), (m_i + tl.log2(tl.where(empty, 1.0, l_i))) * 0.6931471805599453)
        l_off = (b.to(tl.int64) * sl_b + (t0 + r_tok).to(tl.int64) * sl_s + g.to(tl.int64) * sl_g
                 + r_head.to(tl.int64) * sl_h)
        tl.store(LSE + l_off, lse, mask=r_ok)
