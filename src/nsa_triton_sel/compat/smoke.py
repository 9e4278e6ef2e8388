"""``nsa-sel smoke``: compile every registered kernel variant ahead of time, without a GPU.

Each (spec, arch) compile runs in its own child process (``python -m nsa_triton_sel.compat.aot``)
with its own ``TRITON_CACHE_DIR`` and a timeout, several at once, because some compiler
failures are C++ assertion aborts that kill the process - a try/except in the parent
would never see them.  The verdicts:

- ``ok``: PTX and cubin produced (sizes, registers, stack/spills, shared memory recorded);
- ``compile_error``: the compiler raised; the message is the root cause, found by walking
  the exception's cause chain (on Triton 3.0 - 3.4 the text is only in ``__cause__``);
- ``crash``: the child died (signal or exit code) - the tail of its stderr, e.g. the MLIR
  assertion, is kept;
- ``timeout``: the child ran past ``--timeout`` and was killed with its process group;
- ``unsupported``: the installed Triton lacks the target (a tiny probe kernel does not
  compile for that arch) or an API the kernel uses.

Canary specs (``tests/canaries``) carry the verdict they must reach on each Triton
version; they never fail the run by being not ``ok``, only by being unexpected.

Exit status: 0 all variants ``ok`` and all canaries as expected; 1 a variant is not
``ok``; 3 only a canary differs from its expectation; 2 bad usage.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import static_check
from .specs import CompileSpec, check_unique, load_specs

DEFAULT_ARCHS = (80, 89, 90)
KNOWN_ARCHS = (75, 80, 86, 89, 90, 100, 103, 120)
FP_FUSION_DEFAULT = "1"  # Triton 3.9 warns when unset; 3.10 flips the default to "disabled"
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


@dataclass
class SmokeResult:
    """One compile's verdict (one row of the JSON ``results``)."""

    spec: str
    kernel: str
    arch: int
    verdict: str
    message: str = ""
    canary: bool = False
    expected: list | None = None
    as_expected: bool | None = None
    seconds: float = 0.0
    metrics: dict = field(default_factory=dict)
    returncode: int | None = None
    stderr_tail: str = ""


@dataclass
class SmokeReport:
    """Everything one run found; ``to_json()`` is the ledger's input format (schema 1)."""

    triton: str
    archs: list
    jobs: int
    env: dict
    started: str
    wall_s: float = 0.0
    results: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    static: dict = field(default_factory=dict)
    python: str = field(default_factory=platform.python_version)
    platform: str = field(default_factory=platform.platform)
    executable: str = field(default_factory=lambda: sys.executable)

    @property
    def failed(self) -> list[SmokeResult]:
        """Non-canary results whose verdict is not ``ok``."""
        return [r for r in self.results if not r.canary and r.verdict != "ok"]

    @property
    def canary_mismatches(self) -> list[SmokeResult]:
        return [r for r in self.results if r.canary and r.as_expected is False]

    @property
    def exit_code(self) -> int:
        if self.failed:
            return 1
        return 3 if self.canary_mismatches else 0

    def to_dict(self) -> dict:
        return {
            "schema": 1, "tool": "nsa-sel smoke", "triton": self.triton, "python": self.python,
            "platform": self.platform, "executable": self.executable, "started": self.started,
            "wall_s": round(self.wall_s, 2), "jobs": self.jobs, "archs": list(self.archs), "env": self.env,
            "results": [asdict(r) for r in self.results], "skipped": self.skipped, "static": self.static,
        }

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent)


# ---------------------------------------------------------------- child processes

def child_env(cache_dir: str) -> dict:
    """The child's environment: a private cache, FP fusion explicit, never the interpreter."""
    env = dict(os.environ)
    env["TRITON_CACHE_DIR"] = cache_dir
    env.setdefault("TRITON_DEFAULT_FP_FUSION", FP_FUSION_DEFAULT)
    env.pop("TRITON_INTERPRET", None)  # the interpreter turns @triton.jit into something AOT cannot compile
    env["PYTHONFAULTHANDLER"] = "1"  # a segfault leaves a Python traceback in stderr
    # The parent's own additions to sys.path (cwd, a tests dir holding user specs) must
    # reach the child, or a "module:attr" kernel reference would not import there.
    extra = [p for p in _user_paths() if p]
    if extra:
        env["PYTHONPATH"] = os.pathsep.join(extra + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _user_paths() -> list[str]:
    """``sys.path`` entries that are not the interpreter's stdlib or site-packages."""
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    out = [os.getcwd()]
    for p in sys.path:
        real = os.path.realpath(p or os.getcwd())
        if os.path.isdir(real) and not any(real.startswith(pre + os.sep) or real == pre for pre in prefixes):
            out.append(real)
    return list(dict.fromkeys(out))


def recorded_env() -> dict:
    """The environment a run is recorded with: FP fusion, plus every TRITON_* the user set."""
    env = {k: v for k, v in os.environ.items() if k.startswith("TRITON_") and k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", FP_FUSION_DEFAULT)
    env["TRITON_CACHE_DIR"] = "<fresh per compile>"
    return env


def run_child(req: dict, workdir: Path, timeout: float, python: str) -> dict:
    """Compile ``req`` in a child; returns the child's result or a ``crash``/``timeout`` verdict."""
    workdir.mkdir(parents=True, exist_ok=True)
    req_path, res_path, err_path = workdir / "request.json", workdir / "result.json", workdir / "stderr.txt"
    req_path.write_text(json.dumps(req))
    cmd = [python, "-m", "nsa_triton_sel.compat.aot", str(req_path), str(res_path)]
    t0 = time.perf_counter()
    with open(err_path, "wb") as err:
        # Own session: on timeout the whole group (ptxas included) is killed.
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=os.getcwd(),
                                env=child_env(str(workdir / "cache")), start_new_session=True)
        with _LIVE_LOCK:
            _LIVE.add(proc)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            rc = None
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(proc)
    seconds = round(time.perf_counter() - t0, 3)
    tail = _tail(err_path)
    if rc is None:
        return {"verdict": "timeout", "message": f"no result after {timeout:g} s; killed",
                "seconds": seconds, "stderr_tail": tail}
    if rc == 0 and res_path.exists():
        result = json.loads(res_path.read_text())
        result.update(seconds=seconds, returncode=0, compile_seconds=result.get("seconds"))
        return result
    return {"verdict": "crash", "message": crash_message(rc, tail), "seconds": seconds,
            "returncode": rc, "stderr_tail": tail}


# Children run in their own sessions, so Ctrl-C does not reach them: the parent kills
# whatever is still running when it is interrupted.
_LIVE: set = set()
_LIVE_LOCK = threading.Lock()


def kill_live_children() -> None:
    with _LIVE_LOCK:
        live = list(_LIVE)
    for proc in live:
        _kill_group(proc)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _tail(path: Path, lines: int = 15) -> str:
    """The last lines of the child's stderr before any faulthandler dump (which follows the C++ message)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    text = text.split("Fatal Python error", 1)[0]
    return "\n".join(text.strip().splitlines()[-lines:])


def crash_message(rc: int, tail: str) -> str:
    """``killed by SIGABRT (rc=-6): <the assertion line>`` or ``exit code N: <last line>``."""
    if rc < 0:
        try:
            how = f"killed by {signal.Signals(-rc).name} (rc={rc})"
        except ValueError:
            how = f"killed by signal {-rc}"
    else:
        how = f"exit code {rc} without a result"
    lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
    key = next((ln for ln in reversed(lines) if "Assertion" in ln or "error" in ln.lower()), None)
    key = key or (lines[-1] if lines else "")
    return f"{how}: {key}"[:1000] if key else how


# ---------------------------------------------------------------- the run

def parse_archs(text) -> list[int]:
    """``"80,89,90"`` or ``"sm_90"`` or an iterable of ints -> ``[80, 89, 90]``; rejects nonsense."""
    items = text.split(",") if isinstance(text, str) else list(text)
    archs = []
    for item in items:
        s = str(item).strip().lower().removeprefix("sm_").removeprefix("sm")
        if not s.isdigit() or not 50 <= int(s) <= 200:
            raise ValueError(f"bad arch {item!r}: expected compute capabilities like 80,89,90 (or sm_100)")
        archs.append(int(s))
    if not archs:
        raise ValueError("no arch given")
    return sorted(set(archs))


def default_jobs() -> int:
    return max(1, min(2, os.cpu_count() or 1))  # the CI and dev boxes share 2 cores


def _probe_specs(workdir: Path) -> CompileSpec:
    path = workdir / "probe_kernel.py"
    path.write_text(PROBE_SOURCE)
    return CompileSpec(name="probe/dot", kernel=f"{path}:probe_dot", constexprs={"BLOCK": 32})


def run_smoke(specs=None, archs=DEFAULT_ARCHS, jobs=None, timeout=120.0, progress=True,
              python=None, keep=None, console=None) -> SmokeReport:
    """Compile ``specs`` (default: the package registry) for each arch; returns the report.

    ``python`` runs the children under another interpreter (a lane's venv); ``keep`` is a
    directory to keep each compile's request, stderr and cache in (default: a temp dir
    that is removed).
    """
    specs = _resolve_specs(specs)
    archs = parse_archs(archs)
    jobs = int(jobs or default_jobs())
    python = python or sys.executable
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    root = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="nsa-smoke-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        with _Progress(progress, console, total=len(archs) * (len(specs) + 1)) as bar:
            probes = _run_probes(root, archs, jobs, timeout, python, bar)
            version = _triton_version(probes, python)
            results, skipped = _run_all(specs, archs, probes, version, root, jobs, timeout, python, bar)
    except BaseException:
        kill_live_children()
        raise
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    report = SmokeReport(triton=version, archs=archs, jobs=jobs, env=recorded_env(), started=started,
                         results=results, skipped=skipped, static=static_check.check_specs(specs, version))
    report.wall_s = time.perf_counter() - t0
    return report


def _resolve_specs(specs) -> list[CompileSpec]:
    if specs is None:
        from .specs import SPECS

        specs = SPECS
    elif isinstance(specs, str):
        specs = load_specs(specs)
    specs = list(specs)
    check_unique(specs)
    if not specs:
        raise ValueError("no compile specs to run")
    return specs


def _run_probes(root, archs, jobs, timeout, python, bar) -> dict:
    """Compile the probe kernel once per arch: a failure means the arch is unsupported."""
    probe = _probe_specs(root)
    out = {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futs = {pool.submit(run_child, probe.request(a), root / f"probe-sm{a}", timeout, python): a for a in archs}
        for fut in as_completed(futs):
            out[futs[fut]] = fut.result()
            bar.advance(f"probe sm_{futs[fut]}: {out[futs[fut]]['verdict']}")
    return out


def _triton_version(probes: dict, python: str) -> str:
    for res in probes.values():
        if res.get("triton"):
            return res["triton"]
    try:  # every probe crashed: ask the interpreter directly
        out = subprocess.run([python, "-c", "import triton; print(triton.__version__)"],
                             capture_output=True, text=True, timeout=120)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _run_all(specs, archs, probes, version, root, jobs, timeout, python, bar):
    """``(results, skipped)``: every (spec, arch) compiled, except where the spec is never launched."""
    todo, results, skipped = [], [], []
    for i, spec in enumerate(specs):
        for arch in archs:
            if version != "unknown" and spec.skipped(version, arch):
                skipped.append({"spec": spec.name, "arch": arch, "why": f"not launched there (skip={dict(spec.skip)})"})
                bar.advance(f"{spec.name} sm_{arch}: skipped")
            elif probes[arch]["verdict"] != "ok":
                results.append(_unsupported_arch(spec, arch, probes[arch], version))
                bar.advance(f"{spec.name} sm_{arch}: unsupported")
            else:
                todo.append((i, spec, arch))
    lock = threading.Lock()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futs = {pool.submit(run_child, spec.request(arch), root / f"{i:03d}-sm{arch}", timeout, python):
                (spec, arch) for i, spec, arch in todo}
        for fut in as_completed(futs):
            spec, arch = futs[fut]
            res = make_result(spec, arch, fut.result(), version)
            with lock:
                results.append(res)
            bar.advance(f"{spec.name} sm_{arch}: {res.verdict}")
    order = {s.name: i for i, s in enumerate(specs)}
    results.sort(key=lambda r: (order[r.spec], r.arch))
    return results, skipped


def _unsupported_arch(spec, arch, probe, version) -> SmokeResult:
    msg = f"sm_{arch} not supported by this Triton (probe kernel: {probe['verdict']}: {probe.get('message', '')})"
    return make_result(spec, arch, {"verdict": "unsupported", "message": msg[:1000], "seconds": 0.0}, version)


def make_result(spec: CompileSpec, arch: int, raw: dict, version: str) -> SmokeResult:
    """A :class:`SmokeResult` from a child's raw result, with the canary expectation checked."""
    res = SmokeResult(
        spec=spec.name, kernel=spec.kernel_name, arch=arch, verdict=raw["verdict"],
        message=raw.get("message", ""), canary=spec.canary, seconds=raw.get("seconds", 0.0),
        metrics=raw.get("metrics") or {}, returncode=raw.get("returncode"),
        stderr_tail=raw.get("stderr_tail", "") if raw["verdict"] != "ok" else "",
    )
    if spec.canary and version != "unknown":
        res.expected = spec.expected_verdicts(version)
        if res.expected is not None:
            needle = spec.expected_substring(version)
            text = f"{res.message}\n{res.stderr_tail}"
            res.as_expected = res.verdict in res.expected and (needle is None or needle in text)
    return res


# ---------------------------------------------------------------- output

class _Progress:
    """A rich progress bar on stderr (or nothing); ``advance(text)`` after each compile."""

    def __init__(self, enabled, console, total):
        self.enabled, self.console, self.total = enabled, console, total
        self._p = self._task = None

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._p = Progress(TextColumn("smoke"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                               TextColumn("{task.description}"),
                               console=self.console or Console(stderr=True), transient=False)
            self._p.__enter__()
            self._task = self._p.add_task("", total=self.total)
        return self

    def advance(self, text: str) -> None:
        if self._p is not None:
            self._p.update(self._task, advance=1, description=text)

    def __exit__(self, *exc):
        if self._p is not None:
            self._p.__exit__(*exc)


_STYLE = {"ok": "green", "compile_error": "red", "crash": "bold red", "timeout": "yellow", "unsupported": "magenta"}


def _cell(r: SmokeResult) -> str:
    style = _STYLE.get(r.verdict, "white")
    text = f"[{style}]{r.verdict}[/]"
    m = r.metrics
    if r.verdict == "ok" and m:
        bits = [f"{r.seconds:.1f}s"]
        if m.get("registers") is not None:
            bits.append(f"r{m['registers']}")
        if m.get("spills"):
            bits.append(f"spill{m['spills']}")
        if m.get("shared") is not None:
            bits.append(f"{m['shared'] // 1024}K")
        text += " " + " ".join(bits)
    return text


def render(report: SmokeReport, console=None) -> None:
    """Print the verdict table (one row per spec, one column per arch) and the messages."""
    from rich.console import Console
    from rich.table import Table

    if console is None:
        console = Console()
        if not console.is_terminal:  # CI logs: do not squeeze the table into 80 columns
            console = Console(width=170)
    table = Table(title=f"nsa-sel smoke - triton {report.triton}, {len(report.results)} compiles, "
                        f"{report.wall_s:.0f} s wall, --jobs {report.jobs}")
    table.add_column("spec", no_wrap=True)
    for a in report.archs:
        table.add_column(f"sm_{a}", no_wrap=True)
    any_canary = any(r.canary for r in report.results)
    if any_canary:
        table.add_column("expected (canaries)")
    rows: dict[str, dict] = {}
    for r in report.results:
        rows.setdefault(r.spec, {})[r.arch] = r
    skipped = {(s["spec"], s["arch"]) for s in report.skipped}
    for s in report.skipped:
        rows.setdefault(s["spec"], {})
    for spec, by_arch in rows.items():
        first = next(iter(by_arch.values()), None)
        cells = [_cell(by_arch[a]) if a in by_arch else "[dim]skipped[/]" if (spec, a) in skipped else ""
                 for a in report.archs]
        if any_canary:
            cells.append(_expect_cell(list(by_arch.values())) if first is not None and first.canary else "")
        table.add_row(spec, *cells)
    console.print(table)
    _print_messages(report, console)
    _print_static(report, console)
    _print_summary(report, console)


def _expect_cell(results) -> str:
    exp = results[0].expected
    if exp is None:
        return "(no expectation for this version)"
    good = all(r.as_expected for r in results)
    return f"{'/'.join(exp)} " + ("[green]as expected[/]" if good else "[bold red]UNEXPECTED[/]")


def _print_messages(report, console) -> None:
    """Each distinct failure message once, with the specs and archs that hit it."""
    groups: dict[tuple, dict] = {}
    for r in report.results:
        if r.verdict != "ok":
            groups.setdefault((r.verdict, r.message), {}).setdefault(r.spec, []).append(str(r.arch))
    for (verdict, message), where in groups.items():
        places = "; ".join(f"{spec} sm_{','.join(archs)}" for spec, archs in where.items())
        console.print(f"  [bold]{verdict}[/]: {message}\n      in {places}", highlight=False, soft_wrap=True)


def _print_static(report, console) -> None:
    for kernel, info in sorted(report.static.items()):
        if info.get("findings"):
            flag = "" if info.get("installed_ok", True) else " [bold red](outside the installed version)[/]"
            console.print(f"  static: {kernel.rpartition('/')[2]} needs triton {info['needs'] or 'any'}{flag}: "
                          + "; ".join(sorted({f["api"] for f in info["findings"]})), highlight=False, soft_wrap=True)


def _print_summary(report, console) -> None:
    n_ok = sum(r.verdict == "ok" for r in report.results if not r.canary)
    n = sum(not r.canary for r in report.results)
    if report.skipped:
        console.print(f"  skipped (never launched there): {len(report.skipped)} compiles, e.g. "
                      f"{report.skipped[0]['spec']} sm_{report.skipped[0]['arch']}: {report.skipped[0]['why']}",
                      highlight=False, soft_wrap=True)
    console.print(f"variants ok: {n_ok}/{n}; canaries unexpected: {len(report.canary_mismatches)}; "
                  f"TRITON_DEFAULT_FP_FUSION={report.env.get('TRITON_DEFAULT_FP_FUSION')}; "
                  f"wall {report.wall_s:.1f} s", highlight=False)


# ---------------------------------------------------------------- CLI

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nsa-sel smoke", description=__doc__.split("\n\n")[0],
        epilog="exit status: 0 all ok and canaries as expected; 1 a variant is not ok; "
               "3 only a canary differs from its expectation; 2 bad usage")
    p.add_argument("--arch", default=",".join(map(str, DEFAULT_ARCHS)),
                   help="compute capabilities, comma separated (default 80,89,90; 100 and 120 on request)")
    p.add_argument("--json", metavar="PATH", help="write the report as JSON (schema 1)")
    p.add_argument("--jobs", type=int, default=None, help="parallel compiles (default: min(2, cores))")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per compile before 'timeout'")
    p.add_argument("--specs", action="append", metavar="MODULE:ATTR",
                   help="compile these specs instead of the package registry (module:ATTR or file.py:ATTR; "
                        "repeatable; 'builtin' means the package registry)")
    p.add_argument("--canaries", action="store_true", help="also run the canaries of tests/canaries")
    p.add_argument("--python", help="run the children under this interpreter (another venv's Triton)")
    p.add_argument("--keep", metavar="DIR", help="keep each compile's request, stderr and cache under DIR")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def find_canaries() -> Path:
    """``tests/canaries/kernels.py`` of the checkout (the cwd first, then next to the package)."""
    for base in (Path.cwd(), Path(__file__).resolve().parents[3]):
        path = base / "tests" / "canaries" / "kernels.py"
        if path.is_file():
            return path
    raise FileNotFoundError("tests/canaries/kernels.py not found: run from the repository root, "
                            "or pass --specs path/to/tests/canaries/kernels.py:SPECS")


def collect_specs(args) -> list[CompileSpec]:
    from .specs import SPECS

    refs = args.specs or ["builtin"]
    specs = []
    for ref in refs:
        specs += list(SPECS) if ref == "builtin" else load_specs(ref)
    if args.canaries:
        specs += load_specs(f"{find_canaries()}:SPECS")
    check_unique(specs)
    return specs


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        archs = parse_archs(args.arch)
        specs = collect_specs(args)
        if args.jobs is not None and args.jobs < 1:
            raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    except (ValueError, FileNotFoundError, ImportError) as e:
        print(f"nsa-sel smoke: {e}", file=sys.stderr)
        return 2
    if "TRITON_DEFAULT_FP_FUSION" not in os.environ:
        print(f"note: TRITON_DEFAULT_FP_FUSION is unset; the children use {FP_FUSION_DEFAULT} (Triton 3.9 warns "
              "that its default becomes 'disabled' in 3.10) and the report records it", file=sys.stderr)
    report = run_smoke(specs, archs=archs, jobs=args.jobs, timeout=args.timeout,
                       progress=not args.no_progress, python=args.python, keep=args.keep)
    render(report)
    if args.json:
        Path(args.json).write_text(report.to_json())
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())
