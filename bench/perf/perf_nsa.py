"""The NSA selection forward against the public peers, through the public API.

One call runs every contender on the same inputs and prints, per row, ms, TFLOP/s (against the
measured bf16 matmul ceiling) and the ratio to the best peer:

- ``ours-api``: ``selection_attention(q, k, v, block_indices=..., block_size=..., validate=False)``,
  what a user calls (the kernel reads the block indices itself; the route and the multi-token
  switch are part of the timed call);
- ``ours-kernel``: the kernel the dispatcher picks, launched directly (no dispatcher);
- ``fla``: fla-core's ``parallel_nsa_fwd`` (skipped where h is not a power of two >= 16);
- ``xunhaolai``: XunhaoLai's ``_topk_sparse_attention_fwd`` (block pointers: Triton < 3.9 only);
- ``cudnn``: NVIDIA's cuDNN frontend NSA selection forward (``nvidia-cudnn-frontend`` 1.32,
  ``cudnn.native_sparse_attention.selection_attention_wrapper``: a CuTe DSL Hopper kernel, THD layout,
  ``is_causal=True`` masks the keys past the query inside its selected blocks, as our spans are clamped).
  It needs ``nvidia-cutlass-dsl`` and its libraries, ``apache-tvm-ffi`` and ``cuda-bindings``: unpacked
  wheels in ``PEERS/cudnn_site`` (added with ``site.addsitedir``, which runs their ``.pth`` files).
  A configuration it fails to build is recorded as that contender's failure, not skipped.

Rows: the forward table (canonical NSA shape at T = 8K / 32K / 64K, random and local; HQ = 128 in
8 groups with D = 96, blocks of 32, top-24; HQ = 64 in 2 groups (h = 32) with D = 192, top-8, local),
then decode (B = 64, T = 32K, one query each, CUDA-graph replay, L2 flushed by a read so the timed
kernel does not also write back the flush's dirty lines; the write-flush figure is printed beside it).
Same block indices for every contender, converted to each one's convention (``bench.train.train_contenders``);
``triton.testing.do_bench`` medians with the L2 flushed; each contender's output is checked against
ours, and ours against the float64 oracle on sampled tokens.  Guard: a contender whose time does not
grow with T over the canonical random rows is flagged.

Usage:  python -m bench.perf.perf_nsa --peers DIR [--out DIR] [--quick]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from bench.common import accounting
from bench.train import train_contenders as TC


@dataclass(frozen=True)
class Case:
    name: str
    T: int
    G: int
    h: int
    D: int
    bs: int
    topk: int
    local: bool


CASES = [
    Case("canonical T=8K random", 8192, 4, 16, 128, 64, 16, False),
    Case("canonical T=8K local", 8192, 4, 16, 128, 64, 16, True),
    Case("canonical T=32K random", 32768, 4, 16, 128, 64, 16, False),
    Case("canonical T=32K local", 32768, 4, 16, 128, 64, 16, True),
    Case("canonical T=64K random", 65536, 4, 16, 128, 64, 16, False),
    Case("canonical T=64K local", 65536, 4, 16, 128, 64, 16, True),
    Case("HQ=128 H=8 D=96 block 32 top-24 T=16K random", 16384, 8, 16, 96, 32, 24, False),
    Case("HQ=64 H=2 (h=32) D=192 top-8 T=16K local", 16384, 2, 32, 192, 64, 8, True),
]
DECODE = dict(B=64, T=32768, G=4, h=16, D=128, bs=64, topk=16)
PEERS = ("fla", "xunhaolai", "cudnn")


def log(*a):
    print(*a, flush=True)


def bench_ms(fn) -> float:
    import triton.testing as tt

    return float(tt.do_bench(fn, warmup=25, rep=100, return_mode="median"))


def inputs(c: Case, seed: int = 0) -> dict:
    gen = torch.Generator(device="cuda").manual_seed(seed + c.T + c.D + c.local)
    blocks = TC.select_blocks(c.T, c.G, local=c.local, gen=gen, device="cuda", bs=c.bs, topk=c.topk)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device="cuda").to(torch.bfloat16)

    from nsa_triton_sel.contract import block_indices_to_ranges

    ranges = block_indices_to_ranges(blocks, c.bs, c.T, validate=False)
    keys = int((ranges[..., 1] - ranges[..., 0]).clamp_min(0).sum())
    return {"q": randn(1, c.T, c.G, c.h, c.D), "k": randn(1, c.G, c.T, c.D), "v": randn(1, c.G, c.T, c.D),
            "blocks": blocks, "ranges": ranges, "keys": keys, "B": 1, "S": c.T, "T": c.T, "G": c.G, "h": c.h,
            "D": c.D, "bs": c.bs, "topn": c.topk}


def ours_kernel(p: dict):
    """The kernel the dispatcher picks for these inputs, launched without the dispatcher."""
    from nsa_triton_sel.device import device_of
    from nsa_triton_sel.plan.tokens import auto_tokens, choose_tokens
    from nsa_triton_sel.kernels import direct

    q = p["q"]  # [B, S, G, h, D]
    tokens = choose_tokens(p["blocks"], auto_tokens(q.shape[3], q.shape[1], device_of(q.device)))
    if tokens > 1:
        return "tokens", lambda: direct.sel_attn_tokens(p["q"], p["k"], p["v"], p["ranges"], tokens=tokens)
    return "blocks", lambda: direct.sel_attn_blocks(p["q"], p["k"], p["v"], p["blocks"], p["bs"])


def peer(name: str, p: dict):
    """A zero-argument forward of peer ``name`` on ``p`` (output as ``[T, G*h, D]`` or ``[1, T, G*h, D]``),
    or a string saying why it cannot run."""
    why = TC.peer_status(name)
    if why:
        return why
    if name == "fla":
        if p["h"] < 16 or p["h"] & (p["h"] - 1):
            return f"fla-core needs a power-of-two group of at least 16 query heads (h={p['h']})"
        from bench.common.problems import fla_contender

        fn = fla_contender(p)
        return lambda: fn()[0]
    if name == "cudnn":
        return cudnn_contender(p)
    from native_sparse_attention.ops.triton.topk_sparse_attention import _topk_sparse_attention_fwd

    T, G, h, D = p["T"], p["G"], p["h"], p["D"]
    q = p["q"].reshape(T, G * h, D)
    k, v = p["k"][0].transpose(0, 1).contiguous(), p["v"][0].transpose(0, 1).contiguous()
    idx = TC.xunhaolai_topk(p["blocks"])
    cu = torch.tensor([0, T], dtype=torch.int32, device="cuda")
    return lambda: _topk_sparse_attention_fwd(q, k, v, idx, p["bs"], cu, cu, T, T, D ** -0.5)[0]


def cudnn_contender(p: dict):
    """cuDNN frontend's NSA selection forward on ``p``: THD tensors, the valid block indices first in each
    row (``block_counts`` of them), causal masking inside the selected blocks."""
    from cudnn.native_sparse_attention import selection_attention_wrapper

    T, G, h, D = p["T"], p["G"], p["h"], p["D"]
    if h > 16:
        return f"cuDNN's selection attention takes at most 16 query heads per KV head (h={h})"
    q = p["q"].reshape(T, G * h, D)
    k, v = p["k"][0].transpose(0, 1).contiguous(), p["v"][0].transpose(0, 1).contiguous()
    blocks = p["blocks"][0]  # [T, G, topk], -1 = none
    order = torch.sort((blocks < 0).to(torch.int8), dim=-1, stable=True).indices
    idx = torch.gather(blocks, -1, order).to(torch.int32).contiguous()
    counts = (blocks >= 0).sum(-1).to(torch.int32).contiguous()
    cu = torch.tensor([0, T], dtype=torch.int32, device="cuda")

    def fn():
        return selection_attention_wrapper(q, k, v, idx, counts, cu, cu, block_size=p["bs"], scale_softmax=D ** -0.5,
                                           max_s_q=T, max_s_k=T, is_causal=True)[0]
    return fn


def oracle_rel_err(out, p: dict, n: int = 48) -> float:
    from nsa_triton_sel import reference

    rows = torch.cat([torch.arange(3), torch.randperm(p["T"], generator=torch.Generator().manual_seed(1))[:n]]).unique()
    rows = rows.to(p["q"].device)
    ref = reference.oracle(p["q"][:, rows], p["k"], p["v"], p["ranges"][:, rows])
    got = out[:, rows].double().cpu()
    return float((got - ref).norm() / ref.norm())


def run_case(c: Case, mm_tflops: float) -> dict:
    from nsa_triton_sel import selection_attention

    p = inputs(c)
    flops = 4.0 * p["keys"] * c.h * c.D
    row = {"case": c.name, "T": c.T, "G": c.G, "h": c.h, "D": c.D, "block": c.bs, "topk": c.topk,
           "sel": "local" if c.local else "random", "flops": flops}
    api = lambda: selection_attention(p["q"], p["k"], p["v"], block_indices=p["blocks"], block_size=c.bs,  # noqa: E731
                                      validate=False)
    want = api().float()
    row["ours_rel_err"] = oracle_rel_err(want, p)
    kind, kern = ours_kernel(p)
    row["ours_kernel_variant"] = kind
    contenders = {"ours-api": api, "ours-kernel": kern}
    for name in PEERS:
        fn = peer(name, p)
        if isinstance(fn, str):
            row[f"{name}_status"] = f"skipped: {fn}"
            continue
        try:
            got = fn().float().reshape(want.shape)
        except Exception as exc:  # noqa: BLE001 - e.g. cuDNN's MLIR verification error for D=96, block 32
            lines = [ln.strip() for ln in re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).splitlines() if ln.strip()]
            row[f"{name}_status"] = f"FAILED: {type(exc).__name__}: {' | '.join(lines[:3])[:400]}"
            torch.cuda.synchronize()
            continue
        err = float((got - want).norm() / want.norm())
        row[f"{name}_vs_ours_rel"] = err
        if err > 2e-2:  # a wrong convention gives errors near 1
            row[f"{name}_status"] = f"WRONG: differs from ours by {err:.2e} (relative)"
            continue
        contenders[name] = fn
    for name, fn in contenders.items():
        ms = bench_ms(fn)
        row[f"{name}_ms"] = ms
        row[f"{name}_tflops"] = flops / ms / 1e9
        row[f"{name}_pct_mm"] = 100 * flops / ms / 1e9 / mm_tflops
    for n in PEERS:
        if f"{n}_ms" in row:
            row[f"api_vs_{n}"] = row[f"{n}_ms"] / row["ours-api_ms"]
    peers = [row[f"{n}_ms"] for n in PEERS if f"{n}_ms" in row]
    if peers:
        row["best_peer_ms"] = min(peers)
        row["api_vs_best_peer"] = min(peers) / row["ours-api_ms"]
    contenders.clear()  # the inputs go with the closures: the next case needs the memory
    torch.cuda.empty_cache()
    return row


def decode_row(copy_gbs: float) -> dict:
    """One decode step of B sequences (one query each at position T - 1), CUDA-graph replays."""
    from bench.common.timers import GraphTimer
    from nsa_triton_sel import selection_attention
    from nsa_triton_sel.contract import block_indices_to_ranges
    from nsa_triton_sel.kernels import direct

    d = DECODE
    B, T, G, h, D, bs = d["B"], d["T"], d["G"], d["h"], d["D"], d["bs"]
    gen = torch.Generator(device="cuda").manual_seed(1)
    # each sequence's query sits at T - 1: its selection is the last row of a T-token selection
    blocks = torch.cat([TC.select_blocks(T, G, local=False, gen=gen, device="cuda", bs=bs, topk=d["topk"])[:, -1:]
                        for _ in range(B)])  # [B, 1, G, topk]
    pos = torch.full((B, 1), T - 1, device="cuda", dtype=torch.int64)
    q = torch.randn(B, 1, G, h, D, device="cuda", generator=gen).to(torch.bfloat16)
    k = torch.randn(B, G, T, D, device="cuda", generator=gen).to(torch.bfloat16)
    v = torch.randn(B, G, T, D, device="cuda", generator=gen).to(torch.bfloat16)
    ranges = block_indices_to_ranges(blocks, bs, T, pos, validate=False)
    keys = int((ranges[..., 1] - ranges[..., 0]).clamp_min(0).sum())
    nbytes = keys * 2 * D * 2 + 2 * q.numel() * 2  # selected K and V once, q and o
    row = {"case": f"decode B={B} T={T // 1024}K", "B": B, "T": T, "bytes": nbytes,
           "floor_us": nbytes / copy_gbs / 1e3}
    calls = {"ours-api": lambda: selection_attention(q, k, v, block_indices=blocks, block_size=bs, positions=pos,
                                                     validate=False),
             "ours-api-ranges": lambda: selection_attention(q, k, v, ranges, validate=False),
             "ours-kernel": lambda: direct.sel_attn_blocks(q, k, v, blocks, bs, pos),
             # the planner does not split 256 (row, head-block) programs over 132 SMs; measured beside it:
             "ours-split2": lambda: direct.sel_attn_decode(q, k, v, ranges, num_splits=2),
             "ours-split4": lambda: direct.sel_attn_decode(q, k, v, ranges, num_splits=4)}
    why = TC.peer_status("fla")
    if why is None:
        from fla.ops.nsa.parallel import parallel_nsa_fwd

        qf, kf, vf = q.reshape(B, 1, G * h, D), k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()
        bf = torch.where(blocks < 0, torch.full_like(blocks, T), blocks).long().contiguous()
        calls["fla"] = lambda: parallel_nsa_fwd(qf, kf, vf, bf, d["topk"], bs, D ** -0.5)[0]
    else:
        row["fla_status"] = f"skipped: {why}"
    want = calls["ours-api"]().float()
    if "fla" in calls:  # a convention mismatch (fla's query position with TQ != TK) must not be timed
        err = float((calls["fla"]().float().reshape(want.shape) - want).norm() / want.norm())
        row["fla_vs_ours_rel"] = err
        if err > 2e-2:
            row["fla_status"] = f"WRONG: differs from ours by {err:.2e} (relative): not timed"
            del calls["fla"]
    from nsa_triton_sel import reference

    ref = reference.oracle(q[:4], k[:4], v[:4], ranges[:4])
    row["ours_rel_err"] = float((want[:4].double().cpu() - ref).norm() / ref.norm())
    for flush in ("read", "zero"):
        timer = GraphTimer(iters=60, warmup=10, flush=flush)
        for name, fn in calls.items():
            us = timer(fn).median_ms * 1e3
            row[f"{name}_us" + ("" if flush == "read" else "_write_flush")] = us
    row["api_pct_floor"] = 100 * row["floor_us"] / row["ours-api_us"]
    return row


def growth_flags(rows: list[dict]) -> list[str]:
    """Contenders whose time does not grow with T over the canonical random rows (a broken timing)."""
    seq = sorted((r for r in rows if r["case"].startswith("canonical") and r["sel"] == "random"),
                 key=lambda r: r["T"])
    out = []
    for name in ("ours-api", "ours-kernel") + PEERS:
        ts = [r.get(f"{name}_ms") for r in seq]
        if all(t is not None for t in ts) and any(b <= a for a, b in zip(ts, ts[1:])):
            out.append(f"{name}: time does not grow with T ({', '.join(f'{t:.3f}' for t in ts)} ms)")
    return out


def print_table(rows: list[dict]) -> None:
    """ms per contender, then ours-api's speed-up against each peer (peer ms / ours ms: > 1 is faster)."""
    names = ("ours-api", "ours-kernel") + PEERS
    log(f"{'case':48} " + " ".join(f"{n:>11}" for n in names) + f" {'TFLOP/s':>8}  ours-api vs " + ", ".join(PEERS))
    for r in rows:
        if "floor_us" in r:
            log(f"{r['case']:48} {r['ours-api_us']:>9.1f}us {r['ours-kernel_us']:>9.1f}us "
                f"{r.get('fla_us', float('nan')):>9.1f}us  floor {r['floor_us']:.1f} us "
                f"({r['api_pct_floor']:.0f}% of it; write-flush {r['ours-api_us_write_flush']:.1f} us)")
            continue
        cols = " ".join(f"{r.get(f'{n}_ms', float('nan')):>11.3f}" for n in names)
        ratios = ", ".join(f"{r[f'api_vs_{n}']:.2f}x" if f"api_vs_{n}" in r else "-" for n in PEERS)
        log(f"{r['case']:48} {cols} {r['ours-api_tflops']:>8.0f}  {ratios}")
        for n in PEERS:
            if f"{n}_status" in r:
                log(f"{'':50}{n}: {r[f'{n}_status']}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers", help="folder with fla_core/, xunhaolai/, einops_pkg/ (never committed)")
    ap.add_argument("--out", help="directory for perf_nsa.json")
    ap.add_argument("--quick", action="store_true", help="the T = 8K rows and decode only")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("perf_nsa needs a CUDA device", file=sys.stderr)
        return 2
    if a.peers:
        from bench.train.train_nsa import add_peers

        add_peers(a.peers)
    env = accounting.env_columns()
    ceil = accounting.measure_ceilings()
    log(f"environment: {env}")
    log(f"ceilings: copy {ceil['copy_gbs']:.0f} GB/s, bf16 matmul {ceil['mm_tflops']:.0f} TFLOP/s (measured)")
    for name in PEERS:
        log(f"peer {name}: {TC.peer_status(name) or 'importable'}")
    rows = []
    for c in CASES:
        if a.quick and c.T != 8192:
            continue
        t0 = time.perf_counter()
        rows.append(run_case(c, ceil["mm_tflops"]))
        log(f"  {c.name}: done in {time.perf_counter() - t0:.0f} s")
    rows.append(decode_row(ceil["copy_gbs"]))
    print_table(rows)
    flags = growth_flags(rows)
    for f in flags:
        log(f"SUSPECT: {f}")
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        with open(Path(a.out) / "perf_nsa.json", "w") as fh:
            json.dump({"env": env, "ceilings": ceil, "rows": rows, "suspect": flags,
                       "date": time.strftime("%Y-%m-%d %H:%M:%S")}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
