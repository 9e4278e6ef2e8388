"""CPU tests of the pytest-benchmark suite's GPU clock and JSON hook (bench/conftest.py)."""

from __future__ import annotations

import pytest
import torch


def _bench_conftest():
    """bench/conftest.py (the pytest-benchmark suite's fixtures and hooks) as a module."""
    from bench import conftest

    return conftest


def test_gpu_clock_advances_by_event_time_between_pairs(monkeypatch):
    bench_conftest = _bench_conftest()

    class FakeEvent:
        now = 0.0

        def __init__(self, enable_timing=True):
            self.t = None

        def record(self):
            FakeEvent.now += 1.5
            self.t = FakeEvent.now

        def synchronize(self):
            pass

        def elapsed_time(self, other):
            return (other.t - self.t) * 1e3  # ms, as CUDA events report

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    clock = bench_conftest.GpuClock()
    t0 = clock()
    t1 = clock()
    assert t0 == 0.0 and t1 == pytest.approx(1.5)  # one record apart, in seconds
    assert clock() == pytest.approx(1.5) and clock() == pytest.approx(3.0)


def test_benchmark_json_hook_derives_rates():
    bench_conftest = _bench_conftest()

    work = {"bytes": 3_000_000_000, "flops": 10**12, "copy_gbs": 3000.0}
    out = {"benchmarks": [{"group": "g", "stats": {"median": 1e-3}, "extra_info": dict(work, impl="triton")},
                          {"group": "g", "stats": {"median": 3e-3}, "extra_info": dict(work, impl="sdpa")},
                          {"group": "h", "stats": {"median": 1e-3}, "extra_info": {}}]}
    bench_conftest.pytest_benchmark_update_json(None, [], out)
    info = out["benchmarks"][0]["extra_info"]
    assert info["gbs"] == pytest.approx(3000.0) and info["tflops"] == pytest.approx(1000.0)
    assert info["pct_copy_bw"] == pytest.approx(100.0) and info["median_ms"] == pytest.approx(1.0)
    assert info["speedup_vs_sdpa"] == pytest.approx(3.0)
    assert out["benchmarks"][1]["extra_info"]["speedup_vs_sdpa"] == pytest.approx(1.0)
    assert "gbs" not in out["benchmarks"][2]["extra_info"] and "speedup_vs_sdpa" not in out["benchmarks"][2]["extra_info"]


def test_eager_hold_is_twice_the_host_time_within_its_bounds():
    bench_conftest = _bench_conftest()
    from bench.common import timers

    assert bench_conftest.eager_hold_ms(2.5) == pytest.approx(5.0)  # a 4K training step: 2.5 ms to enqueue
    assert bench_conftest.eager_hold_ms(0.01) == bench_conftest.HOLD_MIN_MS
    assert bench_conftest.eager_hold_ms(1e4) == timers.HOLD_MS_RANGE[1]  # a call of seconds: the longest hold


def test_held_rounds_run_before_then_flush_then_spin(monkeypatch):
    bench_conftest = _bench_conftest()
    calls = []
    monkeypatch.setattr(bench_conftest, "DRY", False)
    monkeypatch.setattr(bench_conftest.timers, "_calibrate_sleep", lambda sleep: 1000.0)  # cycles per ms
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: calls.append(("spin", cycles)), raising=False)
    held = bench_conftest.HeldRounds(lambda: calls.append("flush"), 5.0, before=lambda: calls.append("before"))
    held()
    assert calls == ["before", "flush", ("spin", 5000)]
    calls.clear()
    bench_conftest.HeldRounds(lambda: calls.append("flush"), 0.0)()  # a graph replay: no hold
    assert calls == ["flush"]
