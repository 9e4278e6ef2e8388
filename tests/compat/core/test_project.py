"""Finding the project's constraints directory from the cwd or an option, never from __file__."""

from __future__ import annotations

import pytest

from nsa_triton_sel.compat.core import project


def _project(tmp_path):
    (tmp_path / "constraints").mkdir()
    (tmp_path / "constraints" / "lanes.toml").write_text("schema = 1\n")
    (tmp_path / "a" / "b").mkdir(parents=True)
    return tmp_path


def test_found_from_the_cwd_or_a_parent(tmp_path, monkeypatch):
    root = _project(tmp_path)
    monkeypatch.delenv(project.ENV_CONSTRAINTS, raising=False)
    monkeypatch.chdir(root / "a" / "b")
    assert project.constraints_dir() == (root / "constraints").resolve()
    assert project.project_root() == root.resolve()


def test_option_and_env_var_win(tmp_path, monkeypatch):
    root = _project(tmp_path)
    monkeypatch.chdir(tmp_path.parent)
    assert project.constraints_dir(root / "constraints") == root / "constraints"
    monkeypatch.setenv(project.ENV_CONSTRAINTS, str(root / "constraints"))
    assert project.constraints_dir() == root / "constraints"
    monkeypatch.setenv(project.ENV_CONSTRAINTS, str(root))
    with pytest.raises(project.ProjectNotFound, match="NSA_SEL_CONSTRAINTS = .*: no lanes.toml there"):
        project.constraints_dir()


def test_outside_any_project_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv(project.ENV_CONSTRAINTS, raising=False)
    monkeypatch.delenv(project.ENV_RESULTS, raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(project.ProjectNotFound, match="run from the project checkout, or set NSA_SEL_CONSTRAINTS"):
        project.constraints_dir()
    with pytest.raises(project.ProjectNotFound, match="pass --results DIR or set \\$NSA_SEL_RESULTS"):
        project.results_dir()
    assert project.results_dir(tmp_path / "r") == tmp_path / "r"
    assert project.relative_to_project("/x/y.py") == "/x/y.py"


def test_results_default_to_the_projects_out_dir(tmp_path, monkeypatch):
    root = _project(tmp_path)
    monkeypatch.delenv(project.ENV_RESULTS, raising=False)
    monkeypatch.delenv(project.ENV_CONSTRAINTS, raising=False)
    monkeypatch.chdir(root / "a")
    assert project.results_dir() == root.resolve() / "out" / "lanes"
    assert project.relative_to_project(str(root.resolve() / "tests" / "x.py")) == "tests/x.py"
