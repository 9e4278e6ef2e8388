"""bench/device/slim_triton.py: wheels -> slim, deduplicated, compressed parts -> one tree per release, on the CPU
with small fake wheels (the real ones are measured in the report, not in CI)."""

from __future__ import annotations

import stat
import zipfile
from pathlib import Path

import pytest

from bench.device import slim_triton as S


def _wheel(folder: Path, version: str, extra: bytes = b"") -> Path:
    path = folder / f"triton-{version}-cp312-cp312-manylinux_2_27_x86_64.whl"
    with zipfile.ZipFile(path, "w") as z:
        def add(name, body, mode=0o644):
            info = zipfile.ZipInfo(name)
            info.external_attr = mode << 16
            z.writestr(info, body)
        add("triton/__init__.py", f"__version__ = {version!r}\n".encode() + extra)
        add("triton/backends/nvidia/bin/ptxas", b"PTXAS" * 1000, 0o755)  # the same in both: stored once
        add("triton/backends/nvidia/bin/nvdisasm", b"x" * 100, 0o755)
        add("triton/backends/amd/compiler.py", b"amd = 1\n")
        add("triton/_C/libproton.so", b"\x7fELFproton")
        add(f"triton-{version}.dist-info/entry_points.txt",
            b"[triton.backends]\namd = triton.backends.amd\nnvidia = triton.backends.nvidia\n")
    return path


def test_pack_and_unpack_round_trip_slim_and_deduplicated(tmp_path):
    wheels = [_wheel(tmp_path, "3.5.1", b"# patch\n"), _wheel(tmp_path, "3.5.0")]
    report = S.pack(wheels, tmp_path / "parts", part_mib=0.0005, preset=1, dict_mib=4)
    parts = sorted((tmp_path / "parts").glob("triton-slim.*.xz"))
    assert report["parts"] == len(parts) > 1 and all(S.PART_RE.search(p.name) for p in parts)
    assert report["unique_bytes"] < sum(r["kept_bytes"] for r in report["releases"].values())  # ptxas once
    done = S.unpack(tmp_path / "parts", tmp_path / "trees")
    assert done == ["3.5.0", "3.5.1"]  # version order, whatever order the wheels were named in
    tree = tmp_path / "trees" / "triton-3.5.1"
    assert (tree / "triton/__init__.py").read_text().endswith("# patch\n")
    ptxas = tree / "triton/backends/nvidia/bin/ptxas"
    assert ptxas.read_bytes() == b"PTXAS" * 1000 and ptxas.stat().st_mode & stat.S_IXUSR
    for gone in ("triton/backends/amd", "triton/_C/libproton.so", "triton/backends/nvidia/bin/nvdisasm"):
        assert not (tree / gone).exists()
    assert "amd" not in (tree / "triton-3.5.1.dist-info/entry_points.txt").read_text()
    assert (tmp_path / "trees" / "triton-3.5.1.ready").exists()
    assert S.unpack(tmp_path / "parts", tmp_path / "trees") == []  # already there: nothing redone


def test_a_missing_part_is_named_and_waited_for_only_with_follow(tmp_path):
    S.pack([_wheel(tmp_path, "3.4.0")], tmp_path / "parts", part_mib=0.0005, preset=1, dict_mib=4,
           )
    last = sorted((tmp_path / "parts").glob("triton-slim.*.xz"))[-1]
    last.rename(tmp_path / last.name)
    with pytest.raises(SystemExit, match=r"part \d{3} not in .*carry it and run unpack again"):
        S.unpack(tmp_path / "parts", tmp_path / "trees", follow=0.5)
    assert not (tmp_path / "trees" / "triton-3.4.0.ready").exists()


def test_bad_input_is_one_line(tmp_path, capsys):
    assert S.main(["pack", str(tmp_path / "nope.whl"), "--out", str(tmp_path)]) == 2
    assert "no such wheel" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="not a triton wheel"):
        S.wheel_version("torch-2.4.1.whl")


# The three shapes of get_ptxas in the NVIDIA backend's compiler.py (3.0-3.6, 3.7-3.8, 3.9).
ONE = "def get_ptxas():\n    return knobs.nvidia.ptxas\n"
V33 = 'def get_ptxas(arch: int):\n    name = "ptxas-blackwell" if arch >= 100 else "ptxas"\n'
UP_TO_38 = ("def get_ptxas(arch: int) -> knobs.NvidiaTool:\n"
            "    return knobs.nvidia.ptxas_blackwell if arch >= 100 else knobs.nvidia.ptxas\n")
FROM_39 = ("def get_ptxas(arch: int) -> knobs.NvidiaTool:\n    if arch < 90:\n        return knobs.nvidia.ptxas\n"
           "    # The ptxas-blackwell name is misleading; keep it until legacy ptxas is removed.\n"
           "    return knobs.nvidia.ptxas_blackwell\n")


def test_the_ptxas_kept_is_the_one_the_release_runs_for_the_arch():
    """Triton 3.9 compiles sm_90 with ptxas-blackwell: a slim tree for the H100 may drop it for 3.1-3.8, but
    without it 3.9's tree cannot compile for the H100, which only the AOT smoke of the slim tree would reveal."""
    assert S.ptxas_for(ONE, 90) == "ptxas"
    assert S.ptxas_for(V33, 90) == "ptxas" and S.ptxas_for(V33, 100) == "ptxas-blackwell"
    assert S.ptxas_for(UP_TO_38, 90) == "ptxas" and S.ptxas_for(UP_TO_38, 100) == "ptxas-blackwell"
    assert S.ptxas_for(FROM_39, 90) == "ptxas-blackwell" and S.ptxas_for(FROM_39, 80) == "ptxas"
    assert S.ptxas_for("ptxas_blackwell somewhere new", 90) is None  # unknown: keep both


def test_a_slim_wheel_drops_only_the_ptxas_its_arch_does_not_run(tmp_path):
    path = tmp_path / "triton-3.9.0-cp312-abi3-manylinux_2_27_x86_64.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("triton/backends/nvidia/compiler.py", FROM_39)
        z.writestr("triton/backends/nvidia/bin/ptxas", b"legacy")
        z.writestr("triton/backends/nvidia/bin/ptxas-blackwell", b"new")
    kept = {p for p, _, _ in S.slim_wheel(path, 90, tmp_path)[0]}
    assert "triton/backends/nvidia/bin/ptxas-blackwell" in kept and "triton/backends/nvidia/bin/ptxas" not in kept
    both = {p for p, _, _ in S.slim_wheel(path, 0, tmp_path)[0]}
    assert {"triton/backends/nvidia/bin/ptxas", "triton/backends/nvidia/bin/ptxas-blackwell"} <= both


def test_resplit_cuts_the_same_stream_to_another_size(tmp_path):
    S.pack([_wheel(tmp_path, "3.5.0"), _wheel(tmp_path, "3.5.1")], tmp_path / "parts", part_mib=0.0005, preset=1,
           dict_mib=4)
    before = b"".join(p.read_bytes() for p in sorted((tmp_path / "parts").glob("triton-slim.*.xz")))
    n = S.resplit(tmp_path / "parts", 0.0002)
    parts = sorted((tmp_path / "parts").glob("triton-slim.*.xz"))
    assert len(parts) == n and all(p.name.endswith(f"-of-{n:03d}.xz") for p in parts)
    assert b"".join(p.read_bytes() for p in parts) == before
    assert S.unpack(tmp_path / "parts", tmp_path / "trees") == ["3.5.0", "3.5.1"]
