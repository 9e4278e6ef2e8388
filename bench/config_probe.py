"""Which launch configurations compute the right answer on this GPU with this Triton?

Each (kernel, BLOCK_N, num_warps, num_stages) runs in its own child process — a
miscompiled kernel can make an illegal memory access, which poisons the CUDA context —
on a fresh NSA-shaped problem, and is compared with the packed-SDPA path in float32.
Prints one verdict per configuration: ok, wrong (max error), nan, or crash (the error).
This is how the Triton 3.0 + Hopper window in src/nsa_triton_sel/data/known_bad.toml was narrowed down.

Usage:  python -m bench.config_probe [--T 1024] [--h 16]
"""

from __future__ import annotations

import argparse
import subprocess
import sys

CHILD = r"""
import sys, torch
from nsa_triton_sel.kernels import direct
from nsa_triton_sel.reference import packed_sdpa
from nsa_triton_sel.testing import make_problem, nsa_ranges
kind, bn, nw, ns, T, h = sys.argv[1], *map(int, sys.argv[2:7])
p = make_problem(B=1, S=T, G=2, h=h, Dk=128, Dv=128, T=T, n=1, dtype=torch.bfloat16, device="cuda", seed=0)
r = nsa_ranges(1, T, 2, 16, 64, seed=1, local=(kind == "tokens"), device="cuda")
tune = dict(block_n=bn, num_warps=nw, num_stages=ns)
fn = {"ranges": direct.sel_attn_ranges, "tokens": direct.sel_attn_tokens, "decode": direct.sel_attn_decode}[kind]
out = fn(p.q, p.k, p.v, r, **tune)
torch.cuda.synchronize()
ref = packed_sdpa(p.q.float(), p.k.float(), p.v.float(), r)
if torch.isnan(out).any():
    print("VERDICT nan")
else:
    err = (out.float() - ref).abs().max().item()
    print("VERDICT " + ("ok" if err < 5e-2 else "wrong") + f" max_err={err:.3g}")
"""


CONFIGS = {  # (BLOCK_N, num_warps, num_stages): the defaults and their neighbours
    "ranges": [(32, 1, 3), (32, 1, 2), (32, 1, 1), (32, 2, 3), (32, 4, 3), (64, 4, 3), (64, 4, 2), (64, 4, 1)],
    "tokens": [(64, 4, 2), (64, 4, 1), (32, 4, 2)],
    "decode": [(64, 4, 3), (64, 4, 1)],
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--h", type=int, default=16)
    ap.add_argument("--kinds", default="ranges,tokens")
    args = ap.parse_args(argv)
    import triton

    print(f"triton {triton.__version__}", flush=True)
    for kind in args.kinds.split(","):
        for bn, nw, ns in CONFIGS[kind]:
            cmd = [sys.executable, "-c", CHILD, kind, str(bn), str(nw), str(ns), str(args.T), str(args.h)]
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            lines = [ln for ln in res.stdout.splitlines() if ln.startswith("VERDICT ")]
            verdict = lines[-1][8:] if lines else f"crash rc={res.returncode}: " + (res.stderr.strip().splitlines() or ["?"])[-1][:120]
            print(f"{kind:7s} BLOCK_N={bn:3d} num_warps={nw} num_stages={ns}: {verdict}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
