"""The ``nsa-sel`` command line.

Each sub-command lives in the module that owns its logic and exposes
``main(argv: list[str]) -> int``; this file only routes, so the heavy imports
(torch, triton) happen only for the command that needs them.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "doctor": ("nsa_triton_sel.compat.env", "print the environment fingerprint (python, torch, triton, CUDA, GPU)"),
    "smoke": ("nsa_triton_sel.compat.smoke", "compile every registered kernel variant ahead of time, in child processes"),
    "pin": ("nsa_triton_sel.compat.ledger", "merge lane results into the ledger; render MATRIX.md and known-good.txt"),
    "check-upgrade": ("nsa_triton_sel.compat.upgrade", "compile + parity check of a Triton release; --admit records a SAFE one"),
    "releases": ("nsa_triton_sel.compat.releases", "Triton releases and torch pins on the index that lanes.toml lacks"),
}


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
    module = importlib.import_module(COMMANDS[name][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
