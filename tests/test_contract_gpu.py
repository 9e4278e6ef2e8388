"""The user contract on a GPU: every entry point, in every way a user runs it, against float64.

Entry points (``contract_cases.ENTRIES``): 5-D ranges, 5-D block indices, decode (S = 1), a packed batch
(``cu_seqlens``), the ``[B, T, HQ, D]`` and ``[T, HQ, D]`` layouts, fla's and XunhaoLai's drop-ins.
Modes: eager, eager after warm-up (signature, route and plan remembered), ``torch.compile`` default,
``fullgraph=True`` and ``mode="reduce-overhead"`` (each after eager warm-up calls), and a training step
(forward + backward) captured in a CUDA graph and replayed on new values.  Checked every time: the output,
the LSE and the gradients of q, k and v (through the output and the LSE) against the float64 oracle on
fresh values, and 0 graph breaks under ``torch.compile``.  A repeated decode step without autograd, which
replays its launches (``replay.py``), is checked against float64 and bit for bit against the way down.

A compile mode that fails where Inductor runs a Triton other than the one its torch pins (an off-pair GPU
lane) is recorded as an xfail with the error and the reason, never skipped; on the pair it fails.
"""

from __future__ import annotations

import pytest
import torch

import contract_cases as C
from contract_cases import GRAD_TOL, LSE_TOL, OUT_TOL, rel

from nsa_triton_sel import selection_attention

pytestmark = [pytest.mark.gpu, pytest.mark.contract]

MODES = ("eager", "warm", "compile", "fullgraph", "reduce-overhead", "graph")


def _loss_weights(case, out, lse, gen):
    go = torch.randn(out.shape, generator=gen, device="cuda", dtype=torch.float64)
    gl = torch.randn(lse.shape, generator=gen, device="cuda", dtype=torch.float64) if lse is not None else None
    return go, gl


def _loss(out, lse, go, gl):
    loss = (out.double() * go).sum()
    if lse is not None:
        loss = loss + torch.where(torch.isfinite(lse), lse.double() * gl, 0).sum()
    return loss


def check(case, fn, what, *, leaves=None, seed=0):
    """Run ``fn`` (the entry's call, maybe compiled) on fresh leaves with grad; compare with float64."""
    q, k, v = leaves if leaves is not None else (x.requires_grad_() for x in case.make())
    out, lse = fn(q, k, v)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    go, gl = _loss_weights(case, out, lse, gen)
    _loss(out, lse, go, gl).backward()
    xs = [x.detach().double().requires_grad_() for x in (q, k, v)]
    q5, k5, v5 = case.native(*xs)
    ro, rl = C.oracle(q5, k5, v5, case.ranges)
    if case.has_lse:
        _loss(ro, rl, go.view(ro.shape), gl.view(rl.shape)).backward()
    else:
        _loss(ro, None, go.view(ro.shape), None).backward()
    errs = {"out": rel(case.out5(out.detach()), ro)}
    if case.has_lse:
        fin = torch.isfinite(rl)
        lse_n = case.lse4(lse.detach())
        assert torch.equal(torch.isfinite(lse_n), fin), f"{what}: LSE finite where the oracle's is not (or back)"
        errs["lse"] = rel(lse_n[fin], rl[fin])
    for name, x, r in zip("qkv", (q, k, v), xs):
        assert x.grad is not None, f"{what}: no gradient for {name}"
        errs[f"d{name}"] = rel(x.grad, r.grad)
    bounds = {"out": OUT_TOL, "lse": LSE_TOL, "dq": GRAD_TOL, "dk": GRAD_TOL, "dv": GRAD_TOL}
    bad = {n: f"{e:.2e} > {bounds[n]:.0e}" for n, e in errs.items() if not e <= bounds[n]}
    assert not bad, f"{what}: {bad}"
    return out.detach(), errs


def _compiled(fn, mode):
    kw = {"fullgraph": True} if mode == "fullgraph" else {"mode": "reduce-overhead"} if mode == "reduce-overhead" else {}
    return torch.compile(fn, **kw)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("entry", C.ENTRIES)
def test_the_contract_holds(entry, mode):
    case = C.build(entry, seed=C.ENTRIES.index(entry))
    if mode == "eager":
        check(case, case.call, f"{entry} eager")
        return
    for i in range(3):  # warm-up: the signature, route and plan are remembered (the old express lane's case)
        check(case, case.call, f"{entry} eager call {i + 1}", seed=i)
    if mode == "warm":
        return
    if mode == "graph":
        return graph_step(case, entry)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    fn = _compiled(case.call, mode)

    def calls():
        for i in range(3):  # reduce-overhead records its CUDA graph on a later call
            check(case, fn, f"{entry} {mode} call {i + 1}", seed=10 + i)

    C.recorded_off_pair(calls)
    breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
    assert breaks == 0, f"{entry} {mode}: {breaks} graph break(s): {dict(torch._dynamo.utils.counters['graph_break'])}"


def graph_step(case, entry):
    """A training step (forward + backward) captured in a CUDA graph and replayed on new values."""
    q, k, v = (x.requires_grad_() for x in case.make())
    gen = torch.Generator(device="cuda").manual_seed(5)
    with torch.no_grad():  # (no autograd graph may outlive this: its AccumulateGrad nodes would break capture)
        out, lse = case.call(q, k, v)
    go, gl = _loss_weights(case, out, lse, gen)
    del out, lse

    def step():
        for x in (q, k, v):
            x.grad = None
        o, l = case.call(q, k, v)
        _loss(o, l, go, gl).backward()
        return o

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = step()
    grads = [x.grad for x in (q, k, v)]
    for rep in range(2):  # replay on new values, compared with float64
        fresh = case.make()
        with torch.no_grad():
            for x, y in zip((q, k, v), fresh):
                x.copy_(y)
        graph.replay()
        torch.cuda.synchronize()
        xs = [x.detach().double().requires_grad_() for x in (q, k, v)]
        ro, rl = C.oracle(*case.native(*xs), case.ranges)
        _loss(ro, rl if case.has_lse else None, go.view(ro.shape), gl.view(rl.shape) if case.has_lse else None).backward()
        errs = {"out": rel(case.out5(static_out.detach()), ro)}
        errs.update({f"d{n}": rel(g, r.grad) for n, g, r in zip("qkv", grads, xs)})
        bad = {n: f"{e:.2e}" for n, e in errs.items() if not e <= (OUT_TOL if n == "out" else GRAD_TOL)}
        assert not bad, f"{entry} CUDA-graph replay {rep + 1}: {bad}"


def test_lse_gradients_of_the_kernels_are_as_good_as_the_reference_paths():
    """The Triton path's gradients through the LSE within 2x the reference path's error (float64 oracle)."""
    case = C.build("blocks5", seed=42)
    errs = {}
    for backend in ("triton", "sdpa"):
        q, k, v = (x.requires_grad_() for x in case.make())
        C_GEN = torch.Generator(device="cuda").manual_seed(3)
        from nsa_triton_sel import selection_attention

        out, lse = selection_attention(q, k, v, block_indices=None, ranges=case.ranges, return_lse=True,
                                       backend=backend)
        gl = torch.randn(lse.shape, generator=C_GEN, device="cuda", dtype=torch.float64)
        torch.where(torch.isfinite(lse), lse.double() * gl, 0).sum().backward()  # the LSE alone
        xs = [x.detach().double().requires_grad_() for x in (q, k, v)]
        _, rl = C.oracle(*xs, case.ranges)
        torch.where(torch.isfinite(rl), rl * gl, 0).sum().backward()
        errs[backend] = {n: rel(x.grad, r.grad) for n, x, r in zip("qk", (q, k), xs)}
    for n in "qk":
        assert errs["triton"][n] <= 2 * max(errs["sdpa"][n], 1e-3), errs


@pytest.mark.parametrize("spans", ["ranges", "blocks"])
@pytest.mark.parametrize("rows", [4, 160], ids=["split-decode", "one-launch"])
def test_a_repeated_decode_step_replays_its_launches(spans, rows):
    """A decode step (S = 1, ``validate=False``, no autograd) called again and again replays its signature's
    launches (``replay.py``) from its fourth call: right against float64 and equal bit for bit to the way down on
    the same values, with and without the LSE, through the split-L decode (two launches, two workspaces) and one
    launch.  A call a replay may not answer (autograd, a misaligned or transposed q, CUDA-graph capture,
    ``torch.compile``) takes the way down and is right too."""
    from nsa_triton_sel import replay

    T = 300
    gen = torch.Generator().manual_seed(rows)
    blocks = torch.stack([C.causal_blocks(1, torch.tensor([T - 1]), gen) for _ in range(rows)]).to("cuda")
    positions = torch.full((rows, 1), T - 1, device="cuda")
    ranges = C.block_indices_to_ranges(blocks, C.BS, T, positions)
    dgen = torch.Generator(device="cuda").manual_seed(rows)

    def fresh():
        return (C._rand(rows, 1, C.G, C.H_PER_G, C.D, gen=dgen), C._rand(rows, C.G, T, C.D, gen=dgen),
                C._rand(rows, C.G, T, C.D, gen=dgen))

    def call(q, k, v, lse=True):
        if spans == "ranges":
            return selection_attention(q, k, v, ranges, validate=False, return_lse=lse)
        return selection_attention(q, k, v, block_indices=blocks, block_size=C.BS, positions=positions,
                                   validate=False, return_lse=lse)

    def right(q, k, v, out, lse=None):
        ro, rl = C.oracle(q.double(), k.double(), v.double(), ranges)
        assert rel(out, ro) <= OUT_TOL
        if lse is not None:
            fin = torch.isfinite(rl)
            assert torch.equal(torch.isfinite(lse), fin) and rel(lse[fin], rl[fin]) <= LSE_TOL

    replay.forget()
    for return_lse in (True, False):
        for i in range(6):
            q, k, v = fresh()
            got = call(q, k, v, return_lse)
            replay.ENABLED = False
            try:
                want = call(q, k, v, return_lse)
            finally:
                replay.ENABLED = True
            got, want = (got, want) if return_lse else ((got, None), (want, None))
            assert torch.equal(got[0], want[0]), f"call {i + 1}: the replay's output differs from the way down's"
            if return_lse:
                assert torch.equal(got[1], want[1]), f"call {i + 1}: the replay's LSE differs from the way down's"
            right(q, k, v, *got)
    report = replay.report()
    assert len(report) == 2 and all(r.startswith("replayed") and int(r.split()[1]) >= 3 for r in report.values()), report

    q, k, v = fresh()
    qg = q.clone().requires_grad_()
    out, lse = call(qg, k, v)
    assert out.grad_fn is not None  # autograd recorded it: the way down
    right(q, k, v, out.detach(), lse.detach())
    misaligned = torch.empty(q.numel() + 1, device="cuda", dtype=q.dtype)[1:].view(q.shape).copy_(q)
    right(q, k, v, *call(misaligned, k, v))
    transposed = q.transpose(3, 4).contiguous().transpose(3, 4)
    right(q, k, v, *call(transposed, k, v))

    static = fresh()
    call(*static)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        call(*static)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = call(*static)
    for _ in range(2):
        new = fresh()
        for x, y in zip(static, new):
            x.copy_(y)
        graph.replay()
        torch.cuda.synchronize()
        right(*new, *static_out)

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(call, fullgraph=True)
    for _ in range(2):
        q, k, v = fresh()
        right(q, k, v, *compiled(q, k, v))
    assert sum(torch._dynamo.utils.counters["graph_break"].values()) == 0
