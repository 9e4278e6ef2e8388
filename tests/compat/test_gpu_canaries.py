"""GPU canaries: their kernels' arithmetic under the interpreter, and the child-process runner's verdicts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import ledger_factory as F
from nsa_triton_sel.compat.canaries import gpu

HERE = Path(__file__).resolve().parent
CHILD_ENV = {"PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
             gpu.DEVICE_ENV: "cpu", "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}


def _fake(name: str) -> gpu.GpuCanary:
    return gpu.GpuCanary(name, f"gpu_canary_fakes:{name}", "a test double")


@pytest.mark.interp
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="runs the kernels under the interpreter")
@pytest.mark.parametrize("canary", gpu.CANARIES, ids=lambda c: c.name)
def test_each_canary_kernel_matches_its_float64_reference_under_the_interpreter(canary):
    import importlib

    module, _, fn = canary.target.partition(":")
    res = getattr(importlib.import_module(module), fn)("cpu")
    assert res["max_err"] <= res["tol"], res


@pytest.mark.parametrize("name, verdict, words", [
    ("abort", "crash", "the child died"),  # an illegal memory access: the parent survives, the canary fired
    ("wrong", "fail", "FIRED"),
    ("nan", "fail", "FIRED"),
    ("raises", "error", "PassManager::run failed"),
])
def test_the_runner_turns_each_outcome_into_a_verdict(name, verdict, words):
    res = gpu.run_one(_fake(name), timeout_s=60, env=CHILD_ENV)
    assert res["verdict"] == verdict and words in res["message"], res


def test_a_hung_canary_is_a_timeout():
    res = gpu.run_one(_fake("hang"), timeout_s=3, env=CHILD_ENV)
    assert res["verdict"] == "timeout"


def test_without_cuda_a_canary_is_skipped_with_the_reason():
    env = {k: v for k, v in CHILD_ENV.items() if k != gpu.DEVICE_ENV}
    env["CUDA_VISIBLE_DEVICES"] = ""
    res = gpu.run_one(gpu.CANARIES[0], timeout_s=60, env={**env, gpu.DEVICE_ENV: ""})
    assert res["verdict"] == "skip" and "no CUDA device" in res["message"]


def test_results_become_gpu_canary_records():
    base = F.base("3.9", "parity", mode="gpu")
    recs = gpu.records([{"name": "odd_k_tail", "verdict": "crash", "message": "died", "metrics": {"seconds": 1.0}}],
                       base, imported={"triton": "3.9.0", "numpy": None, "torch": "2.11.0"})
    assert recs[0]["check"] == "gpu-canary" and recs[0]["kernel"] == "gpu-canary/odd_k_tail"
    assert recs[0]["verdict"] == "crash" and recs[0]["triton_imported"] == "3.9.0"
