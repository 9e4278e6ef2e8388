"""Loop variants of the dk/dv kernel, timed against the shipped kernel and the gather-copy ceiling on one GPU.

    python -m bench.probes.dkdv_variants [--T 8192,32768,65536] [--sel random,local] [--json out.json]
    python -m bench.probes.dkdv_variants --aot [--python OTHER_VENV_PYTHON]   # registers/spills/smem, no GPU

``sel_bwd_dkdv_kernel`` walks a key tile's (entry, head) pairs ``ROWS`` at a time; each step gathers the q and
dO rows of its pairs, then runs four small MMAs.  At 255 registers a program (two per SM) nothing but its own
pipelining hides the latency of that chain.  The variant kernel here keeps the kernel's arithmetic and
summation order and changes only how the walk is fed (``shipped-walk``: the flat walk with a division by h and
the entries loaded in their own step, which the kernel had until ``hp-pf1-s3`` measured best and became it):

- ``HP > 0``: pairs are laid out ``[ROWS // HP entries, HP heads]`` (``HP`` = next power of two of h, a
  constexpr), so a pair's entry and head are a shift and a mask instead of a division by the runtime h;
- ``PREFETCH = 1``: the next step's entries are loaded during this step (loop-carried), so the gather's
  addresses never wait on a load of the same step and the pipeliner can start it a step ahead;
- ``PREFETCH = 2``: as 1, entries two steps ahead, and the next step's q/dO rows gathered into registers
  during this step (a manual double buffer, independent of the pipeliner).

- ``SPLIT``: dv and dk in two programs of a chunk (grid ``(chunks, 2)``), one accumulator each, so a program
  holds fewer registers (``--aot``: 162 at 16 pairs a step, 4 stages, against 225 together) and more programs
  share an SM; the rows are gathered twice (the H200 gathers at 1.45x the H100's rate while the kernel runs no
  faster there).  Under the interpreter each split variant gives the same dk and dv, bit for bit, as its unsplit
  walk (same pair order).

Every variant's dk and dv are compared with the shipped kernel's on the same reader list (the same pair order
gives bit-identical sums) before it is timed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[2]


@triton.jit
def _pairs(p0, p_hi, r, h, HP: tl.constexpr):
    """(entry, head, ok) of the step starting at position ``p0``: an entry index with ``HP`` heads each, or a
    flat pair index ``entry * h + head``."""
    if HP > 0:
        ent = p0 + r // HP
        head = r % HP
        ok = (ent < p_hi) & (head < h)
    else:
        f = p0 + r
        ok = f < p_hi
        ent = f // h
        head = f % h
    return ent, head, ok


@triton.jit
def _rows(Q, DO, LSE, DELTA, tok, head, ok, b, g, S, G, h, Dk, Dv,
          sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d, sl_b, sl_s, sl_g, sl_h,
          DK1: tl.constexpr, BLOCK_DV: tl.constexpr):
    q_off = b * sq_b + tok.to(tl.int64) * sq_s + g * sq_g + head.to(tl.int64) * sq_h
    do_off = b * sdo_b + tok.to(tl.int64) * sdo_s + g * sdo_g + head.to(tl.int64) * sdo_h
    l_off = b * sl_b + tok.to(tl.int64) * sl_s + g * sl_g + head.to(tl.int64) * sl_h
    offs_k = tl.arange(0, DK1)
    offs_v = tl.arange(0, BLOCK_DV)
    q1 = tl.load(Q + q_off[:, None] + offs_k[None, :] * sq_d, mask=ok[:, None] & (offs_k[None, :] < Dk), other=0.0)
    do = tl.load(DO + do_off[:, None] + offs_v[None, :] * sdo_d, mask=ok[:, None] & (offs_v[None, :] < Dv),
                 other=0.0)
    lse2 = tl.load(LSE + l_off, mask=ok, other=0.0) * 1.4426950408889634
    delta = tl.load(DELTA + ((b * S + tok.to(tl.int64)) * G + g) * h + head, mask=ok, other=0.0)
    return q1, do, lse2, delta


@triton.jit
def _step(k1, v, q1, do, lse2, delta, bnd, offs_n, qk_scale, dk1, dv_acc, PART: tl.constexpr):
    """One step; ``PART``: 0 dk and dv, 1 dv only (two MMAs), 2 dk only (three)."""
    lo = bnd & 0xFFFF
    hi = bnd >> 16
    st = tl.dot(k1, tl.trans(q1))
    inside = (offs_n[:, None] >= lo[None, :]) & (offs_n[:, None] < hi[None, :])
    pt = tl.where(inside, tl.exp2(tl.minimum(st * qk_scale - lse2[None, :], 0.0)), 0.0)
    if PART != 2:
        dv_acc += tl.dot(pt.to(do.dtype), do)
    if PART != 1:
        dpt = tl.dot(v, tl.trans(do))
        dst = tl.where(inside, pt * (dpt - delta[None, :]), 0.0).to(q1.dtype)
        dk1 += tl.dot(dst, q1)
    return dk1, dv_acc


@triton.jit
def dkdv_variant_kernel(
    Q, K, V, DO, LSE, DELTA, DK, DV, WS, ENTRIES, CHUNKS,
    S, G, h, Dk, Dv, T, NT, qk_scale, scale,
    sq_b, sq_s, sq_g, sq_h, sq_d,
    sk_b, sk_g, sk_t, sk_d,
    sv_b, sv_g, sv_t, sv_d,
    sdo_b, sdo_s, sdo_g, sdo_h, sdo_d,
    sl_b, sl_s, sl_g, sl_h,
    BLOCK_N: tl.constexpr, ROWS: tl.constexpr, DK1: tl.constexpr, BLOCK_DV: tl.constexpr,
    HP: tl.constexpr, PREFETCH: tl.constexpr, STEP: tl.constexpr, SPLIT: tl.constexpr,
):
    """The shipped dk/dv kernel's common walk (Dk a power of two, no non-finite isolation) with the feeds above.
    ``SPLIT``: dv and dk in two programs of a chunk (grid ``(chunks, 2)``), each with one accumulator: fewer
    registers a program, the chunk's rows gathered twice."""
    pid = tl.program_id(0)
    chunk = CHUNKS + pid.to(tl.int64) * 4
    tile_id = tl.load(chunk)
    if tile_id < 0:
        return
    e0 = tl.load(chunk + 1)
    e1 = tl.load(chunk + 2)
    slot = tl.load(chunk + 3)
    bg = tile_id // NT
    b = bg // G
    g = bg % G
    k0 = (tile_id % NT) * BLOCK_N
    offs_n = tl.arange(0, BLOCK_N)
    n_ok = (k0 + offs_n) < T
    offs_d1 = tl.arange(0, DK1)
    offs_dv = tl.arange(0, BLOCK_DV)
    k_off = b * sk_b + g * sk_g + (k0 + offs_n).to(tl.int64) * sk_t
    v_off = b * sv_b + g * sv_g + (k0 + offs_n).to(tl.int64) * sv_t
    k1 = tl.load(K + k_off[:, None] + offs_d1[None, :] * sk_d, mask=n_ok[:, None] & (offs_d1[None, :] < Dk), other=0.0)
    v = tl.load(V + v_off[:, None] + offs_dv[None, :] * sv_d, mask=n_ok[:, None] & (offs_dv[None, :] < Dv), other=0.0)
    dk1 = tl.zeros((BLOCK_N, DK1), tl.float32)
    dv_acc = tl.zeros((BLOCK_N, BLOCK_DV), tl.float32)
    if SPLIT:
        if tl.program_id(1) == 0:
            _walk(Q, K, V, DO, LSE, DELTA, DK, DV, WS, ENTRIES, S, G, h, Dk, Dv, T, qk_scale, scale,
                  sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d, sl_b, sl_s, sl_g, sl_h,
                  e0, e1, slot, bg, b, g, k0, k1, v, dk1, dv_acc, BLOCK_N, ROWS, DK1, BLOCK_DV, HP, PREFETCH, STEP, 1)
        else:
            _walk(Q, K, V, DO, LSE, DELTA, DK, DV, WS, ENTRIES, S, G, h, Dk, Dv, T, qk_scale, scale,
                  sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d, sl_b, sl_s, sl_g, sl_h,
                  e0, e1, slot, bg, b, g, k0, k1, v, dk1, dv_acc, BLOCK_N, ROWS, DK1, BLOCK_DV, HP, PREFETCH, STEP, 2)
    else:
        _walk(Q, K, V, DO, LSE, DELTA, DK, DV, WS, ENTRIES, S, G, h, Dk, Dv, T, qk_scale, scale,
              sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d, sl_b, sl_s, sl_g, sl_h,
              e0, e1, slot, bg, b, g, k0, k1, v, dk1, dv_acc, BLOCK_N, ROWS, DK1, BLOCK_DV, HP, PREFETCH, STEP, 0)


@triton.jit
def _walk(Q, K, V, DO, LSE, DELTA, DK, DV, WS, ENTRIES, S, G, h, Dk, Dv, T, qk_scale, scale,
          sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d, sl_b, sl_s, sl_g, sl_h,
          e0, e1, slot, bg, b, g, k0, k1, v, dk1, dv_acc,
          BLOCK_N: tl.constexpr, ROWS: tl.constexpr, DK1: tl.constexpr, BLOCK_DV: tl.constexpr,
          HP: tl.constexpr, PREFETCH: tl.constexpr, STEP: tl.constexpr, PART: tl.constexpr):
    """A chunk's walk and store, for ``PART`` (``_step``)."""
    offs_n = tl.arange(0, BLOCK_N)
    n_ok = (k0 + offs_n) < T
    offs_d1 = tl.arange(0, DK1)
    offs_dv = tl.arange(0, BLOCK_DV)
    r = tl.arange(0, ROWS)
    if HP > 0:
        p_lo = e0
        p_hi = e1
    else:
        p_lo = e0 * h
        p_hi = e1 * h
    if PREFETCH == 0:
        for p0 in range(p_lo, p_hi, STEP):
            ent, head, ok = _pairs(p0, p_hi, r, h, HP)
            tok = tl.load(ENTRIES + ent * 2, mask=ok, other=0)
            bnd = tl.load(ENTRIES + ent * 2 + 1, mask=ok, other=0)
            q1, do, lse2, delta = _rows(Q, DO, LSE, DELTA, tok, head, ok, b, g, S, G, h, Dk, Dv,
                                        sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d,
                                        sl_b, sl_s, sl_g, sl_h, DK1, BLOCK_DV)
            dk1, dv_acc = _step(k1, v, q1, do, lse2, delta, bnd, offs_n, qk_scale, dk1, dv_acc, PART)
    elif PREFETCH == 1:
        ent, head, ok = _pairs(p_lo, p_hi, r, h, HP)
        tok = tl.load(ENTRIES + ent * 2, mask=ok, other=0)
        bnd = tl.load(ENTRIES + ent * 2 + 1, mask=ok, other=0)
        for p0 in range(p_lo, p_hi, STEP):
            q1, do, lse2, delta = _rows(Q, DO, LSE, DELTA, tok, head, ok, b, g, S, G, h, Dk, Dv,
                                        sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d,
                                        sl_b, sl_s, sl_g, sl_h, DK1, BLOCK_DV)
            ent_n, head_n, ok_n = _pairs(p0 + STEP, p_hi, r, h, HP)
            tok_n = tl.load(ENTRIES + ent_n * 2, mask=ok_n, other=0)
            bnd_n = tl.load(ENTRIES + ent_n * 2 + 1, mask=ok_n, other=0)
            dk1, dv_acc = _step(k1, v, q1, do, lse2, delta, bnd, offs_n, qk_scale, dk1, dv_acc, PART)
            tok = tok_n
            bnd = bnd_n
            head = head_n
            ok = ok_n
    else:
        # step 0's rows and step 1's entries before the loop; each step gathers the next step's rows and loads
        # the entries of the step after that before it computes its own.
        ent, head, ok = _pairs(p_lo, p_hi, r, h, HP)
        tok = tl.load(ENTRIES + ent * 2, mask=ok, other=0)
        bnd = tl.load(ENTRIES + ent * 2 + 1, mask=ok, other=0)
        q1, do, lse2, delta = _rows(Q, DO, LSE, DELTA, tok, head, ok, b, g, S, G, h, Dk, Dv,
                                    sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d,
                                    sl_b, sl_s, sl_g, sl_h, DK1, BLOCK_DV)
        ent_n, head_n, ok_n = _pairs(p_lo + STEP, p_hi, r, h, HP)
        tok_n = tl.load(ENTRIES + ent_n * 2, mask=ok_n, other=0)
        bnd_n = tl.load(ENTRIES + ent_n * 2 + 1, mask=ok_n, other=0)
        for p0 in range(p_lo, p_hi, STEP):
            q1_n, do_n, lse2_n, delta_n = _rows(Q, DO, LSE, DELTA, tok_n, head_n, ok_n, b, g, S, G, h, Dk, Dv,
                                                sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d,
                                                sl_b, sl_s, sl_g, sl_h, DK1, BLOCK_DV)
            ent_2, head_2, ok_2 = _pairs(p0 + 2 * STEP, p_hi, r, h, HP)
            tok_2 = tl.load(ENTRIES + ent_2 * 2, mask=ok_2, other=0)
            bnd_2 = tl.load(ENTRIES + ent_2 * 2 + 1, mask=ok_2, other=0)
            dk1, dv_acc = _step(k1, v, q1, do, lse2, delta, bnd, offs_n, qk_scale, dk1, dv_acc, PART)
            q1 = q1_n
            do = do_n
            lse2 = lse2_n
            delta = delta_n
            bnd = bnd_n
            tok_n = tok_2
            bnd_n = bnd_2
            head_n = head_2
            ok_n = ok_2
    if slot < 0:
        t_idx = bg * T + k0 + offs_n
        if PART != 1:
            tl.store(DK + t_idx[:, None] * Dk + offs_d1[None, :], (dk1 * scale).to(DK.dtype.element_ty),
                     mask=n_ok[:, None] & (offs_d1[None, :] < Dk))
        if PART != 2:
            tl.store(DV + t_idx[:, None] * Dv + offs_dv[None, :], dv_acc.to(DV.dtype.element_ty),
                     mask=n_ok[:, None] & (offs_dv[None, :] < Dv))
    else:
        width = DK1 + BLOCK_DV
        ws = WS + slot * (BLOCK_N * width) + offs_n[:, None] * width
        if PART != 1:
            tl.store(ws + offs_d1[None, :], dk1 * scale)
        if PART != 2:
            tl.store(ws + DK1 + offs_dv[None, :], dv_acc)


# (name, HP from h?, PREFETCH, ROWS, warps, stages, SPLIT)
VARIANTS = [
    ("shipped-walk", False, 0, 32, 4, 2, False),
    ("hp", True, 0, 32, 4, 2, False),
    ("hp-pf1", True, 1, 32, 4, 2, False),
    ("hp-pf1-s3", True, 1, 32, 4, 3, False),
    ("hp-pf2", True, 2, 32, 4, 2, False),
    ("hp-pf2-s1", True, 2, 32, 4, 1, False),
    ("hp-r16", True, 0, 16, 4, 2, False),
    ("hp-r16-s3", True, 0, 16, 4, 3, False),
    ("hp-r16-s4", True, 0, 16, 4, 4, False),
    ("hp-pf1-r16", True, 1, 16, 4, 2, False),
    ("hp-pf1-r16-s3", True, 1, 16, 4, 3, False),
    ("hp-pf1-r16-s4", True, 1, 16, 4, 4, False),
    ("hp-pf2-r16", True, 2, 16, 4, 2, False),
    ("hp-pf2-r16-s1", True, 2, 16, 4, 1, False),
    ("hp-r64", True, 0, 64, 4, 2, False),
    ("hp-pf1-r64", True, 1, 64, 4, 2, False),
    ("hp-pf1-s3-split", True, 1, 32, 4, 3, True),
    ("hp-pf1-s2-split", True, 1, 32, 4, 2, True),
    ("hp-pf1-r64-s3-split", True, 1, 64, 4, 3, True),
    ("hp-pf1-r64-s3-split-w8", True, 1, 64, 8, 3, True),
    ("hp-pf1-r16-s4-split", True, 1, 16, 4, 4, True),
]

KERNEL_TYPES = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "DO": "*bf16", "LSE": "*fp32", "DELTA": "*fp32",
                "DK": "*bf16", "DV": "*bf16", "WS": "*fp32", "ENTRIES": "*i32", "CHUNKS": "*i64",
                "qk_scale": "fp32", "scale": "fp32"}
ONES = ("sq_d", "sk_d", "sv_d", "sdo_d", "sl_h")
DIV16 = ("Dk", "Dv", "sq_b", "sq_s", "sq_g", "sq_h", "sk_b", "sk_g", "sk_t", "sv_b", "sv_g", "sv_t",
         "sdo_b", "sdo_s", "sdo_g", "sdo_h", "sdo_d", "sl_b", "sl_s")

AOT_CHILD = r'''
import json, sys
from nsa_triton_sel.compat.smoke import aot
name, hp, pf, rows, warps, stages, split, types, ones, div16, arch = json.loads(sys.argv[1])
triton, ASTSource, GPUTarget, family = aot.triton_api()
fn = aot._load_kernel("bench.probes.dkdv_variants:dkdv_variant_kernel")
ce = {"BLOCK_N": 64, "ROWS": rows, "DK1": 128, "BLOCK_DV": 128, "HP": 16 if hp else 0, "PREFETCH": pf,
      "STEP": rows // 16 if hp else rows, "SPLIT": split}
sig = {n: types.get(n, "i32") for n in fn.arg_names if n not in ce}
for n in ones:
    sig.pop(n)
    ce[n] = 1
aligned = [n for n, t in sig.items() if t.startswith("*") or n in div16]
src = aot.make_source(ASTSource, family, fn, sig, ce, aligned=aligned)
c = triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": warps, "num_stages": stages})
met = aot.collect_metrics(c)
ttgir = c.asm["ttgir"]
print(json.dumps({"name": name, **{k: met.get(k) for k in ("registers", "spills", "shared", "mma")},
                  "async_copies": ttgir.count("async_copy_global_to_local")}))
'''


def aot_report(python: str, arch: int = 90) -> int:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    env.pop("TRITON_INTERPRET", None)
    for name, hp, pf, rows, warps, stages, split in VARIANTS:
        job = json.dumps([name, hp, pf, rows, warps, stages, split, KERNEL_TYPES, ONES, DIV16, arch])
        res = subprocess.run([python, "-c", AOT_CHILD, job], capture_output=True, text=True, env=env)
        if res.returncode:
            print(f"{name:16s} FAILED {(res.stderr.strip().splitlines() or ['?'])[-1][:300]}")
            continue
        r = json.loads(res.stdout.strip().splitlines()[-1])
        print(f"{name:16s} rows={rows} warps={warps} stages={stages}: regs={r['registers']} spills={r['spills']} "
              f"shared={r['shared']} {r['mma']} cp.async={r['async_copies']}", flush=True)
    return 0


def launch_variant(q, k, v, lse, go, delta, dk, dv, readers, meta, scale, *, hp, pf, rows, warps, stages, split):
    """The variant over ``readers`` (the shipped reduction adds split tiles' slots)."""
    import torch

    from nsa_triton_sel.kernels import backward as bwd_kernels
    from nsa_triton_sel.plan.tiles import next_pow2

    B, S, G, h, Dk = q.shape
    T, Dv = k.shape[2], v.shape[3]
    width = meta.DK1 + meta.BLOCK_DV
    ws = torch.empty((max(readers.slots, 1), meta.KV_BLOCK_N, width), dtype=torch.float32, device=q.device)
    HP = next_pow2(h) if hp and next_pow2(h) <= rows else 0
    dkdv_variant_kernel[(readers.chunks.shape[0], 2 if split else 1)](
        q, k, v, go, lse, delta, dk, dv, ws, readers.entries, readers.chunks,
        S, G, h, Dk, Dv, T, readers.n_tiles, scale * 1.4426950408889634, scale,
        *q.stride(), *k.stride(), *v.stride(), *go.stride(), *lse.stride(),
        BLOCK_N=meta.KV_BLOCK_N, ROWS=rows, DK1=meta.DK1, BLOCK_DV=meta.BLOCK_DV, HP=HP, PREFETCH=pf, STEP=rows // HP if HP else rows,
        SPLIT=split, num_warps=warps, num_stages=stages)
    if readers.slots:
        bwd_kernels.sel_bwd_reduce_kernel[(readers.tile_slots.shape[0],)](
            ws, readers.tile_slots, dk, dv, G, T, readers.n_tiles, Dk, Dv, *dk.stride()[:3], *dv.stride()[:3],
            num_warps=4, num_stages=1, **meta.reduce_constexprs())


def measure(T: int, sel: str, rep_ms: int, names: list[str]) -> list[dict]:
    import torch
    import triton.testing as tt

    from bench.probes.dkdv_ceiling import dkdv_inputs

    x = dkdv_inputs(T, sel)
    q, k, v, go, lse, delta, meta, readers, scale = x.q, x.k, x.v, x.go, x.lse, x.delta, x.meta, x.readers, x.scale
    nbytes = x.nbytes
    dk0, dv0 = torch.empty_like(k), torch.empty_like(v)
    x.dkdv(dk0, dv0)
    sink = torch.empty(readers.chunks.shape[0], dtype=torch.float32, device=q.device)
    rows = []

    def row(name, fn, extra):
        ms = tt.do_bench(fn, rep=rep_ms, return_mode="median")
        rows.append({"T": T, "sel": sel, "name": name, "ms": ms, "gbs": nbytes / ms / 1e6, **extra})
        print(f"{T:>6} {sel:>7} {name:>16} {ms:8.3f} ms {nbytes / ms / 1e6:6.0f} GB/s "
              + " ".join(f"{a}={b}" for a, b in extra.items()), flush=True)

    row("shipped", lambda: x.dkdv(dk0, dv0),
        {"rows": meta.ROWS, "warps": meta.kv_warps, "stages": meta.kv_stages, "chunk": readers.chunk})
    row("gather-ceiling", lambda: x.gather(sink), {})
    for name, hp, pf, r, w, s, split in VARIANTS:
        if names and name not in names:
            continue
        dk, dv = torch.empty_like(k), torch.empty_like(v)
        kw = dict(hp=hp, pf=pf, rows=r, warps=w, stages=s, split=split)
        try:
            launch_variant(q, k, v, lse, go, delta, dk, dv, readers, meta, scale, **kw)
        except Exception as exc:  # a variant that does not compile is a finding, not the end of the run
            print(f"{T:>6} {sel:>7} {name:>16} FAILED {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            continue
        err = max(float((dk.float() - dk0.float()).abs().max() / dk0.float().abs().max()),
                  float((dv.float() - dv0.float()).abs().max() / dv0.float().abs().max()))
        same = bool(torch.equal(dk, dk0) and torch.equal(dv, dv0))
        row(name, lambda: launch_variant(q, k, v, lse, go, delta, dk, dv, readers, meta, scale, **kw),
            {"rows": r, "warps": w, "stages": s, "bitwise": same, "rel_err": f"{err:.1e}"})
    torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", default="8192,32768,65536")
    ap.add_argument("--sel", default="random,local")
    ap.add_argument("--only", default="", help="comma-separated variant names")
    ap.add_argument("--rep-ms", type=int, default=100)
    ap.add_argument("--json")
    ap.add_argument("--aot", action="store_true", help="compile the variants for sm_90 (no GPU) and report")
    ap.add_argument("--python", default=sys.executable)
    a = ap.parse_args(argv)
    if a.aot:
        return aot_report(a.python)
    import torch

    if not torch.cuda.is_available():
        print("dkdv_variants needs a CUDA device (or --aot)", file=sys.stderr)
        return 2
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}", flush=True)
    names = [x for x in a.only.split(",") if x]
    rows = []
    for T in [int(x) for x in a.T.split(",")]:
        for sel in a.sel.split(","):
            rows += measure(T, sel, a.rep_ms, names)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
