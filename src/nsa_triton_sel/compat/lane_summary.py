"""The last lines of a lane session: what ran, with which Triton and torch (paired or not), how many
records of each check and verdict (the same counts MATRIX.md's cells are made of), which archs the
lane's compile covered, where the run file is, and the next command.  A user who reads only the end
of a long nox log knows what happened and what to do next.
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

from . import ledger
from .team import summary_line as team_line

CHECK_ORDER = ("compile", "backward", "parity", "bench", "compile-canary", "compile-static")


def counts_by_check(records: list[dict]) -> str:
    """``compile 135 pass, 20 skip; backward 22 pass; ...``: one count per (check, verdict)."""
    by: dict[str, dict[str, int]] = {}
    for r in records:
        verdicts = by.setdefault(r.get("check") or "?", {})
        verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
    order = sorted(by, key=lambda c: (CHECK_ORDER.index(c) if c in CHECK_ORDER else len(CHECK_ORDER), c))
    return "; ".join(f"{c} " + ", ".join(f"{n} {v}" for v, n in sorted(by[c].items())) for c in order) or "none"


def versions_line(base: dict, records: list[dict]) -> str:
    seen = {name: sorted({str(v) for r in records if (v := ledger.imported_versions(r)[name])})
            for name in ("triton", "torch", "numpy")}
    torch = " + ".join(seen["torch"]) or base.get("torch") or "not imported"
    pairing = "paired" if base.get("torch_paired") else f"off-pair: {base.get('off_pair_reason') or 'unknown'}"
    return (f"triton {' + '.join(seen['triton']) or base.get('triton')} (lane {base.get('lane')}), "
            f"torch {torch} ({pairing}), numpy {' + '.join(seen['numpy']) or 'not imported'}")


def compile_coverage(session_name: str, records: list[dict], run_path: Path, seconds: float):
    """(archs, seconds) of the lane's compile: this session's records when it is the compile, else the
    compile run file beside this one (the main job's parity ends the log: its summary says what the
    compile before it covered).  None when there is no compile run to read."""
    kind, _, lane = session_name.partition("-")
    if kind != "compile":
        try:
            doc = json.loads((run_path.parent / f"compile-{lane}.json").read_text())
            records = doc["records"]
            seconds = (_dt.datetime.fromisoformat(doc["finished"]) - _dt.datetime.fromisoformat(doc["started"])).total_seconds()
        except (OSError, ValueError, KeyError, TypeError):
            return None
    archs = sorted({r["arch"] for r in records if isinstance(r.get("arch"), int)})
    return (archs, seconds) if archs else None


def arch_lines(session_name: str, records: list[dict], run_path: Path, seconds: float, table_archs) -> list[str]:
    """``archs:`` (what the compile covered, of lanes.toml's archs) and, where it left some out, ``next:``
    with the command for the rest and the time it would take at this run's pace."""
    got = compile_coverage(session_name, records, run_path, seconds)
    if got is None or not table_archs:
        return []
    archs, secs = got
    lane = session_name.partition("-")[2]
    rest = [a for a in table_archs if a not in archs]
    who = "" if session_name.startswith("compile-") else f"compile-{lane} compiled for "
    names = ", ".join(f"sm_{a}" for a in archs)
    if not rest:
        return [f"archs:    {who}{names} (all {len(table_archs)} archs of lanes.toml)"]
    left = ", ".join(f"sm_{a}" for a in rest)
    pace = secs / len(archs) * len(rest) / 60
    covered = sum(a in table_archs for a in archs)  # a GPU's own arch may be one the table does not list
    return [f"archs:    {who}{names} ({covered} of lanes.toml's "
            f"{len(table_archs)} archs; not compiled: {left})",
            f"next:     nox -s compile-{lane} -- --all-archs   (the other {len(rest)} archs, about {max(1, round(pace))} "
            "min at this run's pace; CI runs all of them)"]


def summary_lines(session_name: str, base: dict, records: list[dict], run_path: Path, problem: str | None,
                  seconds: float, table=None) -> list[str]:
    results = run_path.parent
    status = "PASSED" if not problem else "SKIPPED" if problem == "skip" else f"FAILED: {problem}"
    archs = arch_lines(session_name, records, run_path, seconds, table.archs if table else ())
    if base.get(ledger.SPECS_FIELD):  # the rest of a team's sweep is over the same module, into the same results
        archs = [line.replace("-- --all-archs", f"-- --all-archs --specs {base[ledger.SPECS_FIELD]} --results {results}")
                 for line in archs]
    partial = any(line.startswith("next:") for line in archs)
    return [
        f"== {session_name}: {status} ({seconds:.0f} s) ==",
        f"ran:      {base.get('check')} ({base.get('mode')}), {len(records)} records: {counts_by_check(records)}",
        *[line for line in archs if line.startswith("archs:")],
        f"versions: {versions_line(base, records)}",
        f"results:  {run_path} (raw outputs: {results / 'raw'}/{session_name}.*)",
        *[line for line in archs if line.startswith("next:")],
        team_line(results) if base.get(ledger.SPECS_FIELD) else
        f"ledger:   maintainers only: nox -s pin -- --results {results}   (rewrites the tracked "
        "constraints/ledger.jsonl, MATRIX.md and known-good.txt, to be committed together; a user's checkout needs "
        "none of it" + ("; pin a full sweep only: a compile of fewer archs replaces the ledger's records of the "
                        "others)" if partial else ")"),
    ]
