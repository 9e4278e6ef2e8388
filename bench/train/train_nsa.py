"""NSA selection attention, forward + backward: this package against fla-core and XunhaoLai.

One call runs every contender on the same inputs (``train_contenders.py``: canonical shape,
T = 8K/32K/64K, random and local selections) and prints, per row: forward, forward+backward
and backward-only milliseconds (``triton.testing.do_bench``: CUDA events, L2 flushed before
every run, median, warm-up and compilation outside the timed region), TFLOP/s and its share of
a measured bf16 matmul ceiling, and the extra peak memory of one forward+backward
(``torch.cuda.max_memory_allocated`` above what was allocated before the call).  Every CSV
row carries the environment (GPU, torch, Triton, CUDA, commit).

    python -m bench.train.train_nsa --peers DIR [--sweep] [--check] [--csv out/train.csv] [--T 8192,32768]

``--peers DIR``: a folder holding ``fla_core/``, ``xunhaolai/`` and ``einops_pkg/`` (put on
``sys.path``); a peer that does not import is skipped with the reason.  ``--check`` first
compares every contender's gradients with an fp32 packed-SDPA reference on a small problem
(a wrong layout convention shows up as an error near 1).  ``--sweep`` first times the backward's
launch configurations (``train_sweep.py``) and adds an ``ours-tuned`` row with the best.
The packed-SDPA path runs where it fits (``--sdpa-max-T``, default 8192; about 36 GiB there).
``--tune JSON`` adds the ``ours-tuned`` row from a previous sweep's result without sweeping.
``--dry-run`` runs a tiny problem on the CPU (Triton interpreter) to check the plumbing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from bench.common import csvio, timers
from bench.train import train_contenders as TC

COLUMNS = ["T", "sel", "contender", "fwd_ms", "fwdbwd_ms", "bwd_ms", "tflops", "pct_mm", "bwd_tflops",
           "extra_peak_gib", "status", "config", "mm_tflops", "gpu", "cc", "triton", "torch", "cuda", "driver",
           "git_commit", "date"]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers", help="folder with fla_core/, xunhaolai/, einops_pkg/")
    ap.add_argument("--T", default="8192,32768,65536", help="comma list of sequence lengths")
    ap.add_argument("--sel", default="random,local", help="comma list: random, local")
    ap.add_argument("--contenders", default="ours-api,ours,sdpa,fla,xunhaolai")
    ap.add_argument("--sdpa-max-T", type=int, default=8192)
    ap.add_argument("--sweep", action="store_true", help="tune the backward's launch config first")
    ap.add_argument("--check", action="store_true", help="compare every contender's gradients first")
    ap.add_argument("--tune", help="JSON dict of sel_attn_backward keywords for an ours-tuned row (e.g. a "
                                   "previous --sweep's result); --sweep overrides it")
    ap.add_argument("--csv", help="write the rows here")
    ap.add_argument("--rep-ms", type=int, default=200, help="do_bench rep (ms) per timing")
    ap.add_argument("--dry-run", action="store_true", help="tiny CPU run under the Triton interpreter")
    a = ap.parse_args(argv)
    try:
        a.Ts = [int(x) for x in a.T.split(",") if x]
    except ValueError:
        ap.error(f"--T must be a comma list of integers, got {a.T!r}")
    a.sels = [s for s in a.sel.split(",") if s]
    a.names = [c for c in a.contenders.split(",") if c]
    for s in a.sels:
        if s not in ("random", "local"):
            ap.error(f"--sel accepts random, local; got {s!r}")
    for c in a.names:
        if c not in ("ours-api", "ours", "sdpa", "fla", "xunhaolai"):
            ap.error(f"--contenders accepts ours-api, ours, sdpa, fla, xunhaolai; got {c!r}")
    if a.dry_run:
        a.Ts = [min(t, 64) for t in a.Ts][:1]
    try:
        a.tuned = json.loads(a.tune) if a.tune else None
    except json.JSONDecodeError as exc:
        ap.error(f"--tune must be a JSON object of sel_attn_backward keywords: {exc}")
    if a.tuned is not None and not isinstance(a.tuned, dict):
        ap.error("--tune must be a JSON object, e.g. '{\"kv_warps\": 4}'")
    return a


def add_peers(path: str | None) -> None:
    if not path:
        return
    for sub in ("einops_pkg", "fla_core", "xunhaolai", ""):
        p = Path(path, sub)
        if p.is_dir():
            sys.path.insert(0, str(p))
    if Path(path, "cudnn_site").is_dir():  # unpacked wheels (cuDNN frontend, CUTLASS DSL): their .pth files run
        import site

        site.addsitedir(str(Path(path, "cudnn_site")))


def make_bench(rep_ms: int, dry: bool):
    if dry:
        def wall(fn, grad_to_none=None):  # noqa: ARG001 - same call as do_bench
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e3
        return wall
    import triton.testing as tt

    def bench(fn, grad_to_none=None):
        return float(tt.do_bench(fn, warmup=max(10, rep_ms // 4), rep=rep_ms, grad_to_none=grad_to_none,
                                 return_mode="median"))
    return bench


def slow_bench(fn, n: int = 2) -> float:
    """Median of ``n`` event-timed runs after one warm-up (for the packed-SDPA path: seconds per call)."""
    fn()
    times = []
    for _ in range(n):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return sorted(times)[len(times) // 2]


def measure(c: TC.Contender, p: TC.Problem, bench, dry: bool) -> dict:
    """fwd, fwd+bwd and bwd-only ms and the extra peak memory of one fwd+bwd."""
    def fwdbwd():
        torch.autograd.backward(c.forward(), c.grad_out)

    row = {}
    fwdbwd()  # compiles / autotunes (whose scratch memory must not count)
    for x in c.leaves:
        x.grad = None
    if not dry:
        row["extra_peak_gib"] = timers.extra_peak_bytes(fwdbwd) / 2**30
    for x in c.leaves:
        x.grad = None
    slow = c.name == "sdpa" and not dry
    timer = slow_bench if slow else bench
    row["fwd_ms"] = timer(lambda: c.forward())
    row["fwdbwd_ms"] = slow_bench(fwdbwd) if slow else bench(fwdbwd, grad_to_none=c.leaves)
    out = c.forward()
    row["bwd_ms"] = timer(lambda: torch.autograd.grad(out, c.leaves, c.grad_out, retain_graph=True))
    del out
    for x in c.leaves:
        x.grad = None
    row["tflops"] = p.flops() / row["fwdbwd_ms"] / 1e9
    row["bwd_tflops"] = p.flops(backward_only=True) / row["bwd_ms"] / 1e9
    return row


def contenders(p: TC.Problem, names, args, tuned) -> list:
    out = []
    for name in names:
        if name == "ours-api":
            out.append(("ours-api", lambda: TC.ours_api(p)))
        elif name == "ours":
            out.append(("ours", lambda: TC.ours(p)))
            if tuned:
                out.append(("ours-tuned", lambda: TC.ours(p, tuned, name="ours-tuned")))
        elif name == "sdpa":
            if p.T > args.sdpa_max_T:
                out.append(("sdpa", f"skipped: T={p.T} > --sdpa-max-T={args.sdpa_max_T} (does not fit)"))
            else:
                out.append(("sdpa", lambda: TC.sdpa(p)))
        else:
            why = TC.peer_status(name) if not args.dry_run else "needs a GPU"
            out.append((name, f"skipped: {why}") if why else (name, lambda n=name: TC.PEERS[n](p)))
    return out


def check(args, bench) -> None:
    """Gradients of every contender against an fp32 packed-SDPA reference on T = 1024 (random)."""
    from nsa_triton_sel import reference

    dev = "cpu" if args.dry_run else "cuda"
    small = {"h": 4, "d": 32} if args.dry_run else {}
    p = TC.make_problem(128 if args.dry_run else 1024, "random", device=dev, **small)
    xs = [x.detach().float().requires_grad_() for x in (p.q, p.k, p.v)]
    torch.autograd.backward(reference.packed_sdpa(*xs, p.ranges, validate=False), p.grad_out.float())
    ref = [x.grad for x in xs]
    log(f"check: gradients against fp32 packed SDPA on T={p.T} random (relative error, bf16 expects ~3e-3)")
    for name, make in contenders(p, [n for n in args.names if n != "sdpa"] + ["sdpa"], args, None):
        if isinstance(make, str):
            log(f"  {name:10s} {make}")
            continue
        c = make()
        torch.autograd.backward(c.forward(), c.grad_out)
        got = c.to_ours([x.grad for x in c.leaves])
        errs = [float((g.float() - r).norm() / r.norm()) for g, r in zip(got, ref)]
        # A wrong layout convention gives errors near 1; packed SDPA's bf16 dk/dv are ~1e-2
        # (the gather's backward accumulates in bf16).
        verdict = "ok" if max(errs) < 0.1 else "WRONG (convention or kernel)"
        log(f"  {name:10s} dq {errs[0]:.2e}  dk {errs[1]:.2e}  dv {errs[2]:.2e}  {verdict}")


def print_table(rows) -> None:
    head = f"{'T':>6} {'sel':6} {'contender':11} {'fwd':>8} {'fwd+bwd':>9} {'bwd':>8} {'TFLOP/s':>8} {'%mm':>5} {'+GiB':>6}  status"
    print(head)
    for r in rows:
        def f(key, spec):
            v = r.get(key)
            return format(v, spec) if isinstance(v, float) else "-"
        print(f"{r['T']:>6} {r['sel']:6} {r['contender']:11} {f('fwd_ms', '8.2f')} {f('fwdbwd_ms', '9.2f')} "
              f"{f('bwd_ms', '8.2f')} {f('tflops', '8.1f')} {f('pct_mm', '5.1f')} {f('extra_peak_gib', '6.2f')}  "
              f"{r.get('status', '')} {r.get('config', '')}")


def main(argv=None) -> int:
    args = parse_args(argv)
    add_peers(args.peers)
    dry = args.dry_run or not torch.cuda.is_available()
    if dry and not args.dry_run:
        log("no CUDA device: use --dry-run for the CPU plumbing check")
        return 2
    if dry:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from bench.common import accounting as common

    env = common.env_columns()
    mm = common.measure_ceilings(dry_run=dry)["mm_tflops"]
    log(f"environment: {env}; bf16 matmul ceiling {mm:.0f} TFLOP/s")
    bench = make_bench(args.rep_ms, dry)
    if args.check:
        check(args, bench)
    tuned = args.tuned
    if args.sweep and not dry:
        from bench.train import train_sweep

        tuned = train_sweep.sweep(TC.make_problem(8192, "random"), bench, log, local=TC.make_problem(8192, "local"))
        log(f"reuse with: --tune '{json.dumps(tuned)}'")
    rows = []
    for T in args.Ts:
        for sel in args.sels:
            p = TC.make_problem(T, sel, device="cpu" if dry else "cuda", h=4 if dry else TC.H_PER_GROUP,
                                d=32 if dry else TC.D)
            for name, make in contenders(p, args.names, args, tuned):
                row = {"T": T, "sel": sel, "contender": name, "mm_tflops": mm, **env}
                if isinstance(make, str):
                    row["status"] = make
                else:
                    log(f"T={T} {sel} {name} ...")
                    try:
                        c = make()
                        row.update(measure(c, p, bench, dry), status="ok", config=c.note)
                        row["pct_mm"] = 100.0 * row["tflops"] / mm
                    except Exception as exc:  # noqa: BLE001 - one contender failing must not stop the table
                        row["status"] = f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
                    finally:
                        c = None
                        if not dry:
                            torch.cuda.empty_cache()
                rows.append(row)
                log(f"  {row.get('status')} fwd+bwd {row.get('fwdbwd_ms', '-')} ms")
            del p
    print_table(rows)
    if args.csv:
        csvio.write_csv(args.csv, rows, append=False, columns=COLUMNS)
        log(f"wrote {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
