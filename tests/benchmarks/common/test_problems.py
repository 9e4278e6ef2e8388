"""CPU tests of span layouts of the sweeps."""

from __future__ import annotations

import pytest
import torch

from bench.common import problems


@pytest.mark.parametrize("dist", ["few", "many", "mixed"])
@pytest.mark.parametrize("L", [16, 100, 1024])
def test_span_distributions_sum_to_L_and_are_disjoint(dist, L):
    gen = torch.Generator().manual_seed(1)
    N, T = 64, 4 * L
    lens = problems.span_lengths(dist, N, L, gen)
    assert (lens.sum(-1) == L).all()
    if dist == "many":
        assert lens.shape[1] == 8 and (lens.max(-1).values - lens.min(-1).values <= 1).all()
    if dist == "mixed":
        counts = (lens > 0).sum(-1)
        assert set(counts.tolist()) <= {2, 4, 8} and len(set(counts.tolist())) > 1
    spans = problems.spans_from_lengths(lens, T, gen)
    st, en = spans[..., 0].long(), spans[..., 1].long()
    assert (st >= 0).all() and (en <= T).all() and (en - st == lens).all()
    real = lens > 0
    for r in range(N):  # in order and disjoint
        s, e = st[r][real[r]], en[r][real[r]]
        assert (s[1:] >= e[:-1]).all()
    idx = problems.gather_index(spans, L)
    assert idx.shape == (N, L) and (idx[:, 1:] != idx[:, :-1]).all()
    assert int(idx.min()) >= 0 and int(idx.max()) < T


def test_many_spans_are_scattered_not_packed():
    gen = torch.Generator().manual_seed(0)
    spans = problems.spans_from_lengths(problems.span_lengths("many", 256, 64, gen), 256, gen)
    assert (spans[:, -1, 1] - spans[:, 0, 0] > 64).float().mean() > 0.9


def test_decode_blocks():
    gen = torch.Generator().manual_seed(0)
    r = problems.decode_lengths(8, 256, 64, 1024, gen)
    assert r.shape == (8, 4, 2) and (r[..., 0] % 64 == 0).all() and (r[..., 1] - r[..., 0] == 64).all()
    assert all(len(set(row[:, 0].tolist())) == 4 for row in r)
    with pytest.raises(ValueError, match="multiple of l_sel"):
        problems.decode_lengths(1, 100, 64, 1024, gen)
