"""CPU tests of bench/device/run_h100.sh: options and stage selection."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "bench" / "device"


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
