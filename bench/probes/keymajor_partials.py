"""The key-major path's partial results: where its time goes at small groups, and what their width is worth.

    python -m bench.probes.keymajor_partials [--T 32768] [--HQ 32] [--H 8,4] [--rows 512] [--json out.json]

The key-major forward writes one partial output (``Dv`` values, a scale and an LSE) per (row, key tile, head)
and merges them per row; its backward writes one partial dq per (row, key tile, head) and sums them.  In float32,
at 32K with 32 query heads, that is 8.7 GB written and read again each way, against 4.3 GB of gathered q rows:
the partials, not the key tiles, bound the path.  This probe runs the shipped key-major kernels with their
workspaces in float32, float16 (as shipped: ``plan.keymajor.PARTIAL_DTYPE``) and bfloat16 (the kernels store
each row divided by its scale in the workspace's element type and accumulate in float32), and reports per width:

- forward and backward ms (``do_bench`` medians, L2 flushed) and each kernel's share (``torch.profiler``), the
  token-major forward and backward beside them;
- the partial and merge kernels' bytes and GB/s against a measured device copy;
- the error against a float64 oracle on ``--rows`` sampled (token, KV head) rows: the output, and dq from
  the same rows' float64 gradient; the token-major path's error beside it.

The launches are the shipped launcher's steps (``launch._backward_keymajor_pass``; the forward pass written
out here with direct launches, since the bound launcher is specialised to a float32 workspace).
"""

from __future__ import annotations

import argparse
import json

import torch
import triton.testing as tt

from bench.probes.keymajor_backward import kernel_times, problem_and_plans
from nsa_triton_sel import plan as P
from nsa_triton_sel.kernels import backward as bwd_kernels
from nsa_triton_sel.kernels import forward as fwd_kernels
from nsa_triton_sel.kernels import launch, params
from nsa_triton_sel.kernels.readers import keymajor_reader_list
from nsa_triton_sel.plan.keymajor import DELTA_ROWS, MERGE_WARPS

WIDTHS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def forward_keymajor(plan: P.Plan, q, k, v, ranges, sc: float, ws_dtype, merge_stages: int = 1, partial=None):
    """The key-major forward of ``plan`` (its passes over KV heads, reader list, partial kernel, merge) with the
    partial outputs in ``ws_dtype`` and the merge pipelined over ``merge_stages``: ``(out, lse)``.  ``partial``
    (None: the shipped kernel) launches another partial kernel: ``partial(qs, ks, vs, op, op_scale, lp, readers)``
    on a pass's views."""
    meta = plan.forward.meta
    B, S, G, h, Dk = q.shape
    T, Dv = k.shape[2], v.shape[3]
    out = torch.empty((B, S, G, h, Dv), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, S, G, h), dtype=torch.float32, device=q.device)
    gpp = meta.groups_per_pass
    op = torch.empty((B * S * gpp * meta.per_row, h, Dv), dtype=ws_dtype, device=q.device)
    lp = torch.empty((B * S * gpp * meta.per_row, h), dtype=torch.float32, device=q.device)
    op_scale = torch.empty_like(lp)
    for g0 in range(0, G, gpp):
        g = slice(g0, min(g0 + gpp, G))
        qs, ks, vs, os_, ls, rs = q[:, :, g], k[:, g], v[:, g], out[:, :, g], lse[:, :, g], ranges[:, :, g]
        Gp = qs.shape[2]
        readers = keymajor_reader_list(rs, T, meta)
        if partial is not None:
            partial(qs, ks, vs, op, op_scale, lp, readers)
        else:
            fn = fwd_kernels.sel_fwd_keymajor_kernel
            fn[(readers.chunks.shape[0],)](
                *params.packer(fn)(Q=qs, K=ks, V=vs, OP=op, OP_SCALE=op_scale, LP=lp, ENTRIES=readers.entries,
                                   ORIGIN=readers.origin, CHUNKS=readers.chunks, G=Gp, h=h, Dk=Dk, Dv=Dv, T=T,
                                   NT=readers.n_tiles, qk_scale=sc * 1.4426950408889634, sq=qs.stride(),
                                   sk=ks.stride(), sv=vs.stride()),
                num_warps=meta.num_warps, num_stages=meta.num_stages, **meta.kernel_constexprs())
        merge = fwd_kernels.sel_fwd_keymajor_merge_kernel
        merge[(P.cdiv(B * S * Gp, meta.merge_rows_per_program()),)](
            *params.packer(merge)(OP=op, OP_SCALE=op_scale, LP=lp, SPANS=rs, O=os_, LSE=ls, S=S, G=Gp, h=h, Dv=Dv,
                                  n_spans=rs.shape[3], T=T, per_row=meta.per_row, n_rows=B * S * Gp,
                                  sr=rs.stride(), so=os_.stride(), sl=ls.stride()),
            num_warps=MERGE_WARPS, num_stages=merge_stages, **meta.merge_constexprs())
    return out, lse


def backward_keymajor(plan: P.Plan, q, k, v, ranges, out, lse, go, sc: float, ws_dtype):
    """The key-major backward of ``plan`` (``launch._backward_keymajor``) with the partial dq in ``ws_dtype``:
    ``(dq, dk, dv)``."""
    meta = plan.forward.meta
    B, S, G, h, Dk = q.shape
    T, Dv = k.shape[2], v.shape[3]
    dq = torch.empty_like(q)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    grad_lse = torch.zeros((), dtype=torch.float32, device=q.device).expand(B, S, G, h)
    delta = torch.empty((B, S, G, h), dtype=torch.float32, device=q.device)
    do_l1_log2 = torch.empty_like(delta)
    nonfinite = torch.zeros((1,), dtype=torch.int32, device=q.device)
    n_rows = B * S * G * h
    fn = bwd_kernels.sel_bwd_dq_keymajor_delta_kernel
    fn[(P.cdiv(n_rows, DELTA_ROWS),)](
        *params.packer(fn)(Q=q, O=out, DO=go, DLSE=grad_lse, DELTA=delta, DO_L1_LOG2=do_l1_log2, NONFINITE=nonfinite,
                           S=S, G=G, h=h, Dk=Dk, Dv=Dv, n_rows=n_rows, sq=q.stride(), so=out.stride(), sdo=go.stride(),
                           sdl=grad_lse.stride()),
        num_warps=MERGE_WARPS, num_stages=1, **meta.delta_constexprs(load_delta=False))
    gpp = plan.dq_groups_per_pass
    dqp = torch.empty((B * S * gpp * meta.per_row, h, Dk), dtype=ws_dtype, device=q.device)
    dqp_scale = torch.empty((B * S * gpp * meta.per_row, h), dtype=torch.float32, device=q.device)
    for g0 in range(0, G, gpp):
        g = slice(g0, min(g0 + gpp, G))
        launch._backward_keymajor_pass(plan, q[:, :, g], k[:, g], v[:, g], ranges[:, :, g], lse[:, :, g],
                                       go[:, :, g], delta[:, :, g], do_l1_log2[:, :, g], nonfinite, dq[:, :, g],
                                       dk[:, g], dv[:, g], dqp, dqp_scale, sc, None)
    return dq, dk, dv, dqp, dqp_scale


def dq_merge(plan: P.Plan, q, ranges, T: int, dqp, dqp_scale, stages: int):
    """The dq merge of the last pass's KV heads (``dqp``: that pass's partials), pipelined over ``stages``."""
    meta = plan.forward.meta
    B, S, G, h, Dk = q.shape
    g = slice((G - 1) // plan.dq_groups_per_pass * plan.dq_groups_per_pass, G)
    qs, rs = q[:, :, g], ranges[:, :, g]
    dq = torch.empty_like(qs)
    merge = bwd_kernels.sel_bwd_dq_keymajor_merge_kernel
    merge[(P.cdiv(B * S * qs.shape[2], meta.merge_rows_per_program()),)](
        *params.packer(merge)(DQP=dqp, DQP_SCALE=dqp_scale, SPANS=rs, DQ=dq, S=S, G=qs.shape[2], h=h, Dk=Dk,
                              n_spans=rs.shape[3], T=T, per_row=meta.per_row, n_rows=B * S * qs.shape[2],
                              sr=rs.stride(), sdq=dq.stride()),
        num_warps=MERGE_WARPS, num_stages=stages, **meta.dq_merge_constexprs(Dk))
    return dq


def oracle_rows(q, k, v, go, ranges, sc: float, n_rows: int, seed: int = 1):
    """Float64 output and dq of ``n_rows`` sampled (token, KV head) rows (batch 0): ``(t, g, o, dq)``."""
    B, S, G, h, D = q.shape
    gen = torch.Generator(device=q.device).manual_seed(seed)
    t = torch.randint(0, S, (n_rows,), generator=gen, device=q.device)
    g = torch.randint(0, G, (n_rows,), generator=gen, device=q.device)
    r = ranges[0, t, g].long()  # [R, n, 2]
    span = int((r[..., 1] - r[..., 0]).max().item())
    pos = r[..., 0:1] + torch.arange(span, device=q.device)  # [R, n, span]
    ok = pos < r[..., 1:2]
    idx = torch.where(ok, pos, 0).flatten(1)  # [R, L]
    ok = ok.flatten(1)
    kk = k[0].double()[g[:, None], idx]  # [R, L, D]
    vv = v[0].double()[g[:, None], idx]
    qq, dd = q[0, t, g].double(), go[0, t, g].double()  # [R, h, D]
    s = torch.einsum("rhd,rld->rhl", qq, kk) * sc
    p = torch.softmax(s.masked_fill(~ok[:, None, :], float("-inf")), dim=-1)
    o = torch.einsum("rhl,rld->rhd", p, vv)
    dp = torch.einsum("rhd,rld->rhl", dd, vv)
    ds = p * (dp - (dd * o).sum(-1, keepdim=True))
    dq = torch.einsum("rhl,rld->rhd", ds, kk) * sc
    return t, g, o, dq


def copy_ceiling(bench) -> float:
    """GB/s of a 2 GiB device-to-device copy (read + write)."""
    x = torch.empty(1 << 30, dtype=torch.int16, device="cuda")
    y = torch.empty_like(x)
    ms = bench(lambda: y.copy_(x))
    return 2 * x.numel() * 2 / ms / 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, default=32768)
    ap.add_argument("--HQ", type=int, default=32)
    ap.add_argument("--H", default="8,4", help="comma list of KV head counts (h = HQ / H)")
    ap.add_argument("--rows", type=int, default=512, help="(token, KV head) rows checked against float64")
    ap.add_argument("--widths", default="fp32,fp16,bf16")
    ap.add_argument("--merge-stages", default="", help="comma list: time both merges (float16) at these num_stages")
    ap.add_argument("--json")
    a = ap.parse_args(argv)

    def bench(fn):
        return float(tt.do_bench(fn, warmup=20, rep=100, return_mode="median"))

    ceiling = copy_ceiling(bench)
    print(f"{torch.cuda.get_device_name()}; T={a.T} HQ={a.HQ}; device copy {ceiling:.0f} GB/s", flush=True)
    results = []
    for H in (int(x) for x in a.H.split(",")):
        h, q, k, v, blocks, ranges, sc, token, keyed = problem_and_plans(a.T, a.HQ, H)
        if keyed.forward.kernel != "keymajor" or not keyed.dq_groups_per_pass:
            print(f"h={h}: the planner has no key-major path here", flush=True)
            continue
        out_t, lse_t = launch.forward(token, q, k, v, blocks, None, scale=sc, block_size=64)
        go = torch.randn_like(out_t)
        t, g, o64, dq64 = oracle_rows(q, k, v, go, ranges, sc, a.rows)
        pairs = int((ranges[..., 1] > ranges[..., 0]).sum().item())  # (row, key tile) pairs: one span, one tile
        D = q.shape[-1]
        base = {"fwd": bench(lambda: launch.forward(token, q, k, v, blocks, None, scale=sc, block_size=64)),
                "bwd": bench(lambda: launch.backward(token, q, k, v, ranges, out_t, lse_t, go, None, scale=sc))}
        dq_t = launch.backward(token, q, k, v, ranges, out_t, lse_t, go, None, scale=sc)[0]
        err_t = ((out_t[0, t, g].double() - o64).abs().max().item(), (dq_t[0, t, g].double() - dq64).abs().max().item())
        print(f"\nh={h} (G={H}), {pairs} (row, tile) pairs; token-major: forward {base['fwd']:.3f} ms, backward "
              f"{base['bwd']:.3f} ms, max err out {err_t[0]:.2e}, dq {err_t[1]:.2e}", flush=True)
        print("| partials | fwd ms | partial kernel ms (GB/s) | merge ms (GB/s) | bwd ms | dq merge ms | fwd + bwd ms "
              "| max err out | max err dq |", flush=True)
        print("|---|---|---|---|---|---|---|---|---|", flush=True)
        for name in a.widths.split(","):
            wd = WIDTHS[name]
            size = torch.tensor([], dtype=wd).element_size()
            out, lse = forward_keymajor(keyed, q, k, v, ranges, sc, wd)
            dq, _, _, dqp, dqp_scale = backward_keymajor(keyed, q, k, v, ranges, out, lse, go, sc, wd)
            err = ((out[0, t, g].double() - o64).abs().max().item(), (dq[0, t, g].double() - dq64).abs().max().item())
            fwd = bench(lambda: forward_keymajor(keyed, q, k, v, ranges, sc, wd))
            bwd = bench(lambda: backward_keymajor(keyed, q, k, v, ranges, out, lse, go, sc, wd))
            kf = dict(kernel_times(lambda: forward_keymajor(keyed, q, k, v, ranges, sc, wd)))
            kb = dict(kernel_times(lambda: backward_keymajor(keyed, q, k, v, ranges, out, lse, go, sc, wd)))
            part = sum(ms for n, ms in kf.items() if n.startswith("sel_fwd_keymajor_kernel"))
            merge = sum(ms for n, ms in kf.items() if n.startswith("sel_fwd_keymajor_merge"))
            dq_merge_ms = sum(ms for n, ms in kb.items() if n.startswith("sel_bwd_dq_keymajor_merge"))
            part_bytes = pairs * h * (D * 2 + D * size + 4) + pairs * 16  # q rows in, partials out, entries
            merge_bytes = pairs * h * (D * size + 4) + out.numel() * 2 + lse.numel() * 4
            row = {"h": h, "G": H, "T": a.T, "partials": name, "fwd_ms": fwd, "bwd_ms": bwd, "partial_ms": part,
                   "merge_ms": merge, "dq_merge_ms": dq_merge_ms, "partial_gbs": part_bytes / part / 1e6 if part else None,
                   "merge_gbs": merge_bytes / merge / 1e6 if merge else None, "err_out": err[0], "err_dq": err[1],
                   "token_fwd_ms": base["fwd"], "token_bwd_ms": base["bwd"], "token_err_out": err_t[0],
                   "token_err_dq": err_t[1], "copy_gbs": ceiling, "forward_kernels": kf, "backward_kernels": kb}
            results.append(row)
            print(f"| {name} | {fwd:.3f} | {part:.3f} ({row['partial_gbs']:.0f}) | {merge:.3f} ({row['merge_gbs']:.0f}) "
                  f"| {bwd:.3f} | {dq_merge_ms:.3f} | {fwd + bwd:.3f} | {err[0]:.2e} | {err[1]:.2e} |", flush=True)
        for stages in (int(x) for x in a.merge_stages.split(",") if x):
            wd = torch.float16
            out, lse = forward_keymajor(keyed, q, k, v, ranges, sc, wd, stages)
            dq, _, _, dqp, dqp_scale = backward_keymajor(keyed, q, k, v, ranges, out, lse, go, sc, wd)
            same = torch.equal(dq_merge(keyed, q, ranges, a.T, dqp, dqp_scale, stages),
                               dq_merge(keyed, q, ranges, a.T, dqp, dqp_scale, 1))
            fwd = bench(lambda: forward_keymajor(keyed, q, k, v, ranges, sc, wd, stages))
            dqm = bench(lambda: dq_merge(keyed, q, ranges, a.T, dqp, dqp_scale, stages))
            results.append({"h": h, "merge_stages": stages, "fwd_ms": fwd, "dq_merge_last_pass_ms": dqm})
            print(f"  merge num_stages={stages}: forward {fwd:.3f} ms, dq merge of the last pass {dqm:.3f} ms"
                  f" (bitwise as 1 stage: {same})", flush=True)
        for name in a.widths.split(","):
            r = next(x for x in results if x["h"] == h and x.get("partials") == name)
            for label, times in (("forward", r["forward_kernels"]), ("backward", r["backward_kernels"])):
                total = sum(times.values())
                top = ", ".join(f"{n.split('(')[0][:40]} {ms:.2f}" for n, ms in list(times.items())[:6])
                print(f"  {name} {label}: {total:.2f} ms of kernels: {top}", flush=True)
        del q, k, v, out_t, lse_t, go
        torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
