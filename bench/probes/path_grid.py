"""The key-major path against the token-major kernels over a grid of group sizes and sequence lengths: the
planner's measured data for choosing between them.

    python -m bench.probes.path_grid [--h 1,2,3,4,6,8,16] [--T 4096,8192,16384,32768,65536] [--sel random,local]
                                     [--HQ 32] [--rep-ms 100] [--repeat 1] [--json out.json]

Per cell (bf16, D = 128, blocks of 64, top-16 causal selections including the token's own block, ``G = HQ / h``
KV heads, ``S = T``): ``selection_attention`` on block indices (``validate=False``, inputs that require grad), as
a user calls it, with the planner forced to each path (``plan.keymajor.forced``): forward and forward + backward
ms (``triton.testing.do_bench``, median, L2 flushed, warm-up outside) and the extra peak memory of one forward +
backward.  The two paths' outputs are compared first.  ``--repeat N`` measures the whole grid N times over (each
cell once per round, rounds one after another: a disturbance hits one round's cell, not every copy of it; the path
table takes each path's median over the rounds).  Each line is printed as it is measured; ``--json`` writes every
cell with the environment, the input of the planner's path table (``bench/analysis/path_table.py``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys

import torch

from bench.common import timers
from bench.train import train_contenders as TC
from bench.train import train_nsa


def log(*a):
    print(*a, flush=True)


def measure_cell(p: TC.Problem, bench) -> dict:
    KM = importlib.import_module("nsa_triton_sel.plan.keymajor")  # the module (the package exports a function of its name)

    cell, outs = {}, {}
    for path in ("token", "key"):
        with KM.forced(path):
            c = TC.ours_api(p)
            with torch.no_grad():
                outs[path] = c.forward().float()
            kernel = _forward_kernel(p)

            def fwdbwd(c=c):
                torch.autograd.backward(c.forward(), c.grad_out)

            fwdbwd()  # compiles (its scratch memory must not count)
            for x in c.leaves:
                x.grad = None
            cell[f"peak_gib_{path}"] = round(timers.extra_peak_bytes(fwdbwd) / 2**30, 4)
            for x in c.leaves:
                x.grad = None
            cell[f"fwd_{path}"] = round(bench(lambda c=c: c.forward()), 4)
            cell[f"train_{path}"] = round(bench(fwdbwd, grad_to_none=c.leaves), 4)
        cell[f"kernel_{path}"] = kernel
        del c
        torch.cuda.empty_cache()
    cell["max_diff"] = float((outs["token"] - outs["key"]).abs().max())
    return cell


def _forward_kernel(p: TC.Problem) -> str:
    """The forward kernel the (forced) planner runs for ``p``: "keymajor" where the path could be taken."""
    from nsa_triton_sel import plan

    return plan.plan_call(p.q, p.k, p.v, p.blocks, None, per_head=False, tokens=0, span_len=64,
                          packed=False).forward.kernel


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--h", default="1,2,3,4,6,8,16")
    ap.add_argument("--T", default="4096,8192,16384,32768,65536")
    ap.add_argument("--sel", default="random,local")
    ap.add_argument("--HQ", type=int, default=32, help="query heads (G = HQ // h KV heads, at least 1)")
    ap.add_argument("--rep-ms", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=1, help="rounds over the whole grid")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    from bench.common import accounting

    env = accounting.env_columns()
    bench = train_nsa.make_bench(a.rep_ms, False)
    log(f"environment: {env}")
    log("| sel | T | h | G | fwd ms: token / key | fwd + bwd ms: token / key | key / token: fwd, train | "
        "peak GiB: token / key | max diff |")
    log("|---|---|---|---|---|---|---|---|---|")
    cells = []
    grid = [(sel, int(T), int(h)) for sel in a.sel.split(",") for T in a.T.split(",") for h in a.h.split(",")]
    for rnd in range(a.repeat):
        for sel, T, h in grid:
            G = max(a.HQ // h, 1)
            p = TC.make_problem(T, sel, h=h, groups=G)
            try:
                cell = {"sel": sel, "T": T, "h": h, "G": G, "round": rnd, **measure_cell(p, bench)}
            except Exception as exc:  # noqa: BLE001 - one cell's failure is a line, not the end of the run
                log(f"| {sel} | {T} | {h} | {G} | {type(exc).__name__}: {str(exc)[:160]} |")
                continue
            finally:
                del p
                torch.cuda.empty_cache()
            cells.append(cell)
            log(f"| {sel} | {T} | {h} | {G} | {cell['fwd_token']:.3f} / {cell['fwd_key']:.3f} | "
                f"{cell['train_token']:.3f} / {cell['train_key']:.3f} | "
                f"{cell['fwd_key'] / cell['fwd_token']:.3f}, {cell['train_key'] / cell['train_token']:.3f} | "
                f"{cell['peak_gib_token']:.2f} / {cell['peak_gib_key']:.2f} | {cell['max_diff']:.1e}"
                f"{'' if cell['kernel_key'] == 'keymajor' else ' (no key-major path: ' + cell['kernel_key'] + ')'} |")
            if a.json:  # after every cell: a run cut short keeps what it measured
                write_json(a, argv, env, cells)
    return 0


def write_json(a, argv, env: dict, cells: list) -> None:
    with open(a.json, "w") as f:
        json.dump({"environment": env, "D": 128, "block": 64, "topn": 16, "HQ": a.HQ, "rep_ms": a.rep_ms,
                   "command": " ".join(["python -m bench.probes.path_grid", *(argv or sys.argv[1:])]),
                   "cells": cells}, f, indent=1)


if __name__ == "__main__":
    raise SystemExit(main())
