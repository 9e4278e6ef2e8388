"""``python -m bench.analysis.plots``: the README's two pictures from committed results."""

from __future__ import annotations

import pytest

from bench.analysis import plots


def test_the_training_table_has_every_contender_at_8k():
    rows = plots.load_train()
    at_8k = {r["contender"] for r in rows if r["T"] == 8192}
    assert at_8k == set(plots.CONTENDERS) and all(r["fwdbwd_ms"] > r["fwd_ms"] > 0 for r in rows)
    assert "sdpa" not in {r["contender"] for r in rows if r["T"] > 8192}  # did not fit: left out, not zero


def test_release_cells_count_verdicts_per_check_and_mode():
    recs = [{"triton": "3.1.0", "check": "compile", "mode": "aot", "verdict": v} for v in ("pass", "pass", "skip")]
    recs.append({"triton": "3.1.0", "check": "parity", "mode": "gpu", "verdict": "fail"})
    cells = plots.release_cells(recs, ["3.1.0", "3.2.0"])
    assert cells[0][0] == ("pass", "2 pass\n1 skip")
    assert cells[0][3] == ("fail", "1 fail") and cells[0][2] == ("not run", "not run")
    assert all(c == ("not run", "not run") for c in cells[1])


def test_bench_medians_of_the_committed_gpu_lanes():
    medians = plots.bench_medians()
    assert {"3.0.0", "3.6.0", "3.9.0"} <= set(medians)
    assert all(0 < m < 1 for groups in medians.values() for m in groups.values())
    assert plots._short("dense-N1024-H8-D128-L256") == "dense\nL256"
    assert plots._short("nsa-T4096-local") == "nsa T4096\nlocal"


def test_the_command_writes_both_pictures(tmp_path):
    pytest.importorskip("matplotlib")
    assert plots.main(["--out", str(tmp_path)]) == 0
    for name in ("contenders.png", "releases.png"):
        data = (tmp_path / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and 20_000 < len(data) < 400_000
