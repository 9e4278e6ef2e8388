"""The key-major forward's warp-specialised Gluon partial kernel (``kernels/keymajor_ws.py``) on a CUDA device
whose Triton has it (sm_90, Triton >= 3.6): it is the kernel that runs (the profiler names it), its results are
the Triton partial kernel's bit for bit (NaN where it has NaN) and the float64 oracle's within tolerance, on fresh
random inputs: odd and even groups, multi-span rows, empty rows, L just over 64, a last partial key tile, NSA
block selections, non-finite values, int64 offsets; it falls back to the Triton kernel for rows it cannot copy
16 bytes at a time, and captures in a CUDA graph.  Run with ``pytest -m gpu``."""

from __future__ import annotations

import pytest
import torch

import keymajor_cases as C
from keymajor_cases import gluon_here  # noqa: F401 - a fixture
from kernel_checks import check_against_oracle, fresh_seed
from nsa_triton_sel.contract import block_indices_to_ranges
from nsa_triton_sel.kernels import direct

pytestmark = pytest.mark.gpu
DEV = "cuda"
WS_KERNEL = "sel_fwd_keymajor_ws_kernel"
TRITON_KERNEL = "sel_fwd_keymajor_kernel"
KERNELS = (WS_KERNEL, TRITON_KERNEL)


def both(q, k, v, spans, **kw):
    """``(out, lse)`` of the warp-specialised kernel and of the Triton partial kernel; checks which one ran."""
    ws = lambda: direct.sel_attn_keymajor(q, k, v, spans, return_lse=True, **kw)  # noqa: E731
    tr = lambda: direct.sel_attn_keymajor(q, k, v, spans, return_lse=True, gluon_ws=False, **kw)  # noqa: E731
    got, want = ws(), tr()
    assert C.kernels_run(ws, KERNELS) == {WS_KERNEL}
    assert C.kernels_run(tr, KERNELS) == {TRITON_KERNEL}
    return got, want


def assert_same(got, want, what):
    C.assert_same_bits(got, want, ("out", "lse"), what, "the Triton partial kernel's")


@pytest.mark.parametrize("name,kw,span_len", C.GLUON_RANGE_CASES, ids=[c[0] for c in C.GLUON_RANGE_CASES])
def test_ws_ranges_match_the_triton_kernel_and_the_oracle(gluon_here, name, kw, span_len):
    seed = fresh_seed()
    q, k, v, r = C.ranges_case(kw, span_len, torch.bfloat16, DEV, seed)
    got, want = both(q, k, v, r, span_len=span_len)
    assert_same(got, want, f"{name} seed={seed}")
    check_against_oracle(*got, q, k, v, r, what=f"ws {name} seed={seed}")
    C.check_ranges(kw, span_len, torch.bfloat16, DEV, seed)  # every output element written


@pytest.mark.parametrize("h", [1, 2, 4, 6, 8])
def test_ws_nsa_blocks_match_the_triton_kernel_and_the_oracle(gluon_here, h):
    seed = fresh_seed()
    q, k, v, blocks, pos = C.blocks_case(1, 700, 2, h, 128, 1999, 64, 16, torch.bfloat16, DEV, seed,
                                         positions=True)
    got, want = both(q, k, v, blocks, block_size=64, positions=pos)
    assert_same(got, want, f"h={h} seed={seed}")
    check_against_oracle(*got, q, k, v, block_indices_to_ranges(blocks, 64, 1999, pos), what=f"ws blocks h={h}")


def test_ws_chunks_of_a_hot_tile_and_passes_over_groups(gluon_here):
    seed = fresh_seed()
    q, k, v, blocks, _ = C.blocks_case(2, 300, 3, 2, 128, 300, 64, 4, torch.bfloat16, DEV, seed)
    got, want = both(q, k, v, blocks, block_size=64, chunk=8, groups_per_pass=2)
    assert_same(got, want, f"seed={seed}")


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", "all three"])
def test_ws_non_finite_values_give_the_triton_kernels_results(gluon_here, bad):
    """A value tile with a non-finite value takes the isolating walk: NaN (or inf) reaches exactly the columns
    that the Triton kernel gives it to, and every other tile's results are unchanged."""
    seed = fresh_seed()
    q, k, v, blocks, pos = C.blocks_case(1, 512, 2, 4, 128, 1024, 64, 8, torch.bfloat16, DEV, seed,
                                         positions=True)
    values = {"nan": [float("nan")], "inf": [float("inf")], "-inf": [float("-inf")],
              "all three": [float("nan"), float("inf"), float("-inf")]}[bad]
    for i, x in enumerate(values):  # keys in three different tiles, two columns each
        v[0, i % 2, 70 + 300 * i, 5 + i] = x
        v[0, i % 2, 71 + 300 * i, 100 - i] = x
    got, want = both(q, k, v, blocks, block_size=64, positions=pos)
    assert_same(got, want, f"{bad} seed={seed}")
    assert not torch.isfinite(got[0]).all(), "no reader got the non-finite value"


def test_ws_offsets_past_2_31_elements(gluon_here):
    """A batch stride past 2^31 elements in q, k and v: the row offsets are int64."""
    seed = fresh_seed()
    q, k, v, blocks, T = C.q_past_2_31_elements(seed, DEV)
    got, want = both(q, k, v, blocks, block_size=64)
    assert_same(got, want, f"seed={seed}")
    q_small = q.contiguous()
    del q
    check_against_oracle(*got, q_small, k, v, block_indices_to_ranges(blocks, 64, T), what="ws int64 offsets")


def test_ws_falls_back_for_rows_it_cannot_copy_16_bytes_at_a_time(gluon_here):
    """q whose address is not 16-byte aligned: the Triton partial kernel runs, with the same results."""
    seed = fresh_seed()
    q, k, v, blocks, _ = C.blocks_case(1, 300, 2, 4, 128, 600, 64, 8, torch.bfloat16, DEV, seed)
    shifted = torch.empty(q.numel() + 1, dtype=q.dtype, device=DEV)[1:].view(q.shape)
    shifted.copy_(q)
    run = lambda: direct.sel_attn_keymajor(shifted, k, v, blocks, block_size=64, return_lse=True)  # noqa: E731
    assert C.kernels_run(run, KERNELS) == {TRITON_KERNEL}
    assert_same(run(), direct.sel_attn_keymajor(q, k, v, blocks, block_size=64, return_lse=True), f"seed={seed}")


def test_ws_is_deterministic_and_captures_in_a_cuda_graph(gluon_here):
    q, k, v, blocks, _ = C.blocks_case(1, 2048, 4, 4, 128, 2048, 64, 16, torch.bfloat16, DEV, fresh_seed())
    run = lambda: direct.sel_attn_keymajor(q, k, v, blocks, block_size=64, return_lse=True)  # noqa: E731
    assert C.kernels_run(run, KERNELS) == {WS_KERNEL}
    C.check_deterministic_and_graph(run)
