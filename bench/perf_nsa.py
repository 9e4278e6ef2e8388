"""H100 contender table for the NSA selection forward (issue 7).

One call runs every contender on the same inputs and prints ms, TFLOP/s or GB/s and ratios:

- canonical NSA shape: one sequence of T tokens, 64 query heads in 4 groups (h = 16), D = Dv = 128,
  block 64, top-16 blocks per token (block 0, the two local blocks, the rest drawn at random, or
  "local": tokens of one 64-token chunk share their selection, as real NSA selections mostly do);
- group sizes the peers handle badly: h = 4 and h = 8;
- decode: B = 64 sequences, one query each, T = 32K, 4 groups of 16, D = 128, top-16;
- the seeds' packed microbenchmark (N = 1024, H = 8, D = 128, one span of L keys) against SDPA.

Contenders: this package's ranges kernel (ranges precomputed; the block-index conversion is timed
separately), fla-core's ``parallel_nsa_fwd`` when importable, the packed-SDPA path (T = 8K only).
Timing: ``triton.testing.do_bench`` (CUDA events, L2 flushed before every run, median) for the
millisecond-scale prefill cases; CUDA-graph replay (``bench.timers.GraphTimer``: same flush and events,
no host launch cost) for decode and the seeds' microbenchmark, whose kernels are shorter than a
Python launch, with the eager do_bench figure beside it.
Errors: float64 oracle on a sample of 64 tokens.

Usage:  python -m bench.perf_nsa [--out DIR] [--quick] [--sweep]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import torch

from nsa_triton_sel import reference
from nsa_triton_sel.contract import block_indices_to_ranges
from nsa_triton_sel.kernels import launch

BS, TOPK = 64, 16


def log(*a):
    print(*a, flush=True)


def ceilings():
    import triton.testing as tt

    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")  # 1 GiB
    y = torch.empty_like(x)
    ms = tt.do_bench(lambda: y.copy_(x), warmup=25, rep=200, return_mode="median")
    copy_gbs = 2 * x.numel() / ms / 1e6
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = tt.do_bench(lambda: a @ a, warmup=25, rep=200, return_mode="median")
    tflops = 2 * 8192**3 / ms / 1e9
    del x, y, a
    return {"copy_GBps": copy_gbs, "bf16_mm_TFLOPs": tflops}


def select_blocks(T, G, *, local: bool, gen, positions=None):
    """Top-16 block indices ``[1, S, G, 16]`` (int32, -1 = none) for tokens at ``positions``."""
    pos = torch.arange(T, device="cuda") if positions is None else positions
    S = pos.numel()
    nb = math.ceil(T / BS)
    cur = (pos // BS)[:, None, None]
    if local:  # tokens of one 64-token chunk share one score vector
        chunk_scores = torch.rand(nb, G, nb, device="cuda", generator=gen)
        scores = chunk_scores[pos // BS]
    else:
        scores = torch.rand(S, G, nb, device="cuda", generator=gen)
    blk = torch.arange(nb, device="cuda")[None, None, :]
    scores = torch.where(blk > cur, float("-inf"), scores)
    forced = (blk == 0) | (blk == cur) | (blk == cur - 1)
    scores = torch.where(forced & (blk <= cur), float("inf"), scores)
    top = scores.topk(TOPK, dim=-1)
    idx = torch.where(torch.isneginf(top.values), -1, top.indices)
    return idx.to(torch.int32)[None], pos


def bench(fn, rep=100):
    import triton.testing as tt

    return tt.do_bench(fn, warmup=25, rep=rep, return_mode="median")


_GRAPH_TIMER = []


def gbench(fn, graph=True):
    """Median GPU time of one CUDA-graph replay (L2 flushed before each): the kernel without
    the host's launch cost, which do_bench times for kernels shorter than a launch."""
    if not _GRAPH_TIMER:
        from bench.timers import GraphTimer

        _GRAPH_TIMER.append(GraphTimer(iters=100, warmup=10))
    return _GRAPH_TIMER[0](fn, graph=graph).median_ms


def sample_error(out, q, k, v, ranges, rows):
    """mean abs and relative error vs the float64 oracle on sampled token positions."""
    sub = (q[:, rows], k, v, ranges[:, rows])
    ref = reference.oracle(*sub)
    got = out[:, rows].double().cpu()
    return float((got - ref).abs().mean()), float((got - ref).norm() / ref.norm())


def fla_fwd():
    try:
        from fla.ops.nsa.parallel import parallel_nsa_fwd
    except Exception as exc:  # noqa: BLE001
        log(f"fla-core not available: {type(exc).__name__}: {exc}")
        return None
    return parallel_nsa_fwd


def launch_tokens_ok(h):
    from nsa_triton_sel.kernels.meta import tokens_per_program

    return tokens_per_program(h) > 1


def nsa_case(T, h, local, fla, *, with_sdpa, dtype=torch.bfloat16, tune=None, tok_tune=None):
    G, D = 4, 128
    gen = torch.Generator(device="cuda").manual_seed(T + h + local)
    q = torch.randn(1, T, G, h, D, device="cuda", dtype=dtype, generator=gen)
    k = torch.randn(1, G, T, D, device="cuda", dtype=dtype, generator=gen)
    v = torch.randn(1, G, T, D, device="cuda", dtype=dtype, generator=gen)
    bi, _ = select_blocks(T, G, local=local, gen=gen)
    ranges = block_indices_to_ranges(bi, BS, T, validate=False)
    L = (ranges[..., 1] - ranges[..., 0]).clamp_min(0).sum(-1)  # [1, T, G]
    flops = float(L.sum()) * h * 2 * (D + D)
    row = {"case": f"T={T} h={h} {'local' if local else 'random'}", "T": T, "h": h,
           "sel": "local" if local else "random", "flops": flops}
    tune = tune or {}
    ours = lambda: launch.sel_attn_ranges(q, k, v, ranges, **tune)  # noqa: E731
    row["ours_ms"] = bench(ours)
    row["convert_ms"] = bench(lambda: block_indices_to_ranges(bi, BS, T, validate=False))
    # 64 random tokens plus the first four (under sel_triton_min_L: the dispatcher sends them to SDPA)
    rows = torch.cat([torch.arange(4), torch.randperm(T, generator=torch.Generator().manual_seed(T))[:64]]).unique()
    row["ours_mae"], row["ours_rel"] = sample_error(ours(), q, k, v, ranges, rows)
    if launch_tokens_ok(h):
        tok = lambda: launch.sel_attn_tokens(q, k, v, ranges, **(tok_tune or {}))  # noqa: E731
        row["tok_ms"] = bench(tok)
        row["tok_mae"], row["tok_rel"] = sample_error(tok(), q, k, v, ranges, rows)
    from nsa_triton_sel import selection_attention

    auto = lambda: selection_attention(q, k, v, ranges, validate=False)  # noqa: E731
    row["auto_ms"] = bench(auto)
    row["auto_mae"], row["auto_rel"] = sample_error(auto(), q, k, v, ranges, rows)
    if fla is not None and h >= 16 and (h & (h - 1)) == 0:
        qf = q.reshape(1, T, G * h, D)
        kf, vf = k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()
        bif = bi[0][None].contiguous()  # [1, T, G, 16]
        call = lambda: fla(qf, kf, vf, bif, TOPK, BS, 1 / math.sqrt(D))  # noqa: E731
        o_f = call()[0].reshape(1, T, G, h, D)
        row["fla_mae"], row["fla_rel"] = sample_error(o_f, q, k, v, ranges, rows)
        row["fla_ms"] = bench(call)
    if with_sdpa:
        row["sdpa_ms"] = bench(lambda: reference.packed_sdpa(q, k, v, ranges, validate=False), rep=20)
    return row


def decode_case(fla, dtype=torch.bfloat16):
    B, T, G, h, D = 64, 32768, 4, 16, 128
    gen = torch.Generator(device="cuda").manual_seed(1)
    q = torch.randn(B, 1, G, h, D, device="cuda", dtype=dtype, generator=gen)
    k = torch.randn(B, G, T, D, device="cuda", dtype=dtype, generator=gen)
    v = torch.randn(B, G, T, D, device="cuda", dtype=dtype, generator=gen)
    bis = [select_blocks(T, G, local=False, gen=gen, positions=torch.tensor([T - 1], device="cuda"))[0]
           for _ in range(B)]
    bi = torch.cat(bis)  # [B, 1, G, 16]
    pos = torch.full((B, 1), T - 1, device="cuda", dtype=torch.int64)
    ranges = block_indices_to_ranges(bi, BS, T, pos, validate=False)
    L = (ranges[..., 1] - ranges[..., 0]).clamp_min(0).sum(-1)
    nbytes = (q.numel() * 2 + float(L.sum()) * D * 2 * 2 + B * G * h * D * 2)
    from nsa_triton_sel.dispatch import decide

    d = decide(q, k, v)
    row = {"case": "decode B=64 T=32K", "bytes": nbytes, "dispatch": f"{d.path}, {'split' if d.decode else 'no-split'}"}
    ours = lambda: launch.sel_attn_decode(q, k, v, ranges)  # noqa: E731
    row["ours_ms"] = gbench(ours)
    row["ours_eager_ms"] = bench(ours)
    row["ours_nosplit_ms"] = gbench(lambda: launch.sel_attn_ranges(q, k, v, ranges))
    for sp in (2, 4, 8):
        row[f"split{sp}_ms"] = gbench(lambda: launch.sel_attn_decode(q, k, v, ranges, num_splits=sp))
    ref = reference.oracle(q[:4], k[:4], v[:4], ranges[:4])
    got = ours()[:4].double().cpu()
    row["ours_mae"], row["ours_rel"] = float((got - ref).abs().mean()), float((got - ref).norm() / ref.norm())
    if fla is not None:
        qf = q.reshape(B, 1, G * h, D)
        kf, vf = k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()
        bic = bi.contiguous()
        row["fla_ms"] = gbench(lambda: fla(qf, kf, vf, bic, TOPK, BS, 1 / math.sqrt(D)))
        row["fla_timer"] = _GRAPH_TIMER[0].last
    return row


def seeds_packed(dtype=torch.bfloat16):
    N, H, D = 1024, 8, 128
    out = []
    for L in (16, 32, 64, 128, 256, 512, 1024):
        gen = torch.Generator(device="cuda").manual_seed(L)
        # Enough copies that one pass over them exceeds the L2 is not needed: do_bench flushes it.
        q = torch.randn(N, H, D, device="cuda", dtype=dtype, generator=gen)
        k = torch.randn(N, L, D, device="cuda", dtype=dtype, generator=gen)
        v = torch.randn(N, L, D, device="cuda", dtype=dtype, generator=gen)
        t = gbench(lambda: launch.sel_attn_fwd_dense(q, k, v))
        r = gbench(lambda: reference.sdpa_rows(q, k, v))
        out.append({"case": f"seeds few N=1024 H=8 L={L}", "L": L, "ours_ms": t, "sdpa_ms": r,
                    "ours_eager_ms": bench(lambda: launch.sel_attn_fwd_dense(q, k, v)),
                    "sdpa_eager_ms": bench(lambda: reference.sdpa_rows(q, k, v)),
                    "bytes": (q.numel() * 2 + k.numel() * 2 * 2 + q.numel() * 2)})
    return out


def _try(label, fn, res, **cfg):
    try:
        ms = fn()
        res.append(dict(cfg, label=label, ms=ms))
        log(f"  sweep {label} {cfg}: {ms:.3f} ms")
    except Exception as exc:  # noqa: BLE001
        log(f"  sweep {label} {cfg}: {type(exc).__name__}: {str(exc)[:80]}")


def sweep(fla):
    """Launch configs: single-token and multi-token kernels at T = 8K, dense rows at L = 64 and 256."""
    res = []
    for nw in (1, 2):
        for ns in (2, 3, 4):
            _try("single T=8K random", lambda: nsa_case(8192, 16, False, None, with_sdpa=False,
                 tune=dict(block_n=32, num_warps=nw, num_stages=ns))["ours_ms"], res, block_n=32,
                 num_warps=nw, num_stages=ns)
    for bn in (32, 64):
        for nw in (2, 4, 8):
            for ns in (1, 2, 3):
                _try("tokens T=8K local", lambda: nsa_case(8192, 16, True, None, with_sdpa=False,
                     tok_tune=dict(block_n=bn, num_warps=nw, num_stages=ns))["tok_ms"], res, block_n=bn,
                     num_warps=nw, num_stages=ns)
    for L in (64, 256):
        N, H, D = 1024, 8, 128
        q = torch.randn(N, H, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(N, L, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(N, L, D, device="cuda", dtype=torch.bfloat16)
        for bn in (16, 32, 64):
            for nw in (1, 2, 4):
                for ns in (1, 2, 3):
                    _try(f"dense L={L}", lambda: bench(lambda: launch.sel_attn_fwd_dense(
                         q, k, v, block_n=bn, num_warps=nw, num_stages=ns)), res, block_n=bn,
                         num_warps=nw, num_stages=ns)
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="directory for perf_nsa.json")
    ap.add_argument("--quick", action="store_true", help="T = 8K only")
    ap.add_argument("--sweep", action="store_true", help="also sweep launch configs at T = 8K")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("perf_nsa.py needs a CUDA device", file=sys.stderr)
        return 2
    import triton

    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "cuda": torch.version.cuda, "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    log(env)
    ceil = ceilings()
    log(f"ceilings: copy {ceil['copy_GBps']:.0f} GB/s, bf16 matmul {ceil['bf16_mm_TFLOPs']:.0f} TFLOP/s")
    fla = fla_fwd()
    rows = []
    Ts = (8192,) if args.quick else (8192, 32768, 65536)
    for T in Ts:
        for local in (False, True):
            r = nsa_case(T, 16, local, fla, with_sdpa=(T == 8192 and not local))
            rows.append(r)
            log(fmt_nsa(r))
    for h in (4, 8):
        r = nsa_case(32768 if not args.quick else 8192, h, False, fla, with_sdpa=False)
        rows.append(r)
        log(fmt_nsa(r))
    d = decode_case(fla)
    log(f"{d['case']} (dispatcher picks: {d['dispatch']}): split {d['ours_ms']*1e3:.1f} us = {d['bytes']/d['ours_ms']/1e6:.0f} GB/s "
        f"({100*d['bytes']/d['ours_ms']/1e6/ceil['copy_GBps']:.0f}% of copy), no-split {d['ours_nosplit_ms']*1e3:.1f} us "
        f"({100*d['bytes']/d['ours_nosplit_ms']/1e6/ceil['copy_GBps']:.0f}%), splits 2/4/8: "
        f"{d['split2_ms']*1e3:.1f}/{d['split4_ms']*1e3:.1f}/{d['split8_ms']*1e3:.1f} us (graph replay; eager do_bench "
        f"{d['ours_eager_ms']*1e3:.1f} us)"
        + (f", fla {d['fla_ms']*1e3:.1f} us ({d['fla_timer']})" if "fla_ms" in d else "") + f", rel err {d['ours_rel']:.2e}")
    rows.append(d)
    for r in seeds_packed():
        rows.append(r)
        log(f"{r['case']}: ours {r['ours_ms']*1e3:.1f} us, sdpa {r['sdpa_ms']*1e3:.1f} us, "
            f"speedup {r['sdpa_ms']/r['ours_ms']:.2f}x, ours {r['bytes']/r['ours_ms']/1e6:.0f} GB/s, "
            f"sdpa {r['bytes']/r['sdpa_ms']/1e6:.0f} GB/s (graph replay; eager do_bench ours "
            f"{r['ours_eager_ms']*1e3:.1f} us, sdpa {r['sdpa_eager_ms']*1e3:.1f} us)")
    sw = sweep(fla) if args.sweep else []
    for label in sorted({r["label"] for r in sw}):
        best = sorted((r for r in sw if r["label"] == label), key=lambda r: r["ms"])[:3]
        log(f"best {label}: " + "; ".join(
            f"BN={r['block_n']} w={r['num_warps']} s={r['num_stages']} {r['ms']:.3f}" for r in best))
    if args.out:
        with open(f"{args.out}/perf_nsa.json", "w") as fh:
            json.dump({"env": env, "ceilings": ceil, "rows": rows, "sweep": sw}, fh, indent=1)
    return 0


def fmt_nsa(r):
    tf = r["flops"] / r["ours_ms"] / 1e9
    s = f"{r['case']}: ours {r['ours_ms']:.3f} ms ({tf:.0f} TFLOP/s, rel {r['ours_rel']:.2e})"
    if "fla_ms" in r:
        s += f", fla {r['fla_ms']:.3f} ms (rel {r['fla_rel']:.2e}) -> {r['fla_ms']/r['ours_ms']:.2f}x"
    if "tok_ms" in r:
        s += f", tokens {r['tok_ms']:.3f} ms (rel {r['tok_rel']:.2e})"
        if "fla_ms" in r:
            s += f" -> {r['fla_ms']/r['tok_ms']:.2f}x fla"
    s += f", auto {r['auto_ms']:.3f} ms (rel {r['auto_rel']:.2e})"
    if "sdpa_ms" in r:
        s += f", packed-sdpa {r['sdpa_ms']:.2f} ms -> {r['sdpa_ms']/r['ours_ms']:.1f}x"
    return s + f", convert {r['convert_ms']:.3f} ms"


if __name__ == "__main__":
    sys.exit(main())
