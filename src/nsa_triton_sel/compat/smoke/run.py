"""One smoke run: a probe compile per arch, then every (spec, arch) in child processes.

Which Triton the verdicts are about: a run started for a declared release (``expect_triton``,
what a lane passes) judges canary expectations and skip rules by *that* release, and reports
every child that imported another one (:attr:`.report.SmokeReport.wrong_triton`).  Keying the
expectations on what the children reported would let a leaked Triton pass for the lane's own,
which is how lanes 3.0-3.8 once "passed" with Triton 3.9.
"""

from __future__ import annotations

import datetime as _dt
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from . import static_check
from ..core.machine import parse_archs, usable_cores  # noqa: F401 - parse_archs re-exported: smoke.parse_archs, the CLI's --arch
from ..registry.compile_spec import CompileSpec, check_unique, load_specs
from ..core.verdicts import COMPILE_ERROR, CRASH, OK, UNSUPPORTED
from .children import ServerPool, child_env, forking, kill_live_children, recorded_env, run_child
from .report import SmokeReport, SmokeResult

DEFAULT_ARCHS = (80, 89, 90)
PROBE_SOURCE = '''"""Probe: a tiny fp16 tl.dot kernel; if it does not compile, the arch is unsupported."""
import triton
import triton.language as tl


@triton.jit
def probe_dot(A, B, C, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(A + offs[:, None] * BLOCK + offs[None, :])
    b = tl.load(B + offs[:, None] * BLOCK + offs[None, :])
    tl.store(C + offs[:, None] * BLOCK + offs[None, :], tl.dot(a, b))
'''


def default_jobs() -> int:
    """One compile per usable core (each compile is single-threaded)."""
    return usable_cores()


def _probe_spec(workdir: Path) -> CompileSpec:
    path = workdir / "probe_kernel.py"
    path.write_text(PROBE_SOURCE)
    return CompileSpec(name="probe/dot", kernel=f"{path}:probe_dot", constexprs={"BLOCK": 32})


def run_smoke(specs=None, archs=DEFAULT_ARCHS, jobs=None, timeout=120.0, progress=True,
              python=None, keep=None, console=None, expect_triton: str | None = None,
              progress_every: int | None = None) -> SmokeReport:
    """Compile ``specs`` (default: the package registry) for each arch; returns the report.

    ``python`` runs the children under another interpreter (a lane's venv); ``keep`` is a
    directory to keep each compile's request, stderr and cache in (default: a temp dir
    that is removed); ``expect_triton`` is the release the run is for (see the module docstring).
    ``progress``: True/"auto" (a bar on a terminal, else a line every ``progress_every`` compiles),
    "bar", "lines", False/"off".
    """
    from .render import PROGRESS_EVERY, Progress  # noqa: PLC0415 - rich only when a run happens

    specs = _resolve_specs(specs)
    archs = parse_archs(archs)
    jobs = int(jobs or default_jobs())
    python = python or sys.executable
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    root = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="nsa-smoke-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        every = progress_every or PROGRESS_EVERY
        with Progress(progress, console, total=len(archs) * len(specs), every=every, archs=archs) as bar:
            probes = _run_probes(root, archs, jobs, timeout, python, bar)
            version = _triton_version(probes, python)
            judged = expect_triton or version
            results, skipped = _run_all(specs, archs, probes, judged, root, jobs, timeout, python, bar)
    except BaseException:
        kill_live_children()
        raise
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    report = SmokeReport(triton=version, archs=archs, jobs=jobs, env=recorded_env(), started=started,
                         results=results, skipped=skipped, static=static_check.check_specs(specs, judged),
                         expected_triton=expect_triton)
    report.wall_s = time.perf_counter() - t0
    return report


def _resolve_specs(specs) -> list[CompileSpec]:
    if specs is None:
        from ..registry.specs import SPECS  # noqa: PLC0415

        specs = SPECS
    elif isinstance(specs, str):
        specs = load_specs(specs)
    specs = list(specs)
    check_unique(specs)
    if not specs:
        raise ValueError("no compile specs to run")
    return specs


# Probe verdicts after which every variant is compiled for the arch.  A probe that *raised* means this
# Triton cannot target the arch (its ptxas, or Triton itself, says so): every variant is
# ``unsupported`` with that reason, uncompiled.  A probe that *crashed* is a compiler abort, a defect
# of the release, not a missing target: every variant is compiled, so each gets its own verdict
# (``crash`` where it aborts too, which a known-bad window then names; Triton 3.0 on sm_100).
PROBE_COMPILES_ALL = (OK, CRASH)


def _run_probes(root, archs, jobs, timeout, python, bar) -> dict:
    """Compile the probe kernel once per arch (what its verdict means: :data:`PROBE_COMPILES_ALL`)."""
    probe = _probe_spec(root)
    out = {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futs = {pool.submit(run_child, probe.request(a), root / f"probe-sm{a}", timeout, python): a for a in archs}
        for fut in as_completed(futs):
            out[futs[fut]] = fut.result()
            bar.probe(f"probe sm_{futs[fut]}: {out[futs[fut]]['verdict']}")
    return out


def _triton_version(probes: dict, python: str) -> str:
    """The Triton the children import: what a probe reported, else what a child prints."""
    for res in probes.values():
        if res.get("triton"):
            return res["triton"]
    try:  # every probe crashed: ask a child (same environment as the compiles) directly
        out = subprocess.run([python, "-c", "import triton; print(triton.__version__)"], capture_output=True,
                             text=True, timeout=120, env=child_env(tempfile.gettempdir()))
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _run_all(specs, archs, probes, version, root, jobs, timeout, python, bar):
    """``(results, skipped)``: every (spec, arch) compiled, except where the spec is never launched."""
    todo, results, skipped = [], [], []
    for i, spec in enumerate(specs):
        for arch in archs:
            if version != "unknown" and spec.skipped(version, arch):
                skipped.append({"spec": spec.name, "arch": arch, "why": spec.skip_reason()})
                bar.advance(f"{spec.name} sm_{arch}: skipped", "skipped", compiled=False)
            elif probes[arch]["verdict"] not in PROBE_COMPILES_ALL:
                results.append(_unsupported_arch(spec, arch, probes[arch], version))
                bar.advance(f"{spec.name} sm_{arch}: unsupported", UNSUPPORTED, compiled=False)
            else:
                todo.append((i, spec, arch))
    bar.compiling(len(todo))
    lock = threading.Lock()
    # Compile servers import Triton once per worker and fork a process per compile (forkserver.py);
    # without fork, one new child per compile.
    servers = ServerPool(root, python) if forking() else None
    compile_one = servers.compile if servers else (lambda req, wd, t: run_child(req, wd, t, python))
    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futs = {pool.submit(compile_one, spec.request(arch), root / f"{i:03d}-sm{arch}", timeout):
                    (spec, arch) for i, spec, arch in todo}
            for fut in as_completed(futs):
                spec, arch = futs[fut]
                res = make_result(spec, arch, fut.result(), version)
                with lock:
                    results.append(res)
                bar.advance(f"{spec.name} sm_{arch}: {res.verdict}", _tally(res))
    finally:
        if servers:
            servers.close()
    order = {s.name: i for i, s in enumerate(specs)}
    results.sort(key=lambda r: (order[r.spec], r.arch))
    return results, skipped


def _tally(res: SmokeResult) -> str:
    """The progress count a result goes to: a canary is meant to fail, so it counts as (un)expected."""
    if not res.canary:
        return res.verdict
    return {True: "canary as expected", False: "canary UNEXPECTED"}.get(res.as_expected, f"canary {res.verdict}")


def _unsupported_arch(spec, arch, probe, version) -> SmokeResult:
    msg = f"sm_{arch} not supported by this Triton (probe kernel: {probe['verdict']}: {probe.get('message', '')})"
    raw = {"verdict": UNSUPPORTED, "message": msg[:1000], "seconds": 0.0, "imported": probe.get("imported") or {},
           "target_unsupported": True}
    return make_result(spec, arch, raw, version)


def _check_shared(res: SmokeResult) -> None:
    """An ``ok`` compile that needs more shared memory than the arch gives a program cannot launch
    there (Triton raises OutOfResources at the first call): a compile error, found without the GPU."""
    from ...device import shared_limit  # noqa: PLC0415 - the library's table of shared memory per arch

    limit, used = shared_limit(res.arch), res.metrics.get("shared")
    if res.verdict == OK and limit and isinstance(used, int) and used > limit:
        res.verdict = COMPILE_ERROR
        res.message = (f"needs {used} bytes of shared memory per program; sm_{res.arch} allows {limit} "
                       "(device.SHARED_PER_BLOCK in nsa_triton_sel/device.py): the launch would fail with OutOfResources on that GPU")


def make_result(spec: CompileSpec, arch: int, raw: dict, version: str) -> SmokeResult:
    """A :class:`SmokeResult` from a child's raw result, with the canary expectation checked.

    ``version`` is the release the run is judged for (the declared one when there is one).
    """
    res = SmokeResult(
        spec=spec.name, kernel=spec.kernel_name, arch=arch, verdict=raw["verdict"],
        message=raw.get("message", ""), canary=spec.canary, seconds=raw.get("seconds", 0.0),
        metrics=raw.get("metrics") or {}, returncode=raw.get("returncode"),
        stderr_tail=raw.get("stderr_tail", "") if raw["verdict"] != OK else "",
        imported=raw.get("imported") or {},
    )
    _check_shared(res)
    # A canary's expectation is about a target the release has: where its toolchain has none, it is not judged.
    if spec.canary and version != "unknown" and not raw.get("target_unsupported"):
        res.expected = spec.expected_verdicts(version)
        if res.expected is not None:
            needle = spec.expected_substring(version)
            text = f"{res.message}\n{res.stderr_tail}"
            res.as_expected = res.verdict in res.expected and (needle is None or needle in text)
    return res
