"""The key-major forward (small groups) against the float64 oracle, under the Triton interpreter (CPU); the
operator takes it where the planner says (``plan/keymajor.py``), gradients through it included."""

from __future__ import annotations

import os

import pytest
import torch

import keymajor_cases as C
from keymajor_cases import keymajor_from_few_rows, keymajor_here  # noqa: F401 - fixtures
import kernel_checks
from nsa_triton_sel import caches, reference, selection_attention

pytestmark = [
    pytest.mark.interp,
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                       reason="interpreter tests (a CUDA device is present: see test_keymajor_gpu)"),
]

DTYPES = [torch.float16, torch.bfloat16]


def check(out, lse, q, *args, **kw):
    # bf16 under the interpreter rounds by truncation (see test_kernels_interp.py): a looser relative bound
    factor = 4.0 if q.dtype == torch.bfloat16 else 2.0
    return kernel_checks.check_against_oracle(out, lse, q, *args, rel_factor=factor, **kw)


@pytest.mark.parametrize("name,kw,span_len", C.RANGE_CASES, ids=[c[0] for c in C.RANGE_CASES])
def test_keymajor_ranges(name, kw, span_len):
    for dtype in DTYPES:
        C.check_ranges(kw, span_len, dtype, "cpu", seed=len(name), check=check)


def test_keymajor_span_lengths_around_a_tile_and_a_hot_tile_in_chunks():
    # spans of at most L keys: two tiles when one straddles a boundary
    for L in (63, 64, 65):
        C.check_ranges(dict(B=1, S=3, G=1, h=2, Dk=16, Dv=16, T=200, n=2, empty_frac=0.0), L, torch.float16, "cpu",
                       seed=L, check=check)
    # every row reads tile 0: with 4 entries per program its readers are cut into several chunks
    C.check_blocks(1, 40, 1, 3, 16, 100, 16, 3, torch.float16, "cpu", seed=1, check=check, chunk=4, pairs=16)


def test_keymajor_block_indices():
    for positions in (False, True):
        C.check_blocks(2, 20, 2, 1, 32, 90, 16, 4, torch.float16, "cpu", seed=2, positions=positions, check=check)


def test_keymajor_keeps_an_inf_value_to_its_readers():
    C.inf_value_case(torch.float16, "cpu")


def test_operator_takes_keymajor_and_differentiates_through_it(keymajor_from_few_rows):
    from nsa_triton_sel import plan

    q, k, v, blocks, _ = C.blocks_case(1, 24, 2, 2, 16, 80, 16, 3, torch.float16, "cpu", seed=5)
    p = plan.plan_call(q, k, v, blocks, None, per_head=False, tokens=0, span_len=16, packed=False)
    assert p.forward.kernel == "keymajor" and p.dq_groups_per_pass == 2
    xs = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    out = selection_attention(*xs, block_indices=blocks, block_size=16)
    go = torch.randn_like(out)
    out.backward(go)
    from nsa_triton_sel.contract import block_indices_to_ranges

    r = block_indices_to_ranges(blocks, 16, 80)
    ys = [x.detach().double().requires_grad_() for x in (q, k, v)]
    want = reference.oracle(*ys, r)
    want.backward(go.double())
    from nsa_triton_sel import failures

    assert not failures.FORWARD and not failures.BACKWARD, "a kernel failed (the packed-SDPA path answered)"
    assert (out.double() - want).abs().max() < 5e-3
    for x, y in zip(xs, ys):
        assert (x.grad.double() - y.grad).abs().max() < 2e-2 * max(1.0, float(y.grad.abs().max()))


@pytest.mark.parametrize("case", [
    dict(B=1, S=20, G=2, h=1, D=32, T=150, bs=16, n=4, positions=True),  # multi-span rows, partial last tile
    dict(B=2, S=9, G=1, h=3, D=16, Dv=48, T=65, bs=16, n=3, lse_grad=True),  # odd h, Dk != Dv, the LSE's gradient
    dict(B=1, S=6, G=1, h=2, D=192, Dv=64, T=70, bs=32, n=2),  # Dk = 192: two Dk slices, 32-key tiles
], ids=["h1-multispan-positions", "h3-dv48-lse-grad", "dk192"])
def test_keymajor_dq_gradients_against_float64(keymajor_from_few_rows, case):
    case = dict(case)
    args = [case.pop(x) for x in ("B", "S", "G", "h", "D", "T", "bs", "n")]
    C.check_operator_gradients(*args, torch.float16, "cpu", seed=sum(args), **case)


def test_keymajor_backward_in_passes_of_kv_heads(keymajor_from_few_rows, monkeypatch):
    """One KV head per pass, two batch entries: each pass's dk/dv lands in its slice of the whole gradient."""
    import importlib

    from nsa_triton_sel import plan

    km = importlib.import_module("nsa_triton_sel.plan.keymajor")
    # room for one KV head's partials (24 rows x 3 tiles x 2 heads, D = 16), not two
    monkeypatch.setattr(km, "WORKSPACE_BYTES", km.workspace_bytes(24, 3, 2, 16, 16))
    caches.clear()
    q, k, v, blocks, _ = C.blocks_case(2, 12, 3, 2, 16, 60, 16, 3, torch.float16, "cpu", seed=7)
    p = plan.plan_call(q, k, v, blocks, None, per_head=False, tokens=0, span_len=16, packed=False)
    assert (p.forward.kernel, p.forward.meta.groups_per_pass, p.dq_groups_per_pass) == ("keymajor", 1, 1)
    C.check_operator_gradients(2, 12, 3, 2, 16, 60, 16, 3, torch.float16, "cpu", seed=7)


def test_keymajor_partials_keep_values_past_float16(keymajor_from_few_rows):
    C.check_values_past_float16("cpu")


def test_keymajor_partials_keep_small_columns_beside_an_outlier(keymajor_from_few_rows):
    C.check_small_columns_beside_an_outlier("cpu")


def test_keymajor_partial_dq_keeps_an_lse_gradient_past_float16(keymajor_from_few_rows):
    C.check_lse_gradient_past_float16("cpu")


def test_keymajor_backward_keeps_an_inf_key_to_its_readers(keymajor_from_few_rows):
    C.check_inf_key_confined("cpu")


def test_keymajor_backward_keeps_a_nan_query_to_its_own_keys(keymajor_from_few_rows):
    C.check_nan_query_confined("cpu")


def test_keymajor_backward_reads_the_forward_reader_lists(keymajor_from_few_rows, monkeypatch):
    C.check_backward_reads_forward_readers("cpu", torch.float16, monkeypatch)
