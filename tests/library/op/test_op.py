"""The torch.library operator on the CPU: opcheck, fake tensors, meta tensors, torch.compile without
graph breaks or recompiles, autograd (the forward's plan carried to the backward, LSE gradients, no host
read in the backward), and the host path."""

from __future__ import annotations

import os

import pytest
import torch

from kernel_checks import check_against_oracle
from nsa_triton_sel import config, op, reference, selection_attention
from nsa_triton_sel.contract import block_indices_to_ranges
from nsa_triton_sel.kernels import launch
from nsa_triton_sel.testing import make_problem

pytestmark = [
    pytest.mark.interp,  # every CPU lane runs it: opcheck and the torch.compile smoke under each paired torch
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="CPU operator tests use the interpreter"),
    pytest.mark.usefixtures("every_row_through_triton"),
]


def decode_problem(dtype=torch.float16):
    """B = 2 decode rows, block indices with -1 padding, positions [B, 1] (one at T - 1)."""
    p = make_problem(B=2, S=1, G=2, h=4, Dk=32, Dv=16, T=150, n=3, dtype=dtype, seed=3)
    blocks = torch.tensor([[2, 0, -1], [1, -1, -1]]).view(2, 1, 1, 3).expand(2, 1, 2, 3).contiguous()
    return p, blocks, torch.tensor([[149], [90]])


@pytest.mark.slow
def test_opcheck_forward_and_backward():
    p = make_problem(B=1, S=3, G=2, h=3, Dk=32, Dv=16, T=90, n=3, seed=1)
    torch.library.opcheck(op.sel_fwd, (p.q, p.k, p.v, p.ranges, None, 0.25, 0, 0, False, 1, False))
    d, blocks, pos = decode_problem()
    grad = [x.clone().requires_grad_(True) for x in (d.q, d.k, d.v)]
    torch.library.opcheck(op.sel_fwd, (*grad, blocks, pos, 0.3, 64, 64, False, 0, False))
    out, lse = op.sel_fwd(d.q, d.k, d.v, blocks, pos, 0.3, 64, 64, False, 0, False)
    torch.library.opcheck(op.sel_bwd, (d.q, d.k, d.v, blocks, pos, 64, 64, False, 0, False, out, lse,
                                       torch.randn_like(out), torch.randn_like(lse), 0.3))


def test_fake_tensors_propagate_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(2, 5, 3, 4, 64, dtype=torch.bfloat16)
        k = torch.empty(2, 3, 1000, 64, dtype=torch.bfloat16)
        v = torch.empty(2, 3, 1000, 32, dtype=torch.bfloat16)
        blocks = torch.empty(2, 5, 3, 16, dtype=torch.int64)
        out, lse = selection_attention(q, k, v, block_indices=blocks, block_size=64, return_lse=True)
        assert out.shape == (2, 5, 3, 4, 32) and out.dtype == torch.bfloat16
        assert lse.shape == (2, 5, 3, 4) and lse.dtype == torch.float32


@pytest.mark.parametrize("spans", ["ranges", "blocks"])
def test_meta_tensors_go_through_the_fake_implementation(spans):
    p = make_problem(B=1, S=4, G=2, h=3, Dk=32, Dv=48, T=100, n=2, seed=2)
    q, k, v = (x.to("meta") for x in (p.q, p.k, p.v))
    if spans == "ranges":
        out, lse = selection_attention(q, k, v, p.ranges.to("meta"), return_lse=True)
    else:
        blocks = torch.zeros(1, 4, 2, 2, dtype=torch.int64, device="meta")
        out, lse = selection_attention(q, k, v, block_indices=blocks, block_size=16, return_lse=True)
    assert out.device.type == "meta" and out.shape == (1, 4, 2, 3, 48) and lse.shape == (1, 4, 2, 3)


def _compile_checked(fn, calls):
    """Compile ``fn`` with fullgraph=True and check: one graph, no break, no recompile, same as eager.

    On the CPU the backend is aot_eager (Dynamo's trace and AOTAutograd through the fake
    implementation, without Inductor's C++ build); tests/library/op/test_op_gpu.py compiles with Inductor.
    """
    explained = torch._dynamo.explain(fn)(*calls[0])
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    with torch._dynamo.config.patch(error_on_recompile=True):
        for args in calls:
            got, want = compiled(*args), fn(*args)
            for g, w in zip(got, want):
                assert torch.equal(g, w)


@pytest.mark.slow
def test_compile_decode_and_prefill_without_graph_break_or_recompile():
    d, blocks, pos = decode_problem()

    def decode(q, k, v, blocks, pos):  # validate=True is fixed off inside the trace
        return selection_attention(q, k, v, block_indices=blocks, block_size=64, positions=pos, return_lse=True)

    _compile_checked(decode, [(torch.randn_like(d.q), d.k, d.v, blocks, pos) for _ in range(3)])
    p = make_problem(B=1, S=20, G=2, h=16, Dk=32, Dv=32, T=64, n=3, seed=4)

    def prefill(q, k, v, ranges):
        return (selection_attention(q, k, v, ranges, validate=False),)

    _compile_checked(prefill, [(torch.randn_like(p.q), p.k, p.v, p.ranges) for _ in range(3)])


@pytest.mark.slow
def test_compile_with_varying_lengths_recompiles_once():
    """A new sequence length makes Dynamo mark it dynamic once; no recompile per length after that
    (the route takes only the sizes that do not vary: B and S are left to the planner and the run time)."""
    from nsa_triton_sel.testing import nsa_problem

    def prefill(q, k, v, blocks):
        return selection_attention(q, k, v, block_indices=blocks, block_size=16, validate=False)

    torch._dynamo.reset()
    compiled = torch.compile(prefill, fullgraph=True, backend="aot_eager")
    frames = []
    for T in (48, 64, 80, 96):
        p = nsa_problem(T, G=1, h=4, D=16, bs=16, topn=3, device="cpu", dtype=torch.float16, seed=T)
        args = (p["q"], p["k"], p["v"], p["blocks"])
        assert torch.equal(compiled(*args), prefill(*args))
        frames.append(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    assert frames[-1] - frames[0] <= 1, frames


def _grads(fn, q, k, v, w):
    q, k, v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    (fn(q, k, v).double() * w).sum().backward()
    return q.grad, k.grad, v.grad


@pytest.mark.parametrize("backend", ["triton", "oracle"])
def test_explicit_backends_are_differentiable(backend):
    """backend='triton'/'oracle' with requires_grad: a grad_fn and float64-oracle gradients."""
    p = make_problem(B=1, S=4, G=2, h=3, Dk=32, Dv=16, T=140, n=3, seed=5, empty_frac=0.3)
    w = torch.randn(1, 4, 2, 3, 16, dtype=torch.float64)
    got = _grads(lambda q, k, v: selection_attention(q, k, v, p.ranges, backend=backend), p.q, p.k, p.v, w)
    want = _grads(lambda q, k, v: reference.oracle(q.float(), k.float(), v.float(), p.ranges), p.q, p.k, p.v, w)
    for name, g, r in zip("qkv", got, want):
        err = float((g.double() - r).norm() / r.norm())
        assert err < 3e-3, f"d{name}: relative error {err:.2e}"
    empty = (p.ranges[..., 1] <= p.ranges[..., 0]).all(-1)  # rows with no key: zero dq
    assert empty.any() and torch.count_nonzero(got[0][empty]) == 0


def test_the_plan_is_made_once_and_carried_to_the_backward(monkeypatch, host_syncs):
    """One question to the planner for the forward and the backward of an eager call, and no host read in
    the backward (its reader list is sized from the shapes): a training step can be captured."""
    from nsa_triton_sel import plan

    d, blocks, pos = decode_problem()
    asked, real = [], plan.plan_call
    monkeypatch.setattr(plan, "plan_call", lambda *a, **kw: asked.append(1) or real(*a, **kw))
    q = d.q.clone().requires_grad_(True)
    out, lse = selection_attention(q, d.k, d.v, block_indices=blocks, block_size=64, positions=pos, backend="triton",
                                   scale=0.3, validate=False, return_lse=True)
    assert out.grad_fn is not None and lse.requires_grad
    host_syncs.clear()
    (out.float().sum() + lse.sum()).backward()
    assert asked == [1] and host_syncs == []
    assert q.grad is not None and torch.isfinite(q.grad).all()
    assert len(op._PLAN_OF) == 0  # the autograd context took the plan: nothing stays behind


def test_a_call_nobody_differentiates_carries_no_plan():
    d, blocks, pos = decode_problem()
    out = op.sel_fwd(d.q, d.k, d.v, blocks, pos, 0.3, 64, 64, False, 0, False)
    assert out[0].grad_fn is None and len(op._PLAN_OF) == 0


def test_cpu_without_the_interpreter_runs_the_reference(monkeypatch):
    """The operator's implementation off CUDA and without TRITON_INTERPRET is packed SDPA in float32."""
    p = make_problem(B=1, S=3, G=1, h=2, Dk=16, Dv=16, T=50, n=2, seed=6)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    config.refresh()
    called = []
    monkeypatch.setattr(launch, "launch", lambda *a, **k: called.append(1))
    out, lse = op.sel_fwd(p.q, p.k, p.v, p.ranges, None, 0.25, 0, 0, False, 1, False)
    assert not called
    check_against_oracle(out, lse, p.q, p.k, p.v, p.ranges, scale=0.25, what="reference implementation")


@pytest.mark.parametrize("spans", ["ranges", "blocks"])
def test_validate_false_path_only_allocates_outputs(spans, monkeypatch, host_syncs):
    """No torch op but the two output allocations, and no host sync, on the validate=False path
    (the launch itself is mocked: this counts what the Python path around it costs)."""
    d, blocks, pos = decode_problem()
    ranges = block_indices_to_ranges(blocks, 64, 150, pos)
    kw = dict(block_indices=blocks, block_size=64, positions=pos) if spans == "blocks" else dict(ranges=ranges)
    selection_attention(d.q, d.k, d.v, validate=False, **kw)  # warm: devices, routes and plans are read once
    launched = []
    monkeypatch.setattr(launch, "run", lambda plan, *a, **k: launched.append(plan.kernel))
    host_syncs.clear()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        selection_attention(d.q, d.k, d.v, validate=False, **kw)
    assert launched == ["decode"] and host_syncs == []
    ops = [e.name for e in prof.events() if e.name.startswith("aten::")]
    assert ops == ["aten::empty", "aten::empty"], ops


def test_validate_true_is_one_host_sync(host_syncs):
    p = make_problem(B=1, S=8, G=1, h=16, Dk=16, Dv=16, T=40, n=2, seed=7)
    selection_attention(p.q, p.k, p.v, p.ranges)
    host_syncs.clear()
    selection_attention(p.q, p.k, p.v, p.ranges)
    # the value checks' one read, and the planner's multi-token switch (read at once off CUDA; on CUDA
    # measured on the device without a sync after a signature's first call: plan/share.py)
    assert host_syncs == ["tolist", "__float__"]


@pytest.mark.parametrize("spans", ["ranges", "blocks"])
def test_compile_fullgraph_after_eager_warm_up_calls(spans):
    """After a few eager decode calls (signature, route and plan remembered), torch.compile with
    fullgraph=True traces the same call: nothing untraceable runs before ``is_compiling`` is asked, so a
    warm cache never breaks the graph."""
    d, blocks, pos = decode_problem()
    ranges = block_indices_to_ranges(blocks, 64, 150, pos)
    kw = dict(block_indices=blocks, block_size=64, positions=pos) if spans == "blocks" else dict(ranges=ranges)

    def decode(q, k, v):
        return selection_attention(q, k, v, validate=False, backend="triton", **kw)

    for _ in range(3):
        want = decode(d.q, d.k, d.v)
    torch._dynamo.reset()
    got = torch.compile(decode, fullgraph=True, backend="aot_eager")(d.q, d.k, d.v)
    assert torch.equal(got, want)


def test_the_backward_fake_gives_the_strides_of_the_implementation():
    """A compiled graph trusts the fake's strides: with k/v as permuted views (the [T, H, D] layouts), the
    fake backward must say contiguous, as the implementation returns them."""
    p = make_problem(B=1, S=6, G=2, h=3, Dk=32, Dv=16, T=90, n=3, seed=8)
    k, v = (x.transpose(1, 2).contiguous().transpose(1, 2) for x in (p.k, p.v))  # same values, permuted strides
    out, lse = op.sel_fwd(p.q, k, v, p.ranges, None, 0.25, 0, 0, False, 1, False)
    torch.library.opcheck(op.sel_bwd, (p.q, k, v, p.ranges, None, 0, 0, False, 1, False, out, lse,
                                       torch.randn_like(out), None, 0.25))
