"""The AOT shim's pure parts: API-family detection, cause-chain messages, signature typing.

No compile happens here (``test_smoke.py`` compiles in child processes).
"""

import inspect
import types

import pytest

from nsa_triton_sel.compat.smoke import aot
from nsa_triton_sel.plan.tiles import MODE_RANGES, kernel_meta
from nsa_triton_sel.compat.registry.compile_spec import CompileSpec, arg_type, derive_signature, kernel_params
from nsa_triton_sel.compat.registry.specs import SEL_TYPES, SPECS


class _New:
    def __init__(self, fn, signature, constexprs=None, attrs=None):
        pass


class _Old:
    def __init__(self, fn, signature, constants=None, attrs=None):
        pass


class _Alien:
    def __init__(self, fn, sig, something=None):
        pass


def test_family_detected_by_introspection():
    assert aot.ast_family(_New) == "constexprs"
    assert aot.ast_family(_Old) == "constants"
    with pytest.raises(aot.Unsupported, match="unknown ASTSource signature"):
        aot.ast_family(_Alien)


def test_installed_triton_family_matches_its_astsource():
    from triton.compiler import ASTSource

    params = inspect.signature(ASTSource.__init__).parameters
    assert aot.ast_family(ASTSource) == ("constexprs" if "constexprs" in params else "constants")


def _chained():
    try:
        try:
            raise ValueError("Cannot broadcast, the expanded size of the tensor (1) must match ...")
        except ValueError as inner:
            raise RuntimeError("") from inner  # Triton 3.0-3.4: the outer text says nothing
    except RuntimeError as mid:
        try:
            raise SyntaxError("at 12:8:\n    x = tl.load(X + offs[None, :], mask=mask)\n        ^") from mid
        except SyntaxError as outer:
            return outer


def test_root_message_walks_the_cause_chain():
    msg = aot.root_message(_chained())
    assert msg.startswith("ValueError: Cannot broadcast")
    assert aot.classify_exception(_chained())[0] == "compile_error"
    assert [c.split(":")[0] for c in aot.error_chain(_chained())] == ["SyntaxError", "RuntimeError", "ValueError"]


def test_cause_chain_survives_cycles():
    a, b = ValueError("a"), ValueError("b")
    a.__cause__, b.__cause__ = b, a
    assert len(aot.cause_chain(a)) == 2


@pytest.mark.parametrize("exc", [NotImplementedError("Block pointers have been removed"),
                                 AttributeError("module 'triton.language' has no attribute 'advance'")])
def test_removed_api_is_unsupported(exc):
    try:
        try:
            raise exc
        except Exception as e:
            raise RuntimeError("at 3:4: compile failed") from e
    except RuntimeError as outer:
        verdict, msg = aot.classify_exception(outer)
    assert verdict == "unsupported" and type(exc).__name__ in msg


def test_mma_kind():
    assert aot.mma_kind("wgmma.mma_async.sync.aligned") == "wgmma"
    assert aot.mma_kind("  mma.sync.aligned.m16n8k16") == "mma.sync"
    assert aot.mma_kind("fma.rn.f32") == "none"


def test_sel_fwd_signature_follows_the_kernel():
    from nsa_triton_sel.kernels import forward

    meta = kernel_meta(mode=MODE_RANGES, h=16, Dk=128, Dv=128, has_lse=True)
    spec = CompileSpec(name="t", kernel="nsa_triton_sel.kernels.forward:sel_fwd_kernel", dtype="bf16",
                       constexprs=meta.constexprs(), types=SEL_TYPES)
    types_, consts = derive_signature(forward.sel_fwd_kernel, spec.request(80))
    names = [n for n, is_c, _ in kernel_params(forward.sel_fwd_kernel)]
    assert list(types_) == [n for n in names if n in types_]  # kernel order, as ASTSource needs
    assert set(types_) | set(consts) == set(names) and not set(types_) & set(consts)
    assert types_["Q"] == "*bf16" and types_["LSE"] == "*fp32" and types_["SPANS"] == "*i32"
    assert types_["qk_scale"] == "fp32" and types_["S"] == "i32" and types_["sq_b"] == "i32"
    assert consts == meta.constexprs()


def test_new_kernel_argument_is_typed_by_the_rule():
    """A kernel that gains ``BIAS``, ``softmax_scale`` and ``sb_t`` needs no spec edit."""
    params = [types.SimpleNamespace(name=n, is_constexpr=c, default=inspect.Parameter.empty)
              for n, c in (("Q", False), ("BIAS", False), ("softmax_scale", False), ("sb_t", False),
                           ("BLOCK", True))]
    fn = types.SimpleNamespace(params=params, __name__="k")
    t, c = derive_signature(fn, {"name": "x", "dtype": "fp16", "constexprs": {"BLOCK": 64}})
    assert t == {"Q": "*fp16", "BIAS": "*fp16", "softmax_scale": "fp32", "sb_t": "i32"}
    assert c == {"BLOCK": 64}
    with pytest.raises(ValueError, match="no value for constexpr BLOCK"):
        derive_signature(fn, {"name": "x", "constexprs": {}})
    with pytest.raises(ValueError, match="has no constexpr"):
        derive_signature(fn, {"name": "x", "constexprs": {"BLOCK": 64, "STALE": 1}})


def test_type_override_substitutes_dtype():
    assert arg_type("O", "bf16", {"O": "*{dtype}"}) == "*bf16"
    assert arg_type("O", "bf16", {"O": "*fp32"}) == "*fp32"


def test_every_registered_spec_matches_its_kernel():
    """Cheap guard (no compile): a constexpr renamed in forward.py/meta.py breaks here first."""
    from nsa_triton_sel.compat.registry.compile_spec import load_object

    for spec in SPECS:
        derive_signature(load_object(spec.kernel), spec.request(80))


def test_launch_hints_are_the_values_the_gpu_suites_launches_had():
    """The registry compiles this package's kernels with the value hints of a launch on contiguous tensors: every
    hinted argument had that value in most of the launches the GPU suite captured (``tests/gpu_launches.py``),
    and no argument the rule leaves unhinted was equal to 1 in all of them."""
    from collections import Counter
    from pathlib import Path

    from nsa_triton_sel.compat.registry.capture import special_of
    from nsa_triton_sel.compat.registry.compile_spec import ALIGNED_INTS, UNIT_STRIDES, load_object

    captured = load_object(f"{Path(__file__).parents[2] / 'gpu_launches.py'}:SPECS")
    seen, ones, aligned = Counter(), Counter(), Counter()
    for spec in captured:
        special = special_of(spec.note)
        for name, t in spec.types.items():
            if t.startswith("i32"):
                seen[name] += 1
                ones[name] += special.get(name) == "1"
                aligned[name] += t.endswith(":16")
    for name in UNIT_STRIDES:
        assert ones[name] > seen[name] / 2, (name, ones[name], seen[name])
    for name in ALIGNED_INTS & set(seen):
        assert aligned[name] > seen[name] / 2, (name, aligned[name], seen[name])
    assert not [n for n in seen if ones[n] == seen[n] and n not in UNIT_STRIDES]


def test_launch_hints_apply_to_this_packages_kernels_only():
    from nsa_triton_sel.compat.registry.compile_spec import launch_hints

    types_ = {"Q": "*bf16", "LSE": "*fp32", "sq_d": "i32", "sq_h": "i32", "Dk": "i32", "T": "i32", "qk_scale": "fp32"}
    hinted = launch_hints("nsa_triton_sel.kernels.forward:sel_fwd_kernel", types_)
    assert hinted == {"Q": "*bf16:16", "LSE": "*fp32:16", "sq_d": "i32:1", "sq_h": "i32:16", "Dk": "i32:16",
                      "T": "i32", "qk_scale": "fp32"}
    assert launch_hints("my_pkg.kernels:attn", types_) == types_  # a team's kernel: its own names, no rule
    captured = {**types_, "sq_h": "i32:16"}  # a captured spec says what its launch saw
    assert launch_hints("nsa_triton_sel.kernels.forward:sel_fwd_kernel", captured) == captured


def test_a_registry_compile_is_the_launchs_specialisation():
    """Compiled with the hints (in a smoke child, as every verdict), the key-major delta pass has no spill, as
    at a launch; without them it spilled thousands of bytes: code that never runs."""
    pytest.importorskip("triton")
    from nsa_triton_sel.compat.smoke import run as smoke

    spec = next(s for s in SPECS if s.name == "sel_bwd_dq_keymajor_delta/fp16/dk128-dv128")
    report = smoke.run_smoke([spec], archs=(90,), jobs=1, timeout=300, progress=False)
    (r,) = report.results
    assert r.verdict == "ok", r.message
    assert r.metrics["spills"] == 0, r.metrics
