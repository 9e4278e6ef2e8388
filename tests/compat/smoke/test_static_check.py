"""The AST API-range check: canaries, the package's kernels, aliases, and what regex would get wrong."""

from pathlib import Path

from packaging.version import Version

import nsa_triton_sel
from nsa_triton_sel.compat import canaries
from nsa_triton_sel.compat.smoke import static_check

CANARIES = Path(canaries.__file__).parent / "kernels.py"
JIT = Path(nsa_triton_sel.__file__).parent / "kernels" / "forward.py"


def _needs(source, kernel):
    return static_check.check_source(source)[kernel].to_dict()["needs"]


def test_canaries_need_what_the_notes_say():
    reps = static_check.check_file(str(CANARIES))
    assert reps["broadcast_load"].needs == ">=3.5"
    assert reps["broadcast_store"].to_dict()["needs"] == "none"
    assert reps["block_ptr"].needs == "<3.9"
    assert reps["loop_bound_tensor"].findings == []
    assert not reps["block_ptr"].allows("3.9.0") and reps["block_ptr"].allows("3.8.0")
    assert reps["broadcast_load"].allows("3.5.1") and not reps["broadcast_load"].allows("3.4.0")


def test_package_kernels_fit_the_installed_triton():
    import triton

    for name, rep in static_check.check_file(str(JIT)).items():
        assert rep.allows(Version(triton.__version__)), (name, rep.to_dict())


HEADER = "import triton\nimport triton.language as tl\n"


def test_alias_is_resolved_and_text_is_not_code():
    src = (
        "import triton\nfrom triton import language as foo\n"
        "@triton.jit\ndef k(X, BLOCK: foo.constexpr):\n"
        "    s = 'tl.make_block_ptr(...)'  # tl.advance in a comment\n"
        "    p = foo.make_block_ptr(base=X, shape=(1,), strides=(1,), offsets=(0,), block_shape=(BLOCK,), order=(0,))\n"
    )
    rep = static_check.check_source(src)["k"]
    assert [f.api for f in rep.findings] == ["triton.language.make_block_ptr"]


def test_helpers_count_for_the_kernel_that_calls_them():
    src = HEADER + (
        "@triton.jit\ndef _helper(X):\n    return tl.make_tensor_descriptor(X, [1], [1], [16])\n"
        "@triton.jit\ndef k(X):\n    d = _helper(X)\n    b = tl.make_block_ptr(X, (1,), (1,), (0,), (16,), (0,))\n"
    )
    assert _needs(src, "k") == "<3.9,>=3.4"


def test_host_side_apis():
    src = ("from triton.testing import do_bench\nfrom triton.tools.tensor_descriptor import TensorDescriptor\n"
           "t = do_bench(lambda: None, fast_flush=True)\n")
    apis = {f.api: f.needs for f in static_check.check_source(src)["<module>"].findings}
    assert apis["triton.testing.do_bench(fast_flush=...)"] == "<3.2"
    assert apis["import triton.tools.tensor_descriptor.TensorDescriptor"] == ">=3.4"


def test_two_way_mask_broadcast_only_when_pointer_is_narrower():
    good = HEADER + (
        "@triton.jit\ndef k(X, n, BLOCK: tl.constexpr):\n    offs = tl.arange(0, BLOCK)\n"
        "    m = (offs[:, None] < n) & (offs[None, :] < n)\n"
        "    x = tl.load(X + offs[:, None] * n + offs[None, :], mask=m)\n"
        "    y = tl.load(X + offs, mask=offs < n)\n"
    )
    assert static_check.check_source(good)["k"].findings == []
    bad = good.replace("X + offs[:, None] * n + offs[None, :], mask=m", "X + offs[:, None], mask=m")
    assert _needs(bad, "k") == ">=3.5"


def test_smoke_report_carries_static_needs():
    from nsa_triton_sel.compat.canaries import SPECS as specs
    out = static_check.check_specs(specs, "3.9.0")
    block = next(v for k, v in out.items() if k.endswith(":block_ptr"))
    assert block["needs"] == "<3.9" and block["installed_ok"] is False
