"""``--specs`` in the compile lanes, ``nsa-sel check-upgrade`` and ``nsa-sel matrix``: what each refuses, before anything
is installed or compiled (one line, exit 2, nothing written), and the verdict table's cells from run files alone."""

from __future__ import annotations

import pytest

import ledger_factory as F
from nsa_triton_sel.compat.core import lane_table
from nsa_triton_sel.compat import ledger
from nsa_triton_sel.compat.commands import team_matrix, upgrade
from test_team_specs import LEDGER_FILES, ROOT, TABLE, LaneFailed, LaneSession, _digest, write_team
from nsa_triton_sel.compat.lanes import nox_sessions

FP = {**F.CPU_FP, "date": F.DATE}


class NoRun(LaneSession):
    def run(self, *args, **kwargs):
        raise AssertionError(f"the lane ran {args[:3]} although its options were refused")


@pytest.mark.parametrize(("name", "posargs", "needle"), [
    ("parity-3.9", ["--specs", "team_specs", "--results", "out"], "in the compile lanes only"),
    ("bench-3.9", ["--specs", "team_specs", "--results", "out"], "in the compile lanes only"),
    ("compile-3.9", ["--specs", "team_specs"], "--specs needs --results DIR"),
    ("compile-3.9", ["--specs", "team_specs", "--results", str(ROOT / "out" / "lanes")], "this project's own evidence"),
    ("compile-3.9", ["--specs", "team_specs", "--results", str(ROOT / "constraints" / "x")], "own evidence"),
    ("compile-3.9", ["--specs", "team_specs", "--specs", "other", "--results", "out"], "one spec module per run"),
    ("compile-3.9", ["--specs", "missing.py", "--results", "out"], "missing.py: no such file"),
    ("compile-3.9", ["--specs", ":SPECS", "--results", "out"], "expected module[:ATTR]"),
])
def test_a_lane_refuses_specs_it_cannot_use_before_installing_anything(tmp_path, monkeypatch, name, posargs, needle):
    monkeypatch.delenv("NSA_SEL_RESULTS", raising=False)
    write_team(tmp_path)
    session = NoRun(name, posargs, tmp_path, tmp_path / "cache")
    with pytest.raises(LaneFailed, match=needle.replace("[", r"\[").replace("]", r"\]")):
        nox_sessions.run_lane(session, TABLE.for_version("3.9.0"), name.partition("-")[0],
                           nox_sessions.Matrix(table=TABLE, root=ROOT, gpu=False))
    assert not (tmp_path / "out").exists()


@pytest.fixture
def team_dir(tmp_path, monkeypatch):
    """The team's directory as the working directory; a candidate run must not start."""
    monkeypatch.chdir(write_team(tmp_path / "work"))
    (tmp_path / "work" / "broken.py").write_text("SPECS = [\n")
    monkeypatch.setattr(upgrade, "run_candidate", lambda *a, **k: pytest.fail("the lanes ran after a refusal"))
    return tmp_path / "work"


@pytest.mark.parametrize(("extra", "needle"), [
    (["--admit"], "--admit with --specs: a team's kernels are not this project's evidence"),
    (["--ledger", "x.jsonl"], "--ledger with --specs: not used"),
    (["--max-slowdown", "0.2"], "--max-slowdown with --specs: not used"),
    (["--baseline", "3.4.1"], "--baseline 3.4.1: not a release of lanes.toml (3.0.0, "),
    (["--baseline", "3.9.0"], "--baseline 3.9.0: the candidate itself"),
    (["--baseline", "three"], "--baseline 'three': not a version"),
    (["--archs", "7"], "--archs: bad arch '7'"),
])
def test_check_upgrade_with_specs_refuses_in_one_line(team_dir, capsys, extra, needle):
    before = _digest(*LEDGER_FILES)
    assert upgrade.main(["3.9.0", "--specs", "team_specs", *extra, "--constraints", str(ROOT / "constraints")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("nsa-sel check-upgrade: ") and needle in err, err
    assert _digest(*LEDGER_FILES) == before


@pytest.mark.parametrize(("ref", "needle"), [("missing.py", "missing.py: no such file"),
                                             ("broken", "SyntaxError"), ("team_specs:NOPE", "NOPE")])
def test_a_spec_module_that_does_not_load_is_refused_before_the_lanes_run(team_dir, capsys, ref, needle):
    assert upgrade.main(["3.9.0", "--specs", ref, "--constraints", str(ROOT / "constraints")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err


def test_team_options_without_specs_are_refused(team_dir, capsys):
    assert upgrade.main(["3.9.0", "--baseline", "3.6.0", "--constraints", str(ROOT / "constraints")]) == 2
    assert "--baseline: only with --specs" in capsys.readouterr().err


def team_runs(results, ref: str, verdicts: dict, table=TABLE) -> None:
    """Run files of compile lanes over a spec module: ``{release: [verdict per spec]}``."""
    for version, vs in verdicts.items():
        lane = table.for_version(version) or lane_table.candidate_lane(version, table)
        base = ledger.base_record(lane, {**FP, "imported": {"triton": version}}, check="compile", mode="aot",
                                  session=f"compile-{lane.name}", run_id=f"compile-{lane.name}@{F.DATE}")
        base.update({ledger.SPECS_FIELD: ref, "paired_torch": lane.paired_torch})
        recs = [ledger.record(base, kernel=f"k/{i:02d}", verdict=v, message=f"Triton says {v}", arch=90,
                              metrics={"spills": 24 * i}, spec_kernel=f"kern{i % 2}") for i, v in enumerate(vs)]
        recs.append(ledger.record({**base, "check": "compile-static"}, kernel="team.py:kern0", verdict="pass",
                                  message="needs triton any"))
        ledger.write_run(ledger.run_file(results, base["session"]), base=base, status="complete", started=F.DATE,
                         records=recs)


def test_the_table_counts_cells_per_release_and_kernel(tmp_path, capsys):
    team_runs(tmp_path, "team.py:SPECS", {"3.6.0": ["pass", "pass", "pass"], "3.10.0": ["pass", "fail", "unsupported"]})
    assert team_matrix.main(["--results", str(tmp_path), "--constraints", str(ROOT / "constraints")]) == 1
    out = capsys.readouterr().out
    assert "| Triton | lane | torch | compile | static | kern0 | kern1 | spills |" in out
    assert "| 3.6.0 | 3.6 | 2.10.0 | pass 3/3 | pass 1/1 | pass 2/2 | pass 1/1 | k/02 sm_90: 48 B, k/01 sm_90: 24 B |" in out
    assert "| 3.10.0 | 3.10 (candidate) | — | **FAIL** 1/3 | pass 1/1 | pass 1/2, 1 unsupported | **FAIL** 1/1 |" in out
    assert "- **3.10.0**: fail: `k/01` [sm_90]: Triton says fail" in out
    assert "- **3.10.0**: unsupported: `k/02` [sm_90]: Triton says unsupported" in out
    clean = tmp_path / "clean"
    team_runs(clean, "team.py:SPECS", {"3.6.0": ["pass", "pass"]})
    assert team_matrix.main(["--results", str(clean), "--constraints", str(ROOT / "constraints")]) == 0


@pytest.mark.parametrize("case", ["missing", "project-runs", "two-modules", "output-is-a-directory"])
def test_matrix_refuses_in_one_line(tmp_path, capsys, case):
    results, extra = tmp_path / "r", []
    if case == "project-runs":
        F.write_runs(results, F.all_pass("3.9"))
    if case in ("two-modules", "output-is-a-directory"):
        team_runs(results, "a.py:SPECS", {"3.6.0": ["pass"]})
    if case == "two-modules":
        team_runs(results, "b.py:SPECS", {"3.9.0": ["pass"]})
    if case == "output-is-a-directory":
        extra = ["--output", str(tmp_path)]
    assert team_matrix.main(["--results", str(results), *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("nsa-sel matrix: "), err
    assert {"missing": "no such directory", "project-runs": "no run of a spec module there",
            "two-modules": "runs of 2 spec modules", "output-is-a-directory": "--output"}[case] in err


def test_project_run_files_are_not_judged_as_a_teams_and_the_reverse(tmp_path, capsys, monkeypatch):
    team_runs(tmp_path, "team.py:SPECS", {"3.10.0": ["pass"]})
    monkeypatch.setattr(upgrade, "run_candidate", lambda *a, **k: pytest.fail("--from-results runs no lane"))
    args = ["3.10.0", "--from-results", str(tmp_path), "--skip-index-check", "--constraints", str(ROOT / "constraints")]
    assert upgrade.main(args) == 2
    assert "compile runs of a spec module; judge them with --specs team.py:SPECS" in capsys.readouterr().err
