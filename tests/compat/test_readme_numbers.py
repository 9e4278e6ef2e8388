"""The README's counts and minutes (and docs/matrix.md's) are what the main job decides and what was measured, so
they cannot drift.

A count written by hand drifts as soon as the registry, the archs or the suite change, and a minute measured on
other work misleads whoever plans by it.  Here each such number is recomputed:

- counts from what the code decides now: the compiles from the registry, the canaries and the archs a lane
  compiles for (machine.NO_GPU_ARCHS on a GPU-less box; the table's archs for the full sweep), the interpreter
  tests from pytest's collection, the newest lane from lanes.toml;
- minutes from the committed measurement (``timing.json`` in the results folder the README names), whose own
  counts must stay within 10 % of today's: past that the minutes describe other work, and the main job has
  to be timed again (the folder's README says how).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from nsa_triton_sel.compat.core import lane_table, machine, project

ROOT = project.project_root()
TEXT = (ROOT / "README.md").read_text()
README = " ".join(TEXT.split())  # whitespace-normalised: sentences wrap anywhere
MATRIX_TEXT = (ROOT / "docs" / "matrix.md").read_text()  # the compile smoke, a team's kernels, the matrix
MATRIX_DOC = " ".join(MATRIX_TEXT.split())
TABLE = lane_table.load_table()
NEWEST = TABLE.newest()


def _timing() -> tuple[str, dict]:
    folders = sorted(set(re.findall(r"bench/results/([\w.-]+-main-job)/", README)))
    assert len(folders) == 1, f"the README should name one main-job timing folder, names {folders}"
    return folders[0], json.loads((ROOT / "bench" / "results" / folders[0] / "timing.json").read_text())


def duration(seconds: float) -> str:
    """How the README writes a measured duration."""
    return f"{round(seconds)} s" if seconds < 120 else f"{seconds / 60:.1f} minutes"


def compiles(archs, version: str) -> dict:
    """What a smoke run with canaries decides for these archs on this release: (spec, arch) pairs."""
    from nsa_triton_sel.compat.canaries import SPECS as CANARIES
    from nsa_triton_sel.compat.registry.specs import SPECS

    specs = list(SPECS) + list(CANARIES)
    skipped = sum(s.skipped(version, a) for s in specs for a in archs)
    variants = sum(not s.skipped(version, a) for s in SPECS for a in archs)
    return {"pairs": len(specs) * len(archs), "variants": variants, "skipped": skipped,
            "canaries": len(specs) * len(archs) - variants - skipped}


def interp_tests() -> int:
    """What the parity lane's ``pytest -m interp`` collects."""
    res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "interp", "-p", "no:cacheprovider"],
                         cwd=ROOT, capture_output=True, text=True, env={**os.environ, "TRITON_INTERPRET": "1"})
    found = re.search(r"(\d+)(?:/\d+)? tests? collected", res.stdout)
    assert found, res.stdout[-2000:] + res.stderr[-2000:]
    return int(found.group(1))


def _close(measured: int, now: int, what: str) -> None:
    assert abs(measured - now) <= 0.1 * now, (
        f"the timing was measured on {measured} {what}; the main job has {now} now: time it again "
        f"({'bench/results/' + _timing()[0]}/README.md) and update timing.json and the README")


def test_the_main_job_is_the_newest_lane_of_the_table():
    n = NEWEST.name
    assert f"nox -s compile-{n} parity-{n}" in README and f"newest Triton lane ({n} today;" in README
    assert f"`nox -s compile-{n} -- --all-archs`" in README


@pytest.mark.slow
def test_the_main_jobs_counts_are_what_it_decides():
    main = compiles(machine.NO_GPU_ARCHS, NEWEST.triton)
    tests = interp_tests()
    assert f"({main['pairs']} compiles), then its interpreter parity suite ({tests} tests)," in README
    sweep = compiles(TABLE.archs, NEWEST.triton)
    _, t = _timing()
    _close(t["main_job"]["compiles"], main["pairs"], "compiles")
    _close(t["main_job"]["interp_tests"], tests, "interpreter tests")
    # the sweep was timed at fewer compiles than it has now: the README gives the main job's own estimate instead
    log = (ROOT / "bench" / "results" / _timing()[0] / "main-job.log").read_text()
    minutes = t["main_job"]["next_estimate_min"]
    assert f"the other {len(TABLE.archs) - 1} archs, about {minutes} min at this run's pace" in log
    assert f"(all {len(TABLE.archs)} archs: {sweep['pairs']} compiles; about {minutes} minutes on the same box" in README
    assert t["main_job"]["archs"] == list(machine.NO_GPU_ARCHS) and t["sweep"]["archs"] == list(TABLE.archs)


def test_the_readmes_minutes_are_the_measured_ones():
    folder, t = _timing()
    m, tt = t["main_job"], t["tests"]
    n = NEWEST.name
    assert (f"the set-up took {duration(m['setup_s'])} and the main job {duration(m['nox_s'])} "
            f"(compile-{n} {round(m['compile_s'])} s, parity-{n} {round(m['parity_s'])} s; "
            f"`bench/results/{folder}/`)") in README
    blocks = [b.split("\n")[0] for b in TEXT.split("```bash\n")[1:]]
    assert m["command"] in blocks, "the README's main-job command block is not the one timed"
    assert (f"the set-up took {duration(tt['setup_s'])} and the tests {duration(tt['pytest_s'])} "
            f"({tt['counts']})") in README


def test_the_readmes_totals_are_the_measured_ones():
    """The main job in all (set-up + nox), and CI (`bash .ci/run`) on a fresh clone."""
    _, t = _timing()
    m = t["main_job"]
    assert f"{duration(m['setup_s'] + m['nox_s'])} in all" in README
    ci = re.search(r"`bash \.ci/run` \(what CI runs\).*?: ([\d.]+ (?:minutes|s)) on a fresh clone", README)
    assert ci and ci.group(1) == duration(t["ci"]["total_s"]), ci and ci.group(1)


def test_the_lane_summary_shown_is_one_a_run_printed():
    folder, _ = _timing()
    block = TEXT.split("and ends with a summary:\n\n```\n")[1].split("```")[0]
    log = (ROOT / "bench" / "results" / folder / "main-job.log").read_text()
    assert block.strip()
    for line in block.splitlines():
        assert line.split("/tmp/")[0].strip() in log, line


def test_the_compile_smoke_line_is_what_a_default_smoke_prints():
    c = compiles((80, 89, 90), NEWEST.triton)  # nsa-sel smoke --canaries, its default archs
    line = f"{c['pairs']} compiles: {c['variants']} variant + {c['canaries']} canary compiled, {c['skipped']} skipped"
    assert f"`{line}` alike (`--canaries`, Triton {NEWEST.name})" in MATRIX_DOC


def test_the_team_lanes_shown_are_a_run_the_results_keep():
    """docs/matrix.md's commands for a team's spec module ran as written, and its excerpt is what they printed."""
    log = (ROOT / "bench" / "results" / "2026-11-26-cpu-triton3.0-3.9-capture" / "team-lanes.log").read_text()
    section = MATRIX_TEXT.split("The matrix's compile lanes take the module too")[1].split("## ")[0]
    commands = [ln.strip().split("   #")[0].strip() for ln in section.splitlines() if ln.startswith("    ")]
    assert len(commands) == 3
    for command in commands:
        assert f"$ {command}\n" in log, command
    excerpt = section.split("```")[1].strip().splitlines()
    assert len(excerpt) > 5
    for line in excerpt:
        assert line in log, line


@pytest.mark.parametrize("pattern", [r"one compile per tile class and constexpr value the launchers can pick: "
                                     r"(\d+) of them, (\d+) forward and (\d+) backward, plus the (\d+)"])
def test_the_registry_breakdown(pattern):
    from nsa_triton_sel.compat.registry.specs import SPECS

    got = [int(x) for x in re.search(pattern, MATRIX_DOC).groups()]
    capped = [s for s in SPECS if "+cap" in s.name]  # compiled only under a row-cap window
    plain = [s for s in SPECS if "+cap" not in s.name]
    backward = [s for s in plain if "bwd" in s.name]
    assert got == [len(plain), len(plain) - len(backward), len(backward), len(capped)]


def test_ci_runs_the_readmes_test_command_as_written():
    command = next(b.split("\n")[0] for b in TEXT.split("```bash\n")[1:] if "-e \".[test]\"" in b.split("\n")[0])
    assert command in (ROOT / ".ci" / "run").read_text()
