"""CPU tests of bytes and FLOPs of one call."""

from __future__ import annotations

import math

import pytest

from bench.common import accounting


def test_bytes_and_flops():
    # q + selected K/V + o, each once; 2·H·L·(Dk+Dv) FLOPs per row.
    assert accounting.sel_bytes(N=2, H=4, Dk=64, Dv=32, L=10, elem=2) == 2 * 2 * (4 * 64 + 10 * 96 + 4 * 32)
    assert accounting.sel_flops(N=2, H=4, Dk=64, Dv=32, L=10) == 2 * 2 * 4 * 10 * 96
    gbs, tfl, pct = accounting.rates(1.0, 3_000_000_000, 2_000_000_000_000, copy_gbs=3000.0)
    assert (gbs, tfl, pct) == pytest.approx((3000.0, 2000.0, 100.0))
    assert all(math.isnan(x) for x in accounting.rates(0.0, 1, 1, 1.0))
