"""``nsa-sel check-upgrade VERSION [--admit]``: may this project use a Triton release it has not checked?

It builds a temporary lane for the candidate (``NSA_SEL_CANDIDATE=VERSION`` makes the noxfile
generate ``compile-candidate``, ``parity-candidate`` and, on a GPU machine, ``bench-candidate``),
runs it with results in a temporary directory, and judges its records against the nearest
known-good release in the ledger.  The candidate gets its Python range, numpy and extras from
the rules of the lanes around its version (:func:`..core.lane_table.rules_for`; a release the table
already lists keeps its row), never blindly from the newest lane, and compiles with its own
Triton (the lane is isolated like every lane).

The verdict (:func:`judge`, a pure function of records, tested without running lanes):

- ``environment``: the candidate's environment could not be built or trusted (install failed,
  the interpreter probe failed, a process imported another Triton or numpy, the harness died):
  no verdict about the Triton itself, never reported as a regression;
- ``blocked``: a required check failed (each kernel that passed on the baseline and does not on
  the candidate is named as a regression), an all-arch known-bad window covers the candidate,
  or a benchmark is slower than the baseline by more than ``--max-slowdown``;
- ``safe``: otherwise.  Compile metrics that grow (shared memory, registers, spills) are notes.

``--admit`` records a SAFE candidate: its release joins ``constraints/lanes.toml`` (as a patch
of its minor's lane, or as a new lane), its records enter the ledger under that release, and
MATRIX.md and known-good.txt are re-rendered, all in one command.  Exit status: 0 safe, 1
blocked, 3 environment, 2 bad usage or unreadable files (one line, checked before the long run:
a release below the table or not on the package index, a bad ``--max-slowdown``, a missing
``--from-results`` directory, a broken table or ledger).

``--specs MODULE[:ATTR]`` asks the same of a user's own kernels (:mod:`.team_upgrade`): the compile
lanes of the candidate and of ``--baseline`` over that spec module, a verdict table, the same exit
statuses, and nothing written to constraints/.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ... import known_bad
from .. import ledger
from ..core import lane_table, machine, project
from ..core.atomic import FileProblem, atomic_write_text, read_text
from ..core.command import Parser, fail
from ..core.machine import gpu_mode
from ..core.verdicts import BAD, BLOCKED, ENVIRONMENT, ERROR, PASS, SAFE
from ..lanes import bench_store
from ..ledger.pinning import PinError, normalise_releases

EXIT = {SAFE: 0, BLOCKED: 1, ENVIRONMENT: 3}
MAX_SLOWDOWN = 0.10
NO_BENCH = "no benchmark ran (no GPU): performance not compared"
NO_BASELINE = "no known-good release in the ledger: verdicts judged on their own"


@dataclass
class UpgradeReport:
    verdict: str
    candidate: str
    baseline: str | None
    reasons: list[str] = field(default_factory=list)  # why blocked, or why no verdict (environment)
    notes: list[str] = field(default_factory=list)  # worth reading, not blocking
    against: str = "known-good"  # what the baseline is: the ledger's known-good release, or a team's own run

    @property
    def blocked(self) -> bool:
        return self.verdict == BLOCKED

    def render(self) -> str:
        head = f"check-upgrade: triton {self.candidate}"
        missing = " (no known-good baseline in the ledger)" if self.against == "known-good" else " (no baseline)"
        head += f" vs {self.against} {self.baseline}" if self.baseline else missing
        lines = [f"{head}: {self.verdict.upper()}"]
        label = "environment" if self.verdict == ENVIRONMENT else "blocked"
        lines += [f"  {label}: {r}" for r in self.reasons]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def test_name(kernel: str) -> str:
    """A test record's name without the folder of its module: ``tests/library/kernels/test_bind.py::t``,
    ``tests.library.kernels.test_bind::t`` and ``tests/test_bind.py::t`` are one test, and so are a benchmark
    run from ``bench/suites/`` and from ``bench/``, so runs from another layout still compare.  Other names
    (compile variants) are returned as they are."""
    module, sep, test = kernel.partition("::")
    if not sep:
        return kernel
    base = module.replace("\\", "/").rpartition("/")[2]
    base = base[:-3] if base.endswith(".py") else base
    return base.rpartition(".")[2] + sep + test


def _index(recs: list[dict]) -> dict[tuple, dict]:
    return {(r["check"], r.get("mode"), test_name(r["kernel"]), r.get("arch")): r for r in recs}


def environment_problems(recs: list[dict]) -> list[str]:
    """What says the candidate's environment, not its Triton, is at fault."""
    out = []
    for r in recs:
        why = None
        if r.get("isolation_error"):
            why = r["isolation_error"]
        elif r["kernel"] == "(lane session)" and r.get("stage") == "set-up":
            why = f"the lane could not be set up: {r.get('message')}"
        elif r["kernel"] == "interpreter-probe" and r["verdict"] != PASS:
            why = f"the Triton interpreter is not trustworthy with this numpy: {r.get('message')}"
        elif r["kernel"] == "(smoke harness)" or (r["kernel"] == "(pytest)" and r["verdict"] == ERROR):
            why = f"{r['kernel']}: {r.get('message')}"  # the harness itself could not run
        if why:
            out.append(f"{r.get('session')}: {ledger.first_line(why, 400)}")
    return list(dict.fromkeys(out))


def _regressions(cand: list[dict], base: list[dict], check: str) -> list[str]:
    """Kernels of ``check`` that passed on the baseline and are bad on the candidate."""
    c = _index([r for r in cand if r["check"] == check])
    out = []
    for key, b in _index([r for r in base if r["check"] == check]).items():
        got = c.get(key)
        if b["verdict"] == PASS and got is not None and got["verdict"] in BAD:
            arch = f" [sm_{key[3]}]" if key[3] else ""
            out.append(f"regression in {check}: `{key[2]}`{arch} passed on the baseline, "
                       f"{got['verdict']} now: {ledger.first_line(got.get('message'))}")
    return out


# The PTX embeds absolute source paths, so its size moves with the install location: growth is
# counted, never itemised (itemised, such noise would bury the notes that matter).
PATH_DEPENDENT_METRICS = ("ptx_bytes",)
RESOURCE_METRICS = ("spills", "registers", "stack", "local", "shared")  # listed first, in this order


def _metric_notes(cand: list[dict], base: list[dict], grow_limit: float = 0.10) -> list[str]:
    """Compile metrics that grew by more than ``grow_limit``: register, spill, stack and shared-memory
    growth first, path-dependent sizes only counted."""
    c = _index([r for r in cand if r["check"] == "compile"])
    notes, noise = [], 0
    for key, b in _index([r for r in base if r["check"] == "compile"]).items():
        got = c.get(key)
        for name, old in (b.get("metrics") or {}).items() if got else ():
            new = (got.get("metrics") or {}).get(name)
            if name != "seconds" and isinstance(old, (int, float)) and isinstance(new, (int, float)) \
                    and old > 0 and new > old * (1 + grow_limit):
                if name in PATH_DEPENDENT_METRICS:
                    noise += 1
                    continue
                rank = RESOURCE_METRICS.index(name) if name in RESOURCE_METRICS else len(RESOURCE_METRICS)
                notes.append((rank, f"`{key[2]}` sm_{key[3]}: {name} {old} -> {new}"))
    out = [text for _, text in sorted(notes, key=lambda n: n[0])]
    if noise:
        out.append(f"{'/'.join(PATH_DEPENDENT_METRICS)} grew by more than {grow_limit:.0%} on {noise} variant(s): "
                   "not itemised (the PTX embeds absolute source paths, so its size moves with the install location)")
    return out


def _slowdowns(cand: list[dict], base: list[dict], max_slowdown: float) -> list[str]:
    c = _index([r for r in cand if r["check"] == "bench"])
    out = []
    for key, b in _index([r for r in base if r["check"] == "bench"]).items():
        old = (b.get("metrics") or {}).get("median_s")
        new = ((c.get(key) or {}).get("metrics") or {}).get("median_s")
        if old and new and new > old * (1 + max_slowdown):
            out.append(f"bench `{key[2]}`: median {old * 1e6:.1f} us -> {new * 1e6:.1f} us "
                       f"(+{(new / old - 1) * 100:.0f}%, limit {max_slowdown * 100:.0f}%)")
    return out


def judge(candidate: str, cand_recs: list[dict], baseline: str | None, base_recs: list[dict],
          required: tuple[str, ...] = ("compile", "parity"), windows: list | None = None,
          max_slowdown: float = 0.10) -> UpgradeReport:
    """SAFE, BLOCKED or ENVIRONMENT for ``candidate`` given its records and the baseline's (pure)."""
    d = UpgradeReport(SAFE, candidate, baseline)
    env = environment_problems(cand_recs)
    if env:
        d.verdict, d.reasons = ENVIRONMENT, env
        d.notes.append("no verdict about the Triton itself: fix the environment (numpy/setuptools rules in "
                       "constraints/lanes.toml, the installed wheels) and run again")
        return d
    for check in required:
        verdict, _ = ledger.cell([r for r in cand_recs if r["check"] == check])
        if verdict == ledger.NOT_RUN:
            d.reasons.append(f"{check}: not run")
        elif verdict != PASS:
            regress = _regressions(cand_recs, base_recs, check)
            d.reasons += regress or [f"{check}: " + "; ".join(ledger.reasons(
                [r for r in cand_recs if r["check"] == check], limit=3))]
    for w in known_bad.touching(candidate, windows):
        if w.all_arch and not w.interp_only:
            d.reasons.append(f"known-bad window [{w.id}]: {w.reason}")
        else:
            d.notes.append(f"known-bad on some GPUs [{w.id}]: {w.describe()}")
    d.reasons += _slowdowns(cand_recs, base_recs, max_slowdown)
    d.reasons += [f"bench: {r['message']}" for r in cand_recs if r.get("kernel") == bench_store.GATE_KERNEL
                  and r["verdict"] in BAD]
    d.notes += _metric_notes(cand_recs, base_recs)
    if not any(r["check"] == "bench" and r["verdict"] == PASS for r in cand_recs):
        d.notes.append(NO_BENCH)
    if baseline is None:
        d.notes.append(NO_BASELINE)
    if d.reasons:
        d.verdict = BLOCKED
    return d


def baseline_release(table: lane_table.Table, recs: list[dict], windows: list, candidate: str) -> lane_table.Lane | None:
    """The known-good release nearest the candidate: the newest at or below it, else the oldest above."""
    verdicts = ledger.release_verdicts(table, recs, windows)
    good = [r for r in table.releases if verdicts[r.triton][0] and r.version != Version(candidate)]
    below = [r for r in good if r.version < Version(candidate)]
    return (below[-1] if below else good[0]) if good else None


def _nox_command() -> list[str]:
    """nox from this interpreter when installed here, else the one on PATH."""
    try:
        import nox  # noqa: F401, PLC0415

        return [sys.executable, "-m", "nox"]
    except ImportError:
        exe = shutil.which("nox")
        if exe is None:
            raise SystemExit("check-upgrade needs nox (pip install 'nsa-triton-sel[matrix]')") from None
        return [exe]


def run_candidate(version: str, results: Path, root: Path, gpu: bool, team=None) -> int:
    """Run the candidate lane's sessions through the project's noxfile; verdicts land in ``results``.

    ``-r`` reuses the candidate venvs of an earlier check (the install step still runs and pins the
    candidate's Triton and numpy; the lane's import check catches anything left over).  ``team``
    (a :class:`.team_upgrade.TeamPlan`): the compile lanes of the candidate and the baseline over a
    user's spec module instead.
    """
    sessions = ["compile-candidate", "parity-candidate"] + (["bench-candidate"] if gpu else [])
    # --all-archs: a SAFE verdict (and --admit) speaks for every arch of the table, not this machine's alone.
    posargs = ["--results", str(results), "--all-archs"]
    env = dict(os.environ, NSA_SEL_CANDIDATE=version, NSA_SEL_GPU="1" if gpu else "0")
    if team is not None:
        sessions, posargs, env = list(team.sessions), team.nox_posargs(results), dict(os.environ, **team.env)
    cmd = _nox_command() + ["-f", str(root / "noxfile.py"), "-r", "-s", *sessions, "--no-stop-on-first-error",
                            "--", *posargs]
    print(f"check-upgrade: running {' '.join(sessions)} for triton {version}", flush=True)
    return subprocess.call(cmd, env=env)


def _candidate_records(version: str, args, root: Path, gpu: bool, team=None) -> tuple[list[dict], Path | None]:
    """Run (or read) the candidate lane; its records (markers included) and the kept results dir.  With ``team``
    every record of the run (the baseline's too): :func:`.team_upgrade.split` sorts them."""
    if args.from_results:
        recs, _ = ledger.load_run_files([args.from_results])
        if team is not None:
            return recs, args.from_results
        theirs = sorted({r[ledger.SPECS_FIELD] for r in recs if r.get(ledger.SPECS_FIELD)})
        if theirs:
            raise UsageError(f"--from-results {args.from_results}: compile runs of a spec module; judge them with "
                             f"--specs {theirs[0]}")
        return [r for r in recs if r.get("candidate")], args.from_results
    tmp = Path(tempfile.mkdtemp(prefix=f"nsa-sel-upgrade-{version}-"))
    if team is None:
        run_candidate(version, tmp, root, gpu)
    else:
        run_candidate(version, tmp, root, gpu, team=team)
    recs, notes = ledger.load_run_files([tmp])
    for note in notes:
        print(f"check-upgrade: {note}")
    if args.keep or args.admit:
        print(f"check-upgrade: results in {tmp}")
        return recs, tmp
    shutil.rmtree(tmp, ignore_errors=True)
    return recs, None


# ---------------------------------------------------------------- --admit: a SAFE candidate joins the table

def release_block(version: str, table: lane_table.Table) -> tuple[str | None, str]:
    """(label of the lane to attach to, or None for a new lane; the TOML text to add)."""
    v = Version(version)
    same = [lane for lane in table.lanes if (lane.version.major, lane.version.minor) == (v.major, v.minor)]
    note = "# admitted by `nsa-sel check-upgrade --admit`: no torch release is known to pin it yet"
    if same:
        return same[0].label, f"[[lane.patch]]\n{note}\ntriton = {json.dumps(str(v))}\ntorch = []\n"
    rules, why = lane_table.rules_for(version, table)
    lines = ["[[lane]]", note, f'label = "{v.major}.{v.minor}"', f"triton = {json.dumps(str(v))}", "torch = []",
             f"python = {json.dumps(rules.python)}", f"numpy = {json.dumps(rules.numpy)}",
             f"numpy_reason = {json.dumps(f'from {why}: {rules.numpy_reason}')}"]
    if rules.extras:
        lines += [f"extras = {json.dumps(list(rules.extras))}", f"extras_reason = {json.dumps(rules.extras_reason)}"]
    return None, "\n".join(lines) + "\n"


def add_release(table_path: Path, version: str) -> None:
    """Insert the release into lanes.toml (after its lane's block, or as a new lane at the end)."""
    table = lane_table.load_table(table_path)
    if table.for_version(version):
        return
    label, block = release_block(version, table)
    lines = read_text(table_path).splitlines(keepends=True)
    at = len(lines)
    if label is not None:
        start = next(i for i, ln in enumerate(lines) if ln.strip() == f'label = "{label}"')
        at = next((i for i in range(start, len(lines)) if lines[i].strip() == "[[lane]]"), len(lines))
    text = "".join(lines[:at]).rstrip("\n") + "\n\n" + block + ("\n" + "".join(lines[at:]) if at < len(lines) else "")
    atomic_write_text(table_path, text)
    lane_table.load_table(table_path)  # what was written must parse


def relabel(rec: dict, release: lane_table.Lane) -> dict:
    """A candidate record as a record of ``release``."""
    out = {**rec, "candidate": False, "lane": release.label, "triton": release.triton}
    for key in ("session", "run_id"):
        if isinstance(out.get(key), str):
            out[key] = out[key].replace("-candidate", f"-{release.name}", 1)
    return out


def admit(version: str, cand_recs: list[dict], cdir: Path, ledger_path: Path, log=print) -> None:
    """``--admit``: a SAFE candidate becomes a release of the table, in this order, each step re-runnable:

    1. the release joins ``constraints/lanes.toml`` when it is not there yet: as a ``[[lane.patch]]`` of
       the lane of its minor, or as a new ``[[lane]]`` that follows the rules of the lanes around it
       (:func:`..core.lane_table.rules_for`); its torch list starts empty (no torch release is known to
       pin it) and the per-lane constraints files are regenerated;
    2. the candidate's records are relabelled as that release's (lane, session names, no ``candidate``
       flag);
    3. ``nsa-sel pin`` merges them into the ledger and re-renders MATRIX.md and known-good.txt.
    """
    table_path = cdir / project.TABLE_NAME
    add_release(table_path, version)
    table = lane_table.load_table(table_path)
    release = table.for_version(version)
    changed = lane_table.write_constraints(table, cdir)
    log(f"admit: triton {version} is {'lane ' + release.label if not release.patch else 'a patch of lane ' + release.label}"
        f" in {table_path}" + (f"; rewrote {', '.join(p.name for p in changed)}" if changed else ""))
    recs = [relabel(r, release) for r in cand_recs]
    ledger.pin([], ledger_path, cdir / "MATRIX.md", cdir / "known-good.txt", table=table, admitted=recs, log=log)


class UsageError(ValueError):
    """A bad argument or an unreadable input, found before the long run (exit 2)."""


def _slowdown(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value <= 0:  # nan/inf/negative would switch the speed gate off
        raise argparse.ArgumentTypeError(f"must be a finite positive fraction (0.10 = 10%), got {text!r}")
    return value


INDEX_TIMEOUT_S = 20.0
_WHEEL_VERSION = re.compile(r"triton-([0-9][^-/#\"'<>\s]*?)(?:-|\.tar\.gz|\.zip)")


def index_versions() -> set[Version] | None:
    """Triton releases on the package index the lanes install from (the PEP 503 page of ``$UV_DEFAULT_INDEX``,
    ``$UV_INDEX_URL``, ``$PIP_INDEX_URL`` or PyPI); None when it cannot be asked (offline, a wheelhouse)."""
    base = next((os.environ[k] for k in ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL") if os.environ.get(k)),
                "https://pypi.org/simple")
    from .releases import IndexError_, fetch_text  # noqa: PLC0415 - bounded reads: no FIFO hang, a deadline

    try:
        page = fetch_text(base.rstrip("/") + "/triton/", INDEX_TIMEOUT_S, headers={"Accept": "text/html"})
    except IndexError_:  # offline, a malformed URL, a page that is not text
        return None
    found = set()
    for text in _WHEEL_VERSION.findall(page):
        try:
            found.add(Version(text))
        except InvalidVersion:
            continue
    return found or None


def _check_release(version: str, table: lane_table.Table, args) -> None:
    """Refuse, before anything runs, a release the check cannot say anything useful about."""
    oldest = table.releases[0]
    if Version(version) < oldest.version:
        raise UsageError(f"triton {version} is older than the table's oldest release {oldest.triton}: "
                         f"this project supports triton>={oldest.triton}; nothing to check")
    if args.from_results or args.skip_index_check or table.for_version(version):
        return
    known = index_versions()
    if known is None:
        print("check-upgrade: could not ask the package index whether this release exists; going on",
              file=sys.stderr)
    elif Version(version) not in known:
        newest = max(known)
        raise UsageError(f"triton {version}: no such release on the package index (newest there: {newest}); "
                         "--skip-index-check if it comes from elsewhere")


def _parser() -> argparse.ArgumentParser:
    p = Parser(prog="nsa-sel check-upgrade", description=__doc__.splitlines()[0],
               epilog="exit status: 0 SAFE; 1 BLOCKED; 3 ENVIRONMENT (no verdict); 2 bad usage or an unreadable "
                      "input, one line, checked before the long run, nothing written")
    p.add_argument("version", help="candidate Triton release, e.g. 3.10.0")
    p.add_argument("--constraints", type=Path, help="the constraints directory (default: found from the cwd)")
    p.add_argument("--ledger", type=Path, help="default: <constraints>/ledger.jsonl")
    p.add_argument("--from-results", type=Path, help="judge existing candidate run files instead of running")
    p.add_argument("--keep", action="store_true", help="keep the temporary results directory")
    p.add_argument("--admit", action="store_true", help="if SAFE, add the release to the table, ledger and known-good")
    p.add_argument("--max-slowdown", type=_slowdown, default=None,
                   help=f"blocking benchmark slowdown, a finite positive fraction (default {MAX_SLOWDOWN} = 10%%)")
    p.add_argument("--skip-index-check", action="store_true",
                   help="do not ask the package index whether the release exists (a private wheel)")
    team = p.add_argument_group("your own kernels: the compile lanes over a spec module, never "
                                "this project's ledger")
    team.add_argument("--specs", metavar="MODULE[:ATTR]",
                      help="judge this spec module's kernels (nsa-sel capture writes one) on the candidate: its "
                           "compile smoke and static findings there, against the same on --baseline")
    team.add_argument("--baseline", metavar="VERSION",
                      help="with --specs: the release you use now, one of lanes.toml (default: the newest lane "
                           "below the candidate)")
    team.add_argument("--archs", metavar="LIST", help="with --specs: compile for these archs (default: this "
                                                     "machine's GPU, else sm_90)")
    team.add_argument("--all-archs", dest="archs", action="store_const", const=machine.ALL,
                      help="with --specs: every arch of lanes.toml")
    return p


def main(argv: list[str] | None = None) -> int:
    """``nsa-sel check-upgrade VERSION [--admit] [--ledger F] [--from-results DIR] [--max-slowdown 0.1]``, or
    ``VERSION --specs M [--baseline V]`` (:mod:`.team_upgrade`)."""
    args = _parser().parse_args(argv)
    try:
        return _check_upgrade(args)
    except (UsageError, project.ProjectNotFound, lane_table.TableError, ledger.LedgerError, ledger.RunFileError,
            PinError, FileProblem, TimeoutError) as exc:
        return fail("check-upgrade", exc)
    except OSError as exc:  # --admit on a read-only filesystem or a full disk
        return fail("check-upgrade", f"cannot write {exc.filename or 'a file'}: {exc.strerror or exc}")


def _check_upgrade(args) -> int:

    try:
        version = str(Version(args.version))
    except ValueError:  # InvalidVersion, or more digits than int() reads
        raise UsageError(f"not a version: {args.version[:60]!r} (e.g. 3.10.0)") from None
    if args.from_results is not None and not args.from_results.is_dir():
        raise UsageError(f"--from-results {args.from_results}: no such directory")
    if not args.specs:
        given = [opt for opt, value in (("--baseline", args.baseline), ("--archs", args.archs)) if value is not None]
        if given:
            raise UsageError(f"{given[0]}: only with --specs (this project's own check judges against the nearest "
                             "known-good release of its ledger, on every arch of lanes.toml)")
    cdir = project.constraints_dir(args.constraints)
    t0 = time.perf_counter()
    table, windows = lane_table.load_table(cdir / project.TABLE_NAME), known_bad.load()
    _check_release(version, table, args)
    if args.specs:
        return _check_team(args, version, cdir, table, t0)
    max_slowdown = MAX_SLOWDOWN if args.max_slowdown is None else args.max_slowdown
    # The noxfile beside the constraints directory, else the project's found from the cwd (a
    # --constraints copy elsewhere, e.g. to try --admit, still runs the project's lanes).
    root = None
    if not args.from_results:
        root = cdir.parent if (cdir.parent / "noxfile.py").is_file() else project.project_root(None)
    cand = lane_table.candidate_lane(version, table)
    listed = table.for_version(version)
    print(f"check-upgrade: triton {version}: " + (f"release of lane {listed.label} in the table, checked with its "
          f"row" if listed else f"python {cand.python}, numpy{cand.numpy}, extras {list(cand.extras)} ({cand.numpy_reason})"))
    ledger_path = args.ledger or cdir / "ledger.jsonl"
    recs = normalise_releases(ledger.load_ledger(ledger_path), table, str(ledger_path))
    base = baseline_release(table, recs, windows, version)
    base_recs = [r for r in recs if base and r["triton"] == base.triton]
    gpu = gpu_mode()
    if gpu and not args.from_results:  # pytest-benchmark's own gate against the baseline's saved run
        print(bench_store.arm_gate(base.triton if base else None, max_slowdown, project.results_dir()))
    cand_recs, results = _candidate_records(version, args, root, gpu)
    report = judge(version, cand_recs, base.triton if base else None, base_recs, table.required, windows,
                   max_slowdown)
    print(report.render())
    print(f"check-upgrade: {report.verdict.upper()} in {time.perf_counter() - t0:.0f} s")
    if args.admit:
        if report.verdict != SAFE:
            print("check-upgrade: --admit refused: only a SAFE candidate is admitted", file=sys.stderr)
            return EXIT[report.verdict]
        admit(version, cand_recs, cdir, ledger_path)
    return EXIT[report.verdict]


def _check_team(args, version: str, cdir: Path, table: lane_table.Table, t0: float) -> int:
    """``--specs``: the compile lanes of the candidate and the baseline over a user's spec module, judged, with the
    verdict table first (:mod:`.team_upgrade`); nothing written to constraints/."""
    from . import team_upgrade  # noqa: PLC0415 - only a check of a user's spec module needs it

    try:
        team = team_upgrade.plan(args, version, table, os.getcwd())
        if not args.from_results:
            print(team_upgrade.load_module(team), flush=True)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    base = team.baseline.triton if team.baseline else None
    print(f"check-upgrade: your kernels on triton {version} against {base or 'no baseline'}")
    root = None
    if not args.from_results:  # the noxfile beside the constraints directory, else the project's found from the cwd
        root = cdir.parent if (cdir.parent / "noxfile.py").is_file() else project.project_root(None)
    recs, results = _candidate_records(version, args, root, gpu_mode(), team)
    try:
        cand, base_recs = team_upgrade.split(recs, team, str(results or "the run"), given=bool(args.from_results))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    report = judge(version, cand, base, base_recs, team_upgrade.REQUIRED, windows=[])
    report = team_upgrade.finish(report, cand, base_recs, team, (NO_BENCH, NO_BASELINE))
    print(team_upgrade.table_text(cand, base_recs, table))
    print(report.render())
    print(f"check-upgrade: {report.verdict.upper()} in {time.perf_counter() - t0:.0f} s")
    return EXIT[report.verdict]


def nox_session(session) -> None:
    """Body of ``nox -s check-upgrade -- VERSION``."""
    rc = main(list(session.posargs))
    if rc:
        session.error(f"check-upgrade: exit status {rc}")


if __name__ == "__main__":
    sys.exit(main())
