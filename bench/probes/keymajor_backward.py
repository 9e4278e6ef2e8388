"""The key-major path against the token-major kernels, forward and backward, and where the key-major backward's
time goes, on the GPU.

    python -m bench.probes.keymajor_backward [--T 32768] [--HQ 32] [--H 32,8,4] [--tune]

One NSA problem per ``H`` (bf16, D = 128, 16 random causal blocks of 64, ``h = HQ / H``): the operator's plans
with the key-major path taken and not (``plan.keymajor.forced``), timed with
``triton.testing.do_bench`` (median, L2 flushed): the forward (``launch.forward``) and the kernel backward
(``launch.backward``) of each, so every pairing of a forward with a backward reads off the table (the backward
needs the forward's LSE only).  The two backwards' dq, dk and dv are compared.  Then a ``torch.profiler``
trace of the key-major backward: its time per kernel (the reader list's build, its sort, the dq, the dk/dv).
``--tune``: the key-major backward kernel over pairs per step x warps x stages (``KeyMajorMeta.bwd_*``), each
checked against the default's gradients.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import importlib
import itertools

import torch
import triton.testing as tt

from nsa_triton_sel import plan as P
from nsa_triton_sel.contract import block_indices_to_ranges, resolve_scale
from nsa_triton_sel.kernels import launch
from nsa_triton_sel.testing import nsa_problem

KM = importlib.import_module("nsa_triton_sel.plan.keymajor")  # the module (the package exports a function of its name)


def plan_with(q, k, v, blocks, path: str) -> P.Plan:
    """The operator's plan with the key-major path forced on (``"key"``) or off (``"token"``)."""
    with KM.forced(path):
        return P.plan_call(q, k, v, blocks, None, per_head=False, tokens=0, span_len=64, packed=False)


def problem_and_plans(T: int, HQ: int, H: int, device: str = "cuda"):
    """The NSA problem of ``H`` KV heads and ``HQ // H`` heads each (random blocks of 64) and the operator's plans
    on it with the key-major path off and on: ``(h, q, k, v, blocks, ranges, scale, token_plan, key_plan)``."""
    h = HQ // H
    p = nsa_problem(T, G=H, h=h, device=device)
    q, k, v, blocks = p["q"], p["k"], p["v"], p["blocks"]
    ranges = block_indices_to_ranges(blocks, 64, T, validate=False)
    return (h, q, k, v, blocks, ranges, resolve_scale(None, q.shape[-1]), plan_with(q, k, v, blocks, "token"),
            plan_with(q, k, v, blocks, "key"))


def kernel_times(fn, steps: int = 3) -> list[tuple[str, float]]:
    """``(kernel, ms per call)`` of ``fn``'s GPU work, largest first, from ``torch.profiler``."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    per = collections.Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            per[e.name[:60]] += e.device_time_total / 1e3 / steps
    return per.most_common()


def tune(plan: P.Plan, backward, bench, h: int, T: int) -> None:
    """The key-major backward over its kernel's pairs per step x warps x stages, against the plan's default."""
    meta = plan.forward.meta
    want = backward(plan)
    entries = T * plan.dq_groups_per_pass * meta.per_row
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for pairs, warps, stages in itertools.product((32, 64), (4, 8), (1, 2, 3)):
        # the Triton kernel's launch (the Gluon kernel, where the plan has it, is written for 32-pair steps)
        m = dataclasses.replace(meta, bwd_rows=pairs, bwd_warps=warps, bwd_stages=stages, bwd_gluon=False)
        pl = dataclasses.replace(plan, forward=dataclasses.replace(plan.forward, meta=m),
                                 reader_chunk=m.bwd_chunk(entries, sm))
        try:
            got = backward(pl)
            ms = bench(lambda pl=pl: backward(pl))
        except Exception as exc:  # noqa: BLE001 - a launch that does not compile is a row
            print(f"  h={h} pairs={pairs} warps={warps} stages={stages}: {type(exc).__name__}: {str(exc)[:100]}",
                  flush=True)
            continue
        diff = max((x.float() - y.float()).abs().max().item() for x, y in zip(got, want))
        default = (pairs, warps, stages) == (meta.bwd_rows, meta.bwd_warps, meta.bwd_stages)
        rows.append((ms, pairs, warps, stages))
        print(f"  h={h} pairs={pairs} warps={warps} stages={stages}: backward {ms:.3f} ms, max diff to the default "
              f"{diff:.2e}{' (default)' if default else ''}", flush=True)
    best = min(rows)
    print(f"  h={h} best: pairs={best[1]} warps={best[2]} stages={best[3]} {best[0]:.3f} ms", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, default=32768)
    ap.add_argument("--HQ", type=int, default=32)
    ap.add_argument("--H", default="32,8,4", help="comma list of KV head counts")
    ap.add_argument("--tune", action="store_true", help="sweep the key-major backward kernel's launch")
    a = ap.parse_args(argv)

    def bench(fn):
        return float(tt.do_bench(fn, warmup=20, rep=100, return_mode="median"))

    print(f"{torch.cuda.get_device_name()}; T={a.T} HQ={a.HQ}", flush=True)
    print("| h | forward ms: token / key-major | backward ms: token / key-major | fwd + bwd ms: token / key-major / "
          "token fwd + key-major bwd | max diff dq / dk / dv |", flush=True)
    print("|---|---|---|---|---|", flush=True)
    profiles = []
    for H in (int(x) for x in a.H.split(",")):
        h, q, k, v, blocks, ranges, sc, token, keyed = problem_and_plans(a.T, a.HQ, H)
        if keyed.forward.kernel != "keymajor" or not keyed.dq_groups_per_pass:
            print(f"| {h} | the planner takes no key-major path here (forward {keyed.forward.kernel}) | | | |")
            continue
        out, lse = launch.forward(token, q, k, v, blocks, None, scale=sc, block_size=64)
        go = torch.randn_like(out)
        fwd = {n: bench(lambda pl=pl: launch.forward(pl, q, k, v, blocks, None, scale=sc, block_size=64))
               for n, pl in (("token", token), ("keyed", keyed))}

        def backward(pl):
            return launch.backward(pl, q, k, v, ranges, out, lse, go, None, scale=sc)

        bwd = {n: bench(lambda pl=pl: backward(pl)) for n, pl in (("token", token), ("keyed", keyed))}
        diffs = " / ".join(f"{(x.float() - y.float()).abs().max().item():.2e}"
                           for x, y in zip(backward(token), backward(keyed)))
        print(f"| {h} | {fwd['token']:.2f} / {fwd['keyed']:.2f} | {bwd['token']:.2f} / {bwd['keyed']:.2f} | "
              f"{fwd['token'] + bwd['token']:.2f} / {fwd['keyed'] + bwd['keyed']:.2f} / "
              f"{fwd['token'] + bwd['keyed']:.2f} | {diffs} |", flush=True)
        profiles.append((h, H, keyed.dq_groups_per_pass, kernel_times(lambda: backward(keyed))))
        if a.tune:
            tune(keyed, backward, bench, h, a.T)
        del q, k, v, out, lse, go
        torch.cuda.empty_cache()
    for h, H, gpp, times in profiles:
        total = sum(ms for _, ms in times)
        print(f"\nkey-major backward, h={h} ({H} KV heads, {gpp} per pass): {total:.2f} ms of kernels", flush=True)
        for name, ms in times[:12]:
            print(f"  {ms:8.3f} ms {100 * ms / total:5.1f} %  {name}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
