"""The two wings: the library never imports the toolkit; the toolkit loads without torch/triton; each
package of the toolkit imports only the sibling packages it declares; no import cycle; no folder of the
package (or of tests/) holds more than 15 modules."""

from __future__ import annotations

import ast
import json
import re
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
# The toolkit's packages, one per stage, and the sibling packages each may import (function-level imports
# included): a stage imports only stages below it.  Each package's __init__ states the same in its
# "May import:" line.  A package not listed here (or a module at the top of compat/) is an error.
PACKAGE_IMPORTS = {
    "core": set(),  # what every stage shares: project files, lanes table, machine, verdicts, env, command line
    "registry": {"core"},  # what the compile smoke compiles: the spec format, the registry, capture
    "canaries": {"core", "registry"},  # kernels the harness must classify; GPU miscompile canaries
    "smoke": {"core", "registry", "canaries"},  # nsa-sel smoke: one compile per spec and arch, in children
    "ledger": {"core", "canaries"},  # records, the ledger file, MATRIX.md, known-good.txt, nsa-sel pin
    "lanes": {"core", "registry", "canaries", "smoke", "ledger"},  # one Triton release per environment: nox and GPU lanes
    "commands": {"core", "smoke", "ledger", "lanes"},  # the nsa-sel router and the commands on top
}


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


def _package(module: str) -> str | None:
    """The toolkit package a toolkit module belongs to (``nsa_triton_sel.compat.ledger.cells`` -> ``ledger``)."""
    parts = module.split(".")
    return parts[2] if module.startswith(TOOLKIT + ".") else None


def _undeclared_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(module, imported toolkit module) for every import a toolkit module's package does not declare."""
    out = []
    for module in TOOLKIT_MODULES:
        mine = _package(module)
        allowed = PACKAGE_IMPORTS.get(mine, set()) | {mine}
        out += [(module, dep) for dep in sorted(graph.get(module, ()))
                if dep.startswith(TOOLKIT) and dep != TOOLKIT and _package(dep) not in allowed]
    return out


def test_the_toolkit_is_made_of_the_declared_packages():
    """compat/ holds its __init__ and the packages of PACKAGE_IMPORTS, nothing else: a new module goes into
    the package whose stage it belongs to, a new package is declared with what it may import."""
    found = {_package(m) for m in TOOLKIT_MODULES if m != TOOLKIT}
    assert found == set(PACKAGE_IMPORTS), f"undeclared: {sorted(found - set(PACKAGE_IMPORTS))}; " \
                                          f"declared but missing: {sorted(set(PACKAGE_IMPORTS) - found)}"
    for package in PACKAGE_IMPORTS:
        assert f"{TOOLKIT}.{package}" in MODULES, f"compat/{package} is not a package (no __init__.py)"


def test_each_toolkit_package_imports_only_the_siblings_it_declares():
    bad = _undeclared_imports(_graph())
    assert not bad, "imports outside the declared packages (PACKAGE_IMPORTS): " + "; ".join(
        f"{m} ({_package(m)}) imports {d} ({_package(d)})" for m, d in bad)
    top = sorted(m for m in _imports(TOOLKIT, top_level_only=False) if m.startswith(TOOLKIT + "."))
    assert not top, f"compat/__init__.py imports {top}: importing the toolkit must load nothing of it"


def test_the_package_rule_can_fail():
    """An import a package does not declare is found, at function level too (core importing the ledger
    inside a function, as a lazy import would)."""
    graph = _graph()
    env = f"{TOOLKIT}.core.env"
    graph[env] = graph[env] | {f"{TOOLKIT}.ledger.store"}
    assert (env, f"{TOOLKIT}.ledger.store") in _undeclared_imports(graph)


@pytest.mark.parametrize("package", sorted(PACKAGE_IMPORTS))
def test_each_package_states_what_it_may_import(package):
    """The package's docstring says, in a ``May import: a, b.`` line, what PACKAGE_IMPORTS allows it."""
    doc = ast.get_docstring(ast.parse(MODULES[f"{TOOLKIT}.{package}"].read_text())) or ""
    found = re.search(r"May import: ([a-z, ]+)\.", doc)
    assert found, f"compat/{package}/__init__.py: its docstring lacks a 'May import: ...' line"
    stated = set() if found.group(1).strip() == "nothing" else {s.strip() for s in found.group(1).split(",")}
    assert stated == PACKAGE_IMPORTS[package]


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


TESTS = Path(__file__).resolve().parent


def test_no_test_folder_holds_more_than_15_test_modules():
    """The same rule for tests/: a folder holds at most :data:`MAX_MODULES` modules besides ``conftest.py`` and
    ``__init__.py`` (tests and their helpers), grouped by what they test (tests/library/kernels/ beside
    src/nsa_triton_sel/kernels/, tests/compat/ledger/ beside compat/ledger/)."""
    crowded = []
    for folder in sorted({p.parent for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts}):
        modules = sorted(p.name for p in folder.glob("*.py") if p.name not in ("conftest.py", "__init__.py"))
        if len(modules) > MAX_MODULES:
            crowded.append(f"{folder.relative_to(TESTS.parent)} holds {len(modules)}: {', '.join(modules)}")
    assert not crowded, f"more than {MAX_MODULES} modules in a test folder: " + "; ".join(crowded)
