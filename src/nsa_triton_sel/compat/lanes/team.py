"""The compile lanes over a user's spec module: ``nox -s compile-3.0 compile-3.9 -- --specs M --results DIR``.

A team checks its own kernels on the releases of ``lanes.toml`` with the same lanes this project's
matrix runs (each release's own Triton in its own environment, the compile children's imports
checked), but the lane compiles the module's specs instead of this package's registry and its
records are kept apart from this project's evidence:

- every record carries the module's reference (:data:`..ledger.SPECS_FIELD`), and ``nsa-sel pin``
  refuses results holding such records;
- ``--results DIR`` must be given, and may not be this project's own results directory (where the
  lanes' run files of the same names are what ``pin`` merges) or lie under ``constraints/``;
- only compile lanes take ``--specs``: the parity and bench lanes run this project's test suites;
- no canaries (they check the harness for this project's matrix) and no known-bad windows (they
  describe this project's kernels): a team's failure is its own, never relabelled ``xfail``.

``nsa-sel matrix --results DIR`` (:mod:`..commands.team_matrix`) renders what the lanes wrote; ``nsa-sel
check-upgrade VERSION --specs M`` (:mod:`..commands.team_upgrade`) runs two of them and judges the candidate.
Standard library only, like the lanes that import it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..ledger import SPECS_FIELD
from ..smoke.children import is_site_dir

DEFAULT_ATTR = "SPECS"


@dataclass(frozen=True)
class TeamRun:
    """A compile lane over a user's spec module: its reference (normalised) and the team's results directory."""

    ref: str
    results: Path
    invoked_from: Path


def normalise_ref(ref: str, cwd: str | os.PathLike) -> str:
    """``ref`` with its attribute spelled out and a file path made absolute against ``cwd`` (where the user typed
    it: nox runs sessions from the noxfile's directory), so the lane, the records and ``--from-results`` name the
    module alike.  A module name stays as it is (it is imported from ``cwd``)."""
    target, _, attr = (ref if ":" in ref else f"{ref}:{DEFAULT_ATTR}").rpartition(":")
    if not target or not attr:
        raise ValueError(f"--specs {ref!r}: expected module[:ATTR] or path/file.py[:ATTR] (ATTR defaults to "
                         f"{DEFAULT_ATTR})")
    if target.endswith(".py") or os.sep in target:
        target = os.path.normpath(os.path.join(cwd, target))
    return f"{target}:{attr}"


def check_spec_path(ref: str) -> None:
    """A file reference names a regular file (checked before any lane is installed); a ValueError otherwise."""
    target = ref.rpartition(":")[0]
    if not (target.endswith(".py") or os.sep in target):
        return
    if not os.path.isfile(target):
        why = "not a regular file" if os.path.exists(target) else "no such file"
        raise ValueError(f"--specs {ref}: {target}: {why}")


def own_results_dirs(root: Path) -> list[Path]:
    """Where this project's evidence lives: the lanes' default results directory (what ``pin`` reads) and
    ``constraints/`` (the ledger)."""
    return [Path(root) / "out" / "lanes", Path(root) / "constraints"]


def _inside(path: Path, parent: Path) -> bool:
    path, parent = Path(os.path.realpath(path)), Path(os.path.realpath(parent))
    return path == parent or parent in path.parents


def lane_run(specs: str | None, results: str | None, kind: str, root: Path, invoked_from: str) -> TeamRun | None:
    """The lane's ``--specs`` and ``--results`` checked (None: no ``--specs``, the project's own lane); a
    ValueError, one line, when they cannot be used: the lane stops before anything is installed."""
    if not specs:
        return None
    if kind != "compile":
        raise ValueError(f"--specs compiles a spec module's kernels in the compile lanes only (nox -s compile-X, "
                         f"or every release: nox -t compile); {kind}-X runs this project's own test suite")
    if not results:
        raise ValueError("--specs needs --results DIR (or NSA_SEL_RESULTS): a directory of the team's own, kept "
                         "apart from this project's results and ledger")
    where = Path(invoked_from, results)
    for own in own_results_dirs(root):
        if _inside(where, own):
            raise ValueError(f"--results {results}: {own} holds this project's own evidence; a --specs run "
                             "writes its records into a directory of the team's own")
    ref = normalise_ref(specs, invoked_from)
    check_spec_path(ref)
    return TeamRun(ref=ref, results=where, invoked_from=Path(invoked_from))


def smoke_args(team: TeamRun) -> list[str]:
    """What the lane's smoke compiles instead of the registry (no canaries: they check this project's harness)."""
    return ["--specs", team.ref]


def smoke_env(team: TeamRun | None, env: dict) -> dict | None:
    """The smoke's environment in a team's lane: the directory the user typed the command in goes on the
    PYTHONPATH (nox runs sessions from the noxfile's directory), so a spec module named by its module name
    imports as it does there, in the smoke and its compile children.  A directory of installed packages is
    never put there (it would shadow the lane's own Triton)."""
    here = str(team.invoked_from) if team else None
    if here is None or os.path.realpath(here) == os.path.realpath(os.getcwd()) or is_site_dir(here):
        return None
    return {"PYTHONPATH": os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)}


def tag(records: list[dict], report: dict) -> list[dict]:
    """The smoke's records with the kernel function of each spec (``spec_kernel``): the table's columns."""
    by_spec = {r.get("spec"): r.get("kernel") for r in report.get("results", [])}
    out = []
    for rec in records:
        if rec.get("check") == "compile":
            kernel = by_spec.get(rec["kernel"]) or rec["kernel"].partition("/")[0]
            rec = {**rec, "spec_kernel": kernel}
        out.append(rec)
    return out


def team_records(recs: list[dict]) -> list[dict]:
    """The records of runs over a user's spec module."""
    return [r for r in recs if r.get(SPECS_FIELD)]


def spec_refs(recs: list[dict]) -> list[str]:
    return sorted({str(r[SPECS_FIELD]) for r in recs if r.get(SPECS_FIELD)})


def summary_line(results: Path) -> str:
    """The lane summary's last line for a team run (in place of the maintainers' pin line)."""
    return (f"verdicts: nsa-sel matrix --results {results}   (one row per release run into it; a --specs run "
            "never enters this project's ledger)")
