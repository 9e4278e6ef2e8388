"""``nsa-sel doctor``: the environment fingerprint, the interpreter probe, and where the installed pair stands.

The fingerprint and the probe live in :mod:`..core.env` (benchmarks and lanes use them too); this module
assembles the report and prints it.  A project file that cannot be read (``lanes.toml``,
``known-good.txt``, ``ledger.jsonl``) does not stop the report: its section says ``error`` with the
reason, and the command ends with one stderr line naming the file and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
import warnings

from ..core import env


def _doctor_report(probe: bool, arch: int | None = None, constraints: str | None = None) -> dict:
    """Fingerprint plus, unless skipped, the interpreter verdict, and what the ledger knows of the arch.

    A project file that cannot be read (lanes.toml, known-good.txt, ledger.jsonl) does not stop the report:
    its section says ``error`` with the reason, and ``problems`` lists each such reason."""
    report = env.fingerprint()
    # The key knobs shown even when unset, so "unset" is visible, not just absent.
    report["knobs"] = {k: os.environ.get(k) for k in env.TRITON_KNOBS + env.OTHER_KNOBS} | report["triton_env"]
    report["interpreter"] = env.interpreter_usable(constraints=constraints) if probe else {"status": "skipped"}
    report["sel_triton_min_L"] = threshold_in_force(report.get("gpu_name"), report.get("triton"))
    from ..core import project  # noqa: PLC0415
    from .standing import standing  # noqa: PLC0415 - reads the project's constraints files

    problems = []
    if constraints or os.environ.get(project.ENV_CONSTRAINTS):  # named, not searched for: it must be there
        try:
            project.constraints_dir(constraints)
        except project.ProjectNotFound as exc:
            problems.append(_reason(exc))
    try:
        report["known_good"] = standing(report, constraints)
    except (OSError, ValueError, RecursionError) as exc:  # FileProblem, TableError, LedgerError name the file
        problems.append(_reason(exc))
        report["known_good"] = {"status": "error", "why": problems[-1]}
    cc = report.get("compute_capability")
    try:
        report["arch_evidence"] = arch_evidence(arch if arch is not None else _arch_int(cc), constraints)
    except (OSError, ValueError, RecursionError) as exc:
        reason = _reason(exc)
        report["arch_evidence"] = f"unknown: {reason}"
        problems += [reason] if reason not in problems else []
    if problems:
        report["problems"] = problems
    return report


def _reason(exc: BaseException) -> str:
    """One line about a project file doctor could not read (under ``--debug``, its traceback on stderr first)."""
    from ..core.command import debugging, describe, one_line  # noqa: PLC0415

    if debugging():
        traceback.print_exception(type(exc), exc, exc.__traceback__)
    return one_line(describe(exc))


def _arch_int(cc: str | None) -> int | None:
    return int(cc.replace(".", "")) if cc else None  # "10.0" -> 100, "9.0" -> 90


def arch_evidence(arch: int | None, constraints: str | None = None) -> str:
    """The ledger's answer for ``arch`` (a Blackwell user must hear that its evidence is compile-only).

    Without a project it says so; a project file that cannot be read raises (TableError, LedgerError)."""
    from ..core import lane_table, project  # noqa: PLC0415 - only doctor needs the project's files
    from ..ledger import archs, load_ledger  # noqa: PLC0415

    try:
        where = project.constraints_dir(constraints)
    except project.ProjectNotFound:
        return archs.doctor_answer(arch, None, None)
    table = lane_table.load_table(where / "lanes.toml")
    recs = load_ledger(where / "ledger.jsonl") or None
    return archs.doctor_answer(arch, recs, table)


def threshold_in_force(gpu_name: str | None, triton: str | None) -> dict:
    """The ``sel_triton_min_L`` the dispatcher applies on this GPU with this Triton, and why: which
    thresholds entry, or the default, and where it comes from."""
    if not triton:
        return {"value": None, "why": "Triton is not installed: every call takes the packed-SDPA path"}
    if not gpu_name:
        return {"value": None, "why": "no CUDA GPU: the kernels run only under TRITON_INTERPRET=1 (as for 'cpu')"}
    try:
        from nsa_triton_sel import config
    except Exception as exc:  # noqa: BLE001 - doctor reports, it does not fail
        return {"value": None, "why": f"nsa_triton_sel not importable: {type(exc).__name__}: {exc}"}
    try:
        t = config.threshold_for(gpu_name, triton)
    except (OSError, ValueError) as exc:
        return {"value": None, "why": f"the thresholds file cannot be used: {exc}"}
    return {"value": t.min_L, "why": t.why}


# Shown in the text view under "knobs" already; JSON keeps them for the ledger.
_TEXT_SKIP = ("triton_env", "TRITON_DEFAULT_FP_FUSION")


def _as_text(report: dict) -> list[tuple[str, str]]:
    """(key, value) lines; nested dicts flattened as ``parent.child``; None shown as '-'."""
    rows = []
    for key, val in report.items():
        if key in _TEXT_SKIP:
            continue
        if isinstance(val, dict):
            if not val:
                rows.append((key, "-"))
            for sub, v in val.items():
                rows.append((f"{key}.{sub}", "-" if v is None else str(v)))
        else:
            rows.append((key, "-" if val is None else str(val)))
    return rows


def _print_text(report: dict) -> None:
    """A two-column table on a terminal (rich, if installed); plain aligned text
    otherwise, which reads better in CI logs and pastes cleanly into reports."""
    rows = _as_text(report)
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        Console = None
    if Console is None or not sys.stdout.isatty():
        width = max(len(k) for k, _ in rows)
        print("nsa-sel doctor")
        for k, v in rows:
            print(f"{k:<{width}}  {v}")
        return
    table = Table(title="nsa-sel doctor", show_header=False)
    table.add_column("key", style="bold")
    table.add_column("value")
    for k, v in rows:
        table.add_row(k, v)
    Console().print(table)


def _arch(text: str) -> int:
    """``--arch``: a compute capability as the lanes write it, 50 to 200 (``90``, ``sm_100``)."""
    digits = text.strip().lower().removeprefix("sm_")
    if not (digits.isdecimal() and len(digits) <= 3 and 50 <= int(digits) <= 200):
        raise argparse.ArgumentTypeError(f"expected a compute capability from 50 to 200 such as 90 or sm_100, "
                                         f"got {text[:40]!r}")
    return int(digits)


def main(argv: list[str] | None = None) -> int:
    """``nsa-sel doctor [--json] [--no-interp] [--arch CC] [--constraints DIR]``; the process exit code: 0, or 2
    when the arguments are bad or a project file cannot be read (the report is printed all the same, and one
    stderr line names the file)."""
    from ..core.command import Parser, fail  # noqa: PLC0415

    p = Parser(
        prog="nsa-sel doctor",
        description="Print the environment fingerprint a compatibility report needs.",
        epilog="exit status: 0 report printed; 2 bad arguments, or a project file (lanes.toml, known-good.txt, "
               "ledger.jsonl) that cannot be read: the report is printed and one stderr line names the file",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object to stdout")
    p.add_argument(
        "--no-interp", action="store_true", help="skip the Triton interpreter probe (a child process)"
    )
    p.add_argument("--arch", type=_arch, metavar="CC", help="ask about this compute capability (e.g. 100, 120) "
                   "instead of the local GPU's")
    p.add_argument("--constraints", help="the constraints directory (default: $NSA_SEL_CONSTRAINTS, or found "
                   "from the cwd)")
    args = p.parse_args(argv)
    with warnings.catch_warnings():
        # torch warns on import when numpy is missing (the matrix extra has none); the interpreter line says
        # what to install instead
        warnings.filterwarnings("ignore", message=".*Failed to initialize NumPy")
        report = _doctor_report(probe=not args.no_interp, arch=args.arch, constraints=args.constraints)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        _print_text(report)
    problems = report.get("problems") or []
    if problems:
        more = f" (and {len(problems) - 1} more in the report)" if len(problems) > 1 else ""
        return fail("doctor", problems[0] + more)
    return 0


if __name__ == "__main__":
    sys.exit(main())
