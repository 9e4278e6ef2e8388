"""``bench/train/train_sweep.py`` (``train_nsa.py --sweep``) runs end to end under the Triton interpreter: it calls the
launcher's private steps directly, so a change of their arguments must show here, not first on a GPU."""

from __future__ import annotations

import os

import pytest
import torch

from bench.train import train_contenders as TC
from bench.train import train_sweep

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="runs the kernels under the "
                                "Triton interpreter (TRITON_INTERPRET=1, set by tests/conftest.py on a CPU)")


@pytest.mark.slow
def test_the_sweep_times_every_phase_and_returns_keywords(monkeypatch):
    # one configuration per phase, valid for a tiny problem; the timer is a call count (the sweep has run each
    # configuration once before it asks for a time: a failing one is a result, not a time)
    monkeypatch.setattr(train_sweep, "DQ_CONFIGS", [(16, 1, 1)])
    monkeypatch.setattr(train_sweep, "KV_CONFIGS", [(16, 16, 1, 1)])
    monkeypatch.setattr(train_sweep, "TOK_CONFIGS", [(16, 1, 1)])
    monkeypatch.setattr(train_sweep, "PROGRAMS_PER_SM", (4,))
    calls = []

    def bench(fn):
        calls.append(1)
        return float(len(calls))

    p = TC.make_problem(64, "random", device="cpu", dtype=torch.float16, h=2, d=16, groups=1)
    local = TC.make_problem(64, "local", device="cpu", dtype=torch.float16, h=2, d=16, groups=1)
    lines = []
    tuned = train_sweep.sweep(p, bench, lines.append, local=local)
    text = "\n".join(lines)
    assert "failed" not in text, text
    assert isinstance(tuned, dict) and tuned, (tuned, text)
