"""``nsa-sel check-upgrade VERSION --specs M [--baseline V]``: may a team move its own kernels to a Triton release?

The same question this project asks of its kernels, asked of a user's spec module (``nsa-sel capture``
writes one from a real run): the compile lanes run over the module (:mod:`..lanes.team`) for the candidate and
for the baseline, the release the team uses now (``--baseline``, one of lanes.toml; default the newest
lane below the candidate), each with its own Triton in its own environment; the records are judged with
:func:`.upgrade.judge` on the checks a spec module has (its compiles, and the static API range of its
kernels' sources), without this project's known-bad windows (they describe this project's kernels).  On
top of :func:`.upgrade.judge`'s regressions, a compile that passed on the baseline and is ``unsupported``
on the candidate (an API or an arch the release no longer has) blocks: for the team it is a kernel lost.

The verdict table (:func:`.team_matrix.render`: one row per release, the cells of MATRIX.md) comes before
the verdict.  Nothing is written to constraints/: ``--admit`` (this project's evidence) and ``--ledger``
are refused with ``--specs``.  This module plans and judges; :mod:`.upgrade` runs the lanes.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

from ..core import lane_table, machine
from ..ledger import first_line
from ..lanes.team import check_spec_path, normalise_ref, spec_refs, team_records
from .team_matrix import render
from ..core.verdicts import BLOCKED, ENVIRONMENT, PASS, UNSUPPORTED

REQUIRED = ("compile", "compile-static")  # what a spec module's lane checks: its compiles and its sources
SPEC_LOAD_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class TeamPlan:
    """What a check of a spec module runs: the module, the two releases, the nox sessions and their options."""

    ref: str
    candidate: str
    baseline: lane_table.Lane | None
    sessions: tuple[str, ...]
    posargs: tuple[str, ...]
    env: dict = field(default_factory=dict)

    def nox_posargs(self, results) -> list[str]:
        return ["--specs", self.ref, "--results", str(results), *self.posargs]


def pick_baseline(table: lane_table.Table, candidate: str, asked: str | None) -> lane_table.Lane | None:
    """``--baseline`` as a release of the table, else the newest lane below the candidate (None: there is none)."""
    cand = Version(candidate)
    if asked is None:
        below = [lane for lane in table.lanes if lane.version < cand]
        return below[-1] if below else None
    try:
        release = table.for_version(asked)
    except InvalidVersion:
        raise ValueError(f"--baseline {asked[:60]!r}: not a version (e.g. 3.6.0)") from None
    if release is None:
        raise ValueError(f"--baseline {asked}: not a release of lanes.toml ({', '.join(r.triton for r in table.releases)})")
    if release.version == cand:
        raise ValueError(f"--baseline {asked}: the candidate itself; name the release you use now")
    return release


def plan(args, version: str, table: lane_table.Table, cwd: str) -> TeamPlan:
    """The run, checked before anything is installed; a ValueError (one line) for what cannot be used."""
    if args.admit:
        raise ValueError("--admit with --specs: a team's kernels are not this project's evidence, nothing of a "
                         "--specs run enters constraints/ (drop --admit)")
    for opt, value in (("--ledger", args.ledger), ("--max-slowdown", args.max_slowdown)):
        if value is not None:
            raise ValueError(f"{opt} with --specs: not used (the baseline is your kernels compiled on --baseline, "
                             "and no benchmark runs)")
    ref = normalise_ref(args.specs, cwd)
    check_spec_path(ref)
    baseline = pick_baseline(table, version, args.baseline)
    posargs = ("--archs", args.archs) if args.archs else ()
    if args.archs:
        machine.compile_archs(table, args.archs, gpus=[], what="--archs")  # a bad value is one line, now
    listed = table.for_version(version)
    cand_session = f"compile-{listed.name}" if listed else "compile-candidate"
    sessions = ((f"compile-{baseline.name}",) if baseline else ()) + (cand_session,)
    return TeamPlan(ref=ref, candidate=version, baseline=baseline, sessions=sessions, posargs=posargs,
                    env={} if listed else {"NSA_SEL_CANDIDATE": version})


def load_module(team: TeamPlan) -> str:
    """The spec module imported in a child (a module that does not load is refused before the lanes run): the
    line saying what it holds and where it came from."""
    from ..smoke.cli import load_specs_in_child  # noqa: PLC0415 - the smoke's own loader, under a timeout

    specs, source = load_specs_in_child(team.ref, sys.executable, SPEC_LOAD_TIMEOUT_S)
    if not specs:
        raise ValueError(f"--specs {team.ref}: no compile specs in it (an empty list)")
    kernels = len({s.kernel for s in specs})
    return f"check-upgrade: --specs {team.ref}: {len(specs)} spec(s) of {kernels} kernel(s) from the {source}"


def _same(a: str, b: str) -> bool:
    try:
        return Version(str(a)) == Version(str(b))
    except InvalidVersion:
        return False


def split(recs: list[dict], team: TeamPlan, where: str, given: bool = False) -> tuple[list[dict], list[dict]]:
    """The candidate's and the baseline's records of the spec module among ``recs`` (from ``where``; ``given``:
    a directory the user named, which must hold the candidate's run)."""
    mine = team_records(recs)
    refs = spec_refs(mine)
    if refs and team.ref not in refs:
        raise ValueError(f"{where}: runs of --specs {', '.join(refs)}, not of {team.ref}")
    cand = [r for r in mine if _same(r["triton"], team.candidate)]
    base = [r for r in mine if team.baseline and _same(r["triton"], team.baseline.triton)]
    if given and not cand:
        raise ValueError(f"{where}: no run of --specs {team.ref} on triton {team.candidate} (nox -s compile-X -- "
                         f"--specs {team.ref} --results {where} writes one)")
    return cand, base


def finish(report, cand: list[dict], base: list[dict], team: TeamPlan, upgrade_notes: tuple[str, ...]):
    """:func:`.upgrade.judge`'s report, made about a team's kernels: kernels lost to ``unsupported`` block, the
    notes about this project's ledger and benchmarks go, a baseline that did not compile is said."""
    report.against = "baseline"
    report.notes = [n for n in report.notes if n not in upgrade_notes]
    if not cand:
        report.verdict = ENVIRONMENT
        report.reasons = [f"no record of triton {team.candidate}: its compile lane did not run or left no run file "
                          "(see the nox output above)"]
        return report
    if team.baseline is None:
        report.notes.append(f"no release of lanes.toml below {team.candidate}: judged on its own (--baseline names one)")
    elif not base:
        report.notes.append(f"no record of the baseline {team.baseline.triton}: regressions cannot be named")
    if report.verdict == ENVIRONMENT:
        return report
    lost = lost_kernels(cand, base)
    if lost:
        report.reasons += lost
        report.verdict = BLOCKED
    return report


def lost_kernels(cand: list[dict], base: list[dict]) -> list[str]:
    """Compiles that passed on the baseline and are ``unsupported`` on the candidate (same spec and arch)."""
    now = {(r["kernel"], r.get("arch")): r for r in cand if r["check"] == "compile"}
    out = []
    for r in base:
        got = now.get((r["kernel"], r.get("arch")))
        if r["check"] == "compile" and r["verdict"] == PASS and got is not None and got["verdict"] == UNSUPPORTED:
            out.append(f"lost: `{r['kernel']}` [sm_{r.get('arch')}] compiled on the baseline, unsupported now: "
                       f"{first_line(got.get('message'))}")
    return out


def table_text(cand: list[dict], base: list[dict], table: lane_table.Table) -> str:
    return render(base + cand, table, source="nsa-sel check-upgrade --specs")


__all__ = ["REQUIRED", "TeamPlan", "finish", "load_module", "lost_kernels", "pick_baseline", "plan", "split",
           "table_text"]
