"""bench/ is a package run as ``python -m bench.X``: its modules import each other as ``bench.X``.

A bare ``import bench_sel_triton`` only worked when bench/ itself was on ``sys.path`` (the old
script layout); in the package it raised ModuleNotFoundError in 10 of the 22 ``test_packed``
cases of the pytest-benchmark suite, unseen because nothing ran that suite on a CPU.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SIBLINGS = {p.stem for p in BENCH.glob("*.py")} - {"__init__"}


@pytest.mark.parametrize("path", sorted(BENCH.glob("*.py")), ids=lambda p: p.name)
def test_bench_modules_import_siblings_through_the_package(path):
    bare = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            bare += [a.name for a in node.names if a.name.split(".")[0] in SIBLINGS]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in SIBLINGS:
            bare.append(node.module)
    assert not bare, f"{path.name} imports sibling module(s) {bare} bare; use `from bench import X`"


def test_bench_extra_has_the_histogram_backend():
    """``--benchmark-histogram`` needs pygal, which only pytest-benchmark's ``histogram`` extra brings."""
    text = (BENCH.parent / "pyproject.toml").read_text()
    assert '"pytest-benchmark[histogram]' in text


def test_ci_runs_the_benchmark_suites_dry_run():
    text = (BENCH.parent / ".ci" / "run").read_text()
    assert "NSA_BENCH_DRYRUN=1" in text and "bench/suites/test_bench_sel.py" in text
