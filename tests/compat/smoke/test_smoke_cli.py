"""``nsa-sel smoke`` argument handling: clear messages, exit 2, checked before the run (never minutes into it)."""

from __future__ import annotations

import time

import pytest

from nsa_triton_sel.compat import smoke
from nsa_triton_sel.compat.smoke import cli


@pytest.fixture
def no_run(monkeypatch):
    """Fail the test if a run starts: every check here must happen up front."""

    def boom(*args, **kwargs):
        raise AssertionError("the run started before the arguments were checked")

    monkeypatch.setattr(cli, "run_smoke", boom)


def _main(capsys, *argv):
    try:
        rc = smoke.main([*argv, "--no-progress"])
    except SystemExit as exc:  # argparse's own type errors
        rc = exc.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, err


def _spec_module(tmp_path, body: str) -> str:
    path = tmp_path / "my_specs.py"
    path.write_text(body)
    return f"{path}:SPECS"


@pytest.mark.parametrize("body, expect", [
    ("SPECS = [\n", "SyntaxError"),
    ("import no_such_module_xyz\nSPECS = []\n", "ModuleNotFoundError: No module named 'no_such_module_xyz'"),
    ("SPECS = [{'name': 'x', 'kernel': 'm:k', 'constexpr': {}}]\n", "unknown CompileSpec field(s) ['constexpr']"),
    ("raise RuntimeError('broken at import')\n", "RuntimeError: broken at import"),
])
def test_bad_spec_module_is_a_clear_message_and_exit_2(tmp_path, capsys, no_run, body, expect):
    ref = _spec_module(tmp_path, body)
    rc, err = _main(capsys, "--specs", ref, "--arch", "80")
    assert rc == 2 and f"nsa-sel smoke: --specs {ref}:" in err and expect in err, err


def test_spec_module_that_hangs_at_import_does_not_hang_smoke(tmp_path, capsys, no_run):
    ref = _spec_module(tmp_path, "import time\ntime.sleep(600)\nSPECS = []\n")
    t0 = time.perf_counter()
    rc, err = _main(capsys, "--specs", ref, "--timeout", "3")
    assert rc == 2 and "did not finish in 3 s" in err
    assert time.perf_counter() - t0 < 60


def test_missing_spec_module(capsys, no_run):
    rc, err = _main(capsys, "--specs", "no_such_module_xyz:SPECS")
    assert rc == 2 and "No module named 'no_such_module_xyz'" in err


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "soon"])
def test_bad_timeout_is_rejected(capsys, no_run, value):
    rc, err = _main(capsys, "--timeout", value)
    assert rc == 2 and "--timeout" in err


@pytest.mark.parametrize("argv, expect", [
    (["--arch", "eighty"], "--arch: bad arch 'eighty'"),
    (["--jobs", "0"], "--jobs"),
    (["--python", "/nonexistent/python"], "--python /nonexistent/python: no such file"),
])
def test_bad_arguments(capsys, no_run, argv, expect):
    rc, err = _main(capsys, *argv)
    assert rc == 2 and expect in err, err


def test_python_that_is_not_executable(tmp_path, capsys, no_run):
    rc, err = _main(capsys, "--python", str(tmp_path))
    assert rc == 2 and "not an executable interpreter" in err


@pytest.mark.parametrize("body, expect", [
    ("#!/bin/sh\necho hello\n", "not a Python interpreter"),
    ("\x7fELF not really", "cannot run it"),
    ("#!/bin/sh\nsleep 60\n", "did not answer"),
])
def test_python_that_is_not_a_python_interpreter_is_refused_before_the_run(tmp_path, capsys, no_run, body, expect):
    """An executable that is not Python is refused up front, not left to end the run in an OSError."""
    exe = tmp_path / "python"
    exe.write_text(body)
    exe.chmod(0o755)
    t0 = time.monotonic()
    rc, err = _main(capsys, "--python", str(exe), "--timeout", "2")
    assert rc == 2 and expect in err and len(err.splitlines()) == 1, err
    assert time.monotonic() - t0 < 30


def test_a_spec_file_that_is_a_fifo_is_refused_without_starting_a_child(tmp_path, capsys, no_run, monkeypatch):
    import os

    os.mkfifo(tmp_path / "specs.py")
    monkeypatch.setattr(cli, "run_module", lambda *a, **k: pytest.fail("no child for a FIFO"))
    rc, err = _main(capsys, "--specs", f"{tmp_path / 'specs.py'}:SPECS")
    assert rc == 2 and "is not a regular file" in err


def test_a_refused_run_creates_no_keep_directory(tmp_path, capsys, no_run):
    rc, err = _main(capsys, "--keep", str(tmp_path / "keep" / "deeper"), "--specs", ":")
    assert rc == 2 and "--specs ':'" in err and not (tmp_path / "keep").exists()


def test_bad_keep_path(tmp_path, capsys, no_run):
    afile = tmp_path / "afile"
    afile.write_text("x")
    rc, err = _main(capsys, "--keep", str(afile))
    assert rc == 2 and "exists and is not a directory" in err
    rc, err = _main(capsys, "--keep", str(afile / "sub"))
    assert rc == 2 and "--keep" in err and "cannot create" in err


def test_bad_json_path_is_reported_before_the_run(tmp_path, capsys, no_run):
    rc, err = _main(capsys, "--json", str(tmp_path / "missing-dir" / "smoke.json"))
    assert rc == 2 and "does not exist" in err
    rc, err = _main(capsys, "--json", str(tmp_path))
    assert rc == 2 and "is a directory" in err


def test_duplicate_spec_names_are_usage_errors(capsys, no_run):
    rc, err = _main(capsys, "--specs", "builtin", "--specs", "builtin")
    assert rc == 2 and "duplicate spec name" in err


# ---------------------------------------------------------------- bad values refused before the run


def test_a_bad_expect_triton_is_refused_before_the_run(capsys, no_run):
    rc, err = _main(capsys, "--expect-triton", "garbage", "--arch", "80")
    assert rc == 2 and "--expect-triton" in err and "not a Triton version: 'garbage'" in err


def test_an_empty_spec_list_is_a_usage_error(tmp_path, capsys, no_run):
    ref = _spec_module(tmp_path, "SPECS = []\n")
    rc, err = _main(capsys, "--specs", ref, "--arch", "80")
    assert rc == 2 and "no compile specs to run" in err, err


def test_a_json_report_on_a_full_disk_is_one_line_and_never_a_0_byte_file(tmp_path, capsys, monkeypatch):
    import errno

    from nsa_triton_sel.compat.core import atomic
    from nsa_triton_sel.compat.smoke.report import SmokeReport

    report = SmokeReport(triton="3.9.0", archs=[80], jobs=1, env={}, started="now")
    monkeypatch.setattr(cli, "run_smoke", lambda *a, **k: report)
    out = tmp_path / "report.json"
    out.write_text('{"old": "report"}')

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", full)  # where a full disk shows up at the latest
    rc, err = _main(capsys, "--arch", "80", "--json", str(out))
    monkeypatch.undo()
    assert rc == 2 and "cannot write the report" in err and "No space left" in err, err
    assert out.read_text() == '{"old": "report"}' and [p.name for p in tmp_path.iterdir()] == ["report.json"]
