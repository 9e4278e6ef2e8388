#!/usr/bin/env python
"""``selection_attention`` with its defaults (``backend="auto"``) against ``backend="triton"``, at the
canonical NSA shape, inference and training.

    python -m bench.perf.auto_vs_triton [--T 8192,32768] [--patterns random,local] [--json out.json]

The default route must not cost more than the kernels it should pick: on Triton 3.7.1 the old
default threshold (4096) sent every NSA call through packed SDPA, hundreds of times slower than the kernel.
Same inputs for both sides (B=1, HQ=64 as G=4 groups of h=16, D=128, block 64, top-16, bf16,
block indices, ``validate=False``); ``triton.testing.do_bench`` median of eager calls, so the
dispatcher's host work and any host sync are timed too.  Training is forward + backward with one
fixed ``dO``.  Exits 1 when auto is more than ``--tolerance`` (5 %) slower anywhere.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch


def _case(T: int, pattern: str):
    from nsa_triton_sel.testing import nsa_problem

    return nsa_problem(T, G=4, h=16, D=128, bs=64, topn=16, pattern=pattern, dtype=torch.bfloat16)


def _timed(fn) -> float:
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median"))


def measure(T: int, pattern: str) -> list[dict]:
    from nsa_triton_sel import arguments, selection_attention

    p = _case(T, pattern)
    kw = dict(block_indices=p["blocks"], block_size=p["bs"], positions=p["positions"][None], validate=False)
    rows = []
    for mode in ("inference", "training"):
        grad = mode == "training"
        q, k, v = (x.detach().requires_grad_(grad) for x in (p["q"], p["k"], p["v"]))
        dout = torch.randn_like(q) if grad else None
        times, routes = {}, {}
        for backend in ("auto", "triton"):
            def call(backend=backend):
                out = selection_attention(q, k, v, backend=backend, **kw)
                if grad:
                    out.backward(dout)
                return out

            call()  # compile outside the timed region
            routes[backend] = arguments.route_of(q, k, v, backend=backend)
            times[backend] = _timed(call)
        ratio = times["auto"] / times["triton"]
        rows.append({"T": T, "pattern": pattern, "mode": mode, "auto_ms": times["auto"], "triton_ms": times["triton"],
                     "ratio": ratio, "auto_route": routes["auto"].path, "auto_reason": routes["auto"].reason})
        print(f"T={T:>6} {pattern:<6} {mode:<9} auto {times['auto']:8.3f} ms  triton {times['triton']:8.3f} ms  "
              f"auto/triton {ratio:5.3f}  (auto -> {routes['auto'].path}: {routes['auto'].reason})", flush=True)
    return rows


def environment() -> dict:
    import triton

    props = torch.cuda.get_device_properties(0)
    return {"gpu": props.name, "cc": f"{props.major}.{props.minor}", "torch": torch.__version__,
            "triton": triton.__version__, "cuda": torch.version.cuda}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.perf.auto_vs_triton", description=__doc__.splitlines()[0])
    ap.add_argument("--T", default="8192,32768", help="sequence lengths (prefill S = T), comma list")
    ap.add_argument("--patterns", default="random,local", help="selection patterns, comma list")
    ap.add_argument("--tolerance", type=float, default=0.05, help="allowed auto/triton - 1, default 0.05")
    ap.add_argument("--json", default=None, help="write the rows and the environment here")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("auto_vs_triton: needs a CUDA GPU (it times the kernels against the default route)", file=sys.stderr)
        return 2
    try:
        Ts = [int(t) for t in a.T.split(",")]
    except ValueError:
        ap.error(f"--T {a.T!r}: expected a comma list of integers")
    patterns = a.patterns.split(",")
    if not set(patterns) <= {"random", "local"}:
        ap.error(f"--patterns {a.patterns!r}: accepted random, local")
    env = environment()
    print(f"auto_vs_triton on {env['gpu']} (cc {env['cc']}), torch {env['torch']}, Triton {env['triton']}", flush=True)
    rows = [r for T in Ts for pat in patterns for r in measure(T, pat)]
    worst = max(r["ratio"] for r in rows)
    ok = worst <= 1 + a.tolerance
    print(f"auto_vs_triton: worst auto/triton {worst:.3f} ({'within' if ok else 'OUTSIDE'} {a.tolerance:.0%})")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"environment": env, "rows": rows, "worst": worst, "ok": ok}, fh, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
