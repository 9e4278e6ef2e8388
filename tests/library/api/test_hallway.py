"""The hallway: a call goes from ``selection_attention`` to the kernel once, never back up.

A profiler hook records every call between this package's modules during one eager call (the
interpreter runs the kernels on the CPU).  The hall's modules, in order (docs/api.md, "From
selection_attention to a kernel"), may only call their own kind or a module further down; the fact
modules (contract, config, device, failures, transforms, known_bad, reference, ...) answer anyone
and are not steps.  ``python tests/library/api/test_hallway.py [--grad] [--cold]`` prints the path of one call.
"""

from __future__ import annotations

import sys

import pytest

HALL = (
    ("api", ("nsa_triton_sel.api",)),
    ("arguments", ("nsa_triton_sel.arguments",)),
    ("op", ("nsa_triton_sel.op",)),
    ("plan", ("nsa_triton_sel.plan",)),
    ("launch", ("nsa_triton_sel.kernels.launch", "nsa_triton_sel.kernels.readers", "nsa_triton_sel.kernels.bind")),
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


def _calls():
    """``(forward, backward)``: one eager forward of inputs that require grad, and its backward."""
    from nsa_triton_sel import selection_attention
    from nsa_triton_sel.testing import make_problem

    p = make_problem(B=1, S=4, G=1, h=4, Dk=16, Dv=16, T=64, n=2, seed=3)
    state = {}

    def forward():
        q, k, v = (x.clone().requires_grad_(True) for x in (p.q, p.k, p.v))
        state["out"] = selection_attention(q, k, v, p.ranges)

    def backward():
        state["out"].float().sum().backward()

    return forward, backward


def _plain_forward():
    from nsa_triton_sel import selection_attention
    from nsa_triton_sel.testing import make_problem

    p = make_problem(B=1, S=4, G=1, h=4, Dk=16, Dv=16, T=64, n=2, seed=3)
    return lambda: selection_attention(p.q, p.k, p.v, p.ranges)


@pytest.fixture
def kernels_take_the_call(monkeypatch):
    """Every call takes the kernel path, and the kernels themselves are not launched: the trace is about the
    way down to the launch (running them under the interpreter, profiled, took 30 s for nothing)."""
    from nsa_triton_sel import config
    from nsa_triton_sel.kernels import launch

    monkeypatch.setenv("NSA_SEL_TRITON_MIN_L", "0")
    for name in ("run", "run_tokens", "_launch_dq", "_launch_dkdv"):
        monkeypatch.setattr(launch, name, lambda *a, **kw: None)
    config.refresh()
    yield
    config.refresh()


def walk(edges) -> dict:
    """The measures of a traced call: moves between modules, moves back to a module already left, calls back
    up the hall, and the hall's steps in the order first entered."""
    p = path(edges)
    visited, again = set(p[:1]), []
    for m in p[1:]:
        if m in visited:
            again.append(m)
        visited.add(m)
    back = sorted({(a, b) for a, b in edges if None not in (step_of(a), step_of(b)) and step_of(b) < step_of(a)})
    first = []
    for m in p:
        s = step_of(m)
        if s is not None and HALL[s][0] not in first:
            first.append(HALL[s][0])
    return {"path": p, "moves": len(p) - 1, "again": again, "back": back, "first": first}


MAX_MOVES, MAX_CLIMBS = 8, 1  # the most moves (and climbs back) an eager forward or a default backward may take


def test_the_eager_forward_walks_down_the_hall_once(kernels_take_the_call):
    run = _plain_forward()
    run()  # warm: compiled kernels, remembered signatures and plans
    w = walk(trace(run))
    assert w["first"] == ["api", "arguments", "op", "plan", "launch"], w
    assert w["moves"] <= MAX_MOVES and len(w["back"]) <= MAX_CLIMBS and not w["again"], w


def test_the_backward_walks_down_the_hall_once(kernels_take_the_call):
    forward, backward = _calls()
    forward()
    backward()  # warm
    forward()
    w = walk(trace(backward))
    assert "plan" not in w["first"], f"the backward asked the planner again: {w}"  # the forward's plan, carried
    assert w["moves"] <= MAX_MOVES and len(w["back"]) <= MAX_CLIMBS and not w["again"], w


def test_the_trace_sees_a_call_back_up(kernels_take_the_call, monkeypatch):
    """The check can fail: a launcher that plans again (a function of ``kernels/launch.py`` asking the planner)
    is a call from the launcher back up to the planner."""
    from nsa_triton_sel.device import Device
    from nsa_triton_sel.kernels import launch

    real = launch.run
    scope = {**vars(launch), "Device": Device, "real": real}
    replanning = eval("lambda plan, *a, **kw: (P.selection(1, 1, 1, 4, 16, 16, 64, 2, dev=Device.target(90, '')),"
                      " real(plan, *a, **kw))", scope)  # defined "in" the launcher module
    monkeypatch.setattr(launch, "run", replanning)
    edges = trace(_plain_forward())
    assert any(step_of(a) == 4 and step_of(b) == 3 for a, b in edges), "the replanning call was not seen"
    assert walk(edges)["back"], "walk() did not count the climb"


def report(grad: bool, cold: bool = False) -> str:
    """The path of one call (warm: signatures and plans remembered; ``cold``: after ``config.refresh()``, as a
    new signature's first call): every module entered, the moves, and the calls back up the hall."""
    from nsa_triton_sel import config

    forward, backward = _calls() if grad else (_plain_forward(), None)
    forward()
    if backward:
        backward()
        forward()
    if cold:
        config.refresh()
    w = walk(trace(backward or forward))
    return ("hall steps: " + " -> ".join(w["first"]) + "\nmodules: "
            + " -> ".join(m.replace("nsa_triton_sel.", "") for m in w["path"])
            + f"\n{w['moves']} moves between modules, {len(w['again'])} to a module already visited {w['again']}; "
            + f"{len(w['back'])} calls back up the hall {w['back']}")


if __name__ == "__main__":
    import os

    os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ["NSA_SEL_TRITON_MIN_L"] = "0"
    print(report("--grad" in sys.argv, "--cold" in sys.argv))
