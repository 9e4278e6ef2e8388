"""What a packed batch costs against the same work at fixed length (target: ratio <= 1.03).

    python -m bench.perf.packed_cost [--cases 1x8192,4x2048,4x8192] [--pattern random,local] [--validate] [--backward]

The same sequences, the same tensors and the same (sequence-local) block indices, called two ways
through the public API in the fla layout:

- fixed: ``q [B, T, HQ, D]``, ``k/v [B, T, H, D]``, ``block_indices [B, T, H, n]`` (the kernel reads the
  block indices itself);
- packed: the same memory viewed as ``[1, B * T, ...]`` with ``cu_seqlens = [0, T, 2T, ...]`` (the
  sequence-local indices become global ranges on the device: the conversion is part of the call).

Canonical NSA shape: G = 4 groups of h = 16 heads, D = 128, blocks of 64, top-16, bf16.  Each side is
timed with ``triton.testing.do_bench`` (median, L2 flushed by do_bench), alternating fixed / packed for
``--rounds`` rounds, and the ratio is the median packed time over the median fixed time.  The
conversion's own GPU time (uncached row quantities included) is printed too.  The packed calls
reuse one cu_seqlens tensor, as the layers of a model do, so the row quantities come from the cache
(``arguments/layouts.py`` ``cached_rows``); ``--fresh-cu`` passes a new cu_seqlens tensor every call (a cache miss).  Outputs of the two calls are compared (max abs diff).
``--dry`` runs one tiny case on the CPU (Triton interpreter) to check the script.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

TARGET = 1.03


def log(*a):
    print(*a, flush=True)


def bench_ms(fn, dry: bool, grad_to_none=None) -> float:
    if dry:
        import time

        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    import triton.testing as tt

    return float(tt.do_bench(fn, warmup=25, rep=100, grad_to_none=grad_to_none, return_mode="median"))


def problem(B: int, T: int, pattern: str, *, G=4, h=16, D=128, bs=64, topn=16, dtype=torch.bfloat16,
            device="cuda", seed=0) -> dict:
    from nsa_triton_sel.testing import nsa_block_indices

    gen = torch.Generator(device=device).manual_seed(seed)
    idx = nsa_block_indices(B, T, G, T, bs, topn, pattern, gen)  # [B, T, G, n]: the fla layout [B, T, H, n]

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=device, dtype=torch.float32).to(dtype)

    q, k, v = randn(B, T, G * h, D), randn(B, T, G, D), randn(B, T, G, D)
    cu = torch.arange(0, B * T + 1, T, device=device, dtype=torch.int32)
    return dict(q=q, k=k, v=v, idx=idx, cu=cu, bs=bs, B=B, T=T)


def calls(p: dict, validate: bool, backward: bool, fresh_cu: bool = False):
    from nsa_triton_sel import selection_attention

    B, T = p["B"], p["T"]
    flat = {n: p[n].reshape(1, B * T, *p[n].shape[2:]) for n in ("q", "k", "v", "idx")}  # views, no copy
    for x, y in ((p["q"], flat["q"]), (p["idx"], flat["idx"])):
        assert x.data_ptr() == y.data_ptr()
    go = torch.randn_like(p["q"]) if backward else None
    leaves = [p[n].requires_grad_(backward) for n in ("q", "k", "v")]

    def fixed():
        out = selection_attention(*leaves, block_indices=p["idx"], block_size=p["bs"], validate=validate)
        if backward:
            out.backward(go)
        return out

    def packed():
        q, k, v = (x.reshape(1, B * T, *x.shape[2:]) for x in leaves)
        cu = p["cu"].clone() if fresh_cu else p["cu"]
        out = selection_attention(q, k, v, block_indices=flat["idx"], block_size=p["bs"], cu_seqlens=cu,
                                  validate=validate)
        if backward:
            out.backward(go.reshape(out.shape))
        return out

    return fixed, packed, leaves


def conversion(p: dict):
    """The packed call's extra device work alone, uncached: the row quantities (which a call with the
    same cu_seqlens tensor reuses, as the timed packed calls do) and the global ranges."""
    from nsa_triton_sel.arguments import layouts as varlen

    B, T = p["B"], p["T"]
    idx = p["idx"].reshape(1, B * T, *p["idx"].shape[2:])
    return lambda: varlen.global_ranges(idx, varlen.rows(p["cu"], p["cu"], B * T, B * T, None, p["bs"]), p["bs"])


def run_case(B: int, T: int, pattern: str, args) -> dict:
    dev = "cpu" if args.dry else "cuda"
    p = problem(B, T, pattern, device=dev, **(dict(G=2, h=2, D=16, bs=16, topn=2, dtype=torch.float16)
                                                if args.dry else {}))
    fixed, packed, _ = calls(p, args.validate, False)
    diff = (fixed().float() - packed().reshape(B, T, *p["q"].shape[2:]).float()).abs().max().item()
    fixed, packed, leaves = calls(p, args.validate, args.backward, args.fresh_cu)
    tf, tp = [], []
    for _ in range(args.rounds):
        tf.append(bench_ms(fixed, args.dry, leaves if args.backward else None))
        tp.append(bench_ms(packed, args.dry, leaves if args.backward else None))
    conv = bench_ms(conversion(p), args.dry)
    f, pk = statistics.median(tf), statistics.median(tp)
    return dict(B=B, T=T, pattern=pattern, fixed_ms=f, packed_ms=pk, ratio=pk / f, conv_ms=conv, diff=diff,
                fixed_all=tf, packed_all=tp)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="1x8192,4x2048,4x8192",
                    help="BxT: B sequences of T tokens (comma list); small totals measure the host, not the GPU")
    ap.add_argument("--pattern", default="random,local")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--validate", action="store_true", help="validate=True on both sides (default: False)")
    ap.add_argument("--backward", action="store_true", help="time forward + backward")
    ap.add_argument("--fresh-cu", action="store_true", help="a new cu_seqlens tensor every call (no cached rows)")
    ap.add_argument("--dry", action="store_true", help="one tiny case on the CPU (Triton interpreter)")
    args = ap.parse_args(argv)
    if args.dry:
        os.environ.setdefault("TRITON_INTERPRET", "1")
        cases, pats = [(2, 64)], ["local"]
    elif not torch.cuda.is_available():
        log("packed_cost: no CUDA device (use --dry for a CPU check of the script)")
        return 2
    else:
        cases = [tuple(int(x) for x in c.split("x")) for c in args.cases.split(",")]
        pats = args.pattern.split(",")
    import triton

    name = "cpu (interpreter)" if args.dry else torch.cuda.get_device_name()
    log(f"packed_cost: {name}, torch {torch.__version__}, triton {triton.__version__}, validate={args.validate}, "
        f"backward={args.backward}, fresh_cu={args.fresh_cu}, {'tiny fp16 shapes' if args.dry else 'G=4 h=16 D=128 block 64 top-16 bf16'}, "
        f"do_bench median of {args.rounds} rounds")
    log(f"{'B':>3} {'T':>6} {'pattern':>7} {'fixed ms':>9} {'packed ms':>9} {'ratio':>6} {'conv ms':>8} {'max diff':>9}")
    worst = 0.0
    for B, T in cases:
        for pat in pats:
            r = run_case(B, T, pat, args)
            worst = max(worst, r["ratio"])
            log(f"{B:>3} {T:>6} {pat:>7} {r['fixed_ms']:>9.4f} {r['packed_ms']:>9.4f} {r['ratio']:>6.3f} "
                f"{r['conv_ms']:>8.4f} {r['diff']:>9.2e}   rounds fixed {['%.4f' % x for x in r['fixed_all']]} "
                f"packed {['%.4f' % x for x in r['packed_all']]}")
    verdict = "PASS" if worst <= TARGET else "FAIL"
    log(f"worst packed/fixed ratio {worst:.3f} (target <= {TARGET}): {verdict}")
    return 0 if args.dry or worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
