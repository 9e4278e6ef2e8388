"""Triton kernels for NSA selection attention (forward).

This module imports only ``triton`` (and the shared helpers of ``common.py``, which imports
only ``triton``): the compile-smoke harness loads it in child processes without paying for
``import torch``.

:func:`sel_fwd_kernel` serves every single-token entry point (and, with ``SPLIT``, decode);
a constexpr ``SPAN_MODE`` says where a row's keys come from:

- ``MODE_RANGES``: ``ranges [B, S, G, n, 2]`` read directly, keys from ``k [B, G, T, Dk]``;
- ``MODE_DENSE``: one span ``[0, L)`` per row of ``k [N, L, Dk]`` (seed ``sel_attn_fwd_dense``);
- ``MODE_CU``: one span ``[cu[i], cu[i + 1])`` of ``k_all [total, Dk]`` (seed ``sel_attn_fwd_varlen``);
- ``MODE_BLOCKS``: ``block_indices [B, S, G, n]`` read directly: block ``i`` is the span
  ``[i * bs, min((i + 1) * bs, pos + 1, T))``, ``-1`` none, ``pos`` the query position (``POS``
  with ``HAS_POS``, else ``s``), so the block-index path needs no conversion on the host.

:func:`sel_fwd_tok_kernel` handles several consecutive tokens per program (ranges only), for
selections that neighbouring tokens share; :func:`merge_splits_kernel` merges decode splits.
:func:`sel_fwd_keymajor_kernel` and :func:`sel_fwd_keymajor_merge_kernel` are the key-major forward of
small groups (``plan/keymajor.py``: one program per chunk of a key tile's readers, scaled float16 partial
results merged per row by LSE in a fixed order).

Design (group-centric; this docstring is where the kernel design is written down):

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
- the multi-token kernel: ``TOK`` consecutive tokens share a program (M = TOK x HP = 64); tiles
  of the last token's spans are loaded once and folded into every token that selected those keys,
  and keys only other tokens selected are handled in a second phase, so any selection is exact
  (the planner takes it where neighbouring tokens share most span starts, as real NSA selections do);
- decode (one query position, few rows): split-L over programs, merged by LSE (flash-decoding);
- Dv is covered by two slices too (a padded 256-wide tile at D = 192 is much slower in the multi-token
  kernel);
- every span is clamped into ``[0, T)`` in the kernel (``common._clamp_spans``), so no input value
  can make it read out of bounds: the dispatcher may enqueue it before the value checks answer;
- portable to Triton 3.0-3.9: raw pointers, masks built at the exact tile shape, explicit
  ``[:, None]``/``[None, :]``, scalar loop bounds, int64 row offsets, no block pointers or tensor
  descriptors, no autotuning.  Two Triton 3.0 problems found on the H100 are avoided: ``tl.cumsum``
  gives wrong prefix sums on sm_90 (the kernels use a triangular reduction), and 64-row, 8-warp dots
  on sm_90 abort the 3.0 and 3.1 compilers (the known-bad window ``triton30-31-sm90-mma64-abort``
  caps M at 32 there: ``max_rows = 32``, read by the planner);
- ``DOT_F32`` upcasts the dot operands to fp32.  Only the launchers' interpreter mode sets
  it for bf16: the Triton interpreter computes bf16 ``tl.dot`` wrongly (measured on 3.9.0:
  errors of 1e10), so CPU parity checks everything but the bf16 MMA, which the GPU tests cover.

A row with no selected key stores zeros and LSE = -inf.  The LSE is the natural log.

Reading aid: every tile carries its shape in a comment (``# [BLOCK_H, BLOCK_N]``), and the
steps of each kernel are marked (``# -- scores --``).  M is the dot's row count: ``BLOCK_H``
heads (single-token kernel) or ``TOK * HP`` (token, head) rows (multi-token kernel).
"""

import triton
import triton.language as tl

from .common import (LN2, MODE_BLOCKS, MODE_DENSE, MODE_RANGES, _chunk_tile, _clamp_spans, _gather_rows,
                     _group_heads, _load_q, _merge_rows, _partial_exponent, _prefix_sum, _tile_bounds,
                     _token_rows)


@triton.jit
def _load_kt(k_tile, offs_n, n_ok, sk_t, sk_d, Dk, D0: tl.constexpr, WIDTH: tl.constexpr, DOT_F32: tl.constexpr):
    """The key tile transposed, ``[WIDTH, BLOCK_N]`` (head-dim slice ``D0 + [0, WIDTH)``, < Dk; keys
    ``offs_n [BLOCK_N]`` where ``n_ok``, else 0), so the score dot needs no trans."""
    offs_d = D0 + tl.arange(0, WIDTH)  # [WIDTH]
    kt = tl.load(k_tile + offs_d[:, None] * sk_d + offs_n[None, :] * sk_t,  # [WIDTH, BLOCK_N]
                 mask=(offs_d[:, None] < Dk) & n_ok[None, :], other=0.0)
    if DOT_F32:
        kt = kt.to(tl.float32)
    return kt


@triton.jit
def _attend(
    q1, q2, acc1, acc2, m_i, l_i,
    k_row, v_row, pos, n_ok, bias,
    sk_t, sk_d, sv_t, sv_d,
    Dk, Dv, qk_scale,
    BLOCK_N: tl.constexpr, DK1: tl.constexpr, DK2: tl.constexpr, DV1: tl.constexpr, DV2: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    """Fold the key tile at ``pos`` into the online softmax state.

    ``n_ok [BLOCK_N]`` says which keys of the tile may be loaded; ``bias`` (0 or -inf,
    ``[1, BLOCK_N]`` or ``[M, BLOCK_N]``) says which (row, key) pairs count.
    """
    offs_n = tl.arange(0, BLOCK_N)  # [BLOCK_N]
    k_tile = k_row + pos.to(tl.int64) * sk_t
    v_tile = v_row + pos.to(tl.int64) * sv_t
    # -- scores: q @ k^T, K loaded transposed so the dot needs no trans --
    qk = tl.dot(q1, _load_kt(k_tile, offs_n, n_ok, sk_t, sk_d, Dk, 0, DK1, DOT_F32))  # [M, BLOCK_N] fp32
    if DK2 > 0:
        qk += tl.dot(q2, _load_kt(k_tile, offs_n, n_ok, sk_t, sk_d, Dk, DK1, DK2, DOT_F32))
    qk = qk * qk_scale + bias  # [M, BLOCK_N], log2 domain; -inf where the (row, key) pair does not count
    # -- online softmax: rescale the running state to the new row maximum --
    m_new = tl.maximum(m_i, tl.max(qk, 1))  # [M]
    alpha = tl.exp2(m_i - m_new)  # [M]
    p = tl.exp2(qk - m_new[:, None])  # [M, BLOCK_N]
    l_i = l_i * alpha + tl.sum(p, 1)  # [M]
    # -- accumulate p @ v, one power-of-two slice of Dv at a time --
    acc1 = _pv(acc1, p, alpha, v_tile, offs_n, n_ok, sv_t, sv_d, Dv, 0, DV1, DOT_F32)  # [M, DV1]
    if DV2 > 0:
        acc2 = _pv(acc2, p, alpha, v_tile, offs_n, n_ok, sv_t, sv_d, Dv, DV1, DV2, DOT_F32)  # [M, DV2]
    return acc1, acc2, m_new, l_i


@triton.jit
def _pv(acc, p, alpha, v_tile, offs_n, n_ok, sv_t, sv_d, Dv, D0, DV: tl.constexpr, DOT_F32: tl.constexpr):
    """``acc * alpha + p @ V[:, D0:D0 + DV]`` for one slice of the value dim."""
    offs_dv = D0 + tl.arange(0, DV)  # [DV]
    v = tl.load(  # [BLOCK_N, DV]
        v_tile + offs_n[:, None] * sv_t + offs_dv[None, :] * sv_d,
        mask=n_ok[:, None] & (offs_dv[None, :] < Dv),
        other=0.0,
    )
    if DOT_F32:
        return acc * alpha[:, None] + tl.dot(p, v.to(tl.float32))  # [M, DV]
    return acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)  # [M, DV]


@triton.jit
def _store_out(base, row_off, rows_ok, acc, inv_l, D0, Dv, s_d, DV: tl.constexpr):
    """Store ``acc / l`` into the columns ``[D0, D0 + DV)`` of the rows at element offsets ``row_off [M]``."""
    offs_dv = D0 + tl.arange(0, DV)  # [DV]
    tl.store(
        base + row_off[:, None] + offs_dv[None, :] * s_d,  # [M, DV]
        (acc * inv_l[:, None]).to(base.dtype.element_ty),
        mask=rows_ok[:, None] & (offs_dv[None, :] < Dv),
    )


@triton.jit
def _attend_tile(
    q1, q2, acc1, acc2, m_i, l_i,
    k_row, v_row, pos, end,
    sk_t, sk_d, sv_t, sv_d,
    Dk, Dv, qk_scale,
    BLOCK_N: tl.constexpr, DK1: tl.constexpr, DK2: tl.constexpr, DV1: tl.constexpr, DV2: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    """Fold the keys ``[pos, min(pos + BLOCK_N, end))`` into the state of rows that all see them."""
    n_ok = (pos + tl.arange(0, BLOCK_N)) < end  # [BLOCK_N]
    # Additive -inf bias on the keys past the span end (a full-shape add, no 1-D where).
    bias = tl.where(n_ok, 0.0, float("-inf"))[None, :]  # [1, BLOCK_N]
    return _attend(
        q1, q2, acc1, acc2, m_i, l_i, k_row, v_row, pos, n_ok, bias,
        sk_t, sk_d, sv_t, sv_d, Dk, Dv, qk_scale,
        BLOCK_N, DK1, DK2, DV1, DV2, DOT_F32,
    )


@triton.jit
def _block_spans(blk, qpos, seq_len, block_size):
    """Spans ``[start, end)`` (int32) of block indices ``blk`` for a query at position ``qpos``.

    Block ``i`` covers ``[i * block_size, (i + 1) * block_size)``, clamped to ``qpos + 1`` (causal)
    and to ``seq_len``; ``-1`` (and any block wholly in the future) is an empty span.  int64
    throughout: the clamp takes ``min(qpos, seq_len - 1)`` first, so a position near 2^63 cannot
    overflow, and ``blk`` is clamped to ``seq_len`` so ``blk * block_size`` stays in range (the
    launcher passes ``block_size <= max(T, 1)``).
    """
    limit = tl.minimum(qpos, seq_len - 1) + 1  # scalar int64
    blk_c = tl.minimum(blk, seq_len)  # [BLOCK_S] int64
    start = blk_c * block_size
    end = tl.minimum(start + block_size, limit)
    ok = (blk >= 0) & (end > start)
    return tl.where(ok, start, 0).to(tl.int32), tl.where(ok, end, 0).to(tl.int32)


@triton.jit
def sel_fwd_kernel(
    Q, K, V, O, LSE, SPANS, POS, OP, LP,
    S, G, h, Dk, Dv, n_spans, seq_len, block_size, num_splits, qk_scale,
    sq_b, sq_s, sq_g, sq_h, sq_d,
    sk_b, sk_g, sk_t, sk_d,
    sv_b, sv_g, sv_t, sv_d,
    so_b, so_s, so_g, so_h, so_d,
    sl_b, sl_s, sl_g, sl_h,
    sr_b, sr_s, sr_g, sr_n, sr_e,
    sp_b, sp_s,
    SPAN_MODE: tl.constexpr,
    HAS_POS: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DK1: tl.constexpr,
    DK2: tl.constexpr,
    DV1: tl.constexpr,
    DV2: tl.constexpr,
    BLOCK_S: tl.constexpr,
    HAS_LSE: tl.constexpr,
    SPLIT: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    """Selection attention of one (query token, group, head chunk[, key split]).

    With ``SPLIT`` the program handles only its share of the row's key tiles and writes
    an fp32 partial output ``OP [rows, num_splits, h, Dv]`` and its log2 LSE
    ``LP [rows, num_splits, h]``; :func:`merge_splits_kernel` combines them.
    ``SPANS`` is the ranges, block indices or cu_seqlens tensor (``SPAN_MODE``); ``POS``
    (``MODE_BLOCKS`` with ``HAS_POS``) the query positions ``[B, S]`` with strides ``sp_b, sp_s``.
    """
    # ``qk_scale`` may arrive as fp64 (Inductor types a traced Python float so): the online
    # softmax state must stay fp32 on every path.
    qk_scale = tl.cast(qk_scale, tl.float32)
    # -- which (token, group, head chunk, split) this program owns --
    pid0 = tl.program_id(0)
    pid1 = tl.program_id(1)
    if SPLIT:
        token = pid0 // num_splits
        split = pid0 % num_splits
    else:
        token = pid0
        split = 0
    # the group's query heads offs_h: the M rows of every dot
    b, s, g, offs_h = _group_heads(token, pid1, S, h, BLOCK_H)  # scalars, [BLOCK_H]
    h_ok = offs_h < h  # [BLOCK_H]
    q_off = (b.to(tl.int64) * sq_b + s.to(tl.int64) * sq_s + g.to(tl.int64) * sq_g
             + offs_h.to(tl.int64) * sq_h)  # [BLOCK_H]
    q1, q2 = _load_q(Q, q_off, h_ok, sq_d, Dk, DK1, DK2, DOT_F32)  # [BLOCK_H, DK1], [BLOCK_H, DK2]
    k_row = K + b.to(tl.int64) * sk_b + g.to(tl.int64) * sk_g
    v_row = V + b.to(tl.int64) * sv_b + g.to(tl.int64) * sv_g

    # -- the row's spans, and how many BLOCK_N tiles each one needs --
    if SPAN_MODE == MODE_RANGES or SPAN_MODE == MODE_BLOCKS:  # n spans per row
        offs_s = tl.arange(0, BLOCK_S)  # [BLOCK_S]
        r_row = SPANS + b.to(tl.int64) * sr_b + s.to(tl.int64) * sr_s + g.to(tl.int64) * sr_g
        s_ok = offs_s < n_spans  # [BLOCK_S]
        if SPAN_MODE == MODE_RANGES:
            starts = tl.load(r_row + offs_s * sr_n, mask=s_ok, other=0)  # [BLOCK_S]
            ends = tl.load(r_row + offs_s * sr_n + sr_e, mask=s_ok, other=0)  # [BLOCK_S]
            starts, ends = _clamp_spans(starts, ends, seq_len)  # int32
        else:
            blk = tl.load(r_row + offs_s * sr_n, mask=s_ok, other=-1).to(tl.int64)  # [BLOCK_S]
            if HAS_POS:
                qpos = tl.load(POS + b.to(tl.int64) * sp_b + s.to(tl.int64) * sp_s).to(tl.int64)
            else:
                qpos = s.to(tl.int64)
            starts, ends = _block_spans(blk, qpos, seq_len, block_size)  # [BLOCK_S] each
        tiles = (tl.maximum(ends - starts, 0) + BLOCK_N - 1) // BLOCK_N  # [BLOCK_S]
        cum = _prefix_sum(tiles, BLOCK_S)  # [BLOCK_S] inclusive
        first = cum - tiles  # [BLOCK_S]
        total = tl.sum(tiles, 0)
    else:
        if SPAN_MODE == MODE_DENSE:
            # pid0 * 0, not 0: Triton 3.0/3.1's interpreter runs range() loops with Python ints,
            # and a span start that is a plain int leaves `pos` without .to(); compiled, it folds to 0.
            starts = pid0 * 0
            ends = seq_len
        else:  # MODE_CU
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

    # -- one loop over the row's key tiles, all spans flattened --
    m_i = tl.full((BLOCK_H,), float("-inf"), tl.float32)  # [BLOCK_H] running max (log2 domain)
    l_i = tl.zeros((BLOCK_H,), tl.float32)  # [BLOCK_H] running sum of exp2
    acc1 = tl.zeros((BLOCK_H, DV1), tl.float32)  # [BLOCK_H, DV1]
    if DV2 > 0:
        acc2 = tl.zeros((BLOCK_H, DV2), tl.float32)  # [BLOCK_H, DV2]
    else:
        acc2 = tl.zeros((BLOCK_H, 16), tl.float32)  # unused
    for j in range(j_lo, j_hi):
        pos, end = _tile_bounds(j, starts, ends, first, cum, BLOCK_N,
                               SPAN_MODE == MODE_RANGES or SPAN_MODE == MODE_BLOCKS)
        acc1, acc2, m_i, l_i = _attend_tile(
            q1, q2, acc1, acc2, m_i, l_i, k_row, v_row, pos, end,
            sk_t, sk_d, sv_t, sv_d, Dk, Dv, qk_scale,
            BLOCK_N, DK1, DK2, DV1, DV2, DOT_F32,
        )

    # -- normalise and store (an empty row: zeros and LSE = -inf) --
    # Every tile holds at least one key, so m_i is finite wherever l_i > 0.
    empty = l_i == 0.0  # [BLOCK_H]
    inv_l = 1.0 / tl.where(empty, 1.0, l_i)  # [BLOCK_H]
    lse2 = tl.where(empty, float("-inf"), m_i + tl.log2(tl.where(empty, 1.0, l_i)))  # [BLOCK_H]
    if SPLIT:  # fp32 partial results [rows * G * num_splits, h, Dv] for the merge
        part = ((token * G + g) * num_splits + split).to(tl.int64)
        base = OP
        row_off = part * h * Dv + offs_h.to(tl.int64) * Dv  # [BLOCK_H]
        s_d = 1
        tl.store(LP + part * h + offs_h, lse2, mask=h_ok)
    else:
        base = O
        row_off = (b.to(tl.int64) * so_b + s.to(tl.int64) * so_s + g.to(tl.int64) * so_g
                   + offs_h.to(tl.int64) * so_h)  # [BLOCK_H]
        s_d = so_d
        if HAS_LSE:
            l_row = LSE + b.to(tl.int64) * sl_b + s.to(tl.int64) * sl_s + g.to(tl.int64) * sl_g
            tl.store(l_row + offs_h * sl_h, lse2 * LN2, mask=h_ok)
    _store_out(base, row_off, h_ok, acc1, inv_l, 0, Dv, s_d, DV1)
    if DV2 > 0:
        _store_out(base, row_off, h_ok, acc2, inv_l, DV1, Dv, s_d, DV2)


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
    # -- which (token, group, head chunk) this program owns --
    token = tl.program_id(0)
    b, s, g, offs_h = _group_heads(token, tl.program_id(1), S, h, BLOCK_H)  # scalars, [BLOCK_H]
    h_ok = offs_h < h  # [BLOCK_H]
    offs_dv = tl.arange(0, BLOCK_DV)  # [BLOCK_DV]
    o_mask = h_ok[:, None] & (offs_dv[None, :] < Dv)  # [BLOCK_H, BLOCK_DV]
    row = (token * G + g).to(tl.int64) * num_splits
    # -- fold the splits in by their log2 LSE --
    # Finite start, so an empty split (lse2 = -inf) adds weight 0 and never NaN.
    m = tl.full((BLOCK_H,), -1.0e30, tl.float32)  # [BLOCK_H]
    l = tl.zeros((BLOCK_H,), tl.float32)  # [BLOCK_H]
    acc = tl.zeros((BLOCK_H, BLOCK_DV), tl.float32)  # [BLOCK_H, BLOCK_DV]
    for sp in range(0, num_splits):
        part = row + sp
        lse_sp = tl.load(LP + part * h + offs_h, mask=h_ok, other=float("-inf"))  # [BLOCK_H]
        o_sp = tl.load(  # [BLOCK_H, BLOCK_DV]
            OP + part * h * Dv + offs_h[:, None] * Dv + offs_dv[None, :], mask=o_mask, other=0.0
        )
        m_new = tl.maximum(m, lse_sp)
        alpha = tl.exp2(m - m_new)  # [BLOCK_H]
        w = tl.exp2(lse_sp - m_new)  # [BLOCK_H]
        acc = acc * alpha[:, None] + o_sp * w[:, None]
        l = l * alpha + w
        m = m_new
    # -- normalise and store --
    empty = l == 0.0  # [BLOCK_H]
    out = acc / tl.where(empty, 1.0, l)[:, None]  # [BLOCK_H, BLOCK_DV]
    o_row = O + b.to(tl.int64) * so_b + s.to(tl.int64) * so_s + g.to(tl.int64) * so_g
    tl.store(
        o_row + offs_h[:, None] * so_h + offs_dv[None, :] * so_d,
        out.to(O.dtype.element_ty),
        mask=o_mask,
    )
    if HAS_LSE:
        lse = tl.where(empty, float("-inf"), (m + tl.log2(tl.where(empty, 1.0, l))) * LN2)  # [BLOCK_H]
        l_row = LSE + b.to(tl.int64) * sl_b + s.to(tl.int64) * sl_s + g.to(tl.int64) * sl_g
        tl.store(l_row + offs_h * sl_h, lse, mask=h_ok)


@triton.jit
def sel_fwd_tok_kernel(
    Q, K, V, O, LSE, SPANS,
    S, G, h, Dk, Dv, n_spans, seq_len, qk_scale,
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
    DV1: tl.constexpr,
    DV2: tl.constexpr,
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
    qk_scale = tl.cast(qk_scale, tl.float32)  # fp32 state even if the scale arrives as fp64 (see sel_fwd_kernel)
    # -- which (batch, first token t0, group) this program owns; rows: (token, head) pairs, token-major --
    b, g, t0, r_tok, r_head, r_ok = _token_rows(S, h, TOK, HP)  # scalars, [M] x 3
    q_off = (b.to(tl.int64) * sq_b + (t0 + r_tok).to(tl.int64) * sq_s + g.to(tl.int64) * sq_g
             + r_head.to(tl.int64) * sq_h)  # [M]
    q1, q2 = _load_q(Q, q_off, r_ok, sq_d, Dk, DK1, DK2, DOT_F32)  # [M, DK1], [M, DK2]
    k_row = K + b.to(tl.int64) * sk_b + g.to(tl.int64) * sk_g
    v_row = V + b.to(tl.int64) * sv_b + g.to(tl.int64) * sv_g

    # -- spans of all TOK tokens; padding and tokens past S are empty --
    r_base = SPANS + b.to(tl.int64) * sr_b + g.to(tl.int64) * sr_g
    offs_t = tl.arange(0, TOK)  # [TOK]
    offs_s = tl.arange(0, BLOCK_S)  # [BLOCK_S]
    sp_ok = ((t0 + offs_t) < S)[:, None] & (offs_s < n_spans)[None, :]  # [TOK, BLOCK_S]
    sp_ptr = r_base + (t0 + offs_t).to(tl.int64)[:, None] * sr_s + offs_s[None, :] * sr_n
    st2, en2 = _clamp_spans(tl.load(sp_ptr, mask=sp_ok, other=0),  # [TOK, BLOCK_S] each
                            tl.load(sp_ptr + sr_e, mask=sp_ok, other=0), seq_len)

    # -- the leader's spans and their flattened tiles --
    lead = tl.minimum(TOK - 1, S - 1 - t0)
    l_ok = offs_s < n_spans  # [BLOCK_S]
    l_ptr = r_base + (t0 + lead).to(tl.int64) * sr_s + offs_s * sr_n
    stL, enL = _clamp_spans(tl.load(l_ptr, mask=l_ok, other=0),  # [BLOCK_S] each
                            tl.load(l_ptr + sr_e, mask=l_ok, other=0), seq_len)
    tilesL = (enL - stL + BLOCK_N - 1) // BLOCK_N  # [BLOCK_S]
    cumL = _prefix_sum(tilesL, BLOCK_S)  # [BLOCK_S]
    firstL = cumL - tilesL  # [BLOCK_S]
    totalL = tl.sum(tilesL, 0)

    # -- phase 1: the leader's tiles, folded into every row whose token selected the key --
    # A finite start keeps rows that see no key of a tile free of inf - inf.
    m_i = tl.full((TOK * HP,), -1.0e30, tl.float32)  # [M]
    l_i = tl.zeros((TOK * HP,), tl.float32)  # [M]
    acc1 = tl.zeros((TOK * HP, DV1), tl.float32)  # [M, DV1]
    if DV2 > 0:
        acc2 = tl.zeros((TOK * HP, DV2), tl.float32)  # [M, DV2]
    else:
        acc2 = tl.zeros((TOK * HP, 16), tl.float32)  # unused
    offs_n = tl.arange(0, BLOCK_N)  # [BLOCK_N]
    for j in range(0, totalL):
        pos, end = _tile_bounds(j, stL, enL, firstL, cumL, BLOCK_N, True)
        kp = pos + offs_n  # [BLOCK_N] key positions
        n_ok = kp < end  # [BLOCK_N]
        inside = (st2[:, :, None] <= kp[None, None, :]) & (kp[None, None, :] < en2[:, :, None])  # [TOK, BLOCK_S, BLOCK_N]
        member = tl.max(inside.to(tl.int32), 1) > 0  # [TOK, BLOCK_N]
        valid = tl.reshape(tl.broadcast_to(member[:, None, :], (TOK, HP, BLOCK_N)), (TOK * HP, BLOCK_N))  # [M, BLOCK_N]
        bias = tl.where(valid & n_ok[None, :], 0.0, float("-inf"))  # [M, BLOCK_N]
        acc1, acc2, m_i, l_i = _attend(
            q1, q2, acc1, acc2, m_i, l_i, k_row, v_row, pos, n_ok, bias,
            sk_t, sk_d, sv_t, sv_d, Dk, Dv, qk_scale,
            BLOCK_N, DK1, DK2, DV1, DV2, DOT_F32,
        )

    # -- phase 2: the other tokens' spans that are not inside one leader span --
    # A flat list of TOK * BLOCK_S entries (entry e = token e // BLOCK_S, slot e % BLOCK_S).
    offs_e = tl.arange(0, TOK * BLOCK_S)  # [E]
    e_tok = offs_e // BLOCK_S  # [E]
    e_ok = ((t0 + e_tok) < S) & ((offs_e % BLOCK_S) < n_spans)  # [E]
    e_ptr = r_base + (t0 + e_tok).to(tl.int64) * sr_s + (offs_e % BLOCK_S) * sr_n
    st1, en1 = _clamp_spans(tl.load(e_ptr, mask=e_ok, other=0),  # [E] each
                            tl.load(e_ptr + sr_e, mask=e_ok, other=0), seq_len)
    within = (stL[None, :] <= st1[:, None]) & (en1[:, None] <= enL[None, :])  # [E, BLOCK_S]
    contained = (tl.max(within.to(tl.int32), 1) > 0) | (e_tok == lead)  # [E]
    tiles2 = tl.where(contained, 0, (en1 - st1 + BLOCK_N - 1) // BLOCK_N)  # [E]
    cum2 = _prefix_sum(tiles2, TOK * BLOCK_S)  # [E]
    first2 = cum2 - tiles2  # [E]
    total2 = tl.sum(tiles2, 0)
    for j in range(0, total2):
        pos, end = _tile_bounds(j, st1, en1, first2, cum2, BLOCK_N, True)
        sel = (j >= first2) & (j < cum2)  # [E]
        tok = tl.sum(tl.where(sel, e_tok, 0), 0)  # the entry's token
        kp = pos + offs_n  # [BLOCK_N]
        n_ok = kp < end  # [BLOCK_N]
        covered = tl.max(((stL[:, None] <= kp[None, :]) & (kp[None, :] < enL[:, None])).to(tl.int32), 0) > 0  # [BLOCK_N]
        valid = (r_tok == tok)[:, None] & (n_ok & (covered == 0))[None, :]  # [M, BLOCK_N]
        bias = tl.where(valid, 0.0, float("-inf"))  # [M, BLOCK_N]
        acc1, acc2, m_i, l_i = _attend(
            q1, q2, acc1, acc2, m_i, l_i, k_row, v_row, pos, n_ok, bias,
            sk_t, sk_d, sv_t, sv_d, Dk, Dv, qk_scale,
            BLOCK_N, DK1, DK2, DV1, DV2, DOT_F32,
        )

    # -- normalise and store (an empty row: zeros and LSE = -inf) --
    empty = l_i == 0.0  # [M]
    inv_l = 1.0 / tl.where(empty, 1.0, l_i)  # [M]
    o_off = (b.to(tl.int64) * so_b + (t0 + r_tok).to(tl.int64) * so_s + g.to(tl.int64) * so_g
             + r_head.to(tl.int64) * so_h)  # [M]
    _store_out(O, o_off, r_ok, acc1, inv_l, 0, Dv, so_d, DV1)
    if DV2 > 0:
        _store_out(O, o_off, r_ok, acc2, inv_l, DV1, Dv, so_d, DV2)
    if HAS_LSE:
        lse = tl.where(empty, float("-inf"), (m_i + tl.log2(tl.where(empty, 1.0, l_i))) * LN2)  # [M]
        l_off = (b.to(tl.int64) * sl_b + (t0 + r_tok).to(tl.int64) * sl_s + g.to(tl.int64) * sl_g
                 + r_head.to(tl.int64) * sl_h)
        tl.store(LSE + l_off, lse, mask=r_ok)


# -- key-major forward: one program per chunk of a key tile's readers, partial results merged per row --


@triton.jit
def _keymajor_step(Q, OP, OP_SCALE, LP, ENTRIES, ORIGIN, ent, head, ok, b, g, h, Dk, Dv, qk_scale, kt1, kt2, v,
                   v_bad, e_tile, sq_b, sq_s, sq_g, sq_h, sq_d,
                   BLOCK_N: tl.constexpr, DK1: tl.constexpr, DK2: tl.constexpr, BLOCK_DV: tl.constexpr,
                   DOT_F32: tl.constexpr, ISOLATE: tl.constexpr):
    """The partial results of (entry, head) pairs ``[ROWS]`` against the program's key tile: each pair's
    softmax over the keys ``[lo, hi)`` of the tile its entry reads, normalised, stored at the pair's partial
    slot ``origin * h + head``: ``OP`` (float16) the result divided by ``2**e_tile`` (the tile's
    ``_partial_exponent``), ``OP_SCALE`` that power, ``LP`` the log2 LSE (``-inf`` with no key).  ``ISOLATE``: the
    value tile holds a non-finite value."""
    offs_n = tl.arange(0, BLOCK_N)  # [BLOCK_N]
    tok = tl.load(ENTRIES + ent * 2, mask=ok, other=0)  # [ROWS]
    bnd = tl.load(ENTRIES + ent * 2 + 1, mask=ok, other=0)  # [ROWS]; 0 on masked pairs: no key
    slot = tl.load(ORIGIN + ent, mask=ok, other=0) * h + head  # [ROWS] int64
    q_off = b * sq_b + tok.to(tl.int64) * sq_s + g * sq_g + head.to(tl.int64) * sq_h  # [ROWS]
    q1, q2 = _load_q(Q, q_off, ok, sq_d, Dk, DK1, DK2, DOT_F32)  # [ROWS, DK1], [ROWS, DK2]
    # -- scores of the keys each pair reads, log2 domain; -inf elsewhere (where, so an unread inf key stays out) --
    s = tl.dot(q1, kt1)  # [ROWS, BLOCK_N] fp32
    if DK2 > 0:
        s += tl.dot(q2, kt2)
    lo = bnd & 0xFFFF  # [ROWS]
    hi = bnd >> 16  # [ROWS]
    inside = (offs_n[None, :] >= lo[:, None]) & (offs_n[None, :] < hi[:, None])  # [ROWS, BLOCK_N]
    s = tl.where(inside, s * qk_scale, float("-inf"))  # [ROWS, BLOCK_N]
    # -- softmax over the tile's keys (one pass: the whole tile is here) --
    m = tl.max(s, 1)  # [ROWS]
    m_safe = tl.where(m == float("-inf"), 0.0, m)  # [ROWS]: a pair with no key gets p = 0, not NaN
    p = tl.exp2(s - m_safe[:, None])  # [ROWS, BLOCK_N]
    l = tl.sum(p, 1)  # [ROWS]
    if DOT_F32:
        o = tl.dot(p, v)  # [ROWS, BLOCK_DV]
    else:
        o = tl.dot(p.to(v.dtype), v)  # [ROWS, BLOCK_DV]
    if ISOLATE:
        # The tile holds a non-finite value (loaded as 0 in ``v``): a pair that reads its key gets NaN in that
        # column, as in exact arithmetic (p * inf summed, or 0 * inf), the others stay finite.
        reads_bad = tl.dot(inside.to(tl.float16), v_bad.to(tl.float16))  # [ROWS, BLOCK_DV] counts
        o = tl.where(reads_bad > 0, float("nan"), o)
    empty = l == 0.0  # [ROWS]
    l_safe = tl.where(empty, 1.0, l)  # [ROWS]
    lse2 = tl.where(empty, float("-inf"), m_safe + tl.log2(l_safe))  # [ROWS]
    # stored: the normalised result o / l divided by 2**e_tile in float16 (one multiply a value, the normalisation
    # folded in); the merge multiplies it back
    offs_dv = tl.arange(0, BLOCK_DV)  # [BLOCK_DV]
    tl.store(OP + slot[:, None] * Dv + offs_dv[None, :],  # [ROWS, BLOCK_DV]
             (o * (tl.exp2(-e_tile) / l_safe)[:, None]).to(OP.dtype.element_ty),
             mask=ok[:, None] & (offs_dv[None, :] < Dv))
    tl.store(OP_SCALE + slot, tl.exp2(e_tile) + tl.zeros_like(l), mask=ok)
    tl.store(LP + slot, lse2, mask=ok)


@triton.jit
def sel_fwd_keymajor_kernel(
    Q, K, V, OP, OP_SCALE, LP, ENTRIES, ORIGIN, CHUNKS,
    G, h, Dk, Dv, T, NT, qk_scale,
    sq_b, sq_s, sq_g, sq_h, sq_d,
    sk_b, sk_g, sk_t, sk_d,
    sv_b, sv_g, sv_t, sv_d,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    HP: tl.constexpr,
    DK1: tl.constexpr,
    DK2: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    """Partial selection attention of one chunk of one key tile's readers (key-major, for small groups).

    The reader list is the backward's (``readers.py``): ``CHUNKS [P, 4]`` int64 rows ``(tile, e0, e1, _)``
    (global tile ``(b * G + g) * NT + tile``, ``-1``: nothing to do), ``ENTRIES [E, 2]`` int32 ``(token,
    lo | hi << 16)``, ``ORIGIN [E]`` int64 the entry's slot ``row * per_row + k`` before the sort (row
    ``(b * S + s) * G + g``, ``k`` its k-th (span, tile) pair).  The K and V tile are loaded once; the chunk's
    (entry, head) pairs are walked ``ROWS`` at a time, ``ROWS // HP`` whole entries a step (``HP``: a power of
    two >= h), so a tile load serves every token that selected it however small h is.  Each pair's partial
    result goes to its own slot of ``OP [slots, h, Dv]`` (float16, scaled by ``OP_SCALE [slots, h]``) and ``LP
    [slots, h]``: no two programs write one place, and :func:`sel_fwd_keymajor_merge_kernel` merges a row's
    partials in slot order (deterministic).
    """
    qk_scale = tl.cast(qk_scale, tl.float32)
    # -- which chunk of which key tile this program owns (a padding chunk returns at once) --
    chunk = CHUNKS + tl.program_id(0).to(tl.int64) * 4
    tile_id = tl.load(chunk)
    if tile_id < 0:
        return
    e0, e1, _, _, b, g, k0 = _chunk_tile(chunk, tile_id, NT, G, BLOCK_N)

    # -- the key tile (transposed for the score dot) and the value tile, loaded once --
    offs_n = tl.arange(0, BLOCK_N)  # [BLOCK_N]
    n_ok = (k0 + offs_n) < T  # [BLOCK_N]
    k_tile = K + b * sk_b + g * sk_g + k0 * sk_t
    kt1 = _load_kt(k_tile, offs_n, n_ok, sk_t, sk_d, Dk, 0, DK1, DOT_F32)  # [DK1, BLOCK_N]
    if DK2 > 0:
        kt2 = _load_kt(k_tile, offs_n, n_ok, sk_t, sk_d, Dk, DK1, DK2, DOT_F32)  # [DK2, BLOCK_N]
    else:
        kt2 = kt1  # placeholder, never used
    v_off = b * sv_b + g * sv_g + (k0 + offs_n).to(tl.int64) * sv_t  # [BLOCK_N]
    v = _gather_rows(V, v_off, n_ok, sv_d, Dv, 0, BLOCK_DV, DOT_F32)  # [BLOCK_N, BLOCK_DV]
    # [BLOCK_N, BLOCK_DV]: NaN fails the comparison too (where, not ~: Triton 3.0's interpreter cannot invert a mask)
    v_bad = tl.where(tl.abs(v.to(tl.float32)) < float("inf"), 0, 1) > 0
    # A normalised partial result is a convex combination of the tile's value rows, so the tile's largest finite
    # magnitude bounds every one: one scale for the whole chunk (the non-finite columns are NaN whatever it is).
    v_max = tl.max(tl.max(tl.where(v_bad, 0.0, tl.abs(v.to(tl.float32))), 1), 0)
    e_tile = _partial_exponent(tl.log2(v_max))

    # -- the chunk's (entry, head) pairs; the isolating step only where the value tile is not all finite --
    r = tl.arange(0, ROWS)  # [ROWS]
    r_ent = r // HP  # [ROWS]
    head = r % HP  # [ROWS]
    if tl.max(tl.max(v_bad.to(tl.int32), 1), 0) == 0:
        for e in range(e0, e1, ROWS // HP):
            ok = (e + r_ent < e1) & (head < h)  # [ROWS]
            _keymajor_step(Q, OP, OP_SCALE, LP, ENTRIES, ORIGIN, e + r_ent, head, ok, b, g, h, Dk, Dv, qk_scale, kt1,
                           kt2, v, v_bad, e_tile, sq_b, sq_s, sq_g, sq_h, sq_d, BLOCK_N, DK1, DK2, BLOCK_DV, DOT_F32,
                           False)
    else:
        v = tl.where(v_bad, 0.0, v).to(v.dtype)
        for e in range(e0, e1, ROWS // HP):
            ok = (e + r_ent < e1) & (head < h)  # [ROWS]
            _keymajor_step(Q, OP, OP_SCALE, LP, ENTRIES, ORIGIN, e + r_ent, head, ok, b, g, h, Dk, Dv, qk_scale, kt1,
                           kt2, v, v_bad, e_tile, sq_b, sq_s, sq_g, sq_h, sq_d, BLOCK_N, DK1, DK2, BLOCK_DV, DOT_F32,
                           True)


@triton.jit
def _load_partial_out(OP, OP_SCALE, LP, slot, live, offs_dv, Dv):
    """One key-major partial result of pairs ``[PAIRS]`` at ``slot``: its log2 LSE (``-inf`` where not ``live``),
    its float16 values ``[PAIRS, BLOCK_DV]`` (zeros) and their scale (1)."""
    lk = tl.load(LP + slot, mask=live, other=float("-inf"))
    op = tl.load(OP + slot[:, None] * Dv + offs_dv[None, :], mask=live[:, None] & (offs_dv[None, :] < Dv), other=0.0)
    return lk, op, tl.load(OP_SCALE + slot, mask=live, other=1.0)


@triton.jit
def sel_fwd_keymajor_merge_kernel(
    OP, OP_SCALE, LP, SPANS, O, LSE,
    S, G, h, Dv, n_spans, T, per_row, n_rows,
    sr_b, sr_s, sr_g, sr_n, sr_e,
    so_b, so_s, so_g, so_h, so_d,
    sl_b, sl_s, sl_g, sl_h,
    BLOCK_N: tl.constexpr,
    PAIRS: tl.constexpr,
    HP: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    HAS_LSE: tl.constexpr,
):
    """Merge the key-major partial results of ``PAIRS // HP`` rows into their output (and LSE).

    A row's partials are its (span, key tile) pairs in the order ``sel_bwd_reader_keys_kernel`` numbers them
    (spans in slot order, tiles in key order, at most ``per_row``): this kernel counts them the same way from
    the spans, and folds them (each one's float16 values times its ``OP_SCALE``) in that order with an online LSE
    merge, so the result does not depend on which program computed which partial.  A row without keys stores
    zeros and LSE = -inf.
    """
    # -- the (row, head) pairs of this program and how many partials each row has --
    row, head, ok, b, s, g, total = _merge_rows(SPANS, S, G, h, n_spans, T, per_row, n_rows, sr_b, sr_s, sr_g, sr_n,
                                                sr_e, BLOCK_N, PAIRS, HP, BLOCK_S)
    # -- online LSE merge over the row's partials, in order.  The loads of partial k + 1 go out before the
    # arithmetic of partial k, so each row has two in flight: a kernel's num_stages pipelines only loads that feed
    # a dot, and tl.range's pipelining (through shared memory) made this loop several times slower --
    offs_dv = tl.arange(0, BLOCK_DV)  # [BLOCK_DV]
    m = tl.full((PAIRS,), float("-inf"), tl.float32)  # [PAIRS]
    l = tl.zeros((PAIRS,), tl.float32)  # [PAIRS]
    acc = tl.zeros((PAIRS, BLOCK_DV), tl.float32)  # [PAIRS, BLOCK_DV]
    lk_next, op_next, scale_next = _load_partial_out(OP, OP_SCALE, LP, row * per_row * h + head, ok & (0 < total),
                                                     offs_dv, Dv)
    for k in range(0, per_row):
        lk, op, scale = lk_next, op_next, scale_next  # [PAIRS], [PAIRS, BLOCK_DV], [PAIRS]
        lk_next, op_next, scale_next = _load_partial_out(OP, OP_SCALE, LP, (row * per_row + k + 1) * h + head,
                                                         ok & (k + 1 < total), offs_dv, Dv)
        m_new = tl.maximum(m, lk)  # [PAIRS]
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # [PAIRS]
        alpha = tl.exp2(m - m_safe)  # [PAIRS]
        w = tl.exp2(lk - m_safe)  # [PAIRS]
        acc = acc * alpha[:, None] + op.to(tl.float32) * (scale * w)[:, None]
        l = l * alpha + w
        m = m_new
    # -- normalise and store --
    empty = l == 0.0  # [PAIRS]
    o_off = b * so_b + s * so_s + g * so_g + head.to(tl.int64) * so_h  # [PAIRS]
    tl.store(O + o_off[:, None] + offs_dv[None, :] * so_d,  # [PAIRS, BLOCK_DV]
             (acc * (1.0 / tl.where(empty, 1.0, l))[:, None]).to(O.dtype.element_ty),
             mask=ok[:, None] & (offs_dv[None, :] < Dv))
    if HAS_LSE:
        m_fin = tl.where(m == float("-inf"), 0.0, m)
        lse = tl.where(empty, float("-inf"), (m_fin + tl.log2(tl.where(empty, 1.0, l))) * LN2)  # [PAIRS]
        tl.store(LSE + b * sl_b + s * sl_s + g * sl_g + head.to(tl.int64) * sl_h, lse, mask=ok)
