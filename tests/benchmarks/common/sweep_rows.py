"""Rows of a benchmark sweep for the CSV and guard tests."""

from __future__ import annotations

from bench.common import accounting

def row(L, ref_ms, tri_ms=None, N=1024, H=8, D=128, copy=3000.0, **kw):
    nbytes = accounting.sel_bytes(N, H, D, D, L, 2)
    tri_ms = ref_ms / 1.5 if tri_ms is None else tri_ms
    r = {"mode": "dense", "dist": "few", "N": N, "H": H, "D": D, "Dv": D, "L": L, "streams": 1, "dtype": "fp16",
         "tri_ms": tri_ms, "ref_ms": ref_ms, "mae": 1e-4, "copy_gbs": copy, "status": "ok", "gpu": "g"}
    r["tri_gbs"], r["ref_gbs"] = nbytes / tri_ms / 1e6, nbytes / ref_ms / 1e6
    r.update(kw)
    return r
