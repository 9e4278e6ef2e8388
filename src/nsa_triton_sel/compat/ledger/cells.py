"""Verdicts per release and check: the cells of the matrix and who is admitted to known-good.

A *cell* is every record of one check (compile, parity, ...) on one Triton release, over every
mode and machine.  Records are grouped by the release they name (``triton``), not by lane label,
because a lane's patch releases (3.3.0 beside 3.3.1) are judged on their own.
"""

from __future__ import annotations

from collections import defaultdict

from ... import known_bad
from . import evidence
from ..core.verdicts import BAD, BAD_ORDER, NEUTRAL, PASS, SKIP

NOT_RUN = "not run"
CURRENT = object()  # release_verdicts' default: the kernel sources of this checkout


def cell(recs: list[dict]) -> tuple[str, str]:
    """(verdict, short text) of one cell.

    Any bad record makes the cell bad (the worst kind is named); otherwise a pass anywhere makes
    it pass; a cell of skips/unsupported only is ``skip``.
    """
    if not recs:
        return NOT_RUN, "—"
    counts: dict[str, int] = defaultdict(int)
    for r in recs:
        counts[r["verdict"]] += 1
    n = len(recs)
    for bad in BAD_ORDER:
        if counts[bad]:
            nbad = sum(counts[b] for b in BAD)
            return bad, f"**{bad.upper()}** {nbad}/{n}"
    if counts[PASS]:
        extra = "".join(f", {counts[k]} {k}" for k in NEUTRAL if counts[k])
        return PASS, f"pass {counts[PASS]}/{n}{extra}"
    return SKIP, SKIP


def reasons(recs: list[dict], limit: int = 5) -> list[str]:
    """Human lines for the non-pass records of a cell (bad ones first)."""
    bad = [r for r in recs if r["verdict"] in BAD]
    other = [r for r in recs if r["verdict"] in NEUTRAL] if not bad else []
    pick = bad or other
    seen, lines = set(), []
    for r in pick:
        where = f" [sm_{r['arch']}]" if r.get("arch") else ""
        line = f"{r['verdict']}: `{r['kernel']}`{where}: {first_line(r.get('message'))}"
        if r.get("message") in seen and len(pick) > limit:
            continue
        seen.add(r.get("message"))
        lines.append(line)
    if len(lines) > limit:
        lines = lines[:limit] + [f"... and {len(lines) - limit} more"]
    return lines


def first_line(message: str | None, limit: int = 200) -> str:
    """The informative line of a message (its last non-empty one), bounded, safe in a table."""
    lines = [ln.strip() for ln in (message or "").splitlines() if ln.strip()]
    text = lines[-1] if lines else "(no message)"
    return (text[: limit - 3] + "...") if len(text) > limit else text.replace("|", "\\|")


def by_release_check(recs: list[dict]) -> dict[tuple[str, str], list[dict]]:
    out: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in recs:
        out[(r["triton"], r["check"])].append(r)
    return out


def release_verdicts(table, recs: list[dict], windows: list, current: str | None = CURRENT,
                     runtime: str | None = CURRENT) -> dict[str, evidence.ReleaseVerdict]:
    """For each release of the table (by its version): (admitted to known-good?, reasons it is not),
    with what the evidence is about (:class:`.evidence.ReleaseVerdict`).

    GPU records about other compiler-facing sources than ``current`` (default: this checkout's) are
    stale: they count for nothing here.  GPU contract records of another runtime than ``runtime``
    (default: this checkout's) are flagged, and cannot refuse GPU use (:mod:`.evidence`).
    """
    current = evidence.current_hash() if current is CURRENT else current
    runtime = evidence.current_runtime() if runtime is CURRENT else runtime
    by_release = defaultdict(list)
    for r in recs:
        by_release[r["triton"]].append(r)
    counted, _ = evidence.fresh(recs, current)
    grouped = by_release_check(counted)
    out = {}
    for rel in table.releases:
        why = []
        for check in table.required:
            verdict, _ = cell(grouped.get((rel.triton, check), []))
            if verdict == NOT_RUN:
                why.append(f"{check} not run (no evidence in the ledger)")
            elif verdict != PASS:
                first = reasons(grouped[(rel.triton, check)], limit=1)
                why.append(f"{check} {verdict}" + (f" ({first[0]})" if first else ""))
        for w in known_bad.excluding_windows(rel.triton, windows):
            why.append(f"known-bad [{w.id}]: {w.reason}")
        mine = by_release.get(rel.triton, [])
        stale = len(evidence.fresh(mine, current)[1])
        out[rel.triton] = evidence.ReleaseVerdict(not why, why, gpu=evidence.gpu_status(mine, current, runtime),
                                                  tested=evidence.tested_with(mine), stale=stale, runtime=runtime)
    return out
