"""Blackwell and consumer targets: what a release that cannot target an arch gets.

No compile happens here: the toolchain is a fake ``ptxas`` (a shell script printing what a CUDA 12.4
ptxas prints) and the smoke's children are stand-ins, so each test takes milliseconds.
"""

import json
import re
import stat
import sys
import textwrap

from dataclasses import replace
from pathlib import Path

import ledger_factory as F
from blackwell_reproducers import SHFL_REDUCE
import pytest

from nsa_triton_sel import device, known_bad
from nsa_triton_sel.compat.smoke import aot
from nsa_triton_sel.compat.commands import doctor
from nsa_triton_sel.compat import ledger
from nsa_triton_sel.compat.registry import variants
from nsa_triton_sel.compat.core import env
from nsa_triton_sel.compat.ledger import archs
from nsa_triton_sel.compat.smoke import run as smoke_run
from nsa_triton_sel.compat.canaries import SPECS as CANARIES
from nsa_triton_sel.compat.registry.specs import SPECS
from nsa_triton_sel.compat.core.verdicts import COMPILE_ERROR, CRASH, OK, UNSUPPORTED

# What `ptxas --version` and `ptxas --help` of CUDA 12.4 (Triton 3.0's bundled one) print, abridged.
PTXAS_124 = textwrap.dedent("""\
    #!/bin/sh
    if [ "$1" = "--version" ]; then
      echo "ptxas: NVIDIA (R) Ptx optimizing assembler"
      echo "Cuda compilation tools, release 12.4, V12.4.131"
      exit 0
    fi
    cat <<'EOF'
    --gpu-name <gpu name>                               (-arch)
            Specify name of NVIDIA GPU to generate code for.
            Allowed values for this option:  'compute_50','compute_90','compute_90a','sm_50',
            'sm_80','sm_86','sm_89','sm_90','sm_90a'.
            Default value:  'sm_52'.

    --help                                              (-h)
            Print this help information on this tool.
            Allowed values: 'sm_100'.
    EOF
    """)
PTXAS_REJECTS_103 = "ptxas fatal   : Value 'sm_103a' is not defined for option 'gpu-name'"


@pytest.fixture
def ptxas124(tmp_path, monkeypatch):
    path = tmp_path / "ptxas"
    path.write_text(PTXAS_124)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(aot, "ptxas_path", lambda arch: str(path))
    return str(path)


def test_ptxas_that_predates_the_arch_names_its_version(ptxas124):
    version, names = aot.ptxas_targets(ptxas124)
    assert version == "CUDA 12.4, V12.4.131"
    assert "sm_90a" in names and "sm_100" not in names  # only the --gpu-name section counts
    why = aot.target_problem(100, "CalledProcessError: Command 'ptxas -v --gpu-name=sm_100' returned 255")
    assert why == "the bundled ptxas (CUDA 12.4, V12.4.131) cannot target sm_100: its --gpu-name accepts up to sm_90a"
    assert aot.target_problem(90, "ptxas failed") is None and aot.target_problem(89, "ptxas failed") is None


def test_a_front_end_error_is_the_kernels_even_where_ptxas_lacks_the_target(ptxas124):
    """Seen on the real 3.0 wheel for sm_100: a broadcast error never reaches ptxas, so it is no target problem."""
    exc = ValueError("Cannot broadcast, the expanded size of the tensor (1) must match the existing size (64)")
    assert aot.target_problem(100, str(exc)) is None
    assert aot.classify_exception(exc, 100)[0] == COMPILE_ERROR


def test_unreadable_ptxas_falls_back_to_its_message(monkeypatch):
    monkeypatch.setattr(aot, "ptxas_path", lambda arch: None)
    assert aot.target_problem(103, "ptxas failed") is None
    assert "rejects sm_103" in aot.target_problem(103, PTXAS_REJECTS_103)
    assert "version unknown" in aot.target_problem(103, PTXAS_REJECTS_103)


def _ptxas_failure():
    try:
        try:
            raise RuntimeError(f"Internal Triton PTX codegen error\n`ptxas` stderr:\n{PTXAS_REJECTS_103}\n")
        except RuntimeError as inner:
            raise RuntimeError("") from inner  # Triton 3.0-3.4: the outer text says nothing
    except RuntimeError as outer:
        return outer


def test_ptxas_rejecting_the_target_is_unsupported_not_a_compile_error(ptxas124):
    verdict, message = aot.classify_exception(_ptxas_failure(), 103)
    assert verdict == UNSUPPORTED
    assert message.startswith("the bundled ptxas (CUDA 12.4, V12.4.131) cannot target sm_103")
    assert "is not defined for option 'gpu-name'" in message  # Triton's own message is kept


def test_a_real_compile_error_on_a_supported_target_stays_one(ptxas124):
    exc = ValueError("Cannot broadcast, the expanded size of the tensor (1) must match")
    assert aot.classify_exception(exc, 90)[0] == COMPILE_ERROR
    assert aot.classify_exception(exc)[0] == COMPILE_ERROR


def test_compile_request_through_a_toolchain_without_the_target(ptxas124, monkeypatch):
    """The whole child path (compile_request) with triton.compile replaced by ptxas's refusal."""

    class FakeTriton:
        __version__ = "3.0.0"

        @staticmethod
        def compile(src, target, options):
            raise _ptxas_failure()

    monkeypatch.setattr(aot, "triton_api", lambda: (FakeTriton, None, lambda *a: a, "constants"))
    monkeypatch.setattr(aot, "_load_kernel", lambda ref: object())
    monkeypatch.setattr(aot, "derive_signature", lambda fn, req: ({}, {}))
    monkeypatch.setattr(aot, "make_source", lambda *a, **k: "src")
    req = SPECS[0].request(103)
    res = aot.compile_request(req)
    assert res["verdict"] == UNSUPPORTED and "CUDA 12.4" in res["message"] and res["target_unsupported"]


def _fake_child(probe_verdict, spec_verdict, calls):
    def run_child(req, workdir, timeout, python):
        calls.append((req["name"], req["arch"]))
        verdict = probe_verdict if req["name"] == "probe/dot" else spec_verdict
        message = {CRASH: "killed by SIGABRT (rc=-6): Assertion `computeCapability not supported' failed",
                   UNSUPPORTED: "the bundled ptxas (CUDA 12.4, V12.4.131) cannot target sm_100"}.get(verdict, "")
        return {"verdict": verdict, "message": message, "seconds": 0.1, "triton": "3.0.0",
                "imported": {"triton": "3.0.0"}}
    return run_child


def _smoke(monkeypatch, probe_verdict, spec_verdict):
    calls = []
    monkeypatch.setattr(smoke_run, "run_child", _fake_child(probe_verdict, spec_verdict, calls))
    monkeypatch.setattr(smoke_run, "forking", lambda: False)
    spec = next(s for s in SPECS if not s.skip)
    report = smoke_run.run_smoke([spec], archs=(100,), jobs=1, progress=False, expect_triton="3.0.0")
    return report, calls


def test_a_compiler_abort_on_the_probe_still_compiles_every_variant(monkeypatch):
    """Triton 3.0 on sm_100: each variant gets its own crash (a known-bad window names it), not an
    'unsupported' inferred from the probe."""
    report, calls = _smoke(monkeypatch, CRASH, CRASH)
    assert len(calls) == 2  # the probe and the variant
    (res,) = report.results
    assert res.verdict == CRASH and "computeCapability" in res.message


def test_a_target_the_toolchain_lacks_is_unsupported_with_the_reason(monkeypatch):
    report, calls = _smoke(monkeypatch, UNSUPPORTED, OK)
    assert calls == [("probe/dot", 100)]  # nothing else compiled
    (res,) = report.results
    assert res.verdict == UNSUPPORTED and "ptxas (CUDA 12.4, V12.4.131) cannot target sm_100" in res.message


def test_a_canary_is_not_judged_on_a_target_its_release_cannot_compile_for():
    """Canary block_ptr expects 'ok' before 3.9; on sm_100 with Triton 3.0's ptxas it cannot be ok, and that
    says nothing about the harness (seen on the real 3.0 wheel)."""
    canary = next(s for s in CANARIES if s.name == "canary/block_ptr")
    raw = {"verdict": UNSUPPORTED, "message": "the bundled ptxas (CUDA 12.4, V12.4.99) cannot target sm_100",
           "target_unsupported": True}
    res = smoke_run.make_result(canary, 100, raw, "3.0.0")
    assert res.expected is None and res.as_expected is None
    assert smoke_run.make_result(canary, 80, {**raw, "target_unsupported": False}, "3.0.0").as_expected is False


# ---------------------------------------------------------------- what MATRIX.md, known-good.txt and doctor say

BLACKWELL_TABLE = replace(F.TABLE, archs=(80, 90, 100, 120))


def _compiles(version, arch, verdicts, message=""):
    b = F.base(version, "compile")
    return [ledger.record(b, kernel=f"sel_fwd/v{i}", verdict=v, arch=arch, message=message)
            for i, v in enumerate(verdicts)]


def _blackwell_ledger():
    out = []
    for v in ("3.1.0", "3.3.0", "3.3.1", "3.5.0", "3.5.1", "3.9.0"):
        out += _compiles(v, 80, ["pass", "pass"]) + _compiles(v, 90, ["pass", "skip"])
        if v == "3.1.0":
            out += _compiles(v, 100, ["unsupported"] * 2, "the bundled ptxas (CUDA 12.4, V12.4.131) cannot "
                                                          "target sm_100: its --gpu-name accepts up to sm_90a")
            out += _compiles(v, 120, ["xfail"] * 2, "known-bad [triton30-sm100-abort] ... | killed by SIGABRT")
        else:
            out += _compiles(v, 100, ["pass", "pass"]) + _compiles(v, 120, ["pass", "pass"])
    gpu = F.base("3.5.1", "parity", mode="gpu")
    out.append(ledger.record({**gpu, "compute_capability": "9.0", "gpu": "NVIDIA H100 80GB HBM3"},
                             kernel="t::gpu", verdict="pass"))
    return out


def test_matrix_has_a_column_per_arch_and_says_compile_only():
    recs = _blackwell_ledger()
    text = ledger.render_matrix(BLACKWELL_TABLE, recs, [], ledger.release_verdicts(BLACKWELL_TABLE, recs, []),
                                "ledger.jsonl", "0123456789abcdef")
    section = text.split("## Evidence per arch")[1]
    assert "| Triton | sm_80 | sm_90 | sm_100 | sm_120 |" in section
    assert "| 3.1.0 | pass 2/2 | pass 1/2, 1 skip | unsupported | known-bad 2/2 |" in section
    assert "- sm_90: GPU runs on NVIDIA H100 80GB HBM3 (3.5.1) + compile" in section
    assert "- sm_100: compile only (no GPU run): every variant compiles on 3.3.0, 3.3.1, 3.5.0, 3.5.1, 3.9.0; " \
           "unsupported (the release's toolchain cannot target it) on 3.1.0" in section
    assert "- 3.1.0 sm_100: the bundled ptxas (CUDA 12.4, V12.4.131) cannot target sm_100" in section


def test_known_good_says_per_arch_what_is_known():
    recs = _blackwell_ledger()
    verdicts = ledger.release_verdicts(BLACKWELL_TABLE, recs, [])
    text = ledger.render_known_good(BLACKWELL_TABLE, verdicts, [], "ledger.jsonl", "0123456789abcdef", recs=recs)
    assert "#   sm_120: compile only (no GPU run): every variant compiles on 3.3.0, 3.3.1, 3.5.0, 3.5.1, 3.9.0; " \
           "known-bad on 3.1.0" in text
    assert "#   sm_80: compile only (no GPU run): every variant compiles on all 6 releases (3.1.0 - 3.9.0)" in text
    assert text.rstrip().splitlines()[-1].startswith("triton")  # still one constraint line, last


def test_doctor_tells_a_blackwell_user_it_is_compile_only():
    recs = _blackwell_ledger()
    said = archs.doctor_answer(100, recs, BLACKWELL_TABLE)
    assert "ONLY COMPILE EVIDENCE exists for sm_100" in said and "never ran on such a GPU" in said
    assert "ONLY COMPILE" not in archs.doctor_answer(90, recs, BLACKWELL_TABLE)
    assert "NOTHING is known about sm_103" in archs.doctor_answer(103, recs, BLACKWELL_TABLE)
    assert "no ledger found" in archs.doctor_answer(120, None)


def test_doctor_reads_the_project_ledger_for_the_asked_arch(tmp_path, monkeypatch, capsys):
    cons = tmp_path / "constraints"
    cons.mkdir()
    (cons / "lanes.toml").write_text(F.table_toml().replace('required = ["compile", "parity"]',
                                                            'required = ["compile", "parity"]\narchs = [80, 120]'))
    (cons / "ledger.jsonl").write_text(ledger.dump_ledger(_blackwell_ledger()))
    monkeypatch.setenv("NSA_SEL_CONSTRAINTS", str(cons))
    monkeypatch.setattr(env, "interpreter_usable", lambda *a, **k: {"status": "skipped"})
    assert doctor.main(["--json", "--no-interp", "--arch", "120"]) == 0
    said = json.loads(capsys.readouterr().out)["arch_evidence"]
    assert said.startswith("sm_120: compile only (no GPU run)") and "ONLY COMPILE EVIDENCE" in said


# ---------------------------------------------------------------- the Blackwell abort windows

REPO = Path(__file__).resolve().parents[2]
PATH_RE = re.compile(r"(?<![\w/])((?:[\w.-]+/)+[\w.-]+\.\w+)")


def test_every_window_link_names_files_that_exist():
    """A window's link is its evidence: every repository path it names must be in the repository."""
    for w in known_bad.load():
        paths = [p for p in PATH_RE.findall(w.link) if not p.startswith(("http", "www."))]
        for p in paths:
            assert (REPO / p.split("::")[0]).exists(), f"window {w.id}: link names {p}, not in the repository"
    abort = next(w for w in known_bad.load() if w.id == "triton30-sm100-abort")
    assert PATH_RE.findall(abort.link), "triton30-sm100-abort must link its evidence inside the repository"


def _installed_triton():
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


# The Blackwell compiler aborts: each window, the kernel that reproduces it (the smoke's probe, a 32x32 fp16
# tl.dot, for the AccelerateMatmul assertion; a dot-free cross-warp reduction, the backward's former
# sel_bwd_delta kept in blackwell_reproducers.py, for LLVM's).
BLACKWELL_ABORTS = {
    "triton30-sm100-abort": "probe/dot",
    "triton31-32-sm100-abort": "probe/dot",
    "triton30-sm100-llvm-abort": SHFL_REDUCE.name,
    "triton31-32-sm100-llvm-abort": SHFL_REDUCE.name,
}


def _reproducer(name: str, tmp_path):
    return smoke_run._probe_spec(tmp_path) if name == "probe/dot" else SHFL_REDUCE


def _window(wid: str):
    return next(w for w in known_bad.load() if w.id == wid)


def test_every_blackwell_abort_window_has_a_reproducer_here():
    ids = {w.id for w in known_bad.load() if w.signature and set(w.arch) >= {100, 103, 120} and "compile" in w.checks}
    assert ids == set(BLACKWELL_ABORTS), "a Blackwell compile-abort window without a reproducer below (or vice versa)"


@pytest.mark.parametrize("wid", sorted(BLACKWELL_ABORTS))
def test_reproducer_the_blackwell_aborts(wid, tmp_path):
    """Under a Triton inside the window, the window's kernel kills the compiler for sm_120 with its signature
    (sm_120: every window's releases abort there; 3.2 gets the reduction through for sm_100).

    Run with a lane's python (e.g. ``.nox/compile-3-1/bin/python -m pytest tests/compat/test_arch_targets.py
    -k reproducer``); outside the window's releases it is skipped with the reason."""
    from nsa_triton_sel.compat.smoke.children import run_child

    window, installed = _window(wid), _installed_triton()
    if installed is None or not window.covers(installed, 120, "compile", "aot"):
        pytest.skip(f"reproducer of window {wid}: needs Triton {window.triton} (installed: {installed}); run it "
                    "with that lane's python, e.g. .nox/compile-3-1/bin/python -m pytest -k reproducer")
    name = BLACKWELL_ABORTS[wid]
    spec = _reproducer(name, tmp_path)
    res = run_child(spec.request(120), tmp_path / "sm120", 300, sys.executable)
    assert res["verdict"] == CRASH and res["returncode"] == -6, res  # SIGABRT
    assert window.signature in res["message"], res["message"]


@pytest.mark.parametrize("name", sorted(set(BLACKWELL_ABORTS.values())))
def test_the_reproducers_compile_for_blackwell_outside_the_windows(name, tmp_path):
    """The other half of each reproducer: under a Triton no abort window covers (CI's 3.9), the same kernel
    compiles for sm_120, so the windows name the releases, not the kernels."""
    from nsa_triton_sel.compat.smoke.children import run_child

    installed = _installed_triton()
    inside = [w for w in BLACKWELL_ABORTS if installed and _window(w).covers(installed, 120, "compile", "aot")]
    if installed is None or inside:
        pytest.skip(f"Triton {installed} is inside {inside}: the reproducer itself runs here")
    spec = _reproducer(name, tmp_path)
    res = run_child(spec.request(120), tmp_path / "sm120", 300, sys.executable)
    assert res["verdict"] == OK, res


# ---------------------------------------------------------------- the planner's tables on the new archs

def test_a_variant_over_the_archs_shared_memory_is_a_compile_error():
    """sm_120 (RTX 50xx) gives a program 99 KiB, sm_100 227 KiB: the same cubin fits one, not the other."""
    spec = next(s for s in SPECS if not s.skip)
    raw = {"verdict": OK, "metrics": {"shared": 120 * 1024}, "seconds": 1.0}
    on_120 = smoke_run.make_result(spec, 120, dict(raw), "3.9.0")
    assert on_120.verdict == COMPILE_ERROR and "sm_120 allows 101376" in on_120.message
    assert smoke_run.make_result(spec, 100, dict(raw), "3.9.0").verdict == OK
    assert smoke_run.make_result(spec, 75, dict(raw), "3.9.0").verdict == OK  # not in the table: not judged


def test_the_registry_is_what_the_planner_launches_on_every_matrix_arch():
    """No window caps the new archs on 3.9, so the planner launches there exactly the registry's variants
    (planned once, for sm_90): one table for every arch (rows from known_bad.toml, tiles/warps/stages from
    kernels/meta.py, shared memory per program from device.SHARED_PER_BLOCK)."""
    from nsa_triton_sel import plan
    from nsa_triton_sel.compat.core import lane_table

    hopper = device.Device.target(90, "3.9.0")
    for arch in lane_table.load_table(REPO / "constraints" / "lanes.toml").archs:
        dev = device.Device.target(arch, "3.9.0")
        # (the warp-specialised key-major forward is Hopper's own: the registry compiles it for sm_90 alone)
        assert replace(dev, arch=90, gluon_ws=hopper.gluon_ws) == hopper and device.shared_limit(arch) is not None, arch
    forward = [s.name for s in SPECS  # +cap: 3.0/3.1 sm_90 only; the key-major forward has its own sweep
               if not s.name.startswith(("sel_bwd", "sel_fwd_keymajor")) and not s.only]
    assert [c.name for c in variants.smoke_cases(device.Device.target(120, "3.9.0"))] == forward


def test_the_ptxas_that_ran_names_the_reason(ptxas124, tmp_path):
    """Triton 3.3 runs ptxas-blackwell (CUDA 12.8) for sm_100+ while its lookup names ptxas (12.4): the
    reason must come from the binary in the failed command, not from the lookup."""
    newer = tmp_path / "bin" / "ptxas-blackwell"
    newer.parent.mkdir()
    newer.write_text(PTXAS_124.replace("release 12.4, V12.4.131", "release 12.8, V12.8.61")
                     .replace("'sm_90a'.", "'sm_90a','sm_100','sm_100a','sm_120','sm_120a'."))
    newer.chmod(newer.stat().st_mode | stat.S_IXUSR)
    err = f"CalledProcessError: Command '['{newer}', '-lineinfo', '-v', '--gpu-name=sm_103a', 'x.ptx']' returned 255"
    why = aot.target_problem(103, err)
    assert why == ("the bundled ptxas-blackwell (CUDA 12.8, V12.8.61) cannot target sm_103: its --gpu-name accepts "
                   "up to sm_120a"), why
    assert aot.target_problem(103, err.replace(str(newer), "/nonexistent/ptxas")).startswith(
        "the bundled ptxas (CUDA 12.4, V12.4.131)")  # a path that is not there: the lookup's binary
