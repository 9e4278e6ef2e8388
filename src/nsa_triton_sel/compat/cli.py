"""The ``nsa-sel`` command line.

Each sub-command lives in the module that owns its logic and exposes
``main(argv: list[str]) -> int``; this file routes, so the heavy imports
(torch, triton) happen only for the command that needs them, and holds what
every command shares: the exit statuses, one-line errors (:func:`fail`), an
argument parser that reports in one line (:class:`Parser`), the ``--timeout``
type (:func:`seconds`) and ``--debug``.

Standard library only at import: the commands import it.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import math
import os
import re
import sys
import traceback

COMMANDS = {
    "doctor": ("nsa_triton_sel.compat.doctor", "print the environment fingerprint (python, torch, triton, CUDA, GPU)"),
    "smoke": ("nsa_triton_sel.compat.smoke", "compile every registered kernel variant ahead of time, in child processes"),
    "capture": ("nsa_triton_sel.compat.capture", "run a command and write the Triton kernel launches it made as compile specs"),
    "pin": ("nsa_triton_sel.compat.ledger", "merge lane results into the ledger; render MATRIX.md and known-good.txt"),
    "check-upgrade": ("nsa_triton_sel.compat.upgrade", "compile + parity check of a Triton release; --admit records a SAFE one; "
                      "--specs M: your own kernels instead"),
    "matrix": ("nsa_triton_sel.compat.team_matrix", "the verdict table of the compile lanes run over your spec module "
               "(-- --specs M --results DIR)"),
    "releases": ("nsa_triton_sel.compat.releases", "Triton releases and torch pins on the index that lanes.toml lacks"),
}

EXIT_STATUS = """exit status (every command):
  0  done; the answer is yes
  1  the answer is no: smoke, a variant is not ok; pin --check, the files are not one generation;
     check-upgrade, BLOCKED; releases --fail-on-new, something is new; matrix, a kernel does not compile
     on a release run
  2  bad usage or an input that cannot be used: one line on stderr names it and what was expected,
     and nothing is written
  3  check-upgrade: ENVIRONMENT (no verdict); smoke: only a canary differs from its expectation
  4  smoke: the children imported another Triton than --expect-triton"""

TOOLKIT_DEPS = {"rich", "nox"}  # the matrix extra; the kernel library needs none of them
# What each command imports of them, checked before it runs (a smoke used to compile for minutes, then
# fail to print its table).
NEEDS = {"smoke": ("rich",), "check-upgrade": ("nox",)}

DEBUG_ENV = "NSA_SEL_DEBUG"
_debug = False
MAX_SECONDS = 86400.0  # a day: any --timeout beyond it is a typo (and 1e300 overflows the timers)
MAX_MESSAGE = 2000  # characters of one error line (a 100 kB line is not read; its start says enough)


def debugging() -> bool:
    """``--debug`` (or ``$NSA_SEL_DEBUG=1``): errors show their traceback above the one-line message."""
    return _debug or os.environ.get(DEBUG_ENV, "") not in ("", "0")


def one_line(text: str) -> str:
    """``text`` as one printable line: line breaks and control characters escaped, length capped."""
    text = re.sub(r"\s*\n\s*", " | ", str(text).strip())
    text = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + " [...]"


def describe(exc: BaseException) -> str:
    """What went wrong, for a user: the toolkit's own errors already name the input and what was expected; an
    OSError says which file and the operating system's reason."""
    if isinstance(exc, OSError) and exc.strerror:
        where = exc.filename if exc.filename is not None else "a file"
        return f"{where}: {exc.strerror}"
    if isinstance(exc, RecursionError):
        return "an input is nested deeper than it can be read (RecursionError); nothing was written"
    if isinstance(exc, MemoryError):
        return "out of memory (an input far larger than this tool's files?); nothing was written"
    return str(exc) or type(exc).__name__


def fail(command: str, problem: BaseException | str, status: int = 2, unexpected: bool = False) -> int:
    """Report ``problem`` as ``nsa-sel COMMAND: ...`` in one line on stderr (under ``--debug`` its traceback
    first) and return ``status`` (2 by default: bad usage or an input that cannot be used).  ``unexpected``:
    an exception no command caught, named by its type with the way to see where it came from."""
    if isinstance(problem, BaseException):
        if debugging():
            traceback.print_exception(type(problem), problem, problem.__traceback__)
        text = describe(problem)
        if unexpected and not isinstance(problem, (OSError, RecursionError, MemoryError)):
            text = f"{type(problem).__name__}: {text} (unexpected; `nsa-sel --debug ...` shows where it came from)"
        problem = text
    print(f"nsa-sel {command}: {one_line(problem)}" if command else f"nsa-sel: {one_line(problem)}",
          file=sys.stderr, flush=True)
    return status


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (``nsa-sel CMD: ... (see --help)``), exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: {one_line(message)} (see '{self.prog} --help')\n")


def seconds(text: str) -> float:
    """A ``--timeout``: a finite number of seconds above 0, at most a day (``inf``, ``nan`` and 1e300 are typos,
    and overflow the timers they reach)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"expected seconds above 0 and at most {MAX_SECONDS:.0f}, got {text!r}")
    return value


def _usage() -> str:
    lines = ["usage: nsa-sel [--debug] COMMAND [options]", "", "commands:"]
    lines += [f"  {name:<14} {doc}" for name, (_, doc) in COMMANDS.items()]
    lines += ["", "'nsa-sel COMMAND --help' describes each command; --debug (anywhere, or $NSA_SEL_DEBUG=1) shows "
              "the traceback behind an error.", "", EXIT_STATUS]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    global _debug
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--debug" in argv:  # before or after the command: it changes nothing but the error output
        _debug = True
        argv = [a for a in argv if a != "--debug"]
    if argv[:1] in (["-h"], ["--help"]):
        print(_usage())
        return 0
    if not argv:
        print(_usage())
        return _top_level_error(f"no command given; accepted: {', '.join(COMMANDS)}")
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        return _top_level_error(f"unknown command {name!r}; accepted: {', '.join(COMMANDS)} ('nsa-sel --help' "
                                "describes them)")
    missing = [dep for dep in NEEDS.get(name, ()) if importlib.util.find_spec(dep) is None]
    if missing and not (name == "check-upgrade" and missing == ["nox"] and _nox_on_path()):
        return _missing(name, missing[0])
    try:
        module = importlib.import_module(COMMANDS[name][0])
        return int(module.main(rest) or 0)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in TOOLKIT_DEPS:
            return fail(name, exc, unexpected=True)
        return _missing(name, exc.name)
    except KeyboardInterrupt:
        return fail(name, "interrupted", 130)
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, never a traceback
        return fail(name, exc, unexpected=True)


def _top_level_error(message: str) -> int:
    return fail("", message)


def _nox_on_path() -> bool:
    import shutil  # noqa: PLC0415

    return shutil.which("nox") is not None


def _missing(command: str, dep: str) -> int:
    """`pip install .` installs the kernel library only; the toolkit's dependencies are the matrix extra."""
    return fail(command, f"needs {dep!r}, one of the toolkit's dependencies; install them with "
                "pip install '.[matrix]' in a checkout (or pip install rich nox)")


if __name__ == "__main__":
    sys.exit(main())
