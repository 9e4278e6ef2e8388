"""CPU tests of the CUDA-event and CUDA-graph timers on fake events."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from bench.common import timers


def _fake_timer(monkeypatch, cls, clock, iters, warmup):
    """A ``cls`` timer on fake CUDA events reading ``clock["t"]``, a host clock ``clock["host"]`` and a flush
    buffer counting zeroings."""

    class FakeEvent:
        def __init__(self, enable_timing=True):
            self.t = None

        def record(self):
            self.t = clock["t"]

        def elapsed_time(self, end):
            return end.t - self.t

    class FlushBuf:
        def zero_(self):
            clock["flushes"] += 1

    def fake_sleep(cycles):  # the GPU hold: the fake clock does not move (it is outside the events)
        clock.setdefault("holds", []).append(cycles)

    clock.setdefault("host", 0.0)  # the host clock the timer reads: moved only by the test, immune to load
    monkeypatch.setattr(timers, "time", SimpleNamespace(perf_counter=lambda: clock["host"]))
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "_sleep", fake_sleep, raising=False)
    timer = cls.__new__(cls)
    timer.iters, timer.warmup, timer.use_do_bench, timer.flush_buf = iters, warmup, False, FlushBuf()
    timer.flush = "zero"  # the default: the fake buffer counts zeroings
    timer._cycles_per_ms = 1000.0  # instance value: no calibration against fake events
    return timer


def test_cuda_event_timer_counts_calls_flushes_and_takes_the_median(monkeypatch):
    """The timing loop without a GPU: fake events, a CPU flush buffer, a frozen host clock."""
    clock = {"t": 0.0, "flushes": 0}
    timer = _fake_timer(monkeypatch, timers.CudaEventTimer, clock, iters=5, warmup=2)
    durations = iter([9.0, 9.0, 9.0, 1.0, 2.0, 3.0, 4.0, 100.0])  # compile, 2 warm-up, 5 timed (ms)
    calls = []

    def fn():
        calls.append(1)
        clock["t"] += next(durations)

    t = timer(fn)
    assert len(calls) == 8 and clock["flushes"] == 5  # one flush before every timed run only
    assert t.median_ms == 3.0 and t.p20_ms == 2.0 and t.p80_ms == 4.0
    # One GPU hold before the timed runs, of at least HOLD_MS_RANGE[0] ms (host enqueue is fast here).
    assert clock["holds"] == [int(timers.HOLD_MS_RANGE[0] * 1000.0)] and timer.last_hold_ms == timers.HOLD_MS_RANGE[0]
    assert timer.last_host_behind is False


def test_hold_covers_the_host_enqueue_time_and_says_when_it_did_not(monkeypatch):
    clock = {"t": 0.0, "flushes": 0}
    timer = _fake_timer(monkeypatch, timers.CudaEventTimer, clock, iters=10, warmup=2)

    def slow_host():  # 1 ms of host time per call: the hold must cover 10 of them, twice over
        clock["host"] += 0.001

    timer(slow_host)
    assert timer.last_hold_ms >= timers.HOLD_FACTOR * 10 * 1.0 and timer.last_host_behind is False
    monkeypatch.setattr(timers, "HOLD_MS_RANGE", (0.5, 1.0))  # a cap below the enqueue time: reported
    timer(slow_host)
    assert timer.last_hold_ms == 1.0 and timer.last_host_behind is True
    monkeypatch.delattr(torch.cuda, "_sleep")  # no _sleep in this torch: nothing held, still timed
    assert timer(lambda: None).median_ms == 0.0 and timer.last_hold_ms == 0.0


def test_graph_timer_replays_the_captured_call_and_falls_back_for_syncing_calls(monkeypatch):
    """GraphTimer without a GPU: a fake graph whose replay advances a fake clock."""
    clock = {"t": 0.0, "flushes": 0, "replays": 0}

    class FakeGraph:
        def replay(self):
            clock["replays"] += 1
            clock["t"] += 2.0

    def capture(fn):
        if getattr(fn, "syncs", False):
            raise RuntimeError("operation not permitted when stream is capturing")
        return FakeGraph(), None

    monkeypatch.setattr(timers, "capture_graph", capture)
    timer = _fake_timer(monkeypatch, timers.GraphTimer, clock, iters=4, warmup=1)

    def fn():
        clock["t"] += 50.0  # an eager call: launch gap and all

    t = timer(fn)
    assert t.median_ms == 2.0 and timer.last == "cuda-graph"  # replays only, never the eager time
    assert clock["replays"] == 5 and clock["flushes"] == 4
    assert timer.last_host_us >= 0
    assert len(clock["holds"]) == 1  # the replays were held for
    fn.syncs = True
    assert timer(fn).median_ms == 50.0 and timer.last == "cuda-events (capture failed: RuntimeError)"
    assert timer(lambda: None, graph=False).median_ms == 0.0 and timer.last == "cuda-events"
    assert len(clock["holds"]) == 1 and timer.last_host_behind is False  # a syncing call is never held
