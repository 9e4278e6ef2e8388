"""Where an eager decode call's host time goes, step by step, without a profiler.

    PYTHONPATH=TREE/src:. python -m bench.probes.host_steps [--calls 200] [--rounds 15]

The A/B suite's decode step (``test_ab.decode_problem``: B = 64, T = 32K, 4 x 16 heads, D = 128, bf16, ranges,
``validate=False``) is timed whole, then each step of the way down on its own with the arguments the step above
hands it (parse, the operator's implementation, the plan, the launch, the two output allocations, the bound
launcher, Triton's compiled launcher called directly), then the torch and Triton primitives the steps call.  Each
line is the best of ``--rounds`` rounds of ``--calls`` calls, in microseconds per call, with the GPU held busy
through each round (a spin kernel first), so that no row waits for the GPU; ``cProfile`` (which
``bench/ab/host_profile.py`` runs) inflates small functions, so it says where, this says how much.
"""

from __future__ import annotations

import argparse
import time

import torch

from bench.ab import test_ab


def best_us(fn, calls: int, rounds: int, hold) -> float:
    """Best of ``rounds`` rounds of ``calls`` calls, in us per call, with the GPU held busy through each round
    (``hold``: a spin kernel queued first), so the host never waits for the GPU: a loop of kernel launches
    otherwise measures the kernels once the launch queue is full."""
    for _ in range(min(calls, 50)):
        fn()
    best = float("inf")
    for _ in range(rounds):
        torch.cuda.synchronize()
        hold()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
    torch.cuda.synchronize()
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.probes.host_steps", description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200, help="calls per round (the launch queue holds about 1000)")
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args(argv)
    import nsa_triton_sel
    from nsa_triton_sel import api, arguments, op, plan
    from nsa_triton_sel.arguments import kind as kinds
    from nsa_triton_sel.contract import is_compiling
    from nsa_triton_sel.kernels import bind, forward as fwd_kernels, launch, params

    p = test_ab.decode_problem()
    q, k, v, r = p["q"], p["k"], p["v"], p["ranges"]
    sa = nsa_triton_sel.selection_attention
    call = arguments.parse(q, k, v, r, validate=False)
    args = call.op_args
    pl = plan.plan_call(*args[:5], per_head=args[8], tokens=args[9], span_len=args[7], packed=args[10])
    B, S, G, h, Dk = q.shape
    Dv = v.shape[3]
    out = torch.empty((B, S, G, h, Dv), dtype=v.dtype, device=q.device)
    lse = torch.empty((B, S, G, h), dtype=torch.float32, device=q.device)

    # the bound launcher's entry for this shape (recorded by the calls above and the warm-up)
    for _ in range(3):
        sa(q, k, v, r, validate=False)
    b = bind.bound(fwd_kernels.sel_fwd_kernel)
    entries = [e for e in b.shapes.values() if type(e).__name__ == "_Launcher"]
    fw = pl.forward
    meta = fw.meta
    kargs = params.packer(fwd_kernels.sel_fwd_kernel)(
        Q=q, K=k, V=v, O=out, LSE=lse, SPANS=r, POS=out, OP=out, LP=out, S=S, G=G, h=h, Dk=Dk, Dv=Dv,
        n_spans=r.shape[3], seq_len=k.shape[2], block_size=0, num_splits=fw.num_splits, qk_scale=call.scale * 1.4427,
        sq=q.stride(), sk=k.stride(), sv=v.stride(), so=out.stride(), sl=lse.stride(), sr=r.stride(), sp=(0, 0))

    def kw():
        return dict(num_warps=meta.num_warps, num_stages=meta.num_stages, **meta.constexprs())

    import triton

    from bench.common.timers import _calibrate_sleep
    per_ms = _calibrate_sleep(torch.cuda._sleep)
    hold_cycles = int(per_ms * a.calls * 0.3)  # 300 us of GPU per call in the round: longer than any row

    def hold():
        torch.cuda._sleep(hold_cycles)

    drv = triton.runtime.driver.active
    get_stream, get_dev = drv.get_current_stream, drv.get_current_device
    from nsa_triton_sel import replay

    like = torch.empty(0, dtype=v.dtype, device=q.device).new_empty_strided  # as a replay allocates
    rows = [
        ("selection_attention (ranges, validate=False)", lambda: sa(q, k, v, r, validate=False)),
        ("  replay.lookup (a replayed signature)", lambda: replay.lookup(q, k, v, r, None, None, None, None, "auto",
                                                                         False)),
        ("    replay._signature", lambda: replay._signature(q, k, v, r, False, None, None, None, "auto", False)),
        ("  arguments.parse", lambda: arguments.parse(q, k, v, r, validate=False)),
        ("  api._compute (op.forward below it)", lambda: api._compute(call)),
        ("    op.forward", lambda: op.forward(*args)),
        ("      plan.plan_call", lambda: plan.plan_call(*args[:5], per_head=args[8], tokens=args[9], span_len=args[7],
                                                       packed=args[10])),
        ("      launch.forward", lambda: launch.forward(pl, q, k, v, r, None, scale=call.scale, block_size=0)),
        ("        2 x torch.empty (out, lse)", lambda: (torch.empty((B, S, G, h, Dv), dtype=v.dtype, device=q.device),
                                                        torch.empty((B, S, G, h), dtype=torch.float32,
                                                                    device=q.device))),
        ("        params.packer(...)(...)", lambda: params.packer(fwd_kernels.sel_fwd_kernel)(
            Q=q, K=k, V=v, O=out, LSE=lse, SPANS=r, POS=out, OP=out, LP=out, S=S, G=G, h=h, Dk=Dk, Dv=Dv,
            n_spans=r.shape[3], seq_len=k.shape[2], block_size=0, num_splits=1, qk_scale=1.0,
            sq=q.stride(), sk=k.stride(), sv=v.stride(), so=out.stride(), sl=lse.stride(), sr=r.stride(),
            sp=(0, 0))),
        ("        bind.bound(fn)(plan, grid, args, kwargs)", lambda: bind.bound(fwd_kernels.sel_fwd_kernel)(
            fw, fw.grid, kargs, kw)),
        ("          key_of(plan, device, args)", lambda: b._key_of(fw, b._device, kargs)),
    ]
    if entries:
        e = entries[0]
        g = fw.grid + (1,) * (3 - len(fw.grid))
        rows.append(("          compiled launcher (Triton's __call__)", lambda: e.run(
            g[0], g[1], g[2], get_stream(get_dev()), e.function, e.packed, None, None, None, *kargs, *e.tail)))
        if e.inner is not None:  # the compiled C launch itself, as a replay calls it (kernels.bind.Inner)
            straight = e.inner.arguments((g[0], g[1], g[2], get_stream(get_dev()), e.function, e.packed, None, None,
                                          None, *kargs, *e.tail))
            rows.append(("          compiled C launch (straight)", lambda: e.inner.launch(*straight)))
    rows += [
        ("primitives: is_compiling()", is_compiling),
        ("primitives: kind_of(q, k, v, r, None)", lambda: kinds.kind_of(q, k, v, r, None)),
        ("primitives: torch.cuda.is_current_stream_capturing()", torch.cuda.is_current_stream_capturing),
        ("primitives: torch.is_grad_enabled()", torch.is_grad_enabled),
        ("primitives: q.shape", lambda: q.shape),
        ("primitives: q.stride()", lambda: q.stride()),
        ("primitives: q.device", lambda: q.device),
        ("primitives: q.dtype", lambda: q.dtype),
        ("primitives: q.data_ptr()", lambda: q.data_ptr()),
        ("primitives: q.requires_grad", lambda: q.requires_grad),
        ("primitives: q.is_cuda", lambda: q.is_cuda),
        ("primitives: torch.empty bf16 [64,1,4,16,128]", lambda: torch.empty((B, S, G, h, Dv), dtype=v.dtype,
                                                                               device=q.device)),
        ("primitives: torch.empty_strided bf16 [64,1,4,16,128]", lambda: torch.empty_strided(
            (B, S, G, h, Dv), out.stride(), dtype=v.dtype, device=q.device)),
        ("primitives: an empty tensor's new_empty_strided [64,1,4,16,128]", lambda: like(
            (B, S, G, h, Dv), out.stride())),
        ("primitives: torch.empty_like(q)", lambda: torch.empty_like(q)),
        ("primitives: q.new_empty(shape)", lambda: q.new_empty((B, S, G, h, Dv))),
        ("primitives: driver get_current_stream(get_current_device())", lambda: get_stream(get_dev())),
        ("primitives: torch.cuda.current_stream()", torch.cuda.current_stream),
        ("primitives: torch._C._cuda_getCurrentRawStream(0)", lambda: torch._C._cuda_getCurrentRawStream(0)),
        ("primitives: torch.cuda.current_device()", torch.cuda.current_device),
    ]
    print(f"host_steps: {nsa_triton_sel.__file__}; {torch.cuda.get_device_name()}; torch {torch.__version__}, "
          f"triton {triton.__version__}; plan {fw.kernel}, grid {fw.grid}, splits {fw.num_splits}")
    for name, fn in rows:
        try:
            us = best_us(fn, a.calls, a.rounds, hold)
            print(f"{us:8.2f} us  {name}")
        except Exception as exc:  # noqa: BLE001 - a probe line that does not apply to this tree
            print(f"   ----     {name}: {type(exc).__name__}: {exc}"[:200])
    print(f"launches: {test_ab.launch_report()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
