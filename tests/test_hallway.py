"""The front hallway (issue 24): ``q`` goes from ``selection_attention`` to the kernel once, never back up.

A profiler hook records every call between this package's modules during one eager call (the
interpreter runs the kernels on the CPU).  The hall's modules, in order (README, "From
selection_attention to a kernel"), may only call their own kind or a module further down; the fact
modules (contract, config, device, failures, transforms, known_bad, reference, ...) answer anyone
and are not steps.  ``python tests/test_hallway.py [--grad] [--cold]`` prints the path of one call.
"""

from __future__ import annotations

import sys

import pytest

HALL = (
    ("dispatch", ("nsa_triton_sel.dispatch",)),
    ("checks", ("nsa_triton_sel.checks",)),
    ("op", ("nsa_triton_sel.op",)),
    ("plan", ("nsa_triton_sel.plan",)),
    ("launch", ("nsa_triton_sel.kernels.launch", "nsa_triton_sel.kernels.grad")),
    ("kernels", ("nsa_triton_sel.kernels.forward", "nsa_triton_sel.kernels.backward", "nsa_triton_sel.kernels.common")),
)


PLAN = 3  # the planner's step


def step_of(module: str) -> int | None:
    """The hall step a module belongs to (None: a fact module, or not this package)."""
    for i, (_, prefixes) in enumerate(HALL):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return i
    return None


def trace(fn) -> list[tuple[str, str]]:
    """``(caller module, callee module)`` of every call between two modules of this package while ``fn`` runs.

    A call into a method or property of a planner's class (``Plan.rows``, ``KernelMeta.constexprs``,
    ``BackwardMeta.chunk_for``) reads the plan that was handed down: not a step, not recorded."""
    edges: list[tuple[str, str]] = []

    def hook(frame, event, arg):
        if event != "call" or frame.f_back is None:
            return
        callee = frame.f_globals.get("__name__", "")
        caller = frame.f_back.f_globals.get("__name__", "")
        if step_of(callee) == PLAN and "." in frame.f_code.co_qualname:
            return  # reading the plan object's own accessors
        if callee != caller and callee.startswith("nsa_triton_sel") and caller.startswith("nsa_triton_sel"):
            edges.append((caller, callee))

    sys.setprofile(hook)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return edges


def path(edges) -> list[str]:
    """The modules entered, in order, each time the call moves to another module."""
    out = [edges[0][0]] if edges else []
    for _, callee in edges:
        if callee != out[-1]:
            out.append(callee)
    return out


def _call(grad: bool):
    from nsa_triton_sel import selection_attention
    from nsa_triton_sel.testing import make_problem

    p = make_problem(B=1, S=4, G=1, h=4, Dk=16, Dv=16, T=64, n=2, seed=3)
    q, k, v = (x.clone().requires_grad_(grad) for x in (p.q, p.k, p.v))

    def run():
        out = selection_attention(q, k, v, p.ranges)
        if grad:
            out.float().sum().backward()

    return run


@pytest.fixture
def kernels_take_the_call(monkeypatch):
    """Every call takes the kernel path, and the kernels themselves are not launched: the trace is about the
    way down to the launch (running them under the interpreter, profiled, took 30 s for nothing)."""
    from nsa_triton_sel import config
    from nsa_triton_sel.kernels import grad, launch

    monkeypatch.setenv("NSA_SEL_TRITON_MIN_L", "0")
    for module, name in ((launch, "run"), (launch, "run_tokens"), (grad, "_launch_dq"), (grad, "_launch_dkdv")):
        monkeypatch.setattr(module, name, lambda *a, **kw: None)
    config.refresh()
    yield
    config.refresh()


@pytest.mark.parametrize("grad", [False, True], ids=["forward", "forward+backward"])
def test_q_goes_down_the_hall_once(grad, kernels_take_the_call):
    run = _call(grad)
    run()  # warm: compiled kernels, cached routes and plans
    edges = trace(run)
    back = [(a, b) for a, b in edges if step_of(a) is not None and step_of(b) is not None and step_of(b) < step_of(a)]
    assert not back, f"calls back up the hall: {sorted(set(back))}"
    first = []  # the steps in the order the call first enters them
    for m in path(edges):
        s = step_of(m)
        if s is not None and HALL[s][0] not in first:
            first.append(HALL[s][0])
    # (the launcher enters the kernels through Triton, which the hook does not see as our call)
    assert first == ["dispatch", "checks", "op", "plan", "launch"], first


def test_the_trace_sees_a_call_back_up(kernels_take_the_call, monkeypatch):
    """The check can fail: an operator whose launcher plans again (``launch.selection`` asks the planner)
    makes a call from the launcher back up to the planner."""
    from types import SimpleNamespace

    from nsa_triton_sel import op
    from nsa_triton_sel.kernels import launch

    def replanning(p, q, k, v, spans, *, scale, return_lse, positions, block_size, wrap):
        return launch.selection(q, k, v, spans, scale=scale, return_lse=return_lse)

    monkeypatch.setattr(op, "launch", SimpleNamespace(launch=replanning))
    edges = trace(_call(False))
    assert any(step_of(a) == 4 and step_of(b) == 3 for a, b in edges), "the replanning call was not seen"


def report(grad: bool, cold: bool = False) -> str:
    """The path of one call (warm: routes and plans cached; ``cold``: after ``config.refresh()``, as a new
    signature's first call): every module entered, and the hall's steps with the calls back up."""
    from nsa_triton_sel import config

    run = _call(grad)
    run()
    if cold:
        config.refresh()
    edges = trace(run)
    p = path(edges)
    visited, again = set(), 0
    for m in p[1:]:
        again += m in visited
        visited.add(m)
    back = sorted({(a, b) for a, b in edges if None not in (step_of(a), step_of(b)) and step_of(b) < step_of(a)})
    steps = [HALL[step_of(m)][0] for m in p if step_of(m) is not None]
    steps = [x for i, x in enumerate(steps) if i == 0 or steps[i - 1] != x]
    return ("hall steps: " + " -> ".join(steps) + "\nmodules: " + " -> ".join(m.replace("nsa_triton_sel.", "") for m in p)
            + f"\n{len(p) - 1} moves between modules, {again} of them to a module already visited; "
            + f"{len(back)} calls back up the hall {back}")


if __name__ == "__main__":
    import os

    os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ["NSA_SEL_TRITON_MIN_L"] = "0"
    print(report("--grad" in sys.argv, "--cold" in sys.argv))
