"""The key-major backward's Gluon kernel (``kernels/keymajor_bwd_gluon.py``) on a CUDA device whose Triton has it
(sm_90, Triton >= 3.6): it is the kernel that runs (the profiler names it), its dq, dk and dv are the Triton
kernel's bit for bit (NaN where it has NaN) and float64 autograd's within tolerance, on fresh random inputs: odd and
even groups, NSA block selections with positions, multi-span rows, rows without keys, L just over 64, a last partial
key tile, tiles split over programs, passes over KV heads, non-finite q, k, v and dO (the chunks it hands to the
Triton kernel's isolating walk), int64 offsets; it falls back to the Triton kernel for rows it cannot copy 16 bytes
at a time, is bitwise deterministic and captures in a CUDA graph.  Run with ``pytest -m gpu``."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import keymajor_cases as C
from keymajor_cases import gluon_here  # noqa: F401 - a fixture
from kernel_checks import fresh_seed
from nsa_triton_sel import caches, plan, selection_attention
from nsa_triton_sel.contract import block_indices_to_ranges, resolve_scale
from nsa_triton_sel.kernels import launch

KM = __import__("importlib").import_module("nsa_triton_sel.plan.keymajor")  # the package exports a function of its name

pytestmark = pytest.mark.gpu
DEV = "cuda"
GLUON_KERNEL = "sel_bwd_keymajor_gluon_kernel"
TRITON_KERNEL = "sel_bwd_keymajor_kernel"
KERNELS = (GLUON_KERNEL, TRITON_KERNEL)


def keyed_plans(q, k, v, spans, pos, span_len, blocks, **replace):
    """The operator's key-major plan for the call (the path forced on) with its backward's Gluon kernel, and the
    same plan with the Triton kernel alone; ``replace``: plan fields to change in both (chunks, passes)."""
    with KM.forced("key"):
        p = plan.plan_call(q, k, v, spans, pos, per_head=False, tokens=0, span_len=span_len, packed=False,
                           grad=True)
    assert p.forward.kernel == "keymajor" and p.dq_groups_per_pass > 0, (p.forward.kernel, p.dq_groups_per_pass)
    assert p.forward.meta.bwd_gluon, "the plan does not take the Gluon backward kernel"
    p = dataclasses.replace(p, **replace)
    off = dataclasses.replace(p, forward=dataclasses.replace(
        p.forward, meta=dataclasses.replace(p.forward.meta, bwd_gluon=False)))
    return p, off


def both(q, k, v, spans, *, pos=None, block_size=0, span_len=0, go=None, expect=None, **replace):
    """``(dq, dk, dv)`` of the backward with the Gluon kernel and with the Triton kernel alone (the same forward,
    output gradient and plan otherwise); checks which kernels ran (``expect``: the Gluon run's, default both: the
    Triton kernel's programs return at once on the chunks the Gluon kernel walked)."""
    blocks = spans.dim() == 4
    bs = block_size or span_len
    ranges = block_indices_to_ranges(spans, bs, k.shape[2], pos) if blocks else spans
    gluon, triton_only = keyed_plans(q, k, v, spans, pos, bs, blocks, **replace)
    sc = resolve_scale(None, q.shape[-1])
    out, lse = launch.forward(triton_only, q, k, v, spans, pos, scale=sc, block_size=block_size)
    if go is None:
        go = torch.randn_like(out)
    run = {name: (lambda p=p: launch.backward(p, q, k, v, ranges, out, lse, go, None, scale=sc))
           for name, p in (("gluon", gluon), ("triton", triton_only))}
    assert C.kernels_run(run["gluon"], KERNELS) == (expect or {GLUON_KERNEL, TRITON_KERNEL})
    assert C.kernels_run(run["triton"], KERNELS) == {TRITON_KERNEL}
    return run["gluon"](), run["triton"]()


def assert_same(got, want, what):
    C.assert_same_bits(got, want, ("dq", "dk", "dv"), what, "the Triton kernel's")


@pytest.mark.parametrize("name,kw,span_len", C.GLUON_RANGE_CASES, ids=[c[0] for c in C.GLUON_RANGE_CASES])
def test_gluon_backward_on_ranges_matches_the_triton_kernel(gluon_here, name, kw, span_len):
    seed = fresh_seed()
    q, k, v, r = C.ranges_case(kw, span_len, torch.bfloat16, DEV, seed)
    got, want = both(q, k, v, r, span_len=span_len)
    assert_same(got, want, f"{name} seed={seed}")


@pytest.mark.parametrize("h", [1, 2, 3, 4, 6, 8])
def test_gluon_backward_on_nsa_blocks_matches_the_triton_kernel(gluon_here, h):
    seed = fresh_seed()
    q, k, v, blocks, pos = C.blocks_case(1, 700, 2, h, 128, 1999, 64, 16, torch.bfloat16, DEV, seed,
                                         positions=True)
    got, want = both(q, k, v, blocks, pos=pos, block_size=64)
    assert_same(got, want, f"h={h} seed={seed}")


@pytest.mark.parametrize("h", [1, 3, 8])
def test_gluon_backward_gradients_against_float64_autograd(gluon_here, h):
    """The operator itself (the planner takes the Gluon kernel here): output, dq, dk, dv and the LSE's gradient
    against float64 autograd of the oracle."""
    caches.clear()
    with KM.forced("key"):
        q, k, v, blocks, pos = C.blocks_case(1, 300, 2, h, 128, 700, 64, 8, torch.bfloat16, DEV, fresh_seed(),
                                             positions=True)
        xs = [x.detach().clone().requires_grad_() for x in (q, k, v)]
        go = torch.randn(q.shape, device=DEV, dtype=q.dtype)  # a dense output gradient (a sum's is stride 0)
        step = lambda: selection_attention(*xs, block_indices=blocks, block_size=64, positions=pos).backward(go)  # noqa: E731
        assert GLUON_KERNEL in C.kernels_run(step, KERNELS)
        C.check_operator_gradients(1, 300, 2, h, 128, 700, 64, 8, torch.bfloat16, DEV, seed=fresh_seed(),
                                   positions=True, lse_grad=True)
    caches.clear()


def test_gluon_backward_split_tiles_and_passes_over_kv_heads(gluon_here):
    """Hot tiles split over several programs (their dk/dv summed by the reduction) and one KV head a pass."""
    seed = fresh_seed()
    q, k, v, blocks, _ = C.blocks_case(2, 300, 3, 2, 128, 300, 64, 4, torch.bfloat16, DEV, seed)
    got, want = both(q, k, v, blocks, block_size=64, reader_chunk=8, dq_groups_per_pass=1)
    assert_same(got, want, f"seed={seed}")


@pytest.mark.parametrize("where", ["q", "k", "v", "dO"])
def test_gluon_backward_with_non_finite_values_gives_the_triton_kernels_results(gluon_here, where):
    """A non-finite q or dO row (the non-finite flag: every chunk goes to the Triton kernel's isolating walk) or a
    key tile with a non-finite k or v value (that tile's chunks go to it): NaN reaches exactly what the Triton
    kernel gives it to."""
    seed = fresh_seed()
    q, k, v, blocks, pos = C.blocks_case(1, 512, 2, 4, 128, 1024, 64, 8, torch.bfloat16, DEV, seed,
                                         positions=True)
    go = torch.randn(q.shape, device=DEV, dtype=q.dtype)
    x = {"q": q, "k": k, "v": v, "dO": go}[where]
    if where in ("k", "v"):  # keys in three different tiles
        x[0, 0, 70, 5], x[0, 1, 370, 17], x[0, 0, 670, :] = float("nan"), float("inf"), float("-inf")
    else:
        x[0, 100, 1, 2, 3] = float("nan")
    got, want = both(q, k, v, blocks, pos=pos, block_size=64, go=go)
    assert_same(got, want, f"{where} seed={seed}")
    assert not all(torch.isfinite(g).all() for g in got), "no gradient got the non-finite value"


def test_gluon_backward_offsets_past_2_31_elements(gluon_here):
    """A batch stride past 2^31 elements in q: its row offsets are int64."""
    seed = fresh_seed()
    q, k, v, blocks, T = C.q_past_2_31_elements(seed, DEV)
    got, want = both(q, k, v, blocks, block_size=64)
    assert_same(got, want, f"seed={seed}")
    # and against the same call on a compact q (offsets under 2^31)
    q_small = q.contiguous()
    del q
    small, _ = both(q_small, k, v, blocks, block_size=64, go=None)
    assert torch.isfinite(small[0]).all()


def test_gluon_backward_falls_back_for_rows_it_cannot_copy_16_bytes_at_a_time(gluon_here):
    """q whose address is not 16-byte aligned: the Triton kernel alone runs, with the same results."""
    seed = fresh_seed()
    q, k, v, blocks, _ = C.blocks_case(1, 300, 2, 4, 128, 600, 64, 8, torch.bfloat16, DEV, seed)
    shifted = torch.empty(q.numel() + 1, dtype=q.dtype, device=DEV)[1:].view(q.shape)
    shifted.copy_(q)
    go = torch.randn(q.shape, device=DEV, dtype=q.dtype)
    got, want = both(shifted, k, v, blocks, block_size=64, go=go, expect={TRITON_KERNEL})
    assert_same(got, want, f"seed={seed}")


def test_gluon_backward_is_deterministic_and_captures_in_a_cuda_graph(gluon_here):
    """Through the operator: the training step's gradients bit for bit on a second run and from a CUDA graph."""
    caches.clear()
    with KM.forced("key"):
        q, k, v, blocks, pos = C.blocks_case(1, 2048, 4, 4, 128, 2048, 64, 16, torch.bfloat16, DEV, fresh_seed(),
                                             positions=True)
        xs = [x.detach().clone().requires_grad_() for x in (q, k, v)]
        go = torch.randn(q.shape, device=DEV, dtype=q.dtype)
        forward = lambda: selection_attention(*xs, block_indices=blocks, block_size=64, positions=pos)  # noqa: E731
        assert GLUON_KERNEL in C.kernels_run(lambda: forward().backward(go), KERNELS)
        C.check_training_step_deterministic_and_graph(xs, forward, go)
    caches.clear()
