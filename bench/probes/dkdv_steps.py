"""The backward with each dk/dv step (pairs a step x pipeline stages) on this GPU, the rest of the plan unchanged.

    python -m bench.probes.dkdv_steps [T[:Dk:Dv] ...]      (default 8192, Dk = Dv = 256)

Per case (B = 1, G = 4 x h = 16, top-16 random causal blocks of 64, bf16; ``kernels/direct.sel_attn_backward`` after
one forward): the plan's own step; the step it takes where a program has 99 KiB of shared memory (``shared=`` of
sm_89: at Dk = Dv = 256, 16 pairs x 3 stages; elsewhere the plan's own); and 32 x 2, 16 x 2, 32 x 1.  Median ms
(``triton.testing.do_bench``), and whether the gradients equal the plan's own bit for bit (the step changes no
arithmetic order: it should).
"""

from __future__ import annotations

import argparse

STEPS = (("plan (32 pairs x 3 stages)", {}), ("99-KiB plan", {"shared": 101376}),
         ("32 pairs x 2 stages", {"rows": 32, "kv_stages": 2}), ("16 pairs x 2 stages", {"rows": 16, "kv_stages": 2}),
         ("32 pairs x 1 stage", {"rows": 32, "kv_stages": 1}))


def run(T: int, Dk: int, Dv: int) -> None:
    import torch
    import triton

    from nsa_triton_sel.kernels import direct
    from nsa_triton_sel.testing import nsa_ranges

    torch.manual_seed(0)
    B, G, h = 1, 4, 16
    q = torch.randn(B, T, G, h, Dk, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, G, T, Dk, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(B, G, T, Dv, device="cuda", dtype=torch.bfloat16)
    r = nsa_ranges(B, T, G, 16, 64, seed=0, local=False, device="cuda")
    out, lse = direct.sel_attn_ranges(q, k, v, r, return_lse=True)
    go = torch.randn_like(out)
    print(torch.cuda.get_device_name(), "triton", triton.__version__,
          f"B={B} T={T} G={G} h={h} Dk={Dk} Dv={Dv} top-16 x 64 random, bf16")
    ref = None
    for name, tune in STEPS:
        def call(tune=tune):
            return direct.sel_attn_backward(q, k, v, r, out, lse, go, **tune)
        got = call()
        ref = ref or got
        same = all(torch.equal(a, b) for a, b in zip(got, ref))
        ms = triton.testing.do_bench(call, warmup=50, rep=300)
        print(f"{name:36s} backward {ms:7.3f} ms  bitwise = plan: {same}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("cases", nargs="*", default=["8192"], help="T or T:Dk:Dv (default 8192, Dk = Dv = 256)")
    for case in p.parse_args(argv).cases:
        T, Dk, Dv = (list(map(int, case.split(":"))) + [256, 256])[:3]
        run(T, Dk, Dv)


if __name__ == "__main__":
    main()
