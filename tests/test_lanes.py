"""The lanes table: parsing, ordering with packaging, derived constraint files in sync."""

from __future__ import annotations

import textwrap

import pytest
from packaging.version import Version

from nsa_triton_sel.compat import lanes

LANE = """
[[lane]]
label = "{label}"
triton = "{triton}"
torch = ["2.9.1"]
python = ">=3.10"
numpy = "<2.4"
"""


def _table(tmp_path, *rows, header="schema = 1\n"):
    path = tmp_path / "lanes.toml"
    path.write_text(header + "".join(LANE.format(label=l, triton=t) for l, t in rows))
    return lanes.load_table(path)


def test_committed_table_has_ten_lanes_in_version_order():
    table = lanes.load_table()
    assert table.labels == ["3.0", "3.1", "3.2", "3.3", "3.4", "3.5", "3.6", "3.7", "3.8", "3.9"]
    assert [lane.triton for lane in table.lanes][3::2] == ["3.3.1", "3.5.1", "3.7.1", "3.9.0"]
    assert set(table.required) == {"compile", "parity"}


def test_committed_constraint_files_match_the_table():
    """The checked-in triton-X.txt are exactly what the table derives (run `nox -s constraints`)."""
    assert lanes.stale_constraints(lanes.load_table()) == []


def test_versions_sort_numerically_not_as_strings(tmp_path):
    table = _table(tmp_path, ("3.10", "3.10.0"), ("3.9", "3.9.0"), ("3.2", "3.2.0"))
    assert table.labels == ["3.2", "3.9", "3.10"]
    assert table.newest().label == "3.10"
    assert Version("3.10.0") > Version("3.9.0")  # what a string comparison gets wrong
    assert "3.10.0" < "3.9.0"


def test_for_version_matches_exact_release_only():
    table = lanes.load_table()
    assert table.for_version("3.5.1").label == "3.5"
    assert table.for_version("3.5.0") is None  # not the tested release of lane 3.5
    assert table.for_version("3.10.0") is None


def test_label_must_be_the_minor_of_the_release(tmp_path):
    with pytest.raises(ValueError, match="label must be the minor"):
        _table(tmp_path, ("3.4", "3.5.1"))


def test_duplicate_labels_and_wrong_schema_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="duplicate"):
        _table(tmp_path, ("3.5", "3.5.1"), ("3.5", "3.5.0"))
    with pytest.raises(ValueError, match="schema"):
        _table(tmp_path, ("3.5", "3.5.1"), header="schema = 2\n")


def test_numpy_caps_follow_the_interpreter_facts():
    """3.0/3.1 need numpy 1.x (silently wrong with 2.x); 3.2-3.6 need <2.4; 3.7+ no cap."""
    table = lanes.load_table()
    from packaging.specifiers import SpecifierSet

    def admits(label, v):
        return Version(v) in SpecifierSet(table.lane(label).numpy)

    assert not admits("3.1", "2.0.0") and admits("3.1", "1.26.4")
    assert not admits("3.6", "2.4.6") and admits("3.6", "2.3.5")
    assert admits("3.7", "2.4.6")


def test_setuptools_extra_exactly_for_3_0_to_3_2():
    table = lanes.load_table()
    with_setuptools = [lane.label for lane in table.lanes if any("setuptools" in e for e in lane.extras)]
    assert with_setuptools == ["3.0", "3.1", "3.2"]


def test_constraints_text_pins_exact_triton_and_paired_torch():
    lane = lanes.load_table().lane("3.6")
    text = lanes.constraints_text(lane)
    assert "triton==3.6.0\n" in text
    assert "torch==2.10.0" in text and "2.11.0" in text
    assert "numpy<2.4" in text


def test_paired_torch_needs_a_cuda_build_of_a_listed_release():
    lane = lanes.load_table().lane("3.6")
    assert lane.torch_is_paired("2.11.0+cu130", "13.0")
    assert lane.torch_is_paired("2.10.0", "12.8")
    assert not lane.torch_is_paired("2.13.0+cpu", None)  # CPU build: no Triton pin at all
    assert not lane.torch_is_paired("2.9.1", "12.8")


def test_python_range():
    table = lanes.load_table()
    assert table.lane("3.9").python_ok("3.11.7")
    assert not table.lane("3.9").python_ok("3.10.12")
    assert not table.lane("3.0").python_ok("3.13.0")


def test_candidate_lane_inherits_newest_numpy_and_is_never_paired():
    table = lanes.load_table()
    cand = lanes.candidate_lane("3.10.0", table)
    assert cand.label == "3.10" and cand.candidate
    assert cand.numpy == table.newest().numpy
    assert not cand.torch_is_paired("2.15.0", "13.2")


def test_write_constraints_rewrites_only_stale_files(tmp_path):
    table = lanes.load_table()
    assert len(lanes.write_constraints(table, tmp_path)) == len(table.lanes)
    (tmp_path / "triton-3.4.txt").write_text(textwrap.dedent("triton==3.4.1\n"))
    assert [p.name for p in lanes.stale_constraints(table, tmp_path)] == ["triton-3.4.txt"]
    assert [p.name for p in lanes.write_constraints(table, tmp_path)] == ["triton-3.4.txt"]
    assert lanes.stale_constraints(table, tmp_path) == []


def _nox_sessions(env_extra: dict | None = None) -> dict:
    """The noxfile's registered sessions, loaded in a child (registration is global state)."""
    import json
    import os
    import subprocess
    import sys

    pytest.importorskip("nox")
    code = ("import json, runpy, nox.registry; runpy.run_path('noxfile.py'); "
            "print(json.dumps({n: {'requires': f.requires, 'tags': f.tags, 'doc': f.__doc__, "
            "'backend': f.venv_backend} for n, f in nox.registry.get().items()}))")
    env = {**os.environ, "NSA_SEL_GPU": "0", **(env_extra or {})}
    out = subprocess.run([sys.executable, "-c", code], cwd=lanes.repo_root(), env=env, capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_noxfile_generates_three_literal_sessions_per_lane():
    sessions = _nox_sessions()
    for label in lanes.load_table().labels:
        for kind in ("compile", "parity", "bench"):
            s = sessions[f"{kind}-{label}"]
            assert s["tags"] == [kind, f"triton-{label}"]
            assert (s["requires"] or None) == (None if kind == "compile" else [f"compile-{label}"])
            assert f"triton {lanes.load_table().lane(label).triton} " in s["doc"]
    assert sessions["bench-3.1"]["backend"] == "none"  # CPU machine: bench only records a skip
    assert {"pin", "constraints", "check-upgrade"} <= set(sessions)


def test_noxfile_adds_candidate_lane_only_when_asked():
    assert not any(n.endswith("-candidate") for n in _nox_sessions())
    sessions = _nox_sessions({"NSA_SEL_CANDIDATE": "3.10.0"})
    assert sessions["parity-candidate"]["requires"] == ["compile-candidate"]
    assert "triton 3.10.0 " in sessions["compile-candidate"]["doc"]
