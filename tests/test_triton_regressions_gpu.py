"""Smallest reproducers of Triton defects found on the GPU (src/nsa_triton_sel/data/known_bad.toml).

Each test runs a tiny kernel and compares with torch.  A failure inside a known-bad window is
expected (xfail with the window's reason); outside it, it is a new regression.  GPU only:
``pytest -m gpu tests/test_triton_regressions_gpu.py``.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")


@triton.jit
def _cumsum_kernel(X, O, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(X + offs)
    tl.store(O + offs, tl.cumsum(x, 0))


@pytest.mark.parametrize("block", [2, 16])
def test_tl_cumsum_of_a_short_int_vector(block):
    # The shape the span-indexing code had: tiles per span, int32, BLOCK_S = 2 or 16.
    from nsa_triton_sel import known_bad

    x = torch.randint(0, 5, (block,), device="cuda", dtype=torch.int32)
    out = torch.empty_like(x)
    _cumsum_kernel[(1,)](x, out, BLOCK=block, num_warps=1)
    want = torch.cumsum(x, 0).to(torch.int32)
    if not torch.equal(out, want):
        major, minor = torch.cuda.get_device_capability()
        reason = known_bad.expected_failure(triton.__version__, arch=10 * major + minor, check="parity", mode="gpu")
        if reason:
            pytest.xfail(reason)
        raise AssertionError(f"tl.cumsum({x.tolist()}) = {out.tolist()}, torch says {want.tolist()}")
