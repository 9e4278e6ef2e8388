"""bench/device/device_refresh.sh on the CPU: parts carried over two calls, the background unpacker and refresh,
and a collect that returns the results (fake Triton trees, the canary stage only)."""

from __future__ import annotations

import os
import subprocess
import tarfile
import time
from pathlib import Path

from bench.device import slim_triton as S
from test_slim_triton import _wheel

from nsa_triton_sel.compat import ledger

ROOT = Path(__file__).resolve().parents[3]


def _sh(*args, env, timeout=300):
    return subprocess.run(["bash", str(ROOT / "bench" / "device" / "device_refresh.sh"), *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_parts_over_two_calls_then_collect(tmp_path):
    wheel = _wheel(tmp_path, "3.8.0")
    S.pack([wheel], tmp_path / "parts", part_mib=0.0002, preset=1, dict_mib=4)
    parts = sorted((tmp_path / "parts").glob("triton-slim.*.xz"))
    assert len(parts) >= 2
    carry, out = tmp_path / "carry", tmp_path / "OUT"
    carry.mkdir()
    out.mkdir()
    env = {**os.environ, "REFRESH_DIR": str(tmp_path / "refresh"), "REFRESH_CARRY": str(carry), "OUT": str(out),
           "REFRESH_INSTALLED": "0", "REFRESH_EXPECT": "3.8.0", "REFRESH_ARGS": "--stages canary",
           "NSA_SEL_CANARY_DEVICE": "cpu", "OMP_NUM_THREADS": "1", "REFRESH_WAIT_S": "120"}
    half = len(parts) // 2
    for p in parts[:half]:  # call 1 carries the first half ...
        p.rename(carry / p.name)
    try:
        _calls(tmp_path, parts[half:], carry, out, env)
    finally:
        _sh("stop", env=env)


def _calls(tmp_path, rest, carry, out, env):
    first = _sh("feed", env=env)
    assert "unpacker started" in first.stdout and "refresh started" in first.stdout, first.stdout + first.stderr
    snapshot = tmp_path / "refresh" / "repo"  # later calls replace the working tree: the refresh runs from a copy
    assert (snapshot / "src" / "nsa_triton_sel" / "__init__.py").is_file() and not (snapshot / ".venv").exists()
    time.sleep(2)
    assert not (tmp_path / "refresh" / "trees" / "triton-3.8.0.ready").exists()  # waits for the rest
    for p in rest:  # ... call 2 the rest
        p.rename(carry / p.name)
    second = _sh("feed", env=env)
    assert "refresh running" in second.stdout or "DONE" in second.stdout, second.stdout
    done = _sh("collect", "200", env=env, timeout=260)
    assert "the refresh is done" in done.stdout, done.stdout + done.stderr
    assert {p.name for p in out.iterdir()} >= {"results.tar.gz", "logs.tar.gz", "status.json", "progress.log"}
    with tarfile.open(out / "results.tar.gz") as tar:
        tar.extractall(tmp_path / "x")
    recs, notes = ledger.load_run_files([tmp_path / "x" / "results" / "triton-3.8.0"])
    assert not notes and recs and {r["triton_imported"] for r in recs} == {"3.8.0"}


def test_two_sets_carried_in_any_order_enter_one_at_a_time(tmp_path):
    """Two packs (told apart by their part counts) carried mixed over two calls: the second set waits until the
    first is unpacked, then enters while `collect` waits; both releases are refreshed."""
    sets = {}
    for version, part_mib in (("3.8.0", 0.0002), ("3.7.0", 0.0001)):
        folder = tmp_path / f"parts-{version}"
        S.pack([_wheel(tmp_path, version)], folder, part_mib=part_mib, preset=1, dict_mib=4)
        sets[version] = sorted(folder.glob("triton-slim.*.xz"))
    counts = {len(p) for p in sets.values()}
    assert len(counts) == 2 and min(counts) >= 2, counts  # the sets differ in their count, as the script needs
    carry, out = tmp_path / "carry", tmp_path / "OUT"
    carry.mkdir()
    out.mkdir()
    env = {**os.environ, "REFRESH_DIR": str(tmp_path / "refresh"), "REFRESH_CARRY": str(carry), "OUT": str(out),
           "REFRESH_INSTALLED": "0", "REFRESH_EXPECT": "3.7.0,3.8.0", "REFRESH_ARGS": "--stages canary",
           "NSA_SEL_CANARY_DEVICE": "cpu", "OMP_NUM_THREADS": "1", "REFRESH_WAIT_S": "120",
           "REFRESH_SETS": " ".join(f"{len(sets[v]):03d}" for v in ("3.8.0", "3.7.0"))}
    first, second = sets["3.8.0"], sets["3.7.0"]
    try:
        for p in [first[0], *second[1:]]:  # call 1: the first set's part 000 and the second set but its 000
            p.rename(carry / p.name)
        one = _sh("feed", env=env)
        assert "unpacker started on set of-%03d" % len(first) in one.stdout, one.stdout + one.stderr
        assert "waiting for the set before them" in one.stdout, one.stdout
        for p in [*first[1:], second[0]]:  # call 2: the rest of both
            p.rename(carry / p.name)
        _sh("feed", env=env)
        done = _sh("collect", "200", env=env, timeout=260)
        assert "the refresh is done" in done.stdout, done.stdout + done.stderr
        refresh = tmp_path / "refresh"
        assert not list((refresh / "stage").iterdir())  # every part entered; the first set's were retired
        assert {p.name for p in (refresh / "parts").iterdir()} <= {p.name for p in second}
        assert {p.name for p in (refresh / "trees").glob("*.ready")} == {"triton-3.7.0.ready", "triton-3.8.0.ready"}
        with tarfile.open(out / "results.tar.gz") as tar:
            tar.extractall(tmp_path / "x")
        for version in ("3.7.0", "3.8.0"):
            recs, notes = ledger.load_run_files([tmp_path / "x" / "results" / f"triton-{version}"])
            assert not notes and recs and {r["triton_imported"] for r in recs} == {version}
    finally:
        _sh("stop", env=env)
