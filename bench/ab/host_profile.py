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
import pstats
import time

import torch

from bench.ab import test_ab


def _launch_report() -> str:
    """How each kernel launched in this process (the bound launcher, or ``JITFunction.run`` and why): a process
    that lost its binding pays Triton's argument binding on every launch, which a host time alone cannot tell."""
    try:
        from nsa_triton_sel.kernels import bind
    except ImportError as exc:  # another revision's package without the bound launcher
        return f"unknown ({exc})"
    return "; ".join(f"{k}: {v}" for k, v in bind.report().items()) or "no kernel launched"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ab.host_profile", description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--top", type=int, default=25)
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
        best = float("inf")
        for _ in range(5):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(a.calls):
                fn()
            best = min(best, (time.perf_counter() - t0) / a.calls * 1e6)
        print(f"{name}: {best:.1f} us per eager call (best of 5 rounds of {a.calls})")
        print(f"{name}: launches: {_launch_report()}")
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
