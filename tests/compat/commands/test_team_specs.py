"""A team's own kernels through the matrix's compile lanes: ``nox -s compile-X -- --specs M --results DIR``, the
verdict table (``nsa-sel matrix``) and ``nsa-sel check-upgrade VERSION --specs M``, kept apart from this project's
ledger.

The kernels are those of capture_kernels.py (lowercase ``*_ptr`` arguments and ``cu_seqlens``, an autotuned kernel,
the one-element tuple of pointers Triton 3.9 rejects) plus a block-pointer kernel (removed in 3.9: the static check
says so from the source).  The lane bodies run for real, compiling with this environment's Triton and, where this
checkout has it, the compile-3.0 lane's venv (``nox -s compile-3.0`` makes it); nox only installs, and is not run.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import ledger_factory as F
from nsa_triton_sel.compat.core import lane_table, project
from nsa_triton_sel.compat import ledger
from nsa_triton_sel.compat.commands import team_matrix, upgrade
from nsa_triton_sel.compat.lanes import nox_sessions

HERE = Path(__file__).resolve().parent
ROOT = project.project_root()
TABLE = lane_table.load_table(ROOT / "constraints" / "lanes.toml")
OLD_VENV = ROOT / ".nox" / "compile-3-0" / "bin" / "python"
pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")

BLOCK_KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def block_copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    src = tl.make_block_ptr(x_ptr, shape=(n,), strides=(1,), offsets=(0,), block_shape=(BLOCK,), order=(0,))
    dst = tl.make_block_ptr(y_ptr, shape=(n,), strides=(1,), offsets=(0,), block_shape=(BLOCK,), order=(0,))
    tl.store(dst, tl.load(src, boundary_check=(0,)), boundary_check=(0,))
'''


def write_team(where: Path) -> Path:
    """A team's directory: its block-pointer kernel and ``team_specs.py`` (the module's name is what --specs gives)."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "block_kernels.py").write_text(BLOCK_KERNEL)
    k = f"{HERE.parent / 'registry' / 'capture_kernels.py'}"
    (where / "team_specs.py").write_text(textwrap.dedent(f"""\
        from nsa_triton_sel.compat.registry.compile_spec import CompileSpec

        SPECS = [
            CompileSpec(name="add_one/01", kernel="{k}:add_one", dtype="fp32", constexprs={{"BLOCK": 32}}, num_warps=1),
            CompileSpec(name="scale_rows/01", kernel="{k}:scale_rows", dtype="fp32", constexprs={{"BLOCK": 64}}),
            CompileSpec(name="tuple_store/01", kernel="{k}:tuple_store", dtype="fp32", constexprs={{"BLOCK": 64}}),
            CompileSpec(name="block_copy/01", kernel="{where / 'block_kernels.py'}:block_copy", dtype="fp32",
                        constexprs={{"BLOCK": 64}}),
        ]
        """))
    return where


class LaneFailed(Exception):
    pass


class LaneSession:
    """What a lane body uses of a nox session, its commands run for real with ``python`` (an environment that is
    already the lane's, as under ``nox --no-venv``: nothing is installed)."""

    def __init__(self, name, posargs, invoked_from, cache, python=sys.executable):
        self.name, self.posargs, self.env, self.venv_backend = name, list(posargs), {}, "none"
        self.python, self.cache_dir, self.invoked_from = None, cache, str(invoked_from)
        self.virtualenv = None
        self.logs, self._python = [], python

    def run(self, *args, env=None, silent=False, log=True, success_codes=None):
        cmd = [self._python if args[0] == "python" else args[0], *args[1:]]
        res = subprocess.run(cmd, env={**os.environ, **self.env, **(env or {})}, capture_output=True, text=True,
                             timeout=600)
        self.logs.append(res.stdout[-4000:] + res.stderr[-4000:])
        return res.stdout

    def log(self, msg):
        self.logs.append(msg)

    warn = log

    def error(self, msg):
        raise LaneFailed(msg)

    skip = error


def run_lane(name: str, version: str, posargs, invoked_from: Path, cache: Path, python=sys.executable):
    kind = name.partition("-")[0]
    session = LaneSession(name, posargs, invoked_from, cache, python)
    matrix = nox_sessions.Matrix(table=TABLE, root=ROOT, gpu=False)
    try:
        nox_sessions.run_lane(session, TABLE.for_version(version), kind, matrix)
    except LaneFailed as exc:
        return session, str(exc)
    return session, None


def _digest(*paths: Path) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in paths)).hexdigest()


LEDGER_FILES = [ROOT / "constraints" / n for n in ("ledger.jsonl", "MATRIX.md", "known-good.txt")]


def _local_release():
    found = TABLE.for_version(importlib.metadata.version("triton"))
    return found.triton if found else None


@pytest.fixture(scope="module")
def team_run(tmp_path_factory):
    """The compile lanes of this environment's release and, where its venv is here, of 3.0.0 over the team's module
    (named by its module name, from the team's directory): (team dir, results dir, releases run, the lanes' logs)."""
    local = _local_release()
    if local is None:
        pytest.skip(f"the installed triton {importlib.metadata.version('triton')} is not a release of lanes.toml")
    base = tmp_path_factory.mktemp("team")
    where, results = write_team(base / "work"), base / "work" / "out"
    before = _digest(*LEDGER_FILES)
    runs = {local: sys.executable}
    if OLD_VENV.exists() and local != "3.0.0":
        runs["3.0.0"] = str(OLD_VENV)
    logs = {}
    for version, python in runs.items():
        name = f"compile-{TABLE.for_version(version).name}"
        session, problem = run_lane(name, version, ["--specs", "team_specs", "--results", "out", "--archs", "90"],
                                    where, base / "cache", python)
        logs[version] = (problem, "\n".join(session.logs))
    assert _digest(*LEDGER_FILES) == before
    return where, results, sorted(runs), logs


def test_the_lanes_compile_the_teams_module_and_keep_its_records_apart(team_run):
    where, results, releases, logs = team_run
    for version in releases:
        problem, log = logs[version]
        doc = json.loads((results / f"compile-{TABLE.for_version(version).name}.json").read_text())
        assert doc["status"] == "complete", log[-3000:]
        recs = doc["records"]
        assert {r[ledger.SPECS_FIELD] for r in recs} == {"team_specs:SPECS"}
        assert {r["triton_imported"] for r in recs if r["check"] == "compile"} == {version}
        assert sorted(r["kernel"] for r in recs if r["check"] == "compile") == [
            "add_one/01", "block_copy/01", "scale_rows/01", "tuple_store/01"]
        assert "nsa-sel matrix --results" in log and "nox -s pin" not in log  # the summary's next step is the table
        assert not any(r["check"] == "compile-canary" for r in recs)
        assert (problem is None) == (version == "3.0.0"), (version, problem)
    assert not (ROOT / "out" / "lanes" / "team_specs").exists()


def test_the_verdict_table_has_matrix_cells_messages_spills_and_static_findings(team_run, tmp_path, capsys):
    where, results, releases, _ = team_run
    out = tmp_path / "table.md"
    assert team_matrix.main(["--results", str(results), "--output", str(out),
                             "--constraints", str(ROOT / "constraints")]) == 1  # a kernel fails on a release run
    text = capsys.readouterr().out
    assert out.read_text() == text
    assert "| Triton | lane | torch | compile | static | add_one | scale_rows | tuple_store | block_copy | spills |" in text
    if "3.9.0" in releases:
        assert ("| 3.9.0 | 3.9 | 2.15.0 | **FAIL** 1/4 | **FAIL** 1/4 | pass 1/1 | pass 1/1 | **FAIL** 1/1 | "
                "unsupported 1/1 | none |") in text
        assert "- **3.9.0**: fail: `tuple_store/01` [sm_90]: AttributeError: 'tuple_type' object has no attribute" in text
        assert ("- **3.9.0**: unsupported: `block_copy/01` [sm_90]: NotImplementedError: Block pointers have been "
                "removed") in text
        assert "block_kernels.py:block_copy`: needs triton <3.9: line 8: triton.language.make_block_ptr (<3.9)" in text
        assert "**outside it: 3.9.0**" in text
    if "3.0.0" in releases:
        assert "| 3.0.0 | 3.0 | 2.4.1 | pass 4/4 | pass 4/4 | pass 1/1 | pass 1/1 | pass 1/1 | pass 1/1 | none |" in text
        assert "- compile-3.0 (3.0.0): triton imported 3.0.0" in text


def test_pin_never_takes_a_teams_records(team_run, tmp_path, capsys):
    """A copy of this project's constraints: were the refusal gone, the pin would write there, not into the real one."""
    _, results, _, _ = team_run
    cdir = tmp_path / "constraints"
    shutil.copytree(ROOT / "constraints", cdir)
    before = _digest(*(cdir / p.name for p in LEDGER_FILES))
    assert ledger.main(["--constraints", str(cdir), "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--specs team_specs:SPECS" in err and "never enter the ledger" in err
    assert _digest(*(cdir / p.name for p in LEDGER_FILES)) == before


def test_check_upgrade_judges_the_teams_kernels_against_a_baseline(team_run, monkeypatch, capsys):
    where, results, releases, _ = team_run
    if "3.9.0" not in releases:
        pytest.skip("needs the 3.9.0 lane's run")
    monkeypatch.chdir(where)
    ran = []

    def fake_run(version, out, root, gpu, team=None):  # the plan: both compile lanes over the module, into `out`
        ran.append((version, team.sessions, team.nox_posargs(out)))
        for p in results.glob("*.json"):
            shutil.copy(p, out / p.name)
        return 0

    monkeypatch.setattr(upgrade, "run_candidate", fake_run)
    args = ["3.9.0", "--specs", "team_specs", "--baseline", "3.0.0", "--constraints", str(ROOT / "constraints")]
    assert upgrade.main(args) == 1
    out = capsys.readouterr().out
    assert ran == [("3.9.0", ("compile-3.0", "compile-3.9"), ["--specs", "team_specs:SPECS", "--results", ran[0][2][3]])]
    assert "--specs team_specs:SPECS: 4 spec(s) of 4 kernel(s) from the module" in out
    assert "| 3.9.0 | 3.9 |" in out and "check-upgrade: triton 3.9.0 vs baseline 3.0.0: BLOCKED" in out
    if "3.0.0" in releases:
        assert "regression in compile: `tuple_store/01` [sm_90] passed on the baseline, fail now" in out
        assert "block_kernels.py:block_copy` passed on the baseline, fail now: needs triton <3.9: line 8" in out
        assert "lost: `block_copy/01` [sm_90] compiled on the baseline, unsupported now: NotImplementedError" in out
    else:  # no baseline record: the candidate's own failures block
        assert "compile-static: fail: `" in out and "needs triton <3.9" in out
    assert "known-good" not in out and "no benchmark ran" not in out


def test_check_upgrade_from_results_and_a_release_with_no_lane_below(team_run, monkeypatch, capsys):
    where, results, releases, _ = team_run
    if "3.0.0" not in releases:
        pytest.skip(f"needs the 3.0.0 lane's venv ({OLD_VENV}: nox -s compile-3.0 makes it)")
    monkeypatch.chdir(where)
    monkeypatch.setattr(upgrade, "run_candidate", lambda *a, **k: pytest.fail("--from-results runs no lane"))
    c = ["--constraints", str(ROOT / "constraints")]
    assert upgrade.main(["3.0.0", "--specs", "team_specs.py", "--from-results", str(results), *c]) == 2  # another ref
    assert "runs of --specs team_specs:SPECS, not of" in capsys.readouterr().err
    assert upgrade.main(["3.0.0", "--specs", "team_specs", "--from-results", str(results), *c]) == 0
    out = capsys.readouterr().out
    assert "check-upgrade: triton 3.0.0 (no baseline): SAFE" in out
    assert "no release of lanes.toml below 3.0.0: judged on its own" in out
    assert upgrade.main(["3.9.0", "--specs", "team_specs", "--from-results", str(results), *c]) == 1  # baseline 3.8
    assert "no record of the baseline 3.8.0: regressions cannot be named" in capsys.readouterr().out
