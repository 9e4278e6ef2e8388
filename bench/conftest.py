"""pytest-benchmark plumbing for the bench suites: ``bench/suites/`` and the A/B ``bench/ab/`` (a conftest
here applies to every folder below it).

- Timing is on the GPU clock: :class:`GpuClock` replaces pytest-benchmark's host timer,
  so a round's duration is the time between two CUDA events on the current stream,
  not the time the host took to enqueue the work.  Functions that do not synchronise
  are recorded once as a CUDA graph and the graph is replayed in every round, so the
  Python launch cost (tens of microseconds for a Triton launch, more than a small
  kernel runs) is not timed either; ``extra_info["timer"]`` says which way a
  benchmark was timed and ``host_launch_us`` what one eager call costs the host.
- A function timed eagerly (one that synchronises with the host, or a training step) gets a
  hold: a spin kernel of twice its host enqueue time (:class:`HeldRounds`, ``extra_info["hold_ms"]``)
  runs before the start event while the host enqueues the round.  Without it a step whose host
  time is about its GPU time (an eager training step at T = 4K) is timed by how fast the host
  launches: the same tree moved by 20 % from one process to the next.
- Every round is preceded (in ``setup``, untimed) by zeroing a buffer larger than the
  L2, so each timed run reads its inputs from HBM; the first (compile) call and the
  warm-up rounds are outside the statistics.
- ``machine_info`` carries the environment fingerprint and the measured device
  ceilings; each benchmark's ``extra_info`` carries its bytes and FLOPs, and the JSON
  hook adds GB/s, TFLOP/s and the percentage of copy bandwidth from the median.
- Without CUDA every test here is skipped with the reason (these suites only time GPU
  kernels; the CPU tests live in ``tests/``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

from bench.common import accounting, timers

# NSA_BENCH_DRYRUN=1: run the suites on the CPU with tiny shapes, the Triton interpreter
# and the host clock, to check the plumbing (fixtures, hooks, JSON) without a GPU.
DRY = os.environ.get("NSA_BENCH_DRYRUN") == "1"
if DRY:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel module is imported
if os.environ.get("NSA_BENCH_PEERS"):  # fla-core / XunhaoLai copies for the contender rows (never committed)
    from bench.train.train_nsa import add_peers

    add_peers(os.environ["NSA_BENCH_PEERS"])
DEVICE = "cpu" if DRY else "cuda"
SLOW_CALL_S = 0.25  # a call at least this long needs no warm-up rounds beyond the one before it
HOLD_MIN_MS = 1.0  # the shortest hold of an eager round (HeldRounds); the longest is timers.HOLD_MS_RANGE's

NO_CUDA_REASON = ("CUDA is not available: the bench suites time GPU kernels on the GPU clock "
                  "(CPU tests are in tests/; python -m bench.perf.bench_sel_triton --dry-run checks the sweep on a CPU)")

_CEILINGS: dict = {}


def ceilings() -> dict:
    """Copy bandwidth and matmul TFLOP/s, measured once per session."""
    if not _CEILINGS:
        _CEILINGS.update(accounting.measure_ceilings(dry_run=DRY or not torch.cuda.is_available()))
    return _CEILINGS


class GpuClock:
    """A monotone clock (seconds) that advances by GPU time between alternate calls.

    pytest-benchmark calls ``timer()`` right before and right after the benchmarked
    function.  The first call of a pair records a start event and returns the current
    reading without synchronising (so the host can enqueue the function while the GPU
    is still busy with the L2 flush: no launch gap is timed); the second records an end
    event, waits for it and advances the reading by the elapsed GPU time.
    """

    def __init__(self):
        self.__name__ = "GpuClock"  # pytest-benchmark records the timer by name
        self.now = 0.0
        self.start = None

    def __call__(self) -> float:
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        if self.start is None:
            self.start = ev
            return self.now
        ev.synchronize()
        self.now += self.start.elapsed_time(ev) / 1e3
        self.start = None
        return self.now


class HeldRounds:
    """pytest-benchmark's ``setup`` for GPU rounds: ``before`` (untimed, e.g. drop the gradients), the L2
    flush, then a spin kernel of ``hold_ms`` (the host enqueues the round meanwhile), then the start event of
    the GPU clock.  The hold keeps a host gap out of the round's GPU time; for a function that synchronises
    with the host it changes nothing (the sync waits for the spin, the gaps after it are the function's)."""

    def __init__(self, l2_flush, hold_ms: float, before=None):
        self.flush, self.before = l2_flush, before
        self.cycles = 0
        if not DRY and hold_ms > 0 and getattr(torch.cuda, "_sleep", None) is not None:
            self.cycles = int(hold_ms * timers._calibrate_sleep(torch.cuda._sleep))

    def __call__(self) -> None:
        if self.before is not None:
            self.before()
        self.flush()
        if self.cycles:
            torch.cuda._sleep(self.cycles)


def eager_hold_ms(host_ms: float) -> float:
    """The hold of an eager round: twice the host's enqueue time, within HOLD_MIN_MS and timers.HOLD_MS_RANGE."""
    return min(max(HOLD_MIN_MS, timers.HOLD_FACTOR * host_ms), timers.HOLD_MS_RANGE[1])


@pytest.fixture(scope="session")
def l2_flush():
    """A callable zeroing a buffer of max(256 MiB, 2 x L2) bytes (enqueued, not waited for)."""
    if DRY:
        return lambda: None
    if not torch.cuda.is_available():
        pytest.skip(NO_CUDA_REASON)
    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 0) or (50 << 20))
    buf = torch.empty(max(256 << 20, 2 * l2), dtype=torch.int8, device="cuda")

    def flush() -> None:  # must return None: pytest-benchmark treats a truthy result as (args, kwargs)
        buf.zero_()

    return flush


@pytest.fixture
def gpu_bench(benchmark, l2_flush):
    """``gpu_bench(fn, nbytes=, flops=, rounds=, warmup=, graph=)``: time ``fn`` on the GPU clock.

    Runs ``fn`` once untimed (compile/autotune), then once more whole: a call that takes longer
    than :data:`SLOW_CALL_S` (a reference path that runs for seconds) was its own warm-up, and
    its host time is that call's (the usual ``warmup`` calls and host samples would add seconds
    each and change nothing).  Then records ``fn`` as a CUDA graph (``graph=True``; ``False``
    for functions that synchronise with the host, and for training steps), and runs ``warmup``
    and ``rounds`` rounds of one call or replay each, every round after an L2 flush, an eager
    round also behind a hold (:class:`HeldRounds`, :func:`eager_hold_ms` of its host time).
    Records bytes/FLOPs, the timer, the hold and the ceilings in ``extra_info``; returns
    ``fn``'s output.
    """

    def run(fn, *, nbytes: int, flops: int, rounds: int = 30, warmup: int = 3, graph: bool = True):
        out = fn()
        timer, timed, hold = "host (dry run)", fn, 0.0
        if DRY:  # host clock, few rounds: the numbers mean nothing
            rounds, warmup = 1, 0
        else:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            if time.perf_counter() - t0 > SLOW_CALL_S:
                benchmark.extra_info["host_launch_us"] = (t1 - t0) * 1e6
                warmup = 0
            else:
                benchmark.extra_info["host_launch_us"] = timers.host_launch_us(fn)
            timer = "cuda-events"
            if graph:
                g, out = timers.capture_graph(fn)  # a sync inside fn raises here: pass graph=False
                timed, timer = g.replay, "cuda-graph"
            else:
                hold = eager_hold_ms(benchmark.extra_info["host_launch_us"] / 1e3)
            benchmark._timer = GpuClock()  # private attribute: pinned by the bench extra (>=5.1)
        benchmark.extra_info.update({"bytes": int(nbytes), "flops": int(flops), "timer": timer, "hold_ms": hold,
                                     "l2_flush": not DRY, **ceilings()})
        benchmark.pedantic(timed, setup=HeldRounds(l2_flush, hold), rounds=rounds, warmup_rounds=warmup,
                           iterations=1)
        return out

    return run


def pytest_collection_modifyitems(config, items):
    """Skip every bench test on a machine without CUDA, saying why."""
    if torch.cuda.is_available() or DRY:
        return
    mark = pytest.mark.skip(reason=NO_CUDA_REASON)
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:  # bench/ and its folders (bench/ab/)
            item.add_marker(mark)


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config, machine_info):
    """The environment fingerprint (versions, GPU, driver, knobs, commit) and ceilings."""
    try:
        from nsa_triton_sel.compat.core.env import fingerprint

        machine_info["nsa_env"] = fingerprint()
    except Exception as exc:  # noqa: BLE001 - never lose a benchmark run over metadata
        machine_info["nsa_env"] = {"error": repr(exc)}
    machine_info["nsa_env_columns"] = accounting.env_columns()
    if torch.cuda.is_available() or DRY:
        machine_info["nsa_ceilings"] = ceilings()


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_json(config, benchmarks, output_json):
    """Derived rates from the median GPU time: GB/s, TFLOP/s, % of copy bandwidth."""
    sdpa = {}  # group -> median of its SDPA contender
    for b in output_json.get("benchmarks", []):
        info, stats = b.get("extra_info", {}), b.get("stats", {})
        med = stats.get("median")
        if med and info.get("impl") == "sdpa":
            sdpa[b.get("group")] = med
        if not med or "bytes" not in info:
            continue
        gbs, tfl, pct = accounting.rates(med * 1e3, info["bytes"], info["flops"], info.get("copy_gbs", 0))
        info.update({"median_ms": med * 1e3, "gbs": gbs, "tflops": tfl, "pct_copy_bw": pct})
    # The ledger takes numeric extra_info: each contender's speedup over SDPA in its group.
    for b in output_json.get("benchmarks", []):
        med, ref = (b.get("stats") or {}).get("median"), sdpa.get(b.get("group"))
        if med and ref:
            b.setdefault("extra_info", {})["speedup_vs_sdpa"] = ref / med
