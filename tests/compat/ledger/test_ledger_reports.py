"""Records from what a lane's processes wrote: the smoke report, junit XML, pytest-benchmark JSON."""

from __future__ import annotations

import ledger_factory as F
from nsa_triton_sel import known_bad
from nsa_triton_sel.compat import ledger


def test_records_from_smoke_maps_verdicts_canaries_and_known_bad():
    report = {"env": {"TRITON_DEFAULT_FP_FUSION": "1"}, "results": [
        {"spec": "a", "arch": 80, "verdict": "ok", "canary": False, "seconds": 1.0, "metrics": {"shared": 1}},
        {"spec": "b", "arch": 90, "verdict": "crash", "message": "rc=134", "canary": False},
        {"spec": "c", "arch": 100, "verdict": "crash", "message": "rc=134", "canary": False},
        {"spec": "bad", "arch": 80, "verdict": "compile_error", "canary": True, "as_expected": True},
        {"spec": "bad2", "arch": 80, "verdict": "ok", "canary": True, "as_expected": False},
    ]}
    windows = known_bad.parse('schema = 1\n[[window]]\nid = "bw"\ntriton = "<3.2"\narch = [100]\nreason = "r"\n')
    recs = ledger.records_from_smoke(report, F.base("3.1", "compile"), windows)
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
    recs = ledger.records_from_junit(xml, F.base("3.9", "parity"))
    assert [(r["kernel"], r["verdict"]) for r in recs] == [
        ("tests.t::ok", "pass"), ("tests.t::bad[fp16]", "fail"), ("tests.t::err", "error"),
        ("tests.t::sk", "skip"), ("tests.t::xf", "xfail")]
    assert recs[1]["message"] == "assert 1 == 2" and recs[0]["metrics"]["seconds"] == 0.5


def test_attach_benchmarks_by_test_name():
    recs = [ledger.record(F.base("3.9", "bench", mode="gpu"), kernel="bench.t::test_fwd[triton]", verdict="pass")]
    ledger.attach_benchmarks(recs, {"benchmarks": [{"name": "test_fwd[triton]", "stats": {"median": 1e-3, "ops": 1000},
                                                    "extra_info": {"tflops": 300.0}}]})
    assert recs[0]["metrics"]["median_s"] == 1e-3 and recs[0]["metrics"]["tflops"] == 300.0


# --- atomic writes -------------------------------------------------------------------------------


def test_junit_failure_inside_known_bad_window_becomes_xfail():
    xml = ('<testsuite><testcase classname="t" name="a"><failure message="boom"/></testcase>'
           '<testcase classname="t" name="b"/></testsuite>')
    windows = known_bad.parse('schema = 1\n[[window]]\nid = "w"\ntriton = "<3.2"\nchecks = ["parity"]\n'
                              'reason = "interp gap"\n')
    recs = ledger.records_from_junit(xml, F.base("3.1", "parity"), windows)
    assert [r["verdict"] for r in recs] == ["xfail", "pass"] and "[w] interp gap" in recs[0]["message"]
    assert [r["verdict"] for r in ledger.records_from_junit(xml, F.base("3.3", "parity"), windows)] == ["fail", "pass"]
    gpu_fp = {**F.CPU_FP, "torch": "2.5.1", "cuda_runtime": "12.4", "gpu_name": "H100", "compute_capability": "9.0"}
    arch_windows = known_bad.parse('schema = 1\n[[window]]\nid = "h"\ntriton = "<3.2"\narch = [90]\nreason = "r"\n')
    recs = ledger.records_from_junit(xml, F.base("3.1", "parity", mode="gpu", fp=gpu_fp), arch_windows)
    assert recs[0]["verdict"] == "xfail"
    assert ledger.records_from_junit(xml, F.base("3.1", "parity"), arch_windows)[0]["verdict"] == "fail"


def test_smoke_skipped_variants_and_static_findings_are_recorded():
    report = {"results": [], "skipped": [{"spec": "big", "arch": 90, "why": "not launched there"}],
              "static": {"m:k1": {"needs": ">=3.0", "findings": [], "installed_ok": True},
                         "m:k2": {"needs": ">=3.4", "installed_ok": False,
                                  "findings": [{"line": 7, "api": "tl.make_tensor_descriptor", "needs": ">=3.4"}]}}}
    recs = ledger.records_from_smoke(report, F.base("3.1", "compile"), [])
    got = [(r["check"], r["kernel"], r["verdict"]) for r in recs]
    assert got == [("compile", "big", "skip"), ("compile-static", "m:k1", "pass"), ("compile-static", "m:k2", "fail")]
    assert "line 7: tl.make_tensor_descriptor (>=3.4)" in recs[2]["message"]


def test_tidy_message_unwraps_nested_interpreter_errors():
    raw = ("triton.runtime.errors.InterpreterError: InterpreterError('InterpreterError(\\'AttributeError("
           "\"\\\\\\'int\\\\\\' object has no attribute \\\\\\'to\\\\\\'\")\\')')")
    assert ledger.tidy_message(raw) == "AttributeError(\"'int' object has no attribute 'to'\")"
    assert ledger.tidy_message("AssertionError: 1 != 2") == "AssertionError: 1 != 2"


def test_junit_properties_become_metrics():
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
              "static": {"nsa_triton_sel.compat.canaries.kernels:block_ptr": {"needs": "<3.9", "installed_ok": False},
                         "nsa_triton_sel.kernels.forward:sel_fwd_kernel": {"needs": ">=3.0", "installed_ok": True}}}
    recs = ledger.records_from_smoke(report, F.base("3.9", "compile"), [])
    assert [(r["check"], r["kernel"]) for r in recs if r["check"] == "compile-static"] == [
        ("compile-static", "nsa_triton_sel.kernels.forward:sel_fwd_kernel")]


def test_smoke_records_carry_what_each_child_imported():
    report = {"results": [
        {"spec": "a", "arch": 80, "verdict": "ok", "imported": {"triton": "3.1.0", "numpy": None, "torch": None}},
        {"spec": "b", "arch": 90, "verdict": "crash", "imported": {"triton": "3.9.0"}},
    ], "skipped": [{"spec": "c", "arch": 90}]}
    recs = ledger.records_from_smoke(report, F.base("3.1", "compile"), [])
    assert [r["triton_imported"] for r in recs] == ["3.1.0", "3.9.0", None]
    assert [ledger.isolation_problem(r) is not None for r in recs] == [False, True, False]


def test_junit_records_carry_what_the_pytest_process_imported():
    xml = '<testsuite><testcase classname="t" name="a"/></testsuite>'
    imported = {"triton": "3.1.0", "numpy": "1.26.4", "torch": "2.13.0+cpu"}
    rec = ledger.records_from_junit(xml, F.base("3.1", "parity"), [], imported=imported)[0]
    assert (rec["triton_imported"], rec["process"]) == ("3.1.0", {"numpy": "1.26.4", "torch": "2.13.0+cpu"})


def test_backward_compiles_and_gradient_tests_are_the_backward_check():
    """The backward kernels' evidence has a check of its own: the matrix's backward column."""
    report = {"results": [
        {"spec": "sel_fwd/ranges/fp16/dk128-dv128/h16/prefill", "arch": 90, "verdict": "ok", "canary": False},
        {"spec": "sel_bwd_dkdv/fp16/dk128-dv128", "arch": 80, "verdict": "crash", "message": "rc=-6", "canary": False},
    ], "skipped": [{"spec": "sel_bwd_dq/fp16/dk128-dv128/h64", "arch": 90, "why": "row cap"}]}
    recs = ledger.records_from_smoke(report, F.base("3.1", "compile"))
    assert [(r["check"], r["verdict"]) for r in recs] == [("compile", "pass"), ("backward", "crash"),
                                                          ("backward", "skip")]
    xml = """<testsuite>
      <testcase classname="tests.library.kernels.test_kernels_interp" name="test_a"/>
      <testcase classname="tests.library.kernels.test_backward_interp" name="test_b"><failure message="dq off"/></testcase>
    </testsuite>"""
    recs = ledger.records_from_junit(xml, F.base("3.9", "parity"))
    assert [(r["check"], r["verdict"]) for r in recs] == [("parity", "pass"), ("backward", "fail")]


def test_known_good_requires_the_backward_check_when_the_table_does():
    from nsa_triton_sel.compat.ledger.cells import release_verdicts

    table = F.TABLE.__class__(**{**F.TABLE.__dict__, "required": ("compile", "parity", "backward")})
    good = F.all_pass("3.9") + F.recs("3.9", "backward", ["pass", "pass"], mode="aot")
    missing = F.all_pass("3.5")
    broken = F.all_pass("3.1") + F.recs("3.1", "backward", ["pass", "fail"], mode="interp")
    verdicts = release_verdicts(table, good + missing + broken, [])
    assert verdicts["3.9.0"] == (True, [])
    assert verdicts["3.5.1"] == (False, ["backward not run (no evidence in the ledger)"])
    ok, why = verdicts["3.1.0"]
    assert not ok and len(why) == 1 and why[0].startswith("backward fail")


def test_a_window_with_a_signature_excuses_only_its_own_failure():
    """Only the window's own abort may become xfail: excusing every compile failure on 3.0/3.1 sm_90 would
    also hide a 16-row compile error or a timeout that the window does not describe."""
    windows = known_bad.parse('schema = 1\n[[window]]\nid = "mma"\ntriton = "<3.2"\narch = [90]\nchecks = ["compile"]\n'
                              'signature = "layout conversion is only supported on Ampere"\nreason = "r"\n')
    report = {"results": [
        {"spec": "own", "arch": 90, "verdict": "crash", "canary": False,
         "message": "Assertion failed: mma -> mma layout conversion is only supported on Ampere"},
        {"spec": "other", "arch": 90, "verdict": "compile_error", "canary": False, "message": "16-row dot: error"},
        {"spec": "slow", "arch": 90, "verdict": "timeout", "canary": False, "message": "killed after 120 s"},
    ]}
    got = {r["kernel"]: r["verdict"] for r in ledger.records_from_smoke(report, F.base("3.1", "compile"), windows)}
    assert got == {"own": "xfail", "other": "fail", "slow": "timeout"}


def test_failures_a_window_takes_without_a_signature_are_named():
    """A window that names no failure signature (nor variants or paths) claims every failure of its checks there,
    a new defect included: the lane summary names how many it took, so they are read before the verdict is
    trusted; a window with a signature takes only its own and is not named."""
    xml = ('<testsuite><testcase classname="t" name="a"><failure message="worker crashed"/></testcase>'
           '<testcase classname="t" name="b"><failure message="NaN in rows with 2+ spans"/></testcase>'
           '<testcase classname="t" name="c"/></testsuite>')
    gpu_fp = {**F.CPU_FP, "torch": "2.5.1", "cuda_runtime": "12.4", "gpu_name": "H100", "compute_capability": "9.0"}
    base = F.base("3.1", "parity", mode="gpu", fp=gpu_fp)
    blanket = known_bad.parse('schema = 1\n[[window]]\nid = "any"\ntriton = "<3.2"\narch = [90]\nchecks = ["parity"]\n'
                              'reason = "r"\n')
    recs = ledger.records_from_junit(xml, base, blanket)
    assert [r["verdict"] for r in recs] == ["xfail", "xfail", "pass"]
    assert ledger.unscoped_known_bad(recs, blanket) == {"any": 2}
    assert "2 failure(s) taken as known-bad by a window that names no failure signature (2 by any)" in \
        ledger.unscoped_warning(recs, blanket)
    scoped = known_bad.parse('schema = 1\n[[window]]\nid = "nan"\ntriton = "<3.2"\narch = [90]\nchecks = ["parity"]\n'
                             'signature = "NaN in rows"\nreason = "r"\n')
    recs = ledger.records_from_junit(xml, base, scoped)
    assert [r["verdict"] for r in recs] == ["fail", "xfail", "pass"]
    assert ledger.unscoped_known_bad(recs, scoped) == {} and ledger.unscoped_warning(recs, scoped) is None
