"""The ``nsa-sel`` router: one-line errors, the documented exit statuses, ``--debug``."""

from __future__ import annotations

import argparse
import types

import pytest

from nsa_triton_sel.compat.commands import cli
from nsa_triton_sel.compat.core.command import seconds, set_debugging


@pytest.fixture
def command(monkeypatch):
    """Route every command to a stand-in whose main raises what the test gives it."""
    def install(exc):
        def main(argv):
            raise exc
        monkeypatch.setattr(cli.importlib, "import_module", lambda name: types.SimpleNamespace(main=main))
    yield install
    set_debugging(False)


@pytest.mark.parametrize("exc, needle", [
    (KeyError("x"), "KeyError: 'x' (unexpected; `nsa-sel --debug ...` shows where it came from)"),
    (RecursionError("maximum recursion depth exceeded"), "nested deeper than it can be read"),
    (IsADirectoryError(21, "Is a directory", "constraints/known-good.txt"), "constraints/known-good.txt: Is a directory"),
    (ValueError("line one\nline two\x1b[31m"), "line one | line two\\x1b[31m"),
])
def test_an_exception_no_command_caught_is_one_line_exit_2(command, capsys, exc, needle):
    command(exc)
    assert cli.main(["releases"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nsa-sel releases: ") and needle in err and len(err.splitlines()) == 1, err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv", [["--debug", "pin"], ["pin", "--debug"]])
def test_debug_shows_the_traceback_before_or_after_the_command(command, capsys, argv):
    command(KeyError("x"))
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.rstrip().splitlines()[-1].startswith("nsa-sel pin: ")


def test_usage_errors_are_one_line(capsys):
    assert cli.main([]) == 2
    out, err = capsys.readouterr()
    assert "exit status (every command)" in out and err == f"nsa-sel: no command given; accepted: {', '.join(cli.COMMANDS)}\n"
    assert cli.main(["frobnicate"]) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1
    with pytest.raises(SystemExit) as exc:
        cli.main(["pin", "--frobnicate"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith("nsa-sel pin: unrecognized arguments") and len(err.splitlines()) == 1


@pytest.mark.parametrize("text", ["inf", "-inf", "nan", "0", "-1", "1e300", "86401", "x", ""])
def test_seconds_are_finite_positive_and_at_most_a_day(text):
    with pytest.raises(argparse.ArgumentTypeError):
        seconds(text)
    assert seconds("0.5") == 0.5 and seconds("86400") == 86400.0
