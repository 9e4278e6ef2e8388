"""bench/ab/host_pair.py: the host rows judged in paired rounds (head and base adjacent, order alternating)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.ab import host_pair

ROOT = Path(__file__).resolve().parents[3]


def _rounds(base: list[float], head: list[float]) -> dict:
    side = {"base": [{"wall_us": x} for x in base], "head": [{"wall_us": x} for x in head]}
    return {k: side for k in host_pair.KINDS}


def test_a_phase_that_slows_both_rounds_of_a_pair_does_not_move_the_verdict():
    base = [50.0] * 10 + [90.0] * 10  # the machine slows down half way, for both trees
    head = [51.0] * 10 + [91.8] * 10
    lines, bad = host_pair.summary(_rounds(base, head), 0.03)
    assert not bad and "| 1.020 |" in lines[2]


def test_a_head_slower_in_every_pair_fails():
    lines, bad = host_pair.summary(_rounds([50.0] * 20, [52.0] * 20), 0.03)
    assert bad and "**slower**" in lines[2] and "head / base 1.040 (median of 20 pairs)" in bad[0]


@pytest.mark.slow
def test_a_dry_run_pairs_two_trees_on_the_cpu(tmp_path):
    env = dict(os.environ, NSA_BENCH_DRYRUN="1", TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    res = subprocess.run([sys.executable, "-m", "bench.ab.host_pair", "--base-src", str(ROOT / "src"), "--base-name",
                          "same", "--pairs", "10", "--calls", "1", "--out", str(tmp_path)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode in (0, 1), res.stderr[-2000:]
    data = json.loads((tmp_path / "host-pair.json").read_text())
    assert [len(data["rounds"][k][w]) for k in host_pair.KINDS for w in ("base", "head")] == [10] * 4
    assert "| host_decode[ranges] | us/call |" in (tmp_path / "host-pair.md").read_text()


def test_a_base_without_the_package_is_one_line(tmp_path, capsys):
    try:
        host_pair.main(["--base-src", str(tmp_path)])
    except SystemExit as exc:
        assert exc.code == 2
    assert "holds no nsa_triton_sel/__init__.py" in capsys.readouterr().err
