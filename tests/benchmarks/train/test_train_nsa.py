"""CPU tests of the training benchmark's inputs and conventions (bench/train/train_nsa.py,
bench/train/train_contenders.py); the timings themselves need a GPU."""

from __future__ import annotations

import pytest
import torch

from bench.train import train_contenders as TC
from bench.train import train_nsa


@pytest.mark.parametrize("local", [False, True])
def test_select_blocks_is_the_canonical_selection(local):
    T, G, bs = 300, 4, TC.BS  # 5 blocks, the last partial
    idx = TC.select_blocks(T, G, local=local, gen=torch.Generator().manual_seed(0), device="cpu")
    assert idx.shape == (1, T, G, TC.TOPK) and idx.dtype == torch.int32
    for t in (0, 63, 64, 130, 299):
        cur = t // bs
        for g in range(G):
            row = [b for b in idx[0, t, g].tolist() if b >= 0]
            assert len(row) == len(set(row)) == min(cur + 1, TC.TOPK)  # distinct, every earlier block
            assert max(row) == cur and {0, cur, max(cur - 1, 0)} <= set(row)
    if local:  # tokens of one 64-token chunk share their picks
        assert torch.equal(idx[0, 128].sort().values, idx[0, 191].sort().values)


def test_select_blocks_random_picks_differ_per_token_when_there_is_a_choice():
    T = 64 * 40
    idx = TC.select_blocks(T, 1, local=False, gen=torch.Generator().manual_seed(1), device="cpu")
    a, b = (set(idx[0, t, 0].tolist()) for t in (T - 2, T - 1))
    assert a != b  # 13 random picks out of 37 candidates


def test_xunhaolai_topk_puts_padding_last():
    blocks = torch.tensor([[[[3, -1, 0, 1]], [[-1, 2, -1, 0]]]], dtype=torch.int32)  # [1, T=2, H=1, 4]
    idx = TC.xunhaolai_topk(blocks)
    assert idx.shape == (1, 2, 4) and idx.dtype == torch.int32
    assert idx[0].tolist() == [[3, 1, 0, -1], [2, 0, -1, -1]]


def test_problem_counts_selected_keys_and_flops():
    p = TC.make_problem(200, "random", device="cpu", h=2, d=16)
    lens = (p.ranges[..., 1] - p.ranges[..., 0]).clamp_min(0)
    assert p.keys == int(lens.sum()) and p.keys <= 200 * TC.G * 200
    assert p.flops() == p.keys * 2 * 7 * 2 * 16 and p.flops(backward_only=True) == p.keys * 2 * 5 * 2 * 16


def test_tune_is_parsed():
    assert train_nsa.parse_args(["--tune", '{"kv_warps": 4, "rows": 128}']).tuned == {"kv_warps": 4, "rows": 128}
    assert train_nsa.parse_args([]).tuned is None


@pytest.mark.parametrize("argv, needle", [
    (["--sel", "causal"], "--sel accepts random, local"),
    (["--contenders", "ours,flash"], "--contenders accepts"),
    (["--T", "8k"], "--T must be a comma list"),
    (["--tune", "{kv_warps: 4}"], "--tune must be a JSON object"),
    (["--tune", "[4]"], "--tune must be a JSON object"),
])
def test_bad_arguments(argv, needle, capsys):
    with pytest.raises(SystemExit):
        train_nsa.parse_args(argv)
    assert needle in capsys.readouterr().err
