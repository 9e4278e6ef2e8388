"""CPU tests of the CSV schema."""

from __future__ import annotations

import csv

import pytest

from sweep_rows import row

from bench.common import csvio


def test_csv_has_the_seed_columns_first_then_ours(tmp_path):
    p = tmp_path / "x.csv"
    csvio.write_csv(p, [row(64, 0.1)])
    csvio.write_csv(p, [row(128, 0.2)])  # appends without a second header
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
        csvio.write_csv(bad, [row(64, 0.1)])
