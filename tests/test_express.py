"""The decode step's express lane (``express.py``): which calls take it, and that they get the full way's answer.

Runs on the CPU with the Triton interpreter (conftest sets TRITON_INTERPRET=1 there).
"""

from __future__ import annotations

import os

import pytest
import torch

from kernel_checks import check_against_oracle
from nsa_triton_sel import config, express, failures, selection_attention
from nsa_triton_sel.kernels import launch
from nsa_triton_sel.testing import make_problem

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="CPU lane tests use the interpreter")


@pytest.fixture(autouse=True)
def triton_route(every_row_through_triton):
    express.clear()
    yield
    express.clear()


@pytest.fixture
def lane_hits(monkeypatch):
    """Counts the calls the lane answered."""
    hits = []
    real = express.lookup

    def lookup(*a, **kw):
        got = real(*a, **kw)
        hits.append(got is not None)
        return got

    monkeypatch.setattr(express, "lookup", lookup)
    return hits


def decode_problem(seed=3, **kw):
    args = dict(B=3, S=1, G=2, h=3, Dk=32, Dv=16, T=200, n=4, seed=seed, empty_frac=0.2)
    args.update(kw)
    return make_problem(**args)


def test_a_repeated_decode_call_takes_the_lane_and_matches_the_oracle(lane_hits):
    for i in range(3):
        p = decode_problem(seed=10 + i)  # fresh values, the same signature
        out, lse = selection_attention(p.q, p.k, p.v, p.ranges, return_lse=True, validate=False)
        check_against_oracle(out, lse, p.q, p.k, p.v, p.ranges, what=f"lane call {i}")
    assert lane_hits == [False, True, True]


def test_the_lane_gives_the_full_ways_result_bit_for_bit_from_block_indices(lane_hits):
    p = decode_problem()
    blocks = torch.tensor([[[[0, 2, -1], [1, -1, -1]]]] * 3, dtype=torch.int32)  # [B=3, S=1, G=2, n=3]
    pos = torch.tensor([[150], [40], [199]])
    call = lambda: selection_attention(p.q, p.k, p.v, block_indices=blocks, block_size=64,  # noqa: E731
                                       positions=pos, validate=False)
    full = call()
    lane = call()
    assert lane_hits == [False, True]
    assert torch.equal(full, lane)


@pytest.mark.parametrize("change", ["validate", "grad", "strides", "scale", "prefill"])
def test_calls_the_lane_must_not_take(change, lane_hits):
    p = decode_problem()
    selection_attention(p.q, p.k, p.v, p.ranges, validate=False)  # remembered
    q, kw = p.q, {"validate": False}
    if change == "validate":
        kw["validate"] = True
    elif change == "grad":
        q = p.q.clone().requires_grad_()
    elif change == "strides":
        q = p.q.transpose(-1, -2).contiguous().transpose(-1, -2)
    elif change == "scale":
        kw["scale"] = 0.5
    elif change == "prefill":
        p = decode_problem(S=2)
        q = p.q
    out = selection_attention(q, p.k, p.v, p.ranges, **kw)
    assert lane_hits[-1] is not True  # validate=True never asks the lane: the list may hold one entry only
    if change == "grad":
        out.sum().backward()
        assert q.grad is not None


def test_refresh_and_a_kernel_failure_clear_the_lane(monkeypatch):
    p = decode_problem()
    selection_attention(p.q, p.k, p.v, p.ranges, validate=False)
    assert express._LANES
    config.refresh()
    assert not express._LANES
    selection_attention(p.q, p.k, p.v, p.ranges, validate=False)
    assert express._LANES

    def broken(*a, **kw):
        raise RuntimeError("a kernel that fails")

    monkeypatch.setattr(launch, "launch", broken)
    with pytest.warns(RuntimeWarning):
        out = selection_attention(p.q, p.k, p.v, p.ranges, validate=False)  # the lane fails: the full way recovers
    assert not express._LANES
    assert out.shape == (3, 1, 2, 3, 16)
    failures.FORWARD.clear()
