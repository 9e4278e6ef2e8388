"""Triton compatibility matrix: compile-X / parity-X / bench-X per lane of constraints/lanes.toml.

  nox -s compile-3.9 parity-3.9      newest lane (the default)     nox -t compile parity   every CPU lane
  nox -s parity-3.1 bench-3.1        one lane (compile runs first) nox -s pin              ledger + MATRIX.md
  nox -s check-upgrade -- 3.10.0     pre-upgrade check             nox -s constraints      regenerate triton-X.txt

compile-X: AOT compile smoke (nsa-sel smoke, sm_80/89/90, no GPU).  parity-X: GPU parity, or without a
GPU the interpreter suite (pytest -m interp) with the lane's numpy after an interpreter probe.  bench-X:
pytest-benchmark vs SDPA on a GPU, else a recorded skip.  After `--`: --results DIR (NSA_SEL_RESULTS),
--wheelhouse DIR (NSA_SEL_WHEELHOUSE, offline), --torch SPEC (NSA_SEL_TORCH, CPU lanes), --allow-off-pair
(NSA_SEL_ALLOW_OFF_PAIR=1); the rest goes to pytest.  NSA_SEL_GPU=0/1 forces the flavour.  --no-venv
runs a lane in the current environment when its exact Triton is installed there.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import nox

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.error_on_external_run = False

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "src"))  # lanes/ledger need only the stdlib and packaging (a nox dependency)

from nsa_triton_sel.compat import lanes as _lanes  # noqa: E402
from nsa_triton_sel.compat import ledger as _ledger  # noqa: E402

TABLE = _lanes.load_table()
KINDS = ("compile", "parity", "bench")
nox.options.sessions = [f"compile-{TABLE.newest().label}", f"parity-{TABLE.newest().label}"]

# Runs inside the lane environment: the fingerprint (nsa_triton_sel.compat.env) plus the imported triton.
_FINGERPRINT = """
import json, sys
try:
    from nsa_triton_sel.compat.env import fingerprint
    fp = fingerprint()
except Exception as exc:  # a broken env module must not hide the lane's own result
    import platform; fp = {"python": platform.python_version(), "fingerprint_error": repr(exc)}
try:
    import triton; fp["triton_imported"] = triton.__version__
except Exception as exc:
    fp["triton_imported"] = None; fp["triton_import_error"] = repr(exc)
try:
    import torch; fp["torch"] = torch.__version__; fp["cuda_runtime"] = torch.version.cuda
except Exception:
    pass
print("NSA_SEL_FP " + json.dumps(fp))
"""
_PROBE = "import json, nsa_triton_sel.compat.env as e; print('NSA_SEL_PROBE ' + json.dumps(e.interpreter_usable()))"
# Runs a command and stores its exit status in a file: nox's session.run reports only pass/fail,
# and the lanes need to tell "tests failed" (1) from "nothing collected" (5) or a crash (signal).
_RC_WRAP = ("import subprocess, sys; rc = subprocess.call([sys.executable] + sys.argv[2:]); "
            "open(sys.argv[1], 'w').write(str(rc))")
_TORCH_SITE = "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))"


def _gpu_mode() -> bool:
    """GPU flavour when NSA_SEL_GPU=1, or when unset and nvidia-smi lists a GPU."""
    forced = os.environ.get("NSA_SEL_GPU", "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        res = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return res.returncode == 0 and "GPU" in res.stdout


GPU = _gpu_mode()


# ----------------------------------------------------------------------------------------------
# Helpers shared by the lane sessions
# ----------------------------------------------------------------------------------------------

def _options(session: nox.Session) -> tuple[argparse.Namespace, list[str]]:
    """Our options from posargs (env vars as defaults); the rest is for pytest."""
    p = argparse.ArgumentParser(prog=f"nox -s {session.name} --", add_help=False)
    p.add_argument("--results", default=os.environ.get("NSA_SEL_RESULTS"))
    p.add_argument("--wheelhouse", default=os.environ.get("NSA_SEL_WHEELHOUSE"))
    p.add_argument("--torch", default=os.environ.get("NSA_SEL_TORCH"))
    p.add_argument("--allow-off-pair", action="store_true", default=os.environ.get("NSA_SEL_ALLOW_OFF_PAIR") == "1",
                   help="GPU: reuse the invoking environment's torch when the paired one cannot be installed")
    return p.parse_known_args(session.posargs)


def _passthrough(session: nox.Session) -> bool:
    """True under --no-venv / -fb none: run in the current environment, install nothing."""
    return session.venv_backend == "none"


def _install(session: nox.Session, opts, *args: str) -> None:
    """session.install, restricted to the wheelhouse when one is given (offline machines)."""
    offline = ["--no-index", "--find-links", opts.wheelhouse] if opts.wheelhouse else []
    session.install(*offline, *args)


def _invoking_torch_site() -> str | None:
    """site-packages of the invoking environment's torch: nox's interpreter, else python on PATH."""
    for exe in (sys.executable, shutil.which("python3"), shutil.which("python")):
        if not exe:
            continue
        res = subprocess.run([exe, "-c", _TORCH_SITE], capture_output=True, text=True)
        if res.returncode == 0 and res.stdout.strip():
            return res.stdout.strip().splitlines()[-1]
    return None


def _share_torch(session: nox.Session, site: str) -> None:
    """Expose the invoking environment's (CPU) torch to the lane through a .pth file.

    The directory is appended after the lane's own site-packages, so the lane's triton and numpy
    shadow the invoking ones; .pth files inside it are not processed, so nothing else is activated.
    Written after every install, so an installer never sees (or touches) the shared packages.
    """
    out = session.run("python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                      silent=True, log=False)
    if out is None:  # --install-only
        raise _InstallOnly
    purelib = out.strip().splitlines()[-1]
    Path(purelib, "_nsa_sel_shared_torch.pth").write_text(site + "\n")


def _unshare_torch(session: nox.Session) -> None:
    if _passthrough(session):
        return
    for pth in Path(session.virtualenv.location).glob("lib/python*/site-packages/_nsa_sel_shared_torch.pth"):
        pth.unlink()


def _prepare(session: nox.Session, lane: _lanes.Lane, kind: str, opts) -> dict:
    """Install the lane (unless passthrough), set its env, verify Triton; returns the fingerprint."""
    _check_python(session, lane)
    # The package under test (no build or install step), then whatever the caller put on
    # PYTHONPATH: an offline GPU machine can bring another Triton as an unpacked tree there.
    session.env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p)
    session.env["TRITON_CACHE_DIR"] = str(session.cache_dir / "triton" / f"triton-{lane.label}")
    for knob, value in TABLE.knobs.items():
        session.env[knob] = os.environ.get(knob, str(value))  # explicit, recorded, user-overridable
    if not _passthrough(session):
        _install_lane(session, lane, kind, opts)
    fp = _fingerprint(session)
    got = fp.get("triton_imported")
    if got is None or _lanes.Version(got) != lane.version:
        hint = " (--no-venv needs the lane's exact Triton installed)" if _passthrough(session) else ""
        session.error(f"lane {lane.label} needs triton {lane.triton}, the environment imports {got}{hint}: "
                      f"{fp.get('triton_import_error', '')}")
    session.log(f"lane {lane.label}: triton {got}, torch {fp.get('torch')}, numpy {fp.get('numpy')}, "
                f"python {fp.get('python')}, {'GPU ' + str(fp.get('gpu_name')) if GPU else 'CPU'}")
    return fp


def _check_python(session: nox.Session, lane: _lanes.Lane) -> None:
    version = session.python if isinstance(session.python, str) else platform.python_version()
    if not _passthrough(session) and not lane.python_ok(version):
        session.error(f"triton {lane.triton} has no wheels for Python {version} (lane range {lane.python}); "
                      f"rerun with --force-python 3.11")


def _package_deps() -> list[str]:
    """The package's own runtime requirements except torch and triton, which the lane decides."""
    deps = nox.project.load_toml(ROOT / "pyproject.toml")["project"]["dependencies"]
    return [d for d in deps if not d.replace(" ", "").lower().startswith(("torch", "triton"))]


def _install_lane(session: nox.Session, lane: _lanes.Lane, kind: str, opts) -> None:
    """GPU: the paired CUDA torch + exact Triton under the lane constraints.  CPU: never a CUDA torch.

    The package itself is not installed: PYTHONPATH points at src/ (no build step, works offline);
    its dependencies other than torch/triton come from pyproject.toml.
    """
    _unshare_torch(session)
    tools = ["pytest", "pytest-timeout"] + (["pytest-benchmark"] if kind == "bench" else []) + _package_deps()
    cfile = _lanes.constraints_path(lane)
    cons = ["-c", str(cfile)] if cfile.exists() and not lane.candidate else []
    if GPU:
        _install_gpu(session, lane, opts, cons, tools)
        return
    if opts.torch:  # a CPU torch the user names; uv's --torch-backend keeps it off the CUDA index
        cpu = ["--torch-backend=cpu"] if session.venv_backend == "uv" and not opts.wheelhouse else []
        _install(session, opts, *cpu, opts.torch)
    _install(session, opts, *cons, *lane.requirements(), *tools)
    if not opts.torch:
        _share_torch(session, _require_torch_site(session))


def _install_gpu(session: nox.Session, lane: _lanes.Lane, opts, cons: list[str], tools: list[str]) -> None:
    """The paired CUDA torch + exact Triton; with --allow-off-pair, fall back to the invoking torch.

    The fallback is recorded as off-pair in every record (torch version + reason), never as paired.
    """
    if lane.candidate:  # no torch pins a candidate yet: reuse the invoking one
        _install(session, opts, *lane.requirements(), *tools)
        _share_torch(session, _require_torch_site(session))
        return
    try:
        _install(session, opts, *cons, f"torch=={lane.paired_torch}", *lane.requirements(), *tools)
    except nox.command.CommandFailed:
        if not opts.allow_off_pair:
            raise
        session.warn(f"torch {lane.paired_torch} could not be installed; reusing the invoking environment's "
                     "torch (recorded as off-pair)")
        _install(session, opts, "--no-deps", f"triton=={lane.triton}")
        _install(session, opts, *lane.requirements()[1:], *tools)
        _share_torch(session, _require_torch_site(session))


def _require_torch_site(session: nox.Session) -> str:
    site = _invoking_torch_site()
    if site is None:
        session.error("no torch in the invoking environment to share with this lane; name a CPU one "
                      "with `-- --torch /path/torch-X+cpu.whl` or NSA_SEL_TORCH (never a CUDA build)")
    return site


class _InstallOnly(Exception):
    """nox --install-only: the lane is installed, nothing runs, no run file is kept."""


def _fingerprint(session: nox.Session) -> dict:
    out = session.run("python", "-c", _FINGERPRINT, silent=True, log=False)
    if out is None:  # session.run does nothing under --install-only
        raise _InstallOnly
    line = [ln for ln in out.splitlines() if ln.startswith("NSA_SEL_FP ")][-1]
    return json.loads(line[len("NSA_SEL_FP "):])


def _run_rc(session: nox.Session, rc_file: Path, *args: str, env: dict | None = None) -> int | None:
    """Run ``python *args`` in the lane and return its exit status (None if it left none: killed)."""
    rc_file.unlink(missing_ok=True)
    session.log("python " + " ".join(args))
    session.run("python", "-c", _RC_WRAP, str(rc_file), *args, env=env or {}, log=False)
    try:
        return int(rc_file.read_text())
    except (OSError, ValueError):
        return None


def _raw_path(results: Path, session: nox.Session, suffix: str) -> Path:
    raw = results / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    return raw / f"{session.name}.{suffix}"


class _Done(Exception):
    """Leaves the set-up early when the body needs no environment (CPU bench)."""


def _run_lane(session: nox.Session, lane: _lanes.Lane, kind: str, body) -> None:
    """Common frame: run file marked running, prepare, body, run file completed; then verdict.

    The run file is rewritten atomically at each step, so a lane that crashes or is killed leaves
    a valid 'running' file that ``pin`` reports as interrupted.
    """
    opts, rest = _options(session)
    results = _ledger.results_dir(opts.results)
    path = _ledger.run_file(results, session.name)
    started = _ledger.now_iso()
    mode = {"compile": "aot", "parity": "gpu" if GPU else "interp", "bench": "gpu" if GPU else "cpu"}[kind]
    base = {"schema": _ledger.SCHEMA, "lane": lane.label, "triton": lane.triton, "check": kind, "mode": mode,
            "session": session.name, "run_id": f"{session.name}@{started}", "machine": "cpu",
            "date": started, "candidate": lane.candidate}
    _ledger.write_run(path, base=base, status="running", started=started, records=[])
    stage = f"set-up (installing triton=={lane.triton} and the lane's requirements)"
    try:
        if kind == "bench" and not GPU:  # nothing to install or run: record the skip
            records, problem = _bench_body(session, lane, base, results, rest)
            raise _Done
        fp = _prepare(session, lane, kind, opts)
        base = _ledger.base_record(lane, fp, check=kind, mode=mode, session=session.name,
                                   run_id=base["run_id"], knobs=dict(TABLE.knobs))
        base["date"] = started
        _ledger.write_run(path, base=base, status="running", started=started, records=[])
        stage = f"{kind} checks"
        records, problem = body(session, lane, base, results, rest)
    except _Done:
        pass
    except _InstallOnly:
        path.unlink(missing_ok=True)
        session.log(f"lane {lane.label} installed (--install-only)")
        return
    except KeyboardInterrupt:
        _ledger.write_run(path, base=base, status="interrupted", started=started, records=[],
                          note="interrupted (Ctrl-C)")
        raise
    except BaseException as exc:  # includes nox's session.error: the lane did not produce a verdict
        _ledger.write_run(path, base=base, status="error", started=started, records=[],
                          note=f"{stage} failed: {type(exc).__name__}: {exc}")
        raise
    _ledger.write_run(path, base=base, status="complete", started=started, records=records)
    session.log(f"{len(records)} record(s) -> {path}")
    if problem == "skip":
        session.skip(records[-1]["message"])
    if problem:
        session.error(problem)


def _summary(records: list[dict]) -> str:
    counts: dict[str, int] = {}
    for r in records:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    return ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))


# ----------------------------------------------------------------------------------------------
# Session bodies: (session, lane, base record, results dir, pytest args) -> (records, problem)
# ----------------------------------------------------------------------------------------------

def _compile_body(session, lane, base, results, rest):
    """nsa-sel smoke for the table's archs; verdicts from its JSON, not only its exit code."""
    report_path = _raw_path(results, session, "smoke.json")
    report_path.unlink(missing_ok=True)
    archs = os.environ.get("NSA_SEL_ARCHS") or ",".join(map(str, TABLE.archs))
    jobs = ["--jobs", os.environ["NSA_SEL_JOBS"]] if os.environ.get("NSA_SEL_JOBS") else []
    # Canaries (deliberately broken kernels) prove the harness still tells failure classes apart
    # on this Triton; they are reported in their own column and never block the lane.
    jobs += [] if os.environ.get("NSA_SEL_CANARIES") == "0" else ["--canaries"]
    rc = _run_rc(session, _raw_path(results, session, "rc"), "-m", "nsa_triton_sel.compat.cli", "smoke",
                 "--arch", archs, "--json", str(report_path), "--no-progress", *jobs)
    if not report_path.exists():
        rec = _ledger.record(base, kernel="(smoke harness)", verdict="crash",
                             message=f"nsa-sel smoke wrote no report (exit status {rc})")
        return [rec], "the smoke harness crashed before writing its report"
    records = _ledger.records_from_smoke(json.loads(report_path.read_text()), base)
    bad = [r for r in records if r["check"] == "compile" and r["verdict"] in _ledger.BAD]
    session.log(f"compile-{lane.label}: {_summary(records)}")
    return records, (f"{len(bad)} compile verdict(s) not ok (see {report_path})" if bad else None)


def _pytest(session, base, results, marker_args, rest, env=None, kind="parity"):
    """Run pytest with a junit report; records per test, or a crash record when it died."""
    xml = _raw_path(results, session, "junit.xml")
    xml.unlink(missing_ok=True)
    extra = []
    if kind == "bench":
        bench_json = _raw_path(results, session, "benchmark.json")
        extra = [f"--benchmark-json={bench_json}"]
    rc = _run_rc(session, _raw_path(results, session, "rc"), "-m", "pytest", *marker_args, "-p", "no:cacheprovider",
                 f"--junitxml={xml}", *extra, *rest, env=env)
    records = _ledger.records_from_junit(xml.read_text(), base) if xml.exists() else []
    if kind == "bench" and records and bench_json.exists():
        _ledger.attach_benchmarks(records, json.loads(bench_json.read_text()))
    if rc in (0, 1) and records:
        bad = [r for r in records if r["verdict"] in _ledger.BAD]
        return records, (f"{len(bad)} test(s) failed" if bad else None)
    if rc == 5 or (rc == 0 and not records):
        return [_ledger.record(base, kernel="(pytest)", verdict="skip", message="no tests collected")], None
    records.append(_ledger.record(base, kernel="(pytest)", verdict="crash",
                                  message=f"pytest exited with status {rc} (interrupted, usage error or crash)"))
    return records, f"pytest exited with status {rc}"


def _parity_body(session, lane, base, results, rest):
    if GPU:
        return _pytest(session, base, results, ["-m", "gpu"], rest)
    probe = _probe(session, base)
    if probe["verdict"] != "pass":
        return [probe], f"the Triton interpreter is not trustworthy here: {probe['message']}"
    records, problem = _pytest(session, base, results, ["-m", "interp"], rest, env={"TRITON_INTERPRET": "1"})
    session.log(f"parity-{lane.label} (interpreter): {_summary(records)}")
    return [probe] + records, problem


def _probe(session, base) -> dict:
    """The tiny known kernel under the interpreter (env.interpreter_usable) as a parity record."""
    session.log("interpreter probe: a masked add and a tl.dot under TRITON_INTERPRET=1 (nsa_triton_sel.compat.env)")
    out = session.run("python", "-c", _PROBE, silent=True, log=False, success_codes=range(256)) or ""
    found = [ln for ln in out.splitlines() if ln.startswith("NSA_SEL_PROBE ")]
    if not found:
        return _ledger.record(base, kernel="interpreter-probe", verdict="error",
                              message="probe printed nothing: " + out.strip()[-300:])
    res = json.loads(found[-1][len("NSA_SEL_PROBE "):])
    verdict = {"ok": "pass", "wrong": "fail"}.get(res.get("status"), "error")
    session.log(f"interpreter probe: {res.get('status')} ({res.get('detail')})")
    metrics = {k: v for k, v in res.items() if isinstance(v, (int, float))}
    return _ledger.record(base, kernel="interpreter-probe", verdict=verdict, message=res.get("detail", ""),
                          metrics=metrics)


def _bench_body(session, lane, base, results, rest):
    if not GPU:
        msg = (f"bench-{lane.label} needs a CUDA GPU (pytest-benchmark against SDPA); none found here, "
               "so it records a skip. Run it on a GPU machine (NSA_SEL_GPU=1 forces the GPU flavour).")
        session.warn(msg)
        return [_ledger.record(base, kernel="(bench)", verdict="skip", message=msg)], "skip"
    return _pytest(session, base, results, ["bench/"], rest, kind="bench")


BODIES = {"compile": _compile_body, "parity": _parity_body, "bench": _bench_body}


# ----------------------------------------------------------------------------------------------
# Session generation
# ----------------------------------------------------------------------------------------------

def _describe(kind: str, lane: _lanes.Lane) -> str:
    pair = f"triton {lane.triton} (torch {' / '.join(lane.torch)}, python {lane.python})"
    if kind == "compile":
        return f"AOT compile smoke for sm_{'/'.join(map(str, TABLE.archs))}: {pair}"
    if kind == "parity":
        return (f"parity vs the float64 oracle (GPU, or interpreter with numpy{lane.numpy or ' any'} "
                f"on CPU): {pair}")
    return f"pytest-benchmark vs SDPA (needs a GPU; skips without one): {pair}"


def _make_session(kind: str, lane: _lanes.Lane, name: str) -> None:
    tags = [kind, f"triton-{lane.label}"] + (["candidate"] if lane.candidate else [])
    requires = None if kind == "compile" else [f"compile-{name}"]
    backend = "none" if (kind == "bench" and not GPU) else None  # a CPU bench only records a skip

    def session_fn(session: nox.Session) -> None:
        _run_lane(session, lane, kind, BODIES[kind])

    session_fn.__doc__ = _describe(kind, lane)
    session_fn.__name__ = f"{kind}_{name}".replace(".", "_").replace("-", "_")
    globals()[session_fn.__name__] = nox.session(
        name=f"{kind}-{name}", tags=tags, requires=requires, venv_backend=backend, default=False,
    )(session_fn)


for _lane in TABLE.lanes:
    for _kind in KINDS:
        _make_session(_kind, _lane, _lane.label)

if os.environ.get("NSA_SEL_CANDIDATE"):  # check-upgrade's temporary lane (not in the table)
    _candidate = _lanes.candidate_lane(os.environ["NSA_SEL_CANDIDATE"], TABLE)
    for _kind in KINDS:
        _make_session(_kind, _candidate, "candidate")


# ----------------------------------------------------------------------------------------------
# Table maintenance and the ledger
# ----------------------------------------------------------------------------------------------

@nox.session(venv_backend="none", default=False, tags=["ledger"])
def pin(session: nox.Session) -> None:
    """Merge lane run files into constraints/ledger.jsonl; render MATRIX.md and known-good.txt."""
    rc = _ledger.main(list(session.posargs))
    if rc:
        session.error(f"nsa-sel pin exited with {rc}")


@nox.session(venv_backend="none", default=False, tags=["ledger"])
def constraints(session: nox.Session) -> None:
    """Regenerate constraints/triton-X.txt from constraints/lanes.toml."""
    changed = _lanes.write_constraints(TABLE)
    session.log(f"{len(changed)} constraints file(s) rewritten: {', '.join(p.name for p in changed) or 'none'}")


@nox.session(name="check-upgrade", venv_backend="none", default=False, tags=["ledger"])
def check_upgrade(session: nox.Session) -> None:
    """Pre-upgrade check of a Triton release not in the table: nox -s check-upgrade -- 3.10.0."""
    from nsa_triton_sel.compat import upgrade  # noqa: PLC0415 - only this session needs it

    rc = upgrade.main(list(session.posargs))
    if rc:
        session.error("check-upgrade: blocked")


if __name__ == "__main__":
    nox.main()
