"""The benchmark suites' dry run: ``bench/suites/`` and the A/B ``bench/ab/test_ab.py`` on the CPU
(``NSA_BENCH_DRYRUN=1``: tiny shapes, the interpreter, the host clock), run as their own pytest process
because pytest-benchmark does not time under pytest-xdist.  What it checks is the plumbing a GPU run
depends on (fixtures, hooks, the JSON with the environment and each row's derived figures), not numbers.
One row of each kind (bench/ab/test_ab.py and bench/suites/test_bench_sel.py keep one length and one
selection kind when dry): about two and a half minutes of one core."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SUITES = ["bench/suites/test_bench_sel.py", "bench/suites/test_auto_route.py", "bench/suites/test_crossover.py",
          "bench/ab/test_ab.py"]
TIMED = {"bench/suites/test_bench_sel.py", "bench/ab/test_ab.py"}  # the files whose tests time rows
ROW_KINDS = {f"bench/ab/test_ab.py::test_{k}" for k in ("fwd", "fwd_small", "train", "train_small", "decode",
                                                        "host_decode")} | {
    f"bench/suites/test_bench_sel.py::test_{k}" for k in ("packed", "nsa", "train")}


def test_the_benchmark_suites_run_dry_on_the_cpu(tmp_path):
    report = tmp_path / "dry.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "NSA_BENCH_"))}
    env.update(NSA_BENCH_DRYRUN="1", NSA_BENCH_FLEX="0", OMP_NUM_THREADS="1")
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SUITES,
                          f"--benchmark-json={report}"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=1800)
    tail = res.stdout[-3000:] + res.stderr[-2000:]
    assert res.returncode == 0, tail
    summary = res.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "error" not in summary, summary
    data = json.loads(report.read_text())
    assert data["machine_info"]["nsa_env"], "the environment fingerprint is missing from the JSON"
    rows = data["benchmarks"]
    per_file = Counter(b["fullname"].split("::")[0] for b in rows)
    assert set(per_file) == TIMED, per_file
    kinds = {b["fullname"].split("[")[0] for b in rows}  # every timed test function gave a row
    assert kinds == ROW_KINDS, sorted(kinds ^ ROW_KINDS)
    for b in rows:
        assert b["stats"]["rounds"] >= 1 and b["stats"]["median"] > 0, b["fullname"]
    for b in (b for b in rows if b["fullname"].startswith("bench/suites/test_bench_sel.py")):
        info = b["extra_info"]  # what the JSON hook derives from the median and the row's bytes and FLOPs
        assert info.get("timer") and info.get("median_ms", 0) > 0 and "gbs" in info, (b["fullname"], info)
