"""``--specs`` in the compile lanes and ``nsa-sel matrix``: what each refuses, before anything
is installed or compiled (one line, exit 2, nothing written), and the verdict table's cells from run files alone."""

from __future__ import annotations

import pytest

import ledger_factory as F
from nsa_triton_sel.compat import lanes, ledger, team_matrix
from test_team_specs import ROOT, TABLE, LaneFailed, LaneSession, write_team
from nsa_triton_sel.compat import nox_lanes

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
        nox_lanes.run_lane(session, TABLE.for_version("3.9.0"), name.partition("-")[0],
                           nox_lanes.Matrix(table=TABLE, root=ROOT, gpu=False))
    assert not (tmp_path / "out").exists()


def team_runs(results, ref: str, verdicts: dict, table=TABLE) -> None:
    """Run files of compile lanes over a spec module: ``{release: [verdict per spec]}``."""
    for version, vs in verdicts.items():
        lane = table.for_version(version) or lanes.candidate_lane(version, table)
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
