"""The ``nsa-sel`` command line on damaged files and bad arguments: :mod:`cli_fuzz_cases`'s table,
run by :mod:`cli_fuzz`.

Each case is a process of its own under a timeout: no hang, an exit status its command documents, no
traceback, exit 2 as exactly one stderr line, nothing written outside what the command may write (and
nothing at all on exit 2).  The suite runs :func:`cli_fuzz_cases.sample` (about 700 invocations, within 3 minutes
on a 2-core box); ``NSA_SEL_CLI_FUZZ=all`` runs every case (about 1,050), as does
``python -m tests.compat.commands.cli_fuzz --all``.
"""

from __future__ import annotations

import os

import pytest

import cli_fuzz as FZ
import cli_fuzz_cases as T

CASES = T.all_cases() if os.environ.get("NSA_SEL_CLI_FUZZ") == "all" else T.sample()


@pytest.fixture(scope="module")
def project():
    FZ.prepare()  # imports and the fingerprint once, before the forks
    base = FZ.scratch_dir()
    template = FZ.build_template(base / "template")
    state = {"template": template, "work": base / "work", "before": FZ.snapshot(template)}
    yield state
    FZ._force_rmtree(base)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(project, case):
    got = FZ.run_case(case, project["template"], project["work"])
    bad = FZ.problems(case, got)
    assert not bad, f"{'; '.join(bad)}\nargv: {case.argv}\nexit {got.rc}\nstderr:\n{got.err[-3000:]}"


def test_the_template_came_through_unchanged(project):
    """The cases' files are hard links to the template's: a command that wrote through one would corrupt the
    cases after it (every write must replace a file, never modify it in place)."""
    assert FZ.snapshot(project["template"]) == project["before"]


def test_the_sample_covers_every_command_and_kind_of_damage():
    names = " ".join(c.name for c in CASES)
    assert len(CASES) >= 480
    for command in ("doctor", "pin", "releases", "check-upgrade", "smoke", "matrix"):
        assert f"{command}:" in names
    for kind in T.GENERIC:
        assert f":{kind}" in names
