#!/usr/bin/env python
"""Contender table for the canonical NSA selection shape.

One sequence of T tokens (T in --T_list, default 8K/32K/64K), 64 query heads in G=4
groups (h=16), D=128, selection blocks of 64, top-16, bf16; selections "random" (16
random causal blocks per token and group) or "local" (the 16 most recent blocks); plus
decode (B=64, one query at position T-1 of a 32K cache).  Block indices are turned into
ranges with ``contract.block_indices_to_ranges`` (causal clamp included).

Contenders: Triton ``sel_attn_ranges`` (``sel_attn_decode`` for decode), the dispatcher
``selection_attention(backend="triton")`` (it may pick the multi-token kernel), ``packed_sdpa``
(only up to --sdpa-max-T: its gather moves T*G*1024*(Dk+Dv) bytes), fla-core's
``parallel_nsa_fwd`` when importable (prefill), FlexAttention up to --flex-max-T (its
block mask is built over (T*h) x T).  Each contender's output is compared with
Triton's (max abs difference in the table) before it is timed on the GPU clock with the
L2 flushed (``common.CudaEventTimer``).  Prints ms, TFLOP/s, GB/s and the ratio to
Triton; ``--csv`` writes the same rows with the environment.

``--dry-run`` shrinks everything (T=64, G=2, h=4, D=32, block 16, top-4) and runs on the
CPU under the Triton interpreter with a modelled clock: it checks the code path only.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

from bench.common import accounting, csvio, problems, timers

NSA_COLUMNS = ["case", "T", "B", "S", "G", "h", "D", "block", "topn", "pattern", "impl", "ms", "p20_ms", "p80_ms",
               "tflops", "gbs", "pct_bw", "vs_triton", "max_diff", "status", "copy_gbs", "mm_tflops",
               "gpu", "cc", "triton", "torch", "cuda", "driver", "git_commit", "date"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench_nsa.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--T_list", default="8192,32768,65536", help="prefill sequence lengths (comma list)")
    p.add_argument("--patterns", default="random,local", help="selection patterns: random, local (comma list)")
    p.add_argument("--decode-B", type=int, default=64, help="decode batch (0 = no decode case), default 64")
    p.add_argument("--decode-T", type=int, default=32768, help="decode cache length, default 32768")
    p.add_argument("--sdpa-max-T", type=int, default=8192, help="run packed_sdpa only up to this T")
    p.add_argument("--flex-max-T", type=int, default=8192, help="run FlexAttention only up to this T (0 = never)")
    p.add_argument("--no-fla", action="store_true", help="leave fla-core out even if importable")
    p.add_argument("--iters", type=int, default=10, help="timed runs (median), default 10")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs after the first call, default 2")
    p.add_argument("--csv", default=None, help="write the rows here (overwrites)")
    p.add_argument("--budget-s", type=float, default=0, help="stop starting new cases after this many seconds")
    p.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU (interpreter, modelled clock)")
    return p


def parse_args(argv=None):
    p = build_parser()
    a = p.parse_args(argv)
    try:
        a.Ts = csvio.int_list(a.T_list, "--T_list")
        a.pats = [x.strip() for x in a.patterns.split(",") if x.strip()]
        if not a.pats or any(x not in ("random", "local") for x in a.pats):
            raise ValueError(f"--patterns accepts random, local (comma list), got {a.patterns!r}")
        for name in ("decode_B", "decode_T", "sdpa_max_T", "flex_max_T", "warmup"):
            if getattr(a, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(a, name)}")
        if a.iters < 1:
            raise ValueError(f"--iters must be >= 1, got {a.iters}")
    except ValueError as exc:
        p.error(str(exc))
    return a


def cases(a):
    """(case name, problem kwargs) in the order they run: cheapest first."""
    small = dict(G=2, h=4, D=32, bs=16, topn=4) if a.dry_run else {}
    Ts = [64] if a.dry_run else a.Ts
    for T in sorted(Ts):
        for pat in a.pats:
            yield f"prefill-T{T}-{pat}", dict(T=T, pattern=pat, **small)
    if a.decode_B:
        T = 512 if a.dry_run else a.decode_T
        B = min(a.decode_B, 4) if a.dry_run else a.decode_B
        yield f"decode-B{B}-T{T}", dict(T=T, B=B, S=1, pattern="random", **small)


def contenders(a, p):
    """(name, callable or None, why-not) for one problem."""
    from nsa_triton_sel.kernels.direct import sel_attn_decode, sel_attn_ranges
    from nsa_triton_sel.reference import packed_sdpa

    decode = p["S"] == 1
    tri = sel_attn_decode if decode else sel_attn_ranges
    out = [("triton", lambda: tri(p["q"], p["k"], p["v"], p["ranges"]), "")]
    try:  # what a user gets: the dispatcher picks the kernel variant (multi-token, decode split)
        from nsa_triton_sel import selection_attention

        out.append(("dispatch", lambda: selection_attention(p["q"], p["k"], p["v"], p["ranges"],
                                                             backend="triton", validate=False), ""))
    except Exception as exc:  # noqa: BLE001
        out.append(("dispatch", None, f"unavailable: {type(exc).__name__}: {exc}"[:160]))
    if decode or p["T"] <= a.sdpa_max_T or a.dry_run:
        out.append(("packed_sdpa", lambda: packed_sdpa(p["q"], p["k"], p["v"], p["ranges"], validate=False), ""))
    else:
        out.append(("packed_sdpa", None, f"skipped: T > --sdpa-max-T={a.sdpa_max_T}"))
    if not a.no_fla and not decode:
        try:
            out.append(("fla", problems.fla_contender(p), ""))
        except Exception as exc:  # noqa: BLE001 - optional contender: say why it is absent
            out.append(("fla", None, f"unavailable: {type(exc).__name__}: {exc}"[:160]))
    if not decode and a.flex_max_T and p["T"] <= a.flex_max_T:
        try:
            out.append(("flex", problems.flex_contender(p), ""))
        except Exception as exc:  # noqa: BLE001
            out.append(("flex", None, f"unavailable: {type(exc).__name__}: {exc}"[:160]))
    return out


def as_tokens(o, p) -> torch.Tensor:
    """Any contender's output as [B, S, G, h, D] float32."""
    B, S, G, h, D = p["B"], p["S"], p["G"], p["h"], p["D"]
    if isinstance(o, tuple):
        o = o[0]
    if o.dim() == 4 and o.shape[1] == G and o.shape[2] == S * h:  # flex layout [B, G, S*h, D]
        o = o.view(B, G, S, h, D).permute(0, 2, 1, 3, 4)
    return o.reshape(B, S, G, h, D).float()


def run_case(a, name, kw, timer, ceil, env, device) -> list[dict]:
    p = problems.nsa_problem(device=device, dtype=torch.float16 if a.dry_run else torch.bfloat16, **kw)
    nbytes, flops = problems.nsa_work(p)
    base = {"case": name, "T": p["T"], "B": p["B"], "S": p["S"], "G": p["G"], "h": p["h"], "D": p["D"],
            "block": p["bs"], "topn": p["topn"], "pattern": p["pattern"], **ceil, **env}
    rows, ref, tri_ms = [], None, None
    for impl, fn, why in contenders(a, p):
        row = {**base, "impl": impl, "status": why or "ok"}
        rows.append(row)
        if fn is None:
            continue
        try:
            o = as_tokens(fn(), p)
            if ref is None:
                ref = o
            row["max_diff"] = (o - ref).abs().max().item()
            if isinstance(timer, timers.ModelTimer):
                timer.expect(nbytes, "tri" if impl == "triton" else "ref")
            t = timer(fn)
            row.update(ms=t.median_ms, p20_ms=t.p20_ms, p80_ms=t.p80_ms)
            gbs, tfl, pct = accounting.rates(t.median_ms, nbytes, flops, ceil["copy_gbs"])
            row.update(gbs=gbs, tflops=tfl, pct_bw=pct)
            tri_ms = t.median_ms if impl == "triton" else tri_ms
            row["vs_triton"] = t.median_ms / tri_ms if tri_ms else ""
        except Exception as exc:  # noqa: BLE001 - keep the table going
            row["status"] = f"error: {type(exc).__name__}: {exc}".replace("\n", " ")[:160]
            if device == "cuda":
                torch.cuda.synchronize()
        csvio.progress(f"  {name:24s} {impl:12s} {csvio.fmt(row.get('ms')):>10s} ms  {csvio.fmt(row.get('tflops')):>8s} TFLOP/s"
                   f"  {csvio.fmt(row.get('gbs')):>8s} GB/s  x{csvio.fmt(row.get('vs_triton'))} of triton"
                   f"  diff {csvio.fmt(row.get('max_diff'))}  {'' if row['status'] == 'ok' else row['status']}")
    del p
    if device == "cuda":
        torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    a = parse_args(argv)
    if not a.dry_run and not torch.cuda.is_available():
        print("error: CUDA is not available; bench_nsa.py times GPU kernels (use --dry-run on a CPU)",
              file=sys.stderr)
        return 2
    if a.dry_run:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    device = "cpu" if a.dry_run else "cuda"
    ceil = accounting.measure_ceilings(dry_run=a.dry_run)
    ceil = {"copy_gbs": ceil["copy_gbs"], "mm_tflops": ceil["mm_tflops"]}
    env = accounting.env_columns()
    csvio.progress(f"# NSA contenders on {env['gpu']} | triton {env['triton']} torch {env['torch']} | "
               f"copy {ceil['copy_gbs']:.0f} GB/s, mm {ceil['mm_tflops']:.0f} TFLOP/s")
    timer = timers.ModelTimer() if a.dry_run else timers.CudaEventTimer(iters=a.iters, warmup=a.warmup)
    rows, t0 = [], time.time()
    for name, kw in cases(a):
        if a.budget_s and time.time() - t0 > a.budget_s:
            csvio.progress(f"# budget of {a.budget_s:.0f}s spent: stopping before {name}")
            break
        try:
            rows += run_case(a, name, kw, timer, ceil, env, device)
        except Exception as exc:  # noqa: BLE001 - e.g. out of memory building the inputs
            csvio.progress(f"  {name}: could not build or run: {type(exc).__name__}: {exc}")
            rows.append({"case": name, "status": f"error: {type(exc).__name__}: {exc}"[:160], **ceil, **env})
            if device == "cuda":
                torch.cuda.empty_cache()
    if a.csv:
        csvio.write_csv(a.csv, rows, append=False, columns=NSA_COLUMNS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
