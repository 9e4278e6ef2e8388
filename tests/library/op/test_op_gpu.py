"""The operator on a CUDA device: torch.compile in the default and "reduce-overhead" modes with
no graph break and no recompile, CUDA-graph capture and replay, a compiled training step, the Inductor
fp64-scale crash, and the host cost of a decode call as a pytest-benchmark benchmark.

Run on the H100 with:  ``python -m pytest -m gpu tests/library/op/test_op_gpu.py -v``  (skipped without CUDA).
"""

from __future__ import annotations

import pytest
import torch

from kernel_checks import check_against_oracle
from nsa_triton_sel import arguments, config, device, op, reference, selection_attention
from nsa_triton_sel.kernels import direct
from nsa_triton_sel.testing import nsa_problem

pytestmark = pytest.mark.gpu
KINDS = ["custom"] + (["triton"] if op.sel_fwd_traced is not None else [])


def _inductor_pair_problem() -> str | None:
    """Why torch.compile cannot be tested with the installed Triton (None when it can): Inductor
    generates code for the Triton its torch release pins, and an off-pair Triton (a lane run with
    another Triton beside this torch) is outside what torch supports."""
    from importlib import metadata

    import triton
    from packaging.requirements import Requirement
    from packaging.version import Version

    for req in (Requirement(r) for r in metadata.requires("torch") or []):
        if req.name == "triton" and (req.marker is None or req.marker.evaluate()):
            if not req.specifier.contains(Version(triton.__version__), prereleases=True):
                return (f"torch {torch.__version__} pins triton{req.specifier}; Triton {triton.__version__} is "
                        f"installed beside it (an off-pair lane): Inductor is only supported on the pair")
    return None


needs_inductor_pair = pytest.mark.skipif(_inductor_pair_problem() is not None,
                                         reason=str(_inductor_pair_problem()))
MODES = ["default", "reduce-overhead"]


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setenv("NSA_SEL_TRITON_MIN_L", "1")  # the H100 threshold: every non-empty row to the kernel
    yield
    torch._dynamo.reset()


def use_kind(monkeypatch, kind):
    monkeypatch.setenv("NSA_SEL_OP", kind)
    config.refresh()
    torch._dynamo.reset()


def decode(B=64, T=4096, seed=0):
    """A decode step: S = 1 query per sequence at position T - 1, top-16 blocks of 64, bf16."""
    p = nsa_problem(T, B=B, S=1, device="cuda", seed=seed)
    return p, p["positions"].view(1, 1).expand(B, 1).contiguous()


def step(q, k, v, blocks, pos):
    return selection_attention(q, k, v, block_indices=blocks, block_size=64, positions=pos, return_lse=True)


def check_compiled(fn, args_list, *, mode):
    explained = torch._dynamo.explain(fn)(*args_list[0])
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    torch._dynamo.reset()
    compiled = torch.compile(fn, mode=mode, fullgraph=True)
    outs = []
    with torch._dynamo.config.patch(error_on_recompile=True):
        for args in args_list:
            got = [t.clone() for t in compiled(*args)]  # reduce-overhead returns the graph's own buffers
            want = fn(*args)
            for g, w in zip(got, want):
                torch.testing.assert_close(g.float(), w.float(), atol=2e-2, rtol=2e-2)
            outs.append(got)
    return outs


@needs_inductor_pair
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", KINDS)
def test_compiled_decode_step(kind, mode, monkeypatch):
    use_kind(monkeypatch, kind)
    p, pos = decode()
    calls = [(torch.randn_like(p["q"]), p["k"], p["v"], p["blocks"], pos) for _ in range(4)]
    outs = check_compiled(step, calls, mode=mode)
    q, k, v, blocks, _ = calls[-1]
    ranges = p["ranges"]
    check_against_oracle(outs[-1][0], outs[-1][1], q, k, v, ranges, what=f"compiled decode {kind} {mode}")


@needs_inductor_pair
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("pattern", ["local", "random"])
def test_compiled_prefill(kind, mode, pattern, monkeypatch):
    use_kind(monkeypatch, kind)
    p = nsa_problem(512, pattern=pattern, device="cuda", seed=1)

    def prefill(q, k, v, ranges, blocks):
        out_r = selection_attention(q, k, v, ranges)  # validate=True: fixed off inside the trace
        return out_r, selection_attention(q, k, v, block_indices=blocks, block_size=64)

    calls = [(torch.randn_like(p["q"]), p["k"], p["v"], p["ranges"], p["blocks"]) for _ in range(3)]
    outs = check_compiled(prefill, calls, mode=mode)
    q, k, v, ranges, _ = calls[-1]
    for out in outs[-1]:
        check_against_oracle(out, None, q, k, v, ranges, what=f"compiled prefill {kind} {mode} {pattern}")


def test_cuda_graph_capture_and_replay_matches_the_oracle():
    p, pos = decode(B=8, T=2048, seed=2)
    q = p["q"].clone()
    fn = lambda: step(q, p["k"], p["v"], p["blocks"], pos)  # noqa: E731
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # validate=True is skipped during capture (it would sync)
        out, lse = fn()
    for seed in range(3):
        q.copy_(torch.randn(q.shape, generator=torch.Generator("cuda").manual_seed(seed), device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        check_against_oracle(out, lse, q, p["k"], p["v"], p["ranges"], what=f"graph replay {seed}")


@needs_inductor_pair
@pytest.mark.parametrize("kind", KINDS)
def test_compiled_training_step_gradients(kind, monkeypatch):
    use_kind(monkeypatch, kind)
    p = nsa_problem(256, G=2, h=4, D=64, device="cuda", seed=3)
    w = torch.randn(1, 256, 2, 4, 64, device="cuda")

    def loss(q, k, v):
        return (selection_attention(q, k, v, p["ranges"], backend="triton").float() * w).sum()

    def grads(fn, device="cuda"):
        xs = [p[n].detach().to(device).clone().requires_grad_(True) for n in "qkv"]
        fn(*xs).backward()
        return [x.grad.float() for x in xs]

    got = grads(torch.compile(loss, fullgraph=True))
    # The float64 oracle runs on the CPU: its inputs are CPU leaves there.
    want = grads(lambda q, k, v: (reference.oracle(q.float(), k.float(), v.float(), p["ranges"].cpu())
                                  * w.double().cpu()).sum(), device="cpu")  # the oracle computes in float64
    for name, g, r in zip("qkv", got, want):
        err = float((g.cpu() - r).norm() / r.norm())
        assert err < 1e-2, f"d{name}: relative error {err:.2e}"


@needs_inductor_pair
def test_compiling_a_direct_kernel_call_keeps_fp32_state():
    """Inductor passes a traced Python float as fp64: the kernels cast qk_scale, so this compiles."""
    p = nsa_problem(512, device="cuda", seed=4)
    fn = torch.compile(lambda q, k, v, r, s: direct.sel_attn_ranges(q, k, v, r, scale=s))
    out = fn(p["q"], p["k"], p["v"], p["ranges"], 0.07)
    check_against_oracle(out, None, p["q"], p["k"], p["v"], p["ranges"], scale=0.07, what="direct kernel, compiled")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_dk192_h64_through_selection_attention(dtype):
    """The class Triton 3.0/3.1 abort on for sm_90 (64-row, 8-warp tiles): capped to 32 rows there by
    the window triton30-31-sm90-mma64-abort, oracle-correct everywhere."""
    p = nsa_problem(256, G=1, h=64, D=192, dtype=dtype, device="cuda", seed=5)
    v = torch.randn(1, 1, 256, 128, device="cuda", dtype=dtype)
    route = arguments.route_of(p["q"], p["k"], v)
    assert route.path == "triton" and route.min_L == 1, route  # the kernels run: this test can fail
    dev = device.device_of(p["q"].device)
    assert dev.max_rows == device.row_cap(dev.triton, dev.arch)  # 32 on Triton 3.0/3.1 + sm_90 (the window)
    for kw in (dict(ranges=p["ranges"]), dict(block_indices=p["blocks"], block_size=64)):
        out, lse = selection_attention(p["q"], p["k"], v, return_lse=True, **kw)
        check_against_oracle(out, lse, p["q"], p["k"], v, p["ranges"], what=f"dk192 h64 {dtype} {list(kw)[0]}")
    p1, pos = decode(B=4, T=2048, seed=6)  # decode split with 64 heads of Dk = 192
    B1, _, G1, _, _ = p1["q"].shape
    q = torch.randn(B1, 1, G1, 64, 192, device="cuda", dtype=dtype)
    k = torch.randn(B1, G1, p1["T"], 192, device="cuda", dtype=dtype)
    v1 = p1["v"].to(dtype)
    out, lse = selection_attention(q, k, v1, block_indices=p1["blocks"], block_size=64, positions=pos,
                                   return_lse=True)
    check_against_oracle(out, lse, q, k, v1, p1["ranges"], what=f"dk192 h64 decode {dtype}")


def test_value_checks_beside_the_kernel_raise_on_bad_input_and_agree_on_good():
    """validate=True on the Triton path: the checks are enqueued with the kernel (on the caller's
    stream ahead of it), the call waits for them and raises; good input gives the same result as
    validate=False."""
    from nsa_triton_sel import arguments

    p = nsa_problem(512, device="cuda", seed=7)
    q, k, v, ranges = p["q"], p["k"], p["v"], p["ranges"]
    call = arguments.parse(q, k, v, ranges)
    assert call.route.kernels and call.finish is not None, call.route  # the checks run beside the kernel
    call.finish()
    good = selection_attention(q, k, v, ranges)
    assert torch.equal(good, selection_attention(q, k, v, ranges, validate=False))
    bad = ranges.clone()
    bad[0, 100, 1, 0] = torch.tensor([5, 10_000], device="cuda", dtype=bad.dtype)
    with pytest.raises(ValueError, match=r"ranges\[b=0, s=100, g=1, span=0\].*end > T"):
        selection_attention(q, k, v, bad)
    blocks = p["blocks"].clone()
    blocks[0, 7, 2, 3] = 10_000
    with pytest.raises(ValueError, match=r"block_indices\[b=0, s=7, g=2, slot=3\].*out of range"):
        selection_attention(q, k, v, block_indices=blocks, block_size=p["bs"])
    torch.cuda.synchronize()  # the kernels that ran beside the checks stayed in bounds
    assert torch.equal(good, selection_attention(q, k, v, ranges))
