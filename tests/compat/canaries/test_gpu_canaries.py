"""GPU canaries: their kernels' arithmetic under the interpreter, and the child-process runner's verdicts."""

from __future__ import annotations

import os
import re
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
    from nsa_triton_sel.compat.lanes.gpu_lane import canary_records

    recs = canary_records([{"name": "odd_k_tail", "verdict": "crash", "message": "died", "metrics": {"seconds": 1.0}}],
                          base, imported={"triton": "3.9.0", "numpy": None, "torch": "2.11.0"})
    assert recs[0]["check"] == "gpu-canary" and recs[0]["kernel"] == "gpu-canary/odd_k_tail"
    assert recs[0]["verdict"] == "crash" and recs[0]["triton_imported"] == "3.9.0"


# ---------------------------------------------------------------- a fired canary needs a window or a note

def _fired(name: str, triton: str) -> dict:
    return {"check": "gpu-canary", "kernel": f"gpu-canary/{name}", "verdict": "fail", "triton": triton,
            "compute_capability": "9.0"}


def test_a_fired_canary_shows_its_window_its_note_or_a_flag():
    from nsa_triton_sel import known_bad
    from nsa_triton_sel.compat.ledger.gpu_tables import canaries_fired

    windows = known_bad.load()
    assert canaries_fired([_fired("cumsum_spans", "3.2.0")], windows) == \
        "cumsum_spans (note)"
    assert canaries_fired([_fired("cumsum_spans", "3.0.0")], windows) == \
        "cumsum_spans (window)"
    assert canaries_fired([_fired("cumsum_spans", "3.4.0")], windows) == "cumsum_spans (**unanswered**)"
    assert canaries_fired([_fired("odd_k_tail", "3.2.0")], windows) == "odd_k_tail (**unanswered**)"


def test_the_shipped_notes_load_and_name_files_that_exist():
    from nsa_triton_sel.compat.canaries import notes

    repo = Path(__file__).resolve().parents[3]
    loaded = notes.load()
    assert loaded and all(n.why and n.evidence for n in loaded)
    for n in loaded:
        for path in re.findall(r"[\w.-]+(?:/[\w.-]+)+\.\w+", n.evidence + " " + n.why):
            assert (repo / path).exists() or (repo / "src" / "nsa_triton_sel" / path).exists(), path


@pytest.mark.parametrize("body, words", [
    ('schema = 2\n', "schema 2 is not supported"),
    ('schema = 1\n[[note]]\ncanary = "nope"\ntriton = ">=3.2"\narch = [90]\nwhy = "w"\nevidence = "e"\n',
     "'nope' is not a GPU canary (one of dot_trans_dk"),
    ('schema = 1\n[[note]]\ncanary = "cumsum_spans"\ntriton = "3.2"\narch = [90]\nwhy = "w"\nevidence = "e"\n',
     "is not a PEP 440 specifier"),
    ('schema = 1\n[[note]]\ncanary = "cumsum_spans"\ntriton = ">=3.2"\narch = ["sm_90"]\nwhy = "w"\nevidence = "e"\n',
     "arch must be a list of compute capabilities as integers"),
    ('schema = 1\n[[note]]\ncanary = "cumsum_spans"\ntriton = ">=3.2"\narch = [90]\nwhy = "w"\n',
     "missing ['evidence']"),
])
def test_a_bad_note_says_what_is_wrong(tmp_path, body, words):
    from nsa_triton_sel.compat.canaries import notes

    path = tmp_path / "notes.toml"
    path.write_text(body)
    with pytest.raises(ValueError, match=re.escape(words)):
        notes.load(path)
