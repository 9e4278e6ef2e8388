"""Where one forward+backward of ``selection_attention`` spends its GPU time.

Runs the API call (``block_indices``, ``validate=False``) forward and backward on the canonical NSA
problem (``train_contenders.make_problem``) under ``torch.profiler`` and prints, per GPU kernel
(ours and torch's), its time per iteration, then the sum against the iteration's wall time
(CUDA events): the difference is where the GPU waited (host syncs, launch gaps).

    python -m bench.train.profile_train [--T 8192] [--sel random] [--iters 5] [--trace out.json]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict

import torch

from bench.train import train_contenders as TC


def one_step(c):
    out = c.forward()
    out.backward(c.grad_out)
    for x in c.leaves:
        x.grad = None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, default=8192)
    ap.add_argument("--sel", default="random", choices=("random", "local"))
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--trace", help="write a Chrome trace here")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("profile_train needs a CUDA device", file=sys.stderr)
        return 2
    p = TC.make_problem(a.T, a.sel)
    c = TC.ours_api(p)
    for _ in range(3):
        one_step(c)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(a.iters):
        one_step(c)
    end.record()
    end.synchronize()
    wall = start.elapsed_time(end) / a.iters
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(a.iters):
            one_step(c)
        torch.cuda.synchronize()
    per = defaultdict(lambda: [0.0, 0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            per[e.name][0] += e.device_time_total / 1e3 / a.iters if hasattr(e, "device_time_total") else \
                e.cuda_time_total / 1e3 / a.iters
            per[e.name][1] += 1
    total = sum(v[0] for v in per.values())
    print(f"T={a.T} {a.sel}: wall {wall:.3f} ms per forward+backward (CUDA events, {a.iters} iterations)")
    print(f"{'ms/iter':>8} {'calls/iter':>10}  kernel")
    for name, (ms, n) in sorted(per.items(), key=lambda kv: -kv[1][0]):
        print(f"{ms:>8.3f} {n / a.iters:>10.1f}  {name[:110]}")
    print(f"{total:>8.3f}             sum of kernels; {wall - total:.3f} ms of the wall time is no kernel "
          f"(gaps: host syncs, launch latency)")
    if a.trace:
        prof.export_chrome_trace(a.trace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
