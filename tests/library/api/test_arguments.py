"""``arguments.parse``: one validation of every call, so a remembered signature never accepts what a fresh
call rejects (a remembered signature that skipped the check would accept, after one decode call,
``block_size=8.0``, ``block_size=True``, ``scale=True``, and take ``validate="no"`` and ``return_lse="yes"`` as
truthy)."""

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


# -- the kind of a call: the plain-tensor answer agrees with the probes it skips ----------------------------------

SPANS = torch.zeros(1, dtype=torch.int32)


def _kind(q):
    from nsa_triton_sel.arguments import kind

    got = kind.kind_of(q, q, q, SPANS, None)
    # the probes, in order, as a call that is not plain takes them
    if kind.shapes_only(q):
        probed = ("shapes", None)
    elif not kind.plain_eager(q):
        probed = ("traced", None)
    else:
        t = kind.transform_of(q, q, q, SPANS, None)
        probed = ("functorch", t) if t else ("eager", None)
    assert got == probed, (got, probed)
    return got


def test_kind_of_plain_tensors_and_parameters_is_eager():
    assert _kind(torch.randn(2, 3)) == ("eager", None)
    assert _kind(torch.nn.Parameter(torch.randn(2, 3))) == ("eager", None)


def test_kind_of_meta_and_fake_tensors_is_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    assert _kind(torch.empty(2, 3, device="meta")) == ("shapes", None)
    with FakeTensorMode():
        fake = torch.empty(2, 3)
    assert _kind(fake) == ("shapes", None)


def test_kind_of_under_a_dispatch_mode_is_traced():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    x = torch.randn(2, 3)
    with Passthrough():
        assert _kind(x) == ("traced", None)


def test_kind_of_under_torch_func_names_the_transform():
    seen = []

    def f(x):
        seen.append(_kind(x))
        return x.sum()

    torch.func.vmap(f)(torch.randn(2, 3))
    torch.func.grad(f)(torch.randn(3))
    assert seen == [("functorch", "vmap"), ("functorch", "grad")]


def test_kind_of_a_functionalized_tensor_is_not_plain_eager():
    seen = []

    def f(x):
        seen.append(_kind(x))  # asserts the probes' answer
        return x + 1

    torch.func.functionalize(f)(torch.randn(3))
    assert len(seen) == 1 and seen[0] != ("eager", None), seen
