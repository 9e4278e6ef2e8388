"""Verdicts per release and check, and who is admitted to known-good."""

from __future__ import annotations

import ledger_factory as F
from nsa_triton_sel import known_bad
from nsa_triton_sel.compat import ledger


def test_failing_lane_is_excluded_with_its_reason():
    verdicts = ledger.release_verdicts(F.TABLE, F.mixed(), [])
    assert verdicts["3.5.1"] == (True, [])
    ok, why = verdicts["3.3.1"]
    assert not ok and "compile fail" in why[0] and "k1" in why[0]


def test_missing_required_check_excludes():
    recs = F.recs("3.9", "compile", ["pass"])
    ok, why = ledger.release_verdicts(F.TABLE, recs, [])["3.9.0"]
    assert not ok and why == ["parity not run (no evidence in the ledger)"]


def test_a_patch_release_is_judged_on_its_own_records():
    recs = F.all_pass("3.5") + F.recs("3.5.0", "compile", ["pass"]) + F.recs("3.5.0", "parity", ["fail"])
    verdicts = ledger.release_verdicts(F.TABLE, recs, [])
    assert verdicts["3.5.1"][0] and not verdicts["3.5.0"][0]
    assert "parity fail" in verdicts["3.5.0"][1][0]
    assert not ledger.release_verdicts(F.TABLE, F.all_pass("3.5"), [])["3.5.0"][0]  # no evidence: not admitted


def test_all_arch_known_bad_window_excludes_even_a_passing_lane():
    windows = known_bad.parse('schema = 1\n[[window]]\nid = "w"\ntriton = "==3.5.*"\nreason = "GPU miscompile"\n')
    ok, why = ledger.release_verdicts(F.TABLE, F.mixed(), windows)["3.5.1"]
    assert not ok and "known-bad [w]: GPU miscompile" in why


def test_cell_names_the_worst_bad_verdict():
    recs = F.recs("3.5", "parity", ["pass", "fail", "crash", "skip"])
    assert ledger.cell(recs) == ("crash", "**CRASH** 2/4")
    assert ledger.cell(F.recs("3.5", "parity", ["pass", "skip", "xfail"])) == ("pass", "pass 1/3, 1 xfail, 1 skip")
    assert ledger.cell([]) == (ledger.NOT_RUN, "—")
