"""What every ``nsa-sel`` command shares: one-line errors (:func:`fail`), an argument parser that reports
in one line (:class:`Parser`), the ``--timeout`` type (:func:`seconds`) and ``--debug``
(:func:`debugging`).  The router that picks the command is :mod:`..commands.cli`; the exit statuses are
listed there.

Standard library only at import: every command imports it.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import traceback

DEBUG_ENV = "NSA_SEL_DEBUG"
_debug = False
MAX_SECONDS = 86400.0  # a day: any --timeout beyond it is a typo (and 1e300 overflows the timers)
MAX_MESSAGE = 2000  # characters of one error line (a 100 kB line is not read; its start says enough)


def set_debugging(on: bool) -> None:
    """``--debug`` seen (the router sets it once per call; tests reset it)."""
    global _debug
    _debug = on


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
