"""GPU parity: every kernel against the float64 oracle on a CUDA device, bf16 and fp16.

Run on the H100 with:  ``pytest -m gpu -v``  (skipped with a reason without a CUDA device).
Bounds (the kernels' accuracy target): mean abs error <= 1e-3, relative error no worse than twice the
packed-SDPA path's own in the same dtype, never NaN, every output element written.
"""

from __future__ import annotations

import pytest
import torch

from kernel_checks import check_against_oracle, fresh_seed, packed_as_5d, varlen_as_5d
from nsa_triton_sel import arguments, caches, failures, selection_attention
from nsa_triton_sel.kernels import direct
from nsa_triton_sel.testing import make_problem, nsa_ranges

pytestmark = pytest.mark.gpu
DTYPES = [torch.bfloat16, torch.float16]
DEV = "cuda"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape",
    [
        dict(B=2, S=96, G=4, h=16, Dk=128, Dv=128, T=2048, n=16),  # NSA-like
        dict(B=1, S=64, G=2, h=3, Dk=64, Dv=64, T=1000, n=8),  # h not a power of two, T % 64 != 0
        dict(B=1, S=48, G=1, h=20, Dk=192, Dv=128, T=777, n=4),  # Dk = 192, Dk != Dv
        dict(B=1, S=32, G=2, h=1, Dk=128, Dv=64, T=300, n=5),
        dict(B=1, S=16, G=1, h=64, Dk=128, Dv=128, T=512, n=4),
    ],
    ids=["nsa", "h3", "dk192", "h1", "h64"],
)
def test_ranges_kernel(dtype, shape):
    p = make_problem(**shape, dtype=dtype, device=DEV, seed=fresh_seed(), empty_frac=0.1)
    out, lse = direct.sel_attn_ranges(p.q, p.k, p.v, p.ranges, return_lse=True)
    check_against_oracle(out, lse, p.q, p.k, p.v, p.ranges, what=f"ranges {shape} {dtype}")
    dirty = torch.full_like(out, float("nan"))
    direct.sel_attn_ranges(p.q, p.k, p.v, p.ranges, out=dirty)
    assert torch.equal(dirty, out), "an output element was not written"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("h", [16, 4, 3])
@pytest.mark.parametrize("local", [True, False], ids=["local", "random"])
def test_multi_token_kernel(dtype, h, local):
    T, G = 1500, 2
    p = make_problem(B=1, S=T, G=G, h=h, Dk=128, Dv=128, T=T, n=1, dtype=dtype, device=DEV, seed=fresh_seed())
    p.ranges = nsa_ranges(1, T, G, 16, 64, seed=h, local=local, device=DEV)
    out, lse = direct.sel_attn_tokens(p.q, p.k, p.v, p.ranges, return_lse=True)
    check_against_oracle(out, lse, p.q, p.k, p.v, p.ranges, what=f"tokens h={h} local={local}")
    dirty = torch.full_like(out, float("nan"))
    direct.sel_attn_tokens(p.q, p.k, p.v, p.ranges, out=dirty)
    assert torch.equal(dirty, out)


@pytest.mark.parametrize("dtype", DTYPES)
def test_ranges_kernel_strided_inputs(dtype):
    p = make_problem(B=2, S=40, G=2, h=8, Dk=128, Dv=128, T=900, n=6, dtype=dtype, device=DEV,
                     seed=fresh_seed(), noncontiguous=True)
    out, lse = direct.sel_attn_ranges(p.q, p.k, p.v, p.ranges, return_lse=True)
    check_against_oracle(out, lse, p.q, p.k, p.v, p.ranges, what="strided")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("splits", [None, 1, 7, 64])
def test_decode_kernel(dtype, splits):
    p = make_problem(B=3, S=1, G=2, h=16, Dk=128, Dv=128, T=4096, n=16, dtype=dtype, device=DEV,
                     seed=fresh_seed(), empty_frac=0.2)
    out, lse = direct.sel_attn_decode(p.q, p.k, p.v, p.ranges, return_lse=True, num_splits=splits)
    check_against_oracle(out, lse, p.q, p.k, p.v, p.ranges, what=f"decode splits={splits}")
    dirty = torch.full_like(out, float("nan"))
    direct.sel_attn_decode(p.q, p.k, p.v, p.ranges, out=dirty, num_splits=splits)
    assert torch.equal(dirty, out)


BOUND_CASES = {
    "ranges": (dict(B=2, S=40, G=2, h=16, Dk=128, Dv=128, T=900, n=6), lambda p: direct.sel_attn_ranges(
        p.q, p.k, p.v, p.ranges, return_lse=True)),
    "h3-dk192": (dict(B=1, S=33, G=2, h=3, Dk=192, Dv=128, T=777, n=4), lambda p: direct.sel_attn_ranges(
        p.q, p.k, p.v, p.ranges, return_lse=True)),
    "decode-split4": (dict(B=3, S=1, G=2, h=16, Dk=128, Dv=128, T=4096, n=16), lambda p: direct.sel_attn_decode(
        p.q, p.k, p.v, p.ranges, return_lse=True, num_splits=4)),
    "tokens": (dict(B=1, S=300, G=2, h=4, Dk=128, Dv=128, T=300, n=16), lambda p: direct.sel_attn_tokens(
        p.q, p.k, p.v, p.ranges, return_lse=True)),
}


@pytest.mark.parametrize("case", sorted(BOUND_CASES))
def test_bound_launcher_reads_each_calls_tensors(case):
    """The third and later calls of a shape go through the recorded launcher (kernels/bind.py): on
    fresh tensors every call (new pointers, new values) each result must still match the oracle."""
    from nsa_triton_sel.kernels import bind, forward

    shape, call = BOUND_CASES[case]
    caches.clear()  # (config.refresh without re-reading the flags: the recorded launches too)
    for i in range(4):
        p = make_problem(**shape, dtype=torch.bfloat16, device=DEV, seed=fresh_seed(), empty_frac=0.1)
        if case == "tokens":
            p.ranges = nsa_ranges(1, shape["S"], shape["G"], 16, 64, seed=i, local=True, device=DEV)
        out, lse = call(p)
        check_against_oracle(out, lse, p.q, p.k, p.v, p.ranges, what=f"bound launcher {case}, call {i + 1}")
    kernels = [forward.sel_fwd_tok_kernel] if case == "tokens" else [forward.sel_fwd_kernel]
    if case.startswith("decode"):
        kernels.append(forward.merge_splits_kernel)
    for fn in kernels:
        b = bind.bound(fn)
        assert b.off is None, f"{b.name} is not bound on this Triton: {b.off}"
        assert b.bound_launches == 2, bind.report()


def test_a_tensor_off_the_gpu_is_refused_on_every_call_never_launched_as_an_address():
    """The bound launcher passes each tensor as its address only where its shape was recorded with every tensor on
    the GPU: a CPU tensor given to a kernel-level API (which trusts its caller) stays Triton's error, every call,
    and the GPU stays usable."""
    p = make_problem(B=1, S=64, G=2, h=4, Dk=64, Dv=64, T=256, n=4, dtype=torch.bfloat16, device=DEV,
                     seed=fresh_seed())
    for _ in range(3):
        direct.sel_attn_ranges(p.q, p.k, p.v, p.ranges)  # the shape is recorded and bound
    k_cpu = p.k.cpu()
    for _ in range(3):
        with pytest.raises(ValueError, match="cannot be accessed from Triton"):
            direct.sel_attn_ranges(p.q, k_cpu, p.v, p.ranges)
    out, lse = direct.sel_attn_ranges(p.q, p.k, p.v, p.ranges, return_lse=True)
    check_against_oracle(out, lse, p.q, p.k, p.v, p.ranges, what="after the refused calls")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("L", [1, 63, 64, 65, 200, 1024])
def test_dense_seed_api(dtype, L):
    g = torch.Generator(device=DEV).manual_seed(fresh_seed())
    N, H, D = 256, 8, 128
    q = torch.randn(N, H, D, device=DEV, generator=g).to(dtype)
    k = torch.randn(N, L, D, device=DEV, generator=g).to(dtype)
    v = torch.randn(N, L, D, device=DEV, generator=g).to(dtype)
    out, lse = direct.sel_attn_fwd_dense(q, k, v, return_lse=True)
    q5, k5, v5, r5 = packed_as_5d(q, k, v)
    check_against_oracle(out.reshape(N, 1, 1, H, D), lse.reshape(N, 1, 1, H), q5, k5, v5, r5, what=f"dense L={L}")
    dirty = torch.full_like(out, float("nan"))
    direct.sel_attn_fwd_dense(q, k, v, out=dirty)
    assert torch.equal(dirty, out)


@pytest.mark.parametrize("dtype", DTYPES)
def test_varlen_seed_api(dtype):
    g = torch.Generator(device=DEV).manual_seed(fresh_seed())
    lens = torch.randint(0, 700, (200,), device=DEV, generator=g)
    lens[:3] = torch.tensor([0, 1, 65], device=DEV)
    cu = torch.zeros(len(lens) + 1, dtype=torch.int32, device=DEV)
    cu[1:] = lens.cumsum(0)
    N, H, Dk, Dv = len(lens), 16, 192, 128
    total = int(cu[-1])
    q = torch.randn(N, H, Dk, device=DEV, generator=g).to(dtype)
    k_all = torch.randn(total, Dk, device=DEV, generator=g).to(dtype)
    v_all = torch.randn(total, Dv, device=DEV, generator=g).to(dtype)
    out, lse = direct.sel_attn_fwd_varlen(q, k_all, v_all, cu, return_lse=True)
    q5, k5, v5, r5 = varlen_as_5d(q, k_all, v_all, cu)
    check_against_oracle(out.reshape(1, N, 1, H, Dv), lse.reshape(1, N, 1, H), q5, k5, v5, r5, what="varlen")


@pytest.mark.parametrize("dtype", DTYPES)
def test_dispatcher_auto_on_gpu(dtype, monkeypatch):
    monkeypatch.setenv("NSA_SEL_TRITON_MIN_L", "64")
    failures.FORWARD.clear()
    p = make_problem(B=1, S=128, G=4, h=16, Dk=128, Dv=128, T=2048, n=8, dtype=dtype, device=DEV,
                     seed=fresh_seed())
    d = arguments.route_of(p.q, p.k, p.v)
    assert d.path == "triton", d.reason
    out, lse = selection_attention(p.q, p.k, p.v, p.ranges, return_lse=True)
    check_against_oracle(out, lse, p.q, p.k, p.v, p.ranges, what="dispatcher")
    assert not failures.FORWARD, dict(failures.FORWARD)
