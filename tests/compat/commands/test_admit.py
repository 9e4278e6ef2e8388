"""``nsa-sel check-upgrade VERSION --admit``: a SAFE candidate joins the table, ledger and known-good."""

from __future__ import annotations

import ledger_factory as F
from nsa_triton_sel.compat.commands import upgrade
from nsa_triton_sel.compat import ledger
from nsa_triton_sel.compat.core import lane_table


def _candidate_runs(results, version, verdict="pass"):
    table = lane_table.load_table(F.constraints_dir(results.parent / "c0") / "lanes.toml")
    cand = lane_table.candidate_lane(version, table)
    fp = {**F.CPU_FP, "imported": {"triton": version, "numpy": "1.26.4", "torch": "2.13.0+cpu"}, "date": F.DATE}
    recs = []
    for check in ("compile", "parity"):
        b = ledger.base_record(cand, fp, check=check, mode={"compile": "aot", "parity": "interp"}[check],
                               session=f"{check}-candidate", run_id=f"{check}-candidate@{F.DATE}")
        recs += [ledger.record(b, kernel=f"k{i}", verdict=verdict) for i in range(2)]
    F.write_runs(results, recs)
    return recs


def test_admitting_a_listed_patch_release_pins_its_records(tmp_path, capsys):
    cdir = F.constraints_dir(tmp_path)
    _candidate_runs(tmp_path / "cand", "3.5.0")
    rc = upgrade.main(["3.5.0", "--constraints", str(cdir), "--from-results", str(tmp_path / "cand"), "--admit"])
    assert rc == 0, capsys.readouterr()
    rows = ledger.load_ledger(cdir / "ledger.jsonl")
    assert {(r["triton"], r["lane"], r["session"], r["candidate"]) for r in rows} == {
        ("3.5.0", "3.5", "compile-3.5.0", False), ("3.5.0", "3.5", "parity-3.5.0", False)}
    assert "# admitted  3.5.0   (lane 3.5 patch; pairs with torch 2.9.0; tested with" in (cdir / "known-good.txt").read_text()
    assert (cdir / "lanes.toml").read_text() == F.TABLE_TOML  # already listed: the table is unchanged


def test_admitting_a_new_minor_adds_a_lane_with_the_rules_of_the_lane_below(tmp_path):
    cdir = F.constraints_dir(tmp_path)
    cand = _candidate_runs(tmp_path / "cand", "3.10.0")
    upgrade.admit("3.10.0", cand, cdir, cdir / "ledger.jsonl", log=lambda *_: None)
    table = lane_table.load_table(cdir / "lanes.toml")
    lane = table.lane("3.10")
    assert (lane.triton, lane.torch, lane.numpy, lane.python) == ("3.10.0", (), ">=1.26", ">=3.11")
    assert "lane 3.9 (the nearest below)" in lane.numpy_reason
    assert (cdir / "triton-3.10.txt").read_text().count("triton==3.10.0") == 1
    assert "admitted  3.10.0" in (cdir / "known-good.txt").read_text()


def test_admitting_an_unlisted_patch_attaches_it_to_its_lane(tmp_path):
    cdir = F.constraints_dir(tmp_path)
    upgrade.add_release(cdir / "lanes.toml", "3.3.2")
    table = lane_table.load_table(cdir / "lanes.toml")
    patch = table.for_version("3.3.2")
    assert patch.patch and patch.label == "3.3" and patch.numpy == "<2.4" and patch.torch == ()
    assert [p.triton for p in table.patches] == ["3.3.0", "3.3.2", "3.5.0"]
    upgrade.add_release(cdir / "lanes.toml", "3.3.2")  # again: nothing changes
    assert len(lane_table.load_table(cdir / "lanes.toml").patches) == 3


def test_a_candidate_that_is_not_safe_is_not_admitted(tmp_path, capsys):
    cdir = F.constraints_dir(tmp_path)
    _candidate_runs(tmp_path / "cand", "3.10.0", verdict="fail")
    rc = upgrade.main(["3.10.0", "--constraints", str(cdir), "--from-results", str(tmp_path / "cand"), "--admit"])
    assert rc == 1 and "--admit refused" in capsys.readouterr().err
    assert not (cdir / "ledger.jsonl").exists() and (cdir / "lanes.toml").read_text() == F.TABLE_TOML
