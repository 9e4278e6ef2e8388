"""The lanes table: parsing, ordering with packaging, derived constraint files in sync."""

from __future__ import annotations

import re
import textwrap

import pytest
from packaging.version import Version

from nsa_triton_sel.compat.core import lane_table, machine

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
    return lane_table.load_table(path)


def test_committed_table_has_ten_lanes_in_version_order():
    table = lane_table.load_table()
    assert table.labels == ["3.0", "3.1", "3.2", "3.3", "3.4", "3.5", "3.6", "3.7", "3.8", "3.9"]
    assert [lane.triton for lane in table.lanes][3::2] == ["3.3.1", "3.5.1", "3.7.1", "3.9.0"]
    assert set(table.required) == {"compile", "parity", "backward"}


def test_committed_constraint_files_match_the_table():
    """The checked-in triton-X.txt are exactly what the table derives (run `nox -s constraints`)."""
    assert lane_table.stale_constraints(lane_table.load_table()) == []


def test_versions_sort_numerically_not_as_strings(tmp_path):
    table = _table(tmp_path, ("3.10", "3.10.0"), ("3.9", "3.9.0"), ("3.2", "3.2.0"))
    assert table.labels == ["3.2", "3.9", "3.10"]
    assert table.newest().label == "3.10"
    assert Version("3.10.0") > Version("3.9.0")  # what a string comparison gets wrong
    assert "3.10.0" < "3.9.0"


def test_for_version_matches_exact_release_only():
    table = lane_table.load_table()
    assert table.for_version("3.5.1").label == "3.5" and not table.for_version("3.5.1").patch
    assert table.for_version("3.5.0").patch and table.for_version("3.5.0").name == "3.5.0"
    assert table.for_version("3.5.2") is None and table.for_version("3.10.0") is None


def test_every_triton_3_release_on_pypi_is_a_release_of_the_table():
    """3.3.0, 3.5.0 and 3.7.0 (the Triton of torch 2.7.0, 2.9.0, 2.12.0) are checked as patch releases."""
    table = lane_table.load_table()
    assert [r.triton for r in table.releases] == ["3.0.0", "3.1.0", "3.2.0", "3.3.0", "3.3.1", "3.4.0", "3.5.0",
                                                  "3.5.1", "3.6.0", "3.7.0", "3.7.1", "3.8.0", "3.9.0"]
    pins = {r.triton: r.torch for r in table.patches}
    assert pins == {"3.3.0": ("2.7.0",), "3.5.0": ("2.9.0",), "3.7.0": ("2.12.0",)}
    patch = table.for_version("3.5.0")
    assert (patch.numpy, patch.python, patch.label) == (table.lane("3.5").numpy, table.lane("3.5").python, "3.5")


def test_label_must_be_the_minor_of_the_release(tmp_path):
    with pytest.raises(ValueError, match="label must be the minor"):
        _table(tmp_path, ("3.4", "3.5.1"))


@pytest.mark.parametrize("matrix, expect", [
    ('required = ["compile", "parit"]', "`required` has unknown check(s) ['parit']; accepted: compile, parity, bench, backward"),
    ('archs = ["eighty"]', "`archs` must be a non-empty list of compute capabilities"),
    ("archs = []", "`archs` must be a non-empty list"),
    ('other_releases = ["3.3.0"]', "unknown field(s) ['other_releases']"),
])
def test_bad_matrix_fields_are_rejected_at_load_naming_the_field(tmp_path, matrix, expect):
    with pytest.raises(lane_table.TableError, match="\\[matrix\\]") as exc:
        _table(tmp_path, ("3.5", "3.5.1"), header=f"schema = 1\n[matrix]\n{matrix}\n")
    assert expect in str(exc.value)


def test_a_table_with_no_lanes_is_a_clear_error(tmp_path):
    with pytest.raises(lane_table.TableError, match="no \\[\\[lane\\]\\] rows: the table needs at least one lane"):
        _table(tmp_path)


@pytest.mark.parametrize("row, expect", [
    ('label = "3.5"\ntriton = "3.5.1"\ntorch = ["2.9.1"]\npython = ">=3.10"\nnumpi = "<2.4"\n', "unknown field(s) ['numpi']"),
    ('label = "3.5"\ntriton = "3.5.1"\ntorch = ["2.9.1"]\npython = "3.10+"\n', "`python` = '3.10+' does not parse"),
    ('label = "3.5"\ntriton = "three"\ntorch = ["2.9.1"]\npython = ">=3.10"\n', "`triton` = 'three' does not parse"),
    ('label = "3.5"\ntriton = "3.5.1"\ntorch = 2.9\npython = ">=3.10"\n', "`torch` must be a string or a list"),
    ('label = "3.5"\ntriton = "3.5.1"\ntorch = ["2.9.1"]\npython = ">=3.10"\n[[lane.patch]]\ntriton = "3.6.0"\n'
     'torch = ["2.10.0"]\n', "a patch must be another release of the lane's minor 3.5"),
])
def test_bad_lane_rows_name_the_lane_and_field(tmp_path, row, expect):
    path = tmp_path / "lanes.toml"
    path.write_text("schema = 1\n[[lane]]\n" + row)
    with pytest.raises(lane_table.TableError) as exc:
        lane_table.load_table(path)
    assert expect in str(exc.value) and "[[lane]] '3.5'" in str(exc.value)


def test_duplicate_labels_and_wrong_schema_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="duplicate"):
        _table(tmp_path, ("3.5", "3.5.1"), ("3.5", "3.5.0"))
    with pytest.raises(ValueError, match="schema"):
        _table(tmp_path, ("3.5", "3.5.1"), header="schema = 2\n")


def test_numpy_caps_follow_the_interpreter_facts():
    """3.0/3.1 need numpy 1.x (silently wrong with 2.x); 3.2-3.6 need <2.4; 3.7+ no cap."""
    table = lane_table.load_table()
    from packaging.specifiers import SpecifierSet

    def admits(label, v):
        return Version(v) in SpecifierSet(table.lane(label).numpy)

    assert not admits("3.1", "2.0.0") and admits("3.1", "1.26.4")
    assert not admits("3.6", "2.4.6") and admits("3.6", "2.3.5")
    assert admits("3.7", "2.4.6")


def test_setuptools_extra_exactly_where_something_imports_it_undeclared():
    """3.0-3.2: Triton imports it; 3.5: torch 2.9.0 (the 3.5.0 patch's pair) compiles Dynamo's shape guards
    through torch.utils.cpp_extension on Python < 3.12 (its paired lane failed without it, 2026-11-26)."""
    table = lane_table.load_table()
    with_setuptools = {lane.label: lane.extras_reason for lane in table.lanes if any("setuptools" in e for e in lane.extras)}
    assert sorted(with_setuptools) == ["3.0", "3.1", "3.2", "3.5"]
    assert "torch 2.9.0" in with_setuptools["3.5"] and all("triton 3.0-3.2" in with_setuptools[x] for x in ("3.0", "3.1", "3.2"))


def test_constraints_text_pins_exact_triton_and_paired_torch():
    lane = lane_table.load_table().lane("3.6")
    text = lane_table.constraints_text(lane)
    assert "triton==3.6.0\n" in text
    assert "torch==2.10.0" in text and "2.11.0" in text
    assert "numpy<2.4" in text


def test_paired_torch_needs_a_cuda_build_of_a_listed_release():
    lane = lane_table.load_table().lane("3.6")
    assert lane.torch_is_paired("2.11.0+cu130", "13.0")
    assert lane.torch_is_paired("2.10.0", "12.8")
    assert not lane.torch_is_paired("2.13.0+cpu", None)  # CPU build: no Triton pin at all
    assert not lane.torch_is_paired("2.9.1", "12.8")


def test_python_range():
    table = lane_table.load_table()
    assert table.lane("3.9").python_ok("3.11.7")
    assert not table.lane("3.9").python_ok("3.10.12")
    assert not table.lane("3.0").python_ok("3.13.0")


def test_candidate_lane_follows_the_rules_of_the_lanes_around_it():
    table = lane_table.load_table()
    newer = lane_table.candidate_lane("3.10.0", table)
    assert newer.label == "3.10" and newer.candidate and newer.name == "candidate"
    assert newer.numpy == table.newest().numpy and "lane 3.9 (the nearest below)" in newer.numpy_reason
    assert not newer.torch_is_paired("2.15.0", "13.2") and newer.torch == ()
    patch = lane_table.candidate_lane("3.4.1", table)  # not on PyPI: a made-up patch of lane 3.4
    assert patch.numpy == "<2.4" and "lane 3.4 (same minor)" in patch.numpy_reason  # not the newest lane's numpy
    listed = lane_table.candidate_lane("3.5.0", table)  # already a release of the table: its own row
    assert listed.torch == ("2.9.0",) and listed.numpy == "<2.4" and listed.candidate
    old = lane_table.candidate_lane("3.1.1", table)
    assert old.numpy == "<2" and old.extras == table.lane("3.1").extras


def test_write_constraints_rewrites_only_stale_files(tmp_path):
    table = lane_table.load_table()
    assert len(lane_table.write_constraints(table, tmp_path)) == len(table.lanes)
    (tmp_path / "triton-3.4.txt").write_text(textwrap.dedent("triton==3.4.1\n"))
    assert [p.name for p in lane_table.stale_constraints(table, tmp_path)] == ["triton-3.4.txt"]
    assert [p.name for p in lane_table.write_constraints(table, tmp_path)] == ["triton-3.4.txt"]
    assert lane_table.stale_constraints(table, tmp_path) == []


def _fake_smi(tmp_path, monkeypatch, out: str, rc: int = 0):
    """An nvidia-smi on PATH that prints ``out`` and records its arguments."""
    exe = tmp_path / "bin" / "nvidia-smi"
    exe.parent.mkdir(exist_ok=True)
    exe.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path / 'args'}\nprintf '%s' '{out}'\nexit {rc}\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(exe.parent))
    for name in ("NSA_SEL_GPU", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "args"


def test_gpu_archs_reads_nvidia_smi_without_torch(tmp_path, monkeypatch):
    args = _fake_smi(tmp_path, monkeypatch, "9.0, NVIDIA H100 80GB HBM3\n8.6, NVIDIA RTX A6000\n")
    assert machine.gpu_archs() == [(90, "NVIDIA H100 80GB HBM3"), (86, "NVIDIA RTX A6000")]
    assert "--query-gpu=compute_cap,name" in args.read_text() and "-i" not in args.read_text()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    machine.gpu_archs()
    assert args.read_text().split()[-2:] == ["-i", "1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # set and empty: CUDA sees no device
    assert machine.gpu_archs() == []
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setenv("NSA_SEL_GPU", "0")  # the CPU flavour, forced
    assert machine.gpu_archs() == []


def test_gpu_archs_is_empty_without_a_usable_nvidia_smi(tmp_path, monkeypatch):
    _fake_smi(tmp_path, monkeypatch, "[N/A], Old driver GPU\n")  # a driver without compute_cap
    assert machine.gpu_archs() == []
    _fake_smi(tmp_path, monkeypatch, "NVIDIA-SMI has failed\n", rc=9)
    assert machine.gpu_archs() == []
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert machine.gpu_archs() == []


def test_compile_archs_this_gpu_else_the_default_all_on_request():
    table = lane_table.load_table()
    none = machine.compile_archs(table, None, gpus=[])
    assert none.archs == machine.NO_GPU_ARCHS and set(none.rest) == set(table.archs) - set(machine.NO_GPU_ARCHS)
    h100 = machine.compile_archs(table, "", gpus=[(90, "NVIDIA H100 80GB HBM3")])
    assert h100.archs == (90,) and "NVIDIA H100 80GB HBM3 (sm_90)" in h100.why and h100.label == "sm_90"
    every = machine.compile_archs(table, "ALL", gpus=[(90, "H100")])
    assert every.archs == table.archs and every.rest == ()
    assert machine.compile_archs(table, "sm_120, 80", gpus=[]).archs == (80, 120)
    with pytest.raises(ValueError, match=r"^NSA_SEL_ARCHS: bad arch 'ampere': .* or 'all'"):
        machine.compile_archs(table, "ampere", what="NSA_SEL_ARCHS")


def test_the_newest_lane_is_printed_from_the_table(capsys):
    """.ci/run and the README read the main job's lane from here, never a hard-coded "3.9"."""
    assert lane_table.main(["--newest"]) == 0
    assert capsys.readouterr().out == lane_table.load_table().newest().name + "\n"
    assert lane_table.main(["--oldest"]) == 0
    assert capsys.readouterr().out == lane_table.load_table().lanes[0].name + "\n"


def test_ci_reads_its_lane_from_the_table():
    """.ci/run names no lane: it runs the oldest lane of lanes.toml as the main job runs a lane (sm_90 on a GPU-less
    box; the tests it runs first cover the newest Triton), and the compat workflow runs every lane with every arch."""
    from nsa_triton_sel.compat.core import project

    root = project.project_root()
    ci = (root / ".ci" / "run").read_text()
    assert "lane_table --oldest" in ci and "--all-archs" not in ci.split("nox -s")[1]
    assert "NSA_SEL_ARCHS: all" in (root / ".github" / "workflows" / "compat.yml").read_text()
    assert not re.search(r"(compile|parity)-3\.\d", ci)
