"""Bad inputs found by fuzzing: each one gets a clear error naming the argument, or the right result."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from kernel_checks import check_against_oracle
from nsa_triton_sel import config, failures, reference, selection_attention
from nsa_triton_sel.contract import block_indices_to_ranges
from nsa_triton_sel.kernels import launch
from nsa_triton_sel.testing import make_problem

pytestmark = [
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="CPU tests use the interpreter"),
    pytest.mark.usefixtures("every_row_through_triton"),
]


def small(**kw):
    args = dict(B=1, S=2, G=1, h=2, Dk=16, Dv=16, T=100, n=2, seed=11)
    args.update(kw)
    return make_problem(**args)


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), -float("inf")])
def test_scale_not_finite(scale):
    p = small()
    with pytest.raises(ValueError, match=r"^scale=(nan|inf|-inf) is not finite; accepted: a finite float"):
        selection_attention(p.q, p.k, p.v, p.ranges, scale=scale)


@pytest.mark.parametrize("scale", ["0.5", True, 1 + 2j, torch.tensor(0.5), [0.5]])
def test_scale_not_a_real_number(scale):
    p = small()
    with pytest.raises(TypeError, match=r"^scale must be a real number \(float or int\) or None, got "):
        selection_attention(p.q, p.k, p.v, p.ranges, scale=scale)


def test_scale_numpy_and_int_are_fine():
    p = small()
    ref = selection_attention(p.q, p.k, p.v, p.ranges, scale=0.5)
    assert torch.equal(selection_attention(p.q, p.k, p.v, p.ranges, scale=np.float32(0.5)), ref)
    check_against_oracle(selection_attention(p.q, p.k, p.v, p.ranges, scale=2), None, p.q, p.k, p.v, p.ranges,
                         scale=2, what="int scale")


def test_tokens_flag_error_is_the_flags_and_never_poisons_the_failure_cache(monkeypatch):
    p = small(S=8, h=2)
    monkeypatch.setenv("NSA_SEL_TRITON_TOKENS", "2")  # 2 tokens x 2 heads = 4 rows < 16
    config.refresh()
    with pytest.raises(ValueError, match=r"^NSA_SEL_TRITON_TOKENS=2 cannot run these inputs: tokens=2 with h=2"):
        selection_attention(p.q, p.k, p.v, p.ranges)
    assert failures.FORWARD == {}
    monkeypatch.delenv("NSA_SEL_TRITON_TOKENS")
    config.refresh()
    calls = []
    real = launch.launch
    monkeypatch.setattr(launch, "launch", lambda *a, **k: calls.append(1) or real(*a, **k))
    out, lse = selection_attention(p.q, p.k, p.v, p.ranges, return_lse=True)
    assert calls == [1], "the configuration must still run on Triton"
    check_against_oracle(out, lse, p.q, p.k, p.v, p.ranges, what="after a flag error")


def test_input_errors_are_not_kernel_failures():
    p = small()
    with pytest.raises(TypeError):
        selection_attention(p.q, p.k, p.v, p.ranges, scale="0.5")
    with pytest.raises(ValueError):
        selection_attention(p.q, p.k, p.v, p.ranges.clone().fill_(-1))
    assert failures.FORWARD == {}


@pytest.mark.parametrize("backend", ["auto", "sdpa"])
def test_positions_near_2_63_do_not_empty_the_rows(backend):
    p = small(S=2, T=100)
    blocks = torch.tensor([[[[0, 1]], [[1, -1]]]])
    pos = torch.tensor([2**63 - 1, 2**63 - 2])
    out, lse = selection_attention(p.q, p.k, p.v, block_indices=blocks, block_size=64, positions=pos,
                                   return_lse=True, backend=backend)
    full = torch.tensor([[[[[0, 64], [64, 100]]], [[[64, 100], [0, 0]]]]], dtype=torch.int32)
    assert torch.equal(block_indices_to_ranges(blocks, 64, 100, pos), full)
    check_against_oracle(out, lse, p.q, p.k, p.v, full, what=f"positions near 2^63 ({backend})")


@pytest.mark.parametrize("block_size", [2**63, 2**64, 10**30])
@pytest.mark.parametrize("backend", ["auto", "sdpa"])
def test_huge_block_size_is_one_block_of_every_key(block_size, backend):
    p = small(S=2, T=100)
    blocks = torch.tensor([[[[0, -1]], [[0, -1]]]])
    pos = torch.tensor([99, 40])
    out = selection_attention(p.q, p.k, p.v, block_indices=blocks, block_size=block_size, positions=pos,
                              backend=backend)
    ranges = torch.tensor([[[[[0, 100], [0, 0]]], [[[0, 41], [0, 0]]]]], dtype=torch.int32)
    assert torch.equal(block_indices_to_ranges(blocks, block_size, 100, pos), ranges)
    check_against_oracle(out, None, p.q, p.k, p.v, ranges, what=f"block_size={block_size}")
    with pytest.raises(ValueError, match=r"^block_indices\[b=0, s=0, g=0, slot=0\] = 1: out of range"):
        selection_attention(p.q, p.k, p.v, block_indices=blocks + 1, block_size=block_size)


@pytest.mark.parametrize("name", ["q", "ranges", "block_indices"])
def test_sparse_tensors_are_refused(name):
    p = small()
    args = dict(q=p.q, k=p.k, v=p.v)
    if name == "block_indices":
        args.update(block_indices=torch.zeros(1, 2, 1, 2, dtype=torch.int64).to_sparse(), block_size=64)
    else:
        args["ranges"] = p.ranges.to_sparse() if name == "ranges" else p.ranges
        if name == "q":
            args["q"] = p.q.float().to_sparse().half()
    with pytest.raises(TypeError, match=rf"^{name} is a torch.sparse_coo tensor; accepted: dense \(strided\) tensors"):
        selection_attention(**args)


@pytest.mark.parametrize("bad", [[[[[0, 1]]]], np.zeros((1, 2, 1, 2), dtype=np.int64), "0,1"])
def test_non_tensor_block_indices_is_a_type_error(bad):
    p = small()
    with pytest.raises(TypeError, match=r"^block_indices must be a torch.Tensor, got "):
        selection_attention(p.q, p.k, p.v, block_indices=bad, block_size=64)


@pytest.mark.parametrize("extra", [dict(block_size=64), dict(positions=torch.arange(2)),
                                   dict(block_size=64, positions=torch.arange(2))])
def test_positions_or_block_size_with_ranges_raise(extra):
    p = small()
    with pytest.raises(ValueError, match=r"given with ranges: block_size and positions go with block_indices"):
        selection_attention(p.q, p.k, p.v, p.ranges, **extra)


def test_oracle_subtracts_the_max():
    q = torch.tensor([[1e9]]).view(1, 1, 1, 1, 1)
    k = torch.tensor([[1e9], [1e9]]).view(1, 1, 2, 1)
    v = torch.tensor([[0.0], [1.0]]).view(1, 1, 2, 1)
    ranges = torch.tensor([0, 2]).view(1, 1, 1, 1, 2)
    out, lse = reference.oracle(q, k, v, ranges, scale=1, return_lse=True)
    assert out.item() == 0.5
    assert lse.item() == pytest.approx(1e18)
