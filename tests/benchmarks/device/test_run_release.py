"""CPU tests of bench/device/run_release.sh and the gpu_lane it runs: one release's failure never loses the
others' results, a stage past its limit still reports what ran, every output is a valid run file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from nsa_triton_sel.compat.lanes import gpu_lane
from nsa_triton_sel.compat import ledger

ROOT = Path(__file__).resolve().parents[3]


def _fake_triton(tmp_path: Path, version: str) -> Path:
    tree = tmp_path / f"tree-{version}"
    (tree / "triton").mkdir(parents=True)
    (tree / "triton" / "__init__.py").write_text(f"__version__ = {version!r}\n")  # no jit: every canary errors
    return tree


@pytest.mark.slow
def test_a_broken_release_does_not_lose_the_others_results(tmp_path):
    out = tmp_path / "out"
    # canary=160: each canary child gets limit/4; its torch import alone took past the default's 15 s on a busy
    # 2-core box, and a 'timeout' verdict replaced the 'error' this test is about.
    env = {**os.environ, "PYTHON": sys.executable, "STAGES": "canary", "NSA_SEL_CANARY_DEVICE": "cpu",
           "OMP_NUM_THREADS": "1", "NSA_SEL_GIT_COMMIT": "abc123", "NSA_SEL_STAGE_LIMITS": "canary=160"}
    res = subprocess.run(["bash", str(ROOT / "bench" / "device" / "run_release.sh"), str(out), str(tmp_path / "missing.whl"),
                          str(_fake_triton(tmp_path, "3.8.0"))], env=env, capture_output=True, text=True, timeout=240)
    log = (out / "run.log").read_text()
    assert res.returncode == 1, log  # the missing wheel (and the canaries' errors) fail the run ...
    assert "no such wheel, tree or parts" in log and "triton 3.8.0: exit" in log
    with tarfile.open(out / "results.tar.gz") as tar:  # ... but 3.8.0's results came back
        tar.extractall(tmp_path / "x")
    recs, notes = ledger.load_run_files([tmp_path / "x" / "results" / "triton-3.8.0"])
    assert not notes and len(recs) == 4
    assert {r["check"] for r in recs} == {"gpu-canary"} and {r["verdict"] for r in recs} == {"error"}
    assert {r["triton_imported"] for r in recs} == {"3.8.0"} and recs[0]["git_commit"]  # checkout, else $NSA_SEL_GIT_COMMIT
    assert "no network" in recs[0]["off_pair_reason"] and recs[0]["compiler_hash"] and recs[0]["runtime_hash"]


PARTIAL = ("import signal, sys, time\n"
           "try:\n    time.sleep(30)\nexcept KeyboardInterrupt:\n    print('wrote the partial report'); sys.exit(2)\n")


@pytest.mark.parametrize("inherited", [signal.SIG_DFL, signal.SIG_IGN], ids=["foreground", "nohup"])
def test_a_stage_past_its_limit_is_interrupted_not_lost(inherited):
    """Under `nohup ... &` (SIGINT inherited ignored) the limit's SIGINT must still reach pytest, or a stage
    past its limit ends with nothing saved."""
    sess = gpu_lane.LocalSession("parity-3.9", {}, limit_s=1.0)
    old = signal.signal(signal.SIGINT, inherited)
    try:
        t0 = time.monotonic()
        out = sess.run("python", "-c", PARTIAL, silent=True)
    finally:
        signal.signal(signal.SIGINT, old)
    assert "wrote the partial report" in out and time.monotonic() - t0 < 20


def test_a_stage_that_ignores_sigint_is_terminated_then_killed():
    sess = gpu_lane.LocalSession("parity-3.9", {}, limit_s=1.0, grace_s=1.0)
    code = ("import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('stubborn', flush=True)\ntime.sleep(60)\n")
    t0 = time.monotonic()
    sess.run("python", "-c", code, silent=True)
    assert time.monotonic() - t0 < 15  # SIGINT, SIGTERM ignored: SIGKILL after the two graces


def test_stage_limits_parse_and_refuse_typos():
    assert gpu_lane.stage_limits("parity=200")["parity"] == 200.0
    with pytest.raises(ValueError, match="unknown stage 'parityy'"):
        gpu_lane.stage_limits("parityy=1")


def test_an_off_pair_run_says_why_and_an_unlisted_release_gets_a_candidate_lane(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "compat" / "support"))  # ledger_factory, also when this file runs alone
    import ledger_factory as F
    from nsa_triton_sel.compat.core import lane_table

    table = lane_table.load_table(ROOT / "constraints" / "lanes.toml")
    monkeypatch.setenv("NSA_SEL_OFF_PAIR_NOTE", "no network here")
    fp = {**F.CPU_FP, "torch": "2.11.0+cu130", "cuda_runtime": "13.0", "gpu_name": "NVIDIA H100 80GB HBM3",
          "imported": {"triton": "3.4.0", "numpy": None, "torch": "2.11.0+cu130"}, "compiler_hash": "k"}
    base = gpu_lane.base_for("canary", gpu_lane.lane_for("3.4.0", table), fp, table, "2026-11-23T00:00:00+00:00")
    assert base["check"] == "gpu-canary" and base["session"] == "canary-3.4" and base["mode"] == "gpu"
    assert not base["torch_paired"] and base["off_pair_reason"].endswith("; no network here")
    assert "2.8.0" in base["off_pair_reason"]  # what 3.4.0 pairs with
    paired = gpu_lane.base_for("parity", gpu_lane.lane_for("3.6.0", table), {**fp, "imported": {"triton": "3.6.0"}},
                               table, "2026-11-23T00:00:00+00:00")
    assert paired["torch_paired"] and paired["off_pair_reason"] is None
    assert gpu_lane.lane_for("3.10.0", table).candidate
