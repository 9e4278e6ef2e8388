"""``nsa-sel pin``: merge lane run files into the ledger; render MATRIX.md and known-good.txt.

What keeps the three files trustworthy:

- a file lock beside the ledger serialises concurrent pins (without it, two pins at once lost
  the second one's records in 4 of 10 runs);
- the three files are replaced as one commit with a journal (:func:`..core.atomic.commit`), and every
  pin first finishes a commit a killed pin left behind; MATRIX.md and known-good.txt name the
  ledger generation they were rendered from, and ``nsa-sel pin --check`` verifies it;
- file modes are kept;
- input is strict: an empty, truncated, binary or foreign results file (or a FIFO or device
  named ``*.json``), an unknown verdict, a field of the wrong type or a bad ledger line stops the
  pin with the file (and line) named, exit status 2; so does a record naming a release that is
  not in the table (a record's ``"3.9"`` is read as the table's ``3.9.0``, never ignored);
- a ledger that is missing or empty while MATRIX.md / known-good.txt came from one with records
  (a mistyped ``--ledger``) is refused unless ``--reset``; so is a pin that would leave no record;
- a record whose process imported another Triton than the release it names becomes an
  ``error`` naming both versions (:func:`.records.enforce_isolation`);
- results of a compile lane run over a user's spec module (records with ``specs``) are refused
  whole: they are about that module's kernels, not this project's.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from ... import known_bad
from ..core import lane_table, project
from ..core.atomic import FileProblem, JournalError, commit, journal_path, locked, read_text, recover
from ..core.command import Parser, fail
from .cells import release_verdicts
from .known_good import render_known_good
from .matrix import render_matrix
from .records import SPECS_FIELD, enforce_isolation, isolation_problem, problems
from .runfiles import RunFileError, load_run_files
from .store import LedgerError, digest, dump_ledger, load_ledger, merge

_GENERATION = re.compile(r"generation ([0-9a-f]{16})")


class PinError(ValueError):
    """Pin refused its input; the message names the file and what is wrong."""


def pin(result_dirs: list[Path], ledger_path: Path, matrix_path: Path, known_good_path: Path,
        table: lane_table.Table | None = None, windows: list | None = None, log=print, reset: bool = False,
        admitted: list[dict] | None = None) -> dict:
    """Merge run files into the ledger and regenerate MATRIX.md and known-good.txt as one commit.

    ``reset`` starts from an empty ledger (drops every record already there) instead of merging;
    ``admitted`` are records of a checked candidate already relabelled as a release of the table
    (``nsa-sel check-upgrade --admit``).
    """
    table = table or lane_table.load_table()
    windows = known_bad.load() if windows is None else windows
    ledger_path, matrix_path, known_good_path = Path(ledger_path), Path(matrix_path), Path(known_good_path)
    targets = [ledger_path, matrix_path, known_good_path]
    for path in targets:  # never create a directory: a mistyped path must not start a new ledger
        if not path.parent.is_dir():
            raise PinError(f"{path}: directory {path.parent} does not exist; nothing written")
    if len({os.path.realpath(p) for p in targets}) < len(targets):  # one file would overwrite another
        raise PinError(f"--ledger {ledger_path}, --matrix {matrix_path} and --known-good {known_good_path} must be "
                       "three different files; nothing written")
    with locked(ledger_path):
        try:
            fixed = recover(journal_path(ledger_path), targets)
        except JournalError as exc:
            raise PinError(str(exc)) from None
        if fixed:
            log(f"recovered: {fixed}")
        try:
            new, notes = load_run_files([d for d in result_dirs if Path(d).is_dir()])
            old = [] if reset else load_ledger(ledger_path)
        except (RunFileError, LedgerError) as exc:
            raise PinError(str(exc)) from None
        for note in notes:
            log(f"warning: {note}")
        team = sorted({str(r[SPECS_FIELD]) for r in new if r.get(SPECS_FIELD)})
        if team:
            raise PinError(f"the results hold compile runs of a user's spec module (--specs {team[0]}): they judge "
                           "that module's kernels, not this project's, and never enter the ledger (`nsa-sel matrix "
                           "--results DIR` renders them); nothing written")
        new = [r for r in new if not r.get("candidate")] + list(admitted or [])  # candidates only via --admit
        bad = [p for r in new for p in problems(r)]
        if bad:
            raise PinError(f"a record to pin is not valid: {bad[0]}")
        if not old and not reset:
            _refuse_a_lost_ledger(ledger_path, matrix_path, known_good_path)
        old = normalise_releases(old, table, str(ledger_path))
        new = [enforce_isolation(r) for r in normalise_releases(new, table, "the results")]
        for r in new:
            if isolation_problem(r):
                log(f"error: {r['session']} `{r['kernel']}`: {isolation_problem(r)}")
        merged = [r for r in merge(old, new) if not _canary_static(r)]
        if not merged:
            raise PinError("nothing to pin: neither the ledger nor the results hold a record (known-good.txt "
                           "would admit no release); nothing written")
        verdicts = release_verdicts(table, merged, windows)
        name = _rel(ledger_path)
        text = dump_ledger(merged)
        gen = digest(text)
        commit({ledger_path: text,
                matrix_path: render_matrix(table, merged, windows, verdicts, name, gen),
                known_good_path: render_known_good(table, verdicts, windows, name, gen, recs=merged)},
               journal_path(ledger_path))
    log(f"ledger: {len(merged)} records ({len(new)} from {len(result_dirs)} results dir(s)"
        f"{', previous records dropped' if reset else ''}) -> {ledger_path} (generation {gen})")
    for rel in table.releases:
        ok, why = verdicts[rel.triton]
        log(f"  {rel.triton:<7} {'known-good' if ok else 'excluded: ' + '; '.join(why)}")
    return {"records": len(merged), "new": len(new), "verdicts": verdicts, "warnings": notes, "generation": gen}


def verify(ledger_path: Path, matrix_path: Path, known_good_path: Path) -> list[str]:
    """Problems that make the three files disagree (empty: they are one generation).

    A file that cannot be read, or a ledger line that is not a valid record (NaN and Infinity included),
    is not a disagreement but bad input: a :class:`..core.atomic.FileProblem` or :class:`.store.LedgerError`.
    """
    ledger_path = Path(ledger_path)
    out = []
    if journal_path(ledger_path).exists():
        out.append(f"an interrupted pin left {journal_path(ledger_path)}: run `nsa-sel pin` to finish it")
    exists = ledger_path.exists() or ledger_path.is_symlink()
    text = read_text(ledger_path) if exists else ""
    load_ledger(ledger_path)
    gen = digest(text)
    for path in (matrix_path, known_good_path):
        path = Path(path)
        found = _GENERATION.search(read_text(path)) if path.exists() or path.is_symlink() else None
        if found is None:
            out.append(f"{path}: missing or names no ledger generation")
        elif found.group(1) != gen:
            out.append(f"{path}: rendered from ledger generation {found.group(1)}, the ledger is {gen}")
    return out


def normalise_releases(recs: list[dict], table: lane_table.Table, where: str) -> list[dict]:
    """Each record's ``triton`` spelled as the table's release (``"3.9"`` -> ``"3.9.0"``, else it would
    be grouped apart and its verdict ignored); a release not in the table is a :class:`PinError`."""
    out = []
    for rec in recs:
        rel = table.for_version(rec["triton"])
        if rel is None:
            raise PinError(f"{where}: a record of session {rec.get('session')!r} names triton {rec['triton']!r}, "
                           f"which is not a release of the table ({', '.join(r.triton for r in table.releases)}): "
                           f"admit it with `nsa-sel check-upgrade {rec['triton']} --admit` or remove its records")
        out.append(rec if rec["triton"] == rel.triton else {**rec, "triton": rel.triton})
    return out


def _refuse_a_lost_ledger(ledger_path: Path, *rendered: Path) -> None:
    """A missing or empty ledger while MATRIX.md / known-good.txt came from one with records: most
    likely a wrong ``--ledger``; pinning would overwrite them with a near-empty generation."""
    empty = digest("")
    for path in rendered:
        try:
            found = _GENERATION.search(read_text(path)) if path.is_file() else None
        except FileProblem:
            continue  # the commit's own checks name a target it cannot replace
        if found and found.group(1) != empty:
            state = "holds no record" if ledger_path.exists() else "does not exist"
            raise PinError(f"{ledger_path} {state}, but {path} was rendered from a ledger with records (generation "
                           f"{found.group(1)}): a wrong --ledger? pass --reset to start a new ledger; nothing written")


def _canary_static(rec: dict) -> bool:
    """Static-check rows of the canaries (deliberately broken kernels): not a verdict."""
    return rec.get("check") == "compile-static" and "canaries" in (rec.get("kernel") or "")


def _rel(path: Path) -> str:
    return project.relative_to_project(str(Path(path).resolve()))


def _parser() -> argparse.ArgumentParser:
    p = Parser(prog="nsa-sel pin", description="merge lane results into the ledger; "
               "render MATRIX.md and known-good.txt (one commit, under a file lock)", epilog=EPILOG)
    p.add_argument("--results", action="append", default=None, type=Path,
                   help="directory of lane run files (repeatable; default $NSA_SEL_RESULTS or <project>/out/lanes)")
    p.add_argument("--constraints", type=Path, help="the constraints directory (default: found from the cwd)")
    p.add_argument("--ledger", type=Path, help="default: <constraints>/ledger.jsonl")
    p.add_argument("--matrix", type=Path, help="default: <constraints>/MATRIX.md")
    p.add_argument("--known-good", type=Path, help="default: <constraints>/known-good.txt")
    p.add_argument("--reset", action="store_true",
                   help="drop every record already in the ledger (e.g. after a harness fix invalidated them)")
    p.add_argument("--check", action="store_true", help="only verify that the three files are one generation")
    return p


EPILOG = ("exit status: 0 pinned (--check: the three files are one generation); 1 --check: they are not; "
          "2 bad input or arguments, one line naming the file, nothing written")


def main(argv: list[str] | None = None) -> int:
    """Exit 0 on success (``--check``: 1 when the files are not one generation); 2 when the input or the
    files are wrong or the arguments are (a one-line message names the file and the problem)."""
    args = _parser().parse_args(argv)
    paths = None
    try:
        cdir = project.constraints_dir(args.constraints)
        paths = (args.ledger or cdir / "ledger.jsonl", args.matrix or cdir / "MATRIX.md",
                 args.known_good or cdir / "known-good.txt")
        if args.check:
            bad = verify(*paths)
            if bad:
                return fail("pin --check", "NOT consistent: " + "; ".join(bad), status=1)
            print("nsa-sel pin --check: consistent (one generation)")
            return 0
        dirs = args.results or [project.results_dir()]
        given_missing = [d for d in (args.results or []) if not Path(d).is_dir()]
        if given_missing:
            raise PinError(f"--results {given_missing[0]}: no such directory")
        if not args.results and not dirs[0].is_dir():
            print(f"nsa-sel pin: no results directory {dirs[0]} (re-rendering from the ledger only)", file=sys.stderr)
        table = lane_table.load_table(cdir / project.TABLE_NAME)
        pin(dirs, *paths, table=table, reset=args.reset)
    except (PinError, FileProblem, LedgerError, lane_table.TableError, project.ProjectNotFound, TimeoutError) as exc:
        return fail("pin", exc)
    except OSError as exc:  # a read-only filesystem, a full disk: before the commit point, nothing was written
        after = paths is not None and journal_path(Path(paths[0])).exists()
        return fail("pin", f"cannot write {exc.filename or 'the files'}: {exc.strerror or exc}; "
                    + ("the commit is journaled: the next pin finishes it" if after else "nothing written"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
