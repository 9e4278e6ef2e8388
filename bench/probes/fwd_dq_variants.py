"""How close are the token-major forward and dq kernels to what their access pattern allows?

Two stripped kernels over block indices (the canonical NSA problem of ``train_contenders.make_problem``):
a forward (online softmax) and a dq (P from the LSE, delta given), each loading the selected K/V tiles either
through raw pointers without masks or through a host tensor descriptor (TMA; Triton >= 3.4, sm_90), over a
grid of key-tile sizes, warps and stages.  The causal clamp is a score mask, as in the library.  Each variant is
checked against the library's own kernels on the same inputs, then timed (CUDA events, median) beside the
library's ``sel_fwd_kernel`` / ``sel_bwd_dq_kernel``.  The best stripped variant is the ceiling of this program
shape (one (token, group) per program, every selected tile read once per token).

``--tokens`` also times forward + backward with the multi-token forward and dq kernels (neighbouring tokens
share a program and the tiles they all selected) against the single-token ones on the same selection.

    python -m bench.probes.fwd_dq_variants [--T 32768] [--sel random] [--quick] [--tokens]
"""

from __future__ import annotations

import argparse
import itertools
import sys

import torch
import triton
import triton.language as tl

from bench.train import train_contenders as TC
from bench.train.train_nsa import slow_bench

try:
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # Triton < 3.4
    TensorDescriptor = None


@triton.jit
def _kv_tile(K, KD, g, pos, sk_g, sk_t, BN: tl.constexpr, D: tl.constexpr, TMA: tl.constexpr):
    if TMA:
        return KD.load([g, pos, 0]).reshape(BN, D)
    offs_n = tl.arange(0, BN)
    offs_d = tl.arange(0, D)
    return tl.load(K + g.to(tl.int64) * sk_g + (tl.maximum(pos, 0) + offs_n).to(tl.int64)[:, None] * sk_t
                   + offs_d[None, :])


@triton.jit
def _selected_tile(blk_row, j, s, K, V, KD, VD, g, sk_g, sk_t, sv_g, sv_t,
                   BS: tl.constexpr, BN: tl.constexpr, D: tl.constexpr, TMA: tl.constexpr):
    """Flattened tile ``j`` of the row's selected blocks: its K and V tiles ``[BN, D]`` and which keys count
    (the block exists and the key is not after query ``s``)."""
    SUB: tl.constexpr = BS // BN
    blk = tl.load(blk_row + j // SUB)
    pos = blk * BS + (j % SUB) * BN
    ok = (blk >= 0) & ((pos + tl.arange(0, BN)) <= s)  # [BN]
    return (_kv_tile(K, KD, g, pos, sk_g, sk_t, BN, D, TMA), _kv_tile(V, VD, g, pos, sv_g, sv_t, BN, D, TMA), ok)


@triton.jit
def probe_fwd(Q, K, V, KD, VD, O, LSE, BLK, S, n_sel, qk_scale,
              sq_s, sq_g, sq_h, sk_g, sk_t, sv_g, sv_t, so_s, so_g, so_h, sb_s, sb_g,
              H: tl.constexpr, BS: tl.constexpr, BN: tl.constexpr, D: tl.constexpr, TMA: tl.constexpr,
              ZERO_V: tl.constexpr):
    s = tl.program_id(0)
    g = tl.program_id(1)
    offs_h = tl.arange(0, H)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + s.to(tl.int64) * sq_s + g * sq_g + offs_h[:, None] * sq_h + offs_d[None, :])
    m_i = tl.full((H,), float("-inf"), tl.float32)
    l_i = tl.zeros((H,), tl.float32)
    acc = tl.zeros((H, D), tl.float32)
    SUB: tl.constexpr = BS // BN
    blk_row = BLK + s.to(tl.int64) * sb_s + g * sb_g
    for j in range(0, n_sel * SUB):
        k, v, ok = _selected_tile(blk_row, j, s, K, V, KD, VD, g, sk_g, sk_t, sv_g, sv_t, BS, BN, D, TMA)
        if ZERO_V:
            v = tl.where(ok[:, None], v, 0.0)
        qk = tl.where(ok[None, :], tl.dot(q, tl.trans(k)) * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_use)
        p = tl.exp2(qk - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    inv = 1.0 / tl.where(l_i == 0.0, 1.0, l_i)
    tl.store(O + s.to(tl.int64) * so_s + g * so_g + offs_h[:, None] * so_h + offs_d[None, :],
             (acc * inv[:, None]).to(O.dtype.element_ty))
    tl.store(LSE + (s.to(tl.int64) * tl.num_programs(1) + g) * H + offs_h,
             (m_i + tl.log2(tl.where(l_i == 0.0, 1.0, l_i))) * 0.6931471805599453)


@triton.jit
def probe_dq(Q, K, V, KD, VD, DO, LSE, DELTA, DQ, BLK, S, n_sel, qk_scale, scale,
             sq_s, sq_g, sq_h, sk_g, sk_t, sv_g, sv_t, sb_s, sb_g,
             H: tl.constexpr, BS: tl.constexpr, BN: tl.constexpr, D: tl.constexpr, TMA: tl.constexpr):
    s = tl.program_id(0)
    g = tl.program_id(1)
    offs_h = tl.arange(0, H)
    offs_d = tl.arange(0, D)
    row = s.to(tl.int64) * sq_s + g * sq_g + offs_h[:, None] * sq_h + offs_d[None, :]
    q = tl.load(Q + row)
    do = tl.load(DO + row)
    r = (s.to(tl.int64) * tl.num_programs(1) + g) * H + offs_h
    lse2 = tl.load(LSE + r) * 1.4426950408889634
    delta = tl.load(DELTA + r)
    dq = tl.zeros((H, D), tl.float32)
    SUB: tl.constexpr = BS // BN
    blk_row = BLK + s.to(tl.int64) * sb_s + g * sb_g
    for j in range(0, n_sel * SUB):
        k, v, ok = _selected_tile(blk_row, j, s, K, V, KD, VD, g, sk_g, sk_t, sv_g, sv_t, BS, BN, D, TMA)
        p = tl.where(ok[None, :], tl.exp2(tl.dot(q, tl.trans(k)) * qk_scale - lse2[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v))
        ds = (p * (dp - delta[:, None])).to(k.dtype)
        dq += tl.dot(ds, k)
    tl.store(DQ + row, (dq * scale).to(DQ.dtype.element_ty))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, nargs="+", default=[32768])
    ap.add_argument("--sel", default="random", choices=("random", "local"))
    ap.add_argument("--quick", action="store_true", help="a few configurations only")
    ap.add_argument("--tokens", action="store_true", help="multi-token against single-token kernels, fwd + bwd")
    a = ap.parse_args(argv)
    from nsa_triton_sel.contract import clamp_ranges
    from nsa_triton_sel.kernels import direct, launch as L
    from nsa_triton_sel.plan.backward import backward_meta

    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  triton {triton.__version__}", flush=True)
    for T in a.T:
        p = TC.make_problem(T, a.sel)
        q, k, v = p.q, p.k, p.v
        do = torch.randn_like(q)
        B, S, G, H, D = q.shape
        blocks = p.blocks.to(torch.int32).contiguous()  # [1, S, G, n]
        n_sel = blocks.shape[-1]
        scale = D ** -0.5
        qk_scale = scale * 1.4426950408889634
        out_lib = lambda: direct.sel_attn_blocks(q, k, v, p.blocks, TC.BS, return_lse=True)  # noqa: E731
        o_ref, lse_ref = out_lib()
        ranges = clamp_ranges(p.ranges, T)
        meta = backward_meta(h=H, Dk=D, Dv=D, n_spans=ranges.shape[3])
        dq_ref = torch.empty_like(q)
        delta = torch.empty((B, S, G, H), dtype=torch.float32, device=q.device)
        nonfinite = torch.zeros((1,), dtype=torch.int32, device=q.device)
        glse = torch.zeros((), dtype=torch.float32, device=q.device).expand(B, S, G, H)
        lib_dq = lambda: L._launch_dq(q, k, v, ranges, o_ref, lse_ref, do, glse, dq_ref, delta,  # noqa: E731
                                      nonfinite, meta, scale)
        lib_dq()
        t_fwd, t_dq = slow_bench(out_lib, 15), slow_bench(lib_dq, 15)
        if a.tokens:
            for forward in ("ranges", "tokens"):
                c = TC.ours(p, name=forward, forward=forward)
                c.forward().backward(c.grad_out)

                def step(c=c):
                    c.forward().backward(c.grad_out)
                    for x in c.leaves:
                        x.grad = None
                print(f"T={T} {a.sel}: fwd + bwd with the {forward} forward ({c.note}): {slow_bench(step, 7):.3f} ms",
                      flush=True)
            continue
        print(f"T={T} {a.sel}: library sel_fwd (API of direct, incl. host) {t_fwd:.3f} ms, "
              f"sel_bwd_dq kernel {t_dq:.3f} ms", flush=True)
        kd = vd = None
        o = torch.empty_like(q)
        lse = torch.empty((B, S, G, H), dtype=torch.float32, device=q.device)
        dq = torch.empty_like(q)
        args_common = (S, n_sel)
        bns = (32, 64) if a.quick else (16, 32, 64)
        warps = (1, 2) if a.quick else (1, 2, 4)
        stages = (2, 3) if a.quick else (2, 3, 4)
        for tma in (False, True):
            for bn, nw, ns in itertools.product(bns, warps, stages):
                if tma:
                    kd = TensorDescriptor(k[0], shape=[G, T, D], strides=[T * D, D, 1], block_shape=[1, bn, D])
                    vd = TensorDescriptor(v[0], shape=[G, T, D], strides=[T * D, D, 1], block_shape=[1, bn, D])
                else:
                    kd = vd = k  # placeholder pointers, unused
                for zero_v in ((False, True) if bn == 64 and nw == 1 else (False,)):
                    fwd = lambda: probe_fwd[(S, G)](  # noqa: E731
                        q, k, v, kd, vd, o, lse, blocks, *args_common, qk_scale,
                        q.stride(1), q.stride(2), q.stride(3), k.stride(1), k.stride(2), v.stride(1), v.stride(2),
                        o.stride(1), o.stride(2), o.stride(3), blocks.stride(1), blocks.stride(2),
                        H=H, BS=TC.BS, BN=bn, D=D, TMA=tma, ZERO_V=zero_v, num_warps=nw, num_stages=ns)
                    try:
                        fwd()
                        torch.cuda.synchronize()
                        err = (o.float() - o_ref.float()).abs().max().item()
                        errl = (lse - lse_ref).abs().max().item()
                        t = slow_bench(fwd, 15)
                        print(f"  fwd tma={int(tma)} bn={bn:>2} warps={nw} stages={ns} zero_v={int(zero_v)}: "
                              f"{t:7.3f} ms ({t / t_fwd:.3f}x lib)  err o {err:.1e} lse {errl:.1e}", flush=True)
                    except Exception as e:  # noqa: BLE001
                        print(f"  fwd tma={int(tma)} bn={bn} warps={nw} stages={ns}: FAILED {type(e).__name__}: "
                              f"{str(e).splitlines()[0][:160]}", flush=True)
                dqf = lambda: probe_dq[(S, G)](  # noqa: E731
                    q, k, v, kd, vd, do, lse_ref, delta, dq, blocks, *args_common, qk_scale, scale,
                    q.stride(1), q.stride(2), q.stride(3), k.stride(1), k.stride(2), v.stride(1), v.stride(2),
                    blocks.stride(1), blocks.stride(2),
                    H=H, BS=TC.BS, BN=bn, D=D, TMA=tma, num_warps=nw, num_stages=ns)
                try:
                    dqf()
                    torch.cuda.synchronize()
                    err = (dq.float() - dq_ref.float()).abs().max().item() / max(dq_ref.float().abs().max().item(), 1e-9)
                    t = slow_bench(dqf, 15)
                    print(f"  dq  tma={int(tma)} bn={bn:>2} warps={nw} stages={ns}:           "
                          f"{t:7.3f} ms ({t / t_dq:.3f}x lib)  rel err {err:.1e}", flush=True)
                except Exception as e:  # noqa: BLE001
                    print(f"  dq  tma={int(tma)} bn={bn} warps={nw} stages={ns}: FAILED {type(e).__name__}: "
                          f"{str(e).splitlines()[0][:160]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
