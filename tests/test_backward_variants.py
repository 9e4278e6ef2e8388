"""The backward kernels' compile-smoke variants (``backward_meta.backward_variants``): every kernel
covered, every constexpr named, the launcher's own choices included, and one real compile."""

from __future__ import annotations

import pytest

from nsa_triton_sel.compat.specs import SPECS, backward_specs, derive_signature, load_object, uncovered_kernels
from nsa_triton_sel.kernels.backward_meta import (BACKWARD_MODULE, backward_meta, backward_variants,
                                                  dq_tokens_per_program)


@pytest.mark.parametrize("full", [False, True])
def test_every_backward_kernel_is_registered(full):
    specs = backward_specs(full)
    assert uncovered_kernels(BACKWARD_MODULE, specs) == []
    assert len({s.name for s in specs}) == len(specs)
    if not full:
        from nsa_triton_sel.kernels.backward_meta import SMOKE_SUBSET

        assert {s.name for s in specs} == SMOKE_SUBSET  # no stale name in the subset


def test_variants_name_exactly_the_kernels_constexprs():
    for d in backward_variants(full=True):
        fn = load_object(d["kernel"])
        types, constexprs = derive_signature(fn, d)  # raises on a missing or unknown constexpr
        assert set(constexprs) == set(d["constexprs"]), d["name"]
        for name in ("LSE", "DELTA", "WS"):
            assert types.get(name, "*fp32") == "*fp32", (d["name"], name)
        assert types.get("CHUNKS", "*i64") == "*i64" and types.get("S", "i32") == "i32"


@pytest.mark.parametrize("Dk, Dv", [(128, 128), (192, 128), (64, 64)])
def test_launcher_choices_are_among_the_variants(Dk, Dv):
    registered = {(d["kernel"].rpartition(":")[2], tuple(sorted(d["constexprs"].items())), d["num_warps"],
                   d["num_stages"]) for d in backward_variants(full=True)}
    for cap in (64, 32):
        m = backward_meta(h=16, Dk=Dk, Dv=Dv, n_spans=16, max_rows=cap)
        for kernel, ce, w, s in (("sel_bwd_dq_kernel", m.dq_constexprs(), m.dq_warps, m.dq_stages),
                                 ("sel_bwd_dkdv_kernel", m.dkdv_constexprs(), m.kv_warps, m.kv_stages)):
            assert (kernel, tuple(sorted(ce.items())), w, s) in registered, (kernel, Dk, Dv, cap)
    if (Dk, Dv) != (64, 64):
        for cap in (64, 32):
            m = backward_meta(h=16, Dk=Dk, Dv=Dv, n_spans=16, max_rows=cap, dq_tokens=dq_tokens_per_program(16, cap))
            if Dk == 128 or cap == 64:
                key = ("sel_bwd_dq_tok_kernel", tuple(sorted(m.dq_tok_constexprs().items())), m.tok_warps, m.tok_stages)
                assert key in registered, ("tok", Dk, Dv, cap)


def test_one_variant_compiles_for_sm80():
    from nsa_triton_sel.compat import smoke

    spec = next(s for s in backward_specs(full=True) if s.name == "sel_bwd_dkdv/fp16/dk64-dv64")
    report = smoke.run_smoke([spec], archs=(80,), jobs=1, timeout=300, progress=False)
    (result,) = report.results
    assert result.verdict == "ok", result.message
    assert result.metrics["mma"] == "mma.sync"


def test_the_package_registry_holds_the_backward_subset_with_data_driven_skips():
    from nsa_triton_sel import known_bad

    names = {s.name for s in SPECS}
    subset = {s.name for s in backward_specs()}
    assert subset <= names
    capped = [w for w in known_bad.load() if w.max_rows is not None]
    assert capped, "the row-cap window is data (data/known_bad.toml)"
    for spec in backward_specs(full=True):
        rows = int(spec.note.split("=")[1])
        for w in capped:
            for arch in w.arch:
                version = str(next(iter(w.triton)).version)  # the window's lower bound is inside it
                # skipped there: only what the window names (all wider variants if it names none)
                named = w.names(spec.name) if w.variants else rows > w.max_rows
                assert spec.skipped(version, arch) == named, spec.name
