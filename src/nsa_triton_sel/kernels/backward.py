"""Triton kernels for the backward of NSA selection attention.

This module imports only ``triton`` (and the shared helpers of ``common.py``, which imports
only ``triton``): the compile-smoke harness loads it in child processes without torch.
Same contract as the forward (``forward.py``): ``ranges [B, S, G, n, 2]`` of disjoint
``[start, end)`` spans per row ``(b, s, g)``, ``q [B, S, G, h, Dk]``, ``k [B, G, T, Dk]``,
``v [B, G, T, Dv]``, ``out``/``grad_out [B, S, G, h, Dv]``, natural-log ``lse [B, S, G, h]``
(``-inf`` for a row without keys), any strides.  With ``P = softmax(scale * q K^T)`` over a
row's keys, ``delta = rowsum(dO * O) - dlse`` (``dlse``: the gradient of the LSE output, 0 when unused;
``d lse / d s = P``) and ``dS = P * (dO V^T - delta)``: ``dq = scale * dS K``, ``dk = scale * dS^T q``,
``dv = P^T dO``.

Launched in this order by ``launch.backward``:

- :func:`sel_bwd_dq_kernel`, query-centric and group-centric like the forward: one program
  per (token, group[, head chunk]) with the h heads as the M dimension of ``tl.dot`` (padded
  to >= 16, masked), walking the row's spans as one flattened loop over key tiles with scalar
  bounds.  It recomputes ``P`` from the forward's LSE (no second online softmax) and by
  default also computes and stores ``delta`` (the row's O is h x Dv more elements next to
  the dO it reads anyway), so there is no separate preprocessing pass.  With ``LOAD_DELTA``
  (the launcher's ``delta="fp32"``) it loads delta computed before from O recomputed in fp32.  It
  subtracts ``dlse`` (loaded per row, a stride-0 zero when the LSE has no gradient) either way.
- for small groups, where the forward ran key-major (``plan.call``: ``Plan.dq_groups_per_pass``), the whole
  backward runs key-major instead, per pass over the KV heads (the workspace bound of the forward):
  :func:`sel_bwd_dq_keymajor_delta_kernel` (delta = ``rowsum(dO * O) - dlse`` and the non-finite flag, a streaming
  pass over O, dO and q), then on the forward's reader list :func:`sel_bwd_keymajor_kernel`, the dk/dv kernel's
  walk (below) that also stores each (row, key tile, head) pair's partial dq in its own float32 slot, from the
  same gathers, P and dS; :func:`sel_bwd_dq_keymajor_merge_kernel` sums a row's partials in slot order.  A tile
  with a non-finite k or v value gives NaN to its readers' dq only.
- :func:`sel_bwd_reader_keys_kernel`, :func:`sel_bwd_reader_entries_kernel`: the reader list of the dk/dv
  kernel (``readers.py``): each row's (span, key tile) pairs as (tile, token) keys and their span slots,
  stably sorted by torch, then decoded into the entries below.
- :func:`sel_bwd_dkdv_kernel`, key-centric: the launcher inverts the selection into a CSR
  (for each ``BLOCK_N``-key tile of each ``(b, g)``, the sorted list of reader entries
  ``(token, [lo, hi) within the tile)``, one per (row, span) intersecting the tile) and cuts
  each tile's list into chunks of at most ``chunk`` entries.  One program per chunk keeps its
  K/V tile and its dk/dv accumulators on chip and walks the (entry, head) pairs ``ROWS`` at a
  time, so every MMA is ``BLOCK_N x ROWS x D`` however small h is (``ROWS`` mixes several
  tokens' heads; h need not divide it).  The keys of the tile are the M dimension.  A pair whose q
  or dO is not finite must be isolated (q = dO = 0, LSE = NaN, so only the keys it read get NaN).
  A check of every gathered pair stands between each gather and its MMA, and such rows are rare: the dq
  kernels, which read every row's q and dO once anyway, raise a one-word flag (``NONFINITE``, a plain
  store of 1, the same value from every writer) and the dk/dv kernel takes the isolating walk only when
  it is raised.  The reader list is sized from the shapes (``readers.py``): no host read.
- :func:`sel_bwd_reduce_kernel`: a tile read by more than ``chunk`` entries (a "hot" tile:
  block 0, the local blocks) is split over several programs so it does not serialise the
  launch; those write fp32 partial sums to a workspace, and this kernel adds them up in
  chunk order.

**Deterministic**: no atomics anywhere (the ``NONFINITE`` flag is a store of one constant). The CSR
is built with a stable sort, entries and chunks have a fixed order, partial sums are reduced in a
fixed order, so repeated runs give bit-identical gradients (on the same GPU, Triton version and
launch configuration).

Like the forward: Dk is covered by two power-of-two slices ``DK1 + DK2`` (192 = 128 + 64);
raw pointers with masks of the exact tile shape; int64 row offsets; ``DOT_F32`` upcasts the
dot operands (the launchers set it only under the Triton interpreter for bf16, whose
``tl.dot`` the interpreter computes wrongly).  An empty row contributes nothing and gets a
zero dq; an LSE of ``-inf`` on a row that does have keys (inconsistent input) also gives
zero, never NaN.  The softmax runs in the log2 domain as in the forward: ``qk_scale`` is
``scale * log2(e)`` and the stored natural-log LSE is converted once per row (``_log2_lse``).

Reading aid: every tile carries its shape in a comment (``# [BLOCK_H, DK1]``), and the steps
of each kernel are marked (``# -- scores: q @ k^T --``).  M is the row count of the dq kernels'
dots: ``BLOCK_H`` heads (:func:`sel_bwd_dq_kernel`) or ``TOK * HP`` (token, head) rows
(:func:`sel_bwd_dq_tok_kernel`); the dk/dv kernel's dots have the ``BLOCK_N`` keys as M and
``ROWS`` (entry, head) pairs as N; ``E = TOK * BLOCK_S`` is the flat span list of phase 2.
"""

import triton
import triton.language as tl

from .common import (LOG2E, _chunk_tile, _clamp_spans, _gather_rows, _group_heads, _key_value_rows,
                     _load_q, _merge_rows, _partial_exponent, _prefix_sum, _tile_bounds, _token_rows)


@triton.jit
def _log2_lse(lse):
    """The natural-log LSE in base 2; ``-inf`` (a row without keys) becomes ``+inf`` so that
    ``exp2(s - lse)`` is 0, not inf, if such a row is ever paired with a key."""
    lse2 = lse * LOG2E
    return tl.where(lse2 == float("-inf"), float("inf"), lse2)


@triton.jit
def _at_most_0(x):
    """``min(x, 0)`` keeping NaN (``tl.minimum`` may drop it on a GPU): a probability recomputed from
    the stored LSE is at most 1.  With logits near 1e8 the fp32 rounding of ``s - lse`` reaches
    tens of units, and ``exp2`` of that overflowed P (fp16 dv inf/off by tens of percent)."""
    return tl.where(x > 0.0, 0.0, x)


@triton.jit
def _finite_rows(x):
    """``[M]``: whether every element of the row of ``x [M, D]`` is finite (``|x| < inf``: NaN fails too)."""
    return tl.min((tl.abs(x.to(tl.float32)) < float("inf")).to(tl.int32), 1) > 0


@triton.jit
def _flag_nonfinite(NONFINITE, q1, q2, do, DK2: tl.constexpr):
    """Store 1 at ``NONFINITE`` if a row of q (``q1``, ``q2`` when ``DK2``) or ``do`` is not finite (rows
    outside the program are loaded as 0).  Every writer stores the same constant: no race changes the value."""
    ok = _finite_rows(q1) & _finite_rows(do)  # [M]
    if DK2 > 0:
        ok = ok & _finite_rows(q2)
    tl.store(NONFINITE, 1, mask=tl.min(ok.to(tl.int32), 0) == 0)


@triton.jit
def _load_rows(X, b, s, g, offs_h, h, D, sx_b, sx_s, sx_g, sx_h, sx_d, BLOCK_D: tl.constexpr):
    """The ``[BLOCK_H, BLOCK_D]`` rows of heads ``offs_h`` of row (b, s, g) of a 5-D tensor (0 outside)."""
    offs_d = tl.arange(0, BLOCK_D)  # [BLOCK_D]
    base = X + b.to(tl.int64) * sx_b + s.to(tl.int64) * sx_s + g.to(tl.int64) * sx_g
    return tl.load(base + offs_h[:, None] * sx_h + offs_d[None, :] * sx_d,  # [BLOCK_H, BLOCK_D]
                   mask=(offs_h < h)[:, None] & (offs_d < D)[None, :], other=0.0)


@triton.jit
def _delta(O, DO, b, s, g, offs_h, h, Dv, so_b, so_s, so_g, so_h, so_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d,
           BLOCK_DV: tl.constexpr):
    """``(dO rows, rowsum(dO * O) in fp32)`` of heads ``offs_h`` of row (b, s, g)."""
    o = _load_rows(O, b, s, g, offs_h, h, Dv, so_b, so_s, so_g, so_h, so_d, BLOCK_DV)  # [BLOCK_H, BLOCK_DV]
    do = _load_rows(DO, b, s, g, offs_h, h, Dv, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d, BLOCK_DV)  # [BLOCK_H, BLOCK_DV]
    return do, tl.sum(do.to(tl.float32) * o.to(tl.float32), 1)  # [BLOCK_H, BLOCK_DV], [BLOCK_H]


@triton.jit
def _dq_tile(
    q1, q2, do, lse2, delta, dq1, dq2,
    k_row, v_row, pos, n_ok, valid,
    sk_t, sk_d, sv_t, sv_d, Dk, Dv, qk_scale,
    BLOCK_N: tl.constexpr, DK1: tl.constexpr, DK2: tl.constexpr, BLOCK_DV: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    """Fold the key tile at ``pos`` into ``dq``: ``n_ok [BLOCK_N]`` says which keys may be
    loaded, ``valid`` (``[1 or M, BLOCK_N]``) which (row, key) pairs count.  With ``DK2 == 0``,
    ``q2``/``dq2`` are placeholders, returned untouched."""
    offs_n = tl.arange(0, BLOCK_N)  # [BLOCK_N]
    offs_d1 = tl.arange(0, DK1)  # [DK1]
    offs_dv = tl.arange(0, BLOCK_DV)  # [BLOCK_DV]
    k_tile = k_row + pos.to(tl.int64) * sk_t
    # -- scores: q @ k^T --
    # K tiles [BLOCK_N, D]: the dq dot takes them as they are, the score dot transposed
    # (ldmatrix.trans from the same shared-memory copy).
    k1 = tl.load(k_tile + offs_n[:, None] * sk_t + offs_d1[None, :] * sk_d,  # [BLOCK_N, DK1]
                 mask=n_ok[:, None] & (offs_d1[None, :] < Dk), other=0.0)
    if DOT_F32:
        k1 = k1.to(tl.float32)
    qk = tl.dot(q1, tl.trans(k1))  # [M, BLOCK_N] fp32
    if DK2 > 0:
        offs_d2 = DK1 + tl.arange(0, DK2)  # [DK2]
        k2 = tl.load(k_tile + offs_n[:, None] * sk_t + offs_d2[None, :] * sk_d,  # [BLOCK_N, DK2]
                     mask=n_ok[:, None] & (offs_d2[None, :] < Dk), other=0.0)
        if DOT_F32:
            k2 = k2.to(tl.float32)
        qk += tl.dot(q2, tl.trans(k2))
    # -- P from the forward's LSE (no second online softmax), dS = P * (dO V^T - delta) --
    p = tl.where(valid, tl.exp2(_at_most_0(qk * qk_scale - lse2[:, None])), 0.0)  # [M, BLOCK_N]
    vt = tl.load(  # [BLOCK_DV, BLOCK_N]: V loaded transposed
                 v_row + pos.to(tl.int64) * sv_t + offs_dv[:, None] * sv_d + offs_n[None, :] * sv_t,
                 mask=(offs_dv[:, None] < Dv) & n_ok[None, :], other=0.0)
    if DOT_F32:
        vt = vt.to(tl.float32)
    dp = tl.dot(do, vt)  # [M, BLOCK_N]: dO V^T
    ds = (p * (dp - delta[:, None])).to(k1.dtype)  # [M, BLOCK_N]: dS, in K's dtype for the MMA
    # -- accumulate dS @ K, one power-of-two slice of Dk at a time --
    dq1 += tl.dot(ds, k1)  # [M, DK1]
    if DK2 > 0:
        dq2 += tl.dot(ds, k2)  # [M, DK2]
    return dq1, dq2


@triton.jit
def sel_bwd_dq_kernel(
    Q, K, V, O, DO, LSE, DLSE, DELTA, DQ, SPANS, NONFINITE,
    S, G, h, Dk, Dv, n_spans, qk_scale, scale,
    sq_b, sq_s, sq_g, sq_h, sq_d,
    sk_b, sk_g, sk_t, sk_d,
    sv_b, sv_g, sv_t, sv_d,
    so_b, so_s, so_g, so_h, so_d,
    sdo_b, sdo_s, sdo_g, sdo_h, sdo_d,
    sl_b, sl_s, sl_g, sl_h,
    sdl_b, sdl_s, sdl_g, sdl_h,
    sr_b, sr_s, sr_g, sr_n, sr_e,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DK1: tl.constexpr,
    DK2: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_S: tl.constexpr,
    LOAD_DELTA: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    """dq (and delta) of one (token, group, head chunk).

    ``DQ`` is a contiguous ``[B, S, G, h, Dk]`` tensor in q's dtype, ``DELTA`` a contiguous
    float32 ``[B, S, G, h]`` (written here, or read with ``LOAD_DELTA``).
    """
    # -- which (token, group, head chunk) this program owns; the group's query heads are the M
    # rows of every dot --
    token = tl.program_id(0)
    b, s, g, offs_h = _group_heads(token, tl.program_id(1), S, h, BLOCK_H)  # scalars, [BLOCK_H]
    h_ok = offs_h < h  # [BLOCK_H]
    offs_d1 = tl.arange(0, DK1)  # [DK1]

    # -- delta = rowsum(dO * O) in fp32, stored for the dk/dv kernel (or, with LOAD_DELTA,
    # computed before by the launcher from O recomputed in fp32) --
    row = (token.to(tl.int64) * G + g) * h  # scalar int64: first head's row of DELTA / DQ
    if LOAD_DELTA:
        do = _load_rows(DO, b, s, g, offs_h, h, Dv,  # [BLOCK_H, BLOCK_DV]
                        sdo_b, sdo_s, sdo_g, sdo_h, sdo_d, BLOCK_DV)
        delta = tl.load(DELTA + row + offs_h, mask=h_ok, other=0.0)  # [BLOCK_H]
    else:
        do, delta = _delta(O, DO, b, s, g, offs_h, h, Dv,  # [BLOCK_H, BLOCK_DV], [BLOCK_H]
                           so_b, so_s, so_g, so_h, so_d,
                           sdo_b, sdo_s, sdo_g, sdo_h, sdo_d, BLOCK_DV)
    # the LSE's own gradient: d lse / d s = P, so dS = P * (dO V^T - (delta - dlse))
    dl_row = DLSE + b.to(tl.int64) * sdl_b + s.to(tl.int64) * sdl_s + g.to(tl.int64) * sdl_g
    delta -= tl.load(dl_row + offs_h * sdl_h, mask=h_ok, other=0.0)  # [BLOCK_H]
    tl.store(DELTA + row + offs_h, delta, mask=h_ok)  # for the dk/dv kernel

    # -- the forward's LSE (P is recomputed from it) and q --
    l_row = LSE + b.to(tl.int64) * sl_b + s.to(tl.int64) * sl_s + g.to(tl.int64) * sl_g
    lse2 = _log2_lse(tl.load(l_row + offs_h * sl_h, mask=h_ok, other=0.0))  # [BLOCK_H]

    # q addressed from the row base plus int32 head offsets (not common._load_q's int64 offsets):
    # the compiled kernel is kept exactly as it was measured.
    q_row = Q + b.to(tl.int64) * sq_b + s.to(tl.int64) * sq_s + g.to(tl.int64) * sq_g
    q1 = tl.load(q_row + offs_h[:, None] * sq_h + offs_d1[None, :] * sq_d,  # [BLOCK_H, DK1]
                 mask=h_ok[:, None] & (offs_d1[None, :] < Dk), other=0.0)
    if DOT_F32:
        q1 = q1.to(tl.float32)
        do = do.to(tl.float32)
    dq1 = tl.zeros((BLOCK_H, DK1), tl.float32)  # [BLOCK_H, DK1]
    if DK2 > 0:
        offs_d2 = DK1 + tl.arange(0, DK2)  # [DK2]
        q2 = tl.load(q_row + offs_h[:, None] * sq_h + offs_d2[None, :] * sq_d,  # [BLOCK_H, DK2]
                     mask=h_ok[:, None] & (offs_d2[None, :] < Dk), other=0.0)
        if DOT_F32:
            q2 = q2.to(tl.float32)
        dq2 = tl.zeros((BLOCK_H, DK2), tl.float32)  # [BLOCK_H, DK2]
    else:
        q2 = q1  # placeholders, never used
        dq2 = dq1
    _flag_nonfinite(NONFINITE, q1, q2, do, DK2)

    # -- the row's spans, and how many BLOCK_N tiles each one needs (as in the forward) --
    # Ranges only (the operator converts block indices), already clamped into [0, T] on the device
    # (contract.clamp_ranges), so the kernel needs no seq_len and no _clamp_spans.
    offs_s = tl.arange(0, BLOCK_S)  # [BLOCK_S]
    r_row = SPANS + b.to(tl.int64) * sr_b + s.to(tl.int64) * sr_s + g.to(tl.int64) * sr_g
    s_ok = offs_s < n_spans  # [BLOCK_S]
    starts = tl.load(r_row + offs_s * sr_n, mask=s_ok, other=0).to(tl.int32)  # [BLOCK_S]
    ends = tl.load(r_row + offs_s * sr_n + sr_e, mask=s_ok, other=0).to(tl.int32)  # [BLOCK_S]
    tiles = (tl.maximum(ends - starts, 0) + BLOCK_N - 1) // BLOCK_N  # [BLOCK_S]
    cum = _prefix_sum(tiles, BLOCK_S)  # [BLOCK_S] inclusive
    first = cum - tiles  # [BLOCK_S]
    total = tl.sum(tiles, 0)  # scalar

    # -- one loop over the row's key tiles, all spans flattened --
    k_row = K + b.to(tl.int64) * sk_b + g.to(tl.int64) * sk_g
    v_row = V + b.to(tl.int64) * sv_b + g.to(tl.int64) * sv_g
    offs_n = tl.arange(0, BLOCK_N)  # [BLOCK_N]
    for j in range(0, total):
        pos, end = _tile_bounds(j, starts, ends, first, cum, BLOCK_N, True)  # scalars
        n_ok = (pos + offs_n) < end  # [BLOCK_N]
        dq1, dq2 = _dq_tile(  # [BLOCK_H, DK1], [BLOCK_H, DK2]
                            q1, q2, do, lse2, delta, dq1, dq2, k_row, v_row, pos, n_ok, n_ok[None, :],
                            sk_t, sk_d, sv_t, sv_d, Dk, Dv, qk_scale, BLOCK_N, DK1, DK2, BLOCK_DV, DOT_F32)

    # -- store dq (contiguous, q's dtype), with the softmax scale applied once --
    dq_row = DQ + row * Dk
    tl.store(dq_row + offs_h[:, None] * Dk + offs_d1[None, :],  # [BLOCK_H, DK1]
             (dq1 * scale).to(DQ.dtype.element_ty),
             mask=h_ok[:, None] & (offs_d1[None, :] < Dk))
    if DK2 > 0:
        tl.store(dq_row + offs_h[:, None] * Dk + offs_d2[None, :],  # [BLOCK_H, DK2]
                 (dq2 * scale).to(DQ.dtype.element_ty),
                 mask=h_ok[:, None] & (offs_d2[None, :] < Dk))


@triton.jit
def sel_bwd_dq_tok_kernel(
    Q, K, V, O, DO, LSE, DLSE, DELTA, DQ, SPANS, NONFINITE,
    S, G, h, Dk, Dv, n_spans, qk_scale, scale,
    sq_b, sq_s, sq_g, sq_h, sq_d,
    sk_b, sk_g, sk_t, sk_d,
    sv_b, sv_g, sv_t, sv_d,
    so_b, so_s, so_g, so_h, so_d,
    sdo_b, sdo_s, sdo_g, sdo_h, sdo_d,
    sl_b, sl_s, sl_g, sl_h,
    sdl_b, sdl_s, sdl_g, sdl_h,
    sr_b, sr_s, sr_g, sr_n, sr_e,
    TOK: tl.constexpr,
    HP: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DK1: tl.constexpr,
    DK2: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_S: tl.constexpr,
    LOAD_DELTA: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    """dq (and delta) of ``TOK`` consecutive tokens of one group: M = TOK x HP rows.

    The multi-token forward's walk (``forward.sel_fwd_tok_kernel``), for selections that
    neighbouring tokens share: phase 1 walks the spans of the program's last token (the
    leader) and folds each K/V tile into every row whose token selected those keys; phase 2
    walks, per other token, its spans that are not inside a leader span, masking the keys a
    leader span covers.  Every selected (row, key) pair is counted exactly once.
    """
    # -- which (batch, first token t0, group) this program owns; rows: (token, head) pairs, token-major --
    b, g, t0, r_tok, r_head, r_ok = _token_rows(S, h, TOK, HP)  # scalars, [M] x 3

    # -- dO and delta of the rows (as in sel_bwd_dq_kernel) --
    tok64 = (t0 + r_tok).to(tl.int64)  # [M]
    b64 = b.to(tl.int64)
    g64 = g.to(tl.int64)
    row = ((b64 * S + tok64) * G + g64) * h + r_head  # [M] rows of DELTA / DQ
    do_off = b64 * sdo_b + tok64 * sdo_s + g64 * sdo_g + r_head * sdo_h  # [M]
    if LOAD_DELTA:
        do = _gather_rows(DO, do_off, r_ok, sdo_d, Dv, 0, BLOCK_DV, DOT_F32)  # [M, BLOCK_DV]
        delta = tl.load(DELTA + row, mask=r_ok, other=0.0)  # [M]
    else:
        o_off = b64 * so_b + tok64 * so_s + g64 * so_g + r_head * so_h  # [M]
        o = _gather_rows(O, o_off, r_ok, so_d, Dv, 0, BLOCK_DV, False)  # [M, BLOCK_DV]
        do = _gather_rows(DO, do_off, r_ok, sdo_d, Dv, 0, BLOCK_DV, False)  # [M, BLOCK_DV]
        delta = tl.sum(do.to(tl.float32) * o.to(tl.float32), 1)  # [M]
        if DOT_F32:
            do = do.to(tl.float32)
    # the LSE's own gradient (as in sel_bwd_dq_kernel)
    delta -= tl.load(DLSE + b64 * sdl_b + tok64 * sdl_s + g64 * sdl_g + r_head * sdl_h, mask=r_ok, other=0.0)
    tl.store(DELTA + row, delta, mask=r_ok)  # for the dk/dv kernel
    # -- the forward's LSE and q --
    lse2 = _log2_lse(  # [M]
        tl.load(LSE + b64 * sl_b + tok64 * sl_s + g64 * sl_g + r_head * sl_h, mask=r_ok, other=0.0))
    q_off = b64 * sq_b + tok64 * sq_s + g64 * sq_g + r_head * sq_h  # [M]
    q1, q2 = _load_q(Q, q_off, r_ok, sq_d, Dk, DK1, DK2, DOT_F32)  # [M, DK1], [M, DK2]
    _flag_nonfinite(NONFINITE, q1, q2, do, DK2)
    dq1 = tl.zeros((TOK * HP, DK1), tl.float32)  # [M, DK1]
    if DK2 > 0:
        dq2 = tl.zeros((TOK * HP, DK2), tl.float32)  # [M, DK2]
    else:
        dq2 = dq1  # placeholder, never used
    k_row = K + b64 * sk_b + g64 * sk_g
    v_row = V + b64 * sv_b + g64 * sv_g

    # -- spans of all TOK tokens; padding and tokens past S are empty --
    # The ranges were clamped into [0, T] (contract.clamp_ranges), so only end >= start is enforced here.
    r_base = SPANS + b64 * sr_b + g64 * sr_g
    offs_t = tl.arange(0, TOK)  # [TOK]
    offs_s = tl.arange(0, BLOCK_S)  # [BLOCK_S]
    sp_ok = ((t0 + offs_t) < S)[:, None] & (offs_s < n_spans)[None, :]  # [TOK, BLOCK_S]
    sp_ptr = r_base + (t0 + offs_t).to(tl.int64)[:, None] * sr_s + offs_s[None, :] * sr_n  # [TOK, BLOCK_S]
    st2 = tl.load(sp_ptr, mask=sp_ok, other=0).to(tl.int32)  # [TOK, BLOCK_S]
    en2 = tl.maximum(tl.load(sp_ptr + sr_e, mask=sp_ok, other=0).to(tl.int32), st2)  # [TOK, BLOCK_S]

    # -- phase 1: the leader's tiles, each into the rows whose token selected its keys --
    lead = tl.minimum(TOK - 1, S - 1 - t0)
    l_ok = offs_s < n_spans  # [BLOCK_S]
    l_ptr = r_base + (t0 + lead).to(tl.int64) * sr_s + offs_s * sr_n  # [BLOCK_S]
    stL = tl.load(l_ptr, mask=l_ok, other=0).to(tl.int32)  # [BLOCK_S]
    enL = tl.maximum(tl.load(l_ptr + sr_e, mask=l_ok, other=0).to(tl.int32), stL)  # [BLOCK_S]
    tilesL = (enL - stL + BLOCK_N - 1) // BLOCK_N  # [BLOCK_S]
    cumL = _prefix_sum(tilesL, BLOCK_S)  # [BLOCK_S]
    firstL = cumL - tilesL  # [BLOCK_S]
    totalL = tl.sum(tilesL, 0)  # scalar
    offs_n = tl.arange(0, BLOCK_N)  # [BLOCK_N]
    for j in range(0, totalL):
        pos, end = _tile_bounds(j, stL, enL, firstL, cumL, BLOCK_N, True)  # scalars
        kp = pos + offs_n  # [BLOCK_N] key positions
        n_ok = kp < end  # [BLOCK_N]
        # [TOK, BLOCK_S, BLOCK_N]: key kp[n] lies in span (t, i) of the program's tokens
        inside = (st2[:, :, None] <= kp[None, None, :]) & (kp[None, None, :] < en2[:, :, None])
        member = tl.max(inside.to(tl.int32), 1) > 0  # [TOK, BLOCK_N]
        # [M, BLOCK_N]: each token's membership repeated for its HP head rows
        valid = tl.reshape(tl.broadcast_to(member[:, None, :], (TOK, HP, BLOCK_N)), (TOK * HP, BLOCK_N))
        dq1, dq2 = _dq_tile(q1, q2, do, lse2, delta, dq1, dq2, k_row, v_row, pos, n_ok,  # [M, DK1], [M, DK2]
                            valid & n_ok[None, :], sk_t, sk_d, sv_t, sv_d, Dk, Dv, qk_scale,
                            BLOCK_N, DK1, DK2, BLOCK_DV, DOT_F32)

    # -- phase 2: the other tokens' spans not inside one leader span --
    # A flat list of TOK * BLOCK_S entries (entry e = token e // BLOCK_S, slot e % BLOCK_S).
    offs_e = tl.arange(0, TOK * BLOCK_S)  # [E]
    e_tok = offs_e // BLOCK_S  # [E]
    e_ok = ((t0 + e_tok) < S) & ((offs_e % BLOCK_S) < n_spans)  # [E]
    e_ptr = r_base + (t0 + e_tok).to(tl.int64) * sr_s + (offs_e % BLOCK_S) * sr_n  # [E]
    st1 = tl.load(e_ptr, mask=e_ok, other=0).to(tl.int32)  # [E]
    en1 = tl.maximum(tl.load(e_ptr + sr_e, mask=e_ok, other=0).to(tl.int32), st1)  # [E]
    within = (stL[None, :] <= st1[:, None]) & (en1[:, None] <= enL[None, :])  # [E, BLOCK_S]
    contained = (tl.max(within.to(tl.int32), 1) > 0) | (e_tok == lead)  # [E]
    tiles2 = tl.where(contained, 0, (en1 - st1 + BLOCK_N - 1) // BLOCK_N)  # [E]
    cum2 = _prefix_sum(tiles2, TOK * BLOCK_S)  # [E]
    first2 = cum2 - tiles2  # [E]
    total2 = tl.sum(tiles2, 0)  # scalar
    for j in range(0, total2):
        pos, end = _tile_bounds(j, st1, en1, first2, cum2, BLOCK_N, True)  # scalars
        tok = tl.sum(tl.where((j >= first2) & (j < cum2), e_tok, 0), 0)  # scalar: the entry's token
        kp = pos + offs_n  # [BLOCK_N] key positions
        n_ok = kp < end  # [BLOCK_N]
        # [BLOCK_N]: keys a leader span covers, already counted in phase 1
        covered = tl.max(((stL[:, None] <= kp[None, :]) & (kp[None, :] < enL[:, None])).to(tl.int32), 0) > 0
        valid = (r_tok == tok)[:, None] & (n_ok & (covered == 0))[None, :]  # [M, BLOCK_N]
        dq1, dq2 = _dq_tile(  # [M, DK1], [M, DK2]
                            q1, q2, do, lse2, delta, dq1, dq2, k_row, v_row, pos, n_ok, valid,
                            sk_t, sk_d, sv_t, sv_d, Dk, Dv, qk_scale, BLOCK_N, DK1, DK2, BLOCK_DV, DOT_F32)

    # -- store dq (contiguous, q's dtype), with the softmax scale applied once --
    offs_d1 = tl.arange(0, DK1)  # [DK1]
    tl.store(DQ + row[:, None] * Dk + offs_d1[None, :], (dq1 * scale).to(DQ.dtype.element_ty),  # [M, DK1]
             mask=r_ok[:, None] & (offs_d1[None, :] < Dk))
    if DK2 > 0:
        offs_d2 = DK1 + tl.arange(0, DK2)  # [DK2]
        tl.store(DQ + row[:, None] * Dk + offs_d2[None, :], (dq2 * scale).to(DQ.dtype.element_ty),  # [M, DK2]
                 mask=r_ok[:, None] & (offs_d2[None, :] < Dk))


@triton.jit
def _readers(ENTRIES, ent, ok):
    """``(tok, bnd) [ROWS]``: the token and key bounds ``lo | hi << 16`` of reader entries ``ent [ROWS]``."""
    tok = tl.load(ENTRIES + ent * 2, mask=ok, other=0)  # [ROWS]
    bnd = tl.load(ENTRIES + ent * 2 + 1, mask=ok, other=0)  # [ROWS]
    return tok, bnd


@triton.jit
def _pair_rows(Q, DO, LSE, DELTA, tok, head, ok, b, g, Dk, Dv,
               sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d, sl_b, sl_s, sl_g, sl_h,
               sd_b, sd_s, sd_g, sd_h, DK1: tl.constexpr, DK2: tl.constexpr, BLOCK_DV: tl.constexpr, DOT_F32: tl.constexpr):
    """The gathered rows of (token, head) pairs ``[ROWS]``: ``q1 [ROWS, DK1]``, ``q2 [ROWS, DK2]`` (``q1`` as a
    placeholder when ``DK2 == 0``), ``do [ROWS, BLOCK_DV]``, the log2 LSE and delta ``[ROWS]``."""
    q_off = b * sq_b + tok.to(tl.int64) * sq_s + g * sq_g + head.to(tl.int64) * sq_h  # [ROWS]
    do_off = b * sdo_b + tok.to(tl.int64) * sdo_s + g * sdo_g + head.to(tl.int64) * sdo_h  # [ROWS]
    l_off = b * sl_b + tok.to(tl.int64) * sl_s + g * sl_g + head.to(tl.int64) * sl_h  # [ROWS]
    d_off = b * sd_b + tok.to(tl.int64) * sd_s + g * sd_g + head.to(tl.int64) * sd_h  # [ROWS]
    q1 = _gather_rows(Q, q_off, ok, sq_d, Dk, 0, DK1, DOT_F32)  # [ROWS, DK1]
    do = _gather_rows(DO, do_off, ok, sdo_d, Dv, 0, BLOCK_DV, DOT_F32)  # [ROWS, BLOCK_DV]
    lse2 = _log2_lse(tl.load(LSE + l_off, mask=ok, other=0.0))  # [ROWS]
    delta = tl.load(DELTA + d_off, mask=ok, other=0.0)  # [ROWS]
    if DK2 > 0:
        q2 = _gather_rows(Q, q_off, ok, sq_d, Dk, DK1, DK2, DOT_F32)  # [ROWS, DK2]
    else:
        q2 = q1  # placeholder, never used
    return q1, q2, do, lse2, delta


@triton.jit
def _pair_step(q1, q2, do, lse2, delta, bnd, qk_scale, k1, k2, v, dk1, dk2, dv,
               BLOCK_N: tl.constexpr, DK2: tl.constexpr, ISOLATE: tl.constexpr):
    """Fold one step's (entry, head) pairs into ``dk1, dk2, dv``; also returns the step's ``dS^T`` ``[BLOCK_N,
    ROWS]`` (the key-major backward's partial dq reads it).  ``ISOLATE``: zero the q and dO of a pair whose q or dO
    is not finite (and give it a NaN LSE), so only the keys it read get NaN."""
    offs_n = tl.arange(0, BLOCK_N)  # [BLOCK_N]
    lo = bnd & 0xFFFF  # [ROWS]
    hi = bnd >> 16  # [ROWS]; 0 on masked rows: they see no key
    if ISOLATE:
        # A pair whose q or dO is not finite is isolated: q = dO = 0 and LSE = NaN, so only the keys it
        # read get NaN (as in exact arithmetic), not the tile's other keys (their P^T is 0, and 0 * inf is NaN).
        finite = _finite_rows(q1) & _finite_rows(do)  # [ROWS]
        if DK2 > 0:
            finite = finite & _finite_rows(q2)
            q2 = tl.where(finite[:, None], q2, tl.zeros_like(q2))
        q1 = tl.where(finite[:, None], q1, tl.zeros_like(q1))
        do = tl.where(finite[:, None], do, tl.zeros_like(do))
        lse2 = tl.where(finite, lse2, float("nan"))

    # -- transposed scores: keys are rows (M = BLOCK_N), (entry, head) pairs are columns --
    st = tl.dot(k1, tl.trans(q1))  # [BLOCK_N, ROWS] fp32
    if DK2 > 0:
        st += tl.dot(k2, tl.trans(q2))
    inside = (offs_n[:, None] >= lo[None, :]) & (offs_n[:, None] < hi[None, :])  # [BLOCK_N, ROWS]
    # -- P^T from the forward's LSE; dv += P^T dO, dk += dS^T q --
    pt = tl.where(inside, tl.exp2(_at_most_0(st * qk_scale - lse2[None, :])), 0.0)  # [BLOCK_N, ROWS]
    dv += tl.dot(pt.to(do.dtype), do)  # [BLOCK_N, BLOCK_DV]
    dpt = tl.dot(v, tl.trans(do))  # [BLOCK_N, ROWS] (dO V^T)^T
    # where, not pt * ...: a NaN row (delta) or a non-finite v of an unread key stays out of the others' dk
    dst = tl.where(inside, pt * (dpt - delta[None, :]), 0.0).to(q1.dtype)  # [BLOCK_N, ROWS] dS^T
    dk1 += tl.dot(dst, q1)  # [BLOCK_N, DK1]
    if DK2 > 0:
        dk2 += tl.dot(dst, q2)  # [BLOCK_N, DK2]
    return dk1, dk2, dv, dst


@triton.jit
def _dkdv_pairs(
    Q, DO, LSE, DELTA, ENTRIES, e0, e1, b, g, h, Dk, Dv, qk_scale,
    sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d, sl_b, sl_s, sl_g, sl_h, sd_b, sd_s, sd_g, sd_h,
    k1, k2, v, dk1, dk2, dv,
    BLOCK_N: tl.constexpr, ROWS: tl.constexpr, HP: tl.constexpr, DK1: tl.constexpr, DK2: tl.constexpr,
    BLOCK_DV: tl.constexpr, DOT_F32: tl.constexpr, ISOLATE: tl.constexpr,
):
    """Fold the (entry, head) pairs of entries ``[e0, e1)`` into the tile's ``dk1, dk2, dv``, ``ROWS`` per step.

    ``HP > 0`` (a power of two >= h): a step is ``ROWS // HP`` whole entries, pair r its entry ``r // HP`` and
    head ``r % HP``, fixed across steps (a division by the runtime h at every step cost more than the step's
    MMAs).  ``HP == 0`` (h > ROWS): a step is ``ROWS`` pairs of the flat list ``entry * h + head``.  Either way
    the next step's entries are loaded while a step computes, so a step's gathers never wait on a load of their
    own step and the pipeliner can start them a step ahead.  With ``DK2 == 0``, ``k2``/``dk2`` are placeholders.
    """
    r = tl.arange(0, ROWS)  # [ROWS]
    if HP > 0:
        r_ent = r // HP  # [ROWS]
        head = r % HP  # [ROWS]
        ok = (e0 + r_ent < e1) & (head < h)  # [ROWS]
        tok, bnd = _readers(ENTRIES, e0 + r_ent, ok)  # [ROWS] x 2
        for e in range(e0, e1, ROWS // HP):
            q1, q2, do, lse2, delta = _pair_rows(Q, DO, LSE, DELTA, tok, head, ok, b, g, Dk, Dv,
                                                 sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d,
                                                 sl_b, sl_s, sl_g, sl_h, sd_b, sd_s, sd_g, sd_h,
                                                 DK1, DK2, BLOCK_DV, DOT_F32)
            # -- the next step's readers, in flight while this step computes --
            ok_n = (e + ROWS // HP + r_ent < e1) & (head < h)  # [ROWS]
            tok_n, bnd_n = _readers(ENTRIES, e + ROWS // HP + r_ent, ok_n)  # [ROWS] x 2
            dk1, dk2, dv, _ = _pair_step(q1, q2, do, lse2, delta, bnd, qk_scale, k1, k2, v, dk1, dk2, dv,
                                         BLOCK_N, DK2, ISOLATE)
            tok = tok_n
            bnd = bnd_n
            ok = ok_n
    else:
        f_hi = e1 * h
        ok = e0 * h + r < f_hi  # [ROWS]
        head = (e0 * h + r) % h  # [ROWS]
        tok, bnd = _readers(ENTRIES, (e0 * h + r) // h, ok)  # [ROWS] x 2
        for f0 in range(e0 * h, f_hi, ROWS):
            q1, q2, do, lse2, delta = _pair_rows(Q, DO, LSE, DELTA, tok, head, ok, b, g, Dk, Dv,
                                                 sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d,
                                                 sl_b, sl_s, sl_g, sl_h, sd_b, sd_s, sd_g, sd_h,
                                                 DK1, DK2, BLOCK_DV, DOT_F32)
            # -- the next step's readers, in flight while this step computes --
            ok_n = f0 + ROWS + r < f_hi  # [ROWS]
            head_n = (f0 + ROWS + r) % h  # [ROWS]
            tok_n, bnd_n = _readers(ENTRIES, (f0 + ROWS + r) // h, ok_n)  # [ROWS] x 2
            dk1, dk2, dv, _ = _pair_step(q1, q2, do, lse2, delta, bnd, qk_scale, k1, k2, v, dk1, dk2, dv,
                                         BLOCK_N, DK2, ISOLATE)
            tok = tok_n
            bnd = bnd_n
            head = head_n
            ok = ok_n
    return dk1, dk2, dv


@triton.jit
def _tile_accumulators(BLOCK_N: tl.constexpr, DK1: tl.constexpr, DK2: tl.constexpr, BLOCK_DV: tl.constexpr):
    """A key tile's float32 dk and dv accumulators, zero: ``dk1 [BLOCK_N, DK1]``, ``dk2 [BLOCK_N, DK2]`` (``dk1`` as a
    placeholder when ``DK2 == 0``), ``dv [BLOCK_N, BLOCK_DV]``."""
    dk1 = tl.zeros((BLOCK_N, DK1), tl.float32)  # [BLOCK_N, DK1]
    if DK2 > 0:
        dk2 = tl.zeros((BLOCK_N, DK2), tl.float32)  # [BLOCK_N, DK2]
    else:
        dk2 = dk1  # placeholder, never used
    dv = tl.zeros((BLOCK_N, BLOCK_DV), tl.float32)  # [BLOCK_N, BLOCK_DV]
    return dk1, dk2, dv


@triton.jit
def sel_bwd_dkdv_kernel(
    Q, K, V, DO, LSE, DELTA, DK, DV, WS, ENTRIES, CHUNKS, NONFINITE,
    G, h, Dk, Dv, T, NT, qk_scale, scale,
    sq_b, sq_s, sq_g, sq_h, sq_d,
    sk_b, sk_g, sk_t, sk_d,
    sv_b, sv_g, sv_t, sv_d,
    sdo_b, sdo_s, sdo_g, sdo_h, sdo_d,
    sl_b, sl_s, sl_g, sl_h,
    sd_b, sd_s, sd_g, sd_h,
    sdk_b, sdk_g, sdk_t,
    sdv_b, sdv_g, sdv_t,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    HP: tl.constexpr,
    DK1: tl.constexpr,
    DK2: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    """dk, dv of one chunk of one key tile's readers.

    ``CHUNKS [P, 4]`` int64 rows ``(tile, e0, e1, slot)``: global tile id ``(b * G + g) * NT +
    tile`` (``-1``: nothing to do), the chunk's entries ``[e0, e1)``, and the workspace slot
    (``-1``: the tile has one chunk, write ``DK``/``DV`` directly).  ``ENTRIES [E, 2]`` int32
    rows ``(token s, lo | hi << 16)``: the reader's key range within the tile.  ``DK``/``DV``
    are ``[B, G, T, D]`` in k's/v's dtype, rows contiguous in ``D`` (strides ``sdk_*``/``sdv_*``: a pass over
    some KV heads writes its slice of the whole gradient); ``DELTA`` float32 ``[B, S, G, h]`` (strides
    ``sd_*``) is ``rowsum(dO * O) - dlse``; ``WS`` is float32 ``[slots, BLOCK_N,
    DK1 + DK2 + BLOCK_DV]``.
    """
    # -- which chunk of which key tile this program owns (a padding chunk returns at once) --
    pid = tl.program_id(0)
    chunk = CHUNKS + pid.to(tl.int64) * 4
    tile_id = tl.load(chunk)
    if tile_id < 0:
        return
    e0, e1, slot, bg, b, g, k0 = _chunk_tile(chunk, tile_id, NT, G, BLOCK_N)

    # -- the key tile and its dk/dv accumulators stay on chip for the whole chunk --
    offs_n = tl.arange(0, BLOCK_N)  # [BLOCK_N]
    n_ok, k1, k2, v = _key_value_rows(K, V, b, g, k0, T, Dk, Dv, sk_b, sk_g, sk_t, sk_d, sv_b, sv_g, sv_t, sv_d,
                                      BLOCK_N, DK1, DK2, BLOCK_DV, DOT_F32)  # k2: a placeholder when DK2 == 0
    dk1, dk2, dv = _tile_accumulators(BLOCK_N, DK1, DK2, BLOCK_DV)

    # -- the chunk's (entry, head) pairs; the isolating walk only when a dq kernel saw a non-finite row --
    if tl.load(NONFINITE) == 0:
        dk1, dk2, dv = _dkdv_pairs(Q, DO, LSE, DELTA, ENTRIES, e0, e1, b, g, h, Dk, Dv, qk_scale,
                                   sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d,
                                   sl_b, sl_s, sl_g, sl_h, sd_b, sd_s, sd_g, sd_h, k1, k2, v, dk1, dk2, dv,
                                   BLOCK_N, ROWS, HP, DK1, DK2, BLOCK_DV, DOT_F32, False)
    else:
        dk1, dk2, dv = _dkdv_pairs(Q, DO, LSE, DELTA, ENTRIES, e0, e1, b, g, h, Dk, Dv, qk_scale,
                                   sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d,
                                   sl_b, sl_s, sl_g, sl_h, sd_b, sd_s, sd_g, sd_h, k1, k2, v, dk1, dk2, dv,
                                   BLOCK_N, ROWS, HP, DK1, DK2, BLOCK_DV, DOT_F32, True)

    # -- store: directly (the tile's only chunk) or as an fp32 partial sum for sel_bwd_reduce_kernel --
    _store_tile_grads(DK, DV, WS, slot, b, g, k0, n_ok, dk1, dk2, dv, scale, Dk, Dv, sdk_b, sdk_g, sdk_t,
                      sdv_b, sdv_g, sdv_t, BLOCK_N, DK1, DK2, BLOCK_DV)


@triton.jit
def _store_tile_grads(DK, DV, WS, slot, b, g, k0, n_ok, dk1, dk2, dv, scale, Dk, Dv, sdk_b, sdk_g, sdk_t,
                      sdv_b, sdv_g, sdv_t, BLOCK_N: tl.constexpr, DK1: tl.constexpr, DK2: tl.constexpr,
                      BLOCK_DV: tl.constexpr):
    """Store a key tile's dk (times ``scale``) and dv: directly when the chunk is the tile's only one (``slot <
    0``), else as float32 partial sums in workspace slot ``slot`` for :func:`sel_bwd_reduce_kernel`."""
    offs_n = tl.arange(0, BLOCK_N)  # [BLOCK_N]
    offs_d1 = tl.arange(0, DK1)  # [DK1]
    offs_dv = tl.arange(0, BLOCK_DV)  # [BLOCK_DV]
    if slot < 0:
        t_idx = (k0 + offs_n).to(tl.int64)  # [BLOCK_N] keys of the tile
        dk_rows = DK + (b * sdk_b + g * sdk_g + t_idx * sdk_t)[:, None]  # [BLOCK_N, 1]
        dv_rows = DV + (b * sdv_b + g * sdv_g + t_idx * sdv_t)[:, None]  # [BLOCK_N, 1]
        tl.store(dk_rows + offs_d1[None, :],  # [BLOCK_N, DK1]
                 (dk1 * scale).to(DK.dtype.element_ty),
                 mask=n_ok[:, None] & (offs_d1[None, :] < Dk))
        if DK2 > 0:
            offs_d2 = DK1 + tl.arange(0, DK2)  # [DK2]
            tl.store(dk_rows + offs_d2[None, :],  # [BLOCK_N, DK2]
                     (dk2 * scale).to(DK.dtype.element_ty),
                     mask=n_ok[:, None] & (offs_d2[None, :] < Dk))
        tl.store(dv_rows + offs_dv[None, :],  # [BLOCK_N, BLOCK_DV]
                 dv.to(DV.dtype.element_ty),
                 mask=n_ok[:, None] & (offs_dv[None, :] < Dv))
    else:
        width = DK1 + DK2 + BLOCK_DV
        ws = WS + slot * (BLOCK_N * width) + offs_n[:, None] * width  # [BLOCK_N, 1]: the slot's rows
        tl.store(ws + offs_d1[None, :], dk1 * scale)  # [BLOCK_N, DK1]
        if DK2 > 0:
            tl.store(ws + DK1 + tl.arange(0, DK2)[None, :], dk2 * scale)  # [BLOCK_N, DK2]
        tl.store(ws + (DK1 + DK2) + offs_dv[None, :], dv)  # [BLOCK_N, BLOCK_DV]


@triton.jit
def sel_bwd_reduce_kernel(
    WS, TILE_SLOTS, DK, DV,
    G, T, NT, Dk, Dv,
    sdk_b, sdk_g, sdk_t,
    sdv_b, sdv_g, sdv_t,
    BLOCK_N: tl.constexpr,
    DK1: tl.constexpr,
    DK2: tl.constexpr,
    BLOCK_DV: tl.constexpr,
):
    """Sum the workspace slots of one split key tile in slot order and store its dk, dv.

    ``TILE_SLOTS [tiles, 2]`` int64 rows ``(first slot, count)``; a count of 0 means the
    tile was written directly by the dk/dv kernel.  ``DK``/``DV`` as the dk/dv kernel's.
    """
    # -- which key tile this program owns, and its workspace slots --
    tile_id = tl.program_id(0).to(tl.int64)
    first = tl.load(TILE_SLOTS + tile_id * 2)
    count = tl.load(TILE_SLOTS + tile_id * 2 + 1)
    if count == 0:
        return
    width = DK1 + DK2 + BLOCK_DV
    offs_n = tl.arange(0, BLOCK_N)  # [BLOCK_N]
    offs_d1 = tl.arange(0, DK1)  # [DK1]
    offs_dv = tl.arange(0, BLOCK_DV)  # [BLOCK_DV]
    dk1 = tl.zeros((BLOCK_N, DK1), tl.float32)  # [BLOCK_N, DK1]
    if DK2 > 0:
        offs_d2 = DK1 + tl.arange(0, DK2)  # [DK2]
        dk2 = tl.zeros((BLOCK_N, DK2), tl.float32)  # [BLOCK_N, DK2]
    dv = tl.zeros((BLOCK_N, BLOCK_DV), tl.float32)  # [BLOCK_N, BLOCK_DV]
    # -- add the slots in slot order: a fixed order, so the sums are bit-reproducible --
    for i in range(0, count):
        ws = WS + (first + i) * (BLOCK_N * width) + offs_n[:, None] * width  # [BLOCK_N, 1]
        dk1 += tl.load(ws + offs_d1[None, :])  # [BLOCK_N, DK1]
        if DK2 > 0:
            dk2 += tl.load(ws + offs_d2[None, :])  # [BLOCK_N, DK2]
        dv += tl.load(ws + (DK1 + DK2) + offs_dv[None, :])  # [BLOCK_N, BLOCK_DV]
    # -- store (the dk/dv kernel applied the scale to the partial sums) --
    bg = tile_id // NT
    b = bg // G
    g = bg % G
    k0 = (tile_id % NT) * BLOCK_N
    n_ok = (k0 + offs_n) < T  # [BLOCK_N]
    t_idx = (k0 + offs_n).to(tl.int64)  # [BLOCK_N] keys of the tile
    dk_rows = DK + (b * sdk_b + g * sdk_g + t_idx * sdk_t)[:, None]  # [BLOCK_N, 1]
    dv_rows = DV + (b * sdv_b + g * sdv_g + t_idx * sdv_t)[:, None]  # [BLOCK_N, 1]
    tl.store(dk_rows + offs_d1[None, :],  # [BLOCK_N, DK1]
             dk1.to(DK.dtype.element_ty),
             mask=n_ok[:, None] & (offs_d1[None, :] < Dk))
    if DK2 > 0:
        tl.store(dk_rows + offs_d2[None, :],  # [BLOCK_N, DK2]
                 dk2.to(DK.dtype.element_ty),
                 mask=n_ok[:, None] & (offs_d2[None, :] < Dk))
    tl.store(dv_rows + offs_dv[None, :],  # [BLOCK_N, BLOCK_DV]
             dv.to(DV.dtype.element_ty),
             mask=n_ok[:, None] & (offs_dv[None, :] < Dv))


@triton.jit
def sel_bwd_reader_keys_kernel(
    SPANS, KEYS, SLOTS, S, G, n, T, NT, n_tiles, per_row,
    sr_b, sr_s, sr_g, sr_n, sr_e,
    BLOCK_N: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_E: tl.constexpr,
):
    """The reader entries of one row ``(b, s, g)`` as sort keys: ``KEYS [rows, per_row]`` (int32 where the
    padding key fits, else int64; the keys are computed in int64 and stored in KEYS's type) and each entry's span
    slot in ``SLOTS [rows, per_row]`` (int32).

    Entry k of the row is its k-th (span, key tile) pair, spans in slot order: the key ``tile_id * S + s`` with
    ``tile_id = (b * G + g) * NT + tile``, so that a stable sort of the keys orders the entries by tile, then
    token, then span slot (a row's entries of one tile are stored in slot order); past the row's count (or
    ``per_row``, which spans that break the contract can pass: they are cut there) the padding key
    ``n_tiles * S`` sorts last.  Spans are clamped into ``[0, T]`` as the other kernels clamp them.
    """
    # -- the row's spans, their tile counts and where each one's entries start --
    row = tl.program_id(0).to(tl.int64)  # (b * S + s) * G + g
    g = row % G
    s = (row // G) % S
    b = row // (G * S)
    offs_s = tl.arange(0, BLOCK_S)  # [BLOCK_S]
    s_ok = offs_s < n  # [BLOCK_S]
    span = SPANS + b * sr_b + s * sr_s + g * sr_g + offs_s.to(tl.int64) * sr_n  # [BLOCK_S]
    start, end = _clamp_spans(tl.load(span, mask=s_ok, other=0), tl.load(span + sr_e, mask=s_ok, other=0), T)
    t_lo = start // BLOCK_N  # [BLOCK_S]
    count = tl.where(end > start, (end - 1) // BLOCK_N - t_lo + 1, 0)  # [BLOCK_S] tiles each span touches
    cum = _prefix_sum(count, BLOCK_S)  # [BLOCK_S] inclusive
    first = cum - count  # [BLOCK_S]
    total = tl.sum(count, 0)  # scalar
    tile0 = (b * G + g) * NT  # scalar: global id of the row's tile 0
    pad = (row * 0 + n_tiles) * S  # scalar int64 (n_tiles may arrive as the constant 1: no .to on it)
    # -- entry k falls in the span whose [first, cum) holds it --
    for k0 in range(0, per_row, BLOCK_E):
        k = k0 + tl.arange(0, BLOCK_E)  # [BLOCK_E]
        sel = (k[:, None] >= first[None, :]) & (k[:, None] < cum[None, :])  # [BLOCK_E, BLOCK_S] one-hot
        slot = tl.sum(tl.where(sel, offs_s[None, :], 0), 1)  # [BLOCK_E]
        tile = tl.sum(tl.where(sel, t_lo[None, :] + k[:, None] - first[None, :], 0), 1)  # [BLOCK_E]
        key = (tile0 + tile.to(tl.int64)) * S + s  # [BLOCK_E]
        tl.store(KEYS + row * per_row + k, tl.where(k < total, key, pad), mask=k < per_row)
        # Through uint32 (the same bits: no instruction on a GPU): Triton 3.0's interpreter holds a sum of int32 as
        # int64 and would store 8 bytes per slot, past the end of SLOTS; a cast to another type converts it.
        tl.store(SLOTS + row * per_row + k, slot.to(tl.uint32), mask=k < per_row)


@triton.jit
def sel_bwd_reader_entries_kernel(
    SPANS, KEYS, ORDER, SLOTS, ENTRIES, n_entries, S, G, n, T, NT, n_tiles,
    sr_b, sr_s, sr_g, sr_n, sr_e,
    BLOCK_N: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Decode sorted reader keys (``sel_bwd_reader_keys_kernel``; ``ORDER`` int64: each sorted key's index before
    the sort, where its span slot is in ``SLOTS``) into ``ENTRIES [n_entries, 2]`` int32 rows ``(token, lo | hi <<
    16)``: the keys ``[lo, hi)`` of its tile that the entry's span covers.  Padding keys give ``(0, 0)`` (no key);
    no chunk refers to them."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)  # [BLOCK]
    ok = offs < n_entries  # [BLOCK]
    key = tl.load(KEYS + offs, mask=ok, other=0).to(tl.int64)  # [BLOCK]
    s = key % S  # [BLOCK]
    tile_id = key // S  # [BLOCK]
    live = ok & (tile_id < n_tiles)  # [BLOCK]
    slot = tl.load(SLOTS + tl.load(ORDER + offs, mask=live, other=0), mask=live, other=0)  # [BLOCK]
    bg = tile_id // NT  # [BLOCK]
    k0 = (tile_id % NT) * BLOCK_N  # [BLOCK]
    span = SPANS + (bg // G) * sr_b + s * sr_s + (bg % G) * sr_g + slot * sr_n  # [BLOCK]
    start, end = _clamp_spans(tl.load(span, mask=live, other=0), tl.load(span + sr_e, mask=live, other=0), T)
    lo = tl.minimum(tl.maximum(start - k0, 0), BLOCK_N)  # [BLOCK]
    hi = tl.minimum(tl.maximum(end - k0, 0), BLOCK_N)  # [BLOCK]
    tl.store(ENTRIES + offs * 2, tl.where(live, s, 0).to(tl.int32), mask=ok)
    tl.store(ENTRIES + offs * 2 + 1, tl.where(live, lo | (hi << 16), 0).to(tl.int32), mask=ok)


# -- key-major dq (small groups): one program per chunk of a key tile's readers, partial dq summed per row --


@triton.jit
def _nonfinite(x):
    """1 where ``x`` is not finite (NaN fails the comparison too), else 0, as int32 (a where, not ``~``: Triton
    3.0's interpreter cannot invert a mask)."""
    return tl.where(tl.abs(x.to(tl.float32)) < float("inf"), 0, 1)


@triton.jit
def sel_bwd_dq_keymajor_delta_kernel(
    Q, O, DO, DLSE, DELTA, DO_L1_LOG2, NONFINITE,
    S, G, h, Dk, Dv, n_rows,
    sq_b, sq_s, sq_g, sq_h, sq_d,
    so_b, so_s, so_g, so_h, so_d,
    sdo_b, sdo_s, sdo_g, sdo_h, sdo_d,
    sdl_b, sdl_s, sdl_g, sdl_h,
    ROWS: tl.constexpr,
    DK1: tl.constexpr,
    DK2: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    LOAD_DELTA: tl.constexpr,
):
    """delta of ``ROWS`` (token, group, head) rows for the key-major dq: ``rowsum(dO * O) - dlse`` in float32
    (with ``LOAD_DELTA``, ``rowsum(dO * O)`` was computed before from O recomputed in fp32), stored in ``DELTA``
    (contiguous ``[B, S, G, h]``), and the log2 of ``rowsum(|dO|)`` in ``DO_L1_LOG2`` (laid out as ``DELTA``: the
    partial dq's bound, ``_keymajor_pairs``); raises ``NONFINITE`` when a row's q or dO is not finite (the
    token-major dq kernels do both on the way)."""
    r = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)  # [ROWS] row ((b * S + s) * G + g) * h + head
    ok = r < n_rows  # [ROWS]
    head = r % h
    g = (r // h) % G
    s = (r // (h * G)) % S
    b = r // (h * G * S)
    do = _gather_rows(DO, b * sdo_b + s * sdo_s + g * sdo_g + head * sdo_h, ok, sdo_d, Dv, 0, BLOCK_DV,
                      False)  # [ROWS, BLOCK_DV]
    if LOAD_DELTA:
        delta = tl.load(DELTA + r, mask=ok, other=0.0)  # [ROWS]
    else:
        o = _gather_rows(O, b * so_b + s * so_s + g * so_g + head * so_h, ok, so_d, Dv, 0, BLOCK_DV,
                         False)  # [ROWS, BLOCK_DV]
        delta = tl.sum(do.to(tl.float32) * o.to(tl.float32), 1)  # [ROWS]
    delta -= tl.load(DLSE + b * sdl_b + s * sdl_s + g * sdl_g + head * sdl_h, mask=ok, other=0.0)
    tl.store(DELTA + r, delta, mask=ok)
    # log2 of rowsum(|dO|) as log2(max) + log2(rowsum(|dO| / max)): no sum overflows, however large dO is
    do_abs = tl.abs(do.to(tl.float32))  # [ROWS, BLOCK_DV]
    do_max = tl.max(do_abs, 1)  # [ROWS]
    do_rel = tl.sum(do_abs / tl.where(do_max > 0.0, do_max, 1.0)[:, None], 1)  # [ROWS]
    tl.store(DO_L1_LOG2 + r, tl.log2(do_max) + tl.log2(do_rel), mask=ok)
    q1, q2 = _load_q(Q, b * sq_b + s * sq_s + g * sq_g + head * sq_h, ok, sq_d, Dk, DK1, DK2,
                     False)  # [ROWS, DK1], [ROWS, DK2]
    _flag_nonfinite(NONFINITE, q1, q2, do, DK2)


@triton.jit
def _store_partial_dq(DQP, DQP_SCALE, slot, ok, dq1, dq2, e, scale, Dk, DK1: tl.constexpr, DK2: tl.constexpr):
    """Store the partial dq ``scale * [dq1, dq2]`` (``dS K`` of a step's pairs, ``[ROWS, DK1]`` and ``[ROWS, DK2]``) at
    their slots: float16 values divided by ``2**e`` (``e [ROWS]``: ``_partial_exponent`` of a bound on the row) in
    ``DQP``, ``scale * 2**e`` in ``DQP_SCALE``."""
    inv = tl.exp2(-e)[:, None]  # [ROWS, 1]
    offs_d1 = tl.arange(0, DK1)  # [DK1]
    tl.store(DQP + slot[:, None] * Dk + offs_d1[None, :], (dq1 * inv).to(DQP.dtype.element_ty),  # [ROWS, DK1]
             mask=ok[:, None] & (offs_d1[None, :] < Dk))
    if DK2 > 0:
        offs_d2 = DK1 + tl.arange(0, DK2)  # [DK2]
        tl.store(DQP + slot[:, None] * Dk + offs_d2[None, :], (dq2 * inv).to(DQP.dtype.element_ty),  # [ROWS, DK2]
                 mask=ok[:, None] & (offs_d2[None, :] < Dk))
    tl.store(DQP_SCALE + slot, tl.exp2(e) * scale, mask=ok)


@triton.jit
def _row_finite_absmax(x):
    """The largest finite magnitude of each row of ``x [R, C]`` (NaN and inf count as 0)."""
    return tl.max(tl.where(tl.abs(x) < float("inf"), tl.abs(x), 0.0), 1)  # [R]


@triton.jit
def _dq_keymajor_step(Q, DO, LSE, DELTA, DQP, DQP_SCALE, ENTRIES, ORIGIN, ent, head, ok, b, g, h, Dk, Dv, qk_scale,
                      scale,
                      k1, k2, v, bad,
                      sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d, sl_b, sl_s, sl_g, sl_h,
                      sd_b, sd_s, sd_g, sd_h,
                      BLOCK_N: tl.constexpr, DK1: tl.constexpr, DK2: tl.constexpr, BLOCK_DV: tl.constexpr,
                      DOT_F32: tl.constexpr, ISOLATE: tl.constexpr):
    """The partial dq of (entry, head) pairs ``[ROWS]`` against the program's key tile, ``scale * dS K`` over
    the keys ``[lo, hi)`` of the tile its entry reads, stored at the pair's slot ``origin * h + head`` of ``DQP``
    (``[slots, h, Dk]``, float16 scaled by ``DQP_SCALE``: ``_store_partial_dq``, each row's power from its largest
    finite value).  ``ISOLATE``: the tile holds a non-finite k or v value (loaded as 0); a pair that reads its key
    gets NaN (as in exact arithmetic), the others stay finite."""
    offs_n = tl.arange(0, BLOCK_N)  # [BLOCK_N]
    tok, bnd = _readers(ENTRIES, ent, ok)  # [ROWS] x 2; bnd 0 on masked pairs: no key
    slot = tl.load(ORIGIN + ent, mask=ok, other=0) * h + head  # [ROWS] int64
    tok64 = tok.to(tl.int64)
    head64 = head.to(tl.int64)
    q1, q2 = _load_q(Q, b * sq_b + tok64 * sq_s + g * sq_g + head64 * sq_h, ok, sq_d, Dk, DK1, DK2,
                     DOT_F32)  # [ROWS, DK1], [ROWS, DK2]
    do = _gather_rows(DO, b * sdo_b + tok64 * sdo_s + g * sdo_g + head64 * sdo_h, ok, sdo_d, Dv, 0, BLOCK_DV,
                      DOT_F32)  # [ROWS, BLOCK_DV]
    lse2 = _log2_lse(tl.load(LSE + b * sl_b + tok64 * sl_s + g * sl_g + head64 * sl_h, mask=ok, other=0.0))
    delta = tl.load(DELTA + b * sd_b + tok64 * sd_s + g * sd_g + head64 * sd_h, mask=ok, other=0.0)  # [ROWS]
    # -- P from the forward's LSE over the keys each pair reads; dS = P * (dO V^T - delta) --
    s = tl.dot(q1, tl.trans(k1))  # [ROWS, BLOCK_N] fp32
    if DK2 > 0:
        s += tl.dot(q2, tl.trans(k2))
    lo = bnd & 0xFFFF  # [ROWS]
    hi = bnd >> 16  # [ROWS]
    inside = (offs_n[None, :] >= lo[:, None]) & (offs_n[None, :] < hi[:, None])  # [ROWS, BLOCK_N]
    p = tl.where(inside, tl.exp2(_at_most_0(s * qk_scale - lse2[:, None])), 0.0)  # [ROWS, BLOCK_N]
    dp = tl.dot(do, tl.trans(v))  # [ROWS, BLOCK_N]: dO V^T
    # where, not p * ...: a key the pair does not read stays out of its dq
    ds = tl.where(inside, p * (dp - delta[:, None]), 0.0).to(k1.dtype)  # [ROWS, BLOCK_N]
    dq1 = tl.dot(ds, k1)  # [ROWS, DK1]
    if ISOLATE:
        reads_bad = tl.max((inside & bad[None, :]).to(tl.int32), 1) > 0  # [ROWS]
        dq1 = tl.where(reads_bad[:, None], float("nan"), dq1)
    if DK2 > 0:
        dq2 = tl.dot(ds, k2)  # [ROWS, DK2]
        if ISOLATE:
            dq2 = tl.where(reads_bad[:, None], float("nan"), dq2)
        amax = tl.maximum(_row_finite_absmax(dq1), _row_finite_absmax(dq2))  # [ROWS]
    else:
        dq2 = dq1  # placeholder, never used
        amax = _row_finite_absmax(dq1)  # [ROWS]
    _store_partial_dq(DQP, DQP_SCALE, slot, ok, dq1, dq2, _partial_exponent(tl.log2(amax)), scale, Dk, DK1, DK2)


@triton.jit
def _keymajor_pairs(Q, DO, LSE, DELTA, DO_L1_LOG2, DQP, DQP_SCALE, ENTRIES, ORIGIN, e0, e1, b, g, h, Dk, Dv, qk_scale,
                    scale, sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d, sl_b, sl_s, sl_g, sl_h,
                    sd_b, sd_s, sd_g, sd_h, k1, k2, v, log2_kmax, log2_vmax, dk1, dk2, dv,
                    BLOCK_N: tl.constexpr, ROWS: tl.constexpr, HP: tl.constexpr, DK1: tl.constexpr,
                    DK2: tl.constexpr, BLOCK_DV: tl.constexpr, DOT_F32: tl.constexpr):
    """Fold the (entry, head) pairs of entries ``[e0, e1)`` into the tile's ``dk1, dk2, dv`` and store each pair's
    partial dq against the tile, ``scale * dS K``, at its slot ``origin * h + head`` of ``DQP`` (``_store_partial_dq``):
    one gather of q and dO and one P and dS per pair serve all three gradients.  ``ROWS`` pairs a step,
    ``ROWS // HP`` whole entries; the next step's reader entries load while a step computes.  Only where every q,
    dO, k and v value the walk reads is finite (the caller checks); ``log2_kmax``, ``log2_vmax``: log2 of the
    tile's largest k and v magnitudes.

    The partial dq are scaled by a bound known before the dot, not by their largest values (a row reduction of the
    dq tile each step): every P <= 1, so with ``n`` keys read, ``|dS| <= n (|dO|_1 max|v| + |delta|)`` summed
    over the keys and ``|dS K| <= max|k|`` times that, taken in log2 so that no product overflows.  One power
    serves a step's pairs, the largest of their bounds: a power per pair would need the bound in the dq tile's
    layout, where the compiler loads the pairs' ``dO_1`` and delta a second time; float16's range leaves room for
    the spread of the pairs' bounds within a step."""
    r = tl.arange(0, ROWS)  # [ROWS]
    r_ent = r // HP  # [ROWS]
    head = r % HP  # [ROWS]
    ok = (e0 + r_ent < e1) & (head < h)  # [ROWS]
    tok, bnd = _readers(ENTRIES, e0 + r_ent, ok)  # [ROWS] x 2
    origin = tl.load(ORIGIN + e0 + r_ent, mask=ok, other=0)  # [ROWS] int64
    for e in range(e0, e1, ROWS // HP):
        q1, q2, do, lse2, delta = _pair_rows(Q, DO, LSE, DELTA, tok, head, ok, b, g, Dk, Dv,
                                             sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d,
                                             sl_b, sl_s, sl_g, sl_h, sd_b, sd_s, sd_g, sd_h,
                                             DK1, DK2, BLOCK_DV, DOT_F32)
        # -- the next step's readers, in flight while this step computes --
        ok_n = (e + ROWS // HP + r_ent < e1) & (head < h)  # [ROWS]
        tok_n, bnd_n = _readers(ENTRIES, e + ROWS // HP + r_ent, ok_n)  # [ROWS] x 2
        origin_n = tl.load(ORIGIN + e + ROWS // HP + r_ent, mask=ok_n, other=0)  # [ROWS]
        do_l1_log2 = tl.load(DO_L1_LOG2 + b * sd_b + tok.to(tl.int64) * sd_s + g * sd_g + head.to(tl.int64) * sd_h,
                             mask=ok, other=0.0)  # [ROWS]
        n_keys = ((bnd >> 16) - (bnd & 0xFFFF)).to(tl.float32)  # [ROWS]
        # [ROWS]; the + 1: a + b <= 2 max(a, b)
        log2_bound = (tl.log2(n_keys) + log2_kmax
                      + tl.maximum(log2_vmax + do_l1_log2, tl.log2(tl.abs(delta))) + 1.0)
        dk1, dk2, dv, dst = _pair_step(q1, q2, do, lse2, delta, bnd, qk_scale, k1, k2, v, dk1, dk2, dv,
                                       BLOCK_N, DK2, False)
        # -- the pairs' partial dq against this tile, each in its own slot --
        ds = tl.trans(dst)  # [ROWS, BLOCK_N]
        dq1 = tl.dot(ds, k1)  # [ROWS, DK1]
        if DK2 > 0:
            dq2 = tl.dot(ds, k2)  # [ROWS, DK2]
        else:
            dq2 = dq1  # placeholder, never used
        e_step = _partial_exponent(tl.max(log2_bound, 0))  # one power for the step's pairs
        _store_partial_dq(DQP, DQP_SCALE, origin * h + head, ok, dq1, dq2, tl.zeros((ROWS,), tl.float32) + e_step,
                          scale, Dk, DK1, DK2)
        tok = tok_n
        bnd = bnd_n
        ok = ok_n
        origin = origin_n
    return dk1, dk2, dv


@triton.jit
def sel_bwd_keymajor_kernel(
    Q, K, V, DO, LSE, DELTA, DO_L1_LOG2, DK, DV, DQP, DQP_SCALE, WS, ENTRIES, ORIGIN, CHUNKS, NONFINITE,
    G, h, Dk, Dv, T, NT, qk_scale, scale,
    sq_b, sq_s, sq_g, sq_h, sq_d,
    sk_b, sk_g, sk_t, sk_d,
    sv_b, sv_g, sv_t, sv_d,
    sdo_b, sdo_s, sdo_g, sdo_h, sdo_d,
    sl_b, sl_s, sl_g, sl_h,
    sd_b, sd_s, sd_g, sd_h,
    sdk_b, sdk_g, sdk_t,
    sdv_b, sdv_g, sdv_t,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    HP: tl.constexpr,
    DK1: tl.constexpr,
    DK2: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    """dk, dv and the partial dq of one chunk of one key tile's readers (the key-major backward, small groups): the
    key-major forward's reader list (its entries and slots), cut into the dk/dv kernel's chunks.

    The K and V tile are loaded once; each step gathers ``ROWS`` (entry, head) pairs' q and dO and computes P and dS
    once for the tile's dk/dv (kept on chip, stored as :func:`sel_bwd_dkdv_kernel` stores them) and for each pair's
    partial dq (stored in its own slot of ``DQP``; :func:`sel_bwd_dq_keymajor_merge_kernel` sums a row's partials
    in slot order: deterministic, no atomics).  ``DELTA`` float32 ``[B, S, G, h]`` is ``rowsum(dO * O) - dlse``,
    ``DO_L1_LOG2`` (laid out as ``DELTA``) the log2 of ``rowsum(|dO|)``, both computed before.  Where a q or dO
    row of the call is not finite (``NONFINITE``) or the tile holds a non-finite k or v value, the slow walk:
    dk/dv as the dk/dv kernel's isolating walk, then dq with the tile's non-finite keys loaded as 0 and NaN given
    to the pairs that read them (each pair's dq as in exact arithmetic).
    """
    qk_scale = tl.cast(qk_scale, tl.float32)
    scale = tl.cast(scale, tl.float32)
    # -- which chunk of which key tile this program owns (a padding chunk returns at once) --
    chunk = CHUNKS + tl.program_id(0).to(tl.int64) * 4
    tile_id = tl.load(chunk)
    if tile_id < 0:
        return
    e0, e1, slot, _, b, g, k0 = _chunk_tile(chunk, tile_id, NT, G, BLOCK_N)

    # -- the key tile and its dk/dv accumulators stay on chip for the whole chunk --
    n_ok, k1, k2, v = _key_value_rows(K, V, b, g, k0, T, Dk, Dv, sk_b, sk_g, sk_t, sk_d, sv_b, sv_g, sv_t, sv_d,
                                      BLOCK_N, DK1, DK2, BLOCK_DV, DOT_F32)  # k2: a placeholder when DK2 == 0
    if DK2 > 0:
        bad_k = tl.max(_nonfinite(k2), 1) > 0  # [BLOCK_N]
    else:
        bad_k = tl.arange(0, BLOCK_N) < 0  # [BLOCK_N] all false
    bad = (tl.max(_nonfinite(k1), 1) > 0) | bad_k | (tl.max(_nonfinite(v), 1) > 0)  # [BLOCK_N]
    dk1, dk2, dv = _tile_accumulators(BLOCK_N, DK1, DK2, BLOCK_DV)

    if (tl.load(NONFINITE) == 0) & (tl.max(bad.to(tl.int32), 0) == 0):
        k_max = tl.max(tl.max(tl.abs(k1.to(tl.float32)), 1), 0)
        if DK2 > 0:
            k_max = tl.maximum(k_max, tl.max(tl.max(tl.abs(k2.to(tl.float32)), 1), 0))
        v_max = tl.max(tl.max(tl.abs(v.to(tl.float32)), 1), 0)
        dk1, dk2, dv = _keymajor_pairs(Q, DO, LSE, DELTA, DO_L1_LOG2, DQP, DQP_SCALE, ENTRIES, ORIGIN, e0, e1, b, g,
                                       h, Dk, Dv, qk_scale, scale, sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g,
                                       sdo_h, sdo_d, sl_b, sl_s, sl_g, sl_h, sd_b, sd_s, sd_g, sd_h, k1, k2, v,
                                       tl.log2(k_max), tl.log2(v_max), dk1, dk2, dv,
                                       BLOCK_N, ROWS, HP, DK1, DK2, BLOCK_DV, DOT_F32)
    else:
        dk1, dk2, dv = _dkdv_pairs(Q, DO, LSE, DELTA, ENTRIES, e0, e1, b, g, h, Dk, Dv, qk_scale,
                                   sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d,
                                   sl_b, sl_s, sl_g, sl_h, sd_b, sd_s, sd_g, sd_h, k1, k2, v, dk1, dk2, dv,
                                   BLOCK_N, ROWS, HP, DK1, DK2, BLOCK_DV, DOT_F32, True)
        k1z = tl.where(bad[:, None], 0.0, k1).to(k1.dtype)
        if DK2 > 0:
            k2z = tl.where(bad[:, None], 0.0, k2).to(k2.dtype)
        else:
            k2z = k1z  # placeholder, never used
        vz = tl.where(bad[:, None], 0.0, v).to(v.dtype)
        r = tl.arange(0, ROWS)  # [ROWS]
        r_ent = r // HP  # [ROWS]
        head = r % HP  # [ROWS]
        for e in range(e0, e1, ROWS // HP):
            ok = (e + r_ent < e1) & (head < h)  # [ROWS]
            _dq_keymajor_step(Q, DO, LSE, DELTA, DQP, DQP_SCALE, ENTRIES, ORIGIN, e + r_ent, head, ok, b, g, h, Dk, Dv,
                              qk_scale, scale, k1z, k2z, vz, bad, sq_b, sq_s, sq_g, sq_h, sq_d,
                              sdo_b, sdo_s, sdo_g, sdo_h, sdo_d, sl_b, sl_s, sl_g, sl_h, sd_b, sd_s, sd_g, sd_h,
                              BLOCK_N, DK1, DK2, BLOCK_DV, DOT_F32, True)

    # -- store: directly (the tile's only chunk) or as an fp32 partial sum for sel_bwd_reduce_kernel --
    _store_tile_grads(DK, DV, WS, slot, b, g, k0, n_ok, dk1, dk2, dv, scale, Dk, Dv, sdk_b, sdk_g, sdk_t,
                      sdv_b, sdv_g, sdv_t, BLOCK_N, DK1, DK2, BLOCK_DV)


@triton.jit
def _load_partial_dq(DQP, DQP_SCALE, slot, live, offs_d, Dk):
    """One key-major partial dq of pairs ``[PAIRS]`` at ``slot``: its float16 values ``[PAIRS, BLOCK_DK]`` (zeros
    where not ``live``) and their scale (1)."""
    dq = tl.load(DQP + slot[:, None] * Dk + offs_d[None, :], mask=live[:, None] & (offs_d[None, :] < Dk), other=0.0)
    return dq, tl.load(DQP_SCALE + slot, mask=live, other=1.0)


@triton.jit
def sel_bwd_dq_keymajor_merge_kernel(
    DQP, DQP_SCALE, SPANS, DQ,
    S, G, h, Dk, n_spans, T, per_row, n_rows,
    sr_b, sr_s, sr_g, sr_n, sr_e,
    sdq_b, sdq_s, sdq_g, sdq_h, sdq_d,
    BLOCK_N: tl.constexpr,
    PAIRS: tl.constexpr,
    HP: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_DK: tl.constexpr,
):
    """Sum the key-major partial dq of ``PAIRS // HP`` rows (each one's float16 values times its ``DQP_SCALE``) in
    slot order and store dq (q's dtype).

    A row's partials are counted from its spans as ``forward.sel_fwd_keymajor_merge_kernel`` counts them (the
    key tiles its clamped spans touch, at most ``per_row``), so the sum's order does not depend on which program
    computed which partial.  A row without keys gets zeros.
    """
    # -- the (row, head) pairs of this program and how many partials each row has --
    row, head, ok, b, s, g, total = _merge_rows(SPANS, S, G, h, n_spans, T, per_row, n_rows, sr_b, sr_s, sr_g, sr_n,
                                                sr_e, BLOCK_N, PAIRS, HP, BLOCK_S)
    # -- the sum, in slot order; the loads of partial k + 1 go out before partial k is added (two in flight per
    # row, as in the forward merge) --
    offs_d = tl.arange(0, BLOCK_DK)  # [BLOCK_DK]
    acc = tl.zeros((PAIRS, BLOCK_DK), tl.float32)  # [PAIRS, BLOCK_DK]
    dq_next, scale_next = _load_partial_dq(DQP, DQP_SCALE, row * per_row * h + head, ok & (0 < total), offs_d, Dk)
    for k in range(0, per_row):
        dq_k, scale = dq_next, scale_next  # [PAIRS, BLOCK_DK], [PAIRS]
        dq_next, scale_next = _load_partial_dq(DQP, DQP_SCALE, (row * per_row + k + 1) * h + head,
                                               ok & (k + 1 < total), offs_d, Dk)
        acc += dq_k.to(tl.float32) * scale[:, None]
    dq_off = b * sdq_b + s * sdq_s + g * sdq_g + head.to(tl.int64) * sdq_h  # [PAIRS]
    tl.store(DQ + dq_off[:, None] + offs_d[None, :] * sdq_d, acc.to(DQ.dtype.element_ty),  # [PAIRS, BLOCK_DK]
             mask=ok[:, None] & (offs_d[None, :] < Dk))
