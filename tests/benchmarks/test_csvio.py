"""CPU tests of the CSV schema."""

from __future__ import annotations

import csv

import pytest

from bench import accounting, csvio


def _row(L, ref_ms, tri_ms=None, N=1024, H=8, D=128, copy=3000.0, **kw):
    nbytes = accounting.sel_bytes(N, H, D, D, L, 2)
    tri_ms = ref_ms / 1.5 if tri_ms is None else tri_ms
    r = {"mode": "dense", "dist": "few", "N": N, "H": H, "D": D, "Dv": D, "L": L, "streams": 1, "dtype": "fp16",
         "tri_ms": tri_ms, "ref_ms": ref_ms, "mae": 1e-4, "copy_gbs": copy, "status": "ok", "gpu": "g"}
    r["tri_gbs"], r["ref_gbs"] = nbytes / tri_ms / 1e6, nbytes / ref_ms / 1e6
    r.update(kw)
    return r


def test_csv_has_the_seed_columns_first_then_ours(tmp_path):
    p = tmp_path / "x.csv"
    csvio.write_csv(p, [_row(64, 0.1)])
    csvio.write_csv(p, [_row(128, 0.2)])  # appends without a second header
    with p.open() as fh:
        rows = list(csv.reader(fh))
    assert rows[0][:12] == ["mode", "N", "H", "D", "Dv", "L", "nspans", "streams", "tri_ms", "ref_ms", "speedup",
                            "mae"]
    for col in ("tri_gbs", "ref_gbs", "tri_tflops", "ref_tflops", "tri_pct_bw", "ref_pct_bw", "suspect",
                "gpu", "triton", "torch", "cuda", "copy_gbs"):
        assert col in rows[0]
    assert len(rows) == 3 and rows[1][5] == "64" and rows[2][5] == "128"
    bad = tmp_path / "old.csv"
    bad.write_text("mode,N,H\n")
    with pytest.raises(ValueError, match="different header"):
        csvio.write_csv(bad, [_row(64, 0.1)])
