"""bench/slim_triton.py: wheels -> slim, deduplicated, compressed parts -> one tree per release, on the CPU
with small fake wheels (the real ones are measured in the report, not in CI)."""

from __future__ import annotations

import stat
import zipfile
from pathlib import Path

import pytest

from bench import slim_triton as S


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
    report = S.pack(wheels, tmp_path / "parts", part_mib=0.0005, preset=1, dict_mib=4, keep_blackwell=False)
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
           keep_blackwell=False)
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
