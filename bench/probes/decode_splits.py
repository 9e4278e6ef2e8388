#!/usr/bin/env python
"""How many key splits should split-L decode use?  GPU time per ``num_splits`` on seed-002 shapes.

For each (rows N, heads H, selected keys L) the seed-002 decode inputs (``L / 64`` random
blocks of 64 keys out of a ``--T`` cache, one query per row) are timed with
``sel_attn_decode(num_splits=s)`` for every ``s`` in ``--splits`` and with the launcher's
default, next to SDPA on the pre-gathered keys; CUDA-graph replay, L2 flushed (the same
timer as the sweep).  Prints one line per shape: the time per split count and the best.

Usage:  python -m bench.probes.decode_splits [--N 4,16,64] [--H 4] [--D 128] [--L 128,512,1024]
"""

from __future__ import annotations

import argparse
import sys

import torch

from bench.common import csvio, timers
from bench.perf import bench_sel_triton as B
from bench.perf import sel_case


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--N", default="4,16,64", help="rows (batch x groups); comma list")
    ap.add_argument("--H", default="4", help="heads per row; comma list")
    ap.add_argument("--D", type=int, default=128)
    ap.add_argument("--L", default="128,512,1024", help="selected keys per row (multiples of 64)")
    ap.add_argument("--T", type=int, default=8192, help="cache length")
    ap.add_argument("--splits", default="1,2,4,8,16,32,64", help="num_splits values to time")
    ap.add_argument("--iters", type=int, default=50)
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("decode_splits.py times GPU kernels; no CUDA device here", file=sys.stderr)
        return 2
    from nsa_triton_sel.kernels import direct
    from nsa_triton_sel.reference import sdpa_rows

    splits = csvio.int_list(a.splits, "--splits")
    timer = timers.GraphTimer(iters=a.iters, warmup=5)
    dev = torch.device("cuda")
    for N in csvio.int_list(a.N, "--N"):
        for H in csvio.int_list(a.H, "--H"):
            for L in csvio.int_list(a.L, "--L"):
                args = B.parse_args(["--decode", "1", "--T", str(a.T), "--L_list", str(L)])
                case = sel_case.make_case(args, "decode", N, H, a.D, a.D, L, dev)
                q5 = case.q.view(N, 1, 1, H, a.D)
                run = lambda s: direct.sel_attn_decode(q5, case.k5, case.v5, case.ranges, num_splits=s)  # noqa: E731
                times = {s: timer(lambda s=s: run(s)).median_ms * 1e3 for s in splits}
                auto = timer(lambda: run(None)).median_ms * 1e3
                ref = timer(lambda: sdpa_rows(case.q, case.kp, case.vp)).median_ms * 1e3
                best = min(times, key=times.get)
                print(f"N={N} H={H} L={L} T={a.T}: " + ", ".join(f"s={s} {t:.1f}" for s, t in times.items())
                      + f" | default {auto:.1f} us, best s={best} {times[best]:.1f} us, sdpa {ref:.1f} us",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
