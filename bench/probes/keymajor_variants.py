"""The key-major forward's launch configurations and its time split (reader list / partials / merge), on the GPU.

    python -m bench.probes.keymajor_variants [--T 32768] [--HQ 32] [--H 32]

One NSA problem (bf16, D = 128, 16 random causal blocks of 64); times ``direct.sel_attn_keymajor`` over warps x
stages x pairs per step x key tile, and the reader list alone, with ``triton.testing.do_bench`` (median, L2
flushed); the token-major forward (``direct.sel_attn_blocks``) on the same inputs for reference.
"""

from __future__ import annotations

import argparse
import itertools
import sys

import torch
import triton.testing as tt

from nsa_triton_sel.kernels import direct
from nsa_triton_sel.testing import nsa_problem


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, default=32768)
    ap.add_argument("--HQ", type=int, default=32)
    ap.add_argument("--H", type=int, default=32)
    a = ap.parse_args(argv)
    h = a.HQ // a.H
    p = nsa_problem(a.T, G=a.H, h=h)
    q, k, v, blocks = p["q"], p["k"], p["v"], p["blocks"]

    def bench(fn):
        return float(tt.do_bench(fn, warmup=50, rep=200, return_mode="median"))

    print(f"T={a.T} HQ={a.HQ} H={a.H} h={h} {torch.cuda.get_device_name()}", flush=True)
    base = bench(lambda: direct.sel_attn_blocks(q, k, v, blocks, 64, return_lse=True))
    print(f"token-major forward: {base:.3f} ms", flush=True)
    ref = direct.sel_attn_blocks(q, k, v, blocks, 64).float()
    from nsa_triton_sel.contract import block_indices_to_ranges
    from nsa_triton_sel.kernels.readers import keymajor_reader_list
    from nsa_triton_sel import plan as P
    from nsa_triton_sel.device import device_of

    B, S, G = q.shape[:3]
    launch = P.keymajor(B, S, G, h, 128, 128, a.T, 16, dev=device_of(q.device), span_len=64, aligned=True)
    ranges = block_indices_to_ranges(blocks, 64, a.T, validate=False)
    gpp = launch.meta.groups_per_pass
    rl = bench(lambda: keymajor_reader_list(ranges[:, :, :gpp], a.T, launch.meta))
    conv = bench(lambda: block_indices_to_ranges(blocks, 64, a.T, validate=False))
    print(f"key-major default {launch.meta}: reader list {rl:.3f} ms per pass of {gpp} KV heads "
          f"({-(-G // gpp)} passes), block indices -> ranges {conv:.3f} ms", flush=True)
    results = []
    for warps, stages, pairs, bn in itertools.product((4, 8), (1, 2, 3), (32, 64), (64,)):
        tune = dict(num_warps=warps, num_stages=stages, pairs=pairs, block_n=bn)
        try:
            out = direct.sel_attn_keymajor(q, k, v, blocks, block_size=64, **tune)
            err = (out.float() - ref).abs().max().item()
            ms = bench(lambda: direct.sel_attn_keymajor(q, k, v, blocks, block_size=64, return_lse=True, **tune))
        except Exception as exc:  # noqa: BLE001 - a configuration that does not compile is a row
            print(f"{tune}: {type(exc).__name__}: {str(exc)[:120]}", flush=True)
            continue
        results.append((ms, tune))
        print(f"{tune}: {ms:.3f} ms ({base / ms:.2f}x token-major), max diff {err:.2e}", flush=True)
    best = min(results, key=lambda r: r[0])
    print(f"best: {best[1]} {best[0]:.3f} ms ({base / best[0]:.2f}x token-major)", flush=True)
    for gpp in (G, 8, 4, 2, 1):  # passes over the KV heads: the workspace against the reader lists' cost
        if gpp > G:
            continue
        tune = dict(best[1], groups_per_pass=gpp)
        try:
            ms = bench(lambda: direct.sel_attn_keymajor(q, k, v, blocks, block_size=64, return_lse=True, **tune))
        except Exception as exc:  # noqa: BLE001
            print(f"groups_per_pass={gpp}: {type(exc).__name__}: {str(exc)[:120]}", flush=True)
            continue
        ws = B * S * gpp * launch.meta.per_row * h * 129 * 4 / 2**30
        print(f"groups_per_pass={gpp} ({-(-G // gpp)} passes, workspace {ws:.2f} GiB): {ms:.3f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
