"""The compile server: every compile in a forked process of its own, its abort or timeout its own verdict."""

from __future__ import annotations

import json
import os
import time

import pytest

from nsa_triton_sel.compat.smoke import forkserver
from nsa_triton_sel.compat.smoke.aot import write_json
from nsa_triton_sel.compat.smoke import children

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the compile server needs os.fork (POSIX)")


def _job(tmp_path, name, timeout=30.0):
    (tmp_path / f"{name}.json").write_text(json.dumps({"name": name}))
    return {"request": str(tmp_path / f"{name}.json"), "result": str(tmp_path / f"{name}.result.json"),
            "stderr": str(tmp_path / f"{name}.stderr"), "cache": str(tmp_path / f"{name}-cache"),
            "timeout": timeout}


def _compile(req):
    """A stand-in for aot.compile_request: its behaviour is named by the request."""
    if req["name"] == "abort":
        os.write(2, b"Assertion `fake' failed.\n")  # fd 2 (pytest captures sys.stderr)
        os.abort()  # what a C++ assertion in the compiler does
    if req["name"] == "hang":
        time.sleep(60)
    return {"verdict": "ok", "cache": os.environ["TRITON_CACHE_DIR"], "pid": os.getpid()}


def test_a_compile_runs_in_a_forked_process_with_its_own_cache(tmp_path):
    rc, seconds = forkserver.run_one(_job(tmp_path, "ok"), _compile, write_json)
    result = json.loads((tmp_path / "ok.result.json").read_text())
    assert rc == 0 and result["cache"] == str(tmp_path / "ok-cache") and result["pid"] != os.getpid()
    assert os.environ.get("TRITON_CACHE_DIR") != str(tmp_path / "ok-cache")  # the server's own is untouched


def test_an_abort_kills_only_its_compile_and_reads_as_a_crash(tmp_path):
    job = _job(tmp_path, "abort")
    rc, seconds = forkserver.run_one(job, _compile, write_json)
    assert rc == -6 and not os.path.exists(job["result"])
    out = children._outcome(rc, seconds, 30.0, tmp_path / "abort.result.json",
                            children.stderr_tail(tmp_path / "abort.stderr"), {"triton": "x"})
    assert out["verdict"] == "crash" and out["message"].startswith("killed by SIGABRT (rc=-6): Assertion `fake'")
    rc, _ = forkserver.run_one(_job(tmp_path, "ok"), _compile, write_json)  # the server goes on
    assert rc == 0


def test_a_crash_dump_goes_to_the_compiles_stderr_file_not_the_parents(tmp_path):
    """pytest enables faulthandler on a copy of its stderr: the forked compile's dump used to land in the
    test run's output ("Fatal Python error: Aborted" and a traceback, although every test passed)."""
    import faulthandler

    if not faulthandler.is_enabled():
        faulthandler.enable()
    forkserver.run_one(_job(tmp_path, "abort"), _compile, write_json)
    assert "Fatal Python error: Aborted" in (tmp_path / "abort.stderr").read_text()


def test_a_compile_past_its_timeout_is_killed(tmp_path):
    t0 = time.perf_counter()
    rc, seconds = forkserver.run_one(_job(tmp_path, "hang", timeout=0.5), _compile, write_json)
    assert rc is None and seconds < 10 and time.perf_counter() - t0 < 10
    out = children._outcome(rc, seconds, 0.5, tmp_path / "hang.result.json", "", {})
    assert out["verdict"] == "timeout"
