"""The kernel library installs with torch and Triton alone: the toolkit's dependencies are
the ``matrix`` extra, and importing the library never needs them.  The metadata a user sees on the
index is complete (license file, classifiers, URLs, ``py.typed``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from nsa_triton_sel import _toml

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PROJECT = _toml.loads((ROOT / "pyproject.toml").read_text())["project"]
# Library core: torch and triton; packaging for version compares; tomli reads TOML on Python 3.10.
CORE = {"torch", "triton", "packaging", "tomli"}
TOOLKIT_ONLY = {"rich", "filelock", "nox", "uv"}


def _name(req: str) -> str:
    return re.match(r"[A-Za-z0-9._-]+", req).group(0).lower()


def test_core_dependencies_are_torch_triton_and_the_version_parser_only():
    assert {_name(d) for d in PROJECT["dependencies"]} == CORE


def test_the_torch_range_is_what_the_lanes_table_runs():
    """pyproject's torch range starts at the oldest lane's paired torch and ends before the minor after the
    newest lane's: a lane for a newer torch (check-upgrade --admit) widens it here too."""
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    from nsa_triton_sel.compat.core import lane_table

    table = lane_table.load_table()  # lanes sorted by Triton version; a lane installs (and its records ran) its first torch
    oldest, newest = Version(table.lanes[0].torch[0]), Version(table.newest().torch[0])
    (torch,) = [Requirement(d) for d in PROJECT["dependencies"] if _name(d) == "torch"]
    assert torch.specifier == SpecifierSet(f">={oldest},<{newest.major}.{newest.minor + 1}"), (
        f"pyproject.toml says {torch}; lanes.toml runs torch {oldest} ... {newest}")


def test_toolkit_dependencies_are_the_matrix_extra():
    assert TOOLKIT_ONLY <= {_name(d) for d in PROJECT["optional-dependencies"]["matrix"]}


def test_importing_and_running_the_library_needs_no_toolkit_or_test_dependency():
    """A fresh process where every toolkit/test/bench dependency is unimportable imports the public API,
    every library module, and runs one small call on the reference path."""
    blocked = TOOLKIT_ONLY | {"pytest", "matplotlib", "pytest_benchmark", "nsa_triton_sel.compat"}
    # A finder that claims the blocked names and fails when one is imported: a probe that only
    # looks for a module (torch does, for optional packages) still works, an import does not.
    code = (
        "import sys, importlib.machinery\n"
        "class Block:\n"
        f"    names = {sorted(blocked)!r}\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if any(name == b or name.startswith(b + '.') for b in self.names):\n"
        "            return importlib.machinery.ModuleSpec(name, self)\n"
        "    def create_module(self, spec):\n"
        "        raise ModuleNotFoundError(f'No module named {spec.name!r} (absent for this test)')\n"
        "    def exec_module(self, module):\n"
        "        pass\n"
        "sys.meta_path.insert(0, Block())\n"
        "import torch, nsa_triton_sel\n"
        "from nsa_triton_sel import selection_attention, block_indices_to_ranges\n"
        "import nsa_triton_sel.api, nsa_triton_sel.op, nsa_triton_sel.known_bad, nsa_triton_sel.config\n"
        "import nsa_triton_sel.kernels.launch, nsa_triton_sel.kernels.direct, nsa_triton_sel.kernels.readers\n"
        "q = torch.randn(1, 2, 1, 2, 16); k = torch.randn(1, 1, 8, 16); v = torch.randn(1, 1, 8, 16)\n"
        "r = torch.tensor([[0, 4], [2, 8]]).view(1, 2, 1, 1, 2)\n"
        "print(tuple(selection_attention(q, k, v, r, backend='reference').shape))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(SRC), "PATH": "", "OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().splitlines()[-1] == "(1, 2, 1, 2, 16)"


def test_license_file_classifiers_urls_and_py_typed():
    assert "Apache License" in (ROOT / "LICENSE").read_text() and "Version 2.0" in (ROOT / "LICENSE").read_text()
    assert PROJECT["license"] == {"text": "Apache-2.0"}
    assert "License :: OSI Approved :: Apache Software License" in PROJECT["classifiers"]
    assert "Typing :: Typed" in PROJECT["classifiers"]
    assert {"Homepage", "Source", "Issues"} <= set(PROJECT["urls"])
    assert (SRC / "nsa_triton_sel" / "py.typed").exists()
    data = _toml.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "py.typed" in data["nsa_triton_sel"]


def test_known_good_header_says_how_to_install_from_the_checkout():
    """The package is not on the index: the header must not tell people to install it from there."""
    header = [ln for ln in (ROOT / "constraints" / "known-good.txt").read_text().splitlines() if ln.startswith("#")]
    text = "\n".join(header)
    assert "nsa-triton-sel\n" not in text + "\n" and "-c constraints/known-good.txt ." in text


def test_lane_constraints_files_say_how_to_install_beside_a_pinned_pair():
    for path in sorted((ROOT / "constraints").glob("triton-*.txt")):
        use = [ln for ln in path.read_text().splitlines() if ln.startswith("# Use")]
        assert use and use[0].endswith(f"pip install -c constraints/{path.name} ."), path.name


def test_the_docs_variant_count_is_the_registrys():
    from nsa_triton_sel.compat.registry.specs import SPECS

    docs = (ROOT / "docs" / "matrix.md").read_text()  # the compile smoke's section
    counts = re.findall(r"(\d+) variants\)", docs)
    assert counts == [str(len(SPECS))], f"docs/matrix.md says {counts} variants; the registry has {len(SPECS)}"


def test_readme_commands_do_not_share_a_venv():
    """Both README commands created .venv: the second silently reused the first's environment."""
    readme = (ROOT / "README.md").read_text()
    venvs = re.findall(r"python3 -m venv (\S+) &&", readme)
    assert len(venvs) >= 2 and len(set(venvs)) == len(venvs), venvs
