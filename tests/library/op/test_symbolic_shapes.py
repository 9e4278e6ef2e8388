"""Symbolic sizes on the CPU (the kernels under the interpreter): ``torch.compile(dynamic=True)``,
``torch._dynamo.mark_dynamic`` and automatic dynamic shapes on the three entry points (5-D block indices, fla's
``parallel_nsa`` and XunhaoLai's ``topk_sparse_attention`` with ``cu_seqlens``), and non-strict
``torch.export`` of prefill and decode.  What a trace decides with symbolic sizes is the same on every device:
h, Dk and Dv are kernel constants, specialised behind a guard; the token, batch and packed sizes stay
symbolic, so one compile serves every length.  ``tests/test_contract_gpu_shapes.py`` runs the same cases with
Inductor on a GPU, gradients included."""

from __future__ import annotations

import os

import pytest
import torch

import contract_cases as C

pytestmark = [
    pytest.mark.interp,
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="CPU operator tests use the interpreter"),
    pytest.mark.usefixtures("every_row_through_triton"),
]

SMALL = dict(device="cpu", dtype=torch.float16, d=16, g=1)  # the interpreter runs one program per (row, group)
TOKENS = {"blocks5": (34, 36, 38, 40), "fla": (40, 48, 56, 72), "xunhaolai": (40, 48, 56, 72)}
BATCH = {"blocks5": (2, 5), "fla": (7, 9), "xunhaolai": (7, 9)}  # (with g = 1: see contract_cases.SYMBOLIC_BATCH)


def _equal(got, want):
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        assert torch.equal(g, w)


# The 5-D entry's interpreter runs are the slowest (a program per row): the mode that needs a symbolic size
# all the way down runs here, the others on the GPU (test_contract_gpu_shapes.py).
CASES = [(e, m) for e in C.SYMBOLIC_ENTRIES for m in sorted(C.COMPILES) if e != "blocks5" or m == "dynamic"]


@pytest.mark.parametrize(("entry", "mode"), CASES)
def test_one_compile_serves_every_length(entry, mode):
    make = lambda entry, n, T, seed: C.sized(entry, n, T, seed=seed, **SMALL)  # noqa: E731
    sizes = C.symbolic_sizes(entry, TOKENS[entry], BATCH[entry])
    graphs = C.compile_at_sizes(entry, mode, sizes, make, "aot_eager",
                                lambda compiled, case: _equal(compiled(*case.args), case.fn(*case.args)))
    assert graphs == C.COMPILES[mode], f"{entry} {mode}: {graphs} compiles for the sizes {sizes}"


def test_a_new_head_count_recompiles_behind_a_guard():
    """h is a kernel constant: a new h under dynamic=True is a guard miss and one more compile, not a crash."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(C._xunhaolai, dynamic=True, fullgraph=True, backend="aot_eager")
    for h in (3, 3, 5):
        case = C.sized("xunhaolai", 7, 40, seed=h, device="cpu", dtype=torch.float16, d=16, g=2, h=h)
        _equal(compiled(*case.args), case.fn(*case.args))
    assert C.graphs() == 2


@pytest.mark.parametrize("which", ["prefill", "decode"])
def test_export_runs_the_operator_at_every_length(which):
    tokens = TOKENS["blocks5"][:3] if which == "prefill" else C.SYMBOLIC_TOKENS  # (decode: one row per batch entry)
    C.export_checked(which, C.symbolic_sizes("blocks5", tokens, BATCH["blocks5"]), _equal, **SMALL)
