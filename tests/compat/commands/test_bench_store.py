"""Saved pytest-benchmark storage per lane and the --benchmark-compare-fail gate check-upgrade arms."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import ledger_factory as F
from nsa_triton_sel.compat.lanes import bench_store, checks
from nsa_triton_sel.compat import ledger
from nsa_triton_sel.compat.commands import upgrade
from fake_nox import FakeSession
from test_upgrade import BASE, CAND, _good, _recs


@pytest.fixture(autouse=True)
def _no_gate(monkeypatch):
    for name in (bench_store.STORAGE_ENV, bench_store.COMPARE_ENV, bench_store.COMPARE_FAIL_ENV):
        monkeypatch.delenv(name, raising=False)


def test_every_bench_run_is_saved_under_its_release(tmp_path):
    args = bench_store.pytest_args(tmp_path / "results", "3.9.0")
    assert args == [f"--benchmark-storage=file://{(tmp_path / 'results' / 'benchmarks').resolve()}",
                    "--benchmark-save=3.9.0"]


def test_arming_the_gate_finds_the_baselines_newest_saved_run(tmp_path):
    store = tmp_path / "results" / "benchmarks" / "Linux-CPython-3.11-64bit"
    store.mkdir(parents=True)
    for name in ("0001_3.9.0.json", "0002_3.6.0.json", "0003_3.9.0.json", "0004_3.9.0.jsonx"):
        (store / name).write_text("{}")
        os.utime(store / name, (1, int(name[:4])))
    msg = bench_store.arm_gate("3.9.0", 0.10, tmp_path / "results")
    assert "0003_3.9.0.json" in msg and "--benchmark-compare-fail=median:10%" in msg
    args = bench_store.pytest_args(tmp_path / "results", "3.10.0")
    assert "--benchmark-compare=0003" in args and "--benchmark-compare-fail=median:10%" in args
    assert "--benchmark-save=3.10.0" in args


def test_without_a_saved_baseline_run_the_gate_stays_off_and_says_so(tmp_path):
    msg = bench_store.arm_gate("3.9.0", 0.10, tmp_path / "results")
    assert "no saved benchmark run of the baseline 3.9.0" in msg and bench_store.gate_armed() is None


def _bench_pytest(rc):
    def run(args, env):
        xml = Path(next(a for a in args if a.startswith("--junitxml=")).split("=", 1)[1])
        xml.write_text('<testsuite><testcase classname="bench.t" name="test_a"/></testsuite>')
        Path(env[checks.IMPORTED_ENV]).write_text(json.dumps({"imported": {"triton": "3.1.0"}}))
        Path(args[3]).write_text(str(rc))
        run.args = args
    return run


def test_a_regression_under_the_gate_is_a_failed_bench_record(tmp_path, monkeypatch):
    monkeypatch.setenv(bench_store.COMPARE_ENV, "0003")
    monkeypatch.setenv(bench_store.COMPARE_FAIL_ENV, "median:10%")
    run = _bench_pytest(1)  # every test passed; pytest-benchmark's compare-fail set the exit status
    s = FakeSession("bench-3.1", tmp_path, {"pytest": run})
    recs, problem = checks.pytest_run(s, F.base("3.1", "bench"), tmp_path, ["bench/"], [], kind="bench")
    assert "--benchmark-compare=0003" in run.args and "--benchmark-compare-fail=median:10%" in run.args
    gate = recs[-1]
    assert gate["kernel"] == bench_store.GATE_KERNEL and gate["verdict"] == "fail" and gate["check"] == "bench"
    assert "a median regressed" in gate["message"] and problem.startswith("a benchmark regressed")
    assert not ledger.problems(gate)


def test_without_the_gate_a_passing_bench_run_is_not_a_regression(tmp_path):
    s = FakeSession("bench-3.1", tmp_path, {"pytest": _bench_pytest(0)})
    recs, problem = checks.pytest_run(s, F.base("3.1", "bench"), tmp_path, ["bench/"], [], kind="bench")
    assert [r["kernel"] for r in recs] == ["bench.t::test_a"] and problem is None


def test_an_untimed_pass_with_an_empty_benchmark_file_keeps_its_records(tmp_path):
    def run(args, env):  # pytest-benchmark opens --benchmark-json at start; --benchmark-disable writes nothing
        _bench_pytest(0)(args, env)
        Path(next(a for a in args if a.startswith("--benchmark-json=")).split("=", 1)[1]).write_text("")
    s = FakeSession("bench-3.1", tmp_path, {"pytest": run})
    recs, problem = checks.pytest_run(s, F.base("3.1", "bench"), tmp_path, ["bench/"], [], kind="bench")
    assert [r["verdict"] for r in recs] == ["pass"] and problem is None


def test_check_upgrade_blocks_on_the_gates_failure():
    gate = _recs(CAND, "bench", [(bench_store.GATE_KERNEL, "fail", None, None)])
    gate[0]["message"] = "pytest-benchmark --benchmark-compare-fail=median:10% against saved run 0003: a median regressed"
    d = upgrade.judge("3.10.0", _good(CAND) + gate, "3.9.0", _good(BASE), windows=[])
    assert d.verdict == upgrade.BLOCKED
    assert any(r.startswith("bench: pytest-benchmark --benchmark-compare-fail") for r in d.reasons)

