"""The compile-smoke variants derived from the planner (``compat/registry/variants.py``): the forward's cover
everything the planner can pick; the backward's cover every kernel, name every constexpr, include the
launcher's own choices, and one compiles for real."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from nsa_triton_sel import device, known_bad, plan
from nsa_triton_sel.device import SHARED_PER_BLOCK
from nsa_triton_sel.compat.registry.compile_spec import derive_signature, load_object
from nsa_triton_sel.compat.registry.specs import SPECS, backward_specs, keymajor_specs, uncovered_kernels
from nsa_triton_sel.compat.registry.variants import (BACKWARD_MODULE, _features, _sweep, _tile_class,
                                                     backward_variants, keymajor_variants, smoke_cases)
from nsa_triton_sel.plan import tiles as M
from nsa_triton_sel.plan.backward import backward_meta, dq_tokens_per_program


@pytest.mark.parametrize("full", [False, True])
def test_every_backward_kernel_is_registered(full):
    specs = backward_specs(full)
    # the key-major dq is registered with the key-major forward (its configuration is the forward's)
    assert uncovered_kernels(BACKWARD_MODULE, specs + keymajor_specs()) == []
    assert len({s.name for s in specs}) == len(specs)
    if not full:
        from nsa_triton_sel.compat.registry.variants import SMOKE_SUBSET

        assert {s.name for s in specs} == SMOKE_SUBSET  # no stale name in the subset


def test_variants_name_exactly_the_kernels_constexprs():
    for d in backward_variants(full=True) + keymajor_variants():
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


@pytest.mark.parametrize("arch", sorted(SHARED_PER_BLOCK))
def test_each_arch_compiles_the_dkdv_kernel_its_planner_launches(arch):
    """The dk/dv pipeline follows the arch's shared memory (``plan.backward``): the variant each arch's plan launches
    is compiled on that arch, and no other dk/dv variant of the same call class is."""
    variants = [d for d in backward_variants(full=True) if d["kernel"].endswith(":sel_bwd_dkdv_kernel")]
    on_arch = [d for d in variants if arch not in d.get("skip_archs", ()) and arch in d.get("only_archs", (arch,))]
    compiled = {(tuple(sorted(d["constexprs"].items())), d["num_warps"], d["num_stages"]) for d in on_arch}
    for d in (d for d in M.HEAD_DIMS if d.backward):
        for h, cap in ((16, 64), (16, 32), (64, 64)):
            m = backward_meta(h=h, Dk=d.Dk, Dv=d.Dv, n_spans=16, max_rows=cap, shared=SHARED_PER_BLOCK[arch])
            if h == 64 and (d.Dk, d.Dv) != (128, 128):
                continue  # the flat walk is compiled at one head dim
            assert (tuple(sorted(m.dkdv_constexprs().items())), m.kv_warps, m.kv_stages) in compiled, (arch, d, h, cap)
    wide = {d["name"] for d in on_arch if d["name"].startswith("sel_bwd_dkdv/fp16/dk256-dv256")}
    assert wide == {"sel_bwd_dkdv/fp16/dk256-dv256" + {232448: "/rows32-stages2", 166912: "",
                                                        101376: "/rows16-stages3"}[SHARED_PER_BLOCK[arch]]}


def test_the_dkdv_kernel_fits_a_99_kib_part_as_planned():
    """Dk = Dv = 256 on sm_89 (99 KiB a program): the narrower step the plan takes there compiles, within the
    bytes the plan reckons for it (the estimate that chose it holds for the compiled kernel)."""
    from nsa_triton_sel.compat import smoke
    from nsa_triton_sel.plan.backward import KV_SHARED_SLACK, dkdv_shared_bytes

    spec = next(s for s in backward_specs(full=True) if s.name == "sel_bwd_dkdv/fp16/dk256-dv256/rows16-stages3")
    report = smoke.run_smoke([spec], archs=(89,), jobs=1, timeout=300, progress=False)
    (result,) = report.results
    assert result.verdict == "ok", result.message
    ce = spec.constexprs
    planned = dkdv_shared_bytes(ce["BLOCK_N"], ce["ROWS"], ce["DK1"] + ce["DK2"], ce["BLOCK_DV"], spec.num_stages)
    assert planned <= result.metrics["shared"] <= planned + KV_SHARED_SLACK <= SHARED_PER_BLOCK[89]


@pytest.mark.parametrize("name, arch", [("sel_bwd_dkdv/fp16/dk256-dv256/rows32-stages2", 90),
                                        ("sel_bwd_dkdv/fp16/dk128-dv128/rows32-stages2", 80)])
def test_the_two_stage_dkdv_step_leaves_room_for_two_programs_an_sm(name, arch):
    """Where the plan gives up the third stage for a second program an SM, the compiled kernel's shared memory
    (plus the 1 KiB each program reserves) does hold two in the SM's (a program's limit + 1 KiB), and the kernel
    it replaces would not have."""
    from nsa_triton_sel.compat import smoke
    from nsa_triton_sel.plan.backward import KV_SHARED_SLACK, dkdv_shared_bytes

    specs = {s.name: s for s in backward_specs(full=True)}
    spec = specs[name]
    three = dataclasses.replace(specs[name.rpartition("/")[0]], skip=None)  # the 3-stage step, there unplanned
    assert (three.constexprs, three.num_stages) == (spec.constexprs, 3)
    report = smoke.run_smoke([spec, three], archs=(arch,), jobs=1, timeout=300, progress=False)
    two_stages, three_stages = report.results
    assert two_stages.verdict == three_stages.verdict == "ok", (two_stages.message, three_stages.message)
    ce, per_sm = spec.constexprs, SHARED_PER_BLOCK[arch] + 1024
    planned = dkdv_shared_bytes(ce["BLOCK_N"], ce["ROWS"], ce["DK1"] + ce["DK2"], ce["BLOCK_DV"], spec.num_stages)
    assert planned <= two_stages.metrics["shared"] <= planned + KV_SHARED_SLACK
    assert 2 * (two_stages.metrics["shared"] + 1024) <= per_sm
    assert 2 * (three_stages.metrics["shared"] + 1024) > per_sm


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
                elsewhere = spec.skipped("99.0", arch)  # the archs the plan does not launch it on, every release
                assert spec.skipped(version, arch) == (named or elsewhere), spec.name


def _wide_sweep(dev):
    """More calls than plan.smoke_cases sweeps: every plan here must fall in a covered class."""
    for Dk, Dv, h, per_head, dtype in itertools.product(
            (16, 48, 64, 80, 96, 128, 160, 192, 256), (32, 64, 128, 256), (1, 2, 3, 4, 5, 8, 12, 16, 20, 32, 48, 64),
            (False, True), ("fp16", "bf16")):
        for mode, has_pos, has_lse in ((M.MODE_RANGES, False, True), (M.MODE_RANGES, False, False),
                                       (M.MODE_BLOCKS, True, True), (M.MODE_BLOCKS, False, False)):
            for B, S, T, decode in ((1, 8192, 8192, False), (2, 300, 1000, False), (64, 1, 32768, True),
                                    (1, 1, 100, True)):
                yield dtype, plan.selection(B, S, 4, h, Dk, Dv, T, 16, dev=dev, span_mode=mode, has_pos=has_pos,
                                            has_lse=has_lse, per_head=per_head, decode=decode)
        for L in (16, 64, 200, 4096):
            yield dtype, plan.packed(M.MODE_DENSE, 1024, h, Dk, Dv, L, dev=dev, has_lse=False)
        tok = plan.auto_tokens(h, 8192, dev)
        if tok > 1:
            yield dtype, plan.selection(1, 8192, 4, h, Dk, Dv, 8192, 16, dev=dev, tokens=tok)


def test_smoke_cases_cover_everything_the_planner_picks():
    cases = smoke_cases()
    dev = device.Device.target(90, "")
    covered = set()
    for c in cases:
        tag = "tok" if c.kernel == "sel_fwd_tok_kernel" else "sel"
        covered |= {(tag, k, v) for k, v in c.constexprs.items()} | {(tag, "dtype", c.dtype)}
    missing = set()
    tiles = {_tile_class(p, d) for name, d, p, _ in _sweep(dev)}
    for dtype, p in _wide_sweep(dev):
        feats = _features(p, dtype) - {("sel", "kernel", "dense"), ("sel", "kernel", "varlen")}
        missing |= {f for f in feats if f[1] != "kernel"} - covered
        if _tile_class(p, dtype) not in tiles:
            missing.add(_tile_class(p, dtype))
    assert not missing, f"the planner picks classes the compile smoke never compiles: {sorted(map(str, missing))}"


def test_registry_is_the_smoke_cases_with_window_skips():
    cases = smoke_cases()
    forward = [s for s in SPECS if not s.name.startswith(("sel_bwd", "sel_fwd_keymajor")) and "+cap" not in s.name]
    # the backward and the key-major forward: own tests
    assert [s.name for s in forward] == [c.name for c in cases]
    wide = [s for s, c in zip(forward, cases) if c.rows > 32]
    assert wide, "no 64-row variant in the registry"
    for window in known_bad.load():
        if window.max_rows is None:
            continue
        version = next(v for v in ("3.0.0", "3.1.0", "3.2.0", "3.6.0") if window.triton.contains(v))
        for s, c in zip(forward, cases):
            rows = c.rows or c.constexprs.get("BLOCK_H", 0)
            named = window.names(s.name) if window.variants else rows > window.max_rows
            assert s.skipped(version, window.arch[0]) == named, s.name  # skipped: only what the window names
            assert not s.skipped(version, 80) or 80 in window.arch


def test_the_keymajor_variants_are_skipped_exactly_where_a_window_steers_the_planner_off():
    """The key-major specs are in the registry, compiled wherever the planner may take the path and skipped
    where a window names it (``paths``): there the planner runs token-major, so nothing there launches them."""
    import importlib

    KM = importlib.import_module("nsa_triton_sel.plan.keymajor")  # the package exports a function of its name

    # (the warp-specialised kernel compiles on sm_90 from 3.6 on alone, outside every such window: its own test)
    keymajor = [s for s in SPECS if s.name.startswith("sel_fwd_keymajor") and not s.name.startswith("sel_fwd_keymajor_ws")]
    assert {s.kernel.rpartition(":")[2] for s in keymajor} == {"sel_fwd_keymajor_kernel",
                                                                 "sel_fwd_keymajor_merge_kernel"}
    steering = [w for w in known_bad.load() if w.paths]
    assert steering, "no window steers the planner off a path: this test would check nothing"
    for w in steering:
        version = next(v for v in ("3.0.0", "3.1.0", "3.2.0", "3.4.0", "3.5.1", "3.6.0") if w.triton.contains(v))
        for arch in (*w.arch, 90):
            dev = device.Device.target(arch, version)
            with KM.forced("key"):  # wherever it can run
                takes = KM.key_major(B=1, S=8192, G=4, h=1, Dk=128, Dv=128, T=8192, n=16, span_len=64,
                                     aligned=True, dev=dev, grad=True) == KM.ALWAYS
            assert takes == (arch not in w.arch and dev.max_rows == 64), (w.id, arch)
            for s in keymajor:
                # elsewhere each forward configuration compiles at the stages the planner runs on that arch
                other_stages = s.kernel.endswith(":sel_fwd_keymajor_kernel") and s.num_stages != KM.forward_stages(
                    device.shared_limit(arch), "dk192" in s.name)
                assert s.skipped(version, arch) == (arch in w.arch or other_stages), (s.name, arch)


def test_under_a_row_cap_window_the_registry_compiles_what_the_capped_planner_launches():
    """Under a row-cap window, every configuration the capped planner can launch is compiled by a registry
    variant: one outside every variant would reach users with its compile never checked."""
    import dataclasses

    from nsa_triton_sel.compat.registry.specs import _ident

    for window in (w for w in known_bad.load() if w.max_rows is not None):
        version = next(v for v in ("3.0.0", "3.1.0") if window.triton.contains(v))
        arch = window.arch[0]
        dev = dataclasses.replace(device.Device.target(arch, ""), max_rows=window.max_rows)
        compiled = {_ident(s.kernel, s.constexprs, s.num_warps, s.num_stages, s.dtype, s.types)
                    for s in SPECS if not s.skipped(version, arch)}
        for case in smoke_cases(dev):
            assert _ident(case.kernel, case.constexprs, case.num_warps, case.num_stages, case.dtype,
                          case.types) in compiled, case.name
        capped = [s for s in SPECS if "+cap" in s.name]
        assert capped and all(s.skipped("3.2.0", arch) and s.skipped(version, 80) for s in capped)


    names = " ".join(s.name for s in SPECS)
    for token in ("/blocks/", "+pos", "/ranges/", "/dense/", "/varlen/", "+split", "sel_fwd_tok/", "merge_splits",
                  "bf16", "fp16", "dk64", "dk96", "dk128", "dk192", "dk256"):
        assert token in names, token
    # The per-head path (NSA_SEL_TRITON_GROUP=0) compiles the 16-row specialisation of its head dims.
    dev = device.Device.target(90, "")
    per_head = plan.selection(1, 8192, 4, 64, 128, 128, 8192, 16, dev=dev, per_head=True)
    assert per_head.meta == plan.selection(1, 8192, 4, 16, 128, 128, 8192, 16, dev=dev).meta


@pytest.mark.parametrize("arch", sorted(device.SHARED_PER_BLOCK))
def test_the_registry_compiles_the_keymajor_forward_each_arch_launches(arch):
    """The planner's key-major forward on each arch (its stages follow the shared memory a program may use there)
    is a registry variant compiled on that arch, and no other stage count is compiled there."""
    import importlib

    keymajor_plan = importlib.import_module("nsa_triton_sel.plan.keymajor")  # the package exports a function of its name
    dev = device.Device.target(arch, "3.6.0")
    fwd = [s for s in SPECS if s.kernel.endswith(":sel_fwd_keymajor_kernel") and not s.skipped("3.6.0", arch)]
    for Dk, h in ((128, 1), (128, 4), (128, 8), (192, 1)):
        meta = plan.keymajor(1, 8192, 4, h, Dk, 128, 8192, 16, dev=dev, span_len=64, aligned=True).meta
        hits = [s for s in fwd if dict(s.constexprs) == meta.kernel_constexprs() and s.dtype == "bf16"]
        assert [(s.num_warps, s.num_stages) for s in hits] == [(meta.num_warps, meta.num_stages)], (arch, Dk, h)
    deep = device.shared_limit(arch) >= keymajor_plan.DEEP_SHARED
    assert {s.num_stages for s in fwd if "dk128" in s.name} == ({keymajor_plan.FWD_STAGES_DEEP} if deep
                                                                 else {keymajor_plan.FWD_STAGES}), arch


def test_the_registry_compiles_the_warp_specialised_kernel_where_the_planner_launches_it():
    """Each padded group's warp-specialised partial kernel (bf16, Dk = Dv = 128) is a registry variant with the
    plan's constexprs and register cap, compiled on sm_90 from Triton 3.6 on and skipped everywhere else."""
    import importlib

    keymajor_plan = importlib.import_module("nsa_triton_sel.plan.keymajor")
    dev = device.Device.target(90, "3.6.0")
    ws = [s for s in SPECS if s.kernel.endswith(":sel_fwd_keymajor_ws_kernel")]
    for h in (1, 2, 3, 4, 5, 8):
        meta = plan.keymajor(1, 8192, 4, h, 128, 128, 8192, 16, dev=dev, span_len=64, aligned=True, bf16=True).meta
        assert meta.ws
        hits = [s for s in ws if dict(s.constexprs) == meta.ws_constexprs()]
        assert len(hits) == 1 and hits[0].dtype == "bf16", h
        assert hits[0].request(90)["maxnreg"] == keymajor_plan.WS_REGISTERS
        assert hits[0].num_warps == keymajor_plan.WS_WARPS
    for s in ws:
        assert not s.skipped("3.6.0", 90) and not s.skipped("3.9.0", 90)
        assert s.skipped("3.5.1", 90) and s.skipped("3.6.0", 100) and s.skipped("3.6.0", 80)


def test_the_registry_compiles_the_gluon_backward_kernel_where_the_planner_launches_it():
    """Each padded group's Gluon backward kernel (bf16, Dk = Dv = 128) is a registry variant with the plan's
    constexprs and warps, compiled on sm_90 from Triton 3.6 on and skipped everywhere else."""
    import importlib

    keymajor_plan = importlib.import_module("nsa_triton_sel.plan.keymajor")
    dev = device.Device.target(90, "3.6.0")
    gluon = [s for s in SPECS if s.kernel.endswith(":sel_bwd_keymajor_gluon_kernel")]
    for h in (1, 2, 3, 4, 5, 8):
        meta = plan.keymajor(1, 8192, 4, h, 128, 128, 8192, 16, dev=dev, span_len=64, aligned=True, bf16=True).meta
        assert meta.bwd_gluon
        hits = [s for s in gluon if dict(s.constexprs) == meta.bwd_gluon_constexprs()]
        assert len(hits) == 1 and hits[0].dtype == "bf16", h
        assert hits[0].num_warps == keymajor_plan.BWD_GLUON_WARPS
    assert len(gluon) == 4  # h pads to 1, 2, 4, 8
    for s in gluon:
        assert not s.skipped("3.6.0", 90) and not s.skipped("3.9.0", 90)
        assert s.skipped("3.5.1", 90) and s.skipped("3.6.0", 100) and s.skipped("3.6.0", 80)


def test_every_gluon_backward_kernel_is_registered():
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    from nsa_triton_sel.compat.registry.variants import KEYMAJOR_BWD_GLUON_MODULE

    assert uncovered_kernels(KEYMAJOR_BWD_GLUON_MODULE, keymajor_specs()) == []


def test_every_warp_specialised_kernel_is_registered():
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    from nsa_triton_sel.compat.registry.variants import KEYMAJOR_WS_MODULE

    assert uncovered_kernels(KEYMAJOR_WS_MODULE, keymajor_specs()) == []
