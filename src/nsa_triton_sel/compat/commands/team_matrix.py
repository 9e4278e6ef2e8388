"""``nsa-sel matrix --results DIR``: the verdict table of a user's spec module over the releases its lanes ran.

The compile lanes run over a team's module (``nox -s compile-3.0 compile-3.9 -- --specs M --results DIR``,
or every release: ``nox -t compile -- ...``; :mod:`..lanes.team`) leave one run file per release in DIR.  This
renders them as constraints/MATRIX.md renders this project's ledger, with the same cells (``pass 4/4``,
``**FAIL** 1/4``, counted over specs x archs by :func:`..ledger.cell`): one row per release (its lane and
the torch it pairs with), the compile cell, the static API-range cell, one compile cell per kernel and
the spills; then every non-pass with Triton's own message, and the static findings per kernel.  It
writes nothing but ``--output``; nothing of it enters this project's ledger.

Exit status: 0 every kernel compiled on every release run (and no static finding is outside one); 1
a compile or static verdict is not a pass there (a failure, or a kernel the release cannot compile:
``unsupported``); 2 bad usage or unreadable run files (one line).
"""

from __future__ import annotations

import sys
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ..core import lane_table, project
from .. import ledger
from ..core.atomic import FileProblem, atomic_write_text, check_output
from ..core.command import Parser, fail
from ..lanes.team import spec_refs, team_records
from ..core.verdicts import BAD, NEUTRAL, SKIP, UNSUPPORTED

STATIC = "compile-static"
MAX_SPILL_ITEMS = 3


def _version(text: str):
    try:
        return Version(text)
    except InvalidVersion:
        return Version("0")


def cell(recs: list[dict]) -> str:
    """MATRIX.md's cell; one of neutral records only is named by what it holds (``unsupported 2/2``)."""
    verdict, text = ledger.cell(recs)
    if verdict != SKIP:
        return text
    counts = {v: sum(r["verdict"] == v for r in recs) for v in NEUTRAL}
    return ", ".join(f"{v} {n}/{len(recs)}" for v, n in counts.items() if n)


def kernels(recs: list[dict]) -> list[str]:
    """The kernel functions the specs compile, in the order first seen (the table's columns)."""
    return list(dict.fromkeys(r["spec_kernel"] for r in recs if r.get("spec_kernel")))


def spills(recs: list[dict]) -> str:
    """Which compiles spilled registers (bytes of stack + local memory), ``none``, or ``?`` when not measured."""
    measured = [r for r in recs if isinstance((r.get("metrics") or {}).get("spills"), int)]
    hit = sorted((r for r in measured if r["metrics"]["spills"] > 0), key=lambda r: -r["metrics"]["spills"])
    if not hit:
        return "none" if measured else "?"
    items = [f"{r['kernel']} sm_{r.get('arch')}: {r['metrics']['spills']} B" for r in hit[:MAX_SPILL_ITEMS]]
    return ", ".join(items) + (f" (+{len(hit) - MAX_SPILL_ITEMS} more)" if len(hit) > MAX_SPILL_ITEMS else "")


def _release_cells(triton: str, recs: list[dict], table: lane_table.Table | None) -> tuple[str, str]:
    listed = table.for_version(triton) if table else None
    lane = str(recs[0].get("lane") or "?") + (" (patch)" if listed and listed.patch else "")
    if listed is None and any(r.get("candidate") for r in recs):
        lane += " (candidate)"
    torch = recs[0].get("paired_torch") or (listed.paired_torch if listed else None)
    return lane, torch or "—"


def render(recs: list[dict], table: lane_table.Table | None = None, source: str = "") -> str:
    """The verdict table of a team's runs (records of :func:`..lanes.team.team_records`) as Markdown."""
    by_release: dict[str, list[dict]] = {}
    for r in recs:
        by_release.setdefault(r["triton"], []).append(r)
    compiles = [r for r in recs if r["check"] != STATIC]
    names = kernels(compiles)
    archs = sorted({r["arch"] for r in compiles if isinstance(r.get("arch"), int)})
    specs = sorted({r["kernel"] for r in compiles if r.get("spec_kernel")})
    refs = spec_refs(recs)
    out = [f"# Compile verdicts of {', '.join(refs) or '?'}", "",
           f"{len(specs)} spec(s) of {len(names)} kernel(s), compiled ahead of time for "
           f"{', '.join(f'sm_{a}' for a in archs) or 'no arch'} by each release's own Triton"
           + (f" ({source})" if source else "") + ". Cells count compiles (specs x archs) as constraints/MATRIX.md "
           "does; — = not run. torch: the release's pair in lanes.toml (the compile needs none). Never this project's "
           "ledger.", ""]
    head = ["Triton", "lane", "torch", "compile", "static", *names, "spills"]
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    notes: list[str] = []
    for triton in sorted(by_release, key=_version):
        rows = by_release[triton]
        comp = [r for r in rows if r["check"] != STATIC]
        static = [r for r in rows if r["check"] == STATIC]
        lane, torch = _release_cells(triton, rows, table)
        per_kernel = [cell([r for r in comp if r.get("spec_kernel") == k]) for k in names]
        out.append("| " + " | ".join([triton, lane, torch, cell(comp), cell(static), *per_kernel, spills(comp)]) + " |")
        for group in ([r for r in comp if r["verdict"] in BAD], [r for r in comp if r["verdict"] == UNSUPPORTED]):
            notes += [f"- **{triton}**: {line}" for line in ledger.reasons(group, limit=8)] if group else []
    out += ["", "## Every non-pass, with Triton's own message", ""] + (notes or ["- none"])
    out += ["", "## Static findings per kernel (Triton APIs outside a release range, from the source)", ""]
    out += _static_lines([r for r in recs if r["check"] == STATIC])
    out += ["", "## Runs", ""] + _runs(recs)
    return "\n".join(out) + "\n"


def _static_lines(recs: list[dict]) -> list[str]:
    out = []
    for ref in sorted({r["kernel"] for r in recs}):
        mine = [r for r in recs if r["kernel"] == ref]
        outside = sorted({r["triton"] for r in mine if r["verdict"] in BAD}, key=_version)
        where = f" — **outside it: {', '.join(outside)}**" if outside else " — every release run is inside it"
        out.append(f"- `{ref}`: {ledger.first_line(mine[-1].get('message'), 400)}{where}")
    return out or ["- none (no kernel source could be read)"]


def _runs(recs: list[dict]) -> list[str]:
    """One line per lane run: what its processes imported, where and when (the isolation, shown)."""
    seen: dict[str, list[dict]] = {}
    for r in recs:
        seen.setdefault(str(r.get("run_id")), []).append(r)
    out = []
    for run in sorted(seen.values(), key=lambda rs: _version(rs[0]["triton"])):
        tritons = sorted({str(r["triton_imported"]) for r in run if r.get("triton_imported")})
        first = run[0]
        out.append(f"- {first.get('session')} ({first['triton']}): triton imported {' + '.join(tritons) or '—'}, "
                   f"python {first.get('python') or '?'}, {first.get('machine') or 'cpu'}, {first.get('date') or '?'}")
    return out


def failed(recs: list[dict]) -> bool:
    """A compile or static verdict that is not a pass (``unsupported`` included: the kernel cannot run there)."""
    return any(r["verdict"] in BAD or r["verdict"] == UNSUPPORTED for r in recs)


def load(results: Path) -> list[dict]:
    """The records of a team's results directory; a ValueError (one line) when it holds none or several modules'."""
    if not Path(results).is_dir():
        raise ValueError(f"--results {results}: no such directory")
    recs, _ = ledger.load_run_files([results])
    mine = team_records(recs)
    if not mine:
        raise ValueError(f"--results {results}: no run of a spec module there (nox -s compile-X -- --specs MODULE "
                         f"--results {results} writes one; this project's own matrix is constraints/MATRIX.md)")
    refs = spec_refs(mine)
    if len(refs) > 1:
        raise ValueError(f"--results {results}: runs of {len(refs)} spec modules ({', '.join(refs)}): one results "
                         "directory per module")
    return mine


def _table(explicit) -> lane_table.Table | None:
    """The project's table for the lanes' torch pairs, when there is one (the verdicts need none)."""
    try:
        return lane_table.load_table(project.constraints_dir(explicit) / project.TABLE_NAME)
    except project.ProjectNotFound:
        if explicit:
            raise
        return None


def _parser() -> Parser:
    p = Parser(prog="nsa-sel matrix", description=__doc__.splitlines()[0],
               epilog="exit status: 0 every kernel compiled on every release run; 1 a compile or static verdict is "
                      "not a pass; 2 bad usage or unreadable run files (one line)")
    p.add_argument("--results", type=Path, required=True,
                   help="the directory the compile lanes ran over a spec module wrote (-- --specs M --results DIR)")
    p.add_argument("--output", metavar="FILE", help="also write the table to FILE (Markdown)")
    p.add_argument("--constraints", type=Path, help="the constraints directory (default: found from the cwd)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.output is not None:
            check_output(args.output, "--output")
        recs = load(args.results)
        text = render(recs, _table(args.constraints), source=f"nsa-sel matrix --results {args.results}")
        if args.output is not None:
            atomic_write_text(args.output, text)
    except (ValueError, FileProblem, ledger.RunFileError, lane_table.TableError, project.ProjectNotFound) as exc:
        return fail("matrix", exc)
    except OSError as exc:
        return fail("matrix", exc)
    print(text, end="")
    return 1 if failed(recs) else 0


if __name__ == "__main__":
    sys.exit(main())
