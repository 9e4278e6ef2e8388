"""The GPU evidence of the Triton this environment imports, as lane run files: no nox, no network.

``python -m nsa_triton_sel.compat.lanes.gpu_lane --results DIR [--stages compile,parity,contract,canary,bench]``
runs, for the Triton that ``import triton`` finds here (a wheel unpacked first on ``PYTHONPATH``
is how another release comes in on a machine without a network; ``python -m
nsa_triton_sel.compat.lanes.gpu_refresh`` does that for many releases at once):

- ``compile``: the compile smoke (``nsa-sel smoke``) for this GPU's arch only, what the planner launches;
- ``parity``: ``pytest -m "gpu and not contract"`` over ``tests/`` (forward parity and gradient parity:
  the ``backward`` column), records through the toolkit's pytest plugin;
- ``contract``: ``pytest -m contract`` (the user contract on a GPU, ``tests/test_contract_gpu*.py``):
  the ``contract`` column, judged against the runtime hash (the stage to re-run after a host-side edit);
- ``canary``: the GPU miscompile canaries (:mod:`..canaries.gpu`), each in its own process;
- ``bench``: ``pytest bench/`` (pytest-benchmark against packed SDPA at the seeds' packed shapes and
  the canonical NSA shape, forward and forward+backward; and ``bench/suites/test_auto_route.py``: the
  default ``backend="auto"`` within 5 % of ``backend="triton"``).

Each stage writes a run file the way a nox lane session does (``running`` first, ``complete`` at the
end), so a stage that is killed still leaves an ``interrupted`` record and ``nsa-sel pin --results
DIR`` merges them.  The stage limit is the toolkit's own (:func:`stop`): SIGINT first, so pytest writes
the report of the tests that ran, delivered even where this process inherited SIGINT ignored (``nohup
... &``), then SIGTERM, then SIGKILL, each to the stage's process group.  The torch is whatever is installed: a release torch does not pin is recorded
off-pair with the reason (``NSA_SEL_OFF_PAIR_NOTE`` adds why, e.g. "no network on the GPU machine").
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from .. import ledger
from ..core import lane_table, machine, project
from .checks import BODIES, gpu_tests
from .nox_sessions import Matrix, isolate

STAGES = ("compile", "parity", "contract", "canary", "bench")
MODES = {"compile": "aot", "parity": "gpu", "contract": "gpu", "canary": "gpu", "bench": "gpu"}
CHECK = {"compile": "compile", "parity": "parity", "contract": "contract", "canary": "gpu-canary", "bench": "bench"}
# The pytest selection of each test stage: the contract suite (marker `contract`, also `gpu`) is a stage of its
# own, so that a runtime-only change re-runs it alone; its records go to the `contract` column either way.
MARKERS = {"parity": "gpu and not contract", "contract": "contract"}
# Seconds per stage (NSA_SEL_STAGE_LIMITS="parity=200,bench=120" overrides); see stop() for what happens then.
LIMITS = {"compile": 90, "parity": 150, "contract": 180, "canary": 60, "bench": 150}
GRACE_S = 30
# NSA_SEL_BENCH_ARGS: extra pytest arguments of the bench stage (e.g. a -k selection: gpu_refresh uses one).
BENCH_ARGS_ENV = "NSA_SEL_BENCH_ARGS"
# Runs a command with SIGINT back at its default disposition: a process started under `nohup ... &` (or
# by a CI wrapper) inherits SIGINT *ignored*, and Python then never installs its KeyboardInterrupt handler,
# so the stage limit's SIGINT would be lost and pytest would write no partial report.  exec keeps SIG_DFL.
SIGNALS_RESET = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                 "os.execvp(sys.argv[1], sys.argv[1:])")


def parse_stage_seconds(text: str | None, source: str, stages) -> dict[str, float]:
    """``STAGE=SECONDS,...`` as a dict; ``ValueError`` naming ``source`` (where the text came from) on an unknown
    stage or a value that is not a number."""
    out = {}
    for part in filter(None, (text or "").split(",")):
        name, _, value = part.partition("=")
        if name not in stages:
            raise ValueError(f"{source}: unknown stage {name!r}; accepted: {', '.join(stages)}")
        try:
            out[name] = float(value)
        except ValueError:
            raise ValueError(f"{source}: {part!r} is not STAGE=SECONDS") from None
    return out


def parse_stages(text: str) -> list[str]:
    """``--stages`` (``compile,parity,...``) as a list; ``ValueError`` on a stage not in :data:`STAGES`."""
    stages = [s for s in text.split(",") if s]
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise ValueError(f"unknown stage(s) {unknown}; accepted: {', '.join(STAGES)}")
    return stages


def stage_limits(text: str | None) -> dict[str, float]:
    return {**LIMITS, **parse_stage_seconds(text, "NSA_SEL_STAGE_LIMITS", LIMITS)}


class LocalSession:
    """The part of a nox session the lane bodies use, running commands in this environment."""

    def __init__(self, name: str, env: dict, limit_s: float | None = None, grace_s: float = GRACE_S):
        self.name, self.env, self.limit_s, self.grace_s = name, env, limit_s, grace_s

    def run(self, *args, env=None, log=True, silent=False, success_codes=None):  # noqa: ARG002 - nox's signature
        cmd = [sys.executable if args[0] == "python" else args[0], *args[1:]]
        if log:
            self.log(" ".join(cmd))
        proc = subprocess.Popen([sys.executable, "-c", SIGNALS_RESET, *cmd], env={**os.environ, **self.env, **(env or {})},
                                text=True, start_new_session=True,
                                stdout=subprocess.PIPE if silent else None, stderr=subprocess.STDOUT if silent else None)
        try:
            out, _ = proc.communicate(timeout=self.limit_s)
        except subprocess.TimeoutExpired:
            self.log(f"stage limit {self.limit_s:.0f} s reached: SIGINT (pytest writes what ran), then SIGTERM, SIGKILL")
            out = stop(proc, self.grace_s)
        return out if silent else None

    def log(self, msg: str) -> None:
        print(f"[{self.name}] {msg}", flush=True)

    warn = log


def stop(proc: subprocess.Popen, grace_s: float = GRACE_S) -> str | None:
    """End a stage's process group: SIGINT (pytest writes the report of what ran), SIGTERM after ``grace_s``,
    SIGKILL after as long again; the output so far.  The group's leader was started with SIGINT at its
    default (:data:`SIGNALS_RESET`), whatever this process inherited."""
    for sig, wait in ((signal.SIGINT, grace_s), (signal.SIGTERM, grace_s), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            return proc.communicate(timeout=wait)[0]
        except subprocess.TimeoutExpired:
            continue
    return None


def fingerprint() -> dict:
    """This process's fingerprint with what it imported (triton, numpy, torch), as a nox lane's."""
    from ..core import env  # noqa: PLC0415

    fp = env.lane_fingerprint()
    fp["git_commit"] = fp.get("git_commit") or None  # env.fingerprint: NSA_SEL_GIT_COMMIT first, else git
    return fp


def lane_for(version: str, table: lane_table.Table) -> lane_table.Lane:
    """The table's row for this release, or a temporary (never paired) lane for an unlisted one."""
    listed = table.for_version(version)
    return listed if listed is not None else lane_table.candidate_lane(version, table)


def base_for(kind: str, lane, fp: dict, table, started: str) -> dict:
    session = f"{kind}-{lane.name}"
    base = ledger.base_record(lane, fp, check=CHECK[kind], mode=MODES[kind], session=session,
                              run_id=f"{session}@{started}", knobs=dict(table.knobs))
    base["date"] = started
    note = os.environ.get("NSA_SEL_OFF_PAIR_NOTE")
    if note and not base["torch_paired"]:
        base["off_pair_reason"] = f"{base['off_pair_reason']}; {note}"
    return base


def canary_records(results: list[dict], base: dict, imported: dict | None = None) -> list[dict]:
    """Ledger records (check ``gpu-canary``) from :func:`..canaries.gpu.run_all`'s results (made here, so the
    canaries never import the ledger, which renders them)."""
    return [ledger.record({**base, "check": "gpu-canary"}, kernel=f"gpu-canary/{r['name']}", verdict=r["verdict"],
                          message=r["message"], metrics=r["metrics"], imported=imported) for r in results]


def run_stage(kind: str, lane, fp: dict, m: Matrix, results: Path, limit_s: float) -> tuple[int, str | None]:
    """One stage -> its run file; (number of records, problem or None)."""
    started = ledger.now_iso()
    base = base_for(kind, lane, fp, m.table, started)
    path = ledger.run_file(results, base["session"])
    ledger.write_run(path, base=base, status="running", started=started, records=[], stage="checks")
    session = LocalSession(base["session"], {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}, limit_s)
    try:
        if kind == "canary":
            from ..canaries import gpu  # noqa: PLC0415

            results_ = gpu.run_all(timeout_s=max(10.0, limit_s / len(gpu.CANARIES)))
            records, problem = canary_records(results_, base, imported=fp["imported"]), None
        elif kind in MARKERS:
            records, problem = gpu_tests(session, base, results, MARKERS[kind], [])
        else:
            rest = shlex.split(os.environ.get(BENCH_ARGS_ENV, "")) if kind == "bench" else []
            records, problem = BODIES[kind](session, lane, base, results, rest, m)
        records, leak = isolate(records, lane)
        problem = leak or problem
    except BaseException as exc:
        ledger.write_run(path, base=base, status="error", started=started, records=[],
                         note=f"{kind} stage failed: {type(exc).__name__}: {exc}", stage="checks")
        if isinstance(exc, KeyboardInterrupt):
            raise
        return 0, f"{type(exc).__name__}: {exc}"
    ledger.write_run(path, base=base, status="complete", started=started, records=records)
    session.log(f"{len(records)} record(s) -> {path}" + (f"; {problem}" if problem else ""))
    warning = ledger.unscoped_warning(records)
    if warning:
        session.log(f"warning: {warning}")
    return len(records), problem


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nsa_triton_sel.compat.lanes.gpu_lane", description=__doc__.split("\n")[0])
    p.add_argument("--results", required=True, type=Path, help="directory for the run files")
    p.add_argument("--stages", default=",".join(STAGES), help=f"comma list of {', '.join(STAGES)}")
    p.add_argument("--constraints", type=Path, help="the constraints directory (default: found from the cwd)")
    args = p.parse_args(argv)
    try:
        stages = parse_stages(args.stages)
        limits = stage_limits(os.environ.get("NSA_SEL_STAGE_LIMITS"))
    except ValueError as exc:
        print(f"gpu_lane: {exc}", file=sys.stderr)
        return 2
    table = lane_table.load_table(project.constraints_dir(args.constraints) / project.TABLE_NAME)
    for knob, value in table.knobs.items():
        os.environ.setdefault(knob, str(value))  # as the nox lanes: explicit, recorded, user-overridable
    fp = fingerprint()
    got = fp["imported"].get("triton")
    if not got:
        print(f"gpu_lane: triton does not import here: {fp.get('import_errors', {}).get('triton')}", file=sys.stderr)
        return 2
    lane = lane_for(got, table)
    arch = fp.get("compute_capability")
    os.environ.setdefault("NSA_SEL_ARCHS", str(arch).replace(".", "") if arch else ",".join(map(str, table.archs)))
    os.environ.setdefault("NSA_SEL_JOBS", str(machine.usable_cores()))  # compiles run in child processes, one per core
    m = Matrix(table=table, root=project.constraints_dir(args.constraints).parent, gpu=True)
    args.results.mkdir(parents=True, exist_ok=True)
    print(f"gpu_lane: triton {got} from {fp['origins'].get('triton')} (lane {lane.label}"
          f"{', not in the table: candidate' if lane.candidate else ''}); torch {fp.get('torch')}; "
          f"GPU {fp.get('gpu_name')} (sm_{os.environ['NSA_SEL_ARCHS']}); sources: compiler {fp.get('compiler_hash')}, "
          f"runtime {fp.get('runtime_hash')}", flush=True)
    problems = {}
    for kind in stages:
        n, problem = run_stage(kind, lane, fp, m, args.results, limits[kind])
        if problem:
            problems[kind] = problem
    summary = {"triton": got, "lane": lane.label, "problems": problems, "compiler_hash": fp.get("compiler_hash"),
               "runtime_hash": fp.get("runtime_hash"), "torch": fp.get("torch"), "gpu": fp.get("gpu_name")}
    suffix = "" if stages == list(STAGES) else "-" + "-".join(stages)  # one file per stage set: runs in parallel
    (args.results / f"summary-{got}{suffix}.txt").write_text(json.dumps(summary, indent=1) + "\n")
    print("gpu_lane: " + ("all stages passed" if not problems else f"problems: {problems}"), flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
