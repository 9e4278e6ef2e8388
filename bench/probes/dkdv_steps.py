"""The backward with each dk/dv step (pairs a step x pipeline stages) on this GPU, the rest of the plan unchanged.

    python -m bench.probes.dkdv_steps [T[:Dk:Dv[:h]] ...] [--steps 32x3,32x2,...]   (default 8192, Dk = Dv = 256)

Per case (B = 1, G = 4 groups of h = 16 heads unless given, top-16 random causal blocks of 64, bf16;
``kernels/direct.sel_attn_backward`` after one forward): the plan's own step on this GPU, then each step of
``--steps`` (default: every entry of ``plan.backward.KV_STEPS``).  Per step: its operand buffers in shared memory
as the plan reckons them (``dkdv_shared_bytes`` + ``KV_SHARED_SLACK``) and how many such programs this GPU's
shared memory holds at once, the median ms (``triton.testing.do_bench``), and whether the gradients equal the
plan's own bit for bit (the step changes no arithmetic order: they should).
"""

from __future__ import annotations

import argparse


def run(T: int, Dk: int, Dv: int, h: int, steps: list[tuple[int, int]]) -> None:
    import torch
    import triton

    from nsa_triton_sel.device import device_of, shared_limit
    from nsa_triton_sel.kernels import direct
    from nsa_triton_sel.plan.backward import KV_SHARED_SLACK, backward_meta, dkdv_shared_bytes
    from nsa_triton_sel.testing import nsa_ranges

    torch.manual_seed(0)
    B, G = 1, 4
    q = torch.randn(B, T, G, h, Dk, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, G, T, Dk, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(B, G, T, Dv, device="cuda", dtype=torch.bfloat16)
    r = nsa_ranges(B, T, G, 16, 64, seed=0, local=False, device="cuda")
    out, lse = direct.sel_attn_ranges(q, k, v, r, return_lse=True)
    go = torch.randn_like(out)
    limit = shared_limit(device_of(q.device).arch)
    plan = backward_meta(h=h, Dk=Dk, Dv=Dv, shared=limit)
    print(torch.cuda.get_device_name(), "triton", triton.__version__, f"B={B} T={T} G={G} h={h} Dk={Dk} Dv={Dv} "
          f"top-16 x 64 random, bf16; shared per program {limit} B; the plan's step: {plan.ROWS} x {plan.kv_stages}")
    ref = None
    for rows, stages in [(None, None)] + steps:
        tune = {} if rows is None else {"rows": rows, "kv_stages": stages}
        m = backward_meta(h=h, Dk=Dk, Dv=Dv, shared=limit, **tune)
        need = dkdv_shared_bytes(m.KV_BLOCK_N, m.ROWS, m.DK1 + m.DK2, m.BLOCK_DV, m.kv_stages) + KV_SHARED_SLACK
        name = ("plan " if rows is None else "") + f"{m.ROWS} pairs x {m.kv_stages} stages"

        def call(tune=tune):
            return direct.sel_attn_backward(q, k, v, r, out, lse, go, **tune)
        got = call()
        ref = ref or got
        same = all(torch.equal(a, b) for a, b in zip(got, ref))
        ms = triton.testing.do_bench(call, warmup=50, rep=300)
        fit = (limit // need) if limit else "?"
        print(f"{name:28s} {need:7d} B ({fit} fit at once) backward {ms:8.3f} ms  bitwise = plan: {same}",
              flush=True)


def main(argv=None) -> None:
    from nsa_triton_sel.plan.backward import KV_STEPS

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("cases", nargs="*", default=["8192"], help="T or T:Dk:Dv or T:Dk:Dv:h (default 8192, Dk = Dv = 256)")
    p.add_argument("--steps", default=",".join(f"{r}x{s}" for r, s in KV_STEPS),
                   help="the steps to time besides the plan's, ROWSxSTAGES comma-separated")
    a = p.parse_args(argv)
    steps = [tuple(map(int, s.split("x"))) for s in a.steps.split(",") if s]
    for case in a.cases:
        T, Dk, Dv, h = (list(map(int, case.split(":"))) + [256, 256, 16][len(case.split(":")) - 1:])[:4]
        run(T, Dk, Dv, h, steps)


if __name__ == "__main__":
    main()
