"""Kernel arguments by name (``kernels/params.py``): the kernel's signature orders what the launcher names."""

import pytest
import triton
import triton.language as tl

from nsa_triton_sel.kernels import backward as bwd_kernels
from nsa_triton_sel.kernels import forward as fwd_kernels
from nsa_triton_sel.kernels import params

LAUNCHED = [fwd_kernels.sel_fwd_kernel, fwd_kernels.merge_splits_kernel, fwd_kernels.sel_fwd_tok_kernel,
            bwd_kernels.sel_bwd_dq_kernel, bwd_kernels.sel_bwd_dq_tok_kernel, bwd_kernels.sel_bwd_dkdv_kernel,
            bwd_kernels.sel_bwd_reduce_kernel, bwd_kernels.sel_bwd_reader_keys_kernel,
            bwd_kernels.sel_bwd_reader_entries_kernel]


@triton.jit
def _toy_kernel(X, Y, seq_len, sx_b, sx_t, sy_b, sy_t, scale, BLOCK: tl.constexpr):
    pass


def test_arguments_come_back_in_the_kernel_order_with_strides_grouped_per_tensor():
    pack = params.packer(_toy_kernel)
    assert params.runtime_params(_toy_kernel) == ["X", "Y", "seq_len", "sx_b", "sx_t", "sy_b", "sy_t", "scale"]
    got = pack(scale=0.5, sy=(30, 3), Y="y", seq_len=7, X="x", sx=(10, 1))
    assert got == ("x", "y", 7, 10, 1, 30, 3, 0.5)


@pytest.mark.parametrize("bad, error, says", [
    (dict(sx=(10, 1), Y="y", seq_len=7, sy=(30, 3), scale=1.0), TypeError, "X"),  # missing
    (dict(X="x", sx=(10, 1), Y="y", seq_len=7, sy=(30, 3), scale=1.0, BLOCK=4), TypeError, "BLOCK"),  # constexpr
    (dict(X="x", sx=(10, 1), Y="y", seq_len=7, sy=(30, 3), scale=1.0, sz=(1,)), TypeError, "sz"),  # unknown
    (dict(X="x", sx=(10, 1, 1), Y="y", seq_len=7, sy=(30, 3), scale=1.0), ValueError, "unpack"),  # misshapen
])
def test_a_missing_unknown_or_misshapen_argument_is_refused_before_any_launch(bad, error, says):
    with pytest.raises(error, match=says):
        params.packer(_toy_kernel)(**bad)


@pytest.mark.parametrize("kernel", LAUNCHED, ids=lambda k: k.fn.__name__)
def test_every_launched_kernel_has_a_packer_that_keeps_its_parameter_count(kernel):
    pack = params.packer(kernel)
    names = params.runtime_params(kernel)
    keywords = pack.__code__.co_varnames[:pack.__code__.co_kwonlyargcount]
    named = {}
    for kw in keywords:
        width = sum(1 for n in names if n.startswith(kw + "_") and params._STRIDE.match(n))
        named[kw] = tuple(range(width)) if width else kw
    assert len(pack(**named)) == len(names)

