"""The lanes' pytest plugin under pytest-xdist (the interpreter lanes run their tests on every usable core):
each worker reports what it imported, and the progress lines count the workers' tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("xdist")


def test_each_worker_reports_its_imports_and_progress_counts_every_test(tmp_path):
    tests = "import numpy\n" + "".join(f"def test_{i}():\n    assert numpy.__version__\n" for i in range(6))
    (tmp_path / "test_x.py").write_text(tests)
    out = tmp_path / "imported.json"
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "nsa_triton_sel.compat.lanes.pytest_plugin",
                          "-p", "no:cacheprovider", str(tmp_path / "test_x.py")], cwd=tmp_path,
                         env={**os.environ, "NSA_SEL_IMPORTED_JSON": str(out), "NSA_SEL_PROGRESS_EVERY": "3"},
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    import numpy

    workers = sorted(p.name for p in tmp_path.glob("imported.json.gw*"))
    assert workers == ["imported.json.gw0", "imported.json.gw1"]
    for name in workers:
        assert json.loads((tmp_path / name).read_text())["imported"]["numpy"] == numpy.__version__
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("tests: ")]
    assert [ln.split(" (")[0] for ln in lines] == ["tests: 3/6", "tests: 6/6"], res.stdout
