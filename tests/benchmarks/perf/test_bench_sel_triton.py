"""CPU tests of the seeds' sweep script: arguments, and one tiny end-to-end ``--dry-run`` sweep (interpreter, modelled clock)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench.common import csvio
from bench.perf import bench_sel_triton as B

ROOT = Path(__file__).resolve().parents[3]


def test_seed_interface_defaults_and_lists():
    a = B.parse_args(["--N", "64,1024", "--H", "4,8", "--D", "64,128", "--Dv", "64", "--L_list", "16,32",
                      "--dist", "few,many", "--iters", "7", "--warmup", "2", "--streams", "1,2", "--csv", "x.csv"])
    assert a.Ns == [64, 1024] and a.Hs == [4, 8] and a.Ls == [16, 32]
    assert a.dims == [(64, 64), (128, 64)]  # --D x --Dv product
    assert a.dists == ["few", "many"] and a.streams == [1, 2] and (a.iters, a.warmup) == (7, 2)
    assert B.parse_args(["--D", "128"]).dims == [(128, 128)]  # Dv defaults to D
    assert B.parse_args(["--dims", "64:64,128:64"]).dims == [(64, 64), (128, 64)]
    d = B.parse_args(["--decode", "1", "--L_list", "128,256"])
    assert d.decode and d.dists == ["decode"]
    assert B.parse_args(["--decode"]).decode  # bare flag works too


@pytest.mark.parametrize("argv, needle", [
    (["--dist", "few,sparse"], "--dist accepts few, many, mixed"),
    (["--N", "64,abc"], "--N must be a comma-separated list of positive integers"),
    (["--L_list", "0,16"], "--L_list must be"),
    (["--dims", "64-64"], "--dims takes Dk:Dv pairs"),
    (["--decode", "1", "--L_list", "100"], "multiple of --l_sel=64"),
    (["--T", "32", "--L_list", "64"], "--T=32 is shorter than the largest L=64"),
    (["--iters", "0"], "--iters must be >= 1"),
    (["--D", "512"], "head dims up to 256"),
])
def test_bad_arguments_exit_2_and_say_what_is_accepted(argv, needle, capsys):
    with pytest.raises(SystemExit) as exc:
        B.parse_args(argv)
    assert exc.value.code == 2
    assert needle in capsys.readouterr().err


def test_without_cuda_the_benchmark_refuses_unless_dry_run(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert B.main(["--N", "4"]) == 2
    err = capsys.readouterr().err
    assert "CUDA is not available" in err and "--dry-run" in err


def test_csv_path_template():
    assert B.csv_path("out/sel_{mode}.csv", "varlen") == "out/sel_varlen.csv"
    assert B.csv_path("all.csv", "dense") == "all.csv"
    assert B.csv_path(None, "dense") is None


@pytest.mark.slow
def test_dry_run_sweep_writes_one_csv_per_mode(tmp_path):
    """The real sweep code on the CPU: interpreter kernels, oracle MAE, modelled clock."""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "bench.perf.bench_sel_triton", "--dry-run", "--N", "3", "--H", "2",
           "--dims", "32:16", "--L_list", "16,32,128", "--dist", "few,many,mixed", "--mae-rows", "2",
           "--csv", str(tmp_path / "sel_{mode}.csv")]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "[9/9" in res.stderr  # progress lines
    dense = csvio.read_csv([tmp_path / "sel_dense.csv"])
    varlen = csvio.read_csv([tmp_path / "sel_varlen.csv"])
    assert len(dense) == 3 and len(varlen) == 6
    assert {r["dist"] for r in varlen} == {"many", "mixed"}
    for r in dense + varlen:
        assert r["status"] == "ok" and r["suspect"] == "" and r["timer"] == "model"
        assert float(r["mae"]) < 1e-2 and float(r["ref_mae"]) < 1e-2
        assert float(r["tri_gbs"]) > 0 and r["gpu"] and r["triton"]
    assert all(r["tri_packed_ms"] and r["ref_gather_ms"] for r in varlen)
    assert res.stdout.splitlines()[0].startswith("dense,N=3,H=2,D=32,Dv=16,L=16,streams=1, tri_ms=")
