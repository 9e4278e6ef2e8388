"""Timers: CUDA events around L2-flushed runs (with a GPU hold while the host enqueues), CUDA-graph
replay, a wall clock for CPU runs and a modelled clock for dry runs.

Nothing here imports Triton; torch is needed for the CUDA timers only when they run.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch


# The GPU hold before timed runs (CudaEventTimer._event_loop): HOLD_FACTOR times the host's
# estimated enqueue time, within HOLD_MS_RANGE.
HOLD_FACTOR = 2.0
FLUSHES = ("zero", "read")  # how the L2 is flushed before a timed run (CudaEventTimer._flush)
HOLD_PER_RUN_MS = 0.03  # the flush and two event records the warm-up runs do not have
HOLD_MS_RANGE = (0.5, 50.0)


@dataclass
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float


def _quantiles(times: list[float]) -> Timing:
    times = sorted(times)
    n = len(times)

    def q(p):
        return times[min(n - 1, max(0, int(round(p * (n - 1)))))]

    return Timing(statistics.median(times), q(0.2), q(0.8))


class CudaEventTimer:
    """CUDA-event timing with the L2 flushed before every timed run.

    Same method as ``triton.testing.do_bench`` (which it can delegate to), but driven by
    iteration counts so a sweep's cost is predictable: one untimed call (compile),
    ``warmup`` untimed calls, then ``iters`` runs, each preceded by zeroing a buffer
    twice the size of the L2 (so every run reads its inputs from HBM) and bracketed by
    events on the current stream.  Returns the median and the 20/80 % quantiles.
    """

    name = "cuda-events"

    def __init__(self, iters: int = 50, warmup: int = 5, use_do_bench: bool = False, rep_ms: int = 30,
                 flush: str = "zero"):
        if flush not in FLUSHES:
            raise ValueError(f"flush={flush!r}; accepted: {', '.join(FLUSHES)}")
        self.iters, self.warmup, self.flush = iters, warmup, flush
        self.use_do_bench, self.rep_ms = use_do_bench, rep_ms
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        l2 = int(getattr(props, "L2_cache_size", 0) or (50 << 20))
        self.flush_buf = torch.empty(max(256 << 20, 2 * l2), dtype=torch.int8, device="cuda")
        if use_do_bench:
            self.name = "do_bench"

    def __call__(self, fn: Callable[[], object], graph: bool = True) -> Timing:
        """Time ``fn``; ``graph=False`` says it synchronises with the host (no GPU hold then)."""
        if self.use_do_bench:
            import triton.testing

            med, p20, p80 = triton.testing.do_bench(fn, warmup=5, rep=self.rep_ms, quantiles=[0.5, 0.2, 0.8])
            return Timing(med, p20, p80)
        fn()
        torch.cuda.synchronize()
        return self._event_loop(fn, hold=graph)

    # Set by the last _event_loop: how long the GPU was held, and whether the host still
    # was enqueueing when the hold ended (then host stalls may show up as GPU time).
    last_hold_ms, last_host_behind = 0.0, False
    _cycles_per_ms: float | None = None

    def _event_loop(self, run: Callable[[], object], hold: bool = True) -> Timing:
        """``warmup`` untimed calls of ``run``, then ``iters`` timed ones, each after an L2 flush
        and between two events; the host never waits inside the loop.

        Before the timed runs the GPU is held in a spin kernel long enough for the host to
        enqueue all of them.  Without the hold, a host stall (another process, the GC) in
        the middle of the loop lets the GPU run dry, and the idle gap lands between a start
        and an end event: the first H100 sweep had rows whose 80 % quantile was 15x their
        20 % quantile for that reason.  ``hold=False`` for a ``run`` that synchronises with
        the host (it would only wait for the hold to end; its gaps are part of its cost).
        """
        t0 = time.perf_counter()
        for _ in range(self.warmup):
            run()
        per_run_ms = (time.perf_counter() - t0) * 1e3 / max(1, self.warmup)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.iters)]
        torch.cuda.synchronize()
        hold_ms = self._hold_gpu(HOLD_FACTOR * self.iters * (per_run_ms + HOLD_PER_RUN_MS)) if hold else 0.0
        t0 = time.perf_counter()
        for i in range(self.iters):
            self._flush()
            starts[i].record()
            run()
            ends[i].record()
        self.last_hold_ms = hold_ms
        self.last_host_behind = hold and (time.perf_counter() - t0) * 1e3 > hold_ms
        torch.cuda.synchronize()
        return _quantiles([s.elapsed_time(e) for s, e in zip(starts, ends)])

    def _flush(self) -> None:
        """Evict the inputs from the L2.  ``zero`` writes the buffer (as ``triton.testing.do_bench``
        does): up to an L2 of dirty lines are then written back while the timed run reads, which a kernel
        of tens of microseconds (a decode step) pays for, more than for no flush at all.  ``read`` reads
        it and leaves clean lines instead."""
        if self.flush == "zero":
            self.flush_buf.zero_()
        else:
            self.flush_buf.view(torch.int32).max()

    def _hold_gpu(self, want_ms: float) -> float:
        """Enqueue a spin kernel of about ``want_ms`` (clamped to HOLD_MS_RANGE); returns the
        milliseconds held, 0 where torch has no ``cuda._sleep`` (then nothing is held)."""
        sleep = getattr(torch.cuda, "_sleep", None)
        if sleep is None:
            return 0.0
        if self._cycles_per_ms is None:
            type(self)._cycles_per_ms = _calibrate_sleep(sleep)
        ms = min(max(want_ms, HOLD_MS_RANGE[0]), HOLD_MS_RANGE[1])
        sleep(int(ms * self._cycles_per_ms))
        return ms


def _calibrate_sleep(sleep: Callable[[int], None], cycles: int = 2_000_000) -> float:
    """GPU clock cycles per millisecond of ``torch.cuda._sleep`` (it spins on the SM clock)."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    sleep(cycles // 10)  # first launch outside the measurement
    a.record()
    sleep(cycles)
    b.record()
    torch.cuda.synchronize()
    return cycles / max(a.elapsed_time(b), 1e-3)


def capture_graph(fn: Callable[[], object]):
    """One call of ``fn`` recorded as a CUDA graph: ``(graph, output)``.

    Two eager calls on a side stream first (compilation, allocator warm-up), as the
    ``torch.cuda.graphs`` notes require.  ``fn`` must not synchronise with the host
    (``.item()``, ``.tolist()``, ...): capture raises then.
    """
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    torch.cuda.synchronize()
    return graph, out


def cuda_kernels(fn: Callable[[], object]) -> str:
    """The GPU kernels one call of ``fn`` launches, as short names joined by ``+`` in launch
    order (template arguments, parameters and memsets dropped), from the torch profiler.

    Recorded for the reference side so a reader (and the ``ref_drop`` guard) can see when
    SDPA changed backend between two shapes.  '' where the profiler saw no kernel.
    """
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - no CUPTI: rows then lack ref_kernel and are always compared
        return ""
    names = []
    for ev in prof.events():
        if ev.device_type.name != "CUDA" or ev.name.startswith(("Memset", "Memcpy")):
            continue
        short = ev.name.removeprefix("void ").split("<")[0].split("(")[0].strip().replace(",", " ")
        if short and short not in names:
            names.append(short)
    return "+".join(names)


def extra_peak_bytes(fn: Callable[[], object]) -> int:
    """Device bytes one call of ``fn`` allocates at its peak above what was allocated before it (the GPU
    synchronised around the call; warm ``fn`` up first, so compile and autotune scratch does not count)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def host_launch_us(fn: Callable[[], object], n: int = 5) -> float:
    """Median host time (us) to enqueue one eager call, GPU idle before each (what an
    eager caller pays before the GPU starts; a graph replay does not pay it)."""
    times = []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


class GraphTimer(CudaEventTimer):
    """GPU time of one call with the host's launch cost taken out: CUDA-graph replay.

    Why: the Triton launchers spend tens of microseconds in Python per call.  With a
    kernel of a few microseconds, the host cannot stay ahead of the GPU, so the start
    event fires while the launch is still being prepared and the gap is timed as kernel
    time (it made identical configurations differ 10x in the first H100 sweep).  A graph
    replay enqueues the recorded kernels at once, so both sides are charged GPU time only.

    Per timed run: L2 flush, start event, ``graph.replay()``, end event (host never
    waits inside the loop); median and 20/80 % quantiles of ``iters`` runs after
    ``warmup`` replays.  ``fn`` that synchronise (``graph=False`` from the caller, or a
    failed capture) are timed eagerly by :class:`CudaEventTimer`; :attr:`last` says which
    method timed the latest call and :attr:`last_host_us` the eager enqueue cost.
    """

    name = "cuda-graph"

    def __init__(self, iters: int = 50, warmup: int = 5, flush: str = "zero"):
        super().__init__(iters=iters, warmup=warmup, flush=flush)
        self.last, self.last_host_us = self.name, float("nan")

    def __call__(self, fn: Callable[[], object], graph: bool = True) -> Timing:
        fn()  # compile outside everything
        torch.cuda.synchronize()
        self.last_host_us = host_launch_us(fn)
        if not graph:
            self.last = CudaEventTimer.name
            return super().__call__(fn, graph=False)
        try:
            g, _ = capture_graph(fn)
        except Exception as exc:  # noqa: BLE001 - a synchronising fn: time it eagerly, say so
            torch.cuda.synchronize()
            self.last = f"{CudaEventTimer.name} (capture failed: {type(exc).__name__})"
            return super().__call__(fn, graph=False)
        self.last = self.name
        timing = self._event_loop(g.replay)
        del g  # frees the graph's private memory pool
        return timing


class WallTimer:
    """Host clock (CPU runs only: interpreter checks, never for reported numbers)."""

    name = "wall"

    def __init__(self, iters: int = 3, warmup: int = 1):
        self.iters, self.warmup = max(1, iters), warmup

    def __call__(self, fn, graph: bool = True):  # noqa: ARG002 - same call as the GPU timers
        for _ in range(1 + self.warmup):
            fn()
        times = []
        for _ in range(self.iters):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return _quantiles(times)


class ModelTimer:
    """A fake clock for ``--dry-run``: runs ``fn`` once (so the code path is exercised)
    and returns a time from a roofline model of the work declared with :meth:`expect`.

    Deterministic and monotone in L, so the sweep, the guards and the threshold logic can
    be tested end to end on a CPU.  The "triton" side is modelled 1.5x more efficient at
    large L and slower at small L, which gives a threshold inside the sweep.
    """

    name = "model"

    def __init__(self, copy_gbs: float = 3000.0):
        self.copy_gbs = copy_gbs
        self.nbytes, self.side = 0, "ref"

    def expect(self, nbytes: int, side: str) -> None:
        self.nbytes, self.side = nbytes, side

    def __call__(self, fn, graph: bool = True):  # noqa: ARG002 - same call as the GPU timers
        fn()
        eff = 0.9 if self.side == "tri" else 0.6
        fixed = 0.012 if self.side == "tri" else 0.008
        ms = fixed + self.nbytes / (eff * self.copy_gbs * 1e6)
        return Timing(ms, ms * 0.98, ms * 1.02)


def on_streams(fn: Callable[[], object], k: int) -> Callable[[], None]:
    """Launch ``fn`` on ``k`` side streams at once (the seeds' concurrency stress).

    The caller divides the measured time by ``k``.  Each stream waits for the current
    stream first (so the L2 flush is done) and the current stream waits for all of them
    (so the end event covers every launch).
    """
    if k <= 1 or not torch.cuda.is_available():
        return fn
    streams = [torch.cuda.Stream() for _ in range(k)]

    def run():
        cur = torch.cuda.current_stream()
        for s in streams:
            s.wait_stream(cur)
            with torch.cuda.stream(s):
                fn()
        for s in streams:
            cur.wait_stream(s)

    return run
