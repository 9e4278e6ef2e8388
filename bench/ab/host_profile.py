"""Where an eager decode call spends its host time: microseconds per call, then a cProfile of the calls.

    PYTHONPATH=TREE/src:. python -m bench.ab.host_profile [--calls 300] [--top 25]

The A/B suite's decode step (``test_ab.decode_problem``: B = 64, T = 32K, 4 x 16 heads, D = 128, bf16), called
through ``selection_attention`` with ranges and with block indices (``validate=False``), after a warm-up.  The
plain timing (best of 5 rounds of ``--calls`` calls, the GPU idle at the start of each) comes first, since the
profiler inflates small functions; the profile says where the time goes, not how much there is.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import time

import torch

from bench.ab import test_ab


def _where() -> str:
    """The core this process last ran on and the cores it may use: a slow process may just sit on a slow core."""
    try:
        cpu = open("/proc/self/stat").read().rsplit(")", 1)[1].split()[36]  # field 39: the last CPU it ran on
    except (OSError, IndexError):
        cpu = "?"
    try:
        allowed = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        allowed = "?"
    return f"ran on cpu {cpu} of {allowed} allowed; pid {os.getpid()}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ab.host_profile", description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args(argv)
    import nsa_triton_sel
    from nsa_triton_sel import selection_attention as sa

    p = test_ab.decode_problem()
    calls = {
        "ranges": lambda: sa(p["q"], p["k"], p["v"], p["ranges"], validate=False),
        "blocks": lambda: sa(p["q"], p["k"], p["v"], block_indices=p["blocks"], block_size=test_ab.BS,
                             positions=p["positions"], validate=False),
    }
    print(f"host_profile: {nsa_triton_sel.__file__}")
    for name, fn in calls.items():
        for _ in range(20):
            fn()
        walls, cpus = [], []
        for _ in range(a.rounds):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            t0, c0 = time.perf_counter(), time.thread_time()
            for _ in range(a.calls):
                fn()
            walls.append((time.perf_counter() - t0) / a.calls * 1e6)
            cpus.append((time.thread_time() - c0) / a.calls * 1e6)
        print(f"{name}: {min(walls):.1f} us per eager call (best of {a.rounds} rounds of {a.calls})")
        print(f"{name}: rounds (wall / this thread's CPU, us per call): "
              + " ".join(f"{w:.1f}/{c:.1f}" for w, c in zip(walls, cpus)))
        print(f"{name}: launches: {test_ab.launch_report()}")
        print(f"{name}: {_where()}")
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(a.calls):
            fn()
        prof.disable()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(a.top)
        print(s.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
