"""``train_nsa.py --sweep``: time the backward kernels' launch configurations, phase by phase.

On one problem (the forward's output, LSE and an upstream gradient computed once) it times:

- the dq kernel (which also computes delta) for each (BLOCK_N, warps, stages) in ``DQ_CONFIGS``,
  and on local selections the multi-token dq kernel for each config in ``TOK_CONFIGS``;
- the reader CSR (count, entry count to the host, fill) for each key tile size;
- the dk/dv kernel plus the reduction of split tiles for each (BLOCK_N, ROWS, warps, stages)
  in ``KV_CONFIGS``, and for the best of those a few chunk sizes (``programs_per_sm``);

then the whole backward with the defaults and with the best, and returns the fastest combination as ``sel_attn_backward`` keywords.  A configuration that
fails to compile or launch is reported and skipped.
"""

from __future__ import annotations

import torch

from nsa_triton_sel.device import device_of

DQ_CONFIGS = [  # (dq_block_n, dq_warps, dq_stages); the first is the default for h = 16, D = 128
    (32, 2, 3), (32, 1, 3), (32, 4, 3), (64, 2, 3), (64, 4, 3), (16, 1, 3), (32, 2, 2), (64, 4, 2),
]
KV_CONFIGS = [  # (kv_block_n, rows, kv_warps, kv_stages); the first is the default
    (64, 64, 8, 3), (64, 64, 8, 2), (64, 64, 4, 3), (64, 128, 8, 3), (64, 32, 4, 3), (32, 64, 4, 3),
    (32, 128, 4, 3), (128, 64, 8, 3), (64, 64, 8, 4),
]
TOK_CONFIGS = [  # (tok_block_n, tok_warps, tok_stages) of the multi-token dq kernel, on local selections
    (32, 4, 2), (64, 4, 2), (32, 8, 2), (64, 8, 2), (32, 4, 3), (16, 4, 2), (32, 2, 2),
]
PROGRAMS_PER_SM = (4, 16, 32)  # against the default (backward_meta.CHUNK_PROGRAMS_PER_SM)


def _time(fn, bench) -> float | str:
    try:
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return bench(fn)
    except Exception as exc:  # noqa: BLE001 - a config that does not compile is a result
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:80] if str(exc) else ''}"


def _fmt(x) -> str:
    return f"{x:8.3f} ms" if isinstance(x, float) else f"failed ({x})"


def _readers(ranges, T: int, bn: int, h: int, rows: int, programs: int):
    """The backward's reader list for ``ranges`` with tiles of ``bn`` keys, about ``programs`` dk/dv programs."""
    from nsa_triton_sel.plan import entries_per_row
    from nsa_triton_sel.plan.backward import backward_meta, chunk_size

    from nsa_triton_sel.kernels import readers

    B, S, G, n, _ = ranges.shape
    per_row = entries_per_row(n, T, bn, 0, aligned=False)
    meta = backward_meta(h=h, Dk=16, Dv=16, n_spans=n, kv_block_n=bn)  # the reader kernels read only tiles, spans
    return readers.reader_list(ranges, T, meta, per_row=per_row,
                               chunk=chunk_size(B * S * G * per_row, programs, rows, h))


def sweep_tok(p, bench, log) -> dict:
    """The multi-token dq kernel's configurations on (local) problem ``p``, against the
    single-token dq kernel; returns the best ``tok_*`` keywords."""
    from nsa_triton_sel.kernels import direct, launch
    from nsa_triton_sel.plan.backward import backward_meta, dq_tokens_per_program

    q, k, v, ranges, go = p.q, p.k, p.v, p.ranges, p.grad_out
    B, S, Gn, h, Dk = q.shape
    cap = device_of(q.device).max_rows
    tok = dq_tokens_per_program(h, cap)
    if not tok:
        return {}
    out, lse = direct.sel_attn_tokens(q, k, v, ranges, return_lse=True)
    dq = torch.empty_like(q)
    delta = torch.empty((B, S, Gn, h), dtype=torch.float32, device=q.device)
    dlse = torch.zeros((), device=q.device).expand(B, S, Gn, h)
    nonfinite = torch.zeros((1,), dtype=torch.int32, device=q.device)  # the dq kernel's flag for the dk/dv kernel
    sc = Dk ** -0.5
    single = backward_meta(h=h, Dk=Dk, Dv=v.shape[3], n_spans=ranges.shape[3], max_rows=cap)
    t = _time(lambda: launch._launch_dq(q, k, v, ranges, out, lse, go, dlse, dq, delta, nonfinite, single, sc), bench)
    log(f"sweep on T={p.T} {p.sel}: dq kernel one token per program (default config): {_fmt(t)}")
    times = {}
    for bn, w, st in TOK_CONFIGS:
        meta = backward_meta(h=h, Dk=Dk, Dv=v.shape[3], n_spans=ranges.shape[3], max_rows=cap, dq_tokens=tok,
                             tok_block_n=bn, tok_warps=w, tok_stages=st)
        times[(bn, w, st)] = _time(
            lambda: launch._launch_dq(q, k, v, ranges, out, lse, go, dlse, dq, delta, nonfinite, meta, sc), bench)
        log(f"  dq {tok} tokens/program BLOCK_N={bn:3d} warps={w} stages={st}: {_fmt(times[(bn, w, st)])}")
    ok = {c: t for c, t in times.items() if isinstance(t, float)}
    if not ok:
        return {}
    bn, w, st = min(ok, key=ok.get)
    return {"tok_block_n": bn, "tok_warps": w, "tok_stages": st}


def sweep(p, bench, log, local=None) -> dict:
    """Time the configurations on problem ``p`` (and the multi-token dq kernel on ``local``);
    returns the best keywords for ``sel_attn_backward``."""
    from nsa_triton_sel.kernels import direct, launch
    from nsa_triton_sel.plan.backward import CHUNK_PROGRAMS_PER_SM, backward_meta

    q, k, v, ranges, go = p.q, p.k, p.v, p.ranges, p.grad_out
    B, S, Gn, h, Dk = q.shape
    T, Dv = k.shape[2], v.shape[3]
    out, lse = direct.sel_attn_ranges(q, k, v, ranges, return_lse=True)
    sc = Dk ** -0.5
    cap = device_of(q.device).max_rows
    dq = torch.empty_like(q)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    delta = torch.empty((B, S, Gn, h), dtype=torch.float32, device=q.device)
    dlse = torch.zeros((), device=q.device).expand(B, S, Gn, h)
    nonfinite = torch.zeros((1,), dtype=torch.int32, device=q.device)  # the dq kernel's flag for the dk/dv kernel
    programs = CHUNK_PROGRAMS_PER_SM * device_of(q.device).sm_count
    log(f"sweep on T={p.T} {p.sel}: dq kernel")
    dq_times = {}
    for bn, w, s in DQ_CONFIGS:
        meta = backward_meta(h=h, Dk=Dk, Dv=Dv, n_spans=ranges.shape[3], max_rows=cap, dq_block_n=bn,
                             dq_warps=w, dq_stages=s)
        t = _time(lambda: launch._launch_dq(q, k, v, ranges, out, lse, go, dlse, dq, delta, nonfinite, meta, sc), bench)
        dq_times[(bn, w, s)] = t
        log(f"  dq BLOCK_N={bn:3d} warps={w} stages={s}: {_fmt(t)}")
    launch._launch_dq(q, k, v, ranges, out, lse, go, dlse, dq, delta, nonfinite,
                      backward_meta(h=h, Dk=Dk, Dv=Dv, max_rows=cap), sc)
    log("  reader list (sized from the shapes, no host read) and dk/dv kernel + reduce")
    csrs, kv_times = {}, {}
    for bn, rows, w, s in KV_CONFIGS:
        if bn > cap:
            continue
        meta = backward_meta(h=h, Dk=Dk, Dv=Dv, max_rows=cap, kv_block_n=bn, rows=rows, kv_warps=w, kv_stages=s)
        if bn not in csrs:
            build = lambda: _readers(ranges, T, bn, h, rows, programs)  # noqa: E731
            csrs[bn] = build()
            log(f"  reader list BLOCK_N={bn}: {_fmt(_time(build, bench))} ({csrs[bn].entries.shape[0]} entries "
                f"capacity, {csrs[bn].chunks.shape[0]} programs, chunk {csrs[bn].chunk}, {csrs[bn].slots} slots)")
        csr = csrs[bn]
        t = _time(lambda: launch._launch_dkdv(q, k, v, lse, go, delta, nonfinite, dk, dv, csr, meta, sc), bench)
        kv_times[(bn, rows, w, s)] = t
        log(f"  dkdv BLOCK_N={bn:3d} ROWS={rows:3d} warps={w} stages={s}: {_fmt(t)}")
    best = {}
    ok_dq = {c: t for c, t in dq_times.items() if isinstance(t, float)}
    if ok_dq:
        bn, w, s = min(ok_dq, key=ok_dq.get)
        best.update(dq_block_n=bn, dq_warps=w, dq_stages=s)
    ok_kv = {c: t for c, t in kv_times.items() if isinstance(t, float)}
    if ok_kv:
        bn, rows, w, s = min(ok_kv, key=ok_kv.get)
        best.update(kv_block_n=bn, rows=rows, kv_warps=w, kv_stages=s)
        meta = backward_meta(h=h, Dk=Dk, Dv=Dv, max_rows=cap, kv_block_n=bn, rows=rows, kv_warps=w, kv_stages=s)
        best_t = ok_kv[(bn, rows, w, s)]
        for pps in PROGRAMS_PER_SM:
            csr = _readers(ranges, T, bn, h, rows, pps * device_of(q.device).sm_count)
            t = _time(lambda: launch._launch_dkdv(q, k, v, lse, go, delta, nonfinite, dk, dv, csr, meta, sc), bench)
            log(f"  dkdv programs_per_sm={pps} (chunk {csr.chunk}, {csr.chunks.shape[0]} programs): {_fmt(t)}")
            if isinstance(t, float) and t < best_t * 0.97:
                best["programs_per_sm"], best_t = pps, t
    full = lambda tune: _time(lambda: direct.sel_attn_backward(q, k, v, ranges, out, lse, go, **tune), bench)  # noqa: E731
    t_default, t_best = full({}), full(best)
    log(f"  whole backward: default {_fmt(t_default)}, best {_fmt(t_best)}")
    if local is not None:
        best.update(sweep_tok(local, bench, log))
    log(f"sweep best: {best}")
    return best
