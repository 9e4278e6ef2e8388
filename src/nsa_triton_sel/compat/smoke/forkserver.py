"""A compile server: one child process that imports Triton once and forks a fresh process per compile.

Importing Triton is a sizeable part of a short compile, so a fresh Python per compile would pay it
every time.  This server imports Triton and this package once, then forks one process per compile:
each compile still runs in a process of its own (a compiler abort kills that process only, and
is reported as a ``crash``), in its own process group (a timeout kills it with its ptxas), with
its own ``TRITON_CACHE_DIR`` and its stderr in its own file, exactly as a separate child would.

Protocol (``python -m nsa_triton_sel.compat.smoke.forkserver``, started by
:class:`.children.CompileServer`): the server first writes one line
``{"imported": {...}}`` (the versions it imported); then for each line read on stdin,
``{"request": path, "result": path, "stderr": path, "cache": dir, "timeout": seconds}``, it
compiles the request in a forked process and writes ``{"rc": status or null, "seconds": s}``
(``null``: killed after the timeout).  The forked process writes the result as
``python -m nsa_triton_sel.compat.smoke.aot`` does.  POSIX only (``os.fork``).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback


def main() -> int:
    proto = os.fdopen(os.dup(1), "w")  # replies only: compiler chatter on fd 1 goes nowhere
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    try:  # import first, as aot.main does: what was imported is reported even if nothing compiles
        import triton  # noqa: F401
    except Exception:  # noqa: BLE001 - each compile reports it as a verdict
        pass
    from .aot import compile_request, write_json
    from ..core.env import imported_versions

    proto.write(json.dumps({"imported": imported_versions()}) + "\n")
    proto.flush()
    for line in sys.stdin:
        if line.strip():
            rc, seconds = run_one(json.loads(line), compile_request, write_json)
            proto.write(json.dumps({"rc": rc, "seconds": seconds}) + "\n")
            proto.flush()
    return 0


def _fault_dump_to_fd2() -> None:
    """An enabled faulthandler dumps to the file it was enabled on, which may be a copy of the parent's
    stderr (pytest enables it on a dup of fd 2): re-enable it on fd 2, so a compile's crash dump lands in
    that compile's own stderr file, never in the parent's output."""
    import faulthandler  # noqa: PLC0415

    if faulthandler.is_enabled():
        faulthandler.enable(file=2, all_threads=True)


def run_one(job: dict, compile_request, write_json) -> tuple[int | None, float]:
    """Compile ``job`` in a forked process; ``(exit status, seconds)``, status None after a timeout."""
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the compile's own process: never returns
        code = 3
        try:
            os.setpgid(0, 0)  # its own group: a timeout kills it with its ptxas
            err = os.open(job["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(err, 2)  # faulthandler (PYTHONFAULTHANDLER=1) writes to fd 2: the file
            _fault_dump_to_fd2()
            os.environ["TRITON_CACHE_DIR"] = job["cache"]
            with open(job["request"]) as f:
                req = json.load(f)
            write_json(job["result"], compile_request(req))
            code = 0
        except BaseException:  # noqa: BLE001 - reported through the exit status and stderr
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)
    try:
        os.setpgid(pid, pid)  # also from this side: no window in which a kill misses the group
    except OSError:
        pass
    deadline = t0 + float(job["timeout"])
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), round(time.perf_counter() - t0, 3)
        if time.perf_counter() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            return None, round(time.perf_counter() - t0, 3)
        time.sleep(0.005)


if __name__ == "__main__":
    sys.exit(main())
