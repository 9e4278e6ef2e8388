"""Ledger records: base fields, verdicts, the imported versions and the isolation check."""

from __future__ import annotations

import pytest

import ledger_factory as F
from nsa_triton_sel.compat import ledger


def test_base_record_marks_cpu_torch_off_pair_and_drops_cache_path():
    b = F.base("3.1", "parity")
    assert b["torch_paired"] is False and "CPU build" in b["off_pair_reason"]
    assert b["knobs"] == {"TRITON_DEFAULT_FP_FUSION": "1"}
    for field in ("triton", "torch", "python", "numpy", "cuda", "driver", "gpu", "arch", "date", "git_commit",
                  "triton_imported", "process"):
        assert field in b


def test_base_record_names_the_declared_release_not_the_installed_metadata():
    lane = F.release("3.1")
    fp = {**F.CPU_FP, "triton": "3.9.0", "imported": {"triton": "3.9.0"}}  # metadata and import say 3.9
    b = ledger.base_record(lane, fp, check="compile", mode="aot", session="s", run_id="r")
    assert b["triton"] == "3.1.0" and b["triton_imported"] == "3.9.0"
    assert ledger.isolation_problem(b)


def test_base_record_paired_on_gpu_with_listed_cuda_torch():
    fp = {**F.CPU_FP, "torch": "2.9.1+cu128", "cuda_runtime": "12.8", "gpu_name": "NVIDIA H100"}
    b = F.base("3.5", "parity", mode="gpu", fp=fp)
    assert b["torch_paired"] is True and b["off_pair_reason"] is None and b["machine"] == "NVIDIA H100"
    fp["torch"] = "2.11.0+cu130"  # reused, not the pair of 3.5
    b = F.base("3.5", "parity", mode="gpu", fp=fp)
    assert b["torch_paired"] is False and "2.11.0" in b["off_pair_reason"]


@pytest.mark.parametrize("verdict", ["ok", "failed", "passed"])
def test_record_rejects_unknown_verdict(verdict):
    with pytest.raises(ValueError, match=f"unknown verdict '{verdict}'; accepted: pass, fail"):
        ledger.record(F.base("3.1", "compile"), kernel="k", verdict=verdict)


def test_record_takes_the_imported_versions_of_its_process():
    rec = ledger.record(F.base("3.1", "compile"), kernel="k", verdict="pass",
                        imported={"triton": "3.1.0", "numpy": None, "torch": None})
    assert (rec["triton_imported"], rec["process"]) == ("3.1.0", {"numpy": None, "torch": None})


def test_a_schema_2_record_is_read_as_schema_3():
    """Schema 2 kept numpy's and torch's imported versions at the top level; schema 3 keeps only the
    Triton there (every top-level ``*_imported`` field names a Triton)."""
    rec = ledger.record(F.base("3.1", "compile"), kernel="k", verdict="pass",
                        imported={"triton": "3.1.0", "numpy": "1.26.4", "torch": "2.13.0+cpu"})
    old = {k: v for k, v in rec.items() if k != "process"}
    old.update(schema=2, numpy_imported="1.26.4", torch_imported="2.13.0+cpu")
    assert ledger.records.migrate(old) == rec
    assert ledger.records.problems(old) and not ledger.records.problems(ledger.records.migrate(old))
    assert ledger.records.migrate({**old, "schema": 1})["schema"] == 1  # schema 1 stays refused


def test_a_record_from_a_process_that_imported_another_triton_becomes_an_error():
    rec = ledger.record(F.base("3.1", "compile"), kernel="k", verdict="pass", message="fine",
                        imported={"triton": "3.9.0"})
    checked = ledger.enforce_isolation(rec)
    assert checked["verdict"] == "error"
    assert "imported triton 3.9.0, not the lane's 3.1.0" in checked["message"] and "was pass: fine" in checked["message"]
    assert checked["isolation_error"] and rec["verdict"] == "pass"  # the original is not modified
    same = ledger.record(F.base("3.1", "compile"), kernel="k", verdict="pass", imported={"triton": "3.1.0"})
    assert ledger.enforce_isolation(same) is same
    nothing = ledger.record(F.base("3.1", "compile"), kernel="k", verdict="skip", imported={})
    assert ledger.enforce_isolation(nothing) is nothing  # a process that imported no Triton (a skip)


def test_problems_name_what_is_wrong():
    good = F.recs("3.1", "parity", ["pass"])[0]
    assert ledger.problems(good) == []
    assert ledger.problems([1]) == ["a record must be a JSON object, got list"]
    old = {**good, "schema": 1}
    assert "schema 1" in ledger.problems(old)[0] and "--reset" in ledger.problems(old)[0]
    missing = {k: v for k, v in good.items() if k != "triton_imported"}
    assert ledger.problems(missing) == ["missing field(s) triton_imported"]
    assert "unknown verdict 'passed'" in ledger.problems({**good, "verdict": "passed"})[0]
    assert "unknown check 'compiles'" in ledger.problems({**good, "check": "compiles"})[0]
