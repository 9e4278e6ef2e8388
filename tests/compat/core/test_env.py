"""``fingerprint()``, the interpreter probe and ``nsa-sel doctor`` on a CPU-only machine."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from importlib import metadata

import pytest
import torch

from nsa_triton_sel.compat.commands import doctor
from nsa_triton_sel.compat.core import env

REQUIRED = {
    "date", "python", "platform", "torch", "triton", "numpy", "cuda_runtime", "cuda_driver",
    "cuda_available", "gpu_name", "compute_capability", "sm_count", "git_commit",
    "TRITON_DEFAULT_FP_FUSION", "triton_env",
}


def test_fingerprint_has_every_field_and_is_json():
    fp = env.fingerprint()
    assert REQUIRED <= set(fp)
    assert json.loads(json.dumps(fp)) == fp
    assert fp["python"] == platform.python_version()
    assert fp["torch"] == torch.__version__
    assert fp["cuda_runtime"] == torch.version.cuda


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only answers")
def test_fingerprint_without_gpu_says_none():
    fp = env.fingerprint()
    assert fp["cuda_available"] is False and fp["gpu_count"] == 0
    for key in ("gpu_name", "compute_capability", "sm_count", "cuda_driver", "cuda_driver_api"):
        assert fp[key] is None


@pytest.mark.gpu
def test_fingerprint_with_gpu_names_it():
    fp = env.fingerprint()
    major, minor = torch.cuda.get_device_capability(0)
    assert fp["compute_capability"] == f"{major}.{minor}"
    assert fp["gpu_name"] == torch.cuda.get_device_name(0) and fp["sm_count"] > 0
    assert fp["cuda_driver"] or fp["cuda_driver_api"]  # nvidia-smi may be missing in a container


def test_fingerprint_records_triton_knobs(monkeypatch):
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "0")
    monkeypatch.setenv("TRITON_CACHE_DIR", "/tmp/somewhere")
    fp = env.fingerprint()
    assert fp["TRITON_DEFAULT_FP_FUSION"] == "0"
    assert fp["triton_env"]["TRITON_CACHE_DIR"] == "/tmp/somewhere"
    monkeypatch.setenv("TRITON_SOME_FUTURE_KNOB", "x")  # unknown knobs are recorded too
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    fp = env.fingerprint()
    assert fp["triton_env"]["TRITON_SOME_FUTURE_KNOB"] == "x" and fp["triton_env"]["CUDA_VISIBLE_DEVICES"] == "1"
    monkeypatch.delenv("TRITON_DEFAULT_FP_FUSION")
    fp = env.fingerprint()  # read fresh, not from the per-process cache
    assert fp["TRITON_DEFAULT_FP_FUSION"] is None and "TRITON_DEFAULT_FP_FUSION" not in fp["triton_env"]
    assert "HOME" not in fp["triton_env"]


def test_fingerprint_git_commit_is_a_sha_or_none():
    commit = env.fingerprint()["git_commit"]
    assert commit is None or (len(commit.removesuffix("-dirty")) == 40 and int(commit[:40], 16) >= 0)


def test_fingerprint_is_cheap_and_needs_no_triton_import(monkeypatch):
    # Benchmarks call it per row: no kernel runs, and it must work where importing
    # triton fails (None in sys.modules makes any `import triton` raise ImportError).
    monkeypatch.setitem(sys.modules, "triton", None)
    t0 = time.perf_counter()
    fp = env.fingerprint()
    assert time.perf_counter() - t0 < 2.0
    assert fp["triton"] == metadata.version("triton")


@pytest.mark.parametrize(
    "errs, status",
    [
        ({"add_max_err": 0.0, "dot_max_err": 2e-6}, "ok"),
        ({"add_max_err": 1e37, "dot_max_err": 2e-6}, "wrong"),  # Triton 3.0/3.1 + numpy 2.x
        ({"add_max_err": 0.0, "dot_max_err": 20.0}, "wrong"),
        ({"add_max_err": float("nan"), "dot_max_err": 0.0}, "wrong"),
    ],
)
def test_probe_verdict(errs, status):
    assert env._judge(errs)["status"] == status


def test_probe_reports_a_crash_as_error(monkeypatch):
    def fake_run(*args, **kwargs):
        err = "Traceback...\nTypeError: only 0-dimensional arrays\n"
        return subprocess.CompletedProcess(args, 1, stdout="", stderr=err)

    monkeypatch.setattr(env.subprocess, "run", fake_run)
    res = env.interpreter_usable()
    assert res["status"] == "error" and "TypeError: only 0-dimensional arrays" in res["detail"]


def test_probe_reports_a_timeout_as_error(monkeypatch):
    def fake_run(*args, **kwargs):
        raise subprocess.TimeoutExpired(args, kwargs.get("timeout"))

    monkeypatch.setattr(env.subprocess, "run", fake_run)
    assert env.interpreter_usable(timeout=1)["status"] == "error"


def test_probe_sets_triton_interpret_in_the_child_only(monkeypatch):
    seen = {}

    def fake_run(cmd, env=None, **kwargs):
        seen.update(env)
        out = env_mark({"add_max_err": 0.0, "dot_max_err": 0.0})
        return subprocess.CompletedProcess(cmd, 0, stdout=out, stderr="")

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(env.subprocess, "run", fake_run)
    assert env.interpreter_usable()["status"] == "ok"
    assert seen["TRITON_INTERPRET"] == "1"
    assert "TRITON_INTERPRET" not in os.environ


def env_mark(errs):
    return "noise\n" + env._PROBE_MARK + json.dumps(errs) + "\n"


def test_doctor_json_without_probe(capsys):
    assert doctor.main(["--json", "--no-interp"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert REQUIRED <= set(report) and report["interpreter"] == {"status": "skipped"}


def test_doctor_text_without_probe(capsys):
    assert doctor.main(["--no-interp"]) == 0
    out = capsys.readouterr().out
    for word in ("torch", "triton", "numpy", "compute_capability", "interpreter.status", torch.__version__):
        assert word in out


def test_nsa_sel_doctor_routes_through_the_cli(capsys):
    from nsa_triton_sel.compat.commands import cli

    assert cli.main(["doctor", "--no-interp"]) == 0
    assert "compute_capability" in capsys.readouterr().out


def test_nsa_sel_doctor_json_command_runs_with_the_probe():
    # The real command line in a fresh process, interpreter probe included (the one
    # run of the probe in this file: it costs a few seconds).
    res = subprocess.run(
        [sys.executable, "-m", "nsa_triton_sel.compat.commands.cli", "doctor", "--json"],
        capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert REQUIRED <= set(report) and report["torch"] == torch.__version__
    # triton 3.9 + numpy 2.4 is a known-good pair: the probe must say so.
    assert report["interpreter"]["status"] == "ok", report["interpreter"]
    assert report["interpreter"]["add_max_err"] == 0.0 and report["interpreter"]["dot_max_err"] < 1e-3


def test_doctor_text_on_a_terminal_uses_a_table(capsys, monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert doctor.main(["--no-interp"]) == 0
    out = capsys.readouterr().out
    assert "nsa-sel doctor" in out and "knobs.TRITON_DEFAULT_FP_FUSION" in out


def test_doctor_says_which_threshold_applies_and_why(capsys):
    """Doctor names the thresholds entry (or the default) in force, and why: a user on an unmeasured pair
    must see that the default applies, not a figure measured elsewhere."""
    from nsa_triton_sel.compat.commands.doctor import threshold_in_force

    measured = threshold_in_force("NVIDIA H100 80GB HBM3", "3.6.0")
    assert measured["value"] == 1 and "measured for NVIDIA H100 80GB HBM3 with Triton 3.6.0" in measured["why"]
    unmeasured = threshold_in_force("NVIDIA H100 80GB HBM3", "3.8.0")
    assert unmeasured["value"] == 1 and unmeasured["why"].startswith("default: ")
    assert "no CUDA GPU" in threshold_in_force(None, "3.9.0")["why"]
    assert doctor.main(["--json", "--no-interp"]) == 0
    assert "sel_triton_min_L" in json.loads(capsys.readouterr().out)


def test_the_callers_commit_wins_over_a_copied_checkouts_git(monkeypatch):
    """On the GPU machine the copied checkout's .git named the session's first commit (d8a4c4d-dirty) for
    code of a later one: NSA_SEL_GIT_COMMIT, which bench/device/run_release.sh's caller sets, must win."""
    env._static_fingerprint.cache_clear()
    monkeypatch.setenv("NSA_SEL_GIT_COMMIT", "94d3abacb0bf6bb5e3ea29587eb6d4dd4a2e7442")
    try:
        assert env.fingerprint()["git_commit"] == "94d3abacb0bf6bb5e3ea29587eb6d4dd4a2e7442"
    finally:
        env._static_fingerprint.cache_clear()


def _copy_constraints(tmp_path):
    import shutil

    from nsa_triton_sel.compat.core import project

    cdir = tmp_path / "constraints"
    shutil.copytree(project.constraints_dir(), cdir)
    return cdir


@pytest.mark.parametrize("which, damage, needle", [
    ("ledger.jsonl", lambda p: p.write_text('{"schema": 3,\n'), "ledger.jsonl:1: not a ledger record"),
    ("ledger.jsonl", lambda p: (p.unlink(), p.mkdir()), "is a directory, not a regular file"),
    ("lanes.toml", lambda p: p.write_text("schema = = 1\n"), "lanes.toml: not valid TOML"),
    ("known-good.txt", lambda p: p.write_bytes(b"\xff\xfe triton"), "known-good.txt: not UTF-8 text"),
    ("known-good.txt", lambda p: (p.unlink(), p.mkdir()), "known-good.txt: is a directory"),
    ("known-good.txt", lambda p: (p.unlink(), os.mkfifo(p)), "known-good.txt: is a FIFO"),
])
def test_doctor_on_a_damaged_project_file_prints_its_report_and_one_line(tmp_path, capsys, which, damage, needle):
    """A damaged project file is one line, never a traceback (LedgerError, TableError, UnicodeDecodeError,
    IsADirectoryError) or a hang (a FIFO known-good.txt), and the rest of doctor's report still prints."""
    from nsa_triton_sel.compat.commands import cli

    cdir = _copy_constraints(tmp_path)
    damage(cdir / which)
    t0 = time.monotonic()
    rc = cli.main(["doctor", "--no-interp", "--constraints", str(cdir)])
    out, err = capsys.readouterr()
    assert rc == 2 and time.monotonic() - t0 < 60
    assert err.startswith("nsa-sel doctor: ") and needle in err and len(err.splitlines()) == 1, err
    assert "known_good.status" in out and "python" in out  # the fingerprint is printed all the same


def test_debug_shows_the_traceback_behind_the_line(tmp_path, capsys):
    from nsa_triton_sel.compat.commands import cli
    from nsa_triton_sel.compat.core.command import set_debugging

    cdir = _copy_constraints(tmp_path)
    (cdir / "ledger.jsonl").write_text("garbage\n")
    assert cli.main(["doctor", "--no-interp", "--constraints", str(cdir)]) == 2
    assert "Traceback" not in capsys.readouterr().err
    try:
        assert cli.main(["--debug", "doctor", "--no-interp", "--constraints", str(cdir)]) == 2
    finally:
        set_debugging(False)
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "LedgerError" in err
    assert err.rstrip().splitlines()[-1].startswith("nsa-sel doctor: ")


def test_a_named_constraints_directory_that_is_not_one_is_an_error(tmp_path, capsys):
    from nsa_triton_sel.compat.commands import cli

    assert cli.main(["doctor", "--no-interp", "--constraints", str(tmp_path)]) == 2
    assert "no lanes.toml there" in capsys.readouterr().err


def test_without_numpy_the_probe_says_what_to_install(monkeypatch):
    """The matrix extra has no numpy: doctor must say what to install, not a bare `No module named 'numpy'`."""
    real = env.importlib.util.find_spec
    monkeypatch.setattr(env.importlib.util, "find_spec", lambda name, *a: None if name == "numpy" else real(name, *a))
    monkeypatch.setattr(env.subprocess, "run", lambda *a, **k: pytest.fail("no probe without numpy"))
    res = env.interpreter_usable()
    assert res["status"] == "error" and res["detail"].startswith("numpy not installed")
    assert res["fix"].startswith("pip install ") and "numpy" in res["fix"]
    from nsa_triton_sel.compat.core import lane_table, project

    release = lane_table.load_table(project.constraints_dir() / "lanes.toml").for_version(env.dist_version("triton"))
    if release is not None and release.numpy:  # the numpy lanes.toml pairs with the installed Triton
        assert f"numpy{release.numpy}" in res["fix"]


@pytest.mark.parametrize("arch", ["0", "-80", "1" + "0" * 40, "eighty", "sm_", "9" * 5000])
def test_doctor_arch_must_be_a_compute_capability(capsys, arch):
    from nsa_triton_sel.compat.commands import cli

    with pytest.raises(SystemExit) as exc:
        cli.main(["doctor", "--no-interp", "--arch", arch])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "expected a compute capability" in err and len(err.splitlines()) == 1
