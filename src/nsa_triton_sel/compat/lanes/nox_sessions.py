"""What the noxfile's lane sessions do: install a lane, run its check, write its run file, and say so.

The noxfile only declares sessions (options, the table, a loop); every session body lives here
as a plain function of a nox session object, so a test drives it with a fake one.  The checks
themselves (compile, parity, bench) are :mod:`.checks`.  Standard library and ``packaging`` only at
import, like the rest of the toolkit.

Isolation: a lane imports its own Triton and numpy, never the invoking
environment's.  Every process the lane starts reports what it imported; a record whose process
imported another Triton, or a numpy outside the lane's range, becomes an ``error`` and fails the lane.

Torch: a CPU parity lane installs the torch its Triton pairs with (``lanes.toml``, the
first of ``torch``: the CUDA build PyPI serves, which runs on a CPU too), so the interpreter parity,
the backward, the custom op's ``opcheck`` and the ``torch.compile`` smoke run under the pair a user
installs, and its records say ``torch_paired``.  With uv (the default backend) a pair is a large
download the first time and a hard-linked copy from uv's cache after.  A compile lane
needs no torch of its own (the AOT compile never calls it) and, like ``--torch-pairing borrow``
(``NSA_SEL_TORCH_PAIRING=borrow``: offline boxes, or pip capped below the pair), borrows the invoking
environment's CPU torch through a directory of links to *torch and its dependencies only* (never
triton, never numpy), appended after the lane's own site-packages by a ``.pth`` file.

Summary: the last lines of a lane session say what ran, with which Triton and torch (paired or not),
how many records of each check and verdict (the same counts MATRIX.md's cells are made of), which
archs the lane's compile covered, where the run file is, and the next command, so a user who reads
only the end of a long nox log knows what happened and what to do next (:func:`summary_lines`).
"""

from __future__ import annotations

import argparse
import copy
import datetime as _dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .. import ledger
from ..core import lane_table, machine
from ..core.verdicts import ERROR
from . import team
from .checks import BODIES, bench_skip, counts_by_check, jobs_override
from .team import TeamRun
from .team import summary_line as team_line

KINDS = ("compile", "parity", "bench")
SHARED_DIR = "nsa-sel-shared-torch"
SHARED_PTH = "_nsa_sel_shared_torch.pth"
MODES = {"compile": ("aot", "aot"), "parity": ("gpu", "interp"), "bench": ("gpu", "cpu")}
SETUP, CHECKS = "set-up", "checks"  # where an unfinished run stopped (set-up: no verdict about Triton)
PAIRED, BORROW = "paired", "borrow"
PAIRINGS = (PAIRED, BORROW)

# Runs inside the lane: the fingerprint plus what this process imports (triton, numpy, torch).
FINGERPRINT = """
import json
from nsa_triton_sel.compat.core import env
print("NSA_SEL_FP " + json.dumps(env.lane_fingerprint()))
"""
# Runs in the invoking environment: torch's files and those of the distributions it requires,
# transitively, except triton and numpy (the lane brings its own).
SHARED_TORCH = r"""
import importlib.metadata as md, json, re
SKIP = {"triton", "numpy"}
seen, todo, entries = set(), ["torch"], set()
while todo:
    name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
    if name in seen or name in SKIP:
        continue
    seen.add(name)
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        continue
    for f in dist.files or []:
        top = f.parts[0]
        if top not in ("..", "__pycache__") and not top.endswith(".pth") and top.split(".")[0] not in SKIP:
            entries.add(str(dist.locate_file(top)))
    for req in dist.requires or []:
        if "extra" not in req.partition(";")[2]:
            todo.append(re.match(r"[A-Za-z0-9._-]+", req).group(0))
print(json.dumps({"entries": sorted(entries), "dists": sorted(seen)}))
"""


@dataclass(frozen=True)
class Matrix:
    """What every lane session needs besides its lane: the table, the project root, the flavour, and
    (once a session has read its options) the archs its compile covers (None: decide from the
    environment, :func:`..core.machine.compile_archs`) and the user's spec module it compiles instead of the
    registry (``--specs``)."""

    table: lane_table.Table
    root: Path
    gpu: bool
    archs: machine.ArchChoice | None = None
    team: TeamRun | None = None  # a compile lane over a user's spec module (:mod:`.team`)


def options(session) -> tuple[argparse.Namespace, list[str]]:
    """Our options from posargs (env vars as defaults); the rest is for pytest."""
    p = argparse.ArgumentParser(prog=f"nox -s {session.name} --", add_help=False)
    p.add_argument("--results", default=os.environ.get("NSA_SEL_RESULTS"))
    p.add_argument("--wheelhouse", default=os.environ.get("NSA_SEL_WHEELHOUSE"))
    p.add_argument("--torch", default=os.environ.get("NSA_SEL_TORCH"))
    p.add_argument("--allow-off-pair", action="store_true", default=os.environ.get("NSA_SEL_ALLOW_OFF_PAIR") == "1")
    p.add_argument("--torch-pairing", choices=PAIRINGS, default=os.environ.get("NSA_SEL_TORCH_PAIRING") or PAIRED,
                   help="CPU parity lanes: install the paired torch (default) or borrow the invoking one")
    # The compile's archs: this machine's GPU, else machine.NO_GPU_ARCHS; --all-archs (NSA_SEL_ARCHS=all) is
    # the table's full sweep.  Every session of one nox call gets the same posargs, so parity accepts them too.
    p.add_argument("--archs", dest="archs", default=os.environ.get("NSA_SEL_ARCHS"))
    p.add_argument("--all-archs", dest="archs", action="store_const", const=machine.ALL)
    # A user's spec module compiled instead of the registry, its records kept in the user's --results (team.py).
    p.add_argument("--specs", action="append", metavar="MODULE[:ATTR]")
    return p.parse_known_args(session.posargs)


def describe(kind: str, lane: lane_table.Lane, table: lane_table.Table) -> str:
    pair = f"triton {lane.triton} (torch {' / '.join(lane.torch) or 'none'}, python {lane.python})"
    if kind == "compile":
        return f"AOT compile smoke for sm_{'/'.join(map(str, table.archs))}: {pair}"
    if kind == "parity":
        return f"parity vs the float64 oracle (GPU, or interpreter with numpy{lane.numpy or ' any'} on CPU): {pair}"
    return f"pytest-benchmark vs SDPA (needs a GPU; skips without one): {pair}"


def run_lane(session, lane: lane_table.Lane, kind: str, m: Matrix) -> None:
    """One lane session: run file marked running, prepare, body, isolation check, run file completed.

    The run file is rewritten atomically at each step, so a lane that crashes or is killed
    leaves a valid 'running' file that ``pin`` reports as interrupted.
    """
    t0 = time.monotonic()
    opts, rest = options(session)
    try:  # a bad --archs is one line before anything is installed
        m = replace(m, archs=machine.compile_archs(m.table, opts.archs,
                                                 what="--archs" if any(a.startswith("--archs") for a in session.posargs) else "NSA_SEL_ARCHS"))
        if os.environ.get("NSA_SEL_JOBS"):
            jobs_override()
        if len(opts.specs or ()) > 1:
            raise ValueError(f"--specs given {len(opts.specs)} times: one spec module per run (a results "
                             "directory holds one module's verdicts); put every spec in one module")
        m = replace(m, team=team.lane_run((opts.specs or [None])[0], opts.results, kind, m.root,
                                          getattr(session, "invoked_from", os.getcwd())))
    except ValueError as exc:
        session.error(str(exc))
    results = m.team.results if m.team else Path(opts.results) if opts.results else m.root / "out" / "lanes"
    path = ledger.run_file(results, session.name)
    started = ledger.now_iso()
    mode = MODES[kind][0 if m.gpu else 1]
    # A team's records name the module and the torch its release pairs with (what the team would install).
    marks = {ledger.SPECS_FIELD: m.team.ref, "paired_torch": lane.paired_torch} if m.team else {}
    base = {"schema": ledger.SCHEMA, "lane": lane.label, "triton": lane.triton, "check": kind, "mode": mode,
            "session": session.name, "run_id": f"{session.name}@{started}", "machine": "cpu", "date": started,
            "candidate": lane.candidate, **ledger.imported_fields(None), **marks}
    ledger.write_run(path, base=base, status="running", started=started, records=[], stage=SETUP)
    stage = SETUP
    try:
        if kind == "bench" and not m.gpu:  # nothing to install or run: record the skip
            records, problem = bench_skip(session, lane, base)
        else:
            fp = prepare(session, lane, kind, opts, m)
            if fp is None:  # nox --install-only: the lane is installed, nothing ran
                path.unlink(missing_ok=True)
                session.log(f"lane {lane.title} installed (--install-only)")
                return
            base = ledger.base_record(lane, fp, check=kind, mode=mode, session=session.name,
                                      run_id=base["run_id"], knobs=dict(m.table.knobs))
            base.update(date=started, **marks)
            stage = CHECKS
            ledger.write_run(path, base=base, status="running", started=started, records=[], stage=stage)
            records, problem = BODIES[kind](session, lane, base, results, rest, m)
            records, leak = isolate(records, lane)
            session.log(f"{session.name}: its processes imported {imported_summary(records)}")
            problem = leak or problem
    except KeyboardInterrupt:
        ledger.write_run(path, base=base, status="interrupted", started=started, records=[],
                         note="interrupted (Ctrl-C)", stage=stage)
        raise
    except BaseException as exc:  # includes nox's session.error: the lane did not produce a verdict
        what = f"installing triton=={lane.triton} and the lane's requirements" if stage == SETUP else f"{kind} checks"
        ledger.write_run(path, base=base, status="error", started=started, records=[],
                         note=f"{stage} ({what}) failed: {type(exc).__name__}: {exc}", stage=stage)
        raise
    ledger.write_run(path, base=base, status="complete", started=started, records=records)
    for line in summary_lines(session.name, base, records, path, problem, time.monotonic() - t0, m.table):
        session.log(line)
    if problem == "skip":
        session.skip(records[-1]["message"])
    if problem:
        session.error(problem)


def isolate(records: list[dict], lane: lane_table.Lane) -> tuple[list[dict], str | None]:
    """Records whose process imported another Triton, or (interpreter records) a numpy outside the
    lane's range, become errors; the problem names what was imported (None: the lane was isolated).

    The numpy range is the Triton interpreter's (lanes.toml ``numpy_reason``): compiled kernels on a
    GPU do not go through numpy, so GPU and compile records are not held to it."""
    numpy_ok = SpecifierSet(lane.numpy or "")
    out, wrong = [], set()
    for rec in records:
        checked = ledger.enforce_isolation(rec)
        if checked is not rec:
            wrong.add(f"triton {rec['triton_imported']} instead of {lane.triton}")
        got_np = (rec.get("process") or {}).get("numpy")
        if checked is rec and got_np and rec.get("mode") == "interp" and Version(got_np) not in numpy_ok:
            why = f"its process imported numpy {got_np}, outside the lane's numpy{lane.numpy} ({lane.numpy_reason})"
            checked = {**rec, "verdict": ERROR, "isolation_error": why, "message": f"{why} | was {rec['verdict']}"}
            wrong.add(f"numpy {got_np} outside numpy{lane.numpy}")
        out.append(checked)
    if not wrong:
        return out, None
    n = sum(1 for r in out if r.get("isolation_error"))
    return out, (f"lane {lane.title} is not isolated: {n} record(s) came from processes that imported "
                 f"{'; '.join(sorted(wrong))}; they are recorded as errors")


def imported_summary(records: list[dict]) -> str:
    parts = []
    for name in ("triton", "numpy", "torch"):
        seen = sorted({str(v) for r in records if (v := ledger.imported_versions(r)[name])})
        parts.append(f"{name} {' + '.join(seen) or '(not imported)'}")
    return ", ".join(parts)


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
        *([f"warning:  {w}"] if (w := ledger.unscoped_warning(records)) else []),
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


_FINGERPRINTS: dict = {}  # (interpreter, session env, lane) -> fingerprint, within one nox run (--no-venv)
SESSION_NAME_VARS = ("NOX_CURRENT_SESSION",)  # nox's session.env entry naming the running session


def passthrough(session) -> bool:
    """True under --no-venv / -fb none: run in the current environment, install nothing."""
    return session.venv_backend == "none"


def prepare(session, lane: lane_table.Lane, kind: str, opts, m: Matrix) -> dict | None:
    """Install the lane (unless passthrough), set its env, check what it imports; the fingerprint."""
    version = session.python if isinstance(session.python, str) else platform.python_version()
    if not passthrough(session) and not lane.python_ok(version):
        session.error(f"triton {lane.triton} has no wheels for Python {version} (lane range {lane.python}); "
                      f"rerun with --force-python 3.11")
    # The package under test from src/ (no build step), then whatever the caller put on PYTHONPATH.
    session.env["PYTHONPATH"] = os.pathsep.join(p for p in (str(m.root / "src"), os.environ.get("PYTHONPATH")) if p)
    session.env["TRITON_CACHE_DIR"] = str(Path(session.cache_dir) / "triton" / f"triton-{lane.name}")
    for knob, value in m.table.knobs.items():
        session.env[knob] = os.environ.get(knob, str(value))  # explicit, recorded, user-overridable
    if not passthrough(session):
        install_lane(session, lane, kind, opts, m)
    # Under --no-venv nothing is installed between the sessions of one nox run: the same environment gives the
    # same fingerprint, so a lane's later sessions reuse the first one's (a probe imports torch: seconds each).
    # The key leaves out the variable nox sets to each session's own name, which the fingerprint does not read.
    env_key = tuple(sorted((k, v) for k, v in session.env.items() if k not in SESSION_NAME_VARS))
    again = (sys.executable, env_key, lane.name) if passthrough(session) else None
    fp = copy.deepcopy(_FINGERPRINTS.get(again)) if again else None
    if fp is None:
        out = session.run("python", "-c", FINGERPRINT, silent=True, log=False)
        if out is None:  # session.run does nothing under --install-only
            return None
        fp = json.loads([ln for ln in out.splitlines() if ln.startswith("NSA_SEL_FP ")][-1][len("NSA_SEL_FP "):])
        if again:
            _FINGERPRINTS[again] = copy.deepcopy(fp)
    problem = environment_problem(fp, lane, passthrough(session), interpreter=not m.gpu)
    if problem:
        session.error(problem)
    got, where = fp["imported"], fp["origins"]
    session.log(f"lane {lane.title}: triton {got['triton']} ({where['triton']}), numpy {got['numpy']}, "
                f"torch {got['torch']} ({where['torch']}), python {fp.get('python')}, "
                f"{'GPU ' + str(fp.get('gpu_name')) if m.gpu else 'CPU'}")
    return fp


def environment_problem(fp: dict, lane: lane_table.Lane, passthrough_mode: bool = False,
                        interpreter: bool = True) -> str | None:
    """Why the lane environment does not import the lane's Triton (and, where its checks run the
    Triton interpreter, the lane's numpy), or None."""
    got, where, errors = fp.get("imported") or {}, fp.get("origins") or {}, fp.get("import_errors") or {}
    hint = " (--no-venv needs the lane's exact Triton installed)" if passthrough_mode else ""
    if not got.get("triton") or Version(got["triton"]) != lane.version:
        return (f"lane {lane.title} needs triton {lane.triton}, the environment imports {got.get('triton')} "
                f"from {where.get('triton')}{hint} {errors.get('triton', '')}").rstrip()
    if interpreter and lane.numpy and (not got.get("numpy") or Version(got["numpy"]) not in SpecifierSet(lane.numpy)):
        return (f"lane {lane.title} needs numpy{lane.numpy} ({lane.numpy_reason}), the environment imports "
                f"{got.get('numpy')} from {where.get('numpy')} {errors.get('numpy', '')}").rstrip()
    return None


def install(session, opts, *args: str) -> None:
    """session.install, restricted to the wheelhouse when one is given (offline machines)."""
    offline = ["--no-index", "--find-links", opts.wheelhouse] if opts.wheelhouse else []
    session.install(*offline, *args)


def package_deps(root: Path) -> list[str]:
    """The library's requirements except torch and triton (the lane decides those), plus the toolkit's
    runtime ones from the ``matrix`` extra (rich, filelock) but not its drivers (nox, uv): a lane runs
    ``nsa-sel smoke`` and pytest, never nox."""
    from ... import _toml  # noqa: PLC0415

    project = _toml.loads((root / "pyproject.toml").read_text())["project"]
    deps = project["dependencies"] + project.get("optional-dependencies", {}).get("matrix", [])
    skip = ("torch", "triton", "nox", "uv")
    return [d for d in deps if re.match(r"[A-Za-z0-9._-]+", d).group(0).lower() not in skip]


# What the lanes' pytest runs import besides torch, triton and numpy (the lane decides those) and the
# package: pytest-timeout for the suites' timeouts, hypothesis for tests/library/api/test_fuzz.py (an interp test:
# without it the parity lane records skips), pytest-xdist to run the interpreter tests on every usable
# core.  Version floors come from pyproject's extras.
TEST_TOOLS = ("pytest", "pytest-timeout", "hypothesis", "pytest-xdist")
BENCH_TOOLS = ("pytest-benchmark",)


def test_tools(root: Path, kind: str) -> list[str]:
    """The requirement strings (``hypothesis>=6.100``) of what a ``kind`` lane's pytest needs, as the
    ``test`` and ``bench`` extras of pyproject.toml spell them."""
    from ... import _toml  # noqa: PLC0415

    extras = _toml.loads((root / "pyproject.toml").read_text())["project"].get("optional-dependencies", {})
    # Without the extras' own extras (pytest-benchmark[histogram]: plots no lane draws, wheels an offline
    # wheelhouse may lack).
    by_name = {re.match(r"[A-Za-z0-9._-]+", d).group(0).lower(): re.sub(r"\[[^]]*\]", "", d)
               for extra in ("bench", "test") for d in extras.get(extra, [])}
    names = TEST_TOOLS + (BENCH_TOOLS if kind == "bench" else ())
    return [by_name.get(n, n) for n in names]


def install_lane(session, lane: lane_table.Lane, kind: str, opts, m: Matrix) -> None:
    """GPU: the paired CUDA torch + exact Triton under the lane constraints.  CPU: never a CUDA torch.

    The package itself is not installed: PYTHONPATH points at src/ (no build step, works offline).
    A patch release or a candidate installs without the lane's constraints file (it pins the
    lane's own release).
    """
    unshare_torch(session)
    tools = test_tools(m.root, kind) + package_deps(m.root)
    cfile = lane_table.constraints_path(lane, m.root / "constraints")
    cons = ["-c", str(cfile)] if cfile.exists() and not (lane.candidate or lane.patch) else []
    if m.gpu and lane.paired_torch:
        _install_gpu(session, lane, opts, cons, tools)
        return
    if kind == "parity" and lane.paired_torch and not opts.torch and opts.torch_pairing == PAIRED:
        _install_paired_cpu(session, lane, opts, cons, tools)
        return
    if opts.torch:  # a CPU torch the user names; uv's --torch-backend keeps it off the CUDA index
        cpu = ["--torch-backend=cpu"] if session.venv_backend == "uv" and not opts.wheelhouse else []
        install(session, opts, *cpu, opts.torch)
    install(session, opts, *cons, *lane.requirements(), *tools)
    if not opts.torch:
        share_torch(session)


def _install_paired_cpu(session, lane, opts, cons, tools) -> None:
    """A CPU parity lane with the torch its Triton pairs with (PyPI's CUDA build: it runs on a CPU)."""
    import nox  # noqa: PLC0415 - only to recognise its failed-install exception

    session.log(f"lane {lane.title}: installing its pair, torch {lane.paired_torch} + triton {lane.triton} "
                "(the first time a download of 2.5-4 GB; then from the installer's cache)")
    try:
        install(session, opts, *cons, f"torch=={lane.paired_torch}", *lane.requirements(), *tools)
    except nox.command.CommandFailed:
        session.error(f"lane {lane.title}: torch {lane.paired_torch} (the pair of triton {lane.triton}) could not be "
                      "installed (offline, a wheelhouse without it, or pip capped below it: uv has no cap); "
                      "`-- --torch-pairing borrow` runs the lane with this environment's torch, recorded off-pair")


def _install_gpu(session, lane, opts, cons, tools) -> None:
    """The paired CUDA torch + exact Triton; with --allow-off-pair, fall back to the invoking torch
    (recorded as off-pair in every record: torch version + reason)."""
    import nox  # noqa: PLC0415 - only to recognise its failed-install exception

    try:
        install(session, opts, *cons, f"torch=={lane.paired_torch}", *lane.requirements(), *tools)
    except nox.command.CommandFailed:
        if not opts.allow_off_pair:
            raise
        session.warn(f"torch {lane.paired_torch} could not be installed; reusing the invoking environment's "
                     "torch (recorded as off-pair)")
        install(session, opts, *lane.requirements(), *tools)
        share_torch(session)


def invoking_torch() -> dict | None:
    """Torch and its dependencies in the invoking environment (nox's interpreter, else python on PATH)."""
    for exe in (sys.executable, shutil.which("python3"), shutil.which("python")):
        if not exe:
            continue
        res = subprocess.run([exe, "-c", SHARED_TORCH], capture_output=True, text=True)
        if res.returncode == 0 and res.stdout.strip():
            info = json.loads(res.stdout.strip().splitlines()[-1])
            if "torch" in info["dists"] and info["entries"]:
                return info
    return None


def share_torch(session) -> None:
    """Link the invoking environment's torch (and its dependencies, never triton or numpy) into a
    directory that a ``.pth`` file appends *after* the lane's own site-packages."""
    info = invoking_torch()
    if info is None:
        session.error("no torch in the invoking environment to share with this lane; name a CPU one "
                      "with `-- --torch /path/torch-X+cpu.whl` or NSA_SEL_TORCH (never a CUDA build)")
    shared = Path(session.virtualenv.location) / SHARED_DIR
    shutil.rmtree(shared, ignore_errors=True)
    shared.mkdir(parents=True)
    for entry in info["entries"]:
        (shared / Path(entry).name).symlink_to(entry)
    out = session.run("python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                      silent=True, log=False)
    if out is None:  # --install-only
        return
    Path(out.strip().splitlines()[-1], SHARED_PTH).write_text(f"{shared}\n")
    session.log(f"sharing the invoking torch with the lane (after its own packages): {', '.join(info['dists'])}")


def unshare_torch(session) -> None:
    """Remove the link before installing, so an installer never sees (or touches) the shared packages."""
    for pth in Path(session.virtualenv.location).glob(f"lib/python*/site-packages/{SHARED_PTH}"):
        pth.unlink()


def pin(session) -> None:
    """Body of ``nox -s pin``."""
    rc = ledger.main(list(session.posargs))
    if rc:
        session.error(f"nsa-sel pin exited with {rc}")


def constraints(session, m: Matrix) -> None:
    """Body of ``nox -s constraints``."""
    changed = lane_table.write_constraints(m.table, m.root / "constraints")
    session.log(f"{len(changed)} constraints file(s) rewritten: {', '.join(p.name for p in changed) or 'none'}")


__all__ = ["KINDS", "Matrix", "constraints", "describe", "isolate", "pin", "run_lane", "summary_lines"]
