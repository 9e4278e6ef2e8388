"""The key-major dq against the token-major dq kernel inside the backward, its launch configurations and its time
split, on the GPU.

    python -m bench.probes.keymajor_dq [--T 32768] [--HQ 32] [--H 32]

One NSA problem (bf16, D = 128, 16 random causal blocks of 64; the operator's plan for it): the whole kernel
backward (``launch.backward``: dq, reader list, dk/dv) with the token-major dq and with the key-major dq over its
warps x stages, then the key-major dq's parts alone (delta in torch, the partials kernel, the merge) with
``triton.testing.do_bench`` (median, L2 flushed).  Every configuration's dq, dk and dv are compared with the
token-major backward's.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools

import torch
import triton.testing as tt

from nsa_triton_sel import plan as P
from nsa_triton_sel.contract import block_indices_to_ranges, resolve_scale
from nsa_triton_sel.kernels import direct, launch
from nsa_triton_sel.testing import nsa_problem


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, default=32768)
    ap.add_argument("--HQ", type=int, default=32)
    ap.add_argument("--H", type=int, default=32)
    a = ap.parse_args(argv)
    h = a.HQ // a.H
    p = nsa_problem(a.T, G=a.H, h=h)
    q, k, v, blocks = p["q"], p["k"], p["v"], p["blocks"]
    sc = resolve_scale(None, q.shape[-1])
    plan = P.plan_call(q, k, v, blocks, None, per_head=False, tokens=0, span_len=64, packed=False)
    ranges = block_indices_to_ranges(blocks, 64, a.T, validate=False)
    out, lse = direct.sel_attn_ranges(q, k, v, ranges, return_lse=True)
    go = torch.randn_like(out)

    def bench(fn):
        return float(tt.do_bench(fn, warmup=20, rep=100, return_mode="median"))

    def backward(pl):
        return launch.backward(pl, q, k, v, ranges, out, lse, go, None, scale=sc)

    print(f"T={a.T} HQ={a.HQ} H={a.H} h={h} {torch.cuda.get_device_name()}; forward {plan.forward.kernel}, "
          f"dq KV heads per pass {plan.dq_groups_per_pass}", flush=True)
    if plan.forward.kernel != "keymajor":
        print("the planner does not take the key-major forward here: nothing to compare", flush=True)
        return 0
    token = dataclasses.replace(plan, dq_groups_per_pass=0)
    want = backward(token)
    base = bench(lambda: backward(token))
    print(f"backward with the token-major dq: {base:.3f} ms", flush=True)
    meta = plan.forward.meta
    results = []
    for warps, stages in itertools.product((4, 8), (1, 2, 3)):
        fwd = dataclasses.replace(plan.forward, meta=dataclasses.replace(meta, dq_warps=warps, dq_stages=stages))
        pl = dataclasses.replace(plan, forward=fwd)
        try:
            got = backward(pl)
            ms = bench(lambda: backward(pl))
        except Exception as exc:  # noqa: BLE001 - a configuration that does not compile is a row
            print(f"warps={warps} stages={stages}: {type(exc).__name__}: {str(exc)[:120]}", flush=True)
            continue
        diffs = ", ".join(f"d{n} {(g.float() - w.float()).abs().max().item():.2e}" for n, g, w in zip("qkv", got, want))
        results.append((ms, warps, stages))
        print(f"warps={warps} stages={stages}: backward {ms:.3f} ms ({base / ms:.2f}x), against token-major: {diffs}",
              flush=True)
    best = min(results)
    print(f"best: warps={best[1]} stages={best[2]} {best[0]:.3f} ms ({base / best[0]:.2f}x)", flush=True)
    # the parts of the key-major dq, at the default launch
    B, S, G = q.shape[:3]
    delta = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
    t_delta = bench(lambda: torch.sum(go.float() * out.float(), dim=-1, out=delta))
    flag = torch.zeros((1,), dtype=torch.int32, device=q.device)
    t_flag = bench(lambda: torch.logical_not(torch.isfinite(q).all() & torch.isfinite(go).all(), out=flag[0]))
    dq = torch.empty_like(q)
    zero = torch.zeros((), device=q.device).expand(B, S, G, h)
    t_dq = bench(lambda: launch._launch_dq_keymajor(plan, q, k, v, ranges, out, lse, go, zero, dq, delta, flag, sc))
    t_tok = bench(lambda: launch._launch_dq(q, k, v, ranges, out, lse, go, zero, dq, delta, flag, plan.backward, sc))
    print(f"key-major dq in all {t_dq:.3f} ms (delta in torch {t_delta:.3f}, non-finite flag {t_flag:.3f}); "
          f"token-major dq kernel {t_tok:.3f} ms", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
