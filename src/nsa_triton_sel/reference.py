"""Reference implementations of NSA selection attention.

- :func:`oracle` computes the definition directly in float64 on the CPU: for every row
  ``(b, s, g)`` gather the selected keys, take a plain (non-causal) softmax of the
  scaled scores, and weight the values.  Slow, obviously right, for tests.
- :func:`packed_sdpa` is the fast reference and the dispatcher's fallback: a vectorised
  gather of every row's selected keys into a padded buffer plus a key-padding mask,
  then ``scaled_dot_product_attention`` with that mask and no causal flag, in chunks
  of rows so memory stays bounded.  No Python loop over rows; host syncs: one for
  the longest row, plus one for the range check unless ``validate=False``;
  differentiable (empty rows get zero gradients, never NaN).
- :func:`sdpa_rows` is the same SDPA call on already-packed rows ``[N, L, D]``; the
  benchmarks time it against the packed Triton kernels.

Why no causal flag: with one query per row, PyTorch's ``is_causal`` is aligned to the
top-left corner and lets the query see only the first key (math/cuDNN backends) or
the first 64 keys (memory-efficient backend).  Causality lives in the ranges.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .contract import Dims, check_qkv, check_ranges, resolve_scale, wants_grad

DEFAULT_CHUNK_BYTES = 256 << 20


def oracle(q, k, v, ranges, *, scale=None, return_lse=False, validate=True):
    """Float64 selection attention, computed row by row on the CPU.

    Returns ``out`` ``[B, S, G, h, Dv]`` (float64, CPU) and, with ``return_lse``, the
    natural-log LSE ``[B, S, G, h]`` (float64; ``-inf`` for a row with no key).
    Differentiable in q, k and v (float64 autograd: the gradient reference), and stable for
    large logits: the row maximum is subtracted before ``exp`` and the weights are normalised
    by their own sum, so q=[[1e9]], k=[[1e9], [1e9]], v=[[0], [1]], scale=1 gives 0.5.
    """
    dims = check_qkv(q, k, v, allow_fp32=True)
    check_ranges(ranges, dims, q.device, validate=validate)
    B, S, G, h, Dk, T, Dv = dims
    sc = resolve_scale(scale, Dk)
    qd, kd, vd = (x.to("cpu", torch.float64) for x in (q, k, v))
    spans = ranges.detach().to("cpu", torch.int64).tolist()
    outs, lses = [], []
    zero_o = qd.new_zeros(h, Dv)
    none_l = qd.new_full((h,), float("-inf"))
    for b in range(B):
        for s in range(S):
            for g in range(G):
                idx = [torch.arange(st, en) for st, en in spans[b][s][g] if en > st]
                if not idx:
                    outs.append(zero_o)
                    lses.append(none_l)
                    continue
                sel = torch.cat(idx)
                scores = (qd[b, s, g] @ kd[b, g, sel].T) * sc  # [h, L]
                m = scores.max(dim=-1, keepdim=True).values.detach()  # [h, 1]
                p = torch.exp(scores - m)  # [h, L], largest term 1
                denom = p.sum(dim=-1, keepdim=True)  # [h, 1] in [1, L]
                outs.append((p @ vd[b, g, sel]) / denom)
                lses.append((m + torch.log(denom))[:, 0])
    out = torch.stack(outs).reshape(B, S, G, h, Dv)
    if all(o is zero_o for o in outs):  # every row empty: still a graph, zero gradients
        out = _differentiable_zeros(out.shape, qd, kd, vd)
    lse = torch.stack(lses).reshape(B, S, G, h)
    return (out, lse) if return_lse else out


def _differentiable_zeros(shape, q, k, v):
    """Zeros in v's dtype that, when q, k or v require grad, hang on the graph with zero gradients:
    a call whose rows are all empty must still support ``backward()`` (as the Triton operator does).
    The link is the sum of an empty slice of each input (0, no copy, never NaN)."""
    out = torch.zeros(shape, dtype=v.dtype, device=v.device)
    if wants_grad(q, k, v):
        out = out + sum(x[:0].sum() for x in (q, k, v)).to(v.dtype)
    return out


def _row_key_index(ranges_rows: torch.Tensor, L_max: int):
    """For rows of spans ``[R, n, 2]``, the key index of each of the ``L_max`` slots.

    Returns ``(key [R, L_max] int64, valid [R, L_max] bool)``: slot ``p`` of a row holds
    the p-th selected key of that row, in span order.
    """
    r = ranges_rows.to(torch.int64)
    start, end = r[..., 0], r[..., 1]
    lens = (end - start).clamp_min(0)
    cum = lens.cumsum(-1)  # inclusive
    slot = torch.arange(L_max, device=r.device).expand(r.shape[0], L_max).contiguous()
    span = torch.searchsorted(cum, slot, right=True).clamp_max(r.shape[1] - 1)
    first = (cum - lens).gather(-1, span)
    key = start.gather(-1, span) + slot - first
    valid = slot < cum[:, -1:]
    return torch.where(valid, key, torch.zeros_like(key)), valid


def _gather_keys(x, b_of, g_of, key, valid):
    """``x[b, g, key]`` per row and slot ``[r, L, D]``, zero in the padding slots.

    A padding slot indexes key 0 (any in-range index would do); its gathered row is replaced by
    zeros with ``where``, not multiplied by 0, so an inf or NaN at key 0 cannot reach the rows that
    never selected it (0 * inf = NaN), in the forward or in the gradients."""
    xb = x[b_of[:, None], g_of[:, None], key]
    return torch.where(valid[..., None], xb, torch.zeros((), dtype=xb.dtype, device=xb.device))


def _bytes_per_row(L_max: int, h: int, Dk: int, Dv: int, elem: int) -> int:
    """Estimated peak bytes one row costs in a chunk, to size chunks.

    The gathered keys and values (plus a float32 copy, which the math backend and the
    LSE make for half inputs), the slot-index bookkeeping (a few int64 per slot) and
    the h x L_max float32 scores and probabilities.
    """
    return L_max * ((Dk + Dv) * (elem + 4) + 48 + 16 * h)


def packed_sdpa(
    q,
    k,
    v,
    ranges,
    *,
    scale=None,
    return_lse=False,
    validate=True,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
):
    """Selection attention through a vectorised gather and masked SDPA.

    Output ``[B, S, G, h, Dv]`` in v's dtype; with ``return_lse`` also the natural-log
    LSE ``[B, S, G, h]`` in float32.  A row with no selected key gives zeros (LSE -inf).
    Rows are processed in chunks whose gathered buffers stay under ``chunk_bytes``
    (estimated; at least one row per chunk), so memory does not grow with B * S * G.
    """
    dims = check_qkv(q, k, v, allow_fp32=True)
    check_ranges(ranges, dims, q.device, validate=validate)
    B, S, G, h, Dk, T, Dv = dims
    sc = resolve_scale(scale, Dk)
    n = ranges.shape[3]
    R = dims.rows
    row = torch.arange(R, device=q.device)
    shape_o, shape_l = (B, S, G, h, Dv), (B, S, G, h)
    rows_r = ranges.reshape(R, n, 2)
    lens = (rows_r[..., 1].to(torch.int64) - rows_r[..., 0].to(torch.int64)).clamp_min(0)
    L_row = lens.sum(-1)
    L_max = int(L_row.max()) if n and R else 0  # the one host synchronisation
    if L_max == 0:
        out = _differentiable_zeros(shape_o, q, k, v)
        lse = torch.full(shape_l, float("-inf"), device=q.device)
        return (out, lse) if return_lse else out
    q_rows = q.reshape(R, h, Dk)
    b_of = row // (S * G)
    g_of = row % G
    chunk = max(1, chunk_bytes // _bytes_per_row(L_max, h, Dk, Dv, v.element_size()))
    outs, lses = [], []
    for r0 in range(0, R, chunk):
        r1 = min(R, r0 + chunk)
        key, valid = _row_key_index(rows_r[r0:r1], L_max)
        kb = _gather_keys(k, b_of[r0:r1], g_of[r0:r1], key, valid)  # [r, L_max, Dk]
        vb = _gather_keys(v, b_of[r0:r1], g_of[r0:r1], key, valid)  # [r, L_max, Dv]
        nonempty = (L_row[r0:r1] > 0)[:, None]
        # An empty row would make SDPA divide 0 by 0 (NaN, also in the backward): let it see slot 0 (key 0)
        # and zero its output afterwards.  Its q is replaced by zeros for that (where, not * 0): an inf in the
        # q of a row that reads nothing must not become a NaN gradient.
        seen = valid | (~nonempty & (torch.arange(L_max, device=q.device) == 0))  # [r, L_max]
        mask = seen[:, None, None, :]
        qc = torch.where(nonempty[:, :, None], q_rows[r0:r1], torch.zeros((), dtype=q.dtype, device=q.device))
        # The h heads of a row share its keys: run them as h query positions of one
        # attention "head", so SDPA sees every head attend every selected key.
        if qc.device.type == "cpu" and qc.dtype in (torch.float16, torch.bfloat16):
            # torch 2.4's CPU kernel is less accurate on half inputs (bf16 h = 64, Dk = 192: 1.6x the bound the
            # newer releases meet): on the CPU, where this is the reference path, it runs in float32, rounded once
            o = F.scaled_dot_product_attention(qc[:, None].float(), kb[:, None].float(), vb[:, None].float(),
                                               attn_mask=mask, scale=sc)[:, 0].to(qc.dtype)
        else:
            o = F.scaled_dot_product_attention(qc[:, None], kb[:, None], vb[:, None], attn_mask=mask, scale=sc)[:, 0]
        outs.append(torch.where(nonempty[:, :, None], o, torch.zeros_like(o)))
        if return_lse:
            s = torch.einsum("rhd,rld->rhl", qc.float(), kb.float()) * sc
            # Same dummy key as above so logsumexp never sees an all -inf row (its
            # gradient would be NaN); the empty rows' LSE is then set to -inf.
            s = s.masked_fill(~seen[:, None, :], float("-inf"))
            lse = torch.logsumexp(s, dim=-1)
            lses.append(lse.masked_fill(~nonempty, float("-inf")))
    out = torch.cat(outs).reshape(shape_o).to(v.dtype)
    if not return_lse:
        return out
    return out, torch.cat(lses).reshape(shape_l).float()


def packed_backward(q, k, v, ranges, grad_out, *, scale=None, grad_lse=None, chunk_bytes: int = DEFAULT_CHUNK_BYTES):
    """Gradients ``(dq, dk, dv)`` (float32) of selection attention, by the gather of :func:`packed_sdpa`.

    Written out rather than through autograd, so it can run inside an operator's implementation
    (which runs below autograd): per chunk of rows, the softmax ``P`` is recomputed in float32 and
    ``dS = P * (dO V^T - rowsum(dO * O) + dlse)`` (``grad_lse``, the LSE's gradient, optional); ``dk``/``dv`` are scattered back with ``index_add_``
    (on CUDA its order is not deterministic).  One host sync (the longest row).  Empty rows give
    zero gradients.
    """
    B, S, G, h, Dk, T, Dv = dims_of(q, k, v)
    sc = resolve_scale(scale, Dk)
    R, n = B * S * G, ranges.shape[3]
    rows_r = ranges.reshape(R, n, 2)
    L_row = (rows_r[..., 1].to(torch.int64) - rows_r[..., 0].to(torch.int64)).clamp_min(0).sum(-1)
    L_max = int(L_row.max()) if n else 0  # the one host synchronisation
    dq = torch.zeros(R, h, Dk, device=q.device)
    dk = torch.zeros(B * G * T, Dk, device=q.device)
    dv = torch.zeros(B * G * T, Dv, device=q.device)
    row = torch.arange(R, device=q.device)
    b_of, g_of = row // (S * G), row % G
    chunk = max(1, chunk_bytes // _bytes_per_row(max(L_max, 1), h, Dk, Dv, 4))
    for r0 in range(0, R if L_max else 0, chunk):
        r1 = min(R, r0 + chunk)
        key, valid = _row_key_index(rows_r[r0:r1], L_max)  # [r, L]
        kb = _gather_keys(k, b_of[r0:r1], g_of[r0:r1], key, valid).float()  # [r, L, Dk]
        vb = _gather_keys(v, b_of[r0:r1], g_of[r0:r1], key, valid).float()  # [r, L, Dv]
        qc = q.reshape(R, h, Dk)[r0:r1].float()
        go = grad_out.reshape(R, h, Dv)[r0:r1].float()
        s = torch.einsum("rhd,rld->rhl", qc, kb).mul_(sc).masked_fill_(~valid[:, None, :], float("-inf"))
        m = s.amax(-1, keepdim=True)
        p = torch.exp(s - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
        p = p / p.sum(-1, keepdim=True).clamp_min(1e-30)  # [r, h, L]; an empty row stays 0
        o = torch.einsum("rhl,rld->rhd", p, vb)
        delta = (go * o).sum(-1, keepdim=True)
        if grad_lse is not None:  # d lse / d s = P
            delta = delta - grad_lse.reshape(R, h, 1)[r0:r1].float()
        ds = p * (torch.einsum("rhd,rld->rhl", go, vb) - delta)
        dq[r0:r1] = torch.einsum("rhl,rld->rhd", ds, kb) * sc
        flat = ((b_of[r0:r1] * G + g_of[r0:r1]) * T)[:, None] + key  # [r, L] rows of k viewed as [B*G*T]
        w = valid[..., None]  # padding slots add exactly 0 to key 0 (where, not * 0: a NaN row stays its own)
        zero = torch.zeros((), device=q.device)
        dk.index_add_(0, flat.reshape(-1),
                      torch.where(w, torch.einsum("rhl,rhd->rld", ds, qc) * sc, zero).reshape(-1, Dk))
        dv.index_add_(0, flat.reshape(-1), torch.where(w, torch.einsum("rhl,rhd->rld", p, go), zero).reshape(-1, Dv))
    return dq.reshape(B, S, G, h, Dk), dk.reshape(B, G, T, Dk), dv.reshape(B, G, T, Dv)


def sdpa_rows(q, k, v, *, scale=None, key_valid=None):
    """SDPA on packed rows: ``q [N, H, Dk]``, ``k [N, L, Dk]``, ``v [N, L, Dv]``.

    Every one of the H heads of row n attends all L keys of row n (optionally only
    those where ``key_valid [N, L]`` is True); returns ``[N, H, Dv]``.  This is the
    correct packed-SDPA computation the benchmarks time against the Triton kernels.
    """
    mask = None if key_valid is None else key_valid[:, None, None, :]
    return F.scaled_dot_product_attention(
        q[:, None], k[:, None], v[:, None], attn_mask=mask, scale=scale
    )[:, 0]


def dims_of(q, k, v) -> Dims:
    """Sizes of a call, for callers that already validated their inputs."""
    B, S, G, h, Dk = q.shape
    return Dims(B, S, G, h, Dk, k.shape[2], v.shape[3])
