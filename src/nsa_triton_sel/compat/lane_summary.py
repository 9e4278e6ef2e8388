"""The last lines of a lane session: what ran, with which Triton and torch (paired or not), how many
records of each check and verdict (the same counts MATRIX.md's cells are made of), where the run
file is, and the next command.  A user who reads only the end of a long nox log knows what happened
and what to do next.
"""

from __future__ import annotations

from pathlib import Path

from . import ledger

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


def summary_lines(session_name: str, base: dict, records: list[dict], run_path: Path, problem: str | None,
                  seconds: float) -> list[str]:
    results = run_path.parent
    status = "PASSED" if not problem else "SKIPPED" if problem == "skip" else f"FAILED: {problem}"
    return [
        f"== {session_name}: {status} ({seconds:.0f} s) ==",
        f"ran:      {base.get('check')} ({base.get('mode')}), {len(records)} records: {counts_by_check(records)}",
        f"versions: {versions_line(base, records)}",
        f"results:  {run_path} (raw outputs: {results / 'raw'}/{session_name}.*)",
        f"next:     nox -s pin -- --results {results}   (merges the run files into constraints/ledger.jsonl and "
        "renders MATRIX.md and known-good.txt)",
    ]
