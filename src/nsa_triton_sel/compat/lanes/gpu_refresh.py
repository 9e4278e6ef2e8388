"""The GPU evidence of every Triton release in one go, on one GPU machine.

``python -m nsa_triton_sel.compat.lanes.gpu_refresh --out DIR [--trees DIR] [--installed] [--expect all] [--gpus all]``

runs :mod:`.gpu_lane`'s stages for many releases at once: the installed Triton (``--installed``) and every
release tree that appears in ``--trees`` (``triton-X.Y.Z/`` with ``triton-X.Y.Z.ready`` beside it, as
``bench/device/slim_triton.py unpack`` leaves them; trees may keep arriving while it runs, until every release of
``--expect`` is there or ``--wait-s`` has passed).  The schedule:

- **one shard per GPU**: every release belongs to one of the visible GPUs (``--gpus``; the expected releases
  dealt out in version order, so those that arrive first are spread over all of them), and all its stages run
  there (``CUDA_VISIBLE_DEVICES``); each shard has its share of the cores.  On one GPU, the releases take
  turns on it, as below;

- **correctness first, concurrently**: per release ``compile`` (this GPU's arch only), then ``parity``,
  ``contract``, ``canary`` and ``warm`` (the bench selection once, untimed, into a scratch folder: the
  benchmarks' kernels land in the release's Triton cache) side by side.  Tasks take *slots* (a pytest process one,
  the parity stage's pytest-xdist workers one each, a compile ``--compile-jobs``), at most the shard's cores
  (the usable cores, ``os.sched_getaffinity``, split evenly) in all, and at most ``--gpu-tasks`` processes on
  its GPU at once.  A release's stages share one ``TRITON_CACHE_DIR``, so what the
  parity stage JIT-compiled is not compiled again by the contract and bench stages;
- **then the benchmarks, on a quiet machine**: once every correctness task of every release is done and no
  more trees are expected, ``bench`` of one release at a time per GPU, each GPU taking the next release of any
  shard, newest first (the GPUs are one model; each record names it).  Timings on an idle GPU with idle cores:
  the short training rows are bound by the host's launches, and a benchmark that ran beside another release's
  pytest-xdist workers measured them 26 % slower (the shards' benchmarks run side by side, each on its own
  GPU and cores).  A selection that keeps what ``MATRIX.md``'s speed table reads (:data:`BENCH_ARGS`);
- every stage has its limit (gpu_lane's own, SIGINT then SIGTERM then SIGKILL: partial reports survive), and
  the whole run a deadline (``--deadline-s``): what is still running then is stopped the same way.

Under ``DIR``: ``results/triton-X.Y.Z/`` (the run files ``nsa-sel pin --results`` merges; ``raw/``),
``logs/X.Y.Z-STAGE.log``, ``progress.log`` (one line per event), ``status.json`` (every task's state, exit
status and seconds, rewritten atomically) and, at the end, ``DONE``.  ``bench/device/device_refresh.sh`` drives it on
the device machine (parts in, background run, results out).  Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ..core import lane_table, machine, project
from . import checks, gpu_lane

# After compile, side by side.  "warm" is the bench selection run once per benchmark, untimed
# (--benchmark-disable), into a scratch folder: it JIT-compiles the benchmarks' kernels into the release's
# Triton cache while the CPU is busy anyway, so the bench stage, alone on the GPU, compiles nothing.
CORRECTNESS = ("parity", "contract", "canary", "warm")
WARM_ARGS = " --benchmark-disable"
# CPU slots a task takes: a pytest process is one thread (OMP_NUM_THREADS=1, TORCHINDUCTOR_COMPILE_THREADS=1);
# a compile stage runs --compile-jobs compiles at once; the others one process each.  The parity stage, the
# longest (its tests JIT-compile what the smoke did not), runs PARITY_WORKERS pytest-xdist workers
# (NSA_SEL_GPU_WORKERS) on its 2 slots: while the shard is full they take turns on the cores, and when a
# release's parity is the last task left on its shard they keep 4 cores busy instead of 2.
SLOTS = {"parity": 2, "contract": 1, "canary": 1, "warm": 1, "bench": 0}
PARITY_WORKERS = 4
GPU_STAGES = ("parity", "contract", "canary", "warm", "bench")
# Seconds per stage under a concurrent refresh (several releases share the CPU, so a stage takes longer than
# gpu_lane's defaults for a lone release); NSA_SEL_STAGE_LIMITS-style overrides with --limits.
LIMITS = {"compile": 300, "parity": 600, "contract": 480, "canary": 180, "warm": 300, "bench": 240}
# What MATRIX.md's speed table reads: the random-selection NSA shapes (forward and forward + backward at T = 4K
# and 32K), the seeds' packed shapes against SDPA, and auto within 5 % of triton.  Left out of the refresh:
# local selections, the dispatcher rows and the crossover sweep (run bench-X for those).
BENCH_ARGS = '-k "not local and not crossover and not dispatch"'
BENCH_ENV = {"NSA_BENCH_T": "4096,32768", **checks.BENCH_ENV}
POLL_S = 2.0
ANY = object()  # waiting_for_more's "any shard"


@dataclass
class Task:
    version: str
    stage: str
    tree: Path | None  # None: the installed Triton
    slots: int
    gpu: str | None = None  # the shard: a CUDA_VISIBLE_DEVICES entry (None: leave the variable as it is)
    state: str = "waiting"  # waiting, running, done, stopped
    rc: int | None = None
    started: float | None = None
    seconds: float | None = None
    proc: subprocess.Popen | None = field(default=None, repr=False)

    def row(self) -> dict:
        return {"version": self.version, "stage": self.stage, "gpu": self.gpu, "state": self.state, "rc": self.rc,
                "seconds": None if self.seconds is None else round(self.seconds, 1)}


class Refresh:
    def __init__(self, args, table: lane_table.Table, repo: Path):
        self.args, self.table, self.repo = args, table, repo
        self.out = args.out
        self.t0 = time.monotonic()
        self.tasks: list[Task] = []
        self.releases: dict[str, Path | None] = {}
        self.expect = expected(args.expect, table)
        self.cores = args.cores or machine.usable_cores()
        self.gpus = shards(getattr(args, "gpus", "all"))
        self.shard_cores = max(1, self.cores // len(self.gpus))
        # The expected releases dealt out over the shards in version order: the parts bring them oldest first,
        # so every GPU gets work from the start; a release nobody expected goes to the least loaded shard.
        self.planned = {v: self.gpus[i % len(self.gpus)] for i, v in enumerate(sorted(self.expect, key=_version_key))}
        self.limits = {**LIMITS, **parse_limits(args.limits)}
        self.looked_installed = False
        for sub in ("results", "logs", "cache"):
            (self.out / sub).mkdir(parents=True, exist_ok=True)

    # -- what there is to run
    def discover(self) -> None:
        if self.args.installed and not self.looked_installed:
            self.looked_installed = True
            v = installed_version()
            if v is None:
                self.log("--installed: triton does not import here without a tree")
            elif v not in self.releases:
                self.add(v, None)
        if self.args.trees and self.args.trees.is_dir():
            for ready in sorted(self.args.trees.glob("triton-*.ready")):
                v = ready.name[len("triton-"):-len(".ready")]
                if v not in self.releases and (self.args.trees / f"triton-{v}").is_dir():
                    self.add(v, self.args.trees / f"triton-{v}")

    def add(self, version: str, tree: Path | None) -> None:
        self.releases[version] = tree
        gpu = self.planned.get(version)
        if version not in self.planned:
            load = {g: sum(1 for v in self.releases if self.planned.get(v) == g) for g in self.gpus}
            gpu = self.planned[version] = min(self.gpus, key=lambda g: load[g])
        where = "" if gpu is None else f" on GPU {gpu}"
        self.log(f"{version}: {'the installed Triton' if tree is None else tree} joins the run{where}")
        stages = [s for s in self.args.stages if s != "bench"]
        for s in stages:
            slots = self.args.compile_jobs if s == "compile" else SLOTS[s]
            self.tasks.append(Task(version, s, tree, min(slots, self.shard_cores), gpu))
        if "bench" in self.args.stages:
            if not self.args.no_warm:
                self.tasks.append(Task(version, "warm", tree, SLOTS["warm"], gpu))
            self.tasks.append(Task(version, "bench", tree, 0, gpu))

    def waiting_for_more(self, gpu=ANY) -> bool:
        """Expected releases (of the shard ``gpu``, or of any) not here yet, while they may still come."""
        missing = [v for v in self.expect if v not in self.releases and (gpu is ANY or self.planned.get(v) == gpu)]
        return bool(missing) and time.monotonic() - self.t0 < self.args.wait_s

    # -- scheduling
    def ready(self, t: Task, gpu=ANY) -> bool:
        """Whether ``t`` may start; a benchmark on ``gpu`` (default: its own shard's)."""
        mine = [x for x in self.tasks if x.version == t.version]
        if t.stage == "compile":
            return True
        if t.stage in CORRECTNESS:
            return all(x.state in ("done", "stopped") for x in mine if x.stage == "compile")
        # bench: on a quiet machine (no correctness task anywhere, none to come), nothing else on its GPU
        return self.quiet() and not any(x.state == "running" and x.gpu == (t.gpu if gpu is ANY else gpu)
                                        for x in self.tasks)

    def quiet(self) -> bool:
        """No more releases to come and every correctness task of every release done."""
        return (not self.waiting_for_more()
                and all(x.state in ("done", "stopped") for x in self.tasks if x.stage != "bench"))

    def start_what_fits(self) -> None:
        for gpu in self.gpus:
            running = [t for t in self.tasks if t.state == "running" and t.gpu == gpu]
            if any(t.stage == "bench" for t in running):
                continue
            used = sum(t.slots for t in running)
            on_gpu = sum(t.stage in GPU_STAGES for t in running)
            for t in self.waiting_in_order():
                if t.stage == "bench":
                    if self.ready(t, gpu):  # any shard's benchmark, on this idle GPU
                        if t.gpu != gpu:
                            self.log(f"{t.version} bench: moves from GPU {t.gpu} to the idle GPU {gpu}")
                            t.gpu = gpu
                        self.launch(t)
                        break
                    continue
                if t.gpu != gpu or not self.ready(t):
                    continue
                if used and used + t.slots > self.shard_cores:
                    continue
                if t.stage in GPU_STAGES and on_gpu >= self.args.gpu_tasks:
                    continue
                self.launch(t)
                used += t.slots
                on_gpu += t.stage in GPU_STAGES

    def waiting_in_order(self) -> list[Task]:
        """Compiles first (they unlock the rest), then the longest stages, oldest release first; the benchmarks
        newest first (the speed table's ratios are to the newest release: it must not be the one cut off)."""
        rank = {"compile": 0, "parity": 1, "contract": 2, "canary": 3, "warm": 4, "bench": 5}
        newest_first = {v: i for i, v in enumerate(sorted(self.releases, key=_version_key, reverse=True))}

        def key(t):
            return (rank[t.stage], newest_first[t.version] if t.stage == "bench" else _version_key(t.version))
        return sorted((t for t in self.tasks if t.state == "waiting"), key=key)

    def launch(self, t: Task) -> None:
        env = dict(os.environ)
        path = [str(t.tree)] if t.tree else []
        env["PYTHONPATH"] = os.pathsep.join(path + [str(self.repo / "src"), str(self.repo)]
                                            + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
        env["TRITON_CACHE_DIR"] = str(self.out / "cache" / f"triton-{t.version}")
        stage = "bench" if t.stage == "warm" else t.stage  # gpu_lane's stage
        env["NSA_SEL_STAGE_LIMITS"] = f"{stage}={self.limits[t.stage]}"
        env["PYTHONUNBUFFERED"] = "1"
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # the refresh runs many processes: no pools
        if t.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = t.gpu
        # The refresh runs many releases side by side: only the parity stage spreads its tests over workers; the
        # warm pass is its own task, so the bench stage does not run one again.
        env[checks.GPU_WORKERS_ENV] = str(PARITY_WORKERS if t.stage == "parity" else 1)
        if t.stage == "compile":
            env["NSA_SEL_JOBS"] = str(t.slots)
        if stage == "bench":
            env[gpu_lane.BENCH_ARGS_ENV] = self.args.bench_args + (WARM_ARGS if t.stage == "warm" else "")
            for k, v in BENCH_ENV.items():
                env.setdefault(k, v)
        results = self.out / ("warm" if t.stage == "warm" else "results") / f"triton-{t.version}"  # warm: scratch
        cmd = [sys.executable, "-c", gpu_lane.SIGNALS_RESET, sys.executable, "-m", "nsa_triton_sel.compat.lanes.gpu_lane",
               "--results", str(results), "--stages", stage,
               "--constraints", str(self.repo / "constraints")]
        log = (self.out / "logs" / f"{t.version}-{t.stage}.log").open("w")
        t.proc = subprocess.Popen(cmd, env=env, cwd=self.repo, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        log.close()
        t.state, t.started = "running", time.monotonic()
        self.log(f"{t.version} {t.stage}: started ({t.slots} slot(s){'' if t.gpu is None else ', GPU ' + t.gpu})")

    def reap(self) -> None:
        for t in self.tasks:
            if t.state != "running":
                continue
            rc = t.proc.poll()
            backstop = self.limits[t.stage] + 2 * gpu_lane.GRACE_S + 60
            if rc is None and time.monotonic() - t.started > backstop:
                self.log(f"{t.version} {t.stage}: past its limit and gpu_lane's own stop; stopping it")
                gpu_lane.stop(t.proc, 10)
                rc = t.proc.poll()
            if rc is None:
                continue
            t.rc, t.seconds = rc, time.monotonic() - t.started
            t.state = "done"
            self.log(f"{t.version} {t.stage}: exit {rc} in {t.seconds:.0f} s")

    def stop_all(self, why: str) -> None:
        for t in self.tasks:
            if t.state == "running":
                self.log(f"{t.version} {t.stage}: {why}: stopping (SIGINT, SIGTERM, SIGKILL)")
                gpu_lane.stop(t.proc, 10)
                t.rc, t.seconds, t.state = t.proc.poll(), time.monotonic() - t.started, "stopped"
            elif t.state == "waiting":
                t.state = "stopped"

    def finished(self) -> bool:
        return not self.waiting_for_more() and all(t.state in ("done", "stopped") for t in self.tasks)

    # -- reporting
    def log(self, msg: str) -> None:
        line = f"[+{time.monotonic() - self.t0:5.0f} s] {msg}"
        print(line, flush=True)
        with (self.out / "progress.log").open("a") as f:
            f.write(line + "\n")

    def write_status(self, final: bool = False) -> None:
        status = {"elapsed_s": round(time.monotonic() - self.t0, 1), "final": final, "cores": self.cores,
                  "gpus": self.gpus, "shard_cores": self.shard_cores,
                  "expected": self.expect, "missing": [v for v in self.expect if v not in self.releases],
                  "tasks": [t.row() for t in self.tasks]}
        tmp = self.out / "status.json.tmp"
        tmp.write_text(json.dumps(status, indent=1) + "\n")
        os.replace(tmp, self.out / "status.json")

    def summary(self) -> str:
        stages = [s for s in self.args.stages if s != "bench"] + (["warm"] if "bench" in self.args.stages and
                                                                   not self.args.no_warm else []) + \
            (["bench"] if "bench" in self.args.stages else [])
        lines = [f"{'triton':<8} {'gpu':>4} " + " ".join(f"{s:>12}" for s in stages)]
        for v in sorted(self.releases, key=_version_key):
            cells = []
            for s in stages:
                t = next((x for x in self.tasks if x.version == v and x.stage == s), None)
                cells.append("—" if t is None else (f"{t.state}" if t.rc is None else f"rc {t.rc} {t.seconds:.0f}s"))
            lines.append(f"{v:<8} {self.planned.get(v) or '-':>4} " + " ".join(f"{c:>12}" for c in cells))
        moved = [f"{t.version} on GPU {t.gpu}" for t in self.tasks
                 if t.stage == "bench" and t.state != "waiting" and t.gpu != self.planned.get(t.version)]
        if moved:
            lines.append(f"benchmarks on another shard's GPU: {', '.join(moved)}")
        missing = [v for v in self.expect if v not in self.releases]
        if missing:
            lines.append(f"not carried in time: {', '.join(missing)}")
        return "\n".join(lines) + "\n"

    def run(self) -> int:
        deadline = self.t0 + self.args.deadline_s
        signal.signal(signal.SIGTERM, _interrupt)  # the driver's stop: end the tasks, write what there is
        gpus = "one GPU (CUDA_VISIBLE_DEVICES as given)" if self.gpus == [None] else f"GPUs {','.join(self.gpus)}"
        self.log(f"refresh: {gpus}, {self.shard_cores} of {self.cores} cores each, up to {self.args.gpu_tasks} "
                 f"GPU tasks per GPU, stages "
                 f"{','.join(self.args.stages)}, expecting {', '.join(self.expect) or 'what arrives'}")
        try:
            while True:
                self.discover()
                self.reap()
                if self.finished():
                    break
                if time.monotonic() > deadline:
                    self.stop_all(f"deadline {self.args.deadline_s:.0f} s")
                    break
                self.start_what_fits()
                self.write_status()
                time.sleep(POLL_S)
        except KeyboardInterrupt:
            self.stop_all("interrupted")
        self.write_status(final=True)
        text = self.summary()
        (self.out / "summary.txt").write_text(text)
        self.log("refresh done in %.0f s\n%s" % (time.monotonic() - self.t0, text))
        (self.out / "DONE").write_text(text)
        return 0 if all(t.rc == 0 for t in self.tasks) and not [v for v in self.expect if v not in self.releases] else 1


def _interrupt(*_):
    raise KeyboardInterrupt


def _version_key(v: str):
    try:
        return Version(v)
    except InvalidVersion:
        return Version("0")


def installed_version() -> str | None:
    """The Triton ``import triton`` finds without a tree (a child process: this one stays import-free)."""
    res = subprocess.run([sys.executable, "-c", "import triton; print(triton.__version__)"],
                         capture_output=True, text=True)
    return res.stdout.strip().splitlines()[-1] if res.returncode == 0 and res.stdout.strip() else None


def shards(text: str | None) -> list:
    """``--gpus``: ``all`` (every GPU this process may use, :func:`..core.machine.visible_gpus`) or a comma list
    of ``CUDA_VISIBLE_DEVICES`` entries; ``[None]`` (one shard, the variable left alone) where none is found."""
    text = (text or "all").strip()
    if text == "all":
        return machine.visible_gpus() or [None]
    gpus = [g.strip() for g in text.split(",") if g.strip()]
    if not gpus or len(set(gpus)) != len(gpus):
        raise SystemExit(f"gpu_refresh: --gpus {text!r}: expected all, or distinct GPU indices or UUIDs such as 0,1,2,3")
    return gpus


def expected(text: str, table: lane_table.Table) -> list[str]:
    if text in ("", "none"):
        return []
    if text == "all":
        return [r.triton for r in table.releases]
    out = [v.strip() for v in text.split(",") if v.strip()]
    for v in out:
        try:
            Version(v)
        except InvalidVersion:
            raise SystemExit(f"gpu_refresh: --expect {v!r} is not a version; accepted: all, none or X.Y.Z,...") from None
    return out


def parse_limits(text: str | None) -> dict[str, float]:
    try:
        return gpu_lane.parse_stage_seconds(text, "gpu_refresh: --limits", LIMITS)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nsa_triton_sel.compat.lanes.gpu_refresh", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True, help="results, logs, status.json, progress.log, DONE")
    p.add_argument("--trees", type=Path, help="folder of triton-X.Y.Z/ trees, each with triton-X.Y.Z.ready beside it")
    p.add_argument("--installed", action="store_true", help="also the Triton installed here")
    p.add_argument("--expect", default="all", help="releases to wait for: all (the table's), none, or X.Y.Z,...")
    p.add_argument("--wait-s", type=float, default=1200, help="how long trees may keep arriving")
    p.add_argument("--deadline-s", type=float, default=1500, help="the whole run's limit")
    p.add_argument("--stages", default=",".join(gpu_lane.STAGES))
    p.add_argument("--cores", type=int, default=0, help="CPU slots (default: the usable cores)")
    p.add_argument("--compile-jobs", type=int, default=4, help="compile processes per release's compile stage")
    p.add_argument("--gpus", default="all", help="GPUs to shard the releases over: all (the visible ones) or 0,1,...")
    p.add_argument("--gpu-tasks", type=int, default=16, help="processes on each GPU at once (correctness stages)")
    p.add_argument("--bench-args", default=BENCH_ARGS, help="pytest arguments of the bench stage")
    p.add_argument("--no-warm", action="store_true", help="no untimed bench pass beside the correctness stages")
    p.add_argument("--limits", help="per-stage seconds, e.g. parity=600,bench=240")
    p.add_argument("--constraints", type=Path, help="the constraints directory (default: found from the cwd)")
    args = p.parse_args(argv)
    try:
        args.stages = gpu_lane.parse_stages(args.stages)
    except ValueError as exc:
        print(f"gpu_refresh: {exc}", file=sys.stderr)
        return 2
    if not args.installed and not args.trees:
        print("gpu_refresh: nothing to run: give --installed and/or --trees DIR", file=sys.stderr)
        return 2
    cdir = project.constraints_dir(args.constraints)
    table = lane_table.load_table(cdir / project.TABLE_NAME)
    args.out.mkdir(parents=True, exist_ok=True)
    args.out = args.out.resolve()
    if args.trees:
        args.trees = args.trees.resolve()
    return Refresh(args, table, cdir.parent.resolve()).run()


if __name__ == "__main__":
    sys.exit(main())
