"""``arguments.parse``: one validation of every call, so a remembered signature never accepts what a fresh
call rejects (issue 39: after one cached decode call, ``block_size=8.0``, ``block_size=True``, ``scale=True``
were accepted; ``validate="no"`` and ``return_lse="yes"`` were taken as truthy)."""

from __future__ import annotations

import pytest
import torch

from nsa_triton_sel import selection_attention
from nsa_triton_sel.testing import make_problem


def decode_problem():
    return make_problem(B=2, S=1, G=2, h=3, Dk=16, Dv=16, T=100, n=3, seed=4)


BAD = [
    ("block_size", 8.0, ValueError, "block_size must be a positive int, got float 8.0"),
    ("block_size", True, ValueError, "block_size must be a positive int, got bool True"),
    ("block_size", torch.tensor(8), ValueError, "block_size must be a positive int, got Tensor"),
    ("scale", True, TypeError, "scale must be a real number"),
    ("scale", "0.5", TypeError, "scale must be a real number"),
    ("scale", 1e38, ValueError, r"scale=1e\+38 is too large"),
    ("validate", "no", TypeError, "validate must be True or False, got str 'no'"),
    ("validate", 0, TypeError, "validate must be True or False, got int 0"),
    ("return_lse", "yes", TypeError, "return_lse must be True or False, got str 'yes'"),
    ("backend", "cuda", ValueError, "backend='cuda'; accepted: auto, triton, sdpa, reference, oracle"),
]


@pytest.mark.parametrize("name, value, error, message", BAD, ids=[f"{b[0]}={b[1]!r}" for b in BAD])
@pytest.mark.parametrize("warm", [False, True], ids=["fresh", "after-a-remembered-call"])
def test_a_bad_option_is_refused_on_a_fresh_and_on_a_remembered_signature(name, value, error, message, warm):
    p = decode_problem()
    blocks = torch.tensor([0, -1, 1]).expand(2, 1, 2, 3).contiguous()
    kw = dict(block_indices=blocks, block_size=64, validate=False)
    if warm:
        for _ in range(3):  # the signature is remembered (structure, route, plan)
            selection_attention(p.q, p.k, p.v, **kw)
    with pytest.raises(error, match=message):
        selection_attention(p.q, p.k, p.v, **{**kw, name: value})


def test_options_of_the_right_type_pass():
    p = decode_problem()
    out, lse = selection_attention(p.q, p.k, p.v, p.ranges, validate=True, return_lse=True, scale=2, backend="sdpa")
    assert out.shape == (2, 1, 2, 3, 16) and lse.shape == (2, 1, 2, 3)
