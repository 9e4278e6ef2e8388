"""The input contract: every bad input is refused with a message that names the
argument (and, for values, the offending index); the value check is vectorised."""

from __future__ import annotations

import re

import pytest
import torch

from nsa_triton_sel.contract import (
    block_indices_to_ranges,
    check_qkv,
    check_ranges,
)
from nsa_triton_sel.reference import oracle, packed_sdpa
from nsa_triton_sel.testing import make_problem

B, S, G, H, DK, DV, T, N = 2, 3, 2, 4, 16, 8, 40, 3


def _qkv(dtype=torch.float16, **shapes):
    """Valid q, k, v of the sizes above; ``shapes`` overrides a tensor's shape."""
    sh = {"q": (B, S, G, H, DK), "k": (B, G, T, DK), "v": (B, G, T, DV)} | shapes
    return tuple(torch.randn(*sh[n]).to(dtype) for n in ("q", "k", "v"))


def _ranges(dtype=torch.int32):
    """Valid ranges: span 0 = [0, 5), span 1 = [10, 12), span 2 = padding [7, 7)."""
    r = torch.tensor([[0, 5], [10, 12], [7, 7]], dtype=dtype)
    return r.expand(B, S, G, N, 2).clone()


def _dims():
    q, k, v = _qkv()
    return check_qkv(q, k, v)


# ----------------------------------------------------------------------------- q, k, v


def test_valid_inputs_pass_and_report_sizes():
    q, k, v = _qkv()
    dims = check_qkv(q, k, v)
    assert tuple(dims) == (B, S, G, H, DK, T, DV)
    assert dims.rows == B * S * G
    check_ranges(_ranges(), dims, q.device)


def test_any_strides_are_accepted():
    q, k, v = _qkv()
    qs = q.transpose(1, 2).contiguous().transpose(1, 2)
    ks = torch.randn(B, G, DK, T).half().transpose(2, 3)
    assert not qs.is_contiguous() and not ks.is_contiguous()
    check_qkv(qs, ks, v)


@pytest.mark.parametrize(
    "name, shape",
    [("q", (B, S, G, DK)), ("k", (B, G, T)), ("v", (B, G, T, DV, 1))],
)
def test_wrong_rank(name, shape):
    q, k, v = _qkv(**{name: shape})
    with pytest.raises(ValueError, match=rf"^{name} must have \d dimensions \[") as e:
        check_qkv(q, k, v)
    assert "got" in str(e.value)


@pytest.mark.parametrize(
    "name, shape, names",
    [
        ("k", (B + 1, G, T, DK), "k"),  # batch mismatch
        ("k", (B, G + 1, T, DK), "k"),  # group mismatch
        ("v", (B, G, T + 1, DV), "v"),  # T mismatch between k and v
        ("v", (B, G + 1, T, DV), "v"),  # group mismatch on v
    ],
)
def test_mismatched_batch_group_sizes(name, shape, names):
    q, k, v = _qkv(**{name: shape})
    with pytest.raises(ValueError, match=rf"^{names} has shape \[{', '.join(map(str, shape))}\]"):
        check_qkv(q, k, v)


def test_dk_mismatch_names_both_tensors():
    q, k, v = _qkv(k=(B, G, T, DK + 8))
    with pytest.raises(ValueError, match=rf"k has head dim Dk={DK + 8}.*q has Dk={DK}"):
        check_qkv(q, k, v)


def test_empty_dimension_is_refused():
    q, k, v = _qkv(q=(B, 0, G, H, DK))
    with pytest.raises(ValueError, match="q .* no empty dimension"):
        check_qkv(q, k, v)


@pytest.mark.parametrize("bad", [torch.float64, torch.int32, torch.float32])
def test_unsupported_dtype_names_argument_and_accepted(bad):
    q, k, v = _qkv()
    with pytest.raises(TypeError, match=r"^v has dtype torch\.\w+; accepted: float16, bfloat16$"):
        check_qkv(q, k, v.to(bad))


def test_fp32_only_on_reference_paths():
    q, k, v = _qkv(torch.float32)
    check_qkv(q, k, v, allow_fp32=True)
    with pytest.raises(TypeError, match="q has dtype torch.float32"):
        check_qkv(q, k, v)
    check_qkv(q.double(), k.double(), v.double(), allow_fp32=True)  # the float64 oracle takes float64
    with pytest.raises(TypeError, match="accepted: float16, bfloat16, float32, float64"):
        check_qkv(q.to(torch.int32), k, v, allow_fp32=True)


def test_mixed_dtypes_are_refused():
    q, k, v = _qkv()
    with pytest.raises(TypeError, match=r"q, k and v must share one dtype.*k=torch\.bfloat16"):
        check_qkv(q, k.bfloat16(), v)


def test_not_a_tensor():
    q, k, v = _qkv()
    with pytest.raises(TypeError, match="^k must be a torch.Tensor, got list"):
        check_qkv(q, k.tolist(), v)


def test_tensors_on_different_devices():
    # The meta device stands in for a second device on a CPU-only machine.
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"one device.*k on meta"):
        check_qkv(q, k.to("meta"), v)


# ----------------------------------------------------------------------------- ranges


def test_ranges_on_another_device_is_refused_even_without_validation():
    with pytest.raises(ValueError, match="^ranges is on meta but q, k and v are on cpu"):
        check_ranges(_ranges().to("meta"), _dims(), torch.device("cpu"), validate=False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bool])
def test_non_integer_ranges(dtype):
    with pytest.raises(TypeError, match=rf"^ranges must be an integer tensor .*got {dtype}"):
        check_ranges(_ranges().to(dtype), _dims(), torch.device("cpu"), validate=False)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16])
def test_integer_ranges_of_any_width(dtype):
    check_ranges(_ranges(dtype), _dims(), torch.device("cpu"))


@pytest.mark.parametrize(
    "shape",
    [(B, S, G, N), (B + 1, S, G, N, 2), (B, S + 1, G, N, 2), (B, S, G + 1, N, 2), (B, S, G, N, 3)],
)
def test_ranges_wrong_rank_or_shape(shape):
    r = torch.zeros(shape, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"^ranges (must have 5 dimensions|has shape)"):
        check_ranges(r, _dims(), torch.device("cpu"))


def test_ranges_not_a_tensor():
    with pytest.raises(TypeError, match="^ranges must be a torch.Tensor"):
        check_ranges([[0, 1]], _dims(), torch.device("cpu"))


def _bad(span, value, at=(1, 2, 0)):
    """Valid ranges with ``ranges[at][span] = value``."""
    r = _ranges()
    r[at + (span,)] = torch.tensor(value, dtype=r.dtype)
    return r


@pytest.mark.parametrize(
    "span, value, what",
    [
        (0, [-1, 5], "start < 0"),
        (1, [12, 10], "start > end"),
        (1, [10, T + 1], "end > T"),
        (2, [-3, -3], "start < 0"),  # padding must still be in range
    ],
)
def test_bad_span_values_name_argument_index_and_rule(span, value, what):
    with pytest.raises(ValueError) as e:
        check_ranges(_bad(span, value), _dims(), torch.device("cpu"))
    msg = str(e.value)
    assert msg.startswith(f"ranges[b=1, s=2, g=0, span={span}] = {value}: {what}"), msg
    assert f"0 <= start <= end <= T (T={T})" in msg  # what is accepted


@pytest.mark.parametrize(
    "value, other",
    [
        ([3, 11], 0),  # overlaps span 0 [0, 5) and span 1 [10, 12): reported against span 0
        ([11, 20], 1),  # starts inside span 1
        ([0, 5], 0),  # duplicate of span 0
        ([1, 2], 0),  # nested in span 0
    ],
)
def test_overlapping_spans(value, other):
    with pytest.raises(ValueError) as e:
        check_ranges(_bad(2, value, at=(0, 1, 1)), _dims(), torch.device("cpu"))
    msg = str(e.value)
    assert msg.startswith("ranges[b=0, s=1, g=1]: spans "), msg
    assert "overlap" in msg and "disjoint" in msg
    spans = sorted(int(i) for i in re.findall(r"spans (\d+) .* and (\d+) ", msg)[0])
    assert spans == sorted([2, other])


def test_touching_spans_and_padding_inside_a_span_are_fine():
    r = _ranges()
    r[..., 1, :] = torch.tensor([5, 9], dtype=r.dtype)  # touches span 0 at 5
    r[..., 2, :] = torch.tensor([2, 2], dtype=r.dtype)  # padding that sits inside span 0
    check_ranges(r, _dims(), torch.device("cpu"))


def test_first_offending_row_is_reported():
    r = _ranges()
    r[1, 0, 1, 0] = torch.tensor([-2, 1], dtype=r.dtype)
    r[1, 2, 0, 0] = torch.tensor([-1, 1], dtype=r.dtype)
    with pytest.raises(ValueError, match=r"^ranges\[b=1, s=0, g=1, span=0\] = \[-2, 1\]"):
        check_ranges(r, _dims(), torch.device("cpu"))


def test_validate_false_skips_value_checks_only():
    bad = _bad(1, [12, 10])
    check_ranges(bad, _dims(), torch.device("cpu"), validate=False)
    with pytest.raises(TypeError):
        check_ranges(bad.float(), _dims(), torch.device("cpu"), validate=False)


def test_reference_paths_enforce_the_contract():
    p = make_problem(B=1, S=2, G=1, h=2, Dk=8, Dv=8, T=16, n=2, dtype=torch.float32)
    bad = p.ranges.clone()
    bad[0, 1, 0, 0] = torch.tensor([3, 17], dtype=bad.dtype)
    for fn in (oracle, packed_sdpa):
        with pytest.raises(ValueError, match=r"ranges\[b=0, s=1, g=0, span=0\].*end > T"):
            fn(p.q, p.k, p.v, bad)
        with pytest.raises(TypeError, match="^k has dtype torch.int32"):
            fn(p.q, p.k.to(torch.int32), p.v, p.ranges)
        with pytest.raises(TypeError, match=r"^q, k and v must share one dtype.*k=torch\.float64"):
            fn(p.q, p.k.double(), p.v, p.ranges)


@pytest.mark.parametrize("rows_S", [2, 64])
def test_value_check_is_one_host_sync_whatever_the_row_count(host_syncs, rows_S):
    # A Python loop over rows or spans would show up as calls that grow with S.
    p = make_problem(B=2, S=rows_S, G=2, h=1, Dk=8, Dv=8, T=300, n=5, dtype=torch.float16)
    dims = check_qkv(p.q, p.k, p.v)
    host_syncs.clear()
    check_ranges(p.ranges, dims, p.q.device)
    assert host_syncs == ["tolist"]
    host_syncs.clear()
    check_ranges(p.ranges, dims, p.q.device, validate=False)
    assert host_syncs == []


# ----------------------------------------------------------------------------- block indices


def _blocks_by_hand(idx, block_size, T, pos):
    """Loop version of the conversion, for small cases: [B, S, G, n, 2] int lists."""
    Bb, Ss, Gg, n = idx.shape
    out = torch.zeros(Bb, Ss, Gg, n, 2, dtype=torch.int64)
    for b in range(Bb):
        for s in range(Ss):
            limit = min(int(pos[b if pos.shape[0] > 1 else 0, s]) + 1, T)
            for g in range(Gg):
                for i in range(n):
                    blk = int(idx[b, s, g, i])
                    if blk < 0:
                        continue
                    st, en = blk * block_size, min((blk + 1) * block_size, limit)
                    if en > st:
                        out[b, s, g, i] = torch.tensor([st, en])
    return out


def _random_block_indices(Bb, Ss, Gg, n, n_blocks, gen):
    """Distinct block ids per row, about a third replaced by -1."""
    ids = torch.rand(Bb, Ss, Gg, n_blocks, generator=gen).argsort(-1)[..., :n]
    drop = torch.rand(Bb, Ss, Gg, n, generator=gen) < 0.3
    return torch.where(drop, torch.full_like(ids, -1), ids)


def test_block_indices_causal_clamp_partial_block_and_padding():
    # T = 10 with block_size 4: blocks [0,4) [4,8) [8,10) (partial last block).
    idx = torch.tensor([[[[0, 1, 2, -1]]] * 1] * 1).expand(1, 10, 1, 4).clone()
    r = block_indices_to_ranges(idx, 4, 10)
    assert r.dtype == torch.int32 and r.shape == (1, 10, 1, 4, 2)
    assert r[0, 0, 0].tolist() == [[0, 1], [0, 0], [0, 0], [0, 0]]  # t=0 sees key 0 only
    assert r[0, 5, 0].tolist() == [[0, 4], [4, 6], [0, 0], [0, 0]]  # block 2 is in the future
    assert r[0, 9, 0].tolist() == [[0, 4], [4, 8], [8, 10], [0, 0]]  # partial last block


def test_block_indices_match_a_loop_and_respect_positions(seed):
    gen = torch.Generator().manual_seed(seed)
    Bb, Ss, Gg, n, bs, Tt = 2, 7, 3, 4, 16, 150  # 150 is not a multiple of 16
    n_blocks = -(-Tt // bs)
    idx = _random_block_indices(Bb, Ss, Gg, n, n_blocks, gen)
    per_batch = torch.randint(0, Tt, (Bb, Ss), generator=gen)
    dims = check_qkv(*_qkv(q=(Bb, Ss, Gg, 1, 8), k=(Bb, Gg, Tt, 8), v=(Bb, Gg, Tt, 8)))
    for positions in (None, torch.tensor([0, 15, 16, 17, 100, 149, 400]), per_batch):
        pos = torch.arange(Ss).view(1, Ss) if positions is None else positions.view(-1, Ss)
        got = block_indices_to_ranges(idx, bs, Tt, positions)
        assert torch.equal(got.long(), _blocks_by_hand(idx, bs, Tt, pos))
        check_ranges(got, dims, got.device)  # distinct blocks give disjoint spans


def test_block_indices_give_causal_block_sparse_attention(seed):
    # End to end: the oracle over converted ranges equals dense attention with a
    # mask "key's block is selected and key <= t", built independently here.
    gen = torch.Generator().manual_seed(seed)
    Bb, Ss, Gg, h, D, n, bs, Tt = 1, 9, 2, 2, 8, 3, 4, 9
    idx = _random_block_indices(Bb, Ss, Gg, n, -(-Tt // bs), gen)
    q = torch.randn(Bb, Ss, Gg, h, D, generator=gen, dtype=torch.float64).float()
    k = torch.randn(Bb, Gg, Tt, D, generator=gen, dtype=torch.float64).float()
    v = torch.randn(Bb, Gg, Tt, D, generator=gen, dtype=torch.float64).float()
    pos = torch.arange(Tt - Ss, Tt)  # the last Ss positions, as in a prefill chunk
    out = oracle(q, k, v, block_indices_to_ranges(idx, bs, Tt, pos))
    key = torch.arange(Tt)
    sel = (key // bs == idx[..., None]).any(-2)  # [B, S, G, T]
    sel &= key <= pos.view(1, Ss, 1, 1)
    scores = torch.einsum("bsghd,bgtd->bsght", q.double(), k.double()) / D**0.5
    scores = scores.masked_fill(~sel[:, :, :, None, :], float("-inf"))
    p = torch.softmax(scores, -1).nan_to_num(0.0)  # rows with no key -> zeros
    want = torch.einsum("bsght,bgtd->bsghd", p, v.double())
    assert torch.allclose(out, want, atol=1e-12)


def test_block_indices_decode_position():
    idx = torch.tensor([[[[3, 0, -1]]]])  # B=1, S=1, G=1, n=3
    r = block_indices_to_ranges(idx, 64, 200, torch.tensor([199]))
    assert r[0, 0, 0].tolist() == [[192, 200], [0, 64], [0, 0]]
    r = block_indices_to_ranges(idx, 64, 200, torch.tensor([[130]]))
    assert r[0, 0, 0].tolist() == [[0, 0], [0, 64], [0, 0]]


@pytest.mark.parametrize(
    "kwargs, exc, pattern",
    [
        (dict(block_indices=[[0]]), TypeError, r"^block_indices must be a torch.Tensor"),
        (dict(block_indices=torch.zeros(1, 2, 1, dtype=torch.int64)), ValueError,
         r"^block_indices must have 4 dimensions"),
        (dict(block_indices=torch.zeros(1, 2, 1, 2)), TypeError,
         r"^block_indices must be an integer tensor"),
        (dict(block_size=0), ValueError, r"^block_size must be a positive int, got int 0"),
        (dict(block_size=4.0), ValueError, r"^block_size must be a positive int, got float 4.0"),
        (dict(block_size=True), ValueError, r"^block_size must be a positive int"),
        (dict(T=-1), ValueError, r"^T \(the number of keys\) must be an int >= 0, got -1"),
        (dict(positions=[0, 1]), TypeError, r"^positions must be a torch.Tensor"),
        (dict(positions=torch.tensor([0.0, 1.0])), TypeError, r"^positions must be an integer tensor"),
        (dict(positions=torch.tensor([0, 1, 2])), ValueError,
         r"^positions has shape \[3\]; accepted: \[S\] or \[B, S\]"),
        (dict(positions=torch.tensor([0, 1]).to("meta")), ValueError,
         r"^positions is on meta but block_indices is on cpu"),
        (dict(positions=torch.tensor([0, -4])), ValueError,
         r"^positions\[1\] = -4: a query position must be >= 0"),
        (dict(positions=torch.tensor([[0, 1], [2, -1]])), ValueError, r"^positions\[1, 1\] = -1"),
    ],
)
def test_block_indices_argument_errors(kwargs, exc, pattern):
    args = dict(block_indices=torch.tensor([[[[0, -1]], [[1, 0]]]] * 2), block_size=4, T=8, positions=None)
    args |= kwargs
    with pytest.raises(exc, match=pattern):
        block_indices_to_ranges(**args)


@pytest.mark.parametrize(
    "row, pattern",
    [
        ([0, -2, 1], r"^block_indices\[b=0, s=1, g=0, slot=1\] = -2: out of range; accepted: -1"),
        ([0, 3, 1], r"^block_indices\[b=0, s=1, g=0, slot=1\] = 3: out of range.*ceil\(T / block_size\) = 3"),
        ([2, 0, 2], r"^block_indices\[b=0, s=1, g=0\] = \[2, 0, 2\] repeats a block"),
    ],
)
def test_block_indices_value_errors(row, pattern):
    idx = torch.tensor([[[[0, -1, -1]], [[0, 1, -1]]]])
    idx[0, 1, 0] = torch.tensor(row)
    with pytest.raises(ValueError, match=pattern):
        block_indices_to_ranges(idx, 4, 10)
    block_indices_to_ranges(idx, 4, 10, validate=False)  # no check, no error


def test_block_indices_repeated_padding_is_fine():
    idx = torch.tensor([[[[-1, -1, 1, -1]]]])
    assert block_indices_to_ranges(idx, 4, 10, torch.tensor([9]))[0, 0, 0, 2].tolist() == [4, 8]


@pytest.mark.parametrize("rows_S", [2, 64])
def test_block_conversion_is_one_host_sync(host_syncs, rows_S):
    gen = torch.Generator().manual_seed(rows_S)
    idx = _random_block_indices(2, rows_S, 2, 4, 10, gen)
    host_syncs.clear()
    block_indices_to_ranges(idx, 16, 150, torch.arange(rows_S))
    assert host_syncs == ["tolist"]
    host_syncs.clear()
    block_indices_to_ranges(idx, 16, 150, torch.arange(rows_S), validate=False)
    assert host_syncs == []
