"""gpu_refresh on the CPU: releases that arrive while it runs join it, stages run per release, the
benchmarks wait until every correctness task is done, and status, progress and results are written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from nsa_triton_sel.compat.lanes import gpu_refresh
from nsa_triton_sel.compat import ledger
from nsa_triton_sel.compat.core import lane_table, project

ROOT = Path(__file__).resolve().parents[3]
TABLE = lane_table.load_table(project.constraints_dir() / "lanes.toml")


def _tree(trees: Path, version: str) -> None:
    tree = trees / f"triton-{version}"
    (tree / "triton").mkdir(parents=True)
    (tree / "triton" / "__init__.py").write_text(f"__version__ = {version!r}\n")  # no jit: every canary errors
    (trees / f"triton-{version}.ready").write_text("{}\n")


@pytest.mark.slow
def test_a_release_that_arrives_later_joins_and_every_result_is_kept(tmp_path):
    trees, out = tmp_path / "trees", tmp_path / "out"
    trees.mkdir()
    _tree(trees, "3.8.0")
    env = {**os.environ, "NSA_SEL_CANARY_DEVICE": "cpu", "OMP_NUM_THREADS": "1", "NSA_SEL_GIT_COMMIT": "abc123"}
    proc = subprocess.Popen([sys.executable, "-m", "nsa_triton_sel.compat.lanes.gpu_refresh", "--out", str(out),
                             "--trees", str(trees), "--expect", "3.8.0,3.9.0", "--stages", "canary",
                             "--wait-s", "120", "--deadline-s", "200"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(3)
    _tree(trees, "3.9.0")  # the next device call brought it
    log, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, log
    status = json.loads((out / "status.json").read_text())
    assert status["final"] and status["missing"] == []
    assert {(t["version"], t["stage"], t["state"]) for t in status["tasks"]} == {("3.8.0", "canary", "done"),
                                                                                ("3.9.0", "canary", "done")}
    for v in ("3.8.0", "3.9.0"):  # each release's run file, its own Triton (the fake trees' canaries error)
        recs, notes = ledger.load_run_files([out / "results" / f"triton-{v}"])
        assert not notes and {r["triton_imported"] for r in recs} == {v} and {r["verdict"] for r in recs} == {"error"}
        assert recs[0]["compiler_hash"] and recs[0]["runtime_hash"]
    assert (out / "DONE").exists() and "3.9.0: " in (out / "progress.log").read_text()


def _refresh(tmp_path, **kw):
    args = SimpleNamespace(out=tmp_path, expect="none", cores=16, limits=None, stages=["compile", "parity", "bench"],
                           compile_jobs=4, gpu_tasks=10, wait_s=0, installed=False, trees=None, no_warm=False,
                           bench_args=gpu_refresh.BENCH_ARGS)
    args.__dict__.update(kw)
    return gpu_refresh.Refresh(args, TABLE, ROOT)


def test_benchmarks_run_alone_after_every_correctness_task(tmp_path):
    r = _refresh(tmp_path)
    r.add("3.8.0", None)
    r.add("3.9.0", None)
    bench = [t for t in r.tasks if t.stage == "bench"]
    assert not any(r.ready(t) for t in bench)  # correctness first
    for t in r.tasks:
        if t.stage != "bench":
            t.state = "done"
    assert all(r.ready(t) for t in bench)
    assert [t.version for t in r.waiting_in_order()] == ["3.9.0", "3.8.0"]  # newest first: the ratios' base
    assert {t.stage for t in r.tasks} == {"compile", "parity", "warm", "bench"}
    bench[0].state = "running"
    assert not r.ready(bench[1])  # one at a time


def test_slots_cap_concurrency_and_a_parity_waits_for_its_compile(tmp_path, monkeypatch):
    r = _refresh(tmp_path, cores=8, stages=["compile", "parity"])
    launched = []
    monkeypatch.setattr(r, "launch", lambda t: (launched.append((t.version, t.stage)), setattr(t, "state", "running")))
    for v in ("3.0.0", "3.1.0", "3.2.0"):
        r.add(v, None)
    r.start_what_fits()
    assert launched == [("3.0.0", "compile"), ("3.1.0", "compile")]  # 4 + 4 slots of 8
    r.tasks[0].state = "done"  # 3.0.0's compile
    r.tasks[2].state = "done"  # 3.1.0's compile
    launched.clear()
    r.start_what_fits()
    assert ("3.2.0", "compile") in launched and ("3.0.0", "parity") in launched and ("3.1.0", "parity") in launched


def test_bad_arguments_are_one_line(capsys):
    assert gpu_refresh.main(["--out", "/tmp/x", "--stages", "parity,nope", "--installed"]) == 2
    assert "unknown stage(s) ['nope']" in capsys.readouterr().err
    assert gpu_refresh.main(["--out", "/tmp/x"]) == 2


def test_the_warm_pass_is_an_untimed_bench_run_into_a_scratch_folder(tmp_path, monkeypatch):
    r = _refresh(tmp_path)
    r.add("3.9.0", None)
    seen = {}

    class P:
        def __init__(self, cmd, env, **kw):
            seen[cmd[cmd.index("--stages") + 1], cmd[cmd.index("--results") + 1]] = env

    monkeypatch.setattr(gpu_refresh.subprocess, "Popen", P)
    for t in r.tasks:
        if t.stage in ("warm", "bench"):
            r.launch(t)
    (warm_env,) = [e for (stage, res), e in seen.items() if res.endswith("warm/triton-3.9.0")]
    (bench_env,) = [e for (stage, res), e in seen.items() if res.endswith("results/triton-3.9.0")]
    assert warm_env["NSA_SEL_BENCH_ARGS"].endswith("--benchmark-disable") and "bench=" in warm_env["NSA_SEL_STAGE_LIMITS"]
    assert "--benchmark-disable" not in bench_env["NSA_SEL_BENCH_ARGS"]
    assert warm_env["TRITON_CACHE_DIR"] == bench_env["TRITON_CACHE_DIR"]  # the bench stage finds what warm compiled


def test_releases_are_dealt_over_the_gpus_and_each_gpu_benchmarks_alone(tmp_path, monkeypatch):
    r = _refresh(tmp_path, gpus="0,1", cores=16, expect="3.0.0,3.1.0,3.2.0,3.3.0", wait_s=600,
                 stages=["parity", "bench"])
    assert r.gpus == ["0", "1"] and r.shard_cores == 8
    assert r.planned == {"3.0.0": "0", "3.1.0": "1", "3.2.0": "0", "3.3.0": "1"}  # oldest first: both GPUs busy early
    launched = []
    monkeypatch.setattr(r, "launch", lambda t: (launched.append((t.version, t.stage, t.gpu)), setattr(t, "state", "running")))
    for v in ("3.0.0", "3.1.0", "3.2.0"):
        r.add(v, None)
    r.start_what_fits()
    assert {(v, s) for v, s, _ in launched} == {(v, s) for v in ("3.0.0", "3.1.0", "3.2.0") for s in ("parity", "warm")}
    assert all(g == r.planned[v] for v, _, g in launched)
    for t in r.tasks:
        if t.stage != "bench":
            t.state = "done"
    launched.clear()
    r.start_what_fits()
    assert launched == []  # 3.3.0 is still expected: its tests would share the cores with the timings
    r.add("3.3.0", None)
    assert r.tasks[-1].gpu == "1" and not r.ready(r.tasks[-1])  # its own correctness first
    for t in r.tasks:
        if t.stage != "bench":
            t.state = "done"
    r.start_what_fits()
    assert launched == [("3.3.0", "bench", "0"), ("3.2.0", "bench", "1")]  # newest first, one per idle GPU


def test_the_benchmarks_wait_for_a_quiet_machine_then_take_any_idle_gpu(tmp_path, monkeypatch):
    r = _refresh(tmp_path, gpus="0,1", cores=16, expect="3.0.0,3.1.0,3.2.0", wait_s=600, stages=["parity", "bench"],
                 no_warm=True)
    assert r.planned == {"3.0.0": "0", "3.1.0": "1", "3.2.0": "0"}  # GPU 0 has one release more
    launched = []
    monkeypatch.setattr(r, "launch", lambda t: (launched.append((t.version, t.stage, t.gpu)), setattr(t, "state", "running")))
    for v in ("3.0.0", "3.1.0", "3.2.0"):
        r.add(v, None)
    parity = {t.version: t for t in r.tasks if t.stage == "parity"}
    bench = {t.version: t for t in r.tasks if t.stage == "bench"}
    parity["3.1.0"].state = parity["3.2.0"].state = "done"
    parity["3.0.0"].state = "running"  # GPU 0 still checks 3.0.0: GPU 1 is idle, but the cores are not
    r.start_what_fits()
    assert launched == [] and not r.ready(bench["3.2.0"], "1")
    parity["3.0.0"].state = "done"
    r.start_what_fits()
    assert launched == [("3.2.0", "bench", "0"), ("3.1.0", "bench", "1")]  # newest first, one per GPU
    bench["3.1.0"].state = "done"
    launched.clear()
    r.start_what_fits()
    assert launched == [("3.0.0", "bench", "1")]  # GPU 1 is free first: it takes GPU 0's release
    assert "3.0.0 bench: moves from GPU 0 to the idle GPU 1" in (tmp_path / "progress.log").read_text()
    assert "another shard's GPU: 3.0.0 on GPU 1" in r.summary()


def test_the_launch_puts_a_task_on_its_gpu_with_its_workers(tmp_path, monkeypatch):
    r = _refresh(tmp_path, gpus="3", stages=["parity", "contract"])
    r.add("3.9.0", None)
    seen = {}

    class P:
        def __init__(self, cmd, env, **kw):
            seen[cmd[cmd.index("--stages") + 1]] = env

    monkeypatch.setattr(gpu_refresh.subprocess, "Popen", P)
    for t in r.tasks:
        r.launch(t)
    assert {s: (e["CUDA_VISIBLE_DEVICES"], e["NSA_SEL_GPU_WORKERS"]) for s, e in seen.items()} == {
        "parity": ("3", str(gpu_refresh.PARITY_WORKERS)), "contract": ("3", "1")}


def test_no_gpu_found_is_one_shard_and_bad_gpus_are_one_line(monkeypatch):
    monkeypatch.setattr(gpu_refresh.machine, "visible_gpus", lambda: [])
    assert gpu_refresh.shards("all") == [None]
    with pytest.raises(SystemExit, match="--gpus '0,0': expected all, or distinct GPU indices"):
        gpu_refresh.shards("0,0")
