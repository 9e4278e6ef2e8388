"""The A/B suite: what a change may not slow down, measured through the public function only.

Every row calls ``nsa_triton_sel.selection_attention`` as a user does, so the same file measures any
revision of the library (``run.py`` puts that revision's ``src/`` first on ``PYTHONPATH``).  The canonical
NSA problem: one sequence, 4 KV groups x 16 query heads, D = 128, bf16, blocks of 64, top-16 block indices
(block 0, the own block and the one before it always picked; the rest random per token, or per 64-token
chunk for ``local``, as ``bench.train.train_contenders.select_blocks`` draws them), ``validate=False``.

- ``fwd-{random,local}-{8K,32K,64K}``: the forward, no autograd;
- ``train-{random,local}-{8K,32K,64K}``: forward + backward (q, k, v require grad), with the extra peak memory
  of one step in ``extra_info["extra_peak_mib"]`` (above what was allocated before it);
- ``fwd-small-{h1,h4}`` and ``train-small-{h1,h4}``: the small groups of open models at 32K, random selections
  (32 query heads over 32 KV heads, h = 1, or over 8, h = 4): the key-major path;
- ``decode-B64-32K``: one decode step (B = 64, T = 32K, ranges), replayed from a CUDA graph (GPU time only);
- ``host-decode-{ranges,blocks}``: host time of eager decode calls, ``CALLS`` back to back per round, the GPU idle
  at the round's start.  On the lent H100 machines this moves by up to 2x between processes of the same tree
  (timing single calls after a sync moved more): read these rows with their drift; ``host_pair.py`` judges them.

GPU rows run on the GPU clock (``bench/conftest.GpuClock``), each round after an L2 flush and a spin kernel
that holds the GPU while the host enqueues the round (a host gap must not be timed as kernel time).
The inputs are drawn from a fixed seed on the device: every revision gets the same values.  Where they lie in
device memory is the process's draw, and it moves a kernel's time by a few percent from one process to the next
(on the H100 a few percent between processes, against a spread within one process ten times smaller); so each
row keeps ``COPIES`` copies of its inputs, allocated apart, and its rounds take them in turn.
"""

from __future__ import annotations

import gc
import time

import pytest
import torch

from bench.conftest import DRY, GpuClock, HeldRounds, eager_hold_ms
from bench.train.train_contenders import select_blocks

BS, TOPK, G, H, D = 64, 16, 4, 16, 128
TS = {"8K": 8192, "32K": 32768, "64K": 65536}
SMALL_T, SMALL = 32768, {"h1": (32, 1), "h4": (8, 4)}  # small groups: (KV heads, query heads per KV head)
DECODE_B, DECODE_T = 64, 32768
CALLS = 20  # eager decode calls per host round (back to back, as a decode loop makes them)
COPIES = 3  # input sets per row, taken in turn by the rounds

if DRY:  # the plumbing on a CPU (interpreter): tiny shapes, the numbers mean nothing
    G, H, D, TOPK = 1, 2, 16, 2
    # One row of each kind: the lengths and the two small groups run the same plumbing.
    TS = {"8K": 128}
    DECODE_B, DECODE_T, CALLS, COPIES = 2, 256, 2, 1
    SMALL_T, SMALL = 128, {"h4": (1, 4)}

DEVICE = "cpu" if DRY else "cuda"
SELS = ("random", "local")


def _sel():
    from nsa_triton_sel import selection_attention

    return selection_attention


_PROBLEM: dict = {}


def problem(T: int, sel: str, g: int = G, h: int = H) -> list[dict]:
    """``COPIES`` copies of the inputs of one (T, selection, g KV heads x h query heads each), kept until another
    is asked for."""
    key = (T, sel, g, h)
    if key not in _PROBLEM:
        _PROBLEM.clear()
        gc.collect()
        if not DRY:
            torch.cuda.empty_cache()
        gen = torch.Generator(device=DEVICE).manual_seed(T + (sel == "local"))

        def randn(*shape):
            return torch.randn(*shape, generator=gen, device=DEVICE).to(torch.bfloat16)

        blocks = select_blocks(T, g, local=sel == "local", gen=gen, device=DEVICE, bs=BS, topk=TOPK)
        one = {"q": randn(1, T, g, h, D), "k": randn(1, g, T, D), "v": randn(1, g, T, D),
               "grad_out": randn(1, T, g, h, D), "blocks": blocks}
        copies = [one]
        for _ in range(COPIES - 1):
            copies.append({n: x.clone() for n, x in one.items()})
        _PROBLEM[key] = copies
    return _PROBLEM[key]


class Turns:
    """Which input copy the next round takes: ``advance()`` runs in each round's untimed setup."""

    def __init__(self):
        self.i = 0

    def advance(self) -> None:
        self.i = (self.i + 1) % COPIES


def decode_problem() -> dict:
    """One decode step: B queries at position T - 1, their top-k blocks as block indices and as ranges."""
    key = ("decode",)
    if key not in _PROBLEM:
        _PROBLEM.clear()
        gc.collect()
        gen = torch.Generator(device=DEVICE).manual_seed(7)
        nb = DECODE_T // BS
        pick = torch.rand(DECODE_B, 1, G, nb, generator=gen, device=DEVICE).topk(TOPK, dim=-1).indices
        blocks = pick.to(torch.int32)
        start = blocks * BS
        ranges = torch.stack([start, torch.clamp(start + BS, max=DECODE_T)], -1).to(torch.int32)

        def randn(*shape):
            return torch.randn(*shape, generator=gen, device=DEVICE).to(torch.bfloat16)

        _PROBLEM[key] = {"q": randn(DECODE_B, 1, G, H, D), "k": randn(DECODE_B, G, DECODE_T, D),
                         "v": randn(DECODE_B, G, DECODE_T, D), "blocks": blocks, "ranges": ranges,
                         "positions": torch.full((DECODE_B, 1), DECODE_T - 1, device=DEVICE, dtype=torch.int64)}
    return _PROBLEM[key]


def _host_ms(fn, before=None, n: int = 3) -> float:
    """The host's milliseconds to enqueue one call, the GPU idle at the start (best of ``n``)."""
    best = float("inf")
    for _ in range(n):
        if not DRY:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        best = min(best, (time.perf_counter() - t0) * 1e3)
        if before is not None:
            before()
    if not DRY:
        torch.cuda.synchronize()
    return best


def _gpu_rounds(benchmark, l2_flush, fn, *, rounds: int, before=None, graph: bool = False):
    """Time ``fn`` on the GPU clock: ``rounds`` rounds after two warm-up rounds, each behind a flush and a hold."""
    fn()  # compile / autotune / plan, outside everything
    if before is not None:
        before()
    timed = fn
    if not DRY:
        torch.cuda.synchronize()
        benchmark.extra_info["host_enqueue_ms"] = _host_ms(fn, before)
        if graph:
            from bench.common.timers import capture_graph

            g, _ = capture_graph(fn)
            timed = g.replay
        benchmark._timer = GpuClock()  # private attribute: pinned by the bench extra (>=5.1)
    hold = eager_hold_ms(benchmark.extra_info.get("host_enqueue_ms", 0.0))
    benchmark.extra_info.update({"timer": "cuda-graph" if graph else "cuda-events", "hold_ms": hold})
    benchmark.pedantic(timed, setup=HeldRounds(l2_flush, 0.0 if graph else hold, before), rounds=rounds,
                       warmup_rounds=0 if DRY else 2, iterations=1)


def launch_report() -> str:
    """How each kernel launched in this process (the bound launcher, or ``JITFunction.run`` and why) and how each
    decode signature ran (replayed, or why it took the way down): a process that lost either pays host time on
    every call, which a host time alone cannot tell."""
    try:
        from nsa_triton_sel.kernels import bind
    except ImportError as exc:  # another revision's package without the bound launcher
        return f"unknown ({exc})"
    launches = "; ".join(f"{k}: {v}" for k, v in bind.report().items()) or "no kernel launched"
    try:
        from nsa_triton_sel import replay
    except ImportError:  # another revision's package without replays
        return launches
    replays = "; ".join(f"{k}: {v}" for k, v in replay.report().items()) or "none"
    return f"{launches}; replays: {replays}"


def _record_tree(benchmark) -> None:
    import nsa_triton_sel

    benchmark.extra_info["library"] = str(nsa_triton_sel.__file__)


@pytest.mark.parametrize("T", list(TS))
@pytest.mark.parametrize("sel", SELS)
def test_fwd(benchmark, l2_flush, sel, T):
    _fwd_rounds(benchmark, l2_flush, problem(TS[T], sel), TS[T])


@pytest.mark.parametrize("groups", list(SMALL))
def test_fwd_small(benchmark, l2_flush, groups):
    _fwd_rounds(benchmark, l2_flush, problem(SMALL_T, "random", *SMALL[groups]), SMALL_T)


def _fwd_rounds(benchmark, l2_flush, ps: list[dict], T: int):
    sa, turn = _sel(), Turns()
    benchmark.group = "fwd"
    _record_tree(benchmark)

    def fwd():
        p = ps[turn.i]
        with torch.no_grad():
            sa(p["q"], p["k"], p["v"], block_indices=p["blocks"], block_size=BS, validate=False)

    for _ in range(COPIES):  # every copy once before the timing
        fwd()
        turn.advance()
    _gpu_rounds(benchmark, l2_flush, fwd, rounds=2 if DRY else (21 if T <= 8192 else 12), before=turn.advance)


@pytest.mark.parametrize("T", list(TS))
@pytest.mark.parametrize("sel", SELS)
def test_train(benchmark, l2_flush, sel, T):
    _train_rounds(benchmark, l2_flush, problem(TS[T], sel), TS[T])


@pytest.mark.parametrize("groups", list(SMALL))
def test_train_small(benchmark, l2_flush, groups):
    _train_rounds(benchmark, l2_flush, problem(SMALL_T, "random", *SMALL[groups]), SMALL_T)


def _train_rounds(benchmark, l2_flush, ps: list[dict], T: int):
    sa, turn = _sel(), Turns()
    leaves = [[p[n].requires_grad_() for n in ("q", "k", "v")] for p in ps]
    benchmark.group = "train"
    _record_tree(benchmark)

    def step():
        q, k, v = leaves[turn.i]
        p = ps[turn.i]
        sa(q, k, v, block_indices=p["blocks"], block_size=BS, validate=False).backward(p["grad_out"])

    def next_round():
        for xs in leaves:
            for x in xs:
                x.grad = None
        turn.advance()

    for _ in range(COPIES):  # compile and plan, every copy once, before the memory is measured
        step()
        next_round()
    if not DRY:
        from bench.common.timers import extra_peak_bytes

        benchmark.extra_info["extra_peak_mib"] = extra_peak_bytes(step) / 2**20
        next_round()
    _gpu_rounds(benchmark, l2_flush, step, rounds=2 if DRY else (15 if T <= 8192 else 9), before=next_round)
    for xs in leaves:
        for x in xs:
            x.requires_grad_(False)


def test_decode(benchmark, l2_flush):
    p, sa = decode_problem(), _sel()
    benchmark.group = "decode"
    _record_tree(benchmark)

    def step():
        sa(p["q"], p["k"], p["v"], p["ranges"], validate=False)

    _gpu_rounds(benchmark, l2_flush, step, rounds=2 if DRY else 100, graph=True)


@pytest.mark.parametrize("spans", ["ranges", "blocks"])
def test_host_decode(benchmark, spans):
    """Host seconds per round of ``CALLS`` eager decode calls (the driver divides): the Python a decode
    step costs.  The GPU is idle at the start of each round (``setup`` waits for it)."""
    p, sa = decode_problem(), _sel()
    benchmark.group = "host"
    benchmark.extra_info["calls_per_round"] = CALLS
    _record_tree(benchmark)
    if spans == "ranges":
        def call():
            sa(p["q"], p["k"], p["v"], p["ranges"], validate=False)
    else:
        def call():
            sa(p["q"], p["k"], p["v"], block_indices=p["blocks"], block_size=BS, positions=p["positions"],
               validate=False)

    def calls():
        for _ in range(CALLS):
            call()

    for _ in range(3):  # warm: compile, plan, remembered signatures
        calls()

    def idle():
        if not DRY:
            torch.cuda.synchronize()

    benchmark.pedantic(calls, setup=idle, rounds=2 if DRY else 40, warmup_rounds=0 if DRY else 3, iterations=1)
    benchmark.extra_info["launches"] = launch_report()
