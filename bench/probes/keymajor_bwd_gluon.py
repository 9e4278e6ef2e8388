"""The key-major backward kernel (small groups) written in Gluon (Triton 3.6, sm_90), timed against the shipped one.

    python -m bench.probes.keymajor_ceiling --H 32,8,4 --skip-forward --gluon-bwd NAMES    # GPU: compared, timed
    python -m bench.probes.keymajor_bwd_gluon --aot [--only NAMES] [--python PYTHON_WITH_TRITON_3_6]   # no GPU

``backward.sel_bwd_keymajor_kernel`` walks one chunk of a key tile's reader list and, per step of 32 (entry, head)
pairs, gathers their q and dO rows, computes ``P^T`` and ``dS^T`` once and uses them three times: ``dv += P^T dO``,
``dk += dS^T q`` (kept on chip for the tile) and each pair's partial ``dq = dS K`` (stored in float16 in the pair's
own slot, scaled by a power of two from a bound known before the MMA; a merge sums a row's partials).  On an H200 it
runs at 32-39 % of the memory ceiling of its access pattern, latency-bound at 255 registers
(``bench/results/2026-11-29-h200-triton3.6-keymajor-ceiling/``).  Here it is the dk/dv probe's best Gluon walk
(``dkdv_gluon``'s ``g-nb4-fast-i32``: ``cp.async`` slots ``NB - 1`` steps ahead, the next step's score MMAs issued
before this step's dv/dk MMAs) with the partial dq added:

- the step's ``dS^T`` (bf16) goes to a two-slot shared ring after its softmax, and the partial dq is one MMA,
  ``dq^T [D, ROWS] = K^T dS^T``, with ``K^T`` the key tile already in shared memory (``permute``): no M = 32 MMA;
- ``DQ_EARLY = 1``: step ``i``'s dq MMA is issued with its dv/dk MMAs and stays in flight across step ``i + 1``'s
  softmax (more registers live); ``0``: issued after that softmax and waited for at once; ``2``: issued after that
  softmax and waited for once step ``i + 1``'s MMA operands are ready;
- the step's power of two comes from the bound of the shipped kernel (keys read, the tile's largest ``|k|`` and
  ``|v|``, ``rowsum |dO|`` and ``|delta|`` of each pair, the step's largest), from values loaded two steps ahead;
- the partial rows are stored through a row-major layout (16-byte stores), their scale beside them.

The variant ``b-nb4-defer`` is what ships (``kernels/keymajor_bwd_gluon.py``, which these variants share their
helpers with).  It covers the shipped Triton kernel's common walk only (bf16, Dk = Dv = 128, 64-key tiles, 32 pairs a step, every q, dO, k
and v value finite: the caller checks, as the shipped kernel checks before its fast walk).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import async_copy, fence_async_shared, warpgroup_mma, \
    warpgroup_mma_wait

# the shipped kernel's helpers (``b-nb4-defer`` is the shipped kernel, ``sel_bwd_keymajor_gluon_kernel``)
from nsa_triton_sel.kernels.keymajor_bwd_gluon import _chunk_row, _gather_step, _key_tile_max, _softmax_tiles, \
    _step_exponent, _step_tokens, _step_vectors, _store_partial_dq, _store_tile
from nsa_triton_sel.kernels.keymajor_ws import _cta_barrier

ROOT = Path(__file__).resolve().parents[2]
LOG2E = 1.4426950408889634


@gluon.jit
def keymajor_bwd_gluon_kernel(
    Q, K, V, DO, LSE, DELTA, DO_L1_LOG2, DK, DV, DQP, DQP_SCALE, WS, ENTRIES, ORIGIN, CHUNKS,
    G, h, T, NT, qk_scale, scale,
    sq_b, sq_s, sq_g, sq_h,
    sk_b, sk_g, sk_t,
    sv_b, sv_g, sv_t,
    sdo_b, sdo_s, sdo_g, sdo_h,
    sl_b, sl_s, sl_g, sl_h,
    sd_b, sd_s, sd_g, sd_h,
    sdk_b, sdk_g, sdk_t,
    sdv_b, sdv_g, sdv_t,
    BLOCK_N: gl.constexpr, ROWS: gl.constexpr, D: gl.constexpr, HP: gl.constexpr, NB: gl.constexpr,
    DQ_EARLY: gl.constexpr, MODE: gl.constexpr,
):
    """dk, dv and the partial dq of one chunk of one key tile's readers (``CHUNKS``/``ENTRIES``/``ORIGIN``/``WS``/
    ``DQP``/``DQP_SCALE`` as ``sel_bwd_keymajor_kernel``), the common walk.  ``MODE`` bit 4: no key mask in a step
    whose pairs all read the whole tile; bit 8: int32 q/dO row offsets (both keep the kernel's values)."""
    STEP: gl.constexpr = ROWS // HP
    gather: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])
    row: gl.constexpr = gl.SliceLayout(1, gather)
    mma_s: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, ROWS, 16])
    mma_d: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    a_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_d, k_width=2)
    col: gl.constexpr = gl.SliceLayout(0, mma_s)
    vec: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    rows_sh: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, D], gl.bfloat16)
    ds_shl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, ROWS], gl.bfloat16)
    vec_sh: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])

    tile_id, e0, e1, slot, b, g, k0 = _chunk_row(CHUNKS, NT, G, BLOCK_N)
    if tile_id >= 0:
        k_sh, v_sh, log2_kmax, log2_vmax, _ = _key_tile_max(K, V, b, g, k0, T, sk_b, sk_g, sk_t, sv_b, sv_g, sv_t,
                                                            BLOCK_N, D)
        q_sh = gl.allocate_shared_memory(gl.bfloat16, [NB, ROWS, D], rows_sh)
        do_sh = gl.allocate_shared_memory(gl.bfloat16, [NB, ROWS, D], rows_sh)
        ds_sh = gl.allocate_shared_memory(gl.bfloat16, [2, BLOCK_N, ROWS], ds_shl)
        # per-step vectors through a two-slot ring: loaded compact two steps ahead, stored after the softmax
        lse_sh = gl.allocate_shared_memory(gl.float32, [2, ROWS], vec_sh)
        delta_sh = gl.allocate_shared_memory(gl.float32, [2, ROWS], vec_sh)
        bnd_sh = gl.allocate_shared_memory(gl.int32, [2, ROWS], vec_sh)
        slot_sh = gl.allocate_shared_memory(gl.int64, [2, ROWS], vec_sh)

        # -- steps 0 .. NB-2 in flight; step NB-1's tokens and steps 0, 1's vectors loaded --
        for j in gl.static_range(NB - 1):
            tok, head, ok = _step_tokens(ENTRIES, e0 + j * STEP, e1, h, ROWS, HP, row)
            _gather_step(Q, DO, q_sh.index(j), do_sh.index(j), tok, ok, b, g, sq_b, sq_s, sq_g, sq_h,
                         sdo_b, sdo_s, sdo_g, sdo_h, head, D, gather, (MODE & 8) != 0)
        tok_n, head_n, ok_n = _step_tokens(ENTRIES, e0 + (NB - 1) * STEP, e1, h, ROWS, HP, row)
        lse2, delta, bnd, pslot, dol1 = _step_vectors(ENTRIES, ORIGIN, LSE, DELTA, DO_L1_LOG2, e0, e1, b, g, h,
                                                      sl_b, sl_s, sl_g, sl_h, sd_b, sd_s, sd_g, sd_h, ROWS, HP, vec)
        lse_sh.index(0).store(lse2)
        delta_sh.index(0).store(delta)
        bnd_sh.index(0).store(bnd)
        slot_sh.index(0).store(pslot)
        e_cur = _step_exponent(delta, bnd, dol1, log2_kmax, log2_vmax)
        lse2, delta, bnd, pslot, dol1 = _step_vectors(ENTRIES, ORIGIN, LSE, DELTA, DO_L1_LOG2, e0 + STEP, e1, b, g,
                                                      h, sl_b, sl_s, sl_g, sl_h, sd_b, sd_s, sd_g, sd_h, ROWS, HP,
                                                      vec)
        lse_sh.index(1).store(lse2)
        delta_sh.index(1).store(delta)
        bnd_sh.index(1).store(bnd)
        slot_sh.index(1).store(pslot)
        e_next = _step_exponent(delta, bnd, dol1, log2_kmax, log2_vmax)
        fence_async_shared()

        dk = gl.zeros([BLOCK_N, D], gl.float32, mma_d)
        dv = gl.zeros([BLOCK_N, D], gl.float32, mma_d)
        zero_s = gl.zeros([BLOCK_N, ROWS], gl.float32, mma_s)
        zero_q = gl.zeros([D, ROWS], gl.float32, mma_s)

        # -- step 0's scores and softmax; its dS^T into the ring --
        async_copy.wait_group(NB - 2)
        _cta_barrier()
        fence_async_shared()
        st = warpgroup_mma(k_sh, q_sh.index(0).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        dpt = warpgroup_mma(v_sh, do_sh.index(0).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        st, dpt = warpgroup_mma_wait(0, deps=(st, dpt))
        pt, dst = _softmax_tiles(st, dpt, lse_sh.index(0).load(col), delta_sh.index(0).load(col),
                                 bnd_sh.index(0).load(col), qk_scale, BLOCK_N, mma_s, (MODE & 4) != 0)
        dst = dst.to(gl.bfloat16)
        ds_sh.index(0).store(dst)
        p = gl.convert_layout(pt.to(gl.bfloat16), a_op)
        ds = gl.convert_layout(dst, a_op)

        n_steps = gl.cdiv(e1 - e0, STEP)
        for i in range(n_steps):
            cur = i % NB
            nxt = (i + 1) % NB
            # step i+2's vectors start loading now, stored after the softmax
            lse2, delta, bnd, pslot, dol1 = _step_vectors(ENTRIES, ORIGIN, LSE, DELTA, DO_L1_LOG2, e0 + (i + 2) * STEP,
                                                          e1, b, g, h, sl_b, sl_s, sl_g, sl_h, sd_b, sd_s, sd_g, sd_h,
                                                          ROWS, HP, vec)
            # -- step i+1's rows are in (and step i's dS^T in its ring slot): step i+1's score MMAs go first,
            # then step i's dv/dk MMAs (and its dq MMA, DQ_EARLY) --
            async_copy.wait_group(NB - 3)
            _cta_barrier()
            fence_async_shared()
            st = warpgroup_mma(k_sh, q_sh.index(nxt).permute((1, 0)), zero_s, use_acc=False, is_async=True)
            dpt = warpgroup_mma(v_sh, do_sh.index(nxt).permute((1, 0)), zero_s, use_acc=False, is_async=True)
            dv = warpgroup_mma(p, do_sh.index(cur), dv, is_async=True)
            dk = warpgroup_mma(ds, q_sh.index(cur), dk, is_async=True)
            if DQ_EARLY == 1:
                dq = warpgroup_mma(k_sh.permute((1, 0)), ds_sh.index(i % 2), zero_q, use_acc=False, is_async=True)
                st, dpt, dv, dk, dq, p, ds = warpgroup_mma_wait(3, deps=(st, dpt, dv, dk, dq, p, ds))
            else:
                st, dpt, dv, dk, p, ds = warpgroup_mma_wait(2, deps=(st, dpt, dv, dk, p, ds))
            # -- step i-1's slot is free (its MMAs are done): step i+NB-1's rows into it --
            _gather_step(Q, DO, q_sh.index((i + NB - 1) % NB), do_sh.index((i + NB - 1) % NB), tok_n,
                         ok_n, b, g, sq_b, sq_s, sq_g, sq_h, sdo_b, sdo_s, sdo_g, sdo_h, head_n, D, gather,
                         (MODE & 8) != 0)
            tok_n, head_n, ok_n = _step_tokens(ENTRIES, e0 + (i + NB) * STEP, e1, h, ROWS, HP, row)
            # -- step i+1's softmax while step i's MMAs run --
            vs = (i + 1) % 2
            pt, dst = _softmax_tiles(st, dpt, lse_sh.index(vs).load(col), delta_sh.index(vs).load(col),
                                     bnd_sh.index(vs).load(col), qk_scale, BLOCK_N, mma_s, (MODE & 4) != 0)
            dst = dst.to(gl.bfloat16)
            if DQ_EARLY == 1:
                dq, dv, dk = warpgroup_mma_wait(0, deps=(dq, dv, dk))
            else:
                dv, dk = warpgroup_mma_wait(0, deps=(dv, dk))
                dq = warpgroup_mma(k_sh.permute((1, 0)), ds_sh.index(i % 2), zero_q, use_acc=False, is_async=True)
                if DQ_EARLY == 0:
                    dq = warpgroup_mma_wait(0, deps=(dq,))
            if DQ_EARLY == 2:
                # the dq MMA runs while step i+1's operands are prepared; it reads ring slot i % 2 only
                p = gl.convert_layout(pt.to(gl.bfloat16), a_op)
                ds = gl.convert_layout(dst, a_op)
                ds_sh.index(vs).store(dst)
                dq = warpgroup_mma_wait(0, deps=(dq,))
                _store_partial_dq(DQP, DQP_SCALE, dq, slot_sh.index(i % 2), e_cur, scale, ROWS, D)
            else:
                # -- step i's partial dq out; step i+1's dS^T into the other ring slot (its last reader, step
                # i-1's dq MMA, is done) --
                _store_partial_dq(DQP, DQP_SCALE, dq, slot_sh.index(i % 2), e_cur, scale, ROWS, D)
                ds_sh.index(vs).store(dst)
                p = gl.convert_layout(pt.to(gl.bfloat16), a_op)
                ds = gl.convert_layout(dst, a_op)
            _cta_barrier()
            lse_sh.index(i % 2).store(lse2)
            delta_sh.index(i % 2).store(delta)
            bnd_sh.index(i % 2).store(bnd)
            slot_sh.index(i % 2).store(pslot)
            e_cur = e_next
            e_next = _step_exponent(delta, bnd, dol1, log2_kmax, log2_vmax)
        async_copy.wait_group(0)

        _store_tile(DK, DV, WS, slot, b, g, k0, T, dk, dv, scale, sdk_b, sdk_g, sdk_t, sdv_b, sdv_g, sdv_t,
                    BLOCK_N, D, mma_d)


# (name, ROWS, NB, DQ_EARLY, MODE): DQ_EARLY 1 ("early"), 0 ("late"), 2 ("defer": issued after the softmax, waited
# for after step i+1's operands are ready)
VARIANTS = [
    ("b-nb4", 32, 4, 1, 0),
    ("b-nb4-fast-i32", 32, 4, 1, 12),
    ("b-nb3-fast-i32", 32, 3, 1, 12),
    ("b-nb4-late-fast-i32", 32, 4, 0, 12),
    ("b-nb3-late-fast-i32", 32, 3, 0, 12),
    ("b-nb3-late", 32, 3, 0, 0),
    ("b-nb3-late-fast", 32, 3, 0, 4),
    ("b-nb3-late-i32", 32, 3, 0, 8),
    ("b-nb4-defer-fast-i32", 32, 4, 2, 12),
    ("b-nb4-defer-fast", 32, 4, 2, 4),
    ("b-nb4-defer", 32, 4, 2, 0),
    ("b-nb3-defer-fast", 32, 3, 2, 4),
    ("b-nb3-defer-fast-i32", 32, 3, 2, 12),
    ("b-r64-nb3-late-fast-i32", 64, 3, 0, 12),
]


def chosen(names) -> list[tuple]:
    by_name = {v[0]: v for v in VARIANTS}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}; known: {', '.join(by_name)}")
    return [by_name[n] for n in names] if names else list(VARIANTS)


def launch(variant: tuple, named: dict, grid: int, HP: int):
    """One launch of ``variant`` over the shipped kernel's arguments ``named`` (``keymajor_ceiling``'s dict for
    ``sel_bwd_keymajor_kernel``); the caller runs the shipped reduction of split tiles, as for the shipped kernel."""
    import torch

    name, rows, nb, early, mode = variant
    q, k, v, go, dk, dv = (named[n] for n in ("Q", "K", "V", "DO", "DK", "DV"))
    if q.dtype != torch.bfloat16 or q.shape[-1] != 128 or v.shape[-1] != 128:
        raise ValueError("the Gluon backward covers bf16, Dk = Dv = 128 only")
    keymajor_bwd_gluon_kernel[(grid,)](
        q, k, v, go, named["LSE"], named["DELTA"], named["DO_L1_LOG2"], dk, dv, named["DQP"], named["DQP_SCALE"],
        named["WS"], named["ENTRIES"], named["ORIGIN"], named["CHUNKS"],
        named["G"], named["h"], named["T"], named["NT"], named["qk_scale"], named["scale"],
        *named["sq"][:4], *named["sk"][:3], *named["sv"][:3], *named["sdo"][:4], *named["sl"][:4], *named["sd"][:4],
        *named["sdk"][:3], *named["sdv"][:3],
        BLOCK_N=64, ROWS=rows, D=128, HP=HP, NB=nb, DQ_EARLY=early, MODE=mode, num_warps=4)


@contextlib.contextmanager
def in_place_of_shipped(variant: tuple | None, HP: int):
    """While open, the library's launches of ``sel_bwd_keymajor_kernel`` run ``variant`` instead (``None``: the
    shipped kernel): the whole backward, every pass, with the Gluon kernel in the shipped one's place."""
    from nsa_triton_sel.kernels import backward as bwd_kernels
    from nsa_triton_sel.kernels import launch as library

    shipped = library._launch

    def swapped(fn, grid, named, **options):
        if fn is bwd_kernels.sel_bwd_keymajor_kernel:
            return launch(variant, named, grid[0], HP)
        return shipped(fn, grid, named, **options)

    if variant is not None:
        library._launch = swapped
    try:
        yield
    finally:
        library._launch = shipped


AOT_CHILD = r'''
import json, re, sys
name, rows, nb, early, mode, hp, arch = json.loads(sys.argv[1])
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from bench.probes.keymajor_bwd_gluon import keymajor_bwd_gluon_kernel as fn
from bench.probes.dkdv_variants import sass_loop_instructions
from nsa_triton_sel.compat.smoke import aot
ce = {"BLOCK_N": 64, "ROWS": rows, "D": 128, "HP": hp, "NB": nb, "DQ_EARLY": early, "MODE": mode}
types = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "DO": "*bf16", "LSE": "*fp32", "DELTA": "*fp32",
         "DO_L1_LOG2": "*fp32", "DK": "*bf16", "DV": "*bf16", "DQP": "*fp16", "DQP_SCALE": "*fp32", "WS": "*fp32",
         "ENTRIES": "*i32", "ORIGIN": "*i64", "CHUNKS": "*i64", "qk_scale": "fp32", "scale": "fp32"}
sig = {n: types.get(n, "i32") for n in fn.arg_names if n not in ce}
sig.update({n: "constexpr" for n in ce})
attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n, t in sig.items()
         if t.startswith("*") or n in ("sq_b", "sq_s", "sq_g", "sq_h", "sk_b", "sk_g", "sk_t", "sv_b", "sv_g",
                                        "sv_t", "sdo_b", "sdo_s", "sdo_g", "sdo_h")}
c = triton.compile(GluonASTSource(fn, sig, ce, attrs), target=GPUTarget("cuda", arch, 32), options={"num_warps": 4})
met = aot.collect_metrics(c)
ptx = c.asm["ptx"]
print(json.dumps({"name": name, "HP": hp, **{k: met.get(k) for k in ("registers", "spills", "shared")},
                  "wgmma": ptx.count("wgmma.mma_async"), "wgmma_wait": re.findall(r"wgmma.wait_group.sync.aligned (\d+)", ptx),
                  "cp_async": ptx.count("cp.async.ca") + ptx.count("cp.async.cg"),
                  "loop_instructions": sass_loop_instructions(c.asm["cubin"])}))
'''


def aot_report(python: str, names, hp: int = 8, arch: int = 90) -> int:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    rc = 0
    for name, rows, nb, early, mode in chosen(names):
        res = subprocess.run([python, "-c", AOT_CHILD, json.dumps([name, rows, nb, early, mode, hp, arch])],
                             capture_output=True, text=True, env=env)
        if res.returncode:
            print(f"{name:22s} FAILED\n{res.stderr[-4000:]}", flush=True)
            rc = 1
            continue
        print(res.stdout.strip().splitlines()[-1], flush=True)
    return rc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aot", action="store_true", help="compile the variants for sm_90 (no GPU) and report")
    ap.add_argument("--only", default="", help="comma-separated variant names")
    ap.add_argument("--hp", type=int, default=8, help="the heads' power-of-two pad of the compiled variants")
    ap.add_argument("--python", default=sys.executable)
    a = ap.parse_args(argv)
    if not a.aot:
        print("on the GPU: python -m bench.probes.keymajor_ceiling --skip-forward --gluon-bwd NAMES", file=sys.stderr)
        return 2
    return aot_report(a.python, [x for x in a.only.split(",") if x], a.hp)


if __name__ == "__main__":
    raise SystemExit(main())
