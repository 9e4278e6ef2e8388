"""The checks a lane session runs once its environment is ready: compile, parity, bench.

Each body is ``(session, lane, base record, results dir, pytest args, matrix) -> (records,
problem)``, where problem is None, ``"skip"``, or the reason the session fails.  Every record
carries the versions its producing process imported: the compile children report theirs in the
smoke report, pytest through :mod:`.pytest_plugin`, the interpreter probe in its output.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tokenize
from pathlib import Path
from typing import IO

from .. import ledger
from ..core import machine
from ..core.verdicts import BAD, CRASH, ERROR, FAIL, PASS, SKIP
from . import bench_store, jit_warm, team
from .pytest_plugin import jit_summary

IMPORTED_ENV = "NSA_SEL_IMPORTED_JSON"
PLUGIN = "nsa_triton_sel.compat.lanes.pytest_plugin"
PROBE = ("import json, nsa_triton_sel.compat.core.env as e; "
         "print('NSA_SEL_PROBE ' + json.dumps(e.interpreter_usable()))")
# Runs a command and stores its exit status in a file: nox's session.run reports only pass/fail,
# and the lanes need to tell "tests failed" (1) from "nothing collected" (5) or a crash (signal).
RC_WRAP = ("import subprocess, sys; rc = subprocess.call([sys.executable] + sys.argv[2:]); "
           "open(sys.argv[1], 'w').write(str(rc))")
# pytest options of every lane run.  junit_family=xunit1: the suites attach their oracle errors
# with record_property, a per-test-case property that only the xunit1 schema has (under the
# default xunit2, pytest warns once per test).
PYTEST_ARGS = ("-p", "no:cacheprovider", "-p", PLUGIN, "-o", "junit_family=xunit1")


def raw_path(results: Path, session, suffix: str) -> Path:
    raw = Path(results) / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    return raw / f"{session.name}.{suffix}"


def run_rc(session, rc_file: Path, *args: str, env: dict | None = None) -> int | None:
    """Run ``python *args`` in the lane and return its exit status (None if it left none: killed)."""
    rc_file.unlink(missing_ok=True)
    session.log("python " + " ".join(args))
    session.run("python", "-c", RC_WRAP, str(rc_file), *args, env=env or {}, log=False)
    try:
        return int(rc_file.read_text())
    except (OSError, ValueError):
        return None


CHECK_ORDER = ("compile", "backward", "parity", "bench", "compile-canary", "compile-static")


def counts_by_check(records: list[dict]) -> str:
    """``compile 135 pass, 20 skip; backward 22 pass; ...``: one count per (check, verdict)."""
    by: dict[str, dict[str, int]] = {}
    for r in records:
        verdicts = by.setdefault(r.get("check") or "?", {})
        verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
    order = sorted(by, key=lambda c: (CHECK_ORDER.index(c) if c in CHECK_ORDER else len(CHECK_ORDER), c))
    return "; ".join(f"{c} " + ", ".join(f"{n} {v}" for v, n in sorted(by[c].items())) for c in order) or "none"


def jobs_override() -> str:
    """``NSA_SEL_JOBS`` checked here, so a bad value is one line naming it, not a smoke usage error later."""
    raw = os.environ["NSA_SEL_JOBS"].strip()
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"NSA_SEL_JOBS={raw!r}: expected a whole number of parallel compiles >= 1 "
                         "(unset: one per usable core)")
    return raw


def test_workers() -> int:
    """pytest-xdist workers of an interpreter lane: the usable cores, or ``NSA_SEL_JOBS`` (as the compiles)."""
    return int(jobs_override()) if os.environ.get("NSA_SEL_JOBS") else machine.usable_cores()


GPU_WORKERS_ENV = "NSA_SEL_GPU_WORKERS"
GPU_WORKERS_MAX = 16  # processes sharing one GPU: each holds a CUDA context and its tests' tensors
GIB_PER_GPU_WORKER = 4  # GPU memory per worker: a context and the largest test's tensors, with room


def gpu_test_workers() -> int:
    """pytest-xdist workers sharing the GPU in a GPU lane's correctness tests: ``NSA_SEL_GPU_WORKERS``, else the
    usable cores, at most :data:`GPU_WORKERS_MAX` and one per :data:`GIB_PER_GPU_WORKER` of the GPU's memory;
    1 without pytest-xdist.  Most of a cold GPU test run is Triton and Inductor compiling kernels for the first
    time, one core each: workers spread those compiles over the cores (on the 16-core H100 box, 16 workers ran
    the parity stage in 109 s where 8 took 172 s)."""
    raw = os.environ.get(GPU_WORKERS_ENV, "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise ValueError(f"{GPU_WORKERS_ENV}={raw!r}: expected a whole number of pytest processes >= 1 "
                             f"(unset: the usable cores, at most {GPU_WORKERS_MAX})")
        wanted = int(raw)
    else:
        memory = machine.gpu_memory_gib()
        by_memory = max(1, int(memory // GIB_PER_GPU_WORKER)) if memory else GPU_WORKERS_MAX
        wanted = min(machine.usable_cores(), GPU_WORKERS_MAX, by_memory)
    return wanted if wanted > 1 and importlib.util.find_spec("xdist") is not None else 1


# Tests that measure time (marker ``serial``): never beside other tests, so the GPU lanes run them after the
# parallel pass, alone.
SERIAL = "serial"


def _code(path: Path) -> str:
    """``path``'s Python without its string literals and comments, tokens joined by spaces: a marker a test names
    in its data (a test of the lanes writes test files) is not a mark.  The whole text if it does not tokenize."""
    text = path.read_text(errors="replace")
    skip = {tokenize.STRING, tokenize.COMMENT, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    try:
        return " ".join(t.string for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type not in skip)
    except (tokenize.TokenError, SyntaxError):
        return text


def _names_paths(rest) -> bool:
    """Whether the pytest arguments ``rest`` name test paths of their own."""
    return any(not a.startswith("-") and Path(a.split("::")[0]).exists() for a in rest)


def required_marker(expr: str) -> str | None:
    """The marker every test that the marker expression ``expr`` selects carries: the first term not negated in
    an expression of ``and`` only (``gpu``, ``(gpu) and not serial``); None where ``or`` allows others."""
    words = expr.replace("(", " ").replace(")", " ").split()
    if "or" in words:
        return None
    for i, word in enumerate(words):
        if word not in ("and", "not") and word.isidentifier() and (i == 0 or words[i - 1] != "not"):
            return word
    return None


def marked_files(expr: str, rest, tests: Path = Path("tests")) -> list[str]:
    """The test files under ``tests`` whose code marks a test with :func:`required_marker` of the marker expression
    ``expr`` (``mark.<marker>`` outside strings and comments), so pytest collects those instead of every test
    module (about 2,500 tests, seconds per process); [] (collect as pytest would) when ``rest`` names paths of its
    own, ``expr`` requires no one marker, or no file has it."""
    marker = required_marker(expr)
    if marker is None or not tests.is_dir() or _names_paths(rest):
        return []
    mark = re.compile(rf"\bmark\s*\.\s*{marker}\b")
    return [str(p) for p in sorted(tests.rglob("test_*.py")) if mark.search(_code(p))]


def gpu_tests(session, base, results, expr: str, rest, workers: int | None = None):
    """A GPU lane's tests selected by the marker expression ``expr``: those independent of each other over
    :func:`gpu_test_workers` pytest-xdist workers sharing the GPU, then the ``serial`` ones in one process, alone;
    the records of both passes, and the first problem.  Where ``expr`` requires a marker, pytest collects only
    the files that use it (:func:`marked_files`), and the second pass runs only where a file marks a test
    ``serial``."""
    workers = gpu_test_workers() if workers is None else workers
    files = marked_files(expr, rest)
    if workers <= 1:
        return pytest_run(session, base, results, ["-m", expr], [*rest, *files])
    session.log(f"{session.name}: tests marked {expr!r} over {workers} pytest-xdist workers sharing the GPU, "
                f"then those marked {SERIAL!r} alone")
    records, problem = pytest_run(session, base, results, ["-m", f"({expr}) and not {SERIAL}"], [*rest, *files],
                                  workers=workers)
    serial_files = [f for f in marked_files(SERIAL, rest) if f in files or not files]
    if not serial_files and not _names_paths(rest):  # no file has a serial test: no second pytest to start
        return records, problem
    alone, problem_alone = pytest_run(session, base, results, ["-m", f"({expr}) and {SERIAL}"],
                                      [*rest, *serial_files], tag=SERIAL)
    if records and all(r["verdict"] == SKIP and r["kernel"] == "(pytest)" for r in alone):
        alone = []  # nothing marked serial in this selection: not a skip of the lane
    return records + alone, problem or problem_alone


def compile_body(session, lane, base, results, rest, m):
    """nsa-sel smoke for the run's archs (:func:`..core.machine.compile_archs`: asked for, this machine's GPU, or the
    GPU-less default), judged for the lane's release; verdicts from its JSON."""
    report_path = raw_path(results, session, "smoke.json")
    report_path.unlink(missing_ok=True)
    choice = m.archs or machine.compile_archs(m.table, os.environ.get("NSA_SEL_ARCHS"), what="NSA_SEL_ARCHS")
    again = f" --specs {m.team.ref} --results {m.team.results}" if m.team else ""
    rest = (f"; not compiled here: {', '.join(f'sm_{a}' for a in choice.rest)} (all: nox -s {session.name} -- "
            f"--all-archs{again})")
    session.log(f"{session.name}: compiling for {choice.label} ({choice.why}){rest if choice.rest else ''}")
    # The smoke's own default is one compile per usable core (smoke.run.default_jobs); NSA_SEL_JOBS overrides.
    extra = ["--jobs", jobs_override()] if os.environ.get("NSA_SEL_JOBS") else []
    # Canaries (deliberately broken kernels) prove the harness still tells failure classes apart
    # on this Triton; they are reported in their own column and never block the lane.  A user's spec
    # module (m.team) is compiled instead of the registry, without them, from where the user typed it.
    if m.team:
        extra += team.smoke_args(m.team)
    elif os.environ.get("NSA_SEL_CANARIES") != "0":
        extra += ["--canaries"]
    rc = run_rc(session, raw_path(results, session, "rc"), "-m", "nsa_triton_sel.compat.commands.cli", "smoke",
                "--arch", ",".join(map(str, choice.archs)), "--json", str(report_path), "--progress", "lines",
                "--expect-triton", lane.triton, *extra, env=team.smoke_env(m.team, session.env))
    if not report_path.exists():
        rec = ledger.record(base, kernel="(smoke harness)", verdict=CRASH, imported={},
                            message=f"nsa-sel smoke wrote no report (exit status {rc})")
        return [rec], "the smoke harness crashed before writing its report"
    report = json.loads(report_path.read_text())
    # Known-bad windows describe this project's kernels: a team's failure stays a failure.
    records = ledger.records_from_smoke(report, base, windows=[] if m.team else None)
    records = team.tag(records, report) if m.team else records
    session.log(f"compile-{lane.name}: the compile children imported triton "
                f"{' + '.join(report.get('imported_tritons') or ['(none)'])}; {counts_by_check(records)}")
    bad = [r for r in records if r["check"] in ("compile", "backward") and r["verdict"] in BAD]
    return records, (f"{len(bad)} compile verdict(s) not ok (see {report_path})" if bad else None)


def worker_files(imported_json: Path) -> list[Path]:
    """What the pytest-xdist workers wrote beside ``imported_json`` (the plugin's ``<path>.<worker id>``)."""
    return sorted(imported_json.parent.glob(imported_json.name + ".gw*"))


def process_reports(imported_json: Path) -> list[dict]:
    """What each test process wrote through the plugin (imported versions, Triton's JIT counts): with pytest-xdist
    the workers' files (they ran the tests), else the one process's; [] when none did."""
    files = worker_files(imported_json) or ([imported_json] if imported_json.exists() else [])
    return [json.loads(f.read_text()) for f in files]


def read_imported(reports: list[dict]) -> tuple[dict | None, str | None]:
    """The versions the test processes imported (None: none reported), and the problem when two of them
    imported different ones (``reports``: :func:`process_reports`)."""
    if not reports:
        return None, None
    seen = [r["imported"] for r in reports]
    merged, clash = {}, []
    for name in sorted({k for d in seen for k in d}):
        values = sorted({str(d[name]) for d in seen if d.get(name)})
        merged[name] = values[0] if len(values) == 1 else None
        if len(values) > 1:
            clash.append(f"{name} {' and '.join(values)}")
    return merged, (f"the pytest workers imported different versions: {'; '.join(clash)}" if clash else None)


def pytest_run(session, base, results, marker_args, rest, env=None, kind="parity", workers: int = 1, tag: str = ""):
    """Run pytest with a junit report (over ``workers`` pytest-xdist workers when more than one); records
    per test, or a crash record when it died.  ``tag`` keeps a second pass's raw files apart from the first's."""
    pre = f"{tag}." if tag else ""
    xml = raw_path(results, session, f"{pre}junit.xml")
    imported_json = raw_path(results, session, f"{pre}imported.json")
    for stale in (xml, imported_json, *worker_files(imported_json)):
        stale.unlink(missing_ok=True)
    bench_json = raw_path(results, session, f"{pre}benchmark.json")
    extra = [f"--benchmark-json={bench_json}", *bench_store.pytest_args(results, base["triton"])] if kind == "bench" else []
    # Interpreter tests are single-threaded: pytest-xdist spreads them over the usable cores (``workers``;
    # the parity lane installs it), so no core idles while they run.
    extra += ["-n", str(workers)] if workers > 1 else []
    env = {**(env or {}), IMPORTED_ENV: str(imported_json)}
    rc = run_rc(session, raw_path(results, session, f"{pre}rc"), "-m", "pytest", *marker_args, *PYTEST_ARGS,
                f"--junitxml={xml}", *extra, *rest, env=env)
    reports = process_reports(imported_json)
    imported, clash = read_imported(reports)
    jit = jit_summary(reports)
    if jit:
        session.log(f"{session.name}{f' ({tag})' if tag else ''}: {jit}")
    records = ledger.records_from_junit(xml.read_text(), base, imported=imported or {}) if xml.exists() else []
    if records and clash:
        records.append(ledger.record(base, kernel="(pytest)", verdict=ERROR, imported={}, message=clash))
        return records, clash
    # An untimed pass (--benchmark-disable) leaves the file pytest-benchmark opened at start empty: nothing to attach.
    if kind == "bench" and records and bench_json.exists() and bench_json.stat().st_size:
        ledger.attach_benchmarks(records, json.loads(bench_json.read_text()))
    if records and imported is None:  # neither the process nor any xdist worker wrote its versions
        records.append(ledger.record(base, kernel="(pytest)", verdict=ERROR, imported={},
                                     message=f"pytest did not report what it imported ({imported_json} missing): "
                                             f"the verdicts cannot be tied to the lane's Triton"))
        return records, "pytest did not report the versions it imported"
    if rc in (0, 1) and records:
        bad = [r for r in records if r["verdict"] in BAD]
        if rc == 1 and not bad and kind == "bench" and bench_store.gate_armed():
            return records + [_regression(base, imported)], "a benchmark regressed against the baseline's saved run"
        return records, (f"{len(bad)} test(s) failed" if bad else None)
    if rc == 5 or (rc == 0 and not records):
        return [ledger.record(base, kernel="(pytest)", verdict=SKIP, message="no tests collected", imported={})], None
    records.append(ledger.record(base, kernel="(pytest)", verdict=CRASH, imported=imported,
                                 message=f"pytest exited with status {rc} (interrupted, usage error or crash)"))
    return records, f"pytest exited with status {rc}"


def _regression(base, imported) -> dict:
    """Every benchmark passed but pytest-benchmark's --benchmark-compare-fail failed the run."""
    return ledger.record({**base, "check": "bench"}, kernel=bench_store.GATE_KERNEL, verdict=FAIL, imported=imported,
                         message=f"pytest-benchmark --benchmark-compare-fail={bench_store.gate_armed()} against saved "
                                 f"run {os.environ.get(bench_store.COMPARE_ENV)}: a median regressed (the lane's log "
                                 "lists each one: 'Performance has regressed')")


def parity_body(session, lane, base, results, rest, m):
    if m.gpu:
        warm = start_jit_warm(session, base)
        try:
            records, problem = gpu_tests(session, base, results, "gpu", rest)
        finally:
            finish_jit_warm(session, warm)
        if warm is not None:
            log_warm_misses(session, process_reports(raw_path(results, session, "imported.json")))
        return records, problem
    probe_rec = probe(session, base)
    if probe_rec["verdict"] != PASS:
        return [probe_rec], f"the Triton interpreter is not trustworthy here: {probe_rec['message']}"
    records, problem = pytest_run(session, base, results, ["-m", "interp"], rest, env={"TRITON_INTERPRET": "1"},
                                  workers=test_workers())
    # One count for the lane: the records it keeps (the probe is one of them), as its summary says.
    session.log(f"parity-{lane.name} (interpreter): {len(records)} test records + the interpreter probe: "
                f"{counts_by_check([probe_rec] + records)}")
    return [probe_rec] + records, problem


def start_jit_warm(session, base) -> tuple[subprocess.Popen, IO[str]] | None:
    """Beside a GPU lane's parity tests: their captured launches and the benchmarks' compiled into the lane's
    Triton cache (:mod:`.jit_warm`) by processes of lower priority than the tests, where the lane runs the Triton
    and GPU arch they were captured on; the process and its output file, or None (and a line saying why)
    elsewhere or with ``NSA_SEL_JIT_WARM=0``.  Beside, not before: the tests' own compiles are spread over their
    workers already, so a warm-up ahead of them only moved its time in front (measured on an H100); alongside,
    it uses the cores the tests leave idle, and the benchmarks, one process, then find their kernels compiled.
    Its outcome is no record: a launch it did not warm is compiled by its test."""
    if os.environ.get(jit_warm.ENV, "1").strip() == "0":
        return None
    archs = sorted({cc for cc, _ in machine.gpu_archs()})
    why = jit_warm.applies(base["triton"], archs[0] if len(archs) == 1 else None)
    if why:
        session.log(f"{session.name}: no JIT warm-up: {why}")
        return None
    # nox's session.env holds None for a variable the session unsets; a child's environment has no such value.
    env = {k: v for k, v in {**os.environ, **session.env}.items() if v is not None}
    if session.bin_paths:  # a lane's own environment: its interpreter, as session.run would find it
        env["PATH"] = os.pathsep.join([*session.bin_paths, env.get("PATH", "")])
    cmd = [shutil.which("python", path=env.get("PATH")) or sys.executable, "-m", jit_warm.MODULE,
           "--jobs", str(machine.usable_cores()), "--nice", str(jit_warm.NICE)]
    session.log(f"{session.name}: compiling the captured launches beside the tests: {' '.join(cmd[1:])}")
    # Its output to a file, not to a pipe nobody reads while the tests run (a full pipe would stall it).
    out = tempfile.TemporaryFile("w+")
    return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT), out


def finish_jit_warm(session, warm: tuple[subprocess.Popen, IO[str]] | None) -> None:
    """Wait for :func:`start_jit_warm`'s processes (the benchmarks read what they compile) and log their summary."""
    if warm is None:
        return
    proc, out = warm
    t0 = time.monotonic()
    proc.wait()
    with out:
        out.seek(0)
        lines = [ln for ln in out.read().splitlines() if ln.strip()]
    summary = next((ln for ln in reversed(lines) if ln.startswith("jit_warm: ") and " launches " in ln),
                   f"jit_warm: exited with status {proc.returncode}: " + " | ".join(lines[-3:]))
    session.log(f"{session.name}: {summary} (waited {time.monotonic() - t0:.0f} s for it after the tests)")


def log_warm_misses(session, reports: list[dict]) -> None:
    """Where the lane's JIT warm-up listed its launches (:func:`.jit_warm.keys_path`, in the Triton cache the
    session uses): a line for each compile of these tests it did not cover, and why (:func:`.jit_warm.misses`)."""
    try:
        lines = jit_warm.misses(reports, jit_warm.keys_path({**os.environ, **session.env}))
    except Exception as exc:  # noqa: BLE001 - a diagnostic: the lane's verdicts never depend on it
        lines = [f"jit_warm: could not compare the tests' compiles with the warm list: {type(exc).__name__}: {exc}"]
    for line in lines:
        session.log(f"{session.name}: {line}")


def probe(session, base) -> dict:
    """The tiny known kernel under the interpreter (env.interpreter_usable) as a parity record."""
    session.log("interpreter probe: a masked add and a tl.dot under TRITON_INTERPRET=1 (nsa_triton_sel.compat.core.env)")
    out = session.run("python", "-c", PROBE, silent=True, log=False, success_codes=range(256)) or ""
    found = [ln for ln in out.splitlines() if ln.startswith("NSA_SEL_PROBE ")]
    if not found:
        return ledger.record(base, kernel="interpreter-probe", verdict=ERROR, imported={},
                             message="probe printed nothing: " + out.strip()[-300:])
    res = json.loads(found[-1][len("NSA_SEL_PROBE "):])
    verdict = {"ok": PASS, "wrong": FAIL}.get(res.get("status"), ERROR)
    session.log(f"interpreter probe: {res.get('status')} ({res.get('detail')}); imported {res.get('imported')}")
    metrics = {k: v for k, v in res.items() if isinstance(v, (int, float))}
    return ledger.record(base, kernel="interpreter-probe", verdict=verdict, message=res.get("detail", ""),
                         metrics=metrics, imported=res.get("imported") or {})


def bench_skip(session, lane, base) -> tuple[list[dict], str]:
    msg = (f"bench-{lane.name} needs a CUDA GPU (pytest-benchmark against SDPA); none found here, "
           "so it records a skip. Run it on a GPU machine (NSA_SEL_GPU=1 forces the GPU flavour).")
    session.warn(msg)
    return [ledger.record(base, kernel="(bench)", verdict=SKIP, message=msg, imported={})], "skip"


# The lanes' benchmarks leave FlexAttention out: a peer, part of neither a release's verdict nor its threshold
# entry, whose first call is one process compiling for most of a minute, the largest single cost of a cold bench
# lane (bench/results/2026-11-27-h100-triton3.6-lane-bench-without-flex).  A default: NSA_BENCH_FLEX=1 in the
# caller's environment puts it back; ``pytest bench/`` runs it as always.
BENCH_ENV = {"NSA_BENCH_FLEX": "0"}


def bench_env() -> dict:
    """:data:`BENCH_ENV`, each value overridden by the caller's environment."""
    return {k: os.environ.get(k, v) for k, v in BENCH_ENV.items()}


def bench_body(session, lane, base, results, rest, m):
    """pytest-benchmark over ``bench/`` with :func:`bench_env`, one process (timings: never beside other tests).
    No untimed parallel pass first: the parity stage before it has compiled most of the kernels it needs, and
    such a pass costs a pytest start over every worker and a run of each benchmark for the few it would save."""
    records, problem = pytest_run(session, base, results, ["bench/"], rest, env=bench_env(), kind="bench")
    # The warm-up beside the parity tests is over: what the benchmarks still compiled, it missed.
    log_warm_misses(session, process_reports(raw_path(results, session, "imported.json")))
    return records, problem


BODIES = {"compile": compile_body, "parity": parity_body, "bench": bench_body}
