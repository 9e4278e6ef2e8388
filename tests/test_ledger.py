"""The verdict ledger: records, merge, atomic writes, interrupted lanes, MATRIX.md, known-good.txt."""

from __future__ import annotations

import json
import os

import pytest
from packaging.specifiers import SpecifierSet

from nsa_triton_sel import known_bad
from nsa_triton_sel.compat import lanes, ledger

TABLE = lanes.Table(
    lanes=(
        lanes.Lane(label="3.1", triton="3.1.0", torch=("2.5.1",), python=">=3.9", numpy="<2"),
        lanes.Lane(label="3.3", triton="3.3.1", torch=("2.7.1",), python=">=3.9", numpy="<2.4"),
        lanes.Lane(label="3.5", triton="3.5.1", torch=("2.9.1",), python=">=3.10", numpy="<2.4"),
        lanes.Lane(label="3.9", triton="3.9.0", torch=("2.15.0",), python=">=3.11", numpy=">=1.26"),
    ),
    required=("compile", "parity"),
    other_releases=("3.3.0", "3.5.0"),
)
CPU_FP = {"python": "3.11.7", "torch": "2.13.0+cpu", "cuda_runtime": None, "numpy": "1.26.4",
          "git_commit": "abc", "triton_env": {"TRITON_DEFAULT_FP_FUSION": "1", "TRITON_CACHE_DIR": "/x"}}


def _base(label, check, date="2026-11-22T16:00:00+00:00", mode=None, fp=CPU_FP):
    lane = TABLE.lane(label)
    mode = mode or {"compile": "aot", "parity": "interp", "bench": "cpu"}[check]
    b = ledger.base_record(lane, {**fp, "triton": lane.triton, "date": date}, check=check, mode=mode,
                           session=f"{check}-{label}", run_id=f"{check}-{label}@{date}")
    return b


def _recs(label, check, verdicts, date="2026-11-22T16:00:00+00:00", **kw):
    base = _base(label, check, date, **kw)
    return [ledger.record(base, kernel=f"k{i}", verdict=v, message=f"{v} msg {i}") for i, v in enumerate(verdicts)]


def _all_pass(label, date="2026-11-22T16:00:00+00:00"):
    return _recs(label, "compile", ["pass", "pass"], date) + _recs(label, "parity", ["pass"] * 3, date)


# --- records -------------------------------------------------------------------------------------

def test_base_record_marks_cpu_torch_off_pair_and_drops_cache_path():
    b = _base("3.1", "parity")
    assert b["torch_paired"] is False and "CPU build" in b["off_pair_reason"]
    assert b["knobs"] == {"TRITON_DEFAULT_FP_FUSION": "1"}
    for field in ("triton", "torch", "python", "numpy", "cuda", "driver", "gpu", "arch", "date", "git_commit"):
        assert field in b


def test_base_record_paired_on_gpu_with_listed_cuda_torch():
    fp = {**CPU_FP, "torch": "2.9.1+cu128", "cuda_runtime": "12.8", "gpu_name": "NVIDIA H100"}
    b = _base("3.5", "parity", mode="gpu", fp=fp)
    assert b["torch_paired"] is True and b["off_pair_reason"] is None and b["machine"] == "NVIDIA H100"
    fp["torch"] = "2.11.0+cu130"  # reused, not the pair of 3.5
    b = _base("3.5", "parity", mode="gpu", fp=fp)
    assert b["torch_paired"] is False and "2.11.0" in b["off_pair_reason"]


def test_record_rejects_unknown_verdict():
    with pytest.raises(ValueError, match="verdict"):
        ledger.record(_base("3.1", "compile"), kernel="k", verdict="ok")


def test_records_from_smoke_maps_verdicts_canaries_and_known_bad():
    report = {"env": {"TRITON_DEFAULT_FP_FUSION": "1"}, "results": [
        {"spec": "a", "arch": 80, "verdict": "ok", "canary": False, "seconds": 1.0, "metrics": {"shared": 1}},
        {"spec": "b", "arch": 90, "verdict": "crash", "message": "rc=134", "canary": False},
        {"spec": "c", "arch": 100, "verdict": "crash", "message": "rc=134", "canary": False},
        {"spec": "bad", "arch": 80, "verdict": "compile_error", "canary": True, "as_expected": True},
        {"spec": "bad2", "arch": 80, "verdict": "ok", "canary": True, "as_expected": False},
    ]}
    windows = known_bad.parse('schema = 1\n[[window]]\nid = "bw"\ntriton = "<3.2"\narch = [100]\nreason = "r"\n')
    recs = ledger.records_from_smoke(report, _base("3.1", "compile"), windows)
    got = [(r["check"], r["kernel"], r["verdict"]) for r in recs]
    assert got == [("compile", "a", "pass"), ("compile", "b", "crash"), ("compile", "c", "xfail"),
                   ("compile-canary", "bad", "pass"), ("compile-canary", "bad2", "fail")]
    assert recs[0]["metrics"] == {"shared": 1, "seconds": 1.0} and recs[0]["arch"] == 80
    assert "[bw]" in recs[2]["message"]


def test_records_from_junit():
    xml = """<testsuites><testsuite>
      <testcase classname="tests.t" name="ok" time="0.5"/>
      <testcase classname="tests.t" name="bad[fp16]" time="1"><failure message="assert 1 == 2">tb</failure></testcase>
      <testcase classname="tests.t" name="err"><error message="boom"/></testcase>
      <testcase classname="tests.t" name="sk"><skipped type="pytest.skip" message="no gpu"/></testcase>
      <testcase classname="tests.t" name="xf"><skipped type="pytest.xfail" message="known"/></testcase>
    </testsuite></testsuites>"""
    recs = ledger.records_from_junit(xml, _base("3.9", "parity"))
    assert [(r["kernel"], r["verdict"]) for r in recs] == [
        ("tests.t::ok", "pass"), ("tests.t::bad[fp16]", "fail"), ("tests.t::err", "error"),
        ("tests.t::sk", "skip"), ("tests.t::xf", "xfail")]
    assert recs[1]["message"] == "assert 1 == 2" and recs[0]["metrics"]["seconds"] == 0.5


def test_attach_benchmarks_by_test_name():
    recs = [ledger.record(_base("3.9", "bench", mode="gpu"), kernel="bench.t::test_fwd[triton]", verdict="pass")]
    ledger.attach_benchmarks(recs, {"benchmarks": [{"name": "test_fwd[triton]", "stats": {"median": 1e-3, "ops": 1000},
                                                    "extra_info": {"tflops": 300.0}}]})
    assert recs[0]["metrics"]["median_s"] == 1e-3 and recs[0]["metrics"]["tflops"] == 300.0


# --- atomic writes -------------------------------------------------------------------------------

def test_atomic_write_replaces_and_leaves_no_temp(tmp_path):
    path = tmp_path / "sub" / "f.txt"
    ledger.atomic_write_text(path, "one")
    ledger.atomic_write_text(path, "two")
    assert path.read_text() == "two"
    assert os.listdir(path.parent) == ["f.txt"]


def test_atomic_write_failure_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "ledger.jsonl"
    ledger.atomic_write_text(path, '{"a": 1}\n')

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(ledger.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        ledger.atomic_write_text(path, '{"a": 2}\n{"trunc')
    assert path.read_text() == '{"a": 1}\n'
    assert os.listdir(tmp_path) == ["ledger.jsonl"]


def test_load_ledger_rejects_a_torn_line(tmp_path):
    path = tmp_path / "l.jsonl"
    path.write_text('{"a": 1}\n{"b": ')
    with pytest.raises(ValueError, match=":2:"):
        ledger.load_ledger(path)
    assert ledger.load_ledger(tmp_path / "missing.jsonl") == []


# --- merge ---------------------------------------------------------------------------------------

def test_merge_newest_run_replaces_all_older_records_of_its_key():
    old = _recs("3.5", "parity", ["pass", "fail", "pass"], "2026-11-20T10:00:00+00:00")
    other = _recs("3.5", "compile", ["pass"], "2026-11-20T10:00:00+00:00")
    new = _recs("3.5", "parity", ["pass", "pass"], "2026-11-22T10:00:00+00:00")
    merged = ledger.merge(old + other, new)
    parity = [r for r in merged if r["check"] == "parity"]
    assert [r["verdict"] for r in parity] == ["pass", "pass"]  # k2 of the old run is gone
    assert {r["run_id"] for r in parity} == {new[0]["run_id"]}
    assert [r for r in merged if r["check"] == "compile"] == other


def test_merge_keeps_newer_ledger_run_over_older_new_files():
    newer = _recs("3.5", "parity", ["pass"], "2026-11-22T10:00:00+00:00")
    stale = _recs("3.5", "parity", ["fail"], "2026-11-01T10:00:00+00:00")
    assert ledger.merge(newer, stale) == newer


def test_merge_is_idempotent():
    recs = _all_pass("3.5")
    once = ledger.merge([], recs)
    assert ledger.merge(once, recs) == once


def test_merge_keeps_cpu_and_gpu_runs_apart():
    cpu = _recs("3.5", "parity", ["pass"])
    gpu_fp = {**CPU_FP, "torch": "2.9.1", "cuda_runtime": "12.8", "gpu_name": "NVIDIA H100"}
    gpu = _recs("3.5", "parity", ["fail"], "2026-11-23T00:00:00+00:00", mode="gpu", fp=gpu_fp)
    merged = ledger.merge(cpu, gpu)
    assert len(merged) == 2
    assert ledger.cell(merged)[0] == "fail"  # a GPU failure fails the parity cell


# --- run files and interrupted lanes -------------------------------------------------------------

def test_unfinished_run_file_yields_interrupted_marker(tmp_path):
    base = _base("3.3", "parity")
    path = ledger.run_file(tmp_path, "parity-3.3")
    ledger.write_run(path, base=base, status="running", started=base["date"], records=[])
    recs, warns = ledger.load_run_files([tmp_path])
    assert [r["verdict"] for r in recs] == ["interrupted"]
    assert "never finished" in recs[0]["message"] and warns
    assert recs[0]["run_id"] == base["run_id"] and recs[0]["lane"] == "3.3"


def test_complete_run_file_yields_its_records(tmp_path):
    recs = _recs("3.3", "parity", ["pass", "skip"])
    path = ledger.run_file(tmp_path, "parity-3.3")
    ledger.write_run(path, base=_base("3.3", "parity"), status="complete", started="x", records=recs)
    assert ledger.load_run_files([tmp_path]) == (recs, [])


def test_interrupted_run_supersedes_an_older_pass():
    old = _recs("3.3", "parity", ["pass"], "2026-11-20T00:00:00+00:00")
    doc = {"status": "running", "session": "parity-3.3", "started": "2026-11-22T00:00:00+00:00",
           "base": _base("3.3", "parity", "2026-11-22T00:00:00+00:00"), "records": []}
    merged = ledger.merge(old, ledger.records_of_run(doc))
    assert [r["verdict"] for r in merged] == ["interrupted"]


# --- verdicts, known-good, matrix ----------------------------------------------------------------

def _mixed():
    recs = _all_pass("3.1") + _all_pass("3.5") + _all_pass("3.9")
    recs += _recs("3.3", "compile", ["pass", "fail"]) + _recs("3.3", "parity", ["pass"])
    return recs


def test_failing_lane_is_excluded_with_its_reason():
    verdicts = ledger.lane_verdicts(TABLE, _mixed(), [])
    assert verdicts["3.5"] == (True, [])
    ok, why = verdicts["3.3"]
    assert not ok and "compile fail" in why[0] and "k1" in why[0]


def test_missing_required_check_excludes():
    recs = _recs("3.9", "compile", ["pass"])
    ok, why = ledger.lane_verdicts(TABLE, recs, [])["3.9"]
    assert not ok and why == ["parity not run"]


def test_all_arch_known_bad_window_excludes_even_a_passing_lane():
    windows = known_bad.parse('schema = 1\n[[window]]\nid = "w"\ntriton = "==3.5.*"\nreason = "GPU miscompile"\n')
    ok, why = ledger.lane_verdicts(TABLE, _mixed(), windows)["3.5"]
    assert not ok and "known-bad [w]: GPU miscompile" in why


@pytest.mark.parametrize(
    "admitted, excluded",
    [
        (["3.1.0", "3.5.1", "3.9.0"], ["3.3.1", "3.3.0", "3.5.0"]),
        (["3.9.0"], ["3.1.0", "3.3.1", "3.5.1"]),
        (["3.1.0", "3.3.1"], ["3.3.0", "3.5.1", "3.9.0", "3.10.0"]),
        ([], ["3.1.0", "3.9.0"]),
    ],
)
def test_known_good_specifier_admits_exactly_the_passing_versions(admitted, excluded):
    spec = SpecifierSet(ledger.known_good_specifier(admitted, excluded))
    for v in admitted:
        assert v in spec
    for v in excluded:
        assert v not in spec


def test_known_good_excludes_whole_failing_minor_including_future_patches():
    spec = ledger.known_good_specifier(["3.1.0", "3.5.1"], ["3.3.1"])
    assert "!=3.3.*" in spec and "3.3.2" not in SpecifierSet(spec)


def test_render_known_good_has_reasons_and_one_constraint_line():
    recs = _mixed()
    verdicts = ledger.lane_verdicts(TABLE, recs, [])
    text = ledger.render_known_good(TABLE, verdicts, [], "constraints/ledger.jsonl")
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert len(lines) == 1 and lines[0].startswith("triton")
    spec = SpecifierSet(lines[0][len("triton"):])
    assert {"3.1.0", "3.5.1", "3.9.0"} <= set(spec.filter(["3.1.0", "3.3.1", "3.5.1", "3.9.0", "3.3.0", "3.5.0"]))
    assert "3.3.1" not in spec and "3.5.0" not in spec
    assert "# excluded  3.3.1   (lane 3.3): compile fail" in text


def test_render_matrix_lists_every_non_pass_reason():
    recs = _mixed() + [ledger.record(_base("3.9", "bench"), kernel="(bench)", verdict="skip",
                                     message="bench-3.9 needs a CUDA GPU")]
    verdicts = ledger.lane_verdicts(TABLE, recs, [])
    md = ledger.render_matrix(TABLE, recs, [], verdicts, "constraints/ledger.jsonl")
    assert "| 3.3.1 | 3.3 | **FAIL** 1/2 |" in md
    assert "**3.3.1 · compile (AOT)**: fail: `k1`: fail msg 1" in md
    assert "**3.9.0 · bench**: skip: `(bench)`: bench-3.9 needs a CUDA GPU" in md
    assert "CPU build torch 2.13.0+cpu" in md  # off-pair reason in the environment table


def test_render_matrix_shows_gpu_parity_errors_and_speedups_per_version():
    gpu_fp = {**CPU_FP, "torch": "2.11.0+cu130", "cuda_runtime": "13.0", "gpu_name": "NVIDIA H100"}
    par = _base("3.9", "parity", mode="gpu", fp=gpu_fp)
    ben = _base("3.9", "bench", mode="gpu", fp=gpu_fp)
    recs = _all_pass("3.9") + [
        ledger.record(par, kernel="t::test_a[x]", verdict="pass",
                      metrics={"max_abs_err": 2e-3, "rel_err": 2.2e-3, "sdpa_rel_err": 2.0e-3}),
        ledger.record(par, kernel="t::test_b[y]", verdict="pass",
                      metrics={"max_abs_err": 9e-3, "rel_err": 1e-3, "sdpa_rel_err": 1e-3}),
    ]
    for L, sp in ((256, 1.05), (1024, 0.97)):
        for impl, s_ in (("triton", sp), ("sdpa", 1.0)):
            recs.append(ledger.record(ben, kernel=f"b::test_packed[dense-N1024-H8-D128-L{L}-{impl}]",
                                      verdict="pass", metrics={"impl": impl, "speedup_vs_sdpa": s_, "median_ms": 0.1}))
    recs.append(ledger.record(ben, kernel="b::test_nsa[nsa-T4096-random-triton]", verdict="pass",
                              metrics={"impl": "triton", "speedup_vs_sdpa": 90.0, "median_ms": 0.84}))
    recs.append(ledger.record(ben, kernel="b::test_nsa[nsa-T4096-random-fla]", verdict="pass",
                              metrics={"impl": "fla", "speedup_vs_sdpa": 60.0, "median_ms": 1.29}))
    md = ledger.render_matrix(TABLE, recs, [], ledger.lane_verdicts(TABLE, recs, []), "ledger.jsonl")
    row = next(ln for ln in md.splitlines() if ln.startswith("| 3.9.0 | NVIDIA H100 |"))
    assert "| 2/2 | 9.00e-03 | 1.10 | 1.05x/0.97x (median 1.01x) | 0.84 ms, 90x SDPA, fla 1.29 ms | — |" in row
    assert "(off-pair)" in row
    assert not any(ln.startswith("| 3.1.0 | ") and "H100" in ln for ln in md.splitlines())  # CPU-only lanes: no row


# --- pin end to end ------------------------------------------------------------------------------

def _write_runs(results, recs):
    by_session = {}
    for r in recs:
        by_session.setdefault(r["session"], []).append(r)
    for session, rs in by_session.items():
        ledger.write_run(ledger.run_file(results, session), base=rs[0], status="complete",
                         started=rs[0]["date"], records=rs)


def test_pin_merges_renders_and_survives_an_interrupted_lane(tmp_path):
    results, out = tmp_path / "results", tmp_path / "constraints"
    _write_runs(results, _mixed())
    crashed = _base("3.9", "parity", "2026-11-22T17:00:00+00:00")
    ledger.write_run(ledger.run_file(results, "parity-3.9"), base=crashed, status="running",
                     started=crashed["date"], records=[])
    paths = (out / "ledger.jsonl", out / "MATRIX.md", out / "known-good.txt")
    logs = []
    res = ledger.pin([results], *paths, table=TABLE, windows=[], log=logs.append)
    assert res["verdicts"]["3.9"][0] is False  # interrupted parity run supersedes the pass
    assert any("parity-3.9 is running" in w for w in res["warnings"])
    rows = [json.loads(ln) for ln in paths[0].read_text().splitlines()]  # valid JSON lines
    assert any(r["verdict"] == "interrupted" for r in rows)
    assert "**INTERRUPTED**" in paths[1].read_text()
    kg = paths[2].read_text()
    assert "3.9.0" in kg and "parity interrupted" in kg
    # pinning the same results again changes nothing
    before = [p.read_text() for p in paths[:1]]
    ledger.pin([results], *paths, table=TABLE, windows=[], log=logs.append)
    assert [p.read_text() for p in paths[:1]] == before


def test_pin_crash_midway_leaves_previous_ledger_intact(tmp_path, monkeypatch):
    results, out = tmp_path / "results", tmp_path / "c"
    _write_runs(results, _all_pass("3.5"))
    paths = (out / "ledger.jsonl", out / "MATRIX.md", out / "known-good.txt")
    ledger.pin([results], *paths, table=TABLE, windows=[], log=lambda *_: None)
    good = paths[0].read_text()
    _write_runs(results, _recs("3.5", "parity", ["fail"], "2026-11-23T00:00:00+00:00"))
    real_replace = os.replace

    def crash_on_ledger(src, dst):
        if str(dst).endswith("ledger.jsonl"):
            raise KeyboardInterrupt
        return real_replace(src, dst)

    monkeypatch.setattr(ledger.os, "replace", crash_on_ledger)
    with pytest.raises(KeyboardInterrupt):
        ledger.pin([results], *paths, table=TABLE, windows=[], log=lambda *_: None)
    assert paths[0].read_text() == good
    assert sorted(os.listdir(out)) == ["MATRIX.md", "known-good.txt", "ledger.jsonl"]


def test_junit_failure_inside_known_bad_window_becomes_xfail():
    xml = ('<testsuite><testcase classname="t" name="a"><failure message="boom"/></testcase>'
           '<testcase classname="t" name="b"/></testsuite>')
    windows = known_bad.parse('schema = 1\n[[window]]\nid = "w"\ntriton = "<3.2"\nchecks = ["parity"]\n'
                              'reason = "interp gap"\n')
    recs = ledger.records_from_junit(xml, _base("3.1", "parity"), windows)
    assert [r["verdict"] for r in recs] == ["xfail", "pass"] and "[w] interp gap" in recs[0]["message"]
    assert [r["verdict"] for r in ledger.records_from_junit(xml, _base("3.3", "parity"), windows)] == ["fail", "pass"]
    gpu_fp = {**CPU_FP, "torch": "2.5.1", "cuda_runtime": "12.4", "gpu_name": "H100", "compute_capability": "9.0"}
    arch_windows = known_bad.parse('schema = 1\n[[window]]\nid = "h"\ntriton = "<3.2"\narch = [90]\nreason = "r"\n')
    recs = ledger.records_from_junit(xml, _base("3.1", "parity", mode="gpu", fp=gpu_fp), arch_windows)
    assert recs[0]["verdict"] == "xfail"
    assert ledger.records_from_junit(xml, _base("3.1", "parity"), arch_windows)[0]["verdict"] == "fail"


def test_smoke_skipped_variants_and_static_findings_are_recorded():
    report = {"results": [], "skipped": [{"spec": "big", "arch": 90, "why": "not launched there"}],
              "static": {"m:k1": {"needs": ">=3.0", "findings": [], "installed_ok": True},
                         "m:k2": {"needs": ">=3.4", "installed_ok": False,
                                  "findings": [{"line": 7, "api": "tl.make_tensor_descriptor", "needs": ">=3.4"}]}}}
    recs = ledger.records_from_smoke(report, _base("3.1", "compile"), [])
    got = [(r["check"], r["kernel"], r["verdict"]) for r in recs]
    assert got == [("compile", "big", "skip"), ("compile-static", "m:k1", "pass"), ("compile-static", "m:k2", "fail")]
    assert "line 7: tl.make_tensor_descriptor (>=3.4)" in recs[2]["message"]


def test_interp_only_window_turns_interp_failures_into_xfail_without_excluding():
    windows = known_bad.parse('schema = 1\n[[window]]\nid = "i"\ntriton = "<3.2"\nchecks = ["parity"]\n'
                              'modes = ["interp"]\nreason = "interp gap"\n')
    xml = '<testsuite><testcase classname="t" name="a"><failure message="boom"/></testcase><testcase classname="t" name="b"/></testsuite>'
    parity = ledger.records_from_junit(xml, _base("3.1", "parity"), windows)
    assert [r["verdict"] for r in parity] == ["xfail", "pass"]
    recs = _recs("3.1", "compile", ["pass"]) + parity
    ok, why = ledger.lane_verdicts(TABLE, recs, windows)["3.1"]
    assert ok and why == []
    kg = ledger.render_known_good(TABLE, ledger.lane_verdicts(TABLE, recs, windows), windows, "l")
    assert "# note: [i]" in kg and "interpreter defect" in kg


def test_tidy_message_unwraps_nested_interpreter_errors():
    raw = ("triton.runtime.errors.InterpreterError: InterpreterError('InterpreterError(\\'AttributeError("
           "\"\\\\\\'int\\\\\\' object has no attribute \\\\\\'to\\\\\\'\")\\')')")
    assert ledger.tidy_message(raw) == "AttributeError(\"'int' object has no attribute 'to'\")"
    assert ledger.tidy_message("AssertionError: 1 != 2") == "AssertionError: 1 != 2"


def test_junit_properties_become_metrics():
    from nsa_triton_sel.compat import ledger

    xml = ('<testsuites><testsuite><testcase classname="t" name="a" time="0.5"><properties>'
           '<property name="max_abs_err" value="1.5e-03"/><property name="note" value="x"/>'
           '</properties></testcase></testsuite></testsuites>')
    base = {"triton": "3.6.0", "check": "parity", "mode": "gpu", "compute_capability": "9.0"}
    rec = ledger.records_from_junit(xml, base, windows=[])[0]
    assert rec["metrics"]["max_abs_err"] == 1.5e-3 and "note" not in rec["metrics"]


def test_static_findings_of_canary_kernels_are_not_verdicts():
    report = {"results": [{"spec": "c", "kernel": "block_ptr", "arch": 80, "verdict": "compile_error",
                           "canary": True, "as_expected": True},
                          {"spec": "s", "kernel": "sel_fwd_kernel", "arch": 80, "verdict": "ok", "canary": False}],
              "static": {"/x/tests/canaries/kernels.py:block_ptr": {"needs": "<3.9", "installed_ok": False},
                         "nsa_triton_sel.kernels.forward:sel_fwd_kernel": {"needs": ">=3.0", "installed_ok": True}}}
    recs = ledger.records_from_smoke(report, _base("3.9", "compile"), [])
    assert [(r["check"], r["kernel"]) for r in recs if r["check"] == "compile-static"] == [
        ("compile-static", "nsa_triton_sel.kernels.forward:sel_fwd_kernel")]
