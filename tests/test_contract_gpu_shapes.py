"""The user contract with symbolic sizes, on a GPU (Inductor): the three entry points (5-D block indices, fla's
``parallel_nsa`` and XunhaoLai's ``topk_sparse_attention`` with ``cu_seqlens``) compiled once with
``dynamic=True``, with ``torch._dynamo.mark_dynamic`` on the token and batch (or sequence) dimensions, and with
automatic dynamic shapes (the default: a second compile once a size changes), then run at four token counts —
forward and backward against eager and the float64 oracle, and the number of compiles counted.  Then
``torch.export`` (non-strict) of prefill and decode with the token and batch sizes dynamic, run at every size.

Which sizes recompile: h, Dk and Dv (kernel constants: a new value is a guard miss, ``tests/library/op/test_symbolic_shapes.py``);
nothing else.  A mode that fails where Inductor runs a Triton other than the one its torch pins (an off-pair
lane) is recorded as an xfail with the error, never skipped; on the pair it fails.
"""

from __future__ import annotations

import pytest
import torch

import contract_cases as C
from contract_cases import LSE_TOL, OUT_TOL, rel

pytestmark = [pytest.mark.gpu, pytest.mark.contract]

EAGER_TOL = 1e-3  # relative: the operator is opaque to Inductor, only the layout views around it are compiled


def _outputs(res):
    return (res[0], res[1]) if isinstance(res, tuple) else (res, None)


def _leaves(case):
    """``case`` with q, k and v made leaves that take gradients (before any ``mark_dynamic``: the marks stay
    on the very tensors the compiled call gets)."""
    for x in case.args[:3]:
        x.requires_grad_()
    return case


def _train(fn, args, seed):
    """``fn(*args)`` and the gradients of q, k and v (``args[:3]``, leaves): ``(out, lse, [dq, dk, dv])``."""
    for x in args[:3]:
        x.grad = None
    out, lse = _outputs(fn(*args))
    gen = torch.Generator(device="cuda").manual_seed(seed)
    loss = (out.double() * torch.randn(out.shape, generator=gen, device="cuda", dtype=torch.float64)).sum()
    if lse is not None:
        w = torch.randn(lse.shape, generator=gen, device="cuda", dtype=torch.float64)
        loss = loss + torch.where(torch.isfinite(lse), lse.double() * w, 0).sum()
    loss.backward()
    return out.detach(), None if lse is None else lse.detach(), [x.grad for x in args[:3]]


def _checked(compiled, case, what: str, seed: int) -> None:
    """The compiled call against the eager one (output, LSE, gradients of q, k and v) and the float64 oracle."""
    got, want = _train(compiled, case.args, seed), _train(case.fn, case.args, seed)
    errs = {"out": rel(got[0], want[0])}
    if got[1] is not None:
        fin = torch.isfinite(want[1])
        assert torch.equal(torch.isfinite(got[1]), fin), f"{what}: LSE finite where eager's is not (or back)"
        errs["lse"] = rel(got[1][fin], want[1][fin])
    errs.update({f"d{n}": rel(g, w) for n, g, w in zip("qkv", got[2], want[2])})
    bad = {n: f"{e:.2e}" for n, e in errs.items() if not e <= EAGER_TOL}
    assert not bad, f"{what}: compiled against eager: {bad}"
    q5, k5, v5 = case.native(*(x.detach().double() for x in case.args[:3]))
    ro, rl = C.oracle(q5, k5, v5, case.ranges)
    assert rel(case.out5(got[0]), ro) <= OUT_TOL, f"{what}: output against float64"
    if got[1] is not None:
        fin = torch.isfinite(rl)
        assert rel(got[1][fin], rl[fin]) <= LSE_TOL  # (the 5-D entry: native layout), f"{what}: LSE against float64"


@pytest.mark.parametrize("mode", sorted(C.COMPILES))
@pytest.mark.parametrize("entry", C.SYMBOLIC_ENTRIES)
def test_one_compile_serves_every_length(entry, mode):
    sizes = C.symbolic_sizes(entry)

    def check(compiled, case):
        _checked(compiled, case, f"{entry} {mode} {tuple(case.args[0].shape)}", seed=case.args[0].shape[1])

    graphs = C.recorded_off_pair(lambda: C.compile_at_sizes(
        entry, mode, sizes, lambda e, n, T, seed: _leaves(C.sized(e, n, T, seed=seed)), "inductor", check))
    print(f"{entry} {mode}: {graphs} compile(s) for sizes {sizes}")
    assert graphs == C.COMPILES[mode], f"{entry} {mode}: {graphs} compiles for {len(sizes)} lengths ({sizes})"


def _close(got, want):
    for g, w in zip(got, want):
        fin = torch.isfinite(w)
        assert torch.equal(torch.isfinite(g), fin)
        assert rel(g[fin], w[fin]) <= EAGER_TOL


@pytest.mark.parametrize("which", ["prefill", "decode"])
def test_export_runs_the_operator_at_every_length(which):
    sizes = C.symbolic_sizes("blocks5")
    C.recorded_off_pair(lambda: C.export_checked(which, sizes, _close))
