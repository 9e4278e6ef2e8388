"""The smoke harness's child processes: their environment, start, timeout and crash reports.

Each compile runs in a child because some compiler failures are C++ assertion aborts that kill
the process.  The child must import the *same* Triton as the environment the harness was
started for, never another one that happens to be on the parent's ``sys.path``:

- the harness adds to the child's ``PYTHONPATH`` only plain directories the parent had *before*
  its own site-packages (the cwd, runtime inserts such as a tests directory holding user specs);
  the caller's own ``PYTHONPATH`` is passed unchanged (the parent has it in the same place).  A
  directory of installed packages (named site-packages, holding ``*.dist-info``, or holding
  triton/numpy/torch) is never added there: on ``PYTHONPATH`` it would come *before* the child's
  own site-packages and shadow its Triton.  (A lane that borrows the invoking environment's
  torch through a ``.pth`` file has that whole site-packages on its path; put on the children's
  ``PYTHONPATH``, it made lanes 3.0-3.8 compile with Triton 3.9.)
- what the child needs from such a directory (this package, when it is installed there) is
  appended *after* the child's own site-packages by a small bootstrap (:data:`BOOT`).
- every child reports the versions it imported (:func:`..core.env.imported_versions`), so a leak
  that slips through anyway is caught by the harness and the ledger.
"""

from __future__ import annotations

import json
import os
import select
import signal
import site
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..core.verdicts import CRASH, TIMEOUT

FP_FUSION_DEFAULT = "1"  # Triton 3.9 warns when unset; 3.10 flips the default to "disabled"
SHARED_PATH_ENV = "NSA_SEL_SHARED_PATH"
CHECKED_PACKAGES = ("triton", "numpy", "torch")
SERVER_START_TIMEOUT = 120.0  # seconds for a compile server to import Triton and say so
SERVER_REPLY_SLACK = 30.0  # beyond a compile's own timeout (the server kills it at the timeout)
# Children start through this bootstrap rather than ``python -m``: it appends the directories the
# parent shares (os.pathsep-separated in NSA_SEL_SHARED_PATH) *after* the child's own
# site-packages, then runs the module as __main__ with the remaining arguments.
BOOT = ("import os, runpy, sys; "
        f"sys.path += [p for p in os.environ.get({SHARED_PATH_ENV!r}, '').split(os.pathsep) "
        "if p and p not in sys.path]; "
        "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)")


def child_command(python: str, module: str, *args: str) -> list[str]:
    """``python -m module args`` with the shared-path bootstrap."""
    return [python, "-c", BOOT, module, *args]


def is_site_dir(path: str) -> bool:
    """A directory of installed packages, or one that provides triton, numpy or torch."""
    p = Path(path)
    if p.name in ("site-packages", "dist-packages"):
        return True
    try:
        if any(p.glob("*.dist-info")):
            return True
    except OSError:
        return False
    return any((p / name).is_dir() or any(p.glob(f"{name}.*.so")) for name in CHECKED_PACKAGES)


def _interpreter_dirs() -> set[str]:
    """The interpreter's own directories (stdlib, its site-packages): a child has its own."""
    return {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}


def _own(path: str, prefixes: set[str]) -> bool:
    real = os.path.realpath(path)
    return any(real == pre or real.startswith(pre + os.sep) for pre in prefixes)


def package_home() -> str:
    """The directory this package is imported from (``src/`` of a checkout, or a site-packages)."""
    return str(Path(__file__).resolve().parents[3])


def child_paths() -> tuple[list[str], list[str]]:
    """``(front, back)``: directories for the child's PYTHONPATH, and ones to append after its
    own site-packages (see the module docstring)."""
    prefixes = _interpreter_dirs()
    sites = [os.path.realpath(p) for p in site.getsitepackages() + [site.getusersitepackages()]]
    real = [os.path.realpath(p or os.getcwd()) for p in sys.path]
    first_site = min((i for i, p in enumerate(real) if p in sites), default=len(real))
    front, back = [], []
    for i, p in enumerate([os.path.realpath(os.getcwd())] + real):
        before_site = i == 0 or i - 1 < first_site
        if not os.path.isdir(p) or _own(p, prefixes) or p in sites:
            continue
        if not is_site_dir(p):
            (front if before_site else back).append(p)
        elif before_site:
            back.append(p)  # installed packages must never shadow the child's own
        # an installed-packages dir after site-packages came from a .pth file: the same interpreter
        # processes it again, another interpreter has its own; it is not shared
    home = os.path.realpath(package_home())  # shared even when it is the parent's site-packages:
    (back if is_site_dir(home) else front).append(home)  # another --python may not have the package
    return list(dict.fromkeys(front)), [p for p in dict.fromkeys(back) if p not in front]


def child_env(cache_dir: str) -> dict:
    """The child's environment: a private cache, FP fusion explicit, never the interpreter, and the
    paths of :func:`child_paths` added to the caller's PYTHONPATH (before it) and after the child's
    site-packages."""
    env = dict(os.environ)
    env["TRITON_CACHE_DIR"] = cache_dir
    env.setdefault("TRITON_DEFAULT_FP_FUSION", FP_FUSION_DEFAULT)
    env.pop("TRITON_INTERPRET", None)  # the interpreter turns @triton.jit into something AOT cannot compile
    env["PYTHONFAULTHANDLER"] = "1"  # a segfault leaves a Python traceback in stderr
    front, back = child_paths()
    # The caller's own PYTHONPATH stays as it is, in front: the parent has it in the same place, so
    # a child imports what `python -c "import triton"` imports in the caller's environment (a lane
    # checks that this is its Triton before anything runs).  The harness adds nothing else there.
    inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    path = [p for p in front if p not in inherited] + inherited
    if path:
        env["PYTHONPATH"] = os.pathsep.join(path)
    env[SHARED_PATH_ENV] = os.pathsep.join(p for p in back if p not in inherited)
    return env


def recorded_env() -> dict:
    """The environment a run is recorded with: FP fusion, plus every TRITON_* the user set."""
    env = {k: v for k, v in os.environ.items() if k.startswith("TRITON_") and k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", FP_FUSION_DEFAULT)
    env["TRITON_CACHE_DIR"] = "<fresh per compile>"
    return env


def run_module(module: str, args: list[str], workdir: Path, timeout: float, python: str) -> tuple[int | None, float]:
    """Run ``python -m module args`` as a child in its own process group; ``(exit status, seconds)``.

    The status is None when the child ran past ``timeout`` (it is killed with its group, ptxas
    included).  Its stderr goes to ``workdir/stderr.txt``.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(workdir / "stderr.txt", "wb") as err:
        proc = subprocess.Popen(child_command(python, module, *args), stdout=subprocess.DEVNULL, stderr=err,
                                cwd=os.getcwd(), env=child_env(str(workdir / "cache")), start_new_session=True)
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
    return rc, round(time.perf_counter() - t0, 3)


def run_child(req: dict, workdir: Path, timeout: float, python: str) -> dict:
    """Compile ``req`` in a child; returns the child's result or a ``crash``/``timeout`` verdict."""
    workdir.mkdir(parents=True, exist_ok=True)
    req_path, res_path = workdir / "request.json", workdir / "result.json"
    req_path.write_text(json.dumps(req))
    rc, seconds = run_module("nsa_triton_sel.compat.smoke.aot", [str(req_path), str(res_path)], workdir, timeout, python)
    imported = _read_imported(Path(f"{res_path}.imported"))  # written before the compile: survives an abort
    return _outcome(rc, seconds, timeout, res_path, stderr_tail(workdir / "stderr.txt"), imported)


def _outcome(rc, seconds, timeout, res_path: Path, tail: str, imported: dict) -> dict:
    """A compile's result from its exit status: its result file, or a ``crash``/``timeout`` verdict."""
    if rc is None:
        return {"verdict": TIMEOUT, "message": f"no result after {timeout:g} s; killed",
                "seconds": seconds, "stderr_tail": tail, "imported": imported}
    if rc == 0 and res_path.exists():
        result = json.loads(res_path.read_text())
        result.update(seconds=seconds, returncode=0, compile_seconds=result.get("seconds"))
        return result
    return {"verdict": CRASH, "message": crash_message(rc, tail), "seconds": seconds,
            "returncode": rc, "stderr_tail": tail, "imported": imported}


class CompileServer:
    """A compile server child (:mod:`.forkserver`): imports Triton once, forks one process per compile.

    :meth:`compile` returns what :func:`run_child` does.  A server that died (it should not: the
    compiles crash in their own processes) answers with a ``crash`` and is not used again.
    """

    def __init__(self, workdir: Path, python: str):
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self._err = open(workdir / "server-stderr.txt", "wb")
        self.proc = subprocess.Popen(child_command(python, "nsa_triton_sel.compat.smoke.forkserver"),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
                                     cwd=os.getcwd(), env=child_env(str(workdir / "cache")),
                                     start_new_session=True, text=True)
        with _LIVE_LOCK:
            _LIVE.add(self.proc)
        hello = self._reply(SERVER_START_TIMEOUT)
        self.imported = (hello or {}).get("imported") or {}
        self.alive = hello is not None

    def _reply(self, timeout: float) -> dict | None:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        try:
            return json.loads(line) if line else None
        except ValueError:
            return None

    def compile(self, req: dict, workdir: Path, timeout: float) -> dict:
        workdir.mkdir(parents=True, exist_ok=True)
        req_path, res_path, err_path = workdir / "request.json", workdir / "result.json", workdir / "stderr.txt"
        req_path.write_text(json.dumps(req))
        job = {"request": str(req_path), "result": str(res_path), "stderr": str(err_path),
               "cache": str(workdir / "cache"), "timeout": timeout}
        reply = None
        if self.alive:
            try:
                self.proc.stdin.write(json.dumps(job) + "\n")
                self.proc.stdin.flush()
                reply = self._reply(timeout + SERVER_REPLY_SLACK)
            except (BrokenPipeError, OSError):
                reply = None
        if reply is None:
            self.alive = False
            tail = stderr_tail(self.workdir / "server-stderr.txt")
            return {"verdict": CRASH, "message": f"the compile server died: {tail.splitlines()[-1] if tail else '?'}",
                    "seconds": 0.0, "returncode": None, "stderr_tail": tail, "imported": self.imported}
        return _outcome(reply["rc"], reply["seconds"], timeout, res_path, stderr_tail(err_path), self.imported)

    def close(self) -> None:
        with _LIVE_LOCK:
            _LIVE.discard(self.proc)
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            _kill_group(self.proc)
        self._err.close()


class ServerPool:
    """One :class:`CompileServer` per worker thread, started on first use, replaced when one dies."""

    def __init__(self, root: Path, python: str):
        self.root, self.python = root, python
        self._local = threading.local()
        self._all: list[CompileServer] = []
        self._lock = threading.Lock()

    def compile(self, req: dict, workdir: Path, timeout: float) -> dict:
        server = getattr(self._local, "server", None)
        if server is None or not server.alive:
            with self._lock:
                server = CompileServer(self.root / f"server-{len(self._all)}", self.python)
                self._all.append(server)
            self._local.server = server
        return server.compile(req, workdir, timeout)

    def close(self) -> None:
        for server in self._all:
            server.close()


def forking() -> bool:
    """Whether compiles go through compile servers (POSIX; ``NSA_SEL_SMOKE_FORK=0`` turns them off)."""
    return hasattr(os, "fork") and os.environ.get("NSA_SEL_SMOKE_FORK", "1") != "0"


def _read_imported(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


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


def stderr_tail(path: Path, lines: int = 15) -> str:
    """The last lines of a child's stderr before any faulthandler dump (which follows the C++ message)."""
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
