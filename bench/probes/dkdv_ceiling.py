"""The dk/dv kernel's gathers against their physical ceiling: a kernel that only gathers the same rows.

    python -m bench.probes.dkdv_ceiling [--T 8192,32768,65536] [--sel random,local] [--json out.json]

The canonical NSA problem (``train_contenders.make_problem``), planned as the public call plans it (block indices,
``plan.plan_call``).  After the forward and the dq kernel (which give the LSE, delta and the non-finite flag),
the reader list is built once and two kernels are timed on it (``triton.testing.do_bench``, median, L2 flushed):

- ``sel_bwd_dkdv_kernel`` (with the reduction of split tiles), as the backward launches it;
- ``gather_copy_kernel``: the same grid, chunks, warps and stages, walking the same (entry, head) pairs the same
  way (``ROWS // KV_HP`` whole entries a step, the next step's entries loaded during a step) and loading the same
  q and dO rows, with nothing but a sum to keep the loads alive.

Both move at least ``pairs x (Dk + Dv) x 2`` bytes (each pair's q row and dO row); the table gives each kernel's
rate over those bytes and the dk/dv kernel's rate as a fraction of the gather-copy rate (the ceiling of this
access pattern on this GPU), beside the device-to-device copy bandwidth.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from bench.common import accounting
from bench.train import train_contenders as TC


@triton.jit
def gather_copy_kernel(
    Q, DO, ENTRIES, CHUNKS, OUT, h, Dk, Dv,
    sq_b, sq_s, sq_g, sq_h, sq_d, sdo_b, sdo_s, sdo_g, sdo_h, sdo_d, G, NT,
    ROWS: tl.constexpr, HP: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
):
    """Load the q and dO rows of one dk/dv chunk's (entry, head) pairs as the dk/dv kernel walks them (``ROWS //
    HP`` whole entries a step, the next step's entries loaded during the step) and store their sum."""
    pid = tl.program_id(0)
    chunk = CHUNKS + pid.to(tl.int64) * 4
    tile_id = tl.load(chunk)
    if tile_id < 0:
        return
    e0 = tl.load(chunk + 1)
    e1 = tl.load(chunk + 2)
    bg = tile_id // NT
    b = bg // G
    g = bg % G
    r = tl.arange(0, ROWS)
    offs_k = tl.arange(0, DK)
    offs_v = tl.arange(0, DV)
    acc_q = tl.zeros((ROWS, DK), tl.float32)
    acc_o = tl.zeros((ROWS, DV), tl.float32)
    r_ent = r // HP
    head = r % HP
    ok = (e0 + r_ent < e1) & (head < h)
    tok = tl.load(ENTRIES + (e0 + r_ent) * 2, mask=ok, other=0)
    for e in range(e0, e1, ROWS // HP):
        q_off = b * sq_b + tok.to(tl.int64) * sq_s + g * sq_g + head.to(tl.int64) * sq_h
        do_off = b * sdo_b + tok.to(tl.int64) * sdo_s + g * sdo_g + head.to(tl.int64) * sdo_h
        q = tl.load(Q + q_off[:, None] + offs_k[None, :] * sq_d, mask=ok[:, None] & (offs_k[None, :] < Dk), other=0.0)
        o = tl.load(DO + do_off[:, None] + offs_v[None, :] * sdo_d, mask=ok[:, None] & (offs_v[None, :] < Dv),
                    other=0.0)
        ok_n = (e + ROWS // HP + r_ent < e1) & (head < h)
        tok_n = tl.load(ENTRIES + (e + ROWS // HP + r_ent) * 2, mask=ok_n, other=0)
        acc_q += q.to(tl.float32)
        acc_o += o.to(tl.float32)
        tok = tok_n
        ok = ok_n
    tl.store(OUT + pid, tl.sum(tl.sum(acc_q, 1), 0) + tl.sum(tl.sum(acc_o, 1), 0))


@dataclass
class DkdvInputs:
    """Everything the dk/dv kernel reads for the canonical problem at ``T``, after the forward and the dq kernel (which
    give the LSE, delta and the non-finite flag), with the reader list built once; ``pairs`` (entry, head) pairs move
    at least ``nbytes`` of q and dO rows."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    go: torch.Tensor
    lse: torch.Tensor
    delta: torch.Tensor
    nonfinite: torch.Tensor
    meta: object
    readers: object
    scale: float
    pairs: int
    nbytes: int

    def dkdv(self, dk, dv):
        from nsa_triton_sel.kernels import launch

        launch._launch_dkdv(self.q, self.k, self.v, self.lse, self.go, self.delta, self.nonfinite, dk, dv,
                            self.readers, self.meta, self.scale)

    def gather(self, sink):
        m, ch = self.meta, self.readers.chunks
        _, _, G, h, Dk = self.q.shape
        gather_copy_kernel[(ch.shape[0],)](
            self.q, self.go, self.readers.entries, ch, sink, h, Dk, self.v.shape[3], *self.q.stride(),
            *self.go.stride(), G, self.readers.n_tiles,
            ROWS=m.ROWS, HP=m.KV_HP, DK=m.DK1, DV=m.BLOCK_DV, num_warps=m.kv_warps, num_stages=m.kv_stages)


def dkdv_inputs(T: int, sel: str, **problem) -> DkdvInputs:
    """The canonical NSA problem (``train_contenders.make_problem``, ``problem`` its keywords), planned as the public
    call plans it (block indices, ``plan.plan_call``), up to the dk/dv kernel's inputs."""
    from nsa_triton_sel import plan as P
    from nsa_triton_sel.kernels import launch
    from nsa_triton_sel.kernels.readers import reader_list

    p = TC.make_problem(T, sel, **problem)
    q, k, v, go, ranges = p.q, p.k, p.v, p.grad_out, p.ranges
    pl = P.plan_call(q, k, v, p.blocks, None, per_head=False, tokens=0, span_len=TC.BS, packed=False)
    meta = pl.backward
    scale = q.shape[-1] ** -0.5
    out, lse = launch.forward(pl, q, k, v, p.blocks, None, scale=scale, block_size=TC.BS)
    B, S, G, h, Dk = q.shape
    dq = torch.empty_like(q)
    delta = torch.empty((B, S, G, h), dtype=torch.float32, device=q.device)
    nonfinite = torch.zeros((1,), dtype=torch.int32, device=q.device)
    grad_lse = torch.zeros((), dtype=torch.float32, device=q.device).expand(B, S, G, h)
    launch._launch_dq(q, k, v, ranges, out, lse, go, grad_lse, dq, delta, nonfinite, meta, scale)
    readers = reader_list(ranges, T, meta, per_row=pl.reader_per_row, chunk=pl.reader_chunk)
    ch = readers.chunks
    pairs = int((ch[ch[:, 0] >= 0, 2] - ch[ch[:, 0] >= 0, 1]).sum()) * h
    return DkdvInputs(q, k, v, go, lse, delta, nonfinite, meta, readers, scale, pairs,
                      pairs * (Dk + v.shape[3]) * q.element_size())


def measure(T: int, sel: str, rep_ms: int) -> dict:
    x = dkdv_inputs(T, sel)
    meta, readers = x.meta, x.readers
    if meta.DK2 or not meta.KV_HP:
        raise SystemExit("dkdv_ceiling: Dk must be a power of two (DK2 == 0) and h <= ROWS (the whole-entry walk)")
    dk, dv = torch.empty_like(x.k), torch.empty_like(x.v)
    sink = torch.empty(readers.chunks.shape[0], dtype=torch.float32, device=x.q.device)

    import triton.testing as tt

    t_dkdv = tt.do_bench(lambda: x.dkdv(dk, dv), rep=rep_ms, return_mode="median")
    t_gather = tt.do_bench(lambda: x.gather(sink), rep=rep_ms, return_mode="median")
    pairs, nbytes = x.pairs, x.nbytes
    return {"T": T, "sel": sel, "pairs": pairs, "bytes": nbytes, "dkdv_ms": t_dkdv, "gather_ms": t_gather,
            "dkdv_gbs": nbytes / t_dkdv / 1e6, "gather_gbs": nbytes / t_gather / 1e6, "fraction": t_gather / t_dkdv,
            "rows": meta.ROWS, "warps": meta.kv_warps, "stages": meta.kv_stages, "chunk": readers.chunk}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", default="8192,32768,65536")
    ap.add_argument("--sel", default="random,local")
    ap.add_argument("--rep-ms", type=int, default=200)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("dkdv_ceiling needs a CUDA device", file=sys.stderr)
        return 2
    ceil = accounting.measure_ceilings()
    print(f"{torch.cuda.get_device_name()}, triton {triton.__version__}; device copy {ceil.get('copy_gbs', 0):.0f} GB/s")
    print(f"{'T':>6} {'sel':>7} {'pairs':>10} {'dkdv ms':>8} {'GB/s':>6} {'gather ms':>9} {'GB/s':>6} {'dkdv/gather':>11}")
    rows = []
    for T in [int(x) for x in a.T.split(",")]:
        for sel in a.sel.split(","):
            r = measure(T, sel, a.rep_ms)
            rows.append(r)
            print(f"{T:>6} {sel:>7} {r['pairs']:>10} {r['dkdv_ms']:>8.3f} {r['dkdv_gbs']:>6.0f} {r['gather_ms']:>9.3f} "
                  f"{r['gather_gbs']:>6.0f} {r['fraction']:>10.0%}")
            torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"ceilings": ceil, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
