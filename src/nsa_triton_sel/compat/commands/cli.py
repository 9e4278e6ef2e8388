"""The ``nsa-sel`` command line.

Each sub-command lives in the module that owns its logic and exposes
``main(argv: list[str]) -> int``; this file routes, so the heavy imports
(torch, triton) happen only for the command that needs them, and lists the
exit statuses every command keeps.  What the commands share (one-line errors,
the parser, ``--timeout``, ``--debug``) is :mod:`..core.command`.

Standard library only at import.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

from ..core.command import fail, set_debugging

COMMANDS = {
    "doctor": ("nsa_triton_sel.compat.commands.doctor", "print the environment fingerprint (python, torch, triton, CUDA, GPU)"),
    "smoke": ("nsa_triton_sel.compat.smoke", "compile every registered kernel variant ahead of time, in child processes"),
    "capture": ("nsa_triton_sel.compat.registry.capture",
                "run a command and write the Triton kernel launches it made as compile specs"),
    "pin": ("nsa_triton_sel.compat.ledger", "merge lane results into the ledger; render MATRIX.md and known-good.txt"),
    "check-upgrade": ("nsa_triton_sel.compat.commands.upgrade", "compile + parity check of a Triton release; --admit records a SAFE one; "
                      "--specs M: your own kernels instead"),
    "matrix": ("nsa_triton_sel.compat.commands.team_matrix", "the verdict table of the compile lanes run over your spec module "
               "(-- --specs M --results DIR)"),
    "releases": ("nsa_triton_sel.compat.commands.releases", "Triton releases and torch pins on the index that lanes.toml lacks"),
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
# What each command imports of them, checked before it runs (so a smoke never compiles for minutes only
# to fail at printing its table).
NEEDS = {"smoke": ("rich",), "check-upgrade": ("nox",)}


def _usage() -> str:
    lines = ["usage: nsa-sel [--debug] COMMAND [options]", "", "commands:"]
    lines += [f"  {name:<14} {doc}" for name, (_, doc) in COMMANDS.items()]
    lines += ["", "'nsa-sel COMMAND --help' describes each command; --debug (anywhere, or $NSA_SEL_DEBUG=1) shows "
              "the traceback behind an error.", "", EXIT_STATUS]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--debug" in argv:  # before or after the command: it changes nothing but the error output
        set_debugging(True)
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
