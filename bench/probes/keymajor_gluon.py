"""Variants of the key-major forward's warp-specialised Gluon partial kernel (Triton >= 3.6, sm_90).

The library ships one of them (``ws1-nb3-st-r128``) as ``nsa_triton_sel.kernels.keymajor_ws``; this probe keeps
the others, for timing against it.

    python -m bench.probes.keymajor_ceiling --gluon ws2-nb4,ws1-nb4 [--H 4,8]     # timed beside the shipped kernel
    python -m bench.probes.keymajor_gluon --aot [--only NAMES] [--python PYTHON_WITH_TRITON_3_6]  # no GPU

The shipped partial kernel (``sel_fwd_keymajor_kernel``) runs at about 55 % of the memory ceiling of its own
access pattern on an H200 (``bench.probes.keymajor_ceiling``): two programs of 4 warps an SM (254 registers a
thread), 0.43 eligible warps per scheduler, so the q gathers, the MMA waits, the softmax and the partial stores
of a step follow one another.  Here the same step is split between warps:

- the kernel's 4 warps gather each step's q rows by ``cp.async`` into one of ``NB`` shared-memory slots and
  arrive on the slot's ``ready`` barrier;
- ``NC`` partitions of 4 warps (``CREGS`` registers asked for) take alternate steps: wait for the slot, score
  MMA (``q K^T``), release the slot (q is read only by that MMA), softmax over the tile's keys, ``P V``, and store
  the normalised partial result (float16, divided by the tile's power of two), its scale and its log2 LSE, as
  the shipped kernel does.  The key and value tile sit in shared memory for the whole chunk.

While one partition waits for an MMA or issues its stores, the other computes and the gather warps run ahead.
The kernel covers bf16, Dk = Dv = 128, 64-key tiles and reader lists under 2^31 entries; a value tile with
non-finite values takes the shipped kernel's isolating step (its values loaded as 0, NaN given to the columns a pair
reads from such a key).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, \
    warpgroup_mma, warpgroup_mma_wait

# the reader-list chunk; the key and value tile in shared memory, the value tile's scale and marks and a CTA-wide
# barrier, as the shipped warp-specialised kernel has them
from bench.probes.dkdv_gluon import _chunk
from nsa_triton_sel.kernels.keymajor_ws import _cta_barrier, _key_tile, _value_tile
# the gather warps: the shipped kernel's gather partition (step j's q rows into slot j % NB)
from nsa_triton_sel.kernels.keymajor_ws import _gather as _producer

ROOT = Path(__file__).resolve().parents[2]

# (name, NB slots, NC MMA partitions, CREGS registers they ask for, MAXNREG the launch's cap a thread, MODE):
# MODE bit 1 stores the partial rows through a row-major blocked layout (16-byte stores; else straight from the MMA
# layout), bit 2 issues the next step's score MMA before this step's softmax
VARIANTS = [
    ("ws1-nb3", 3, 1, 232, 240, 0),
    ("ws1-nb4", 4, 1, 232, 240, 0),
    ("ws2-nb4", 4, 2, 160, 168, 0),
    ("ws2-nb6", 6, 2, 160, 168, 0),
    ("ws2-nb4-r128", 4, 2, 128, 128, 0),
    ("ws2-nb4-st", 4, 2, 160, 168, 1),
    ("ws2-nb4-ov", 4, 2, 160, 168, 2),
    ("ws2-nb4-st-ov", 4, 2, 160, 168, 3),
    ("ws3-nb5-st", 5, 3, 128, 128, 1),
    ("ws3-nb5-st-ov", 5, 3, 128, 128, 3),
    ("ws1-nb4-st-ov", 4, 1, 232, 240, 3),
    ("ws1-nb4-st-r128", 4, 1, 128, 128, 1),
    ("ws1-nb3-st-ov-r128", 3, 1, 128, 128, 3),
    ("ws1-nb3-st-r128", 3, 1, 128, 128, 1),
    ("ws2-nb4-st-r128", 4, 2, 128, 128, 1),
    ("ws3-nb4-st", 4, 3, 128, 128, 1),
    ("ws3-nb6-st", 6, 3, 128, 128, 1),
]


@gluon.jit
def _consumer(k_sh, v_sh, vbad_sh, any_bad, q_sh, ready, empty, OP, OP_SCALE, LP, ENTRIES, ORIGIN, e0, e1, h, qk_scale,
              e_tile,
              C: gl.constexpr, NC: gl.constexpr, BLOCK_N: gl.constexpr, ROWS: gl.constexpr, D: gl.constexpr,
              HP: gl.constexpr, NB: gl.constexpr, MODE: gl.constexpr):
    """MMA partition ``C`` of ``NC`` (4 warps): steps ``C, C + NC, ...`` of the chunk, each the shipped kernel's
    step (``_keymajor_step``) on the slot's q rows; the walk with the isolating step is a copy of its own, taken
    for the whole chunk, so that its extra accumulator costs the common walk no registers."""
    if any_bad:
        _walk(k_sh, v_sh, vbad_sh, q_sh, ready, empty, OP, OP_SCALE, LP, ENTRIES, ORIGIN, e0, e1, h, qk_scale, e_tile,
              C, NC, BLOCK_N, ROWS, D, HP, NB, MODE, True)
    else:
        _walk(k_sh, v_sh, vbad_sh, q_sh, ready, empty, OP, OP_SCALE, LP, ENTRIES, ORIGIN, e0, e1, h, qk_scale, e_tile,
              C, NC, BLOCK_N, ROWS, D, HP, NB, MODE, False)


@gluon.jit
def _walk(k_sh, v_sh, vbad_sh, q_sh, ready, empty, OP, OP_SCALE, LP, ENTRIES, ORIGIN, e0, e1, h, qk_scale, e_tile,
          C: gl.constexpr, NC: gl.constexpr, BLOCK_N: gl.constexpr, ROWS: gl.constexpr, D: gl.constexpr,
          HP: gl.constexpr, NB: gl.constexpr, MODE: gl.constexpr, ISOLATE: gl.constexpr):
    """The steps of MMA partition ``C`` (see :func:`_consumer`); ``ISOLATE``: the value tile holds a non-finite
    value (loaded as 0 in ``v_sh``, marked in ``vbad_sh``)."""
    STEP: gl.constexpr = ROWS // HP
    mma_s: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                    instr_shape=[16, BLOCK_N, 16])
    mma_o: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    p_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_o, k_width=2)
    # the store's layout: 8 halves (16 bytes) a thread along a row (bit 1), or the MMA's own
    out_l: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0]) if (MODE & 1) != 0 else mma_o
    srow: gl.constexpr = gl.SliceLayout(1, mma_s)
    orow: gl.constexpr = gl.SliceLayout(1, out_l)
    n_steps = gl.cdiv(e1 - e0, STEP)
    n_mine = gl.maximum(gl.cdiv(n_steps - C, NC), 0)
    zero_s = gl.zeros([ROWS, BLOCK_N], gl.float32, mma_s)
    zero_o = gl.zeros([ROWS, D], gl.float32, mma_o)
    offs_n = gl.expand_dims(gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma_s)), 0)
    offs_d = gl.expand_dims(gl.arange(0, D, layout=gl.SliceLayout(0, out_l)), 0)
    r_s = gl.arange(0, ROWS, layout=srow)
    r_o = gl.arange(0, ROWS, layout=orow)
    inv_tile = gl.exp2(-e_tile)
    if (MODE & 2) != 0:  # the first step's score MMA before the loop
        mbarrier.wait(ready.index(C % NB), (C // NB) & 1, pred=n_mine > 0)
        fence_async_shared()
        st = warpgroup_mma(q_sh.index(C % NB), k_sh.permute((1, 0)), zero_s, use_acc=False, is_async=True)
        st = warpgroup_mma_wait(1, deps=(st,))  # a tensor for the loop, still in flight
    for kk in range(n_mine):
        j = C + kk * NC
        sl = j % NB
        # the step's key bounds (score rows) and partial slots (output rows), loaded before the wait
        ent_s = e0 + j * STEP + r_s // HP
        bnd = gl.load(ENTRIES + ent_s * 2 + 1, mask=(ent_s < e1) & (r_s % HP < h), other=0)
        ent_o = e0 + j * STEP + r_o // HP
        head_o = r_o % HP
        ok_o = (ent_o < e1) & (head_o < h)
        slot = gl.load(ORIGIN + ent_o, mask=ok_o, other=0) * h + head_o
        if (MODE & 2) != 0:
            st = warpgroup_mma_wait(0, deps=(st,))
            mbarrier.arrive(empty.index(sl))  # q is read by the score MMA only: the slot can be refilled
            s_cur = st
            jn = j + NC
            mbarrier.wait(ready.index(jn % NB), (jn // NB) & 1, pred=kk + 1 < n_mine)
            fence_async_shared()
            st = warpgroup_mma(q_sh.index(jn % NB), k_sh.permute((1, 0)), zero_s, use_acc=False, is_async=True)
        else:
            mbarrier.wait(ready.index(sl), (j // NB) & 1)
            fence_async_shared()
            s_cur = warpgroup_mma(q_sh.index(sl), k_sh.permute((1, 0)), zero_s, use_acc=False, is_async=True)
            s_cur = warpgroup_mma_wait(0, deps=(s_cur,))
            mbarrier.arrive(empty.index(sl))
        lo = gl.expand_dims(bnd & 0xFFFF, 1)
        hi = gl.expand_dims(bnd >> 16, 1)
        x = gl.where((offs_n >= lo) & (offs_n < hi), s_cur * qk_scale, float("-inf"))
        m = gl.max(x, 1)
        m_safe = gl.where(m == float("-inf"), 0.0, m)
        p = gl.exp2(x - gl.expand_dims(m_safe, 1))
        l = gl.sum(p, 1)
        o = warpgroup_mma(gl.convert_layout(p.to(gl.bfloat16), p_op), v_sh, zero_o, use_acc=False, is_async=True)
        if (MODE & 2) != 0:
            o, st = warpgroup_mma_wait(0, deps=(o, st))
        else:
            o = warpgroup_mma_wait(0, deps=(o,))
        if ISOLATE:  # a pair that reads a non-finite value of the tile gets NaN in that column (the shipped rule)
            inside = gl.where((offs_n >= lo) & (offs_n < hi), 1.0, 0.0).to(gl.float16)  # recomputed: not kept live
            reads_bad = warpgroup_mma(gl.convert_layout(inside, p_op), vbad_sh, zero_o, use_acc=False, is_async=True)
            reads_bad = warpgroup_mma_wait(0, deps=(reads_bad,))
            o = gl.where(reads_bad > 0.0, float("nan"), o)
        empty_row = l == 0.0
        l_safe = gl.where(empty_row, 1.0, l)
        lse2 = gl.convert_layout(gl.where(empty_row, float("-inf"), m_safe + gl.log2(l_safe)), orow)
        f = gl.convert_layout(inv_tile / l_safe, gl.SliceLayout(1, mma_o))
        val = gl.convert_layout((o * gl.expand_dims(f, 1)).to(gl.float16), out_l)
        gl.store(OP + gl.expand_dims(slot * D, 1) + offs_d, val, mask=gl.expand_dims(ok_o, 1))
        gl.store(OP_SCALE + slot, gl.exp2(e_tile) + gl.zeros_like(lse2), mask=ok_o)
        gl.store(LP + slot, lse2, mask=ok_o)


@gluon.jit
def fwd_ws_kernel(
    Q, K, V, OP, OP_SCALE, LP, ENTRIES, ORIGIN, CHUNKS,
    G, h, T, NT, qk_scale,
    sq_b, sq_s, sq_g, sq_h,
    sk_b, sk_g, sk_t,
    sv_b, sv_g, sv_t,
    BLOCK_N: gl.constexpr, ROWS: gl.constexpr, D: gl.constexpr, HP: gl.constexpr, NB: gl.constexpr,
    NC: gl.constexpr, CREGS: gl.constexpr, MODE: gl.constexpr,
):
    """The key-major forward's partial results of one chunk (arguments as ``sel_fwd_keymajor_kernel``'s),
    warp-specialised: see the module docstring.  ``NB > NC`` slots."""
    gl.static_assert(NB > NC, "each MMA partition needs a slot of its own and one being filled")
    rows_sh: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, D], gl.bfloat16)
    tile_id, e0, e1, _, _, b, g, k0 = _chunk(CHUNKS, NT, G, BLOCK_N)
    if tile_id >= 0:
        k_sh, v_sh = _key_tile(K, V, b, g, k0, T, sk_b, sk_g, sk_t, sv_b, sv_g, sv_t, BLOCK_N, D)
        vbad_sh = gl.allocate_shared_memory(gl.float16, [BLOCK_N, D],
                                            gl.NVMMASharedLayout.get_default_for([BLOCK_N, D], gl.float16))
        e_tile, any_bad = _value_tile(v_sh, vbad_sh, BLOCK_N, D)
        _cta_barrier()
        q_sh = gl.allocate_shared_memory(gl.bfloat16, [NB, ROWS, D], rows_sh)
        ready = gl.allocate_shared_memory(gl.int64, [NB, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [NB, 1], mbarrier.MBarrierLayout())
        for j in gl.static_range(NB):
            mbarrier.init(ready.index(j), count=128)
            mbarrier.init(empty.index(j), count=1)
        fence_async_shared()
        if NC == 3:
            gl.warp_specialize(
                [(_producer, (Q, ENTRIES, q_sh, ready, empty, e0, e1, b, g, h, sq_b, sq_s, sq_g, sq_h, ROWS, D, HP,
                              NB)),
                 (_consumer, (k_sh, v_sh, vbad_sh, any_bad, q_sh, ready, empty, OP, OP_SCALE, LP, ENTRIES, ORIGIN,
                              e0, e1, h, qk_scale, e_tile, 0, 3, BLOCK_N, ROWS, D, HP, NB, MODE)),
                 (_consumer, (k_sh, v_sh, vbad_sh, any_bad, q_sh, ready, empty, OP, OP_SCALE, LP, ENTRIES, ORIGIN,
                              e0, e1, h, qk_scale, e_tile, 1, 3, BLOCK_N, ROWS, D, HP, NB, MODE)),
                 (_consumer, (k_sh, v_sh, vbad_sh, any_bad, q_sh, ready, empty, OP, OP_SCALE, LP, ENTRIES, ORIGIN,
                              e0, e1, h, qk_scale, e_tile, 2, 3, BLOCK_N, ROWS, D, HP, NB, MODE))],
                [4, 4, 4], [CREGS, CREGS, CREGS])
        elif NC == 1:
            gl.warp_specialize(
                [(_producer, (Q, ENTRIES, q_sh, ready, empty, e0, e1, b, g, h, sq_b, sq_s, sq_g, sq_h, ROWS, D, HP,
                              NB)),
                 (_consumer, (k_sh, v_sh, vbad_sh, any_bad, q_sh, ready, empty, OP, OP_SCALE, LP, ENTRIES, ORIGIN,
                              e0, e1, h, qk_scale, e_tile, 0, 1, BLOCK_N, ROWS, D, HP, NB, MODE))],
                [4], [CREGS])
        else:
            gl.warp_specialize(
                [(_producer, (Q, ENTRIES, q_sh, ready, empty, e0, e1, b, g, h, sq_b, sq_s, sq_g, sq_h, ROWS, D, HP,
                              NB)),
                 (_consumer, (k_sh, v_sh, vbad_sh, any_bad, q_sh, ready, empty, OP, OP_SCALE, LP, ENTRIES, ORIGIN,
                              e0, e1, h, qk_scale, e_tile, 0, 2, BLOCK_N, ROWS, D, HP, NB, MODE)),
                 (_consumer, (k_sh, v_sh, vbad_sh, any_bad, q_sh, ready, empty, OP, OP_SCALE, LP, ENTRIES, ORIGIN,
                              e0, e1, h, qk_scale, e_tile, 1, 2, BLOCK_N, ROWS, D, HP, NB, MODE))],
                [4, 4], [CREGS, CREGS])


def chosen(names) -> list[tuple]:
    by_name = {v[0]: v for v in VARIANTS}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}; known: {', '.join(by_name)}")
    return [by_name[n] for n in names] if names else list(VARIANTS)


def launch(variant: tuple, q, k, v, op, op_scale, lp, readers, h: int, HP: int, qk_scale: float, rows: int = 64):
    """``fwd_ws_kernel`` of ``variant`` over a pass's views (``q [B, S, G, h, 128]``, ``k``/``v [B, G, T, 128]``,
    bf16, contiguous last dims) and its key-major reader list, into the partial workspaces."""
    _, nb, nc, cregs, maxnreg, mode = variant
    if q.shape[-1] != 128 or v.shape[-1] != 128 or q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
        raise ValueError("the Gluon partial kernel covers Dk = Dv = 128 with unit last strides only")
    fwd_ws_kernel[(readers.chunks.shape[0],)](
        q, k, v, op, op_scale, lp, readers.entries, readers.origin, readers.chunks,
        q.shape[2], h, k.shape[2], readers.n_tiles, qk_scale,
        *q.stride()[:4], *k.stride()[:3], *v.stride()[:3],
        BLOCK_N=64, ROWS=rows, D=128, HP=HP, NB=nb, NC=nc, CREGS=cregs, MODE=mode, num_warps=4,
        maxnreg=maxnreg)


def forward(plan, q, k, v, ranges, sc: float, variant: tuple | None):
    """The key-major forward of ``plan`` (every pass: reader list, partial kernel, merge) as
    ``bench.probes.keymajor_partials.forward_keymajor`` launches it, with the partial kernel of ``variant`` (None:
    the shipped one): ``(out, lse)``."""
    import torch

    from bench.probes.keymajor_partials import forward_keymajor

    meta = plan.forward.meta

    def partial(qs, ks, vs, op, op_scale, lp, readers):
        launch(variant, qs, ks, vs, op.view(-1, op.shape[-1]), op_scale, lp, readers, q.shape[3], meta.HP,
               sc * 1.4426950408889634, rows=meta.ROWS)

    return forward_keymajor(plan, q, k, v, ranges, sc, torch.float16, partial=partial if variant else None)


AOT_CHILD = r'''
import json, re, sys
name, nb, nc, cregs, maxnreg, mode, hp, arch = json.loads(sys.argv[1])
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from bench.probes.keymajor_gluon import fwd_ws_kernel as fn
ce = {"BLOCK_N": 64, "ROWS": 64, "D": 128, "HP": hp, "NB": nb, "NC": nc, "CREGS": cregs, "MODE": mode}
types = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "OP": "*fp16", "OP_SCALE": "*fp32", "LP": "*fp32",
         "ENTRIES": "*i32", "ORIGIN": "*i64", "CHUNKS": "*i64", "qk_scale": "fp32"}
sig = {n: types.get(n, "i32") for n in fn.arg_names if n not in ce}
sig.update({n: "constexpr" for n in ce})
attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n, t in sig.items()
         if t.startswith("*") or n in ("sq_b", "sq_s", "sq_g", "sq_h", "sk_b", "sk_g", "sk_t", "sv_b", "sv_g", "sv_t")}
c = triton.compile(GluonASTSource(fn, sig, ce, attrs), target=GPUTarget("cuda", arch, 32),
                   options={"num_warps": 4, "maxnreg": maxnreg})
from nsa_triton_sel.compat.smoke import aot
met = aot.collect_metrics(c)
ptx = c.asm["ptx"]
print(json.dumps({"name": name, "HP": hp, "setmaxnreg": re.findall(r"setmaxnreg\S*\s+(\d+)", ptx),
                  **{k: met.get(k) for k in ("registers", "spills", "shared")},
                  "wgmma": ptx.count("wgmma.mma_async"), "cp_async": ptx.count("cp.async.ca") + ptx.count("cp.async.cg")}))
'''


def aot_report(python: str, names, hp: int = 8, arch: int = 90) -> int:
    """Compile each variant for ``arch`` under ``python`` (no GPU) and print registers, spills, shared memory."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    rc = 0
    for name, nb, nc, cregs, maxnreg, mode in chosen(names):
        res = subprocess.run([python, "-c", AOT_CHILD, json.dumps([name, nb, nc, cregs, maxnreg, mode, hp, arch])],
                             capture_output=True, text=True, env=env)
        if res.returncode:
            print(f"{name} FAILED\n{res.stderr[-3000:]}", flush=True)
            rc = 1
            continue
        print(res.stdout.strip().splitlines()[-1], flush=True)
    return rc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aot", action="store_true", help="compile for sm_90 without a GPU and report")
    ap.add_argument("--only", default="", help="comma list of variants")
    ap.add_argument("--python", default=sys.executable, help="the interpreter whose Triton compiles (>= 3.6)")
    ap.add_argument("--hp", type=int, default=8, help="the padded group (heads a step's entry holds)")
    a = ap.parse_args(argv)
    names = [n for n in a.only.split(",") if n]
    if not a.aot:
        raise SystemExit("timing runs through bench.probes.keymajor_ceiling --gluon NAMES (on the GPU)")
    return aot_report(a.python, names, a.hp)


if __name__ == "__main__":
    raise SystemExit(main())
