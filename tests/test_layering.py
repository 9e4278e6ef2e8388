"""The two wings: the library never imports the toolkit; the toolkit loads without torch/triton;
no import cycle; no folder of the package holds more than 15 modules."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import nsa_triton_sel

PKG = Path(nsa_triton_sel.__file__).parent
SRC = PKG.parent
ROOT = SRC.parent
TOOLKIT = "nsa_triton_sel.compat"
MAX_MODULES = 15  # per folder: past that a folder wants packages of its own, one per responsibility


def _name(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


MODULES = {_name(p): p for p in sorted(PKG.rglob("*.py"))}
LIBRARY = sorted(m for m in MODULES if not m.startswith(TOOLKIT))
TOOLKIT_MODULES = sorted(m for m in MODULES if m.startswith(TOOLKIT))


def _imports(module: str, *, top_level_only: bool) -> set[str]:
    """Absolute names of the package's modules that ``module`` imports (relative imports resolved)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    nodes = tree.body if top_level_only else ast.walk(tree)
    out = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES}
    return {m for m in out if m in MODULES or m.startswith("nsa_triton_sel")}


@pytest.mark.parametrize("module", LIBRARY)
def test_library_source_never_imports_the_toolkit(module):
    bad = sorted(m for m in _imports(module, top_level_only=False) if m.startswith(TOOLKIT))
    assert not bad, f"{module} imports {bad}: the library must never import the toolkit"


def test_importing_the_library_loads_no_toolkit_module():
    code = ("import importlib, json, sys\n"
            f"for m in {LIBRARY!r}:\n    importlib.import_module(m)\n"
            f"print(json.dumps(sorted(m for m in sys.modules if m.startswith({TOOLKIT!r}))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PATH": "", "TRITON_INTERPRET": "1", "PYTHONPATH": str(SRC)}).stdout
    assert json.loads(out.strip().splitlines()[-1]) == []


def test_toolkit_modules_load_with_only_the_standard_library_and_packaging():
    """What the noxfile needs before any lane exists: torch, triton, numpy, rich, nox, filelock are absent."""
    allowed_heavy = {"nsa_triton_sel.compat.canaries.kernels",  # compiled by the children only (imports triton)
                     "nsa_triton_sel.compat.canaries.gpu_kernels"}  # run by the GPU canary children only
    mods = [m for m in TOOLKIT_MODULES if m not in allowed_heavy]
    code = ("import importlib, sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] in {'torch', 'triton', 'numpy', 'rich', 'nox', 'filelock'}:\n"
            "            raise ImportError('blocked: ' + name)\n"
            "sys.meta_path.insert(0, Block())\n"
            f"for m in {mods!r}:\n    importlib.import_module(m)\n"
            "print('ok')")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": str(SRC)})
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]


def _graph() -> dict[str, set[str]]:
    return {m: _imports(m, top_level_only=False) - {m} for m in MODULES}


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}

    def visit(m, stack):
        state[m] = 1
        for dep in sorted(graph.get(m, ())):
            if dep not in MODULES:
                continue
            if MODULES[dep].name == "__init__.py" and m.startswith(dep + "."):
                continue  # a submodule naming its own package (loaded first anyway) is not a cycle
            if state.get(dep) == 1:
                return stack + [m, dep]
            if dep not in state:
                found = visit(dep, stack + [m])
                if found:
                    return found
        state[m] = 2
        return None

    for m in MODULES:
        if m not in state:
            found = visit(m, [])
            if found:
                return found
    return None


def test_no_import_cycle():
    """No cycle, counting function-level imports too (a deferred import is still a dependency)."""
    cycle = _find_cycle(_graph())
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


def test_the_cycle_check_walks_function_level_imports():
    """The check can fail: a back edge made only by a function-level import (api imports op at the top;
    op importing api inside a function) is found as a cycle."""
    graph = _graph()
    assert _find_cycle(graph) is None
    graph["nsa_triton_sel.op"] = graph["nsa_triton_sel.op"] | {"nsa_triton_sel.api"}
    cycle = _find_cycle(graph)
    assert cycle is not None and "nsa_triton_sel.api" in cycle and "nsa_triton_sel.op" in cycle
    top = {m: _imports(m, top_level_only=True) - {m} for m in MODULES}
    assert "nsa_triton_sel.op" in top["nsa_triton_sel.api"]


FOLDERS = sorted({p.parent for p in SRC.rglob("*.py") if "__pycache__" not in p.parts})


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_folder_holds_more_than_15_modules(folder):
    """A folder of src/ holds at most :data:`MAX_MODULES` modules (``__init__.py`` counted): a longer flat list
    is split into packages by what each part does, never by a line count."""
    modules = sorted(p.name for p in folder.glob("*.py"))
    assert len(modules) <= MAX_MODULES, (f"{folder.relative_to(ROOT)} holds {len(modules)} modules "
                                         f"(at most {MAX_MODULES}): {', '.join(modules)}")
