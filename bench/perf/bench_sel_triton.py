#!/usr/bin/env python
"""Selection attention: Triton kernels vs the correct packed SDPA, swept over L.

Seed-compatible interface (every size option also takes a comma list, so one process
runs a whole matrix with one compile cache and one ceiling measurement)::

    python -m bench.perf.bench_sel_triton --N 1024 --H 8 --D 128 --Dv 128 \
        --L_list 64,128,256,512,1024 --dist few --iters 50 --warmup 5 --streams 1 --csv sel_dense.csv
    python -m bench.perf.bench_sel_triton --decode 1 --H 4 --D 64 --Dv 64 --L_list 128,256,512

What is compared (identical input tensors on both sides, built once per case):

- ``few`` (mode ``dense``): one contiguous span of L per row.  Triton
  ``sel_attn_fwd_dense`` and SDPA (``reference.sdpa_rows``) both read the packed
  ``[N, L, D]`` tensors; ``ref_gather_ms`` is ``packed_sdpa`` on the same keys given as
  one span ``[0, L)`` per row (what the dispatcher runs for such a row).
- ``many`` / ``mixed`` (mode ``varlen``): 8 equal spans, or 2/4/8 random spans, summing
  to L and scattered over a ``T``-long key sequence per row (default T = 4 L).
  ``tri_ms`` is the ranges-native kernel (``sel_attn_ranges``) reading the scattered
  spans in place; ``ref_ms`` is SDPA on the *pre-gathered* packed keys, gather not
  timed.  That favours SDPA (it is charged no gather), so the speedup and the threshold
  derived from it are conservative.  Two more columns show the other fair pairings:
  ``tri_packed_ms`` (``sel_attn_fwd_varlen`` on the packed keys, the seeds' pairing)
  and ``ref_gather_ms`` (``packed_sdpa``: gather + masked SDPA, the dispatcher's
  actual fallback).
- ``--decode`` (mode ``decode``): one query per row, ``L / l_sel`` random blocks of
  ``l_sel`` keys from a ``T``-long cache; Triton ``sel_attn_decode`` (split-L) vs SDPA on
  the packed keys, plus ``packed_sdpa`` in ``ref_gather_ms``.

Timing (default ``--timer graph``): each side's call is recorded once as a CUDA graph and
replayed; CUDA events around every replay, L2 flushed before each, median of ``--iters``
runs after one compile call and ``--warmup`` replays (``common.GraphTimer``).  The graph
takes the host's launch cost out of both sides: with kernels of a few microseconds the
Python launchers cannot stay ahead of the GPU and their gap would be timed as kernel
time.  That cost is reported instead, per side, in ``tri_host_us`` / ``ref_host_us``.
``ref_gather_ms`` (``packed_sdpa`` syncs once for its longest row) cannot be captured and
is timed eagerly; ``--timer events`` / ``do_bench`` time everything eagerly.  MAE of both
sides is measured against the float64 oracle on ``--mae-rows`` rows.  Guards mark rows
as suspect (CSV ``suspect`` column and on screen): a NaN, an effective bandwidth above
the measured copy bandwidth, and a reference time that does not grow with L.

``--dry-run`` runs the same sweep on the CPU (Triton under the interpreter, a modelled
clock) so the machinery can be checked without a GPU; its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

from bench.common import accounting, csvio, guards, timers
from bench.perf.sel_case import Args, mode_of, timed_case


# ----------------------------------------------------------------------------- arguments
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bench_sel_triton.py",
        description="Triton selection attention vs the correct packed SDPA (see the module docstring).",
    )
    p.add_argument("--N", default="256", help="rows (query tokens x groups); comma list, default 256")
    p.add_argument("--H", default="8", help="query heads per row (GQA group size); comma list, default 8")
    p.add_argument("--D", default="64", help="key head dim Dk; comma list, default 64")
    p.add_argument("--Dv", default=None, help="value head dim; comma list, default = --D")
    p.add_argument("--dims", default=None,
                   help="explicit Dk:Dv pairs, e.g. 64:64,128:128,128:64 (overrides the --D x --Dv product)")
    p.add_argument("--L_list", default="64,128,256,512", help="selected keys per row; comma list")
    p.add_argument("--dist", default="few",
                   help="span distribution(s): few, many, mixed; comma list (ignored with --decode)")
    p.add_argument("--iters", type=int, default=50, help="timed runs per measurement (median), default 50")
    p.add_argument("--warmup", type=int, default=5, help="untimed runs after the compile call, default 5")
    p.add_argument("--streams", default="1", help="concurrent CUDA streams (time is divided by it); comma list")
    p.add_argument("--csv", default=None,
                   help="append rows here; '{mode}' in the path is replaced by dense/varlen/decode")
    p.add_argument("--decode", nargs="?", const=1, default=0, type=int,
                   help="benchmark the one-query (decode) path instead (seed style: --decode 1)")
    p.add_argument("--l_sel", type=int, default=64, help="decode: selection block size, default 64")
    p.add_argument("--T", type=int, default=0,
                   help="key sequence length holding the spans; 0 = auto (4 L for varlen, max(8192, 2 L) for decode)")
    p.add_argument("--dtype", default="fp16", choices=sorted(csvio.DTYPES), help="input dtype, default fp16")
    p.add_argument("--mae-rows", type=int, default=32, help="rows checked against the float64 oracle, default 32")
    p.add_argument("--no-extra", action="store_true", help="skip the tri_packed_ms / ref_gather_ms timings")
    p.add_argument("--timer", default="graph", choices=["graph", "events", "do_bench"],
                   help="GPU timer: CUDA-graph replay (default; host launch cost excluded), "
                        "eager CUDA-event loop, or triton.testing.do_bench")
    p.add_argument("--rep-ms", type=int, default=30, help="do_bench: timed budget in ms")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--retries", type=int, default=2,
                   help="re-time a row whose timings are noisy (80%% quantile > 1.3x the 20%%) up to this "
                        "many times, keeping the least noisy attempt; default 2 (a row still noisy is flagged)")
    p.add_argument("--budget-s", type=float, default=0,
                   help="stop starting new sweeps after this many seconds (0 = no limit); what ran is kept")
    p.add_argument("--dry-run", action="store_true",
                   help="CPU: interpreter + modelled clock, to check the machinery (numbers are fake)")
    return p


def parse_args(argv=None) -> Args:
    """Parse and validate; bad values exit with status 2 and a message that says what is accepted."""
    p = build_parser()
    ns = p.parse_args(argv)
    try:
        Ns = csvio.int_list(ns.N, "--N")
        Hs = csvio.int_list(ns.H, "--H")
        Ls = csvio.int_list(ns.L_list, "--L_list")
        streams = csvio.int_list(ns.streams, "--streams")
        if ns.dims:
            dims = csvio.dims_list(ns.dims)
        else:
            Ds = csvio.int_list(ns.D, "--D")
            Dvs = csvio.int_list(ns.Dv, "--Dv") if ns.Dv else None
            dims = [(d, d) for d in Ds] if Dvs is None else [(d, dv) for d in Ds for dv in Dvs]
        dists = [d.strip() for d in ns.dist.split(",") if d.strip()]
        bad = [d for d in dists if d not in csvio.DISTS]
        if bad or not dists:
            raise ValueError(f"--dist accepts {', '.join(csvio.DISTS)} (comma list), got {ns.dist!r}")
        for name, val, lo in (("--iters", ns.iters, 1), ("--warmup", ns.warmup, 0), ("--mae-rows", ns.mae_rows, 0),
                              ("--l_sel", ns.l_sel, 1), ("--T", ns.T, 0), ("--rep-ms", ns.rep_ms, 1), ("--budget-s", ns.budget_s, 0),
                              ("--retries", ns.retries, 0)):
            if val < lo:
                raise ValueError(f"{name} must be >= {lo}, got {val}")
        for dk, dv in dims:
            if dk > 256 or dv > 256:
                raise ValueError(f"head dims up to 256 are supported by the kernels, got Dk={dk}, Dv={dv}")
        if ns.decode:
            bad_L = [L for L in Ls if L % ns.l_sel]
            if bad_L:
                raise ValueError(f"--decode needs every L to be a multiple of --l_sel={ns.l_sel}; bad: {bad_L}")
        if ns.T and ns.T < max(Ls):
            raise ValueError(f"--T={ns.T} is shorter than the largest L={max(Ls)}")
    except ValueError as exc:
        p.error(str(exc))
    return Args(Ns, Hs, dims, Ls, ["decode"] if ns.decode else dists, streams, ns.iters, ns.warmup, ns.csv,
                bool(ns.decode), ns.l_sel, ns.T, ns.dtype, ns.mae_rows, not ns.no_extra, ns.timer, ns.rep_ms,
                ns.seed, ns.dry_run, ns.budget_s, ns.retries)


def csv_path(template: str | None, mode: str) -> str | None:
    return None if template is None else template.replace("{mode}", mode)


# ----------------------------------------------------------------------------- sweep
def groups(a: Args):
    """(dist, N, H, Dk, Dv, streams) sweeps, each over a.Ls."""
    # Distributions innermost: a sweep cut short by --budget-s still covers all of them.
    for N in a.Ns:
        for H in a.Hs:
            for Dk, Dv in a.dims:
                for s in a.streams:
                    for dist in a.dists:
                        yield dist, N, H, Dk, Dv, s


def seed_line(r: dict) -> str:
    """The seeds' stdout line (their parsers split 'k=v' pairs on lines starting dense,/varlen,)."""
    n = f"n={r.get('nspans', '')}," if r["mode"] != "dense" else ""
    return (f"{r['mode']},N={r['N']},H={r['H']},D={r['D']},Dv={r['Dv']},L={r['L']},{n}streams={r['streams']}, "
            f"tri_ms={csvio.fmt(r.get('tri_ms'))}, ref_ms={csvio.fmt(r.get('ref_ms'))}, "
            f"speedup={csvio.fmt(r.get('speedup'))}x, mae={csvio.fmt(r.get('mae'))}")


def make_timer(a: Args):
    if a.dry_run:
        return timers.ModelTimer()
    if a.timer == "graph":
        return timers.GraphTimer(iters=a.iters, warmup=a.warmup)
    return timers.CudaEventTimer(iters=a.iters, warmup=a.warmup, use_do_bench=a.timer == "do_bench", rep_ms=a.rep_ms)


def sweep(a: Args, device) -> list[dict]:
    """Run every configuration, printing progress; guards are applied per finished sweep."""
    ceil = accounting.measure_ceilings(dry_run=a.dry_run)
    env = accounting.env_columns()
    csvio.progress(f"# device {env['gpu']} cc {env['cc']} | triton {env['triton']} torch {env['torch']} "
               f"cuda {env['cuda']} | copy {ceil['copy_gbs']:.0f} GB/s, bf16 mm {ceil['mm_tflops']:.0f} TFLOP/s "
               f"({ceil['ceilings']})")
    timer = make_timer(a)
    all_groups = list(groups(a))
    total, done, t0 = len(all_groups) * len(a.Ls), 0, time.time()
    out = []
    torch.manual_seed(a.seed)
    for gi, (dist, N, H, Dk, Dv, s) in enumerate(all_groups):
        if a.budget_s and time.time() - t0 > a.budget_s:
            left = all_groups[gi:]
            csvio.progress(f"# budget of {a.budget_s:.0f}s spent: {len(left)} sweeps not run, first: {left[0]}")
            break
        rows = []
        for L in a.Ls:
            r = timed_case(a, dist, N, H, Dk, Dv, L, s, timer, ceil, env, device)
            rows.append(r)
            done += 1
            el = time.time() - t0
            csvio.progress(f"[{done}/{total} {el:6.1f}s eta {el / done * (total - done):5.0f}s] "
                       f"{dist:6s} N={N} H={H} D={Dk} Dv={Dv} L={L} s={s}: tri {csvio.fmt(r.get('tri_ms'))} ms, "
                       f"ref {csvio.fmt(r.get('ref_ms'))} ms, x{csvio.fmt(r.get('speedup'))}, mae {csvio.fmt(r.get('mae'))}"
                       + (f" (re-timed {r['retries']}x: noisy)" if r["retries"] else "")
                       + ("" if r["status"] == "ok" else f"  [{r['status']}]"))
        guards.flag_suspects(rows)
        for r in rows:
            print(seed_line(r) + (f"  SUSPECT: {r['suspect']}" if r["suspect"] else ""), flush=True)
        path = csv_path(a.csv, mode_of(dist))
        if path:
            csvio.write_csv(path, rows)
        out.extend(rows)
    return out


def summary(rows: list[dict]) -> int:
    """Print a one-paragraph summary; returns the number of suspect or failed rows."""
    bad = [r for r in rows if r["suspect"] or r["status"] != "ok"]
    csvio.progress(f"# {len(rows)} rows, {sum(r['status'] != 'ok' for r in rows)} failed, "
               f"{sum(bool(r['suspect']) for r in rows)} suspect")
    for r in bad[:20]:
        csvio.progress(f"#   {r['dist']} N={r['N']} H={r['H']} D={r['D']} Dv={r['Dv']} L={r['L']}: "
                   f"{r['status']} {r['suspect']}")
    retried = [r for r in rows if r.get("retries")]
    if retried:
        csvio.progress(f"# {len(retried)} rows re-timed because of noisy timings "
                   f"({sum(not guards.noisy_sides(r) for r in retried)} of them quiet on a later attempt)")
    by_kind: dict[tuple, list] = {}
    for prev, cur, dropped in guards.kernel_switches(rows):
        by_kind.setdefault((prev["L"], cur["L"], prev["ref_kernel"], cur["ref_kernel"]), []).append(dropped)
    for (l0, l1, k0, k1), drops in by_kind.items():
        csvio.progress(f"# reference kernel switch at L={l0}->{l1} in {len(drops)} sweeps: {k0} -> {k1} "
                   f"({sum(drops)} of them faster at L={l1}: not flagged as ref_drop, the kernels differ)")
    return len(bad)


def main(argv=None) -> int:
    a = parse_args(argv)
    if not a.dry_run and not torch.cuda.is_available():
        print(f"error: CUDA is not available (torch {torch.__version__}, built for CUDA {torch.version.cuda}); "
              "this benchmark times GPU kernels. Use --dry-run to check the sweep machinery on the CPU.",
              file=sys.stderr)
        return 2
    if a.dry_run:
        # The kernels are decorated at import: the interpreter must be chosen before that.
        os.environ.setdefault("TRITON_INTERPRET", "1")
    device = torch.device("cuda" if torch.cuda.is_available() and not a.dry_run else "cpu")
    rows = sweep(a, device)
    summary(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
