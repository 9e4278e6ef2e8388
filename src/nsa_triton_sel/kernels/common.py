"""``@triton.jit`` helpers and constants shared by the forward and backward kernels.

Imports only ``triton`` (the compile-smoke harness loads the kernel modules without torch).
Written once here so the two kernel modules cannot drift apart: the span walk (prefix sum,
flattened tile bounds, span clamp), the row gather of q, the key tile of a reader-list chunk (the key-centric
kernels), the scale of a key-major partial result, and the constants below.

A global read inside ``@triton.jit`` code must be a ``tl.constexpr`` object (a plain Python
int or float global is rejected by some Triton 3.x releases), and a helper imported from
this module resolves its own names (``tl``) through this module's globals, which Triton
3.0 - 3.9 all do.
"""

import triton
import triton.language as tl

# Where a row's keys come from (the ``SPAN_MODE`` constexpr of ``forward.sel_fwd_kernel``).
# The same values as the host planner's MODE_* (tests/test_kernel_sources.py checks them).
MODE_RANGES = tl.constexpr(0)  # ranges [B, S, G, n, 2]: [start, end) spans
MODE_DENSE = tl.constexpr(1)  # one span [0, L) per row of k [N, L, Dk]
MODE_CU = tl.constexpr(2)  # one span [cu[i], cu[i + 1]) of k_all [total, Dk]
MODE_BLOCKS = tl.constexpr(3)  # block indices [B, S, G, n], causally clamped to the query position

# The kernels run the softmax in the log2 domain (exp2, log2(e) folded into qk_scale by the
# host) and keep the LSE that crosses the forward/backward boundary in the natural log.
LN2 = tl.constexpr(0.6931471805599453)  # ln(2): log2-domain LSE -> natural log (forward store)
LOG2E = tl.constexpr(1.4426950408889634)  # log2(e): natural-log LSE -> log2 domain (backward load)


@triton.jit
def _prefix_sum(x, BLOCK: tl.constexpr):
    """Inclusive prefix sum of a short vector ``x [BLOCK]``, as a triangular masked reduction.

    ``tl.cumsum`` gives wrong prefix sums on Triton 3.0 for sm_90 (found on the H100: every
    row with two or more spans came out NaN), and on 3.2 for sm_90 its sums give wrong keys
    once broadcast into the span indexing (the ``cumsum_spans`` GPU canary); this form costs
    BLOCK^2 adds once per program and is right on every version.
    """
    offs = tl.arange(0, BLOCK)  # [BLOCK]
    return tl.sum(tl.where(offs[None, :] <= offs[:, None], x[None, :], 0), 1)  # [BLOCK, BLOCK] -> [BLOCK]


@triton.jit
def _tile_bounds(j, starts, ends, first, cum, BLOCK_N: tl.constexpr, MULTI: tl.constexpr):
    """Key positions ``[pos, end)`` of flattened tile ``j`` (``pos + BLOCK_N`` may pass ``end``).

    With ``MULTI`` the row has span vectors ``starts``/``ends`` ``[BLOCK_S]`` whose tiles are
    numbered ``[first, cum)``: tile ``j`` finds its span with two small reductions, so the
    caller's loop has scalar bounds and no data-dependent branch.  Without, ``starts``/``ends``
    are the scalars of the row's one span.  ``MULTI`` is a constexpr: the other branch is not
    compiled.
    """
    if MULTI:
        sel = (j >= first) & (j < cum)  # [BLOCK_S] one-hot: the span tile j falls in
        pos = tl.sum(tl.where(sel, starts + (j - first) * BLOCK_N, 0), 0)  # scalar
        end = tl.sum(tl.where(sel, ends, 0), 0)  # scalar
    else:
        pos = starts + j * BLOCK_N  # scalar
        end = ends  # scalar
    return pos, end


@triton.jit
def _group_heads(token, pid1, S, h, BLOCK_H: tl.constexpr):
    """``(b, s, g, offs_h [BLOCK_H])`` of the program owning query ``token`` (= b * S + s) and grid
    column ``pid1`` (= group x head chunk: a group's ``h`` heads in chunks of ``BLOCK_H`` rows)."""
    n_hc = tl.cdiv(h, BLOCK_H)
    g = pid1 // n_hc
    offs_h = (pid1 % n_hc) * BLOCK_H + tl.arange(0, BLOCK_H)  # [BLOCK_H]
    return token // S, token % S, g, offs_h


@triton.jit
def _token_rows(S, h, TOK: tl.constexpr, HP: tl.constexpr):
    """The rows of a multi-token program: ``(b, g, t0, r_tok [M], r_head [M], r_ok [M])`` with M = TOK x HP
    (token, head) pairs, token-major; grid axis 0 = batch x chunk of TOK tokens starting at ``t0``,
    axis 1 = group; ``r_ok`` masks padded heads and tokens past S."""
    n_tb = tl.cdiv(S, TOK)
    pid0 = tl.program_id(0)
    rows = tl.arange(0, TOK * HP)  # [M]
    r_tok = rows // HP  # [M]
    r_head = rows % HP  # [M]
    t0 = (pid0 % n_tb) * TOK
    r_ok = (r_head < h) & (t0 + r_tok < S)  # [M]
    return pid0 // n_tb, tl.program_id(1), t0, r_tok, r_head, r_ok


@triton.jit
def _clamp_spans(start, end, seq_len):
    """Spans as loaded (int32 or int64) clamped into ``[0, seq_len]`` with ``end >= start``, as int32 (any
    shape, elementwise): whatever the values, no key outside ``[0, T)`` is read, and a value past the int32
    range saturates instead of wrapping (``[0, 2**62)`` reads every key, as ``contract.clamp_ranges`` and the
    reference paths do).  The dispatcher can then enqueue the kernel before its value checks have answered
    (they run beside it and raise afterwards); valid spans pass through unchanged."""
    start = tl.minimum(tl.maximum(start, 0), seq_len)  # same shape as start
    return start.to(tl.int32), tl.minimum(tl.maximum(end, start), seq_len).to(tl.int32)


@triton.jit
def _gather_rows(PTR, off, ok, sd, D, OFFS_D0: tl.constexpr, WIDTH: tl.constexpr, DOT_F32: tl.constexpr):
    """Rows ``[M, WIDTH]`` at element offsets ``off [M]``, columns ``OFFS_D0 + [0, WIDTH)`` (< D;
    0 outside and on rows where ``ok [M]`` is false), upcast to fp32 with ``DOT_F32``."""
    offs_d = OFFS_D0 + tl.arange(0, WIDTH)  # [WIDTH]
    x = tl.load(PTR + off[:, None] + offs_d[None, :] * sd,  # [M, WIDTH]
                mask=ok[:, None] & (offs_d[None, :] < D), other=0.0)
    if DOT_F32:
        x = x.to(tl.float32)
    return x


@triton.jit
def _load_q(Q, q_off, rows_ok, sq_d, Dk, DK1: tl.constexpr, DK2: tl.constexpr, DOT_F32: tl.constexpr):
    """The q tiles ``[M, DK1]`` and ``[M, DK2]`` (Dk as two power-of-two slices) of the rows at
    element offsets ``q_off [M]``; with ``DK2 == 0`` the second is a placeholder (``q1``)."""
    q1 = _gather_rows(Q, q_off, rows_ok, sq_d, Dk, 0, DK1, DOT_F32)  # [M, DK1]
    if DK2 > 0:
        q2 = _gather_rows(Q, q_off, rows_ok, sq_d, Dk, DK1, DK2, DOT_F32)  # [M, DK2]
    else:
        q2 = q1  # unused
    return q1, q2


@triton.jit
def _chunk_tile(chunk, tile_id, NT, G, BLOCK_N: tl.constexpr):
    """A reader-list chunk (its row ``(tile, e0, e1, slot)`` at ``chunk``, global tile ``tile_id = (b * G + g) * NT
    + tile``, checked >= 0 by the caller): ``(e0, e1, slot, bg, b, g, k0)``, its entries ``[e0, e1)``, its workspace
    slot, ``bg = b * G + g`` and ``k0`` the tile's first key."""
    e0 = tl.load(chunk + 1)
    e1 = tl.load(chunk + 2)
    slot = tl.load(chunk + 3)
    bg = tile_id // NT
    return e0, e1, slot, bg, bg // G, bg % G, (tile_id % NT) * BLOCK_N


@triton.jit
def _key_value_rows(K, V, b, g, k0, T, Dk, Dv, sk_b, sk_g, sk_t, sk_d, sv_b, sv_g, sv_t, sv_d,
                    BLOCK_N: tl.constexpr, DK1: tl.constexpr, DK2: tl.constexpr, BLOCK_DV: tl.constexpr,
                    DOT_F32: tl.constexpr):
    """The key tile at ``k0`` of KV head ``(b, g)`` as rows: ``(n_ok [BLOCK_N], k1 [BLOCK_N, DK1], k2 [BLOCK_N,
    DK2], v [BLOCK_N, BLOCK_DV])``, keys past ``T`` as 0 (``k2`` is ``k1`` as a placeholder when ``DK2 == 0``)."""
    offs_n = tl.arange(0, BLOCK_N)  # [BLOCK_N]
    n_ok = (k0 + offs_n) < T  # [BLOCK_N]
    k_off = b * sk_b + g * sk_g + (k0 + offs_n).to(tl.int64) * sk_t  # [BLOCK_N]
    v_off = b * sv_b + g * sv_g + (k0 + offs_n).to(tl.int64) * sv_t  # [BLOCK_N]
    k1 = _gather_rows(K, k_off, n_ok, sk_d, Dk, 0, DK1, DOT_F32)  # [BLOCK_N, DK1]
    v = _gather_rows(V, v_off, n_ok, sv_d, Dv, 0, BLOCK_DV, DOT_F32)  # [BLOCK_N, BLOCK_DV]
    if DK2 > 0:
        k2 = _gather_rows(K, k_off, n_ok, sk_d, Dk, DK1, DK2, DOT_F32)  # [BLOCK_N, DK2]
    else:
        k2 = k1  # placeholder, never used
    return n_ok, k1, k2, v


@triton.jit
def _merge_rows(SPANS, S, G, h, n_spans, T, per_row, n_rows, sr_b, sr_s, sr_g, sr_n, sr_e,
                BLOCK_N: tl.constexpr, PAIRS: tl.constexpr, HP: tl.constexpr, BLOCK_S: tl.constexpr):
    """The ``PAIRS`` (row, head) pairs of a key-major merge program, row ``(b * S + s) * G + g``, and how many
    partials each row has: ``(row, head, ok, b, s, g, total)``, all ``[PAIRS]``.  A row's partials are its (span,
    key tile) pairs in the order ``sel_bwd_reader_keys_kernel`` numbers them (spans in slot order, tiles in key
    order); counted here from the row's spans clamped into ``[0, T]``, cut at ``per_row``."""
    r = tl.arange(0, PAIRS)  # [PAIRS]
    row = tl.program_id(0).to(tl.int64) * (PAIRS // HP) + r // HP  # [PAIRS]
    head = r % HP  # [PAIRS]
    ok = (row < n_rows) & (head < h)  # [PAIRS]
    g = row % G
    s = (row // G) % S
    b = row // (G * S)
    offs_s = tl.arange(0, BLOCK_S)  # [BLOCK_S]
    s_ok = ok[:, None] & (offs_s < n_spans)[None, :]  # [PAIRS, BLOCK_S]
    span = SPANS + (b * sr_b + s * sr_s + g * sr_g)[:, None] + offs_s.to(tl.int64)[None, :] * sr_n
    start, end = _clamp_spans(tl.load(span, mask=s_ok, other=0), tl.load(span + sr_e, mask=s_ok, other=0), T)
    tiles = tl.where(end > start, (end - 1) // BLOCK_N - start // BLOCK_N + 1, 0)  # [PAIRS, BLOCK_S]
    total = tl.minimum(tl.sum(tiles, 1), per_row)  # [PAIRS]
    return row, head, ok, b, s, g, total


@triton.jit
def _partial_exponent(log2_bound):
    """The power of two ``e`` (float32, any shape) by which a key-major partial result is divided before it is
    stored in float16, from ``log2_bound``, the log2 of a bound on the result's magnitude: the stored values then
    lie within 2**15 (float16's finite range ends at 65504, so the bound's own rounding has room), a bf16 value
    past 65504 stays finite, and a value down to 2**-28 of the bound keeps float16's 11 bits, so a loose bound
    costs no precision.  Clamped to [-126, 126], float32's normal powers (a zero bound, log2 -inf, gives -126; a
    NaN one 126: its result is NaN anyway)."""
    e = tl.ceil(log2_bound) - 15.0
    e = tl.where(e < 126.0, e, 126.0)  # where, not minimum: NaN goes one way on every backend
    return tl.where(e > -126.0, e, -126.0)
