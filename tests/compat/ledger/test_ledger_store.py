"""The ledger file: strict reading with file:line messages, merge by run, the generation digest."""

from __future__ import annotations

import json

import pytest

import ledger_factory as F
from nsa_triton_sel.compat import ledger


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_load_ledger_rejects_a_torn_line(tmp_path):
    good = json.dumps(F.recs("3.1", "parity", ["pass"])[0])
    path = _write(tmp_path / "l.jsonl", [good, '{"b": '])
    with pytest.raises(ledger.LedgerError, match=f"^{path}:2: not a ledger record: not valid JSON"):
        ledger.load_ledger(path)
    assert ledger.load_ledger(tmp_path / "missing.jsonl") == []


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_nan_and_infinity_are_refused_with_the_records_line(tmp_path, token):
    """json.loads takes NaN/Infinity (and 1e400 as inf), so a lenient reader would let `pin --check` call such
    a ledger consistent.  The ledger is strict JSON in and out."""
    recs = [json.dumps(r) for r in F.recs("3.1", "parity", ["pass", "pass"])]
    recs[1] = recs[1].replace('"metrics": {}', f'"metrics": {{"x": {token}}}')
    assert token in recs[1]
    path = _write(tmp_path / "ledger.jsonl", recs)
    with pytest.raises(ledger.LedgerError, match=f"^{path}:2: not a ledger record: .*(not JSON|out of range)"):
        ledger.load_ledger(path)


def test_the_ledger_is_never_written_with_nan():
    rec = F.recs("3.1", "parity", ["pass"])[0]
    rec["metrics"] = {"x": float("nan")}
    with pytest.raises(ValueError):
        ledger.dump_ledger([rec])


@pytest.mark.parametrize("change, expect", [
    ({"verdict": "failed"}, "unknown verdict 'failed'"),
    ({"verdict": "passed"}, "unknown verdict 'passed'"),
    ({"schema": 1}, "schema 1, this code reads 3"),
    ({"triton": "three"}, "triton 'three' is not a version"),
])
def test_malformed_ledger_lines_name_file_line_and_what_is_wrong(tmp_path, change, expect):
    recs = F.recs("3.1", "parity", ["pass", "pass", "pass"])
    recs[2].update(change)
    path = _write(tmp_path / "ledger.jsonl", [json.dumps(r) for r in recs])
    with pytest.raises(ledger.LedgerError) as exc:
        ledger.load_ledger(path)
    assert str(exc.value).startswith(f"{path}:3: ") and expect in str(exc.value)


def test_a_ledger_line_that_is_not_an_object(tmp_path):
    path = _write(tmp_path / "ledger.jsonl", ["[1, 2]"])
    with pytest.raises(ledger.LedgerError, match=":1: a record must be a JSON object"):
        ledger.load_ledger(path)


def test_merge_newest_run_replaces_all_older_records_of_its_key():
    old = F.recs("3.5", "parity", ["pass", "fail", "pass"], "2026-11-20T10:00:00+00:00")
    other = F.recs("3.5", "compile", ["pass"], "2026-11-20T10:00:00+00:00")
    new = F.recs("3.5", "parity", ["pass", "pass"], "2026-11-22T10:00:00+00:00")
    merged = ledger.merge(old + other, new)
    parity = [r for r in merged if r["check"] == "parity"]
    assert [r["verdict"] for r in parity] == ["pass", "pass"]  # k2 of the old run is gone
    assert {r["run_id"] for r in parity} == {new[0]["run_id"]}
    assert [r for r in merged if r["check"] == "compile"] == other


def test_merge_keeps_a_patch_release_apart_from_its_lane():
    lane = F.recs("3.5", "parity", ["pass"], "2026-11-20T10:00:00+00:00")
    patch = F.recs("3.5.0", "parity", ["fail"], "2026-11-22T10:00:00+00:00")
    merged = ledger.merge(lane, patch)
    assert sorted((r["triton"], r["verdict"]) for r in merged) == [("3.5.0", "fail"), ("3.5.1", "pass")]


def test_merge_keeps_newer_ledger_run_over_older_new_files():
    newer = F.recs("3.5", "parity", ["pass"], "2026-11-22T10:00:00+00:00")
    stale = F.recs("3.5", "parity", ["fail"], "2026-11-01T10:00:00+00:00")
    assert ledger.merge(newer, stale) == newer


def test_merge_is_idempotent():
    recs = F.all_pass("3.5")
    once = ledger.merge([], recs)
    assert ledger.merge(once, recs) == once


def test_merge_keeps_cpu_and_gpu_runs_apart():
    cpu = F.recs("3.5", "parity", ["pass"])
    gpu_fp = {**F.CPU_FP, "torch": "2.9.1", "cuda_runtime": "12.8", "gpu_name": "NVIDIA H100"}
    gpu = F.recs("3.5", "parity", ["fail"], "2026-11-23T00:00:00+00:00", mode="gpu", fp=gpu_fp)
    merged = ledger.merge(cpu, gpu)
    assert len(merged) == 2
    assert ledger.cell(merged)[0] == "fail"  # a GPU failure fails the parity cell


def test_interrupted_run_supersedes_an_older_pass():
    old = F.recs("3.3", "parity", ["pass"], "2026-11-20T00:00:00+00:00")
    doc = {"status": "running", "session": "parity-3.3", "started": "2026-11-22T00:00:00+00:00",
           "base": F.base("3.3", "parity", "2026-11-22T00:00:00+00:00"), "records": []}
    merged = ledger.merge(old, ledger.records_of_run(doc))
    assert [r["verdict"] for r in merged] == ["interrupted"]


def test_digest_changes_with_the_ledger():
    a = ledger.dump_ledger(F.all_pass("3.5"))
    assert ledger.digest(a) == ledger.digest(a) != ledger.digest(a + "\n") and len(ledger.digest(a)) == 16


def test_digest_names_the_kernel_sources_too():
    """After a kernel change the rendered files are out of date (stale GPU evidence): pin --check must fail."""
    assert ledger.digest("x\n", "a" * 16) != ledger.digest("x\n", "b" * 16)
    from nsa_triton_sel import provenance

    both = provenance.hashes()
    assert ledger.digest("x\n") == ledger.digest("x\n", " ".join(f"{k}={v}" for k, v in sorted(both.items())))
    assert ledger.digest("x\n") != ledger.digest("x\n", both["compiler_hash"])  # the runtime is in it too


def test_re_running_one_lane_changes_only_that_lanes_lines():
    import ledger_factory as F

    old = F.all_pass("3.5") + F.all_pass("3.9") + F.recs("3.9", "parity", ["pass"], mode="gpu",
                                                          fp={**F.CPU_FP, "gpu_name": "H100"})
    rerun = F.recs("3.9", "parity", ["pass", "pass", "fail"], date="2026-11-23T00:00:00+00:00")
    before = ledger.dump_ledger(ledger.merge([], old)).splitlines()
    after = ledger.dump_ledger(ledger.merge(ledger.merge([], old), rerun)).splitlines()
    changed = [ln for ln in before if ln not in after] + [ln for ln in after if ln not in before]
    assert changed and all('"session": "parity-3.9"' in ln and '"machine": "cpu"' in ln for ln in changed)
    # and the untouched lines keep their order around the replaced block
    kept = [ln for ln in before if ln in after]
    assert kept == [ln for ln in after if ln in before]
