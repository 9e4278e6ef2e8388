"""A non-editable install works outside the checkout: the known-bad guard finds its packaged data and
``nsa-sel smoke --arch 90 --jobs 2`` runs with the project's own registry and the shipped canaries.

Slow (a fresh venv, a wheel build, one smoke run of four variants and the canaries).  torch is not
installed in that venv (the smoke and the guard never import it), so the test never downloads a
multi-gigabyte build; ``import nsa_triton_sel`` with torch is checked by hand (the helper report quotes it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from nsa_triton_sel.compat.core import project

pytestmark = pytest.mark.slow


def _run(cmd, **kw):
    res = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert res.returncode == 0, f"{cmd}\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
    return res


def test_wheel_install_runs_the_guard_and_the_smoke_outside_the_checkout(tmp_path):
    import triton

    venv, away = tmp_path / "venv", tmp_path / "elsewhere"
    away.mkdir()
    _run([sys.executable, "-m", "venv", str(venv)])
    py = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NSA_SEL_CONSTRAINTS", "VIRTUAL_ENV")}
    pip = [py, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    _run(pip + ["--no-deps", str(project.project_root())], env=env)
    _run(pip + ["packaging>=23", "rich>=13", "filelock>=3.12", f"triton=={triton.__version__}"], env=env)
    check = ("import nsa_triton_sel.known_bad as kb, nsa_triton_sel.compat.canaries as c; "
             "print(kb.default_path(), len(kb.load()), kb.__file__, len(c.SPECS))")
    out = _run([py, "-c", check], cwd=away, env=env).stdout.split()
    assert "site-packages" in out[0] and out[0].endswith("data/known_bad.toml") and int(out[1]) >= 1
    assert "site-packages" in out[2] and int(out[3]) == 4
    report = away / "smoke.json"
    # a slice of the installed registry, read by the installed package (the compile lanes compile all of it)
    specs = away / "registry_slice.py"
    specs.write_text("from nsa_triton_sel.compat.registry.specs import SPECS as REGISTRY\nSPECS = list(REGISTRY)[:4]\n")
    res = subprocess.run([str(venv / "bin" / "nsa-sel"), "smoke", "--arch", "90", "--jobs", "2", "--canaries",
                          "--specs", f"{specs}:SPECS", "--no-progress", "--json", str(report),
                          "--expect-triton", triton.__version__],
                         cwd=away, env=env, capture_output=True, text=True, timeout=1200)
    assert res.returncode in (0, 1), res.stderr[-3000:]  # 1: a variant is not ok (a kernel problem, not ours)
    assert "Traceback" not in res.stderr
    data = json.loads(report.read_text())
    assert data["imported_tritons"] == [triton.__version__]
    assert len([r for r in data["results"] if not r["canary"]]) >= 3
    assert all(r["as_expected"] for r in data["results"] if r["canary"])
    assert "site-packages" in data["executable"] or str(venv) in data["executable"]
