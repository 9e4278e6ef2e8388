#!/usr/bin/env python
"""Host cost of ``selection_attention``: microseconds of Python per call, against the GPU time.

Decode (the shape the host targets are set for): B = 64, T = 32K, 4 groups x 16 heads, D = 128, top-16 blocks
of 64, bf16.  For each call (``validate=True`` on ranges, ``validate=False`` on ranges, ``block_indices`` with
``validate=False``, and the bare launchers) it prints

- host us/call: ``time.perf_counter`` around N eager calls without a sync, after warm-up (the GPU
  runs behind; N is small enough that the launch queue never fills);
- GPU us/call: one call captured in a CUDA graph, replayed N times between CUDA events (no host cost);
  calls that sync (``validate=True``) cannot be captured: their row shows the captured validate=False call.

"way down" rows switch the replay of a repeated decode step off (``replay.py``): the call walks the steps, finding
its signature, route and plan remembered (``arguments``, ``plan.plan_call``).  "unbound" rows switch the bound
launcher off (``kernels/bind.py``: every launch through Triton's ``JITFunction.run``), and with it the replay, which
calls the bound launchers.  The launchers' binding state is printed after the table.

Prefill, canonical shape at T = 8K (and the auto path at 64K): wall ms per call of validate=True,
validate=False and the bare kernel the dispatcher picks, back to back with one sync at the end
(what a model sees), for random and local selections.  It answers: is the host time of an eager decode call
small against the kernel, does validate=True stay a small fraction of the kernel at 8K, and is the default
route within 5 % of the kernel.

``--compiled`` adds a decode step under ``torch.compile`` (default and "reduce-overhead" modes, each
registered operator kind).  ``--mock-launch`` replaces the Triton launches with no-ops, to measure
the Python path alone (any device).  On a CPU box, ``TRITON_INTERPRET=1 python -m bench.perf.host_cost``
runs a smoke version on tiny shapes (the interpreter runs the kernels, so its host numbers include them).

``--peers DIR`` adds XunhaoLai's forward (its call path's host cost; see :func:`peer_calls`).

Usage:  python -m bench.perf.host_cost [--calls 200] [--compiled] [--mock-launch] [--peers DIR] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

from bench.common import timers

from nsa_triton_sel import arguments, config, replay, selection_attention
from nsa_triton_sel.contract import block_flags, n_blocks
from nsa_triton_sel.contract import block_indices_to_ranges
from nsa_triton_sel.kernels import bind, direct, launch
from nsa_triton_sel.testing import nsa_problem

CUDA = torch.cuda.is_available()
DEV = "cuda" if CUDA else "cpu"
DECODE = dict(B=64, T=32768, G=4, h=16, D=128) if CUDA else dict(B=2, T=256, G=1, h=2, D=16)
PREFILL_T = (8192, 65536) if CUDA else (64,)
PREFILL = dict(G=4, h=16, D=128) if CUDA else dict(G=1, h=4, D=16)
ROUNDS = 5 if CUDA else 1  # the interpreter runs every kernel in Python: a smoke run, not a measurement


def host_us(fn, calls: int) -> float:
    """Median over 5 rounds of host microseconds per call: ``calls`` calls, no sync inside a round."""
    for _ in range(3 if CUDA else 1):
        fn()
    rounds = []
    for _ in range(ROUNDS):
        if CUDA:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(rounds)


def graph_us(fn, calls: int) -> float | None:
    """GPU microseconds per call from a CUDA-graph replay (None off CUDA, or if the call cannot be captured)."""
    if not CUDA:
        return None
    try:
        graph, _ = timers.capture_graph(fn)
    except Exception:  # noqa: BLE001 - a call that syncs cannot be captured
        return None
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph.replay()
    start.record()
    for _ in range(calls):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls * 1e3


def wall_ms(fn, calls: int) -> float:
    """Milliseconds per call, back to back, one sync at the end (median of 3 rounds)."""
    for _ in range(2 if CUDA else 1):
        fn()
    rounds = []
    for _ in range(3 if CUDA else 1):
        if CUDA:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        if CUDA:
            torch.cuda.synchronize()
        rounds.append((time.perf_counter() - t0) / calls * 1e3)
    return statistics.median(rounds)


def unbound(fn):
    """``fn`` with the bound launcher (``kernels/bind.py``) off, and the replay, which calls the bound launchers."""
    def call():
        bind.ENABLED = replay.ENABLED = False
        try:
            return fn()
        finally:
            bind.ENABLED = replay.ENABLED = True
    return call


def way_down(fn):
    """``fn`` with the replay of a repeated decode step (``replay.py``) off: the steps of the way down."""
    def call():
        replay.ENABLED = False
        try:
            return fn()
        finally:
            replay.ENABLED = True
    return call


def decode_calls(p: dict) -> dict:
    q, k, v, ranges, blocks, pos = p["q"], p["k"], p["v"], p["ranges"], p["blocks"], p["positions"]
    pos_b = pos.view(1, 1).expand(q.shape[0], 1).contiguous()  # [B, 1]: each sequence its own position
    return {
        "validate=True (ranges)": lambda: selection_attention(q, k, v, ranges),
        "validate=False (ranges)": lambda: selection_attention(q, k, v, ranges, validate=False),
        "block_indices, validate=False": lambda: selection_attention(
            q, k, v, block_indices=blocks, block_size=p["bs"], positions=pos_b, validate=False),
        "validate=False (ranges), way down": way_down(lambda: selection_attention(q, k, v, ranges, validate=False)),
        "validate=False (ranges), unbound": unbound(lambda: selection_attention(q, k, v, ranges, validate=False)),
        "block_indices, validate=False, unbound": unbound(lambda: selection_attention(
            q, k, v, block_indices=blocks, block_size=p["bs"], positions=pos_b, validate=False)),
        "bare launcher sel_attn_ranges": lambda: direct.sel_attn_ranges(q, k, v, ranges),
        "bare launcher sel_attn_blocks": lambda: direct.sel_attn_blocks(q, k, v, blocks, p["bs"], pos_b),
    }


def peer_calls(p: dict) -> dict:
    """XunhaoLai's forward, for its host cost beside ours: its kernel needs as many keys as queries
    (``q_len == k_len``), so it has no decode shape; 64 one-token sequences (the same B, heads and D)
    give its call path (two allocations and a launch of ~30 arguments) on a tiny GPU workload.  Its
    output is not compared: only the host time of the call is measured."""
    from bench.train import train_contenders as TC

    why = TC.peer_status("xunhaolai")
    if why:
        print(f"xunhaolai: {why}")
        return {}
    from native_sparse_attention.ops.triton.topk_sparse_attention import _topk_sparse_attention_fwd

    q = p["q"]
    B, _, G, h, D = q.shape
    qx = q.reshape(B, G * h, D).contiguous()
    kx = p["k"][:, :, -1].contiguous()  # [B, G, D]: each sequence's one key
    vx = p["v"][:, :, -1].contiguous()
    idx = torch.zeros(G, B, 16, dtype=torch.int32, device=q.device)
    idx[..., 1:] = -1
    cu = torch.arange(B + 1, dtype=torch.int32, device=q.device)
    return {"xunhaolai forward (64 one-token seqs)": lambda: _topk_sparse_attention_fwd(
        qx, kx, vx, idx, 64, cu, cu, 1, 1, D ** -0.5)}


def compiled_calls(p: dict) -> dict:
    from nsa_triton_sel import op

    q, k, v, blocks, pos = p["q"], p["k"], p["v"], p["blocks"], p["positions"]
    pos_b = pos.view(1, 1).expand(q.shape[0], 1).contiguous()
    # The KV cache lives at a fixed address, as in a model: without this, every "reduce-overhead"
    # replay first copies k and v (2 GiB each here) into the graph's own input buffers.
    for x in (k, v):
        torch._dynamo.mark_static_address(x)

    def step(q, k, v, blocks, pos):
        return selection_attention(q, k, v, block_indices=blocks, block_size=p["bs"], positions=pos)

    out = {}
    kinds = ["custom"] + (["triton"] if op.sel_fwd_traced is not None and CUDA else [])
    for kind in kinds:
        for mode in ("default", "reduce-overhead") if CUDA else ("default",):
            os.environ["NSA_SEL_OP"] = kind
            config.refresh()
            torch._dynamo.reset()
            fn = torch.compile(step, mode=mode, fullgraph=True)
            for _ in range(3):
                fn(q, k, v, blocks, pos_b)
            out[f"compiled {mode}, op={kind}"] = (lambda f=fn: f(q, k, v, blocks, pos_b))
    os.environ.pop("NSA_SEL_OP", None)
    config.refresh()
    return out


def prefill_rows(calls: int) -> list[dict]:
    rows = []
    for T in PREFILL_T:
        for pattern in ("random", "local"):
            p = nsa_problem(T, pattern=pattern, device=DEV, dtype=torch.bfloat16 if CUDA else torch.float16,
                            **PREFILL)
            q, k, v, blocks = p["q"], p["k"], p["v"], p["blocks"]
            bs = p["bs"]
            r = arguments.route_of(q, k, v)
            kernel_ranges = block_indices_to_ranges(blocks, bs, T)
            tokens = _tokens_chosen(q, blocks)
            if tokens > 1:
                bare = lambda: direct.sel_attn_tokens(q, k, v, kernel_ranges, tokens=tokens)  # noqa: E731
            else:
                bare = lambda: direct.sel_attn_blocks(q, k, v, blocks, bs)  # noqa: E731
            n = max(3, calls // (10 if T <= 8192 else 40)) if CUDA else 1
            row = {"T": T, "pattern": pattern, "route": r.path, "kernel": "tokens" if tokens > 1 else "blocks",
                   "bare_ms": wall_ms(bare, n),
                   "auto_ms": wall_ms(lambda: selection_attention(q, k, v, block_indices=blocks, block_size=bs,
                                                                  validate=False), n)}
            if T == PREFILL_T[0]:
                row["validate_ms"] = wall_ms(
                    lambda: selection_attention(q, k, v, block_indices=blocks, block_size=bs), n)
                # the checks alone (GPU-bound when back to back): what validate=True adds at most
                row["checks_ms"] = wall_ms(lambda: block_flags(blocks, n_blocks(T, bs), None), n)
            rows.append(row)
    return rows


def _tokens_chosen(q, blocks) -> int:
    from nsa_triton_sel.device import device_of
    from nsa_triton_sel.plan.tokens import auto_tokens, choose_tokens

    return choose_tokens(blocks, auto_tokens(q.shape[3], blocks.shape[1], device_of(q.device)))


def mock_launches():
    """Replace the Triton launches with no-ops: the Python path's own cost."""
    launch.run = lambda *a, **k: None
    launch.run_tokens = lambda *a, **k: None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200 if CUDA else 2)
    ap.add_argument("--compiled", action="store_true", help="also time compiled decode steps")
    ap.add_argument("--mock-launch", action="store_true", help="no-op Triton launches: the Python path alone")
    ap.add_argument("--no-prefill", action="store_true")
    ap.add_argument("--json", help="write the numbers here")
    ap.add_argument("--peers", help="folder with xunhaolai/ (never committed): adds its forward's host cost")
    a = ap.parse_args(argv)
    if not CUDA and os.environ.get("TRITON_INTERPRET") != "1":
        print("host_cost.py needs a CUDA device, or TRITON_INTERPRET=1 for a CPU smoke run", file=sys.stderr)
        return 2
    os.environ.setdefault("NSA_SEL_TRITON_MIN_L", "1" if CUDA else "0")  # CPU: let the interpreter run Triton
    config.refresh()
    if a.mock_launch:
        mock_launches()
    import triton

    name = torch.cuda.get_device_name() if CUDA else "cpu (interpreter)"
    print(f"host_cost: {name}, torch {torch.__version__}, triton {triton.__version__}"
          f"{', launches mocked' if a.mock_launch else ''}")
    p = nsa_problem(DECODE["T"], B=DECODE["B"], S=1, G=DECODE["G"], h=DECODE["h"], D=DECODE["D"], device=DEV,
                    dtype=torch.bfloat16 if CUDA else torch.float16)
    calls = decode_calls(p)
    if a.peers and CUDA:
        from bench.train.train_nsa import add_peers

        add_peers(a.peers)
        calls.update(peer_calls(p))
    if a.compiled:
        calls.update(compiled_calls(p))
    shape = ", ".join(f"{k}={v}" for k, v in DECODE.items())
    print(f"\ndecode ({shape}, top-16 blocks of 64)\n{'call':<40} {'host us/call':>13} {'GPU us/call':>12}")
    results = {"device": name, "torch": torch.__version__, "triton": triton.__version__, "decode": {}}
    graph_of_false = None
    for label, fn in calls.items():
        h_us = host_us(fn, a.calls)
        g_us = None if a.mock_launch or label.startswith("compiled") else graph_us(fn, a.calls)
        if label == "validate=False (ranges)":
            graph_of_false = g_us
        note = ""
        if g_us is None and label.startswith("validate=True") and graph_of_false is None and CUDA and not a.mock_launch:
            g_us = graph_us(calls["validate=False (ranges)"], a.calls)
            note = " (validate=False's graph: a syncing call cannot be captured)"
        results["decode"][label] = {"host_us": h_us, "gpu_us": g_us}
        print(f"{label:<40} {h_us:>13.1f} {'-' if g_us is None else f'{g_us:.1f}':>12}{note}")
    results["launchers"] = bind.report()
    for name, how in results["launchers"].items():
        print(f"  {name}: {how}")
    if not a.no_prefill and not a.mock_launch:
        rows = prefill_rows(a.calls)
        results["prefill"] = rows
        shape = ", ".join(f"{k}={v}" for k, v in PREFILL.items())
        print(f"\nprefill (B=1, {shape}, top-16 blocks of 64), wall ms per call, back to back")
        print(f"{'T':>6} {'selection':<8} {'kernel':<7} {'bare':>9} {'auto':>9} {'auto/bare':>9} {'validate=True':>14}")
        for r in rows:
            val = r.get("validate_ms")
            extra = f"{val:>9.3f} (+{(val - r['bare_ms']) / r['bare_ms'] * 100:.0f}%)" if val else ""
            if val:
                extra += f"  [checks alone {r['checks_ms']:.3f}]"
            print(f"{r['T']:>6} {r['pattern']:<8} {r['kernel']:<7} {r['bare_ms']:>9.3f} {r['auto_ms']:>9.3f} "
                  f"{r['auto_ms'] / r['bare_ms']:>9.3f} {extra}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
