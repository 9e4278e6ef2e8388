"""``plan.plan_call``: one plan per call, remembered per signature (what the decode step's "express lane" was),
carried from the forward to the backward; the reader-list bound the backward sizes its arrays by.

Runs on the CPU with the Triton interpreter (conftest sets TRITON_INTERPRET=1 there).
"""

from __future__ import annotations

import os

import pytest
import torch

from kernel_checks import check_against_oracle
from nsa_triton_sel import caches, config, failures, plan, selection_attention
from nsa_triton_sel.kernels import launch
from nsa_triton_sel.testing import make_problem, random_ranges

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="CPU plan tests use the interpreter")


@pytest.fixture(autouse=True)
def triton_route(every_row_through_triton):
    yield


@pytest.fixture
def plans(monkeypatch):
    """The plans ``plan_call`` returned, in order."""
    got = []
    real = plan.plan_call

    def spy(*a, **kw):
        got.append(real(*a, **kw))
        return got[-1]

    monkeypatch.setattr(plan, "plan_call", spy)
    return got


def decode_problem(seed=3, **kw):
    args = dict(B=3, S=1, G=2, h=3, Dk=32, Dv=16, T=200, n=4, seed=seed, empty_frac=0.2)
    args.update(kw)
    return make_problem(**args)


def test_a_repeated_decode_call_reuses_its_plan_and_matches_the_oracle(plans):
    for i in range(3):
        p = decode_problem(seed=10 + i)  # fresh values, the same signature
        out, lse = selection_attention(p.q, p.k, p.v, p.ranges, return_lse=True, validate=False)
        check_against_oracle(out, lse, p.q, p.k, p.v, p.ranges, what=f"call {i}")
    assert len(plans) == 3 and plans[0] is plans[1] is plans[2] and plans[0].forward.kernel == "decode"


@pytest.mark.parametrize("change", ["validate", "grad", "strides", "scale", "prefill"])
def test_a_changed_call_gets_the_right_answer_after_a_remembered_one(change):
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
    check_against_oracle(out.detach(), None, q.detach(), p.k, p.v, p.ranges, scale=kw.get("scale"), what=change)
    if change == "grad":
        out.sum().backward()
        assert q.grad is not None


def test_refresh_empties_every_cache_and_a_kernel_failure_reroutes(monkeypatch):
    p = decode_problem()
    selection_attention(p.q, p.k, p.v, p.ranges, validate=False)
    held = caches.report()
    assert held["plans"] >= 1 and held["call_structure"] >= 1 and held["devices"] >= 1
    config.refresh()
    assert all(n <= 0 for n in caches.report().values()), caches.report()

    def broken(*a, **kw):
        raise RuntimeError("a kernel that fails")

    monkeypatch.setattr(launch, "launch", broken)
    with pytest.warns(RuntimeWarning):
        out = selection_attention(p.q, p.k, p.v, p.ranges, validate=False)  # falls back, remembered
    assert out.shape == (3, 1, 2, 3, 16) and failures.FORWARD
    called = []
    monkeypatch.setattr(launch, "launch", lambda *a, **kw: called.append(1))
    selection_attention(p.q, p.k, p.v, p.ranges, validate=False)  # routed to packed SDPA now
    assert not called
    config.refresh()  # forgets the failure too
    assert not failures.FORWARD


def _entries(ranges, T, bn):
    """Brute force: the (key tile, span) pairs each row touches."""
    r = ranges.clamp(0, T).reshape(-1, ranges.shape[3], 2).tolist()
    return [sum(len({t for t in range(s // bn, (e - 1) // bn + 1)}) for s, e in row if e > s) for row in r]


@pytest.mark.parametrize("T, bn", [(200, 64), (1000, 32), (64, 64), (7, 64)])
def test_the_reader_bound_holds_for_any_disjoint_ranges(T, bn):
    g = torch.Generator().manual_seed(T + bn)
    for trial in range(20):
        n = 1 + trial % 7
        r = random_ranges(2, 9, 2, n, T, gen=g, pad_frac=0.3)
        assert max(_entries(r, T, bn)) <= plan.entries_per_row(n, T, bn, 0, aligned=False)


@pytest.mark.parametrize("bs", [16, 32, 64, 100, 128])
@pytest.mark.parametrize("aligned", [True, False])
def test_the_reader_bound_holds_for_spans_of_at_most_one_block(bs, aligned):
    T, bn, n = 1000, 64, 5
    g = torch.Generator().manual_seed(bs)
    base = torch.randint(0, T // bs, (3, 11, 1, n), generator=g) * bs
    if not aligned:
        base = base + torch.randint(0, bs, (3, 11, 1, 1), generator=g)  # a sequence start inside a block
    length = torch.randint(0, bs + 1, (3, 11, 1, n), generator=g)
    r = torch.stack([base, base + length], -1).clamp(0, T)
    assert max(_entries(r, T, bn)) <= plan.entries_per_row(n, T, bn, bs, aligned=aligned)
