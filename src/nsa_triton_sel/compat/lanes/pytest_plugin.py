"""A pytest plugin the lanes load (``-p nsa_triton_sel.compat.lanes.pytest_plugin``): it reports what
the pytest process imported, and shows progress where there is no terminal.

At the end of the session it writes ``{"triton": ..., "numpy": ..., "torch": ...}`` (the
versions in ``sys.modules``, None for a package never imported) and where each came from to
the file named by ``$NSA_SEL_IMPORTED_JSON``.  The lane puts these versions on every record of
the run, so a test process that imported another Triton than the lane's cannot pass for it.  Under
pytest-xdist (the interpreter lanes run their tests on every usable core) the tests run in the workers,
so each worker writes its own file, ``<that path>.<worker id>``, and the lane reads them all.

Triton's JIT: where the installed Triton has a compilation listener (3.4+), the plugin counts, per process,
the kernels Triton compiled (with their cache keys, names, the tests that compiled them and seconds) and those
it loaded from its cache, into the same file (``"jit"``); the lane sums the processes' counts
(:func:`jit_summary`), so a GPU lane says how much of its time went into compiling, which kernels it compiled
and whether any kernel was compiled by two processes.

Progress: a nox lane's output goes to a log, not a terminal, and an interpreter lane's tests take
minutes.  Every ``$NSA_SEL_PROGRESS_EVERY`` tests (default 10; 0 turns it off) the plugin writes one
line with the count, the outcomes so far and the elapsed time, on a terminal too when the variable
is set.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter

from ..core.env import imported_origins, imported_versions

ENV = "NSA_SEL_IMPORTED_JSON"
EVERY_ENV = "NSA_SEL_PROGRESS_EVERY"
DEFAULT_EVERY = 10


class LaneProgress:
    """Counts finished tests (one per test: its call, or the setup that skipped or failed it)."""

    def __init__(self, every: int, write_line):
        self.every, self.write_line = every, write_line
        self.total, self.done, self.outcomes, self.t0 = 0, 0, {}, time.monotonic()

    def collected(self, n: int) -> None:
        self.total, self.t0 = n, time.monotonic()

    def report(self, rep) -> None:
        finished = rep.when == "call" or (rep.when == "setup" and rep.outcome != "passed")
        if not finished:
            return
        outcome = "xfailed" if hasattr(rep, "wasxfail") and rep.outcome == "skipped" else rep.outcome
        self.done += 1
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        if self.done % self.every == 0 or self.done == self.total:
            self.write_line(self.status())

    def status(self) -> str:
        elapsed = time.monotonic() - self.t0
        outcomes = ", ".join(f"{n} {o}" for o, n in sorted(self.outcomes.items()))
        left = f", about {elapsed / self.done * (self.total - self.done):.0f} s left" if 0 < self.done < self.total else ""
        return f"tests: {self.done}/{self.total} ({outcomes}), {elapsed:.0f} s elapsed{left}"


def _every() -> int:
    raw = os.environ.get(EVERY_ENV, "").strip()
    if not raw:
        return DEFAULT_EVERY if not sys.stdout.isatty() else 0
    if not raw.isdigit():
        raise ValueError(f"{EVERY_ENV}={raw!r}: expected a whole number of tests (0 turns progress lines off)")
    return int(raw)


def launch_key() -> dict | None:
    """What Triton keys the compile in progress on, read from its ``JITFunction.run`` frame (a compilation
    listener is called from inside it): the kernel's name, each argument's specialisation and the launch
    options, as strings, and beside them the rest of the on-disk cache key (:func:`cache_key_parts`); None where
    no such frame is found (another Triton's launch path)."""
    frame = sys._getframe(1)
    parts = None
    while frame is not None:
        loc = frame.f_locals
        if parts is None and frame.f_code.co_name == "compile" and "src" in loc and "backend" in loc:
            parts = cache_key_parts(loc)
        if frame.f_code.co_name == "run" and "specialization" in loc and "bound_args" in loc:
            names = list(loc["bound_args"])
            spec = [str(x) for x in loc["specialization"]]
            options = loc.get("options")
            key = {"kernel": getattr(loc.get("self"), "__name__", "?"),
                   "specialization": dict(zip(names, spec)) if len(names) == len(spec) else {"*": spec},
                   "options": {str(k): str(v) for k, v in sorted(options.items())} if isinstance(options, dict)
                   else str(options)}
            if parts:
                key["cache"] = parts
            return key
        frame = frame.f_back
    return None


def cache_key_parts(loc: dict) -> dict:
    """The parts of Triton's on-disk cache key that a launch's arguments and options do not fix, from the locals of
    ``triton.compile``: the kernel's source key (its text, the jitted functions it calls, the constexpr globals
    it reads), the backend's (the ``ptxas`` version and arch: ``TRITON_PTXAS_PATH`` moves it) and the
    cache-invalidating environment.  Each is left out where this Triton names it otherwise."""
    out = {}
    src, backend = loc.get("src"), loc.get("backend")
    source = getattr(getattr(src, "fn", None), "cache_key", None)
    if isinstance(source, str):
        out["source"] = source[:16]
    try:
        out["backend"] = str(backend.hash())
    except Exception:  # noqa: BLE001 - a diagnostic: never fail the compile it watches
        pass
    env = loc.get("env_vars")
    if isinstance(env, dict):
        out["env"] = {str(k): str(v) for k, v in sorted(env.items())}
    return out


KERNELS = "nsa_triton_sel.kernels"  # the package whose jitted functions the lane's processes settle


def settle_cache_keys(package: str = KERNELS, passes: int = 10) -> int:
    """Give every jitted function of ``package`` the cache key Triton gives it once every function it calls is
    hashed, whatever this process launches first; returns how many functions (0 where none is a JITFunction:
    the interpreter, no Triton).

    Triton hashes a function by its source, the keys of the functions it calls and the constexpr globals they
    read, which it merges from each callee.  Triton 3.2 - 3.7 merge a callee's globals *before* hashing it, so a
    kernel hashed before its helpers leaves their globals out: its key, and so the on-disk cache entry it reads,
    depends on which kernel the process launched first, and two processes (a test worker, the JIT warm-up, the
    benchmarks) compile the same launch twice.  Rehashing every function until no key moves gives each one the
    key of a process that hashed its helpers first (3.0, 3.1 and 3.8+ give it anyway).  The compiled code is
    the same either way; only the name of its cache entry moves."""
    import importlib  # noqa: PLC0415
    import pkgutil  # noqa: PLC0415

    try:
        from triton.runtime.jit import JITFunction  # noqa: PLC0415
        pkg = importlib.import_module(package)
        modules = [importlib.import_module(f"{package}.{m.name}")
                   for m in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name)]
    except Exception:  # noqa: BLE001 - no (working) Triton or kernels: nothing to settle
        return 0
    fns = [obj for mod in modules for _, obj in sorted(vars(mod).items())
           if isinstance(obj, JITFunction) and obj.fn.__module__ == mod.__name__ and hasattr(obj, "hash")]
    before = None
    for _ in range(passes):
        for fn in fns:
            fn.hash = None
        keys = [fn.cache_key for fn in fns]
        if keys == before:
            break
        before = keys
    return len(fns)


class JitCount:
    """A Triton compilation listener: kernels compiled (cache keys; beside them, each one's kernel name, the
    test that compiled it and what Triton keyed it on, :func:`launch_key`) and loaded from the cache, and the
    seconds compiling took; it calls the listener it replaced."""

    def __init__(self, previous=None):
        self.previous, self.compiled, self.names, self.launches = previous, [], [], []
        self.cached, self.seconds = 0, 0.0

    def __call__(self, *, src, metadata, metadata_group, times, cache_hit, **kw):
        if cache_hit:
            self.cached += 1
        else:
            path = next(iter(metadata_group.values()), "") if metadata_group else ""
            self.compiled.append(os.path.basename(os.path.dirname(str(path))) or "?")
            name = (metadata or {}).get("name") or getattr(src, "name", None) or "?"
            self.names.append(f"{name} in {_TEST}" if _TEST else name)
            try:
                self.launches.append(launch_key())
            except Exception:  # noqa: BLE001 - a diagnostic: never fail the compile it watches
                self.launches.append(None)
            self.seconds += getattr(times, "total", 0) / 1e6
        if self.previous is not None:
            self.previous(src=src, metadata=metadata, metadata_group=metadata_group, times=times, cache_hit=cache_hit,
                          **kw)

    def as_dict(self) -> dict:
        return {"compiled": self.compiled, "names": self.names, "launches": self.launches, "cached": self.cached,
                "compile_s": round(self.seconds, 3)}


_JIT: JitCount | None = None
_TEST: str | None = None  # the test running in this process, for the compiles it causes
INDUCTOR = "triton_"  # the prefix of every kernel torch.compile (Inductor) generates
LISTED = 8  # a stage with at most this many compiles names each one and its test


def _count_jit() -> None:
    """Listen to Triton's compiles in this process, where the installed Triton can say (3.4+).  Called once the
    tests are collected: every conftest has set its environment by then (the interpreter flag), so importing
    Triton here changes nothing a test would see."""
    global _JIT
    try:
        import triton  # noqa: PLC0415 - every test process of a lane imports it anyway
    except Exception:  # noqa: BLE001 - no (working) Triton: nothing to count
        return
    compilation = getattr(getattr(triton, "knobs", None), "compilation", None)
    if _JIT is not None or compilation is None or not hasattr(compilation, "listener"):
        return
    previous = compilation.listener
    _JIT = JitCount(previous)
    compilation.listener = _JIT


def jit_summary(files) -> str | None:
    """One line over the processes' ``"jit"`` counts: kernels compiled, seconds, loaded from the cache, and
    cache keys compiled by more than one process (None: no process could count)."""
    counts = [d["jit"] for d in files if d.get("jit") is not None]
    if not counts:
        return None
    keys = [k for c in counts for k in c["compiled"]]
    compiled, cached = len(keys), sum(c["cached"] for c in counts)
    seconds = sum(c["compile_s"] for c in counts)
    twice = compiled - len(set(keys))
    rate = f"{cached / (compiled + cached):.0%}" if compiled + cached else "-"
    line = (f"Triton JIT over {len(counts)} process(es): {compiled} compile(s) ({seconds:.0f} s of compiling), "
            f"{cached} loaded from the cache (hit rate {rate}); {twice} compile(s) of a kernel another process "
            f"also compiled")
    names = [n for c in counts for n in c.get("names", [])]
    if not names:
        return line
    if len(names) <= LISTED:
        return f"{line}; compiled: {'; '.join(names)}"
    kernels = Counter("torch.compile's (Inductor)" if k.startswith(INDUCTOR) else k
                      for k in (n.split(" in ", 1)[0] for n in names))
    top = sorted(kernels.items(), key=lambda kv: (-kv[1], kv[0]))
    return f"{line}; by kernel: {', '.join(f'{k} {n}' for k, n in top)}"


def pytest_sessionstart(session):  # after every plugin's configure: the terminal reporter exists
    config = session.config
    every = _every()
    reporter = config.pluginmanager.getplugin("terminalreporter")
    if every and reporter is not None:
        hooks = _hooks(LaneProgress(every, _line_writer(reporter)), xdist=config.pluginmanager.hasplugin("xdist"))
        config.pluginmanager.register(hooks, "nsa-sel-lane-progress")


def _line_writer(reporter):
    """A whole line of its own, after the outcome letters pytest has written so far on the current line."""
    def write(text: str) -> None:
        reporter.ensure_newline()  # normal verbosity: ends the "file.py ..." line
        if getattr(reporter._tw, "width_of_current_line", 0):  # noqa: SLF001 - -q: letters with no file name
            reporter.write("\n")
        reporter.write_line(text)
        reporter.currentfspath = -2  # pytest's own marker: the next outcome letter starts a fresh line
    return write


def _hooks(progress: LaneProgress, xdist: bool = False):
    import pytest  # noqa: PLC0415 - only inside a pytest process (the toolkit imports stdlib at module level)

    class Hooks:
        def pytest_collection_finish(self, session):
            progress.collected(len(session.items))  # an xdist controller collects nothing itself: see below

        @pytest.hookimpl(trylast=True)  # after the terminal reporter wrote this test's outcome letter
        def pytest_runtest_logreport(self, report):
            progress.report(report)

    if xdist:
        class XdistHooks(Hooks):
            def pytest_xdist_node_collection_finished(self, node, ids):  # noqa: ARG002 - xdist's signature
                if not progress.total:  # every worker collects the same tests
                    progress.collected(len(ids))

        return XdistHooks()
    return Hooks()


def pytest_runtest_logstart(nodeid, location):  # noqa: ARG001 - pytest's hook signature
    global _TEST
    _TEST = nodeid.rsplit("/", 1)[-1]


def pytest_collection_finish(session):  # noqa: ARG001 - the test modules are imported: Triton is, if they use it
    if os.environ.get(ENV):
        settle_cache_keys()  # before any launch: the keys the JIT warm-up and the other processes give them
        _count_jit()


def pytest_sessionfinish(session, exitstatus):  # noqa: ARG001 - pytest's hook signature
    path = os.environ.get(ENV)
    if path:
        # An xdist worker's config has its workerinput ("gw0", "gw1", ...); the PYTEST_XDIST_WORKER variable would
        # also name a plain pytest that a worker's test starts, which inherits it.
        worker = getattr(session.config, "workerinput", {}).get("workerid")
        with open(f"{path}.{worker}" if worker else path, "w") as f:
            json.dump({"imported": imported_versions(), "origins": imported_origins(),
                       "jit": _JIT.as_dict() if _JIT is not None else None}, f)
