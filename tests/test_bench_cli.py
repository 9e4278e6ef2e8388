"""CPU tests of the benchmark machinery in bench/: argument handling, problem builders,
work accounting, CSV writing, suspect guards, the GPU clock of the pytest suites, and one
tiny end-to-end ``--dry-run`` sweep (Triton interpreter, modelled clock)."""

from __future__ import annotations

import csv
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from bench import accounting, csvio, guards, problems, sel_case, timers
from bench import bench_sel_triton as B

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"


def _bench_conftest():
    """bench/conftest.py (the pytest-benchmark suite's fixtures and hooks) as a module."""
    from bench import conftest

    return conftest


# ----------------------------------------------------------------------------- arguments
def test_seed_interface_defaults_and_lists():
    a = B.parse_args(["--N", "64,1024", "--H", "4,8", "--D", "64,128", "--Dv", "64", "--L_list", "16,32",
                      "--dist", "few,many", "--iters", "7", "--warmup", "2", "--streams", "1,2", "--csv", "x.csv"])
    assert a.Ns == [64, 1024] and a.Hs == [4, 8] and a.Ls == [16, 32]
    assert a.dims == [(64, 64), (128, 64)]  # --D x --Dv product
    assert a.dists == ["few", "many"] and a.streams == [1, 2] and (a.iters, a.warmup) == (7, 2)
    assert B.parse_args(["--D", "128"]).dims == [(128, 128)]  # Dv defaults to D
    assert B.parse_args(["--dims", "64:64,128:64"]).dims == [(64, 64), (128, 64)]
    d = B.parse_args(["--decode", "1", "--L_list", "128,256"])
    assert d.decode and d.dists == ["decode"]
    assert B.parse_args(["--decode"]).decode  # bare flag works too


@pytest.mark.parametrize("argv, needle", [
    (["--dist", "few,sparse"], "--dist accepts few, many, mixed"),
    (["--N", "64,abc"], "--N must be a comma-separated list of positive integers"),
    (["--L_list", "0,16"], "--L_list must be"),
    (["--dims", "64-64"], "--dims takes Dk:Dv pairs"),
    (["--decode", "1", "--L_list", "100"], "multiple of --l_sel=64"),
    (["--T", "32", "--L_list", "64"], "--T=32 is shorter than the largest L=64"),
    (["--iters", "0"], "--iters must be >= 1"),
    (["--D", "512"], "head dims up to 256"),
])
def test_bad_arguments_exit_2_and_say_what_is_accepted(argv, needle, capsys):
    with pytest.raises(SystemExit) as exc:
        B.parse_args(argv)
    assert exc.value.code == 2
    assert needle in capsys.readouterr().err


def test_without_cuda_the_benchmark_refuses_unless_dry_run(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert B.main(["--N", "4"]) == 2
    err = capsys.readouterr().err
    assert "CUDA is not available" in err and "--dry-run" in err


def test_csv_path_template():
    assert B.csv_path("out/sel_{mode}.csv", "varlen") == "out/sel_varlen.csv"
    assert B.csv_path("all.csv", "dense") == "all.csv"
    assert B.csv_path(None, "dense") is None


# ----------------------------------------------------------------------------- problems
@pytest.mark.parametrize("dist", ["few", "many", "mixed"])
@pytest.mark.parametrize("L", [16, 100, 1024])
def test_span_distributions_sum_to_L_and_are_disjoint(dist, L):
    gen = torch.Generator().manual_seed(1)
    N, T = 64, 4 * L
    lens = problems.span_lengths(dist, N, L, gen)
    assert (lens.sum(-1) == L).all()
    if dist == "many":
        assert lens.shape[1] == 8 and (lens.max(-1).values - lens.min(-1).values <= 1).all()
    if dist == "mixed":
        counts = (lens > 0).sum(-1)
        assert set(counts.tolist()) <= {2, 4, 8} and len(set(counts.tolist())) > 1
    spans = problems.spans_from_lengths(lens, T, gen)
    st, en = spans[..., 0].long(), spans[..., 1].long()
    assert (st >= 0).all() and (en <= T).all() and (en - st == lens).all()
    real = lens > 0
    for r in range(N):  # in order and disjoint
        s, e = st[r][real[r]], en[r][real[r]]
        assert (s[1:] >= e[:-1]).all()
    idx = problems.gather_index(spans, L)
    assert idx.shape == (N, L) and (idx[:, 1:] != idx[:, :-1]).all()
    assert int(idx.min()) >= 0 and int(idx.max()) < T


def test_many_spans_are_scattered_not_packed():
    gen = torch.Generator().manual_seed(0)
    spans = problems.spans_from_lengths(problems.span_lengths("many", 256, 64, gen), 256, gen)
    assert (spans[:, -1, 1] - spans[:, 0, 0] > 64).float().mean() > 0.9


def test_decode_blocks():
    gen = torch.Generator().manual_seed(0)
    r = problems.decode_lengths(8, 256, 64, 1024, gen)
    assert r.shape == (8, 4, 2) and (r[..., 0] % 64 == 0).all() and (r[..., 1] - r[..., 0] == 64).all()
    assert all(len(set(row[:, 0].tolist())) == 4 for row in r)
    with pytest.raises(ValueError, match="multiple of l_sel"):
        problems.decode_lengths(1, 100, 64, 1024, gen)


def test_make_case_packs_exactly_the_selected_keys():
    a = B.parse_args(["--dry-run", "--dist", "mixed"])
    case = sel_case.make_case(a, "mixed", 6, 4, 16, 8, 40, torch.device("cpu"))
    assert case.kp.shape == (6, 40, 16) and case.vp.shape == (6, 40, 8) and case.T == 160
    r = case.ranges[:, 0, 0].long()
    for i in range(6):
        keys = torch.cat([torch.arange(s, e) for s, e in r[i].tolist() if e > s])
        torch.testing.assert_close(case.kp[i], case.k5[i, 0, keys])


# ----------------------------------------------------------------------------- accounting
def test_bytes_and_flops():
    # q + selected K/V + o, each once; 2·H·L·(Dk+Dv) FLOPs per row.
    assert accounting.sel_bytes(N=2, H=4, Dk=64, Dv=32, L=10, elem=2) == 2 * 2 * (4 * 64 + 10 * 96 + 4 * 32)
    assert accounting.sel_flops(N=2, H=4, Dk=64, Dv=32, L=10) == 2 * 2 * 4 * 10 * 96
    gbs, tfl, pct = accounting.rates(1.0, 3_000_000_000, 2_000_000_000_000, copy_gbs=3000.0)
    assert (gbs, tfl, pct) == pytest.approx((3000.0, 2000.0, 100.0))
    assert all(math.isnan(x) for x in accounting.rates(0.0, 1, 1, 1.0))


# ----------------------------------------------------------------------------- csv + guards
def _row(L, ref_ms, tri_ms=None, N=1024, H=8, D=128, copy=3000.0, **kw):
    nbytes = accounting.sel_bytes(N, H, D, D, L, 2)
    tri_ms = ref_ms / 1.5 if tri_ms is None else tri_ms
    r = {"mode": "dense", "dist": "few", "N": N, "H": H, "D": D, "Dv": D, "L": L, "streams": 1, "dtype": "fp16",
         "tri_ms": tri_ms, "ref_ms": ref_ms, "mae": 1e-4, "copy_gbs": copy, "status": "ok", "gpu": "g"}
    r["tri_gbs"], r["ref_gbs"] = nbytes / tri_ms / 1e6, nbytes / ref_ms / 1e6
    r.update(kw)
    return r


def test_csv_has_the_seed_columns_first_then_ours(tmp_path):
    p = tmp_path / "x.csv"
    csvio.write_csv(p, [_row(64, 0.1)])
    csvio.write_csv(p, [_row(128, 0.2)])  # appends without a second header
    with p.open() as fh:
        rows = list(csv.reader(fh))
    assert rows[0][:12] == ["mode", "N", "H", "D", "Dv", "L", "nspans", "streams", "tri_ms", "ref_ms", "speedup",
                            "mae"]
    for col in ("tri_gbs", "ref_gbs", "tri_tflops", "ref_tflops", "tri_pct_bw", "ref_pct_bw", "suspect",
                "gpu", "triton", "torch", "cuda", "copy_gbs"):
        assert col in rows[0]
    assert len(rows) == 3 and rows[1][5] == "64" and rows[2][5] == "128"
    bad = tmp_path / "old.csv"
    bad.write_text("mode,N,H\n")
    with pytest.raises(ValueError, match="different header"):
        csvio.write_csv(bad, [_row(64, 0.1)])


def test_honest_sweep_raises_no_flag():
    rows = [_row(L, 0.01 + L * 0.0005) for L in (16, 32, 64, 128, 256, 512, 1024)]
    assert all(r["suspect"] == "" for r in guards.flag_suspects(rows))


def test_small_latency_bound_sweep_is_not_called_flat():
    # N=64, H=4, D=64: even at L=1024 the work is ~5 us at copy bandwidth, so a flat
    # ~10 us reference is honest launch latency, not skipped work.
    rows = [_row(L, 0.010 + 0.0001 * (i % 2), N=64, H=4, D=64) for i, L in enumerate((16, 64, 256, 1024))]
    assert all("ref_flat" not in r["suspect"] for r in guards.flag_suspects(rows))


def test_the_seeds_bug_is_caught():
    # SDPA at a constant 0.02 ms whatever L (one row timed, 64 keys read): flat, and
    # above the copy bandwidth at large L.
    rows = guards.flag_suspects([_row(L, 0.02) for L in (64, 128, 256, 512, 1024)])
    assert all("ref_flat" in r["suspect"] for r in rows)
    assert "ref_bw>copy" in rows[-1]["suspect"] and "ref_bw>copy" not in rows[0]["suspect"]


def test_drop_nan_and_triton_bandwidth_guards():
    rows = guards.flag_suspects([_row(64, 0.10), _row(128, 0.05), _row(256, 0.2)])
    assert rows[1]["suspect"] == "ref_drop" and rows[0]["suspect"] == rows[2]["suspect"] == ""
    jitter = guards.flag_suspects([_row(16, 0.0100, N=64, H=4, D=64), _row(32, 0.0084, N=64, H=4, D=64)])
    assert jitter[1]["suspect"] == ""  # 16 % but 1.6 us: launch-latency noise, not a drop
    nan = guards.flag_suspects([_row(64, 0.1, mae=float("nan"))])
    assert nan[0]["suspect"] == "nan"
    fast = guards.flag_suspects([_row(1024, 1.0, tri_ms=1e-4)])
    assert fast[0]["suspect"] == "tri_bw>copy"


def test_ref_drop_is_judged_within_one_reference_kernel():
    # SDPA on the H100: flash at L=1 (cuDNN refuses one key), cuDNN from L=2; the switch is
    # faster although L grew.  Within one kernel the same drop is still a ref_drop.
    flash, cudnn = "pytorch_flash::flash_fwd_kernel", "cudnn_generated_fort_native_sdpa_sm90"
    rows = guards.flag_suspects([_row(1, 0.029, ref_kernel=flash), _row(2, 0.024, ref_kernel=cudnn),
                            _row(4, 0.024, ref_kernel=cudnn), _row(8, 0.018, ref_kernel=cudnn)])
    assert [r["suspect"] for r in rows] == ["", "", "", "ref_drop"]
    sw = guards.kernel_switches(rows)
    assert len(sw) == 1 and sw[0][0]["L"] == 1 and sw[0][1]["L"] == 2 and sw[0][2] is True
    # Without kernel names (CPU, old CSVs) every step is compared.
    plain = guards.flag_suspects([_row(1, 0.029), _row(2, 0.024)])
    assert plain[1]["suspect"] == "ref_drop" and guards.kernel_switches(plain) == []


def test_noisy_timings_are_flagged_per_side():
    quiet = _row(64, 0.1, tri_p20_ms=0.066, tri_p80_ms=0.070, ref_p20_ms=0.098, ref_p80_ms=0.102)
    spiky = _row(64, 0.1, tri_p20_ms=0.0067, tri_p80_ms=0.1056, ref_p20_ms=0.098, ref_p80_ms=0.102)
    tiny = _row(64, 0.1, tri_p20_ms=0.0030, tri_p80_ms=0.0045, ref_p20_ms=0.098, ref_p80_ms=0.102)
    assert guards.noisy_sides(quiet) == [] and guards.noisy_sides(spiky) == ["tri"]
    assert guards.noisy_sides(tiny) == []  # 1.5x but 1.5 us apart: launch jitter
    assert guards.flag_suspects([spiky])[0]["suspect"] == "tri_noisy"


def test_noisy_rows_are_re_timed_and_the_quietest_attempt_kept(monkeypatch):
    a = B.parse_args(["--dry-run", "--retries", "2"])
    spreads = iter([(0.01, 0.10), (0.01, 0.05), (0.01, 0.011), (0.01, 0.011)])

    def fake_run_case(*args):
        p20, p80 = next(spreads)
        return {"status": "ok", "tri_p20_ms": p20, "tri_p80_ms": p80, "ref_p20_ms": 0.02, "ref_p80_ms": 0.021}

    monkeypatch.setattr(sel_case, "run_case", fake_run_case)
    r = sel_case.timed_case(a, "few", 4, 2, 64, 64, 16, 1, None, None, None, None)
    assert r["retries"] == 2 and r["tri_p80_ms"] == 0.011  # third attempt quiet: stop there
    a0 = B.parse_args(["--dry-run", "--retries", "0"])
    spreads = iter([(0.01, 0.10)])
    r0 = sel_case.timed_case(a0, "few", 4, 2, 64, 64, 16, 1, None, None, None, None)
    assert r0["retries"] == 0 and guards.noisy_sides(r0) == ["tri"]  # kept, and the guard will flag it


def test_guards_are_per_sweep():
    # Same L values, different N: the drop from one group to the other is not a drop.
    rows = guards.flag_suspects([_row(64, 0.5, N=1024), _row(64, 0.01, N=64), _row(128, 0.02, N=64)])
    assert all(r["suspect"] == "" for r in rows)


# ----------------------------------------------------------------------------- pytest suite plumbing
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


def test_run_h100_rejects_unknown_option(tmp_path):
    res = subprocess.run(["bash", str(BENCH / "run_h100.sh"), str(tmp_path), "--fast"],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and "accepted: --dry-run" in res.stderr


def test_run_h100_runs_only_the_chosen_stages(tmp_path):
    env = {**os.environ, "STAGES": "env,report"}
    res = subprocess.run(["bash", str(BENCH / "run_h100.sh"), str(tmp_path), "--dry-run"], env=env,
                         capture_output=True, text=True, timeout=120)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "environment rc=0" in out and "threshold report rc=" in out
    for skipped in ("sweep dense+varlen", "sweep decode", "pytest-benchmark", "nsa contenders"):
        assert f"=== {skipped} skipped (STAGES=env,report)" in out
    bad = subprocess.run(["bash", str(BENCH / "run_h100.sh"), str(tmp_path), "--dry-run"],
                         env={**os.environ, "STAGES": "env,plot"}, capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "unknown stage 'plot'" in bad.stdout + bad.stderr


# ----------------------------------------------------------------------------- end to end
def test_dry_run_sweep_writes_one_csv_per_mode(tmp_path):
    """The real sweep code on the CPU: interpreter kernels, oracle MAE, modelled clock."""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "bench.bench_sel_triton", "--dry-run", "--N", "3", "--H", "2",
           "--dims", "32:16", "--L_list", "16,32,128", "--dist", "few,many,mixed", "--mae-rows", "2",
           "--csv", str(tmp_path / "sel_{mode}.csv")]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "[9/9" in res.stderr  # progress lines
    dense = csvio.read_csv([tmp_path / "sel_dense.csv"])
    varlen = csvio.read_csv([tmp_path / "sel_varlen.csv"])
    assert len(dense) == 3 and len(varlen) == 6
    assert {r["dist"] for r in varlen} == {"many", "mixed"}
    for r in dense + varlen:
        assert r["status"] == "ok" and r["suspect"] == "" and r["timer"] == "model"
        assert float(r["mae"]) < 1e-2 and float(r["ref_mae"]) < 1e-2
        assert float(r["tri_gbs"]) > 0 and r["gpu"] and r["triton"]
    assert all(r["tri_packed_ms"] and r["ref_gather_ms"] for r in varlen)
    assert res.stdout.splitlines()[0].startswith("dense,N=3,H=2,D=32,Dv=16,L=16,streams=1, tri_ms=")


def _fake_timer(monkeypatch, cls, clock, iters, warmup):
    """A ``cls`` timer on fake CUDA events reading ``clock["t"]`` and a flush buffer counting zeroings."""

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

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "_sleep", fake_sleep, raising=False)
    timer = cls.__new__(cls)
    timer.iters, timer.warmup, timer.use_do_bench, timer.flush_buf = iters, warmup, False, FlushBuf()
    timer._cycles_per_ms = 1000.0  # instance value: no calibration against fake events
    return timer


def test_cuda_event_timer_counts_calls_flushes_and_takes_the_median(monkeypatch):
    """The timing loop without a GPU: fake events, a CPU flush buffer."""
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

    host = {"s": 0.0}  # the host clock the timer reads, moved only by the calls: immune to machine load
    monkeypatch.setattr(timers, "time", SimpleNamespace(perf_counter=lambda: host["s"]))

    def slow_host():  # 1 ms of host time per call: the hold must cover 10 of them, twice over
        host["s"] += 0.001

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


def test_timer_label_names_sides_timed_another_way():
    assert sel_case.timer_label("cuda-graph", {"tri": "cuda-graph", "ref": "cuda-graph"}) == "cuda-graph"
    assert sel_case.timer_label("cuda-graph", {"tri": "cuda-graph", "ref_gather": "cuda-events"}) == \
        "cuda-graph; ref_gather=cuda-events"
