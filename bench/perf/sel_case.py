"""One comparison of the selection sweep (``python -m bench.perf.bench_sel_triton``): identical inputs for
both sides, the callables to time, the oracle MAE, and the timed CSV row (retried while noisy); and the sweep's
validated arguments (:class:`Args`), so the sweep imports this module and nothing here imports the sweep.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bench.common import accounting, csvio, guards, problems, timers


@dataclass
class Args:
    """The sweep's validated arguments, lists already parsed (``bench_sel_triton.parse_args`` builds them)."""

    Ns: list
    Hs: list
    dims: list
    Ls: list
    dists: list
    streams: list
    iters: int
    warmup: int
    csv: str | None
    decode: bool
    l_sel: int
    T: int
    dtype: str
    mae_rows: int
    extra: bool
    timer: str
    rep_ms: int
    seed: int
    dry_run: bool
    budget_s: float = 0.0
    retries: int = 2


def mode_of(dist: str) -> str:
    return {"few": "dense", "many": "varlen", "mixed": "varlen", "decode": "decode"}[dist]


def seq_len(a: Args, dist: str, L: int) -> int:
    """Length of the key sequence the spans live in."""
    if a.T:
        return a.T
    if dist == "few":
        return L
    if dist == "decode":
        return max(8192, 2 * L)
    return 4 * L


@dataclass
class Case:
    """Identical inputs for both sides of one comparison."""

    q: torch.Tensor  # [N, H, Dk]
    kp: torch.Tensor  # [N, L, Dk] packed (gathered) keys
    vp: torch.Tensor  # [N, L, Dv]
    k5: torch.Tensor  # [N, 1, T, Dk] key sequence (packed itself for few)
    v5: torch.Tensor
    ranges: torch.Tensor  # [N, 1, 1, n, 2] int32
    nspans: int
    T: int


def make_case(a: Args, dist: str, N: int, H: int, Dk: int, Dv: int, L: int, device) -> Case:
    """Random inputs (seeded per case) and the packed copy of exactly the selected keys."""
    gen = torch.Generator().manual_seed(a.seed * 1_000_003 + N * 7919 + H * 131 + Dk * 17 + Dv + L)
    T = seq_len(a, dist, L)
    if dist == "decode":
        spans = problems.decode_lengths(N, L, a.l_sel, T, gen)
    else:
        spans = problems.spans_from_lengths(problems.span_lengths(dist, N, L, gen), T, gen)
    dt = csvio.DTYPES[a.dtype]
    q = torch.randn(N, H, Dk, device=device, dtype=dt)
    k5 = torch.randn(N, 1, T, Dk, device=device, dtype=dt)
    v5 = torch.randn(N, 1, T, Dv, device=device, dtype=dt)
    idx = problems.gather_index(spans, L).to(device)
    rows = torch.arange(N, device=device)[:, None]
    kp = k5[rows, 0, idx].contiguous()
    vp = v5[rows, 0, idx].contiguous()
    nspans = int((spans[..., 1] > spans[..., 0]).sum(-1).max())
    return Case(q, kp, vp, k5, v5, spans[:, None, None].to(device), nspans, T)


def sides(a: Args, dist: str, case: Case):
    """The callables to time: (tri, ref, tri_packed or None, ref_gather or None)."""
    from nsa_triton_sel.kernels import direct as K
    from nsa_triton_sel.reference import packed_sdpa, sdpa_rows

    q, kp, vp = case.q, case.kp, case.vp
    N, H, Dk = q.shape
    q5 = q.view(N, 1, 1, H, Dk)
    ref = lambda: sdpa_rows(q, kp, vp)  # noqa: E731
    gather = (lambda: packed_sdpa(q5, case.k5, case.v5, case.ranges, validate=False)) if a.extra else None
    if dist == "few":
        return (lambda: K.sel_attn_fwd_dense(q, kp, vp)), ref, None, gather
    if dist == "decode":
        return (lambda: K.sel_attn_decode(q5, case.k5, case.v5, case.ranges)), ref, None, gather
    L = kp.shape[1]
    cu = torch.arange(0, (N + 1) * L, L, device=q.device, dtype=torch.int32)
    kf, vf = kp.view(N * L, Dk), vp.view(N * L, vp.shape[2])
    packed = (lambda: K.sel_attn_fwd_varlen(q, kf, vf, cu)) if a.extra else None
    return (lambda: K.sel_attn_ranges(q5, case.k5, case.v5, case.ranges)), ref, packed, gather


def mae_vs_oracle(case: Case, o_tri: torch.Tensor, o_ref: torch.Tensor, rows: int) -> tuple[float, float, int]:
    """Mean |out - oracle| of both sides on up to ``rows`` evenly spaced rows (float64 oracle)."""
    from nsa_triton_sel.reference import oracle

    N, H, Dk = case.q.shape
    if rows <= 0:
        return float("nan"), float("nan"), 0
    idx = torch.linspace(0, N - 1, min(rows, N)).round().long().unique()
    L = case.kp.shape[1]
    r = len(idx)
    q = case.q[idx.to(case.q.device)].cpu().view(r, 1, 1, H, Dk)
    k = case.kp[idx.to(case.q.device)].cpu().view(r, 1, L, Dk)
    v = case.vp[idx.to(case.q.device)].cpu().view(r, 1, L, -1)
    rng = torch.tensor([0, L], dtype=torch.int32).expand(r, 1, 1, 1, 2).contiguous()
    want = oracle(q, k, v, rng).view(r, H, -1)
    tri = o_tri.reshape(N, H, -1)[idx.to(o_tri.device)].cpu().double()
    ref = o_ref.reshape(N, H, -1)[idx.to(o_ref.device)].cpu().double()
    return (tri - want).abs().mean().item(), (ref - want).abs().mean().item(), r


def run_case(a: Args, dist: str, N, H, Dk, Dv, L, streams, timer, ceil, env, device) -> dict:
    """Time one configuration and return its CSV row (status 'error: ...' on failure)."""
    row = {"mode": mode_of(dist), "dist": dist, "N": N, "H": H, "D": Dk, "Dv": Dv, "L": L, "streams": streams,
           "dtype": a.dtype, "l_sel": a.l_sel if dist == "decode" else "", "timer": timer.name, "iters": a.iters,
           "copy_gbs": ceil["copy_gbs"], "mm_tflops": ceil["mm_tflops"], "status": "ok", **env}
    try:
        case = make_case(a, dist, N, H, Dk, Dv, L, device)
        row.update(nspans=case.nspans, T=case.T)
        tri, ref, tri_packed, ref_gather = sides(a, dist, case)
        o_tri, o_ref = tri(), ref()
        mae, ref_mae, nrows = mae_vs_oracle(case, o_tri, o_ref, a.mae_rows)
        has_nan = bool(torch.isnan(o_tri).any() or torch.isnan(o_ref).any())
        row.update(mae=float("nan") if has_nan else mae, ref_mae=ref_mae, mae_rows=nrows)
        if device.type == "cuda":
            row["ref_kernel"] = ref_kernel(ref, case)
        nbytes = accounting.sel_bytes(N, H, Dk, Dv, L, case.q.element_size())
        flops = accounting.sel_flops(N, H, Dk, Dv, L)
        t, methods = {}, {}
        for side, fn in (("tri", tri), ("ref", ref), ("tri_packed", tri_packed), ("ref_gather", ref_gather)):
            if fn is None:
                continue
            if isinstance(timer, timers.ModelTimer):
                timer.expect(nbytes * (2 if side == "ref_gather" else 1), "tri" if side.startswith("tri") else "ref")
            # packed_sdpa syncs with the host (its longest row): not capturable; streams > 1 neither.
            tm = timer(timers.on_streams(fn, streams), graph=side != "ref_gather" and streams == 1)
            methods[side] = getattr(timer, "last", timer.name)
            if getattr(timer, "last_host_behind", False):  # the hold ended before the host was done
                methods[side] += " (host behind)"
            if side in ("tri", "ref"):
                row[f"{side}_host_us"] = getattr(timer, "last_host_us", float("nan"))
            t[side] = timers.Timing(tm.median_ms / streams, tm.p20_ms / streams, tm.p80_ms / streams)
        row["timer"] = timer_label(timer.name, methods)
        row.update(tri_ms=t["tri"].median_ms, ref_ms=t["ref"].median_ms,
                   tri_p20_ms=t["tri"].p20_ms, tri_p80_ms=t["tri"].p80_ms,
                   ref_p20_ms=t["ref"].p20_ms, ref_p80_ms=t["ref"].p80_ms,
                   tri_packed_ms=t["tri_packed"].median_ms if "tri_packed" in t else "",
                   ref_gather_ms=t["ref_gather"].median_ms if "ref_gather" in t else "")
        row["speedup"] = row["ref_ms"] / row["tri_ms"] if row["tri_ms"] > 0 else float("nan")
        for side in ("tri", "ref"):
            gbs, tfl, pct = accounting.rates(row[f"{side}_ms"], nbytes, flops, ceil["copy_gbs"])
            row.update({f"{side}_gbs": gbs, f"{side}_tflops": tfl, f"{side}_pct_bw": pct})
    except Exception as exc:  # noqa: BLE001 - one bad shape must not end a long sweep
        msg = f"{type(exc).__name__}: {exc}".replace("\n", " ").replace(",", ";")[:200]
        row.update(status=f"error: {msg}", tri_ms=float("nan"), ref_ms=float("nan"), mae=float("nan"))
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    return row


_REF_KERNELS: dict[tuple, str] = {}


def ref_kernel(ref, case: Case) -> str:
    """The kernels SDPA ran for the reference (profiled once per packed shape: the backend
    choice depends on shapes and dtype only, and few/many/mixed share the packed shapes)."""
    key = (tuple(case.q.shape), tuple(case.kp.shape), tuple(case.vp.shape), case.q.dtype)
    if key not in _REF_KERNELS:
        _REF_KERNELS[key] = timers.cuda_kernels(ref)
    return _REF_KERNELS[key]


def timed_case(a: Args, dist, N, H, Dk, Dv, L, streams, timer, ceil, env, device) -> dict:
    """:func:`run_case`, re-run up to ``a.retries`` times while a side's timings are noisy;
    returns the attempt with the smallest spread, with ``retries`` = attempts - 1."""
    best, attempts = None, 0
    while True:
        r = run_case(a, dist, N, H, Dk, Dv, L, streams, timer, ceil, env, device)
        attempts += 1
        if best is None or _spread(r) < _spread(best):
            best = r
        if r["status"] != "ok" or not guards.noisy_sides(best) or attempts > a.retries:
            break
    best["retries"] = attempts - 1
    return best


def _spread(r: dict) -> float:
    """The larger p80/p20 ratio of the two sides (inf for a failed row)."""
    try:
        return max(float(r[f"{s}_p80_ms"]) / float(r[f"{s}_p20_ms"]) for s in ("tri", "ref"))
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return float("inf")


def timer_label(default: str, methods: dict) -> str:
    """The row's ``timer`` cell: the timer's name, plus every side timed another way."""
    other = [f"{side}={m}" for side, m in methods.items() if m != default]
    return "; ".join([default] + other)
