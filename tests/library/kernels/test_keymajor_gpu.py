"""The key-major forward (small groups) on a CUDA device, bf16 and fp16: against the float64 oracle on fresh
random inputs, every output element written, bit-identical on a second run, captured in a CUDA graph, and taken
by the operator where the planner says.  Run with ``pytest -m gpu``."""

from __future__ import annotations

import pytest
import torch

import keymajor_cases as C
from keymajor_cases import keymajor_from_few_rows, keymajor_here  # noqa: F401 - fixtures
from kernel_checks import fresh_seed
from nsa_triton_sel import caches, plan, selection_attention
from nsa_triton_sel.contract import block_indices_to_ranges
from nsa_triton_sel.kernels import direct

pytestmark = pytest.mark.gpu
DTYPES = [torch.bfloat16, torch.float16]
DEV = "cuda"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,kw,span_len", C.RANGE_CASES, ids=[c[0] for c in C.RANGE_CASES])
def test_keymajor_ranges(keymajor_here, name, kw, span_len, dtype):
    C.check_ranges(kw, span_len, dtype, DEV, seed=fresh_seed())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("h", [1, 3, 8])
def test_keymajor_nsa_blocks(keymajor_here, h, dtype):
    # the canonical NSA selection (16 blocks of 64, causal, positions) over 2K keys, T not a multiple of 64
    C.check_blocks(1, 1000, 2, h, 128, 1999, 64, 16, dtype, DEV, seed=fresh_seed(), positions=True)


def test_keymajor_hot_tile_split_and_groups_in_passes(keymajor_here):
    C.check_blocks(2, 300, 3, 2, 64, 300, 32, 4, torch.bfloat16, DEV, seed=fresh_seed(), chunk=8,
                   groups_per_pass=2)


def test_keymajor_keeps_an_inf_value_to_its_readers(keymajor_here):
    C.inf_value_case(torch.bfloat16, DEV)


def test_keymajor_is_deterministic_and_captures_in_a_cuda_graph(keymajor_here):
    q, k, v, blocks, pos = C.blocks_case(1, 2048, 4, 4, 128, 2048, 64, 16, torch.bfloat16, DEV, fresh_seed())
    run = lambda: direct.sel_attn_keymajor(q, k, v, blocks, block_size=64, return_lse=True)  # noqa: E731
    C.check_deterministic_and_graph(run)


@pytest.mark.parametrize("h", [1, 4])
def test_operator_takes_the_path_the_path_table_gives_for_small_groups(h):
    """Random selections (neighbouring tokens share few spans): key-major wherever the path table's verdict for
    this GPU is not NEVER (on the H100 both h = 1 and h = 4 at 4K) and the Triton compiles the key-major kernels
    here; token-major everywhere else."""
    import importlib

    from nsa_triton_sel import config
    from nsa_triton_sel.device import device_of

    km = importlib.import_module("nsa_triton_sel.plan.keymajor")
    caches.clear()
    q, k, v, blocks, _ = C.blocks_case(1, 4096, 2, h, 128, 4096, 64, 16, torch.bfloat16, DEV, fresh_seed())
    verdict = km.path_verdict(config.load_path_entries(), device_of(q.device).name, h=h, T=4096, grad=False)
    why_not = C.why_no_keymajor(q.device)
    p = plan.plan_call(q, k, v, blocks, None, per_head=False, tokens=0, span_len=64, packed=False)
    assert (p.forward.kernel == "keymajor") == (verdict != km.NEVER and why_not is None), (verdict, why_not,
                                                                                            p.forward.kernel)
    out = selection_attention(q, k, v, block_indices=blocks, block_size=64)
    want = direct.sel_attn_ranges(q, k, v, block_indices_to_ranges(blocks, 64, 4096))
    assert (out.float() - want.float()).abs().max() < 2e-2


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", [
    dict(B=1, S=300, G=2, h=1, D=128, T=700, bs=64, n=8, positions=True),
    dict(B=2, S=150, G=1, h=3, D=64, Dv=128, T=333, bs=32, n=5, lse_grad=True),
    dict(B=1, S=200, G=2, h=4, D=192, Dv=128, T=400, bs=64, n=4),
], ids=["h1-nsa", "h3-dv128-lse-grad", "h4-dk192"])
def test_keymajor_dq_gradients(keymajor_from_few_rows, case, dtype):
    case = dict(case)
    args = [case.pop(x) for x in ("B", "S", "G", "h", "D", "T", "bs", "n")]
    C.check_operator_gradients(*args, dtype, DEV, seed=fresh_seed(), **case)


def test_keymajor_backward_is_bitwise_deterministic_and_captures_in_a_cuda_graph(keymajor_here):
    q, k, v, blocks, pos = C.blocks_case(1, 2048, 4, 2, 128, 2048, 64, 16, torch.bfloat16, DEV, fresh_seed(),
                                         positions=True)
    p = plan.plan_call(q, k, v, blocks, pos, per_head=False, tokens=0, span_len=64, packed=False)
    assert p.forward.kernel == "keymajor" and p.dq_groups_per_pass > 0
    xs = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    go = torch.randn(q.shape[:-1] + (v.shape[-1],), device=DEV, dtype=q.dtype)
    C.check_training_step_deterministic_and_graph(
        xs, lambda: selection_attention(*xs, block_indices=blocks, block_size=64, positions=pos), go)


def test_keymajor_partials_keep_values_past_float16(keymajor_from_few_rows):
    C.check_values_past_float16("cuda")


def test_keymajor_partials_keep_small_columns_beside_an_outlier(keymajor_from_few_rows):
    C.check_small_columns_beside_an_outlier("cuda")


def test_keymajor_partial_dq_keeps_an_lse_gradient_past_float16(keymajor_from_few_rows):
    C.check_lse_gradient_past_float16("cuda")


def test_keymajor_backward_keeps_an_inf_key_to_its_readers(keymajor_from_few_rows):
    C.check_inf_key_confined(DEV)


def test_keymajor_backward_keeps_a_nan_query_to_its_own_keys(keymajor_from_few_rows):
    C.check_nan_query_confined(DEV)


def test_keymajor_backward_reads_the_forward_reader_lists(keymajor_from_few_rows, monkeypatch):
    C.check_backward_reads_forward_readers(DEV, torch.bfloat16, monkeypatch)
