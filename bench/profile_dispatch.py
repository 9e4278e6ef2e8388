#!/usr/bin/env python
"""Where the dispatcher's time goes: ``selection_attention`` against its kernel, NSA shape at T = 8K.

Prints do_bench times of the dispatcher and of the ranges kernel alone, the host time of one
dispatcher call (GPU idle before it), and torch.profiler tables (by CPU time and by CUDA time)
over five calls.  GPU only.

Usage:  python -m bench.profile_dispatch [--T 8192]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from bench import perf_nsa as P


def problem(T: int, G: int = 4, h: int = 16, D: int = 128):
    """The canonical NSA inputs with random top-16 selections (as in perf_nsa.py)."""
    from nsa_triton_sel.contract import block_indices_to_ranges

    gen = torch.Generator(device="cuda").manual_seed(1)
    q = torch.randn(1, T, G, h, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(1, G, T, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn(1, G, T, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    blocks, _ = P.select_blocks(T, G, local=False, gen=gen)
    return q, k, v, block_indices_to_ranges(blocks, P.BS, T, validate=False)


def host_ms(fn, n: int = 10) -> tuple[float, float]:
    """Median (enqueue ms, wall ms) of one call with the GPU idle before it."""
    enq, wall = [], []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        enq.append((t1 - t0) * 1e3)
        wall.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(enq), statistics.median(wall)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, default=8192)
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("profile_dispatch.py needs a CUDA device", file=sys.stderr)
        return 2
    import triton.testing as tt
    from torch.profiler import ProfilerActivity, profile

    from nsa_triton_sel import selection_attention
    from nsa_triton_sel.kernels import launch

    q, k, v, ranges = problem(a.T)
    auto = lambda: selection_attention(q, k, v, ranges, validate=False)  # noqa: E731
    kernel = lambda: launch.sel_attn_ranges(q, k, v, ranges)  # noqa: E731
    for _ in range(3):
        auto()
    torch.cuda.synchronize()
    print(f"do_bench: dispatcher {tt.do_bench(auto, warmup=10, rep=100):.3f} ms, "
          f"kernel {tt.do_bench(kernel, warmup=10, rep=100):.3f} ms")
    enq, wall = host_ms(auto)
    print(f"one dispatcher call, GPU idle before: host enqueue {enq:.3f} ms, wall {wall:.3f} ms")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            auto()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
    print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=15))
    return 0


if __name__ == "__main__":
    sys.exit(main())
