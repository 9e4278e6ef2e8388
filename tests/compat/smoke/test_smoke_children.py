"""Lane isolation of the compile children, through the real mechanism.

The parent here plays a lane whose interpreter also sees *another* Triton: a directory with a
fake ``triton`` 2.0.0 (and its dist-info, like a site-packages) on the parent's ``sys.path``,
where the noxfile's ``.pth`` once put the invoking environment's site-packages.  The children
must still import the interpreter's own Triton: a ``child_env`` that put that directory on the
children's PYTHONPATH, ahead of their site-packages, would make them import the wrong one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from packaging.version import Version

from nsa_triton_sel.compat import smoke
from nsa_triton_sel.compat.canaries import SPECS as CANARIES
from nsa_triton_sel.compat.smoke import children

FAKE = "2.0.0"


def _real_triton() -> str:
    import triton

    return triton.__version__


@pytest.fixture
def fake_site(tmp_path):
    """A site-packages-like directory providing triton 2.0.0."""
    site = tmp_path / "other-env" / "site-packages"
    (site / "triton").mkdir(parents=True)
    (site / "triton" / "__init__.py").write_text(f"__version__ = {FAKE!r}\n")
    (site / f"triton-{FAKE}.dist-info").mkdir()
    (site / f"triton-{FAKE}.dist-info" / "METADATA").write_text(f"Name: triton\nVersion: {FAKE}\n")
    return site


def _request():
    spec = next(s for s in CANARIES if s.name == "canary/broadcast_store")  # fails fast in the front end
    return spec.request(80)


@pytest.mark.parametrize("where", ["appended", "prepended"])
def test_children_import_their_own_triton_not_another_on_the_parents_path(fake_site, tmp_path, monkeypatch, where):
    """appended: like the noxfile's .pth (after site-packages); prepended: like PYTHONPATH or a runtime insert."""
    if where == "appended":
        monkeypatch.setattr(sys, "path", [*sys.path, str(fake_site)])
    else:
        monkeypatch.syspath_prepend(str(fake_site))
    raw = smoke.run_child(_request(), tmp_path / "work", timeout=300, python=sys.executable)
    assert raw["imported"]["triton"] == _real_triton() != FAKE, raw


def test_the_harness_never_adds_a_site_dir_to_pythonpath(fake_site, tmp_path, monkeypatch):
    plain = tmp_path / "my_specs"
    plain.mkdir()
    monkeypatch.syspath_prepend(str(plain))  # a runtime insert: shared in front
    monkeypatch.syspath_prepend(str(fake_site))  # installed packages inserted at runtime: only after
    monkeypatch.setattr(sys, "path", [*sys.path, str(tmp_path)])  # appended plain dir: after, too
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "callers"))
    env = smoke.child_env(str(tmp_path / "cache"))
    front = env["PYTHONPATH"].split(os.pathsep)
    assert str(plain) in front and front[-1] == str(tmp_path / "callers")  # the caller's own stays, unchanged
    assert not any(children.is_site_dir(p) for p in front)
    shared = env[children.SHARED_PATH_ENV].split(os.pathsep)
    assert str(fake_site) in shared and str(tmp_path) in shared


def test_the_callers_pythonpath_is_passed_unchanged(fake_site, tmp_path, monkeypatch):
    """A Triton the caller puts on PYTHONPATH is what `import triton` gives there: the children get it
    in the same place (a lane's set-up check says whether it is the lane's)."""
    monkeypatch.setenv("PYTHONPATH", str(fake_site))
    env = smoke.child_env(str(tmp_path / "cache"))
    assert env["PYTHONPATH"].split(os.pathsep)[-1] == str(fake_site)
    assert str(fake_site) not in env[children.SHARED_PATH_ENV].split(os.pathsep)


def test_shared_paths_come_after_the_childs_own_site_packages(fake_site, tmp_path):
    env = {**smoke.child_env(str(tmp_path / "cache")), children.SHARED_PATH_ENV: str(fake_site)}
    code = "import json, sys, triton; print(json.dumps([sys.path, triton.__version__]))"
    boot = children.child_command(sys.executable, "runpy")[:3]  # [python, -c, BOOT] runs any module
    script = tmp_path / "show_path.py"
    script.write_text(code)
    out = subprocess.run(boot + ["show_path"], env={**env, "PYTHONPATH": str(tmp_path)}, cwd=tmp_path,
                         capture_output=True, text=True, check=True).stdout
    path, version = json.loads(out.strip().splitlines()[-1])
    site_idx = min(i for i, p in enumerate(path) if p.endswith("site-packages") and p != str(fake_site))
    assert path.index(str(fake_site)) > site_idx
    assert version == _real_triton()


def test_is_site_dir(fake_site, tmp_path):
    assert children.is_site_dir(str(fake_site))
    numpy_only = tmp_path / "x"
    (numpy_only / "numpy").mkdir(parents=True)
    assert children.is_site_dir(str(numpy_only))
    assert not children.is_site_dir(str(tmp_path / "nothing"))
    assert not children.is_site_dir(str(children.package_home()) + "/nsa_triton_sel")


def test_children_never_run_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    env = smoke.child_env("/tmp/x")
    assert "TRITON_INTERPRET" not in env and env["TRITON_CACHE_DIR"] == "/tmp/x"
    assert env["TRITON_DEFAULT_FP_FUSION"] == os.environ.get("TRITON_DEFAULT_FP_FUSION", "1")


@pytest.mark.skipif(Version(_real_triton()) < Version("3.9"), reason="needs a Triton without block pointers")
def test_a_run_for_another_triton_fails_loudly_and_judges_canaries_by_the_declared_release(capsys):
    """Started for 3.1.0 while the children import this Triton (>= 3.9): exit 4, and the block-pointer
    canary is judged for 3.1.0 (expected ok), so the leak cannot pass for the lane's own Triton."""
    block_ptr = next(s for s in CANARIES if s.name == "canary/block_ptr")
    report = smoke.run_smoke([block_ptr], archs=(80,), jobs=1, timeout=300, progress=False, expect_triton="3.1.0")
    assert report.wrong_triton == [_real_triton()] and report.exit_code == 4
    assert report.results[0].expected == ["ok"] and report.results[0].as_expected is False
    from nsa_triton_sel.compat.smoke.render import render

    render(report)
    out = capsys.readouterr().out
    assert "EXPECTED 3.1.0" in out and f"imported triton {_real_triton()}, not 3.1.0" in out
