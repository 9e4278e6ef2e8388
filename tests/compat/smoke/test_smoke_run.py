"""The smoke harness end to end, on the installed Triton, kept small for CI (2 cores).

One run compiles the canaries plus one real variant for sm_80 in child processes; the
abort and hang cases use stand-in "kernel modules" that abort or sleep when the child
imports them, so they cost no compile.
"""

import json
import signal
import sys
import time
from pathlib import Path

import pytest
from packaging.version import Version

from nsa_triton_sel.compat import smoke
from nsa_triton_sel.compat.canaries import SPECS as CANARIES
from nsa_triton_sel.compat.registry.specs import SPECS, CompileSpec, uncovered_kernels

HERE = Path(__file__).parent
REAL = "sel_fwd/ranges/fp16/dk64-dv64/h16/"


def _triton_version() -> Version:
    import triton

    return Version(triton.__version__)


@pytest.fixture(scope="module")
def report():
    real = next(s for s in SPECS if s.name.startswith(REAL))
    return smoke.run_smoke([real] + CANARIES, archs=(80,), jobs=2, timeout=300, progress=False,
                           expect_triton=str(_triton_version()))


def _get(report, name):
    return next(r for r in report.results if r.spec == name)


def test_real_variant_compiles_with_metrics(report):
    r = next(r for r in report.results if r.spec.startswith(REAL))
    assert r.verdict == "ok", r.message
    assert r.metrics["ptx_bytes"] > 0 and r.metrics["cubin_bytes"] > 0
    assert r.metrics["shared"] > 0 and r.metrics["mma"] == "mma.sync"
    assert report.failed == [] and report.exit_code == 0


def test_broadcast_canaries(report):
    load, store = _get(report, "canary/broadcast_load"), _get(report, "canary/broadcast_store")
    if _triton_version() < Version("3.5"):
        assert load.verdict == "compile_error" and "Cannot broadcast" in load.message
    else:
        assert load.verdict == "ok"
    assert store.verdict == "compile_error"
    assert load.as_expected and store.as_expected


def test_loop_bound_canary_is_a_crash(report):
    r = _get(report, "canary/loop_bound_tensor")
    assert r.verdict == "crash" and r.returncode == -signal.SIGABRT
    assert "isIntOrFloat" in r.message and r.as_expected


def test_block_pointer_canary(report):
    r = _get(report, "canary/block_ptr")
    if _triton_version() >= Version("3.9"):
        assert r.verdict in ("compile_error", "unsupported")
    else:
        assert r.verdict == "ok"
    assert r.as_expected


def test_json_has_the_ledger_keys(report):
    data = json.loads(report.to_json())
    for key in ("schema", "tool", "triton", "python", "platform", "started", "wall_s", "jobs", "archs", "env",
                "results"):
        assert key in data
    assert data["schema"] == 2 and data["tool"] == "nsa-sel smoke" and data["archs"] == [80]
    assert data["imported_tritons"] == [str(_triton_version())] and data["expected_triton"] == str(_triton_version())
    assert data["env"]["TRITON_DEFAULT_FP_FUSION"]
    row = data["results"][0]
    for key in ("spec", "kernel", "arch", "verdict", "message", "canary", "expected", "as_expected", "seconds",
                "metrics", "imported"):
        assert key in row
    assert row["kernel"] == "sel_fwd_kernel"
    for key in ("ptx_bytes", "cubin_bytes", "registers", "spills", "shared"):
        assert key in row["metrics"]


def _stand_in(tmp_path, body: str) -> str:
    """A kernel module whose ``triton.compile`` (as the child calls it) runs ``body`` instead."""
    path = tmp_path / "stand_in.py"
    path.write_text(
        "import os, sys, time\nimport triton\nimport triton.language as tl\n\n\n"
        "@triton.jit\ndef kernel(X, BLOCK: tl.constexpr):\n    tl.store(X + tl.arange(0, BLOCK), 0.0)\n\n\n"
        f"def _compile(*args, **kwargs):\n    {body}\n\n\ntriton.compile = _compile\n"
    )
    return f"{path}:kernel"


def _request(tmp_path, body):
    return CompileSpec(name="stand-in", kernel=_stand_in(tmp_path, body), constexprs={"BLOCK": 16}).request(80)


def test_sigabrt_child_is_a_crash_not_a_harness_failure(tmp_path):
    body = "print('Assertion `x` failed.', file=sys.stderr, flush=True); os.abort()"
    raw = smoke.run_child(_request(tmp_path, body), tmp_path / "work", timeout=120, python=sys.executable)
    assert raw["verdict"] == "crash" and raw["returncode"] == -signal.SIGABRT
    assert "SIGABRT" in raw["message"] and "Assertion `x` failed." in raw["message"]


def test_hanging_compile_becomes_a_timeout(tmp_path):
    t0 = time.perf_counter()
    raw = smoke.run_child(_request(tmp_path, "time.sleep(600)"), tmp_path / "work", timeout=3, python=sys.executable)
    assert raw["verdict"] == "timeout" and "killed" in raw["message"]
    assert time.perf_counter() - t0 < 60


def test_python_exception_in_compile_is_a_compile_error(tmp_path):
    body = "raise RuntimeError('outer') from ValueError('the root cause')"
    raw = smoke.run_child(_request(tmp_path, body), tmp_path / "work", timeout=120, python=sys.executable)
    assert raw["verdict"] == "compile_error" and raw["message"] == "ValueError: the root cause"


def test_failed_variant_sets_exit_code():
    rep = smoke.SmokeReport(triton="3.9.0", archs=[80], jobs=1, env={}, started="now")
    rep.results = [smoke.SmokeResult(spec="a", kernel="k", arch=80, verdict="crash"),
                   smoke.SmokeResult(spec="c", kernel="k", arch=80, verdict="crash", canary=True, as_expected=True)]
    assert [r.spec for r in rep.failed] == ["a"] and rep.exit_code == 1
    rep.results = rep.results[1:] + [smoke.SmokeResult(spec="d", kernel="k", arch=80, verdict="ok", canary=True,
                                                       as_expected=False)]
    assert rep.failed == [] and rep.exit_code == 3


def test_user_specs_example_through_the_cli(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(HERE))
    out = tmp_path / "smoke.json"
    rc = smoke.main(["--specs", "user_specs_example:SPECS", "--arch", "80", "--json", str(out), "--no-progress"])
    data = json.loads(out.read_text())
    assert rc == 0, capsys.readouterr().out
    assert {r["spec"] for r in data["results"]} == {"user/scaled_matmul/fp16/64x64x32",
                                                     "user/scaled_matmul/bf16/64x64x32"}
    assert all(r["verdict"] == "ok" for r in data["results"])
    assert "user/scaled_matmul/fp16/64x64x32" in capsys.readouterr().out


def test_wide_tiles_are_skipped_where_never_launched():
    # window triton30-31-sm90-mma64-abort names the 64-row, 8-warp ranges variants of Dk 192/256: only those
    wide = next(s for s in SPECS if s.name == "sel_fwd/ranges/bf16/dk256-dv256/h64/prefill+lse")
    assert wide.skipped("3.0.0", 90) and wide.skipped("3.1.0", 90)
    assert not wide.skipped("3.0.0", 80) and not wide.skipped("3.2.0", 90)
    other = next(s for s in SPECS if s.name == "sel_fwd/ranges/bf16/dk96-dv96/h64/prefill+lse")  # 64 rows, compiles
    assert not other.skipped("3.1.0", 90)
    # the window's skips: skipped on 3.1 and compiled on 3.6 (the key-major forward's shallow pipeline is skipped on
    # sm_90 on every release, the arch's own choice; the Gluon kernels are compiled from 3.6 on alone)
    assert sum(s.skipped("3.1.0", 90) and not s.skipped("3.6.0", 90) for s in SPECS
               if "+cap" not in s.name and "_ws/" not in s.name and "_gluon/" not in s.name) == 4
    capped = [s for s in SPECS if "+cap32" in s.name]
    assert len(capped) == 8 and not any(s.skipped("3.1.0", 90) for s in capped)
    rep = smoke.SmokeReport(triton="3.0.0", archs=[90], jobs=1, env={}, started="now",
                            skipped=[{"spec": wide.name, "arch": 90, "why": "x"}])
    assert json.loads(rep.to_json())["skipped"][0]["spec"] == wide.name and rep.exit_code == 0


def test_parse_archs():
    assert smoke.parse_archs("90,sm_80, 89") == [80, 89, 90]
    assert smoke.parse_archs([100, 120]) == [100, 120]


def test_registry_covers_every_kernel_dtype_and_head_dim():
    assert uncovered_kernels() == []
    assert set(uncovered_kernels(specs=[])) >= {"sel_fwd_kernel", "merge_splits_kernel"}  # not vacuous
    names = [s.name for s in SPECS]
    assert len(names) == len(set(names))
    for token in ("fp16", "bf16", "dk64", "dk128", "dk192", "+split", "merge_splits"):
        assert any(token in n for n in names), token
