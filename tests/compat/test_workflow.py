"""The CI workflow: a pinned CPU torch, a pin job that opens a pull request, a nightly
release watcher that opens an issue.  Text checks: the test environment has no YAML parser."""

from __future__ import annotations

import re

from nsa_triton_sel.compat.core import project

WORKFLOW = (project.project_root() / ".github" / "workflows" / "compat.yml").read_text()


def _job(name: str) -> str:
    """The text of one job (from its key to the next job's key)."""
    jobs = WORKFLOW[WORKFLOW.index("\njobs:\n"):]
    match = re.search(rf"\n  {re.escape(name)}:\n(.*?)(?=\n  [a-z-]+:\n|\Z)", jobs, re.S)
    assert match, f"no job {name!r}"
    return match.group(1)


def test_every_torch_install_is_pinned():
    assert re.search(r'CPU_TORCH: "torch==\d+\.\d+\.\d+"', WORKFLOW)
    for line in WORKFLOW.splitlines():
        if "pip install" in line and "torch" in line:
            assert '"$CPU_TORCH"' in line, line


def test_the_pin_job_opens_a_pull_request_outside_pull_requests():
    pin = _job("pin")
    assert "peter-evans/create-pull-request@" in pin and "if: github.event_name != 'pull_request'" in pin
    assert "pull-requests: write" in pin and "constraints/known-good.txt" in pin


def test_the_release_watcher_runs_nightly_and_opens_an_issue():
    job = _job("releases")
    assert "github.event_name == 'schedule'" in job and "releases --json releases.json --fail-on-new" in job
    assert "gh issue create" in job and "issues: write" in job


def test_ci_lanes_and_check_upgrade_compile_every_arch(monkeypatch, tmp_path):
    """A lane compiles for this machine's GPU (else sm_90) unless asked: CI's lanes and check-upgrade, whose
    verdicts speak for every arch of lanes.toml, ask for all of them."""
    for job in ("cpu", "gpu"):
        assert "NSA_SEL_ARCHS: all" in _job(job), job
    from nsa_triton_sel.compat.commands import upgrade

    seen = {}
    monkeypatch.setattr(upgrade.subprocess, "call", lambda cmd, env: seen.setdefault("cmd", cmd) and 0)
    upgrade.run_candidate("3.10.0", tmp_path, project.project_root(), gpu=False)
    assert seen["cmd"][-1] == "--all-archs" and "compile-candidate" in seen["cmd"]
