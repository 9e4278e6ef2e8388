"""bench/ is a package of folders run as ``python -m bench.<folder>.<script>``: its layout and its imports.

- every folder under bench/ (``results/`` aside: data, checked by ``test_results_layout.py``) is a package with a
  README.md saying what is in it and how to run it, and holds at most ``MAX_MODULES`` modules;
- bench modules import each other through the package (``from bench.common import csvio``): a bare
  ``import csvio`` only works when that folder itself is on ``sys.path``;
- no import cycle among bench modules, counting function-level imports too;
- every ``python -m bench.X`` and ``bench/X.py`` / ``bench/X.sh`` named in bench's code, READMEs and scripts, the
  project README and the CI script exists.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
MAX_MODULES = 15


def _code_files(pattern: str) -> list[Path]:
    return sorted(p for p in BENCH.rglob(pattern) if RESULTS not in p.parents and "__pycache__" not in p.parts)


PY = _code_files("*.py")
FOLDERS = sorted({BENCH, *(p.parent for p in PY), *(p.parent for p in _code_files("*.sh"))})


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in PY}
LEAVES = {name.rpartition(".")[2] for name in MODULES} - {"__init__", "bench", "conftest"}


def _imports(path: Path) -> set[str]:
    """The bench modules ``path`` imports, anywhere in the file (``from bench.x import y`` names module
    ``bench.x.y`` where that is a module, else ``bench.x``)."""
    me = _module(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in MODULES}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                out.add(full if full in MODULES else base)
    return {m for m in out if m in MODULES and m != me}


def _graph() -> dict[str, set[str]]:
    return {name: _imports(path) for name, path in MODULES.items()}


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_bench_folder_is_a_package_with_a_readme_and_at_most_15_modules(folder):
    assert (folder / "README.md").is_file(), f"{folder.relative_to(ROOT)} has no README.md (what is in it, how to run it)"
    assert (folder / "__init__.py").is_file(), f"{folder.relative_to(ROOT)} is not a package: python -m cannot run it"
    modules = sorted(p.name for p in folder.iterdir() if p.suffix in (".py", ".sh") and p.name != "__init__.py")
    assert len(modules) <= MAX_MODULES, f"{folder.relative_to(ROOT)} holds {len(modules)} modules: sort them into folders"


def test_bench_has_its_folders():
    """The layout itself: a change that flattens bench/ again fails here, not only in the counts above."""
    names = {p.name for p in FOLDERS if p != BENCH}
    assert {"ab", "analysis", "common", "device", "perf", "probes", "suites", "train"} <= names, names


@pytest.mark.parametrize("path", PY, ids=lambda p: str(p.relative_to(BENCH)))
def test_bench_modules_import_each_other_through_the_package(path):
    bare = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            bare += [a.name for a in node.names if a.name.split(".")[0] in LEAVES]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in LEAVES:
            bare.append(node.module)
    assert not bare, f"{path.name} imports bench module(s) {bare} bare; use `from bench.<folder> import X`"


def test_no_import_cycle_among_bench_modules():
    cycle = _find_cycle(_graph())
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


def test_the_cycle_check_finds_a_cycle():
    """The check can fail: a back edge from the sweep's case to the sweep (a cycle the sweep once had) is found,
    and the graph sees function-level imports (the suites import the sweep inside a function)."""
    graph = _graph()
    assert "bench.perf.bench_sel_triton" in graph["bench.suites.test_bench_sel"]
    assert "bench.perf.sel_case" in graph["bench.perf.bench_sel_triton"]
    graph["bench.perf.sel_case"] = graph["bench.perf.sel_case"] | {"bench.perf.bench_sel_triton"}
    cycle = _find_cycle(graph)
    assert cycle is not None and {"bench.perf.sel_case", "bench.perf.bench_sel_triton"} <= set(cycle)


@pytest.mark.parametrize("name", sorted(MODULES), ids=str)
def test_every_bench_module_imports(name):
    """What ``python -m`` runs first; a module that needs an optional tool it lacks here skips itself."""
    try:
        importlib.import_module(name)
    except pytest.skip.Exception as exc:
        pytest.skip(str(exc))


# Where bench's scripts are named: its own code, READMEs and scripts, the project README, CI.
NAMING = [*PY, *_code_files("*.sh"), *_code_files("*.md"), ROOT / "README.md", ROOT / ".ci" / "run",
          *sorted((ROOT / "tests" / "benchmarks").rglob("*.py"))]


def _placeholder(name: str) -> bool:
    """``bench.X``, ``bench/FOLDER/X.py``: a pattern, not a script."""
    return any(part.isupper() for part in re.split(r"[./]", name))


def test_every_named_bench_script_exists():
    missing = []
    for path in NAMING:
        text = path.read_text()
        for mod in re.findall(r"python3? -m (bench(?:\.\w+)+)", text):
            if mod not in MODULES and not _placeholder(mod):
                missing.append(f"{path.relative_to(ROOT)}: python -m {mod}")
        for ref in re.findall(r"\bbench/[\w/]+\.(?:py|sh)\b", text):
            if not (ROOT / ref).is_file() and not _placeholder(ref.rpartition(".")[0]):
                missing.append(f"{path.relative_to(ROOT)}: {ref}")
    assert not missing, missing


def test_the_script_check_tells_a_placeholder_from_a_stale_name():
    assert _placeholder("bench.X") and _placeholder("bench/FOLDER/X") and not _placeholder("bench.train_nsa")


def test_bench_extra_has_the_histogram_backend():
    """``--benchmark-histogram`` needs pygal, which only pytest-benchmark's ``histogram`` extra brings."""
    text = (ROOT / "pyproject.toml").read_text()
    assert '"pytest-benchmark[histogram]' in text


def test_the_tests_run_every_benchmark_suite_dry():
    """tests/benchmarks/test_bench_dry_run.py (part of the README's test command, which CI runs) names every suite."""
    text = (ROOT / "tests" / "benchmarks" / "test_bench_dry_run.py").read_text()
    suites = sorted(p.relative_to(ROOT).as_posix() for p in BENCH.glob("*/test_*.py"))
    assert "NSA_BENCH_DRYRUN" in text and "bench/suites/test_bench_sel.py" in suites
    assert [s for s in suites if f'"{s}"' not in text] == [], "a suite the tests' dry run does not run"
