"""``python -m bench.perf.auto_vs_triton``: it needs a GPU, and says so."""

from __future__ import annotations

import pytest
import torch

from bench.perf import auto_vs_triton


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given without a GPU")
def test_without_a_gpu_it_says_what_it_needs(capsys):
    assert auto_vs_triton.main([]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
