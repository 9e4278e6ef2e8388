"""The launch planner: row caps from the known-bad windows, the decode and multi-token choices, and the
compile-smoke registry derived from it (which must cover everything the planner can pick)."""

from __future__ import annotations

import itertools

import pytest

from nsa_triton_sel import known_bad, plan
from nsa_triton_sel.compat.specs import SPECS
from nsa_triton_sel.kernels import meta as M

WINDOWS = known_bad.parse("""
schema = 1
[[window]]
id = "cap"
triton = ">=3.0,<3.2"
arch = [90]
max_rows = 32
reason = "64-row dots abort"
""")


def test_row_cap_comes_from_the_windows():
    assert known_bad.row_cap("3.1.0", 90, WINDOWS) == 32
    assert known_bad.row_cap("3.2.0", 90, WINDOWS) is None
    assert known_bad.row_cap("3.1.0", 80, WINDOWS) is None
    assert known_bad.row_cap("3.1.0", None, WINDOWS) is None  # the interpreter: nothing to cap
    assert known_bad.row_cap("", 90, WINDOWS) is None  # no Triton


@pytest.mark.parametrize("bad", ["24", "8", "true", "64.0", "-32"])
def test_max_rows_is_validated(bad):
    text = f'schema = 1\n[[window]]\nid = "w"\ntriton = "<4"\nreason = "r"\nmax_rows = {bad}\n'
    with pytest.raises(ValueError, match=r"window 'w' has max_rows = .*; accepted: a power of two >= 16"):
        known_bad.parse(text)


def test_a_capped_window_is_mitigated_not_warned(monkeypatch):
    monkeypatch.setattr(known_bad, "_installed_triton", lambda: "3.1.0")
    assert known_bad.check_installed(arch=90, windows=WINDOWS) is None


def test_capped_device_never_plans_wider_tiles(monkeypatch):
    monkeypatch.setattr(known_bad, "_cached", lambda: tuple(WINDOWS))
    capped, free = plan.Device.target(90, "3.1.0"), plan.Device.target(90, "3.2.0")
    assert (capped.max_rows, free.max_rows) == (32, 64)
    for h, Dk in itertools.product((16, 20, 33, 64), (64, 192)):
        for decode in (False, True):
            p = plan.selection(1, 8, 2, h, Dk, 128, 512, 4, dev=capped, decode=decode)
            assert p.rows <= 32 and p.grid[1] == 2 * -(-h // p.rows)
        assert plan.selection(1, 8, 2, h, Dk, 128, 512, 4, dev=free).rows == min(64, M.next_pow2(max(h, 16)))
    tok = plan.auto_tokens(16, 4096, capped)
    assert tok == 2 and plan.selection(1, 4096, 2, 16, 128, 128, 4096, 4, dev=capped, tokens=tok).rows == 32
    assert "32" in plan.tokens_problem(4, 16, capped) and plan.tokens_problem(4, 16, free) is None


def test_decode_choice_and_splits():
    dev = plan.Device.target(90, "3.6.0", sm_count=132)
    assert plan.use_decode(4, 1, 4, 16, False, dev)  # 16 programs < 132 SMs
    assert not plan.use_decode(64, 1, 4, 16, False, dev)  # 256 programs fill the GPU
    assert not plan.use_decode(1, 2, 4, 16, False, dev)  # two query positions: not decode
    p = plan.selection(4, 1, 4, 16, 128, 128, 32768, 16, dev=dev)
    assert p.kernel == "decode" and p.num_splits == plan.MAX_DECODE_SPLITS and p.merge_grid == (4, 4)
    assert plan.selection(64, 1, 4, 16, 128, 128, 32768, 16, dev=dev).kernel == "ranges"


def test_plans_are_cached_per_signature():
    dev = plan.Device.target(80, "3.6.0")
    a = plan.selection(1, 8, 2, 16, 64, 64, 512, 4, dev=dev)
    assert plan.selection(1, 8, 2, 16, 64, 64, 512, 4, dev=dev) is a
    assert plan.selection(1, 8, 2, 16, 64, 64, 512, 4, dev=dev, tune=(("block_n", 64),)).meta.BLOCK_N == 64


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
    cases = plan.smoke_cases()
    dev = plan.Device.target(90, "")
    covered = set()
    for c in cases:
        tag = "tok" if c.kernel == "sel_fwd_tok_kernel" else "sel"
        covered |= {(tag, k, v) for k, v in c.constexprs.items()} | {(tag, "dtype", c.dtype)}
    missing = set()
    tiles = {plan._tile_class(p, d) for name, d, p, _ in plan._sweep(dev)}
    for dtype, p in _wide_sweep(dev):
        feats = plan._features(p, dtype) - {("sel", "kernel", "dense"), ("sel", "kernel", "varlen")}
        missing |= {f for f in feats if f[1] != "kernel"} - covered
        if plan._tile_class(p, dtype) not in tiles:
            missing.add(plan._tile_class(p, dtype))
    assert not missing, f"the planner picks classes the compile smoke never compiles: {sorted(map(str, missing))}"


def test_registry_is_the_smoke_cases_with_window_skips():
    cases = plan.smoke_cases()
    forward = [s for s in SPECS if not s.name.startswith("sel_bwd") and "+cap" not in s.name]  # backward: own test
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


def test_under_a_row_cap_window_the_registry_compiles_what_the_capped_planner_launches():
    """Issue 21 item 7: 8 configurations of the capped planner were in no registry variant."""
    import dataclasses

    from nsa_triton_sel.compat.specs import _ident

    for window in (w for w in known_bad.load() if w.max_rows is not None):
        version = next(v for v in ("3.0.0", "3.1.0") if window.triton.contains(v))
        arch = window.arch[0]
        dev = dataclasses.replace(plan.Device.target(arch, ""), max_rows=window.max_rows)
        compiled = {_ident(s.kernel, s.constexprs, s.num_warps, s.num_stages, s.dtype, s.types)
                    for s in SPECS if not s.skipped(version, arch)}
        for case in plan.smoke_cases(dev):
            assert _ident(case.kernel, case.constexprs, case.num_warps, case.num_stages, case.dtype,
                          case.types) in compiled, case.name
        capped = [s for s in SPECS if "+cap" in s.name]
        assert capped and all(s.skipped("3.2.0", arch) and s.skipped(version, 80) for s in capped)


    names = " ".join(s.name for s in SPECS)
    for token in ("/blocks/", "+pos", "/ranges/", "/dense/", "/varlen/", "+split", "sel_fwd_tok/", "merge_splits",
                  "bf16", "fp16", "dk64", "dk96", "dk128", "dk192", "dk256"):
        assert token in names, token
    # The per-head path (NSA_SEL_TRITON_GROUP=0) compiles the 16-row specialisation of its head dims.
    dev = plan.Device.target(90, "")
    per_head = plan.selection(1, 8192, 4, 64, 128, 128, 8192, 16, dev=dev, per_head=True)
    assert per_head.meta == plan.selection(1, 8192, 4, 16, 128, 128, 8192, 16, dev=dev).meta
