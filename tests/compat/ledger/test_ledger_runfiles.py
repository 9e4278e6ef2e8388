"""Run files: interrupted lanes become markers, and every results file is read strictly."""

from __future__ import annotations

import json

import pytest

import ledger_factory as F
from nsa_triton_sel.compat import ledger


def test_unfinished_run_file_yields_interrupted_marker(tmp_path):
    base = F.base("3.3", "parity")
    path = ledger.run_file(tmp_path, "parity-3.3")
    ledger.write_run(path, base=base, status="running", started=base["date"], records=[], stage="checks")
    recs, notes = ledger.load_run_files([tmp_path])
    assert [r["verdict"] for r in recs] == ["interrupted"]
    assert "never finished" in recs[0]["message"] and notes
    assert recs[0]["run_id"] == base["run_id"] and recs[0]["lane"] == "3.3" and recs[0]["stage"] == "checks"
    assert ledger.problems(recs[0]) == []


def test_complete_run_file_yields_its_records(tmp_path):
    recs = F.recs("3.3", "parity", ["pass", "skip"])
    path = ledger.run_file(tmp_path, "parity-3.3")
    ledger.write_run(path, base=F.base("3.3", "parity"), status="complete", started="x", records=recs)
    assert ledger.load_run_files([tmp_path]) == (recs, [])


def test_set_up_failure_is_an_error_marker_naming_the_stage(tmp_path):
    base = F.base("3.3", "compile")
    ledger.write_run(ledger.run_file(tmp_path, "compile-3.3"), base=base, status="error", started="x", records=[],
                     note="set-up (installing triton==3.3.1) failed: CommandFailed", stage="set-up")
    rec = ledger.load_run_files([tmp_path])[0][0]
    assert rec["verdict"] == "error" and rec["stage"] == "set-up" and "CommandFailed" in rec["message"]


@pytest.mark.parametrize("text, expect", [
    ("", "empty"),
    ("   \n", "empty"),
    ('{"schema": 2, "kind": "lane-run", "status": "compl', "not valid JSON (Unterminated string"),
    ('{"kind": "lane-run", "status": "complete", "records": [], "x": NaN}', "NaN is not JSON"),
    ('{"kind": "lane-run", "status": "complete", "records": [], "x": 1e999}', "out of range"),
    ('{"schema": 2, "status": "complete", "records": []}', 'no "kind" field: not a lane run file'),
    ('[1, 2]', 'no "kind" field'),
    ('{"kind": "smoke-report"}', "kind 'smoke-report', expected 'lane-run'"),
    ('{"kind": "lane-run", "status": "done", "records": []}', "status 'done'"),
])
def test_bad_results_files_are_errors_naming_the_file(tmp_path, text, expect):
    (tmp_path / "a-good.json").write_text(json.dumps({"kind": "lane-run", "status": "complete", "records": []}))
    bad = tmp_path / "parity-3.3.json"
    bad.write_text(text)
    with pytest.raises(ledger.RunFileError) as exc:
        ledger.load_run_files([tmp_path])
    assert str(exc.value).startswith(f"{bad}: ") and expect in str(exc.value)


@pytest.mark.parametrize("verdict", ["failed", "passed", "ok"])
def test_unknown_verdicts_in_a_run_file_are_rejected(tmp_path, verdict):
    recs = F.recs("3.3", "parity", ["pass", "pass"])
    recs[1]["verdict"] = verdict
    path = ledger.run_file(tmp_path, "parity-3.3")
    ledger.write_run(path, base=recs[0], status="complete", started="x", records=recs)
    with pytest.raises(ledger.RunFileError, match=f"record 1 \\(kernel 'k1'\\): unknown verdict '{verdict}'"):
        ledger.load_run_files([tmp_path])
