"""check-upgrade's verdict logic (pure: records in, SAFE/BLOCKED/ENVIRONMENT out) and its CLI on run files."""

from __future__ import annotations

from nsa_triton_sel import known_bad
from nsa_triton_sel.compat.core import lane_table
from nsa_triton_sel.compat import ledger
from nsa_triton_sel.compat.commands import upgrade
from nsa_triton_sel.compat.core.verdicts import ENVIRONMENT

CAND = lane_table.Lane(label="3.10", triton="3.10.0", torch=(), python=">=3.11", numpy=">=1.26", candidate=True)
BASE = lane_table.Lane(label="3.9", triton="3.9.0", torch=("2.15.0",), python=">=3.11", numpy=">=1.26")
FP = {"python": "3.11.7", "torch": "2.13.0+cpu", "cuda_runtime": None, "numpy": "2.4.6"}


def _recs(lane, check, rows, mode=None):
    mode = mode or {"compile": "aot", "parity": "interp", "bench": "gpu"}[check]
    fp = {**FP, "imported": {"triton": lane.triton, "numpy": "2.4.6"}, "date": "2026-11-22T16:00:00+00:00"}
    base = ledger.base_record(lane, fp, check=check, mode=mode, session=f"{check}-x", run_id="r")
    return [ledger.record(base, kernel=k, verdict=v, arch=a, metrics=m or {}) for k, v, a, m in rows]


def _good(lane):
    return (_recs(lane, "compile", [("fwd", "pass", 80, {"shared": 1000}), ("fwd", "pass", 90, {"shared": 1000})])
            + _recs(lane, "parity", [("t1", "pass", None, None), ("t2", "pass", None, None)]))


def test_all_required_pass_is_safe():
    d = upgrade.judge("3.10.0", _good(CAND), "3.9.0", _good(BASE), windows=[])
    assert d.verdict == upgrade.SAFE and not d.reasons
    assert "SAFE" in d.render() and "no benchmark ran" in d.render()


def test_compile_regression_blocks_and_names_the_kernel():
    cand = (_recs(CAND, "compile", [("fwd", "pass", 80, None), ("fwd", "fail", 90, None)])
            + _recs(CAND, "parity", [("t1", "pass", None, None)]))
    cand[1]["message"] = "CompilationError: out of resource: shared memory"
    d = upgrade.judge("3.10.0", cand, "3.9.0", _good(BASE), windows=[])
    assert d.blocked
    assert d.reasons == ["regression in compile: `fwd` [sm_90] passed on the baseline, fail now: "
                         "CompilationError: out of resource: shared memory"]


def test_failure_without_baseline_still_blocks():
    cand = _recs(CAND, "compile", [("fwd", "crash", 80, None)]) + _recs(CAND, "parity", [("t1", "pass", None, None)])
    d = upgrade.judge("3.10.0", cand, None, [], windows=[])
    assert d.blocked and d.reasons[0].startswith("compile: crash: `fwd` [sm_80]")
    assert any("no known-good release" in n for n in d.notes)


def test_missing_parity_blocks():
    d = upgrade.judge("3.10.0", _recs(CAND, "compile", [("fwd", "pass", 80, None)]), "3.9.0", _good(BASE),
                       windows=[])
    assert d.blocked and d.reasons == ["parity: not run"]


def test_install_failure_is_an_environment_verdict_not_a_regression():
    doc = {"status": "error", "session": "compile-candidate", "started": "2026-11-22T16:00:00+00:00",
           "note": "set-up failed: CommandFailed: uv pip install triton==3.10.0: no matching distribution",
           "stage": "set-up", "base": {"lane": "3.10", "triton": "3.10.0", "check": "compile", "mode": "aot",
                                       "candidate": True, "run_id": "r"}}
    d = upgrade.judge("3.10.0", ledger.records_of_run(doc), "3.9.0", _good(BASE), windows=[])
    assert d.verdict == ENVIRONMENT and "no matching distribution" in d.reasons[0]
    assert not any("regression" in r for r in d.reasons) and "ENVIRONMENT" in d.render()


def test_a_wrong_interpreter_probe_is_an_environment_verdict():
    """3.5.0 with the newest lane's numpy 2.4: the interpreter breaks; that is the environment's fault."""
    cand = _good(CAND) + _recs(CAND, "parity", [("interpreter-probe", "error", None, None)])
    cand[-1]["message"] = "TypeError: only 0-dimensional arrays can be converted to Python scalars"
    d = upgrade.judge("3.10.0", cand, "3.9.0", _good(BASE), windows=[])
    assert d.verdict == ENVIRONMENT and "interpreter is not trustworthy" in d.reasons[0]


def test_records_from_another_triton_are_an_environment_verdict():
    cand = _good(CAND)
    cand[0] = ledger.enforce_isolation({**cand[0], "triton_imported": "3.9.0"})
    d = upgrade.judge("3.10.0", cand, "3.9.0", _good(BASE), windows=[])
    assert d.verdict == ENVIRONMENT and "imported triton 3.9.0" in d.reasons[0]


def test_all_arch_known_bad_window_blocks_arch_window_only_notes():
    windows = known_bad.parse('schema = 1\n[[window]]\nid = "a"\ntriton = ">=3.10"\nreason = "miscompile"\n'
                              '[[window]]\nid = "b"\ntriton = ">=3.10"\narch = [100]\nreason = "sm100 abort"\n')
    d = upgrade.judge("3.10.0", _good(CAND), "3.9.0", _good(BASE), windows=windows)
    assert d.blocked and d.reasons == ["known-bad window [a]: miscompile"]
    assert any("[b]" in n for n in d.notes)


def test_window_is_compared_as_a_version_not_a_string():
    windows = known_bad.parse('schema = 1\n[[window]]\nid = "old"\ntriton = "<3.2"\nreason = "old"\n')
    assert not upgrade.judge("3.10.0", _good(CAND), "3.9.0", _good(BASE), windows=windows).blocked


def test_bench_slowdown_blocks_and_metric_growth_is_a_note():
    cand = _good(CAND) + _recs(CAND, "bench", [("b1", "pass", None, {"median_s": 1.3e-3})])
    cand[0]["metrics"] = {"shared": 2000}
    base = _good(BASE) + _recs(BASE, "bench", [("b1", "pass", None, {"median_s": 1.0e-3})])
    d = upgrade.judge("3.10.0", cand, "3.9.0", base, windows=[], max_slowdown=0.10)
    assert d.blocked and "+30%" in d.reasons[0]
    assert any("shared 1000 -> 2000" in n for n in d.notes)
    assert not upgrade.judge("3.10.0", cand, "3.9.0", base, windows=[], max_slowdown=0.5).blocked


def test_a_benchmark_compares_with_its_run_from_another_bench_folder():
    moved = "bench.suites.test_bench_sel::test_nsa[T8192-random]"
    cand = _good(CAND) + _recs(CAND, "bench", [(moved, "pass", None, {"median_s": 1.3e-3})])
    base = _good(BASE) + _recs(BASE, "bench", [("bench.test_bench_sel::test_nsa[T8192-random]", "pass", None,
                                                {"median_s": 1.0e-3})])
    d = upgrade.judge("3.10.0", cand, "3.9.0", base, windows=[], max_slowdown=0.10)
    assert d.blocked and "test_bench_sel::test_nsa[T8192-random]" in d.reasons[0] and "+30%" in d.reasons[0]
    assert upgrade.test_name("(pytest)") == "(pytest)" and upgrade.test_name("sel_fwd_kernel/a.b") == "sel_fwd_kernel/a.b"
    for name in ("tests/library/kernels/test_bind.py::t[x.y]", "tests.library.kernels.test_bind::t[x.y]",
                 "tests/test_bind.py::t[x.y]", "test_bind::t[x.y]"):
        assert upgrade.test_name(name) == "test_bind::t[x.y]", name


def test_a_parity_regression_is_found_across_test_folders():
    cand = _good(CAND) + _recs(CAND, "parity", [("tests.library.kernels.test_kernels_gpu::test_fwd[a]", "fail",
                                                 None, None)])
    base = _good(BASE) + _recs(BASE, "parity", [("tests/test_kernels_gpu.py::test_fwd[a]", "pass", None, None)])
    d = upgrade.judge("3.10.0", cand, "3.9.0", base, windows=[], max_slowdown=0.10)
    assert any("regression in parity: `test_kernels_gpu::test_fwd[a]`" in r for r in d.reasons), d.reasons


def test_baseline_is_the_nearest_known_good_release():
    table = lane_table.Table(lanes=(BASE, lane_table.Lane(label="3.8", triton="3.8.0", torch=("2.14.1",),
                                                python=">=3.10", numpy=">=1.26")))
    recs = _good(table.lanes[0]) + _good(table.lanes[1])
    assert upgrade.baseline_release(table, recs, [], "3.10.0").triton == "3.9.0"
    assert upgrade.baseline_release(table, recs, [], "3.8.5").triton == "3.8.0"
    assert upgrade.baseline_release(table, recs, [], "3.7.0").triton == "3.8.0"  # none below: the oldest above
    recs = [r for r in recs if not (r["lane"] == "3.9" and r["check"] == "parity")]
    assert upgrade.baseline_release(table, recs, [], "3.10.0").triton == "3.8.0"


def test_cli_judges_run_files_and_exits_nonzero_when_blocked(tmp_path, capsys):
    cand = _recs(CAND, "compile", [("fwd", "fail", 80, None)])
    ledger.write_run(ledger.run_file(tmp_path, "compile-candidate"), base=cand[0], status="complete",
                     started="x", records=cand)
    rc = upgrade.main(["3.10.0", "--from-results", str(tmp_path), "--ledger", str(tmp_path / "none.jsonl")])
    out = capsys.readouterr().out
    assert rc == 1 and "BLOCKED" in out and "parity: not run" in out
