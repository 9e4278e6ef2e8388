"""The ``nsa-sel`` command line.

Each sub-command lives in the module that owns its logic and exposes
``main(argv: list[str]) -> int``; this file only routes, so the heavy imports
(torch, triton) happen only for the command that needs them.
"""

from __future__ import annotations

import importlib
import importlib.util
import shutil
import sys

COMMANDS = {
    "doctor": ("nsa_triton_sel.compat.env", "print the environment fingerprint (python, torch, triton, CUDA, GPU)"),
    "smoke": ("nsa_triton_sel.compat.smoke", "compile every registered kernel variant ahead of time, in child processes"),
    "pin": ("nsa_triton_sel.compat.ledger", "merge lane results into the ledger; render MATRIX.md and known-good.txt"),
    "check-upgrade": ("nsa_triton_sel.compat.upgrade", "compile + parity check of a Triton release; --admit records a SAFE one"),
    "releases": ("nsa_triton_sel.compat.releases", "Triton releases and torch pins on the index that lanes.toml lacks"),
}


TOOLKIT_DEPS = {"rich", "filelock", "nox"}  # the matrix extra; the kernel library needs none of them
# What each command imports of them, checked before it runs (a smoke used to compile for minutes, then
# fail to print its table).
NEEDS = {"smoke": ("rich",), "pin": ("filelock",), "check-upgrade": ("nox", "filelock")}


def _usage() -> str:
    lines = ["usage: nsa-sel COMMAND [options]", "", "commands:"]
    lines += [f"  {name:<14} {doc}" for name, (_, doc) in COMMANDS.items()]
    lines += ["", "'nsa-sel COMMAND --help' describes each command."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"nsa-sel: unknown command {name!r}; accepted: {', '.join(COMMANDS)}\n", file=sys.stderr)
        print(_usage(), file=sys.stderr)
        return 2
    missing = [dep for dep in NEEDS.get(name, ()) if importlib.util.find_spec(dep) is None]
    if missing and not (name == "check-upgrade" and shutil.which("nox") and "nox" in missing and len(missing) == 1):
        return _missing(name, missing[0])
    try:
        module = importlib.import_module(COMMANDS[name][0])
        return int(module.main(rest) or 0)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in TOOLKIT_DEPS:
            raise
        return _missing(name, exc.name)


def _missing(command: str, dep: str) -> int:
    """`pip install .` installs the kernel library only; the toolkit's dependencies are the matrix extra."""
    print(f"nsa-sel {command}: needs {dep!r}, one of the toolkit's dependencies; install them with "
          "pip install '.[matrix]' in a checkout (or pip install rich filelock nox)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
