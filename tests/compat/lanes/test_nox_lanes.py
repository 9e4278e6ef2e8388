"""The noxfile's sessions and their bodies (compat/lanes/nox_sessions.py), driven with a fake nox session."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ledger_factory as F
from fake_nox import FakeSession, SessionError, SessionSkip
from nsa_triton_sel.compat.lanes import checks, nox_sessions
from nsa_triton_sel.compat.core import lane_table, machine, project

ROOT = project.project_root()


def _fingerprint(triton="3.1.0", numpy="1.26.4"):
    fp = {"python": "3.11.7", "torch": "2.13.0+cpu", "imported": {"triton": triton, "numpy": numpy,
          "torch": "2.13.0+cpu"}, "origins": {"triton": "/lane/triton", "numpy": "/lane/numpy", "torch": "/shared/torch"}}
    return lambda args, env: "NSA_SEL_FP " + json.dumps(fp)


def _matrix():
    return nox_sessions.Matrix(table=F.TABLE, root=ROOT, gpu=False)


def _smoke(children_triton):
    """The smoke harness's outputs: a report whose children imported ``children_triton``, exit status 4."""
    def handler(args, env):
        report = Path(args[args.index("--json") + 1])
        results = [{"spec": "s", "kernel": "k", "arch": 80, "verdict": "ok", "canary": False,
                    "imported": {"triton": children_triton, "numpy": None, "torch": None}}]
        report.write_text(json.dumps({"results": results, "imported_tritons": [children_triton]}))
        Path(args[3]).write_text("4" if children_triton != "3.1.0" else "0")
    return handler


def _run_file(tmp_path, name):
    return json.loads((tmp_path / "results" / f"{name}.json").read_text())


def test_a_lane_whose_compile_children_imported_another_triton_fails_loudly(tmp_path):
    s = FakeSession("compile-3.1", tmp_path, {nox_sessions.FINGERPRINT: _fingerprint(), "smoke": _smoke("3.9.0")},
                    posargs=["--results", str(tmp_path / "results")])
    with pytest.raises(SessionError, match="lane 3.1 is not isolated: 1 record.* imported triton 3.9.0 instead of 3.1.0"):
        nox_sessions.run_lane(s, F.release("3.1"), "compile", _matrix())
    doc = _run_file(tmp_path, "compile-3.1")
    assert doc["status"] == "complete" and doc["records"][0]["verdict"] == "error"
    assert "imported triton 3.9.0, not the lane's 3.1.0" in doc["records"][0]["message"]
    assert any("its processes imported triton 3.9.0" in line for line in s.logs)


def test_the_lane_log_names_every_version_its_processes_imported():
    recs = [{"triton_imported": "3.9.0", "process": {"numpy": "2.4.6", "torch": "2.13.0+cpu"}},
            {"triton_imported": "3.9.0", "process": {"numpy": None, "torch": None}}]
    assert nox_sessions.imported_summary(recs) == "triton 3.9.0, numpy 2.4.6, torch 2.13.0+cpu"
    assert nox_sessions.imported_summary([{"triton_imported": None}]) == (
        "triton (not imported), numpy (not imported), torch (not imported)")


def test_an_isolated_compile_lane_records_what_its_children_imported(tmp_path):
    s = FakeSession("compile-3.1", tmp_path, {nox_sessions.FINGERPRINT: _fingerprint(), "smoke": _smoke("3.1.0")},
                    posargs=["--results", str(tmp_path / "results")])
    nox_sessions.run_lane(s, F.release("3.1"), "compile", _matrix())
    rec = _run_file(tmp_path, "compile-3.1")["records"][0]
    assert rec["verdict"] == "pass" and rec["triton_imported"] == "3.1.0" and rec["triton"] == "3.1.0"
    assert any("lane 3.1: triton 3.1.0 (/lane/triton), numpy 1.26.4" in line for line in s.logs)


def test_a_lane_environment_that_imports_another_triton_stops_at_set_up(tmp_path):
    s = FakeSession("compile-3.1", tmp_path, {nox_sessions.FINGERPRINT: _fingerprint(triton="3.9.0")},
                    posargs=["--results", str(tmp_path / "results")])
    with pytest.raises(SessionError, match="lane 3.1 needs triton 3.1.0, the environment imports 3.9.0 from /lane/triton"):
        nox_sessions.run_lane(s, F.release("3.1"), "compile", _matrix())
    doc = _run_file(tmp_path, "compile-3.1")
    assert doc["status"] == "error" and doc["stage"] == "set-up"


def test_a_lane_environment_with_the_wrong_numpy_stops_at_set_up(tmp_path):
    s = FakeSession("parity-3.1", tmp_path, {nox_sessions.FINGERPRINT: _fingerprint(numpy="2.4.6")},
                    posargs=["--results", str(tmp_path / "results")])
    with pytest.raises(SessionError, match="lane 3.1 needs numpy<2 .* imports 2.4.6"):
        nox_sessions.run_lane(s, F.release("3.1"), "parity", _matrix())


def test_pytest_that_imported_a_numpy_outside_the_lane_range_makes_errors(tmp_path):
    def pytest_run(args, env):
        xml = Path(next(a for a in args if a.startswith("--junitxml=")).split("=", 1)[1])
        xml.write_text('<testsuite><testcase classname="t" name="a"/></testsuite>')
        Path(env[checks.IMPORTED_ENV]).write_text(json.dumps(
            {"imported": {"triton": "3.1.0", "numpy": "2.4.6", "torch": "2.13.0+cpu"}}))
        Path(args[3]).write_text("0")

    probe = {"status": "ok", "detail": "fine", "imported": {"triton": "3.1.0", "numpy": "1.26.4", "torch": None}}
    s = FakeSession("parity-3.1", tmp_path, {nox_sessions.FINGERPRINT: _fingerprint(), "pytest": pytest_run,
                                            checks.PROBE: lambda a, e: "NSA_SEL_PROBE " + json.dumps(probe)},
                    posargs=["--results", str(tmp_path / "results")])
    with pytest.raises(SessionError, match="numpy 2.4.6 outside numpy<2"):
        nox_sessions.run_lane(s, F.release("3.1"), "parity", _matrix())
    recs = _run_file(tmp_path, "parity-3.1")["records"]
    assert [r["verdict"] for r in recs] == ["pass", "error"]  # the probe imported numpy 1.26.4: fine


def test_pytest_runs_with_the_plugin_and_xunit1(tmp_path):
    seen = {}

    def pytest_run(args, env):
        seen["args"] = args
        Path(args[3]).write_text("5")

    s = FakeSession("bench-3.1", tmp_path, {"pytest": pytest_run})
    recs, problem = checks.pytest_run(s, F.base("3.1", "bench"), tmp_path, ["bench/"], [], kind="bench")
    assert "nsa_triton_sel.compat.lanes.pytest_plugin" in seen["args"] and "junit_family=xunit1" in seen["args"]
    assert [r["verdict"] for r in recs] == ["skip"] and problem is None


def test_cpu_bench_records_a_skip_without_an_environment(tmp_path):
    s = FakeSession("bench-3.1", tmp_path, {}, posargs=["--results", str(tmp_path / "results")])
    with pytest.raises(SessionSkip, match="needs a CUDA GPU"):
        nox_sessions.run_lane(s, F.release("3.1"), "bench", _matrix())
    rec = _run_file(tmp_path, "bench-3.1")["records"][0]
    assert rec["verdict"] == "skip" and rec["triton_imported"] is None


def test_a_patch_lane_installs_its_release_without_the_lane_constraints(tmp_path):
    table = lane_table.load_table()
    s = FakeSession("compile-3.5.0", tmp_path, {"import sysconfig; print(sysconfig.get_paths()['purelib'])":
                                                lambda a, e: str(tmp_path / "venv-site")}, backend="uv")
    (tmp_path / "venv-site").mkdir()
    opts, _ = nox_sessions.options(s)
    nox_sessions.install_lane(s, table.for_version("3.5.0"), "compile", opts, nox_sessions.Matrix(table, ROOT, False))
    args = s.installs[0]
    assert "triton==3.5.0" in args and "numpy<2.4" in args and "-c" not in args
    pth = (tmp_path / "venv-site" / nox_sessions.SHARED_PTH).read_text().strip()
    shared = sorted(p.name for p in Path(pth).iterdir())
    assert "torch" in shared and not any(n.split(".")[0] in ("triton", "numpy") for n in shared)


def test_lane_install_uses_the_lane_constraints(tmp_path):
    table = lane_table.load_table()
    s = FakeSession("compile-3.5", tmp_path, {"import sysconfig; print(sysconfig.get_paths()['purelib'])":
                                              lambda a, e: str(tmp_path)}, backend="uv")
    opts, _ = nox_sessions.options(s)
    nox_sessions.install_lane(s, table.lane("3.5"), "compile", opts, nox_sessions.Matrix(table, ROOT, False))
    args = s.installs[0]
    assert args[:2] == ("-c", str(ROOT / "constraints" / "triton-3.5.txt")) and "triton==3.5.1" in args


def _nox_sessions(env_extra: dict | None = None) -> dict:
    """The noxfile's registered sessions, loaded in a child (registration is global state)."""
    pytest.importorskip("nox")
    code = ("import json, runpy, nox.registry; runpy.run_path('noxfile.py'); "
            "print(json.dumps({n: {'requires': f.requires, 'tags': f.tags, 'doc': f.__doc__, "
            "'backend': f.venv_backend} for n, f in nox.registry.get().items()}))")
    env = {**os.environ, "NSA_SEL_GPU": "0", **(env_extra or {})}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_noxfile_generates_three_literal_sessions_per_release():
    sessions = _nox_sessions()
    table = lane_table.load_table()
    for rel in table.releases:
        for kind in ("compile", "parity", "bench"):
            s = sessions[f"{kind}-{rel.name}"]
            assert s["tags"] == [kind, f"triton-{rel.label}"] + (["patch"] if rel.patch else [])
            assert (s["requires"] or None) == (None if kind == "compile" else [f"compile-{rel.name}"])
            assert f"triton {rel.triton} " in s["doc"]
    assert {"compile-3.3.0", "parity-3.5.0", "bench-3.7.0"} <= set(sessions)
    assert sessions["bench-3.1"]["backend"] == "none"  # CPU machine: bench only records a skip
    assert {"pin", "constraints", "check-upgrade"} <= set(sessions)


def test_noxfile_adds_candidate_lane_only_when_asked():
    assert not any(n.endswith("-candidate") for n in _nox_sessions())
    sessions = _nox_sessions({"NSA_SEL_CANDIDATE": "3.10.0"})
    assert sessions["parity-candidate"]["requires"] == ["compile-candidate"]
    assert "triton 3.10.0 " in sessions["compile-candidate"]["doc"]


def test_noxfile_is_a_short_declaration():
    assert len((ROOT / "noxfile.py").read_text().splitlines()) < 200


def test_gpu_lanes_are_not_held_to_the_interpreter_numpy_pin():
    """The numpy ranges of lanes.toml are the Triton interpreter's: a GPU lane (compiled kernels) may run
    with any numpy, an interpreter lane may not."""
    from nsa_triton_sel.compat.core import lane_table

    lane = lane_table.Lane(label="3.6", triton="3.6.0", torch=("2.11.0",), python=">=3.10", numpy="<2.4",
                  numpy_reason="the 3.2-3.6 interpreter")
    fp = {"imported": {"triton": "3.6.0", "numpy": "2.5.2", "torch": "2.11.0"}, "origins": {}}
    assert nox_sessions.environment_problem(fp, lane, True, interpreter=False) is None
    assert "needs numpy<2.4" in nox_sessions.environment_problem(fp, lane, True, interpreter=True)
    rec = {"triton": "3.6.0", "triton_imported": "3.6.0", "process": {"numpy": "2.5.2", "torch": "2.11.0"},
           "verdict": "pass", "message": ""}
    out, problem = nox_sessions.isolate([{**rec, "mode": "gpu"}, {**rec, "mode": "aot"}], lane)
    assert problem is None and [r["verdict"] for r in out] == ["pass", "pass"]
    out, problem = nox_sessions.isolate([{**rec, "mode": "interp"}], lane)
    assert out[0]["verdict"] == "error" and "numpy 2.5.2 outside numpy<2.4" in problem


def test_a_lane_ends_with_a_summary_versions_pairing_results_and_next_command(tmp_path, monkeypatch):
    """The end of a lane's log says what ran, with which Triton/torch (off-pair here: a CPU torch), the
    counts per check, the archs its compile covered, where the run file is and what to run next: the
    command for the archs left out, and the pin as a maintainer's step that rewrites tracked files."""
    monkeypatch.setattr(machine, "gpu_archs", lambda: [])
    s = FakeSession("compile-3.1", tmp_path, {nox_sessions.FINGERPRINT: _fingerprint(), "smoke": _smoke("3.1.0")},
                    posargs=["--results", str(tmp_path / "results")])
    nox_sessions.run_lane(s, F.release("3.1"), "compile", _matrix())
    tail = s.logs[-7:]
    assert tail[0].startswith("== compile-3.1: PASSED (")
    assert tail[1] == "ran:      compile (aot), 1 records: compile 1 pass"
    assert tail[2] == "archs:    sm_80 (1 of lanes.toml's 3 archs; not compiled: sm_89, sm_90)"
    assert tail[3].startswith("versions: triton 3.1.0 (lane 3.1), torch 2.13.0+cpu (off-pair: CPU build torch")
    assert tail[4].startswith(f"results:  {tmp_path / 'results' / 'compile-3.1.json'} ")
    assert tail[5].startswith("next:     nox -s compile-3.1 -- --all-archs   (the other 2 archs, about ")
    assert tail[6].startswith(f"ledger:   maintainers only: nox -s pin -- --results {tmp_path / 'results'} ")
    assert "rewrites the tracked constraints/ledger.jsonl" in tail[6] and "pin a full sweep only" in tail[6]


def _smoke_archs(seen):
    """A smoke that compiles one ok variant for every arch it is asked for; ``seen`` gets its arguments."""
    def handler(args, env):
        seen.append(list(args))
        archs = [int(a) for a in args[args.index("--arch") + 1].split(",")]
        results = [{"spec": "s", "kernel": "k", "arch": a, "verdict": "ok", "canary": False,
                    "imported": {"triton": "3.1.0", "numpy": None, "torch": None}} for a in archs]
        Path(args[args.index("--json") + 1]).write_text(json.dumps({"results": results, "imported_tritons": ["3.1.0"]}))
        Path(args[3]).write_text("0")
    return handler


@pytest.mark.parametrize("posargs, env, gpus, want", [
    ([], {}, [], "90"),                                          # no GPU: lanes.NO_GPU_ARCHS
    ([], {}, [(86, "NVIDIA RTX A6000"), (86, "NVIDIA RTX A6000")], "86"),  # this machine's GPUs
    (["--all-archs"], {}, [(90, "NVIDIA H100")], "80,89,90"),   # the table's full sweep, one flag away
    ([], {"NSA_SEL_ARCHS": "all"}, [], "80,89,90"),              # ... or one variable (CI)
    (["--archs", "sm_100,80"], {}, [], "80,100"),
])
def test_the_compile_covers_this_machines_gpu_else_the_default_and_all_archs_on_request(
        tmp_path, monkeypatch, posargs, env, gpus, want):
    monkeypatch.setattr(machine, "gpu_archs", lambda: gpus)
    monkeypatch.delenv("NSA_SEL_ARCHS", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    seen = []
    s = FakeSession("compile-3.1", tmp_path, {nox_sessions.FINGERPRINT: _fingerprint(), "smoke": _smoke_archs(seen)},
                    posargs=["--results", str(tmp_path / "results"), *posargs])
    nox_sessions.run_lane(s, F.release("3.1"), "compile", _matrix())
    assert seen[0][seen[0].index("--arch") + 1] == want
    said = next(line for line in s.logs if line.startswith("compile-3.1: compiling for "))
    assert said.startswith(f"compile-3.1: compiling for {', '.join('sm_' + a for a in want.split(','))} (")
    if want == "80,89,90":
        assert "not compiled here" not in said and not any(line.startswith("next:") for line in s.logs)


def test_a_bad_archs_value_is_one_line_before_anything_is_installed(tmp_path, monkeypatch):
    monkeypatch.setenv("NSA_SEL_ARCHS", "hopper")
    s = FakeSession("compile-3.1", tmp_path, {}, posargs=["--results", str(tmp_path / "results")])
    with pytest.raises(SessionError, match="NSA_SEL_ARCHS: bad arch 'hopper': expected compute capabilities"):
        nox_sessions.run_lane(s, F.release("3.1"), "compile", _matrix())
    assert not s.installs and not (tmp_path / "results").exists()


@pytest.mark.parametrize("jobs, want", [(None, None), ("14", "14")])
def test_compile_jobs_default_to_the_smokes_usable_cores_and_nsa_sel_jobs_overrides(tmp_path, monkeypatch, jobs, want):
    """Without NSA_SEL_JOBS the compile uses every usable core (a fixed min(2, cores) would hold a 16-core box
    to 2); NSA_SEL_JOBS overrides it."""
    from nsa_triton_sel.compat.smoke import run

    monkeypatch.setattr(machine, "gpu_archs", lambda: [])
    if jobs is None:
        monkeypatch.delenv("NSA_SEL_JOBS", raising=False)
    else:
        monkeypatch.setenv("NSA_SEL_JOBS", jobs)
    seen = []
    s = FakeSession("compile-3.1", tmp_path, {nox_sessions.FINGERPRINT: _fingerprint(), "smoke": _smoke_archs(seen)},
                    posargs=["--results", str(tmp_path / "results")])
    nox_sessions.run_lane(s, F.release("3.1"), "compile", _matrix())
    assert (seen[0][seen[0].index("--jobs") + 1] if "--jobs" in seen[0] else None) == want
    monkeypatch.setattr(machine.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert run.default_jobs() == 16 and checks.test_workers() == int(want or 16)  # and the interp workers


def test_a_bad_nsa_sel_jobs_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("NSA_SEL_JOBS", "many")
    s = FakeSession("compile-3.1", tmp_path, {}, posargs=["--results", str(tmp_path / "results")])
    with pytest.raises(SessionError, match="NSA_SEL_JOBS='many': expected a whole number"):
        nox_sessions.run_lane(s, F.release("3.1"), "compile", _matrix())


def _parity_pytest(args, env):
    xml = Path(next(a for a in args if a.startswith("--junitxml=")).split("=", 1)[1])
    xml.write_text('<testsuite><testcase classname="t" name="a"/><testcase classname="t" name="b"/></testsuite>')
    Path(env[checks.IMPORTED_ENV]).write_text(json.dumps(
        {"imported": {"triton": "3.1.0", "numpy": "1.26.4", "torch": "2.13.0+cpu"}}))
    Path(args[3]).write_text("0")


PROBE_OK = {"status": "ok", "detail": "fine", "imported": {"triton": "3.1.0", "numpy": "1.26.4", "torch": None}}


def test_the_main_jobs_last_summary_names_the_archs_its_compile_covered_and_the_command_for_the_rest(
        tmp_path, monkeypatch):
    """The main job's log ends with parity's summary: it reads the compile run beside it.  The flags of one
    nox call reach every session: parity accepts --all-archs and never hands it to pytest."""
    monkeypatch.setattr(machine, "gpu_archs", lambda: [])
    results = tmp_path / "results"
    seen, pytest_args = [], []
    handlers = {nox_sessions.FINGERPRINT: _fingerprint(), "smoke": _smoke_archs(seen),
                "pytest": lambda a, e: pytest_args.append(a) or _parity_pytest(a, e),
                checks.PROBE: lambda a, e: "NSA_SEL_PROBE " + json.dumps(PROBE_OK)}
    for kind in ("compile", "parity"):
        nox_sessions.run_lane(FakeSession(f"{kind}-3.1", tmp_path, handlers, posargs=["--results", str(results)]),
                           F.release("3.1"), kind, _matrix())
    s = FakeSession("parity-3.1", tmp_path, handlers, posargs=["--results", str(results)])
    nox_sessions.run_lane(s, F.release("3.1"), "parity", _matrix())
    assert "archs:    compile-3.1 compiled for sm_90 (1 of lanes.toml's 3 archs; not compiled: sm_80, sm_89)" in s.logs
    assert any(line.startswith("next:     nox -s compile-3.1 -- --all-archs   (the other 2 archs") for line in s.logs)
    for kind in ("compile", "parity"):
        s = FakeSession(f"{kind}-3.1", tmp_path, handlers, posargs=["--results", str(results), "--all-archs"])
        nox_sessions.run_lane(s, F.release("3.1"), kind, _matrix())
    assert "archs:    compile-3.1 compiled for sm_80, sm_89, sm_90 (all 3 archs of lanes.toml)" in s.logs
    assert not any(line.startswith("next:") for line in s.logs)
    assert not any("--all-archs" in a for a in pytest_args[-1])


def test_every_lane_installs_what_its_tests_import():
    """The parity lane had no hypothesis: tests/library/api/test_fuzz.py (an interp test) and test_pin_fuzz were standing
    skips.  Every third-party module that a test file holding interp or gpu tests imports is installed by
    the lane (torch, triton and numpy are the lane's own; the package comes from src/)."""
    import ast

    provided = {"torch", "triton", "numpy", "nsa_triton_sel", "bench", "pytest"}
    installed = {re.match(r"[A-Za-z0-9._-]+", r).group(0).lower().replace("-", "_")
                 for r in nox_sessions.test_tools(ROOT, "parity") + nox_sessions.package_deps(ROOT)}
    local = {p.stem for p in (ROOT / "tests").rglob("*.py")}
    needed = {}
    for path in (ROOT / "tests").rglob("test_*.py"):
        text = path.read_text()
        if "mark.interp" not in text and "mark.gpu" not in text and "pytestmark" not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            elif (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "importorskip"
                  and node.args and isinstance(node.args[0], ast.Constant)):
                continue  # an optional peer (fla, cuDNN): skipped with its reason, by design
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in provided and top not in local:
                    needed.setdefault(top, set()).add(path.name)
    assert "hypothesis" in needed  # the test can fail: it sees test_fuzz.py's import
    missing = {m: files for m, files in needed.items() if m.replace("-", "_") not in installed}
    assert not missing, f"the lanes do not install {missing}"
    assert any(t.startswith("hypothesis>=") for t in nox_sessions.test_tools(ROOT, "parity"))
    assert any(t.startswith("pytest-benchmark") and "[" not in t for t in nox_sessions.test_tools(ROOT, "bench"))


def test_a_failed_lane_summary_names_the_problem(tmp_path):
    s = FakeSession("compile-3.1", tmp_path, {nox_sessions.FINGERPRINT: _fingerprint(), "smoke": _smoke("3.9.0")},
                    posargs=["--results", str(tmp_path / "results")])
    with pytest.raises(SessionError):
        nox_sessions.run_lane(s, F.release("3.1"), "compile", _matrix())
    summary = [line for line in s.logs if line.startswith("== compile-3.1: ")]
    assert summary and summary[0].startswith("== compile-3.1: FAILED: lane 3.1 is not isolated")
    assert any(line.startswith("ran:      compile (aot), 1 records: compile 1 error") for line in s.logs)


def test_the_smoke_in_a_lane_prints_progress_lines(tmp_path):
    """The compile lane asks the smoke for plain progress lines (its output is a log, not a terminal)."""
    seen = []
    smoke = _smoke("3.1.0")
    s = FakeSession("compile-3.1", tmp_path, {nox_sessions.FINGERPRINT: _fingerprint(),
                                              "smoke": lambda args, env: seen.append(args) or smoke(args, env)},
                    posargs=["--results", str(tmp_path / "results")])
    nox_sessions.run_lane(s, F.release("3.1"), "compile", _matrix())
    args = list(seen[0])
    assert args[args.index("--progress") + 1] == "lines" and "--no-progress" not in args


def test_a_parity_lane_reports_one_count_its_records_with_the_probe(tmp_path):
    """The lane log said 'parity 50 pass' and, one line later, its summary 'parity 51 pass' (the probe)."""
    def pytest_run(args, env):
        xml = Path(next(a for a in args if a.startswith("--junitxml=")).split("=", 1)[1])
        xml.write_text('<testsuite><testcase classname="t" name="a"/><testcase classname="t" name="b"/></testsuite>')
        Path(env[checks.IMPORTED_ENV]).write_text(json.dumps(
            {"imported": {"triton": "3.1.0", "numpy": "1.26.4", "torch": "2.13.0+cpu"}}))
        Path(args[3]).write_text("0")

    probe = {"status": "ok", "detail": "fine", "imported": {"triton": "3.1.0", "numpy": "1.26.4", "torch": None}}
    s = FakeSession("parity-3.1", tmp_path, {nox_sessions.FINGERPRINT: _fingerprint(), "pytest": pytest_run,
                                            checks.PROBE: lambda a, e: "NSA_SEL_PROBE " + json.dumps(probe)},
                    posargs=["--results", str(tmp_path / "results")])
    nox_sessions.run_lane(s, F.release("3.1"), "parity", _matrix())
    body = next(line for line in s.logs if line.startswith("parity-3.1 (interpreter): "))
    assert body == "parity-3.1 (interpreter): 2 test records + the interpreter probe: parity 3 pass"
    assert "ran:      parity (interp), 3 records: parity 3 pass" in s.logs


def test_a_cpu_parity_lane_installs_its_paired_torch_and_a_compile_lane_borrows(tmp_path):
    """CPU parity lanes run under the torch their Triton pairs with, not a borrowed CPU torch, so parity is
    checked on the pair users install."""
    table = lane_table.load_table()
    site = {"import sysconfig; print(sysconfig.get_paths()['purelib'])": lambda a, e: str(tmp_path)}
    s = FakeSession("parity-3.0", tmp_path, site, backend="uv")
    opts, _ = nox_sessions.options(s)
    nox_sessions.install_lane(s, table.lane("3.0"), "parity", opts, nox_sessions.Matrix(table, ROOT, False))
    (args,) = s.installs
    assert args[:2] == ("-c", str(ROOT / "constraints" / "triton-3.0.txt"))
    assert "torch==2.4.1" in args and "triton==3.0.0" in args and "numpy<2" in args
    assert not (tmp_path / nox_sessions.SHARED_PTH).exists()  # nothing borrowed
    patch = FakeSession("parity-3.3.0", tmp_path, site, backend="uv")  # a patch release: its own pair
    nox_sessions.install_lane(patch, table.for_version("3.3.0"), "parity", opts, nox_sessions.Matrix(table, ROOT, False))
    assert "torch==2.7.0" in patch.installs[0] and "triton==3.3.0" in patch.installs[0]
    compile_ = FakeSession("compile-3.0", tmp_path, site, backend="uv")
    nox_sessions.install_lane(compile_, table.lane("3.0"), "compile", opts, nox_sessions.Matrix(table, ROOT, False))
    assert not any(a.startswith("torch") for a in compile_.installs[0])  # borrows: the AOT compile needs no torch
    borrow = FakeSession("parity-3.0", tmp_path, site, backend="uv", posargs=["--torch-pairing", "borrow"])
    b_opts, _ = nox_sessions.options(borrow)
    nox_sessions.install_lane(borrow, table.lane("3.0"), "parity", b_opts, nox_sessions.Matrix(table, ROOT, False))
    assert not any(a.startswith("torch") for a in borrow.installs[0])


def test_a_cuda_torch_on_a_cpu_box_is_recorded_paired():
    lane = lane_table.load_table().lane("3.0")
    fp = {"torch": "2.4.1+cu121", "cuda_runtime": "12.1", "imported": {"triton": "3.0.0"}}
    rec = nox_sessions.ledger.base_record(lane, fp, check="parity", mode="interp", session="parity-3.0", run_id="x")
    assert rec["torch_paired"] and rec["off_pair_reason"] is None


def _xdist_pytest(versions_by_worker):
    """pytest under xdist: the workers write <imported.json>.gwN, the controller its own file."""
    def handler(args, env):
        xml = Path(next(a for a in args if a.startswith("--junitxml=")).split("=", 1)[1])
        xml.write_text('<testsuite><testcase classname="t" name="a"/><testcase classname="t" name="b"/></testsuite>')
        path = env[checks.IMPORTED_ENV]
        Path(path).write_text(json.dumps({"imported": {"triton": None, "numpy": "1.26.4", "torch": "2.13.0+cpu"}}))
        for worker, triton in versions_by_worker.items():
            Path(f"{path}.{worker}").write_text(json.dumps(
                {"imported": {"triton": triton, "numpy": "1.26.4", "torch": "2.13.0+cpu"}}))
        Path(args[3]).write_text("0")
        handler.args = args
    return handler


def test_interpreter_tests_run_on_every_usable_core_and_the_workers_versions_count(tmp_path, monkeypatch):
    """The interpreter suite is single-threaded: on the 2-core box the main job waited on it with a core idle.
    The xdist controller imports no Triton (the workers run the tests), so the workers' files are read."""
    monkeypatch.setattr(machine, "usable_cores", lambda: 2)
    monkeypatch.delenv("NSA_SEL_JOBS", raising=False)
    run = _xdist_pytest({"gw0": "3.1.0", "gw1": "3.1.0"})
    handlers = {nox_sessions.FINGERPRINT: _fingerprint(), "pytest": run,
                checks.PROBE: lambda a, e: "NSA_SEL_PROBE " + json.dumps(PROBE_OK)}
    s = FakeSession("parity-3.1", tmp_path, handlers, posargs=["--results", str(tmp_path / "results")])
    nox_sessions.run_lane(s, F.release("3.1"), "parity", _matrix())
    assert run.args[run.args.index("-n") + 1] == "2"
    recs = _run_file(tmp_path, "parity-3.1")["records"]
    assert [r["verdict"] for r in recs] == ["pass"] * 3 and {r["triton_imported"] for r in recs} == {"3.1.0"}


def test_workers_that_imported_different_tritons_fail_the_lane(tmp_path, monkeypatch):
    monkeypatch.setattr(machine, "usable_cores", lambda: 1)
    monkeypatch.delenv("NSA_SEL_JOBS", raising=False)
    run = _xdist_pytest({"gw0": "3.1.0", "gw1": "3.9.0"})
    s = FakeSession("parity-3.1", tmp_path, {"pytest": run})
    recs, problem = checks.pytest_run(s, F.base("3.1", "parity"), tmp_path, ["-m", "interp"], [])
    assert "-n" not in run.args  # workers=1 (one usable core): no xdist
    assert problem == "the pytest workers imported different versions: triton 3.1.0 and 3.9.0"
    assert recs[-1]["verdict"] == "error"


def test_under_no_venv_a_lanes_later_sessions_reuse_its_fingerprint(tmp_path):
    """One probe (a process importing torch) per lane and nox run: nox names each session in its env
    (``NOX_CURRENT_SESSION``), which must not make the parity and bench sessions probe again."""
    probes = []
    fingerprint = _fingerprint()

    def counted(args, env):
        probes.append(1)
        return fingerprint(args, env)

    opts, _ = nox_sessions.options(FakeSession("compile-3.1", tmp_path, {}))
    fps = []
    for name in ("compile-3.1", "parity-3.1", "bench-3.1"):
        s = FakeSession(name, tmp_path, {nox_sessions.FINGERPRINT: counted})
        s.env["NOX_CURRENT_SESSION"] = name
        fps.append(nox_sessions.prepare(s, F.release("3.1"), name.split("-")[0], opts, _matrix()))
    assert len(probes) == 1 and fps[0] == fps[1] == fps[2]
    other = FakeSession("parity-3.1", tmp_path, {nox_sessions.FINGERPRINT: counted})
    other.env["TRITON_DEFAULT_FP_FUSION"] = "0"  # another environment: probed again
    nox_sessions.prepare(other, F.release("3.1"), "parity", opts, _matrix())
    assert len(probes) == 2
