"""How close the key-major kernels are to the memory ceiling of their own access pattern, on the GPU.

    python -m bench.probes.keymajor_ceiling [--T 32768] [--HQ 32] [--H 4,8,32] [--json out.json]

The key-major path (small groups) moves its bytes in a fixed pattern: per (entry, head) pair of a key tile's
reader list it gathers the pair's q row (and, backward, its dO row) and writes one float16 partial row (the
forward's output, the backward's dq) to the pair's own slot; the merges read each row's partials back in slot
order and write the row.  This probe times, on the first pass's reader list of the shipped plan (the same
entries, chunks, grid, warps and stages), the shipped kernels against stripped kernels that move exactly those
bytes with no MMA and no softmax:

- ``gather+store``: each step gathers the pairs' rows and stores them (cast to float16) in the partial slots,
  with the scale and LSE words beside them: the partial kernel's traffic, nothing else;
- ``gather``: the gathers alone (summed on chip, one row stored per program);
- ``store``: the partial stores alone (the entries and slots still read);
- the merges' ceiling: every partial of a row read and summed in slot order, the row stored, over several pairs
  per program and warps (the fastest is the ceiling).

``--tune`` also times the shipped partial kernel over pairs per step x warps x stages and both merges (the
forward's, the dq's: the fraction there is against the forward merge's ceiling, the same partial bytes less the
LSE words) over pairs per program x warps, each checked bit for bit against the shipped launch.

Every row reports ms (``do_bench`` median, L2 flushed), the pass's bytes and GB/s against a measured device copy,
and the shipped kernel's fraction of its ceiling.  What it says: whether a kernel is held by its memory traffic
(near 100 %: only fewer bytes help) or by how it issues that traffic (room in the kernel itself).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json

import torch
import triton
import triton.language as tl
import triton.testing as tt

from bench.probes.keymajor_backward import problem_and_plans
from bench.probes.keymajor_partials import copy_ceiling
from nsa_triton_sel import plan as P
from nsa_triton_sel.kernels import backward as bwd_kernels
from nsa_triton_sel.kernels import forward as fwd_kernels
from nsa_triton_sel.kernels import launch, params
from nsa_triton_sel.kernels.common import _chunk_tile
from nsa_triton_sel.kernels.readers import keymajor_reader_list
from nsa_triton_sel.plan.keymajor import DELTA_ROWS, MERGE_WARPS

GATHER_STORE, GATHER, STORE = 0, 1, 2
MODES = {"gather+store": GATHER_STORE, "gather": GATHER, "store": STORE}


@triton.jit
def pairs_ceiling_kernel(X, Y, OUT, OUT_SCALE, OUT_L, SINK, ENTRIES, ORIGIN, CHUNKS, G, h, NT,
                         sx_b, sx_s, sx_g, sx_h, sy_b, sy_s, sy_g, sy_h,
                         BLOCK_N: tl.constexpr, ROWS: tl.constexpr, HP: tl.constexpr, D: tl.constexpr,
                         TWO: tl.constexpr, MODE: tl.constexpr):
    """The key-major partial kernels' traffic over a reader list's chunks: per step ``ROWS`` (entry, head) pairs,
    their rows of ``X`` (and of ``Y`` with ``TWO``: the backward's dO) gathered and/or one float16 row, a scale and
    an LSE word stored at each pair's slot ``origin * h + head`` (``MODE``)."""
    chunk = CHUNKS + tl.program_id(0).to(tl.int64) * 4
    tile_id = tl.load(chunk)
    if tile_id < 0:
        return
    e0, e1, _, _, b, g, k0 = _chunk_tile(chunk, tile_id, NT, G, BLOCK_N)
    offs_d = tl.arange(0, D)
    r = tl.arange(0, ROWS)
    r_ent = r // HP
    head = r % HP
    acc = tl.zeros((D,), tl.float32)
    for e in range(e0, e1, ROWS // HP):
        ent = e + r_ent
        ok = (ent < e1) & (head < h)
        bnd = tl.load(ENTRIES + ent * 2 + 1, mask=ok, other=0)
        slot = tl.load(ORIGIN + ent, mask=ok, other=0) * h + head
        if MODE != 2:
            tok = tl.load(ENTRIES + ent * 2, mask=ok, other=0).to(tl.int64)
            x = tl.load(X + (b * sx_b + tok * sx_s + g * sx_g + head.to(tl.int64) * sx_h)[:, None] + offs_d[None, :],
                        mask=ok[:, None], other=0.0).to(tl.float32)
            if TWO:
                x += tl.load(Y + (b * sy_b + tok * sy_s + g * sy_g + head.to(tl.int64) * sy_h)[:, None]
                             + offs_d[None, :], mask=ok[:, None], other=0.0).to(tl.float32)
        else:
            x = tl.zeros((ROWS, D), tl.float32) + bnd.to(tl.float32)[:, None]
        if MODE == 1:
            acc += tl.sum(x, 0)
        else:
            tl.store(OUT + slot[:, None] * D + offs_d[None, :], x.to(tl.float16), mask=ok[:, None])
            tl.store(OUT_SCALE + slot, bnd.to(tl.float32), mask=ok)
            if not TWO:
                tl.store(OUT_L + slot, bnd.to(tl.float32) * 0.5, mask=ok)
    if MODE == 1:
        tl.store(SINK + tl.program_id(0).to(tl.int64) * D + offs_d, acc)


@triton.jit
def merge_ceiling_kernel(OP, OP_SCALE, O, n_pairs, per_row, h, PAIRS: tl.constexpr, D: tl.constexpr,
                         AHEAD: tl.constexpr):
    """The merges' traffic: each of ``PAIRS`` (row, head) pairs reads its ``per_row`` float16 partials and
    their scales in slot order, sums them and stores the row (bf16); ``AHEAD``: the next partial's loads go out
    before this one is added (as the shipped merges do)."""
    p = tl.program_id(0).to(tl.int64) * PAIRS + tl.arange(0, PAIRS)
    ok = p < n_pairs
    row = p // h
    head = p % h
    offs_d = tl.arange(0, D)
    acc = tl.zeros((PAIRS, D), tl.float32)
    if AHEAD:
        slot = (row * per_row) * h + head
        x_n = tl.load(OP + slot[:, None] * D + offs_d[None, :], mask=ok[:, None], other=0.0)
        s_n = tl.load(OP_SCALE + slot, mask=ok, other=0.0)
        for k in range(0, per_row):
            x, s = x_n, s_n
            slot = (row * per_row + k + 1) * h + head
            live = ok & ((row * 0 + k + 1) < per_row)
            x_n = tl.load(OP + slot[:, None] * D + offs_d[None, :], mask=live[:, None], other=0.0)
            s_n = tl.load(OP_SCALE + slot, mask=live, other=0.0)
            acc += x.to(tl.float32) * s[:, None]
    else:
        for k in range(0, per_row):
            slot = (row * per_row + k) * h + head
            x = tl.load(OP + slot[:, None] * D + offs_d[None, :], mask=ok[:, None], other=0.0)
            acc += x.to(tl.float32) * tl.load(OP_SCALE + slot, mask=ok, other=0.0)[:, None]
    tl.store(O + p[:, None] * D + offs_d[None, :], acc.to(tl.bfloat16), mask=ok[:, None])


def same_bits(x, y) -> bool:
    """``x`` and ``y`` hold the same values, NaN where the other has NaN."""
    nx, ny = torch.isnan(x), torch.isnan(y)
    return torch.equal(nx, ny) and torch.equal(torch.where(nx, 0, x), torch.where(ny, 0, y))


def first_pass(plan: P.Plan, q, k, v, ranges, lse, go, delta):
    """The views of the first pass over KV heads (the forward's and the backward's passes are the same)."""
    gpp = plan.forward.meta.groups_per_pass
    g = slice(0, gpp)
    return q[:, :, g], k[:, g], v[:, g], ranges[:, :, g], lse[:, :, g], go[:, :, g], delta[:, :, g]


def gluon_backward(names, bench, row, h, keyed, q, k, v, ranges, out, lse, go, sc, named, bgrid, br, nbytes,
                   ceiling_ms, shipped_bwd) -> None:
    """The Gluon key-major backward variants beside the shipped kernel on the first pass (``named``: its
    arguments), each compared bit for bit (dk and dv after the split tiles' reduction, the partial dq and scales of
    every slot the shipped kernel wrote) and timed; then the whole backward (``launch.backward``, every pass) with
    each in the kernel's place, dq, dk and dv compared."""
    from bench.probes import keymajor_gluon as kbg

    HP = keyed.forward.meta.HP
    dk, dv, dqp, dqs = named["DK"], named["DV"], named["DQP"], named["DQP_SCALE"]

    def reduced():
        if br.slots:
            launch._reduce_split_tiles(named["WS"], br, dk, dv, keyed.backward)
        return dk.clone(), dv.clone(), dqp.clone(), dqs.clone()

    dqs.fill_(float("nan"))  # slots no pair writes stay NaN: compared where the shipped kernel wrote
    shipped_bwd()
    want = reduced()
    live = ~torch.isnan(want[3])
    for variant in kbg.chosen_bwd(names):
        def gluon(variant=variant):
            kbg.launch_bwd(variant, named, bgrid[0], HP)
        try:
            dk.zero_(), dv.zero_(), dqp.zero_(), dqs.fill_(float("nan"))
            gluon()
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - a variant that does not compile or launch is a row
            print(f"| {h} | backward | gluon {variant[0]} | {type(exc).__name__}: {str(exc)[:300]} | | | |", flush=True)
            continue
        got = reduced()
        same = [same_bits(x, y) for x, y in zip(got[:2], want[:2])] + [
            same_bits(got[2][live], want[2][live]), same_bits(got[3][live], want[3][live])]
        d_dq = (got[2][live].float() * got[3][live][:, None] - want[2][live].float() * want[3][live][:, None]).abs()
        ref = (want[2][live].float() * want[3][live][:, None]).abs().max()
        how = ("bitwise" if all(same) else
               "not bitwise: " + ", ".join(n for n, ok in zip(("dk", "dv", "dq", "scale"), same) if not ok)
               + f"; dq max diff {float(d_dq.max() / ref):.1e} of max |dq|; unwritten live slots "
                 f"{int(torch.isnan(got[3][live]).sum())}")
        row(h, "backward", f"gluon {variant[0]} ({how})", bench(gluon), nbytes, of=ceiling_ms)

    # the whole backward with the Triton kernel alone (where the plan has the shipped Gluon kernel, it is turned
    # off), each variant then in that kernel's place
    triton_only = dataclasses.replace(keyed, forward=dataclasses.replace(
        keyed.forward, meta=dataclasses.replace(keyed.forward.meta, bwd_gluon=False)))

    def whole(variant=None):
        with kbg.in_place_of_shipped(variant, HP):
            return launch.backward(triton_only, q, k, v, ranges, out, lse, go, None, scale=sc)

    want = whole()
    ms0 = bench(whole)
    row(h, "whole backward", "the Triton key-major backward kernel", ms0, 0)
    for variant in kbg.chosen_bwd(names):
        try:
            got = whole(variant)
        except Exception as exc:  # noqa: BLE001
            print(f"| {h} | whole backward | gluon {variant[0]} | {type(exc).__name__}: {str(exc)[:200]} |", flush=True)
            continue
        same = [same_bits(x, y) for x, y in zip(got, want)]
        diff = ", ".join(f"{n} {float((x.float() - y.float()).abs().max() / y.float().abs().max()):.1e}"
                         for n, x, y in zip(("dq", "dk", "dv"), got, want))
        ms = bench(lambda variant=variant: whole(variant))
        row(h, "whole backward", f"gluon {variant[0]} ({'bitwise' if all(same) else 'max rel diff ' + diff}; "
                                 f"{ms / ms0:.3f}x the shipped)", ms, 0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, default=32768)
    ap.add_argument("--HQ", type=int, default=32)
    ap.add_argument("--H", default="4,8,32", help="comma list of KV head counts (h = HQ / H)")
    ap.add_argument("--tune", action="store_true",
                    help="also the shipped partial kernel over pairs x warps x stages and both merges over pairs x "
                         "warps, each compared bit for bit with the shipped launch")
    ap.add_argument("--gluon", default="",
                    help="comma list of bench.probes.keymajor_gluon variants (Triton >= 3.6, sm_90) to time beside the "
                         "shipped partial kernel, each compared with its partial results first")
    ap.add_argument("--whole", action="store_true",
                    help="with --gluon: also the whole key-major forward (every pass: reader list, partial kernel, "
                         "merge) with the shipped and with each Gluon partial kernel, outputs compared bit for bit")
    ap.add_argument("--nonfinite", action="store_true",
                    help="put NaN, +inf and a row of -inf into the first KV head's values (three key tiles): the "
                         "isolating walks run there, and the comparisons check where NaN lands")
    ap.add_argument("--skip-forward", action="store_true",
                    help="leave out the forward's partial kernel, its merge and their ceilings (the backward only)")
    ap.add_argument("--gluon-bwd", default="",
                    help="comma list of bench.probes.keymajor_gluon backward variants (b-* (Triton >= 3.6, sm_90): each compared "
                         "with the shipped key-major backward kernel (dk, dv, partial dq and scales, bit for bit) and "
                         "timed beside it, then the whole backward (every pass) with it in the kernel's place")
    ap.add_argument("--json")
    a = ap.parse_args(argv)

    def bench(fn):
        return float(tt.do_bench(fn, warmup=20, rep=100, return_mode="median"))

    copy_gbs = copy_ceiling(bench)
    print(f"{torch.cuda.get_device_name()}; T={a.T} HQ={a.HQ}; device copy {copy_gbs:.0f} GB/s", flush=True)
    results = []

    def row(h, what, kernel, ms, nbytes, of=None):
        gbs = nbytes / ms / 1e6
        r = {"h": h, "what": what, "kernel": kernel, "ms": ms, "bytes": nbytes, "gbs": gbs, "copy_gbs": copy_gbs}
        note = ""
        if of is not None:
            r["fraction_of_ceiling"] = of / ms
            note = f" | {100 * of / ms:.0f} %"
        results.append(r)
        print(f"| {h} | {what} | {kernel} | {ms:.3f} | {nbytes / 1e9:.2f} | {gbs:.0f} ({100 * gbs / copy_gbs:.0f} % of "
              f"copy){note} |", flush=True)

    print("| h | pass | kernel | ms | GB | GB/s | shipped against the fastest ceiling |", flush=True)
    print("|---|---|---|---|---|---|---|", flush=True)
    for H in (int(x) for x in a.H.split(",")):
        h, q, k, v, blocks, ranges, sc, token, keyed = problem_and_plans(a.T, a.HQ, H)
        if keyed.forward.kernel != "keymajor" or not keyed.dq_groups_per_pass:
            print(f"| {h} | the planner has no key-major path here | | | | | |", flush=True)
            continue
        meta = keyed.forward.meta
        B, S, G, _, D = q.shape
        T = a.T
        if a.nonfinite:
            v[0, 0, 100, 5] = float("nan")
            v[0, 0, 5000 % T, 17] = float("inf")
            v[0, 0, min(20000, T - 1), :] = float("-inf")
        out, lse = launch.forward(keyed, q, k, v, blocks, None, scale=sc, block_size=64)
        go = torch.randn_like(out)
        delta = torch.empty((B, S, G, h), dtype=torch.float32, device=q.device)
        do_l1 = torch.empty_like(delta)
        nonfinite = torch.zeros((1,), dtype=torch.int32, device=q.device)
        zero_lse = torch.zeros((), dtype=torch.float32, device=q.device).expand(B, S, G, h)
        fn = bwd_kernels.sel_bwd_dq_keymajor_delta_kernel
        fn[(P.cdiv(B * S * G * h, DELTA_ROWS),)](
            *params.packer(fn)(Q=q, O=out, DO=go, DLSE=zero_lse, DELTA=delta, DO_L1_LOG2=do_l1, NONFINITE=nonfinite,
                               S=S, G=G, h=h, Dk=D, Dv=D, n_rows=B * S * G * h, sq=q.stride(), so=out.stride(),
                               sdo=go.stride(), sdl=zero_lse.stride()),
            num_warps=MERGE_WARPS, num_stages=1, **meta.delta_constexprs(load_delta=False))
        qs, ks, vs, rs, ls, gos, ds = first_pass(keyed, q, k, v, ranges, lse, go, delta)
        dl1 = do_l1[:, :, :qs.shape[2]]
        Gp = qs.shape[2]
        readers = keymajor_reader_list(rs, T, meta)
        entries = int((rs[..., 1] > rs[..., 0]).sum().item())  # one span, one key tile (aligned blocks of 64)
        pairs = entries * h
        n_slots = B * S * Gp * meta.per_row * h
        op = torch.empty((n_slots, D), dtype=torch.float16, device=q.device)
        op_scale = torch.empty((n_slots,), dtype=torch.float32, device=q.device)
        lp = torch.empty_like(op_scale)
        br = readers.with_chunk(keyed.reader_chunk)  # the backward kernel's chunks of the same list
        sink = torch.empty((max(readers.chunks.shape[0], br.chunks.shape[0]), D), dtype=torch.float32,
                           device=q.device)
        entry_bytes = entries * 16  # (token, bounds) int32 x 2 and the int64 origin
        # the whole forward's merge traffic (every pass): partials in, rows out
        merge_bytes_all = (pairs * (2 * D + 8) + B * S * Gp * h * (2 * D + 4)) * G // Gp

        # -- the forward's partial kernel and its ceilings --
        part = fwd_kernels.sel_fwd_keymajor_kernel
        part_args = params.packer(part)(Q=qs, K=ks, V=vs, OP=op, OP_SCALE=op_scale, LP=lp, ENTRIES=readers.entries,
                                        ORIGIN=readers.origin, CHUNKS=readers.chunks, G=Gp, h=h, Dk=D, Dv=D, T=T,
                                        NT=readers.n_tiles, qk_scale=sc * 1.4426950408889634, sq=qs.stride(),
                                        sk=ks.stride(), sv=vs.stride())
        grid = (readers.chunks.shape[0],)

        def shipped_fwd():
            part[grid](*part_args, num_warps=meta.num_warps, num_stages=meta.num_stages, **meta.kernel_constexprs())

        def ceiling(mode, rows, warps, two, reader_list, ws):
            def go_():
                pairs_ceiling_kernel[(reader_list.chunks.shape[0],)](
                    qs, gos, ws, op_scale, lp, sink, reader_list.entries, reader_list.origin, reader_list.chunks, Gp, h,
                    reader_list.n_tiles, *qs.stride()[:4], *gos.stride()[:4], BLOCK_N=meta.BLOCK_N, ROWS=rows,
                    HP=meta.HP, D=D, TWO=two, MODE=mode, num_warps=warps, num_stages=1)
            return go_

        fwd_bytes = {GATHER_STORE: pairs * (2 * D + 2 * D + 8) + entry_bytes, GATHER: pairs * 2 * D + entry_bytes,
                     STORE: pairs * (2 * D + 8) + entry_bytes}
        def fastest_ceilings(what, launches, two, reader_list, ws, nbytes):
            """Each mode's ceiling over ``launches`` (pairs a step, warps), a row each: the fastest per mode."""
            best = {}
            for name, mode in MODES.items():
                for rows, warps in launches:
                    if rows < meta.HP:
                        continue
                    ms = bench(ceiling(mode, rows, warps, two, reader_list, ws))
                    row(h, what, f"ceiling {name}, {rows} pairs, {warps} warps", ms, nbytes[mode])
                    best[mode] = min(best.get(mode, ms), ms)
            return best

        mbest = None  # the forward merge's ceiling (the dq merge's rows are read against it)
        if not a.skip_forward:
            ms_ship = bench(shipped_fwd)
            best = fastest_ceilings("forward", ((meta.ROWS, meta.num_warps), (meta.ROWS, 8), (32, 4)), False, readers, op,
                                    fwd_bytes)
            row(h, "forward", f"shipped partial kernel ({meta.ROWS} pairs, {meta.num_warps} warps, "
                              f"{meta.num_stages} stages)", ms_ship, fwd_bytes[GATHER_STORE], of=best[GATHER_STORE])
            if a.gluon:
                from bench.probes import keymajor_gluon

                lp.fill_(float("nan"))  # the slots no pair writes stay NaN: compared where the shipped kernel wrote
                shipped_fwd()
                want = (op.clone(), op_scale.clone(), lp.clone())
                live = torch.isfinite(want[2])  # the slots the shipped kernel wrote (LSE finite)
                if a.nonfinite:
                    print(f"| {h} | forward | the shipped partials: {int(torch.isnan(want[0][live]).sum())} NaN values in "
                          f"{int(torch.isnan(want[0][live]).any(1).sum())} slots | | | | |", flush=True)
                for variant in keymajor_gluon.chosen(a.gluon.split(",")):
                    def gluon_fwd(variant=variant):
                        keymajor_gluon.launch(variant, qs, ks, vs, op, op_scale, lp, readers, h, meta.HP,
                                              sc * 1.4426950408889634, rows=meta.ROWS)
                    try:
                        op.zero_()
                        lp.fill_(float("nan"))
                        gluon_fwd()
                        torch.cuda.synchronize()
                    except Exception as exc:  # noqa: BLE001 - a variant that does not compile or launch is a row
                        print(f"| {h} | forward | gluon {variant[0]} | {type(exc).__name__}: {str(exc)[:300]} | | | |",
                              flush=True)
                        continue
                    d_out = torch.nan_to_num((op.float() * op_scale[:, None]) - (want[0].float() * want[1][:, None]))[
                        live].abs().max()
                    d_lse = (lp - want[2])[live].abs().max()
                    same = all(same_bits(x[live], y[live]) for x, y in zip((op, op_scale, lp), want))
                    ms = bench(gluon_fwd)
                    how = "bitwise" if same else f"max diff out {d_out:.2e}, lse {d_lse:.2e}"
                    row(h, "forward", f"gluon {variant[0]} ({how})", ms, fwd_bytes[GATHER_STORE], of=best[GATHER_STORE])
            if a.gluon and a.whole:
                want = keymajor_gluon.forward(keyed, q, k, v, ranges, sc, None)
                if a.nonfinite:
                    print(f"| {h} | whole forward | the shipped output: {int(torch.isnan(want[0]).sum())} NaN values | | | |"
                          f" |", flush=True)
                ms_whole = bench(lambda: keymajor_gluon.forward(keyed, q, k, v, ranges, sc, None))
                whole_bytes = fwd_bytes[GATHER_STORE] * G // Gp + merge_bytes_all
                row(h, "whole forward", "shipped partial kernel", ms_whole, whole_bytes)
                for variant in keymajor_gluon.chosen(a.gluon.split(",")):
                    try:
                        got = keymajor_gluon.forward(keyed, q, k, v, ranges, sc, variant)
                    except Exception as exc:  # noqa: BLE001
                        print(f"| {h} | whole forward | gluon {variant[0]} | {type(exc).__name__}: {str(exc)[:200]} |",
                              flush=True)
                        continue
                    same = same_bits(got[0], want[0]) and same_bits(got[1], want[1])
                    ms = bench(lambda variant=variant: keymajor_gluon.forward(keyed, q, k, v, ranges, sc, variant))
                    row(h, "whole forward", f"gluon {variant[0]} ({'bitwise' if same else 'NOT bitwise'}; "
                                            f"{ms / ms_whole:.3f}x the shipped)", ms, whole_bytes)
            if a.tune:
                shipped_fwd()
                want = (op.clone(), op_scale.clone(), lp.clone())
                for rows, warps, stages in itertools.product((32, 64, 128), (4, 8), (3, 4, 5)):
                    if rows < meta.HP or (rows, warps, stages) == (meta.ROWS, meta.num_warps, meta.num_stages):
                        continue
                    cx = dict(meta.kernel_constexprs(), ROWS=rows)

                    def variant(warps=warps, stages=stages, cx=cx):
                        part[grid](*part_args, num_warps=warps, num_stages=stages, **cx)
                    try:
                        op.fill_(0)
                        variant()
                        same = all(torch.equal(x, y) for x, y in zip((op, op_scale, lp), want))
                        ms = bench(variant)
                    except Exception as exc:  # noqa: BLE001 - a launch that does not compile or fit is a row
                        print(f"| {h} | forward | partial kernel {rows} pairs, {warps} warps, {stages} stages | "
                              f"{type(exc).__name__}: {str(exc)[:80]} | | | |", flush=True)
                        continue
                    row(h, "forward", f"partial kernel {rows} pairs, {warps} warps, {stages} stages"
                                      f"{'' if same else ' (NOT bitwise)'}", ms, fwd_bytes[GATHER_STORE],
                        of=best[GATHER_STORE])

            # -- the forward merge and its ceiling (the partials the shipped kernel just wrote) --
            shipped_fwd()
            merge = fwd_kernels.sel_fwd_keymajor_merge_kernel
            o_pass = torch.empty_like(out[:, :, :Gp])
            l_pass = torch.empty_like(lse[:, :, :Gp])
            merge_args = params.packer(merge)(OP=op, OP_SCALE=op_scale, LP=lp, SPANS=rs, O=o_pass, LSE=l_pass, S=S, G=Gp,
                                              h=h, Dv=D, n_spans=rs.shape[3], T=T, per_row=meta.per_row,
                                              n_rows=B * S * Gp, sr=rs.stride(), so=o_pass.stride(),
                                              sl=l_pass.stride())
            mgrid = (P.cdiv(B * S * Gp, meta.merge_rows_per_program()),)
            ms_merge = bench(lambda: merge[mgrid](*merge_args, num_warps=MERGE_WARPS, num_stages=1,
                                                  **meta.merge_constexprs()))
            n_pairs = B * S * Gp * h
            merge_bytes = pairs * (2 * D + 8) + n_pairs * (2 * D + 4)
            mbest = None
            for pp, warps, ahead in ((32, 4, True), (16, 4, True), (64, 4, True), (32, 8, True), (32, 4, False),
                                     (16, 2, True)):
                ms = bench(lambda pp=pp, warps=warps, ahead=ahead: merge_ceiling_kernel[(P.cdiv(n_pairs, pp),)](
                    op, op_scale, o_pass, n_pairs, meta.per_row, h, PAIRS=pp, D=D, AHEAD=ahead, num_warps=warps,
                    num_stages=1))
                row(h, "forward merge", f"ceiling, {pp} pairs, {warps} warps{', next partial ahead' if ahead else ''}",
                    ms, merge_bytes)
                mbest = ms if mbest is None else min(mbest, ms)
            row(h, "forward merge", "shipped merge", ms_merge, merge_bytes, of=mbest)
            if a.tune:
                merge[mgrid](*merge_args, num_warps=MERGE_WARPS, num_stages=1, **meta.merge_constexprs())
                want = (o_pass.clone(), l_pass.clone())
                for pp, warps in itertools.product((8, 16, 32, 64), (2, 4, 8)):
                    if pp < meta.HP or (pp, warps) == (meta.merge_constexprs()["PAIRS"], MERGE_WARPS):
                        continue
                    g2 = (P.cdiv(B * S * Gp, pp // meta.HP),)
                    cx = dict(meta.merge_constexprs(), PAIRS=pp)

                    def variant(g2=g2, warps=warps, cx=cx):
                        merge[g2](*merge_args, num_warps=warps, num_stages=1, **cx)
                    o_pass.zero_()
                    variant()
                    same = torch.equal(o_pass, want[0]) and torch.equal(l_pass, want[1])
                    row(h, "forward merge", f"merge {pp} pairs, {warps} warps{'' if same else ' (NOT bitwise)'}",
                        bench(variant), merge_bytes, of=mbest)

        # -- the backward kernel (dk, dv, partial dq) and its ceilings --
        ws = torch.empty((max(br.slots, 1), meta.BLOCK_N, meta.DK1 + meta.DK2 + meta.BLOCK_DV), dtype=torch.float32,
                         device=q.device)
        dq_p = torch.empty((n_slots, D), dtype=torch.float16, device=q.device)
        dk = torch.empty_like(ks)
        dv = torch.empty_like(vs)
        bwd = bwd_kernels.sel_bwd_keymajor_kernel
        named = dict(Q=qs, K=ks, V=vs, DO=gos, LSE=ls, DELTA=ds, DO_L1_LOG2=dl1, DK=dk, DV=dv, DQP=dq_p,
                     DQP_SCALE=op_scale, WS=ws, ENTRIES=br.entries, ORIGIN=br.origin, CHUNKS=br.chunks,
                     NONFINITE=nonfinite, G=Gp, h=h, Dk=D, Dv=D, T=T, NT=br.n_tiles, qk_scale=sc * 1.4426950408889634,
                     scale=sc, sq=qs.stride(), sk=ks.stride(), sv=vs.stride(), sdo=gos.stride(), sl=ls.stride(),
                     sd=ds.stride(), sdk=dk.stride()[:3], sdv=dv.stride()[:3])
        bgrid = (br.chunks.shape[0],)
        ms_bwd = bench(lambda: launch._launch(bwd, bgrid, named, num_warps=meta.bwd_warps, num_stages=meta.bwd_stages,
                                              **meta.bwd_constexprs()))
        bwd_bytes = {GATHER_STORE: pairs * (4 * D + 2 * D + 4) + entry_bytes, GATHER: pairs * 4 * D + entry_bytes,
                     STORE: pairs * (2 * D + 4) + entry_bytes}
        bbest = fastest_ceilings("backward", ((meta.bwd_rows, meta.bwd_warps), (meta.bwd_rows, 8), (64, 4)), True, br,
                                 dq_p, bwd_bytes)
        row(h, "backward", f"shipped key-major backward kernel ({meta.bwd_rows} pairs, {meta.bwd_warps} warps, "
                           f"{meta.bwd_stages} stages; also the dk/dv MMAs)", ms_bwd, bwd_bytes[GATHER_STORE],
            of=bbest[GATHER_STORE])
        if a.gluon_bwd:
            gluon_backward(a.gluon_bwd.split(","), bench, row, h, keyed, q, k, v, ranges, out, lse, go, sc, named,
                           bgrid, br, bwd_bytes[GATHER_STORE], bbest[GATHER_STORE],
                           lambda: launch._launch(bwd, bgrid, named, num_warps=meta.bwd_warps,
                                                  num_stages=meta.bwd_stages, **meta.bwd_constexprs()))
        if a.tune:
            launch._launch(bwd, bgrid, named, num_warps=meta.bwd_warps, num_stages=meta.bwd_stages,
                           **meta.bwd_constexprs())
            dq_pass = torch.empty_like(qs)
            dmerge = bwd_kernels.sel_bwd_dq_keymajor_merge_kernel
            dargs = params.packer(dmerge)(DQP=dq_p, DQP_SCALE=op_scale, SPANS=rs, DQ=dq_pass, S=S, G=Gp, h=h, Dk=D,
                                          n_spans=rs.shape[3], T=T, per_row=meta.per_row, n_rows=B * S * Gp,
                                          sr=rs.stride(), sdq=dq_pass.stride())
            dq_bytes = pairs * (2 * D + 4) + n_pairs * 2 * D
            base_cx = meta.dq_merge_constexprs(D)
            results_dq = {}
            for pp, warps in itertools.product((8, 16, 32, 64), (2, 4, 8)):
                if pp < meta.HP:
                    continue
                g2 = (P.cdiv(B * S * Gp, pp // meta.HP),)
                cx = dict(base_cx, PAIRS=pp)

                def variant(g2=g2, warps=warps, cx=cx):
                    dmerge[g2](*dargs, num_warps=warps, num_stages=1, **cx)
                dq_pass.zero_()
                variant()
                results_dq[(pp, warps)] = (dq_pass.clone(), bench(variant))
            want = results_dq[(base_cx["PAIRS"], MERGE_WARPS)][0]
            for (pp, warps), (got, ms) in results_dq.items():
                shipped = (pp, warps) == (base_cx["PAIRS"], MERGE_WARPS)
                row(h, "dq merge", f"{'shipped ' if shipped else ''}dq merge {pp} pairs, {warps} warps"
                                   f"{'' if torch.equal(got, want) else ' (NOT bitwise)'}", ms, dq_bytes, of=mbest)
        del q, k, v, out, lse, go, op, dq_p, ws
        torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
