"""The compile-smoke variants of this package's kernels, derived from the launch planner.

The forward's: :func:`smoke_cases` sweeps the planner (``nsa_triton_sel.plan``) over head dims,
head counts, span layouts, decode split, the multi-token kernel and both dtypes, and keeps the
fewest launches that compile every tile class and constexpr value it picks.  The backward's:
:func:`backward_variants` asks ``plan.backward_meta`` for every configuration class its launcher
can pick.  ``compat/registry/specs.py`` turns both into the registry the compile smoke runs, so the variants
that ship are exactly the variants compiled.  Imports no torch and no triton.
"""

from __future__ import annotations

from dataclasses import dataclass

from ... import plan
from ...device import ROWS, SHARED_PER_BLOCK, Device
from ...plan import tiles as M
from ...plan import tokens
from ...plan.backward import (READER_BLOCK, READER_ENTRIES_WARPS, READER_KEYS_WARPS, REDUCE_WARPS, backward_meta,
                              dq_tokens_per_program)

@dataclass(frozen=True)
class SmokeCase:
    """One kernel specialisation the launchers can launch, for the compile-smoke registry."""

    name: str
    kernel: str  # attribute of kernels/forward.py
    constexprs: dict
    num_warps: int
    num_stages: int
    dtype: str  # "fp16" / "bf16"
    types: tuple = ()  # pointer types other than the data dtype: (("SPANS", "*i64"), ...)
    rows: int = 0  # the dot's M: a known-bad window's max_rows skips the case where it is larger


def _tile_class(p: plan.Launch, dtype: str) -> tuple:
    """What shapes the compiled code: the dot tile (rows, BLOCK_N, Dk slices), warps and stages.

    64-row dots take sm_90's wgmma path, whose instructions (and the layout conversions Triton
    3.0/3.1 abort on) depend on the element type: there the dtype is part of the class.
    """
    m = p.meta
    return (p.kernel == "tokens", p.rows, m.BLOCK_N, m.DK2 > 0, m.num_warps, m.num_stages,
            dtype if p.rows >= ROWS else "")


def _features(p: plan.Launch, dtype: str) -> set:
    """Every (constexpr, value) the plan sets, and its dtype: each must be compiled at least once."""
    tag = "tok" if p.kernel == "tokens" else "sel"
    out = {(tag, name, value) for name, value in p.meta.constexprs().items()}
    return out | {(tag, "dtype", dtype), (tag, "kernel", p.kernel)}


# The calls the sweep plans: head dims (Dk != Dv, non-powers of two), head counts (every head block
# 16/32/64 and the per-head path), every span layout, decode split, multi-token, both dtypes.
# (the head dimensions: plan/tiles.py's HEAD_DIMS table)
_HEADS = (16, 64, 32, 3, 1, 20, 2, 8)
_SHAPES = {"prefill": (1, 8192, 8192), "decode": (64, 1, 32768), "short": (4096, 1, 64)}


def _sweep(dev: Device):
    """(name, dtype, plan, types) of every call the sweep covers, in a fixed order."""
    for dtype in ("fp16", "bf16"):
        for Dk, Dv in ((d.Dk, d.Dv) for d in M.HEAD_DIMS):
            for h in _HEADS:
                for per_head in (False, True):
                    yield from _sweep_call(dev, Dk, Dv, h, per_head, dtype)


def _sweep_call(dev, Dk, Dv, h, per_head, dtype):
    head = f"{dtype}/dk{Dk}-dv{Dv}/h{h}" + ("/per-head" if per_head else "")
    B, S, T = _SHAPES["prefill"]
    for mode, name, types in ((M.MODE_RANGES, "ranges", ()), (M.MODE_BLOCKS, "blocks", (("SPANS", "*i64"),))):
        for has_pos in ((False, True) if mode == M.MODE_BLOCKS else (False,)):
            for has_lse in (True, False):
                tags = ("+pos" if has_pos else "") + ("+lse" if has_lse else "")
                pos_types = (("POS", "*i64"),) if has_pos else ()
                p = plan.selection(B, S, 4, h, Dk, Dv, T, 16, dev=dev, span_mode=mode, has_pos=has_pos,
                                 has_lse=has_lse, per_head=per_head)
                yield f"sel_fwd/{name}/{head}/prefill{tags}", dtype, p, types + pos_types
                B2, S2, T2 = _SHAPES["decode"]
                p = plan.selection(B2, S2, 4, h, Dk, Dv, T2, 16, dev=dev, span_mode=mode, has_pos=has_pos,
                                 has_lse=has_lse, per_head=per_head, decode=True, num_splits=4)
                yield f"sel_fwd/{name}/{head}/decode{tags}+split", dtype, p, types + pos_types
    for regime, (N, _, L) in (("short", _SHAPES["short"]), ("prefill", (1 << 20, 1, 8192))):
        yield f"sel_fwd/dense/{head}/{regime}", dtype, plan.packed(M.MODE_DENSE, N, h, Dk, Dv, L, dev=dev,
                                                              has_lse=False), ()
    yield f"sel_fwd/varlen/{head}/prefill+lse", dtype, plan.packed(M.MODE_CU, 1 << 16, h, Dk, Dv, None, dev=dev,
                                                              has_lse=True), ()
    tok = tokens.auto_tokens(h, S, dev)
    if tok > 1 and not per_head:
        p = plan.selection(B, S, 4, h, Dk, Dv, T, 16, dev=dev, tokens=tok)
        yield f"sel_fwd_tok/{head}/tok{tok}+lse", dtype, p, ()


def smoke_cases(dev: Device | None = None) -> list[SmokeCase]:
    """The fewest launches that compile every tile class and every constexpr value the planner picks.

    Sweeps the planner over head dims, head counts, span layouts, decode split, the multi-token
    kernel and both dtypes (on an uncapped sm_90 device: a capped device picks a subset), and
    picks calls greedily until every tile class (rows x BLOCK_N x Dk slices x warps x stages) and
    every constexpr value is compiled once.  The merge kernel of every kept split plan comes along.
    ``tests/compat/test_variants.py`` checks that a wider sweep finds nothing this list misses.
    """
    dev = dev or Device.target(90, "")
    calls = [(name, dtype, p, types, {_tile_class(p, dtype)} | _features(p, dtype))
             for name, dtype, p, types in _sweep(dev)]
    seen: set = set()
    cases: list[SmokeCase] = []
    while True:  # greedy set cover: the call that brings the most new items, first in sweep order on ties
        best = max(calls, key=lambda c: len(c[4] - seen))
        if not best[4] - seen:
            break
        name, dtype, p, types, items = best
        seen |= items
        kernel = "sel_fwd_tok_kernel" if p.kernel == "tokens" else "sel_fwd_kernel"
        m = p.meta
        cases.append(SmokeCase(name, kernel, m.constexprs(), m.num_warps, m.num_stages, dtype, types, p.rows))
        if p.merge_grid is not None:
            merge = {"BLOCK_H": m.BLOCK_H, "BLOCK_DV": m.BLOCK_DV, "HAS_LSE": m.HAS_LSE}
            key = ("merge",) + tuple(merge.values())
            if key not in seen:
                seen.add(key)
                cases.append(SmokeCase(f"merge_splits/{dtype}/dv{m.BLOCK_DV}/h{m.BLOCK_H}"
                                       + ("+lse" if m.HAS_LSE else ""), "merge_splits_kernel", merge, 4, 3, dtype))
    return cases


BACKWARD_MODULE = "nsa_triton_sel.kernels.backward"
# Pointer arguments whose element type is not the data dtype, and UPPERCASE sizes.
BACKWARD_TYPES = {
    "LSE": "*fp32", "DLSE": "*fp32", "DELTA": "*fp32", "WS": "*fp32",
    "SPANS": "*i32", "ENTRIES": "*i32", "CHUNKS": "*i64", "TILE_SLOTS": "*i64", "NONFINITE": "*i32", "KEYS": "*i64",
    "ORDER": "*i64", "SLOTS": "*i32", "S": "i32", "G": "i32", "T": "i32", "NT": "i32",
}
def _variant(kernel: str, name: str, constexprs: dict, warps: int, stages: int, dtype: str, rows: int) -> dict:
    """A compile-smoke variant; ``rows`` is the widest dot M, which the known-bad row caps
    (``data/known_bad.toml``, read by the registry) compare against, as for the forward."""
    return {
        "name": name, "kernel": f"{BACKWARD_MODULE}:{kernel}", "constexprs": constexprs,
        "num_warps": warps, "num_stages": stages, "dtype": dtype, "types": dict(BACKWARD_TYPES), "rows": rows,
    }


# A representative subset for the compile smoke's default run (it must stay short on a
# 2-core CI box): every kernel, both dtypes, the wide (64-row) and capped (32-row) tiles,
# Dk = 192 (two slices) and Dk = Dv = 256 (the largest).
SMOKE_SUBSET = frozenset({
    "sel_bwd_dq/fp16/dk128-dv128/h16", "sel_bwd_dq/bf16/dk192-dv128/h16", "sel_bwd_dq/fp16/dk128-dv128/h64",
    "sel_bwd_dq/fp16/dk128-dv128/h64+m32", "sel_bwd_dq/fp16/dk256-dv256/h16",
    "sel_bwd_dkdv/fp16/dk128-dv128", "sel_bwd_dkdv/bf16/dk128-dv128+m32", "sel_bwd_dkdv/bf16/dk192-dv128",
    "sel_bwd_dkdv/fp16/dk256-dv256", "sel_bwd_dkdv/fp16/dk256-dv256/rows16-stages3",
    "sel_bwd_dkdv/fp16/dk256-dv256/rows32-stages2", "sel_bwd_dkdv/fp16/dk128-dv128/rows32-stages2",
    "sel_bwd_reduce/fp16/dk128-dv128",
    "sel_bwd_dq_tok/bf16/dk128-dv128/h16/tok4", "sel_bwd_dq_tok/bf16/dk128-dv128/h16/tok2+m32",
    "sel_bwd_dq/fp16/dk128-dv128/h16+load_delta", "sel_bwd_dkdv/bf16/dk128-dv128/h64",
    "sel_bwd_reader_keys/n16/e16/bn64/i32", "sel_bwd_reader_entries/bn64/i32",
})


def _dkdv_per_shared(name: str, dtype: str, **sizes) -> list[dict]:
    """The dk/dv kernel's variants of one call class: the plan sizes its pipeline from the arch's shared memory
    (``device.SHARED_PER_BLOCK``), so each distinct plan is compiled on the archs that launch it: the plan of an
    unbounded device everywhere else (``skip_archs``), each other one (named by its rows and stages) there alone
    (``only_archs``)."""
    base = backward_meta(n_spans=16, **sizes)
    key = lambda m: (m.dkdv_constexprs(), m.kv_warps, m.kv_stages)  # noqa: E731
    others: dict = {}
    for arch, shared in sorted(SHARED_PER_BLOCK.items()):
        m = backward_meta(n_spans=16, shared=shared, **sizes)
        if key(m) != key(base):
            others.setdefault((m.ROWS, m.kv_stages), (m, []))[1].append(arch)
    out = [_variant("sel_bwd_dkdv_kernel", name, base.dkdv_constexprs(), base.kv_warps, base.kv_stages, dtype,
                    base.KV_BLOCK_N)]
    if others:
        out[0]["skip_archs"] = tuple(a for _, archs in others.values() for a in archs)
    for m, archs in others.values():
        out.append({**_variant("sel_bwd_dkdv_kernel", f"{name}/rows{m.ROWS}-stages{m.kv_stages}", m.dkdv_constexprs(),
                               m.kv_warps, m.kv_stages, dtype, m.KV_BLOCK_N), "only_archs": tuple(archs)})
    return out


def backward_variants(full: bool = False) -> list[dict]:
    """The configuration classes the backward launcher can pick, as compile-smoke specs.

    ``full=False`` gives :data:`SMOKE_SUBSET` (19 variants), ``full=True`` every class (63).

    Each dict has the :class:`.compile_spec.CompileSpec` keys ``name``, ``kernel``, ``constexprs``,
    ``num_warps``, ``num_stages``, ``dtype``, ``types``, plus ``rows``, the widest dot M:
    :func:`.specs.registry` turns it into the skips of the known-bad row caps (where the
    launcher, reading the same windows through ``plan``, caps M, the capped variants are listed
    too).  The reduce kernel does not depend on h; the dq kernel's M does (h = 16, 64), and so does the dk/dv
    kernel's walk (whole entries per step at h = 16, the flat walk at h = 64).
    """
    out = []
    head_dims = tuple((d.Dk, d.Dv) for d in M.HEAD_DIMS if d.backward)
    for dtype in ("fp16", "bf16"):
        for Dk, Dv in head_dims:
            if dtype == "bf16" and (Dk, Dv) not in ((128, 128), (192, 128)):
                continue  # bf16 changes only the element type of loads and dots
            for h in (16, 64):
                if h == 64 and (Dk, Dv) not in ((128, 128), (192, 128)):
                    continue
                wide = backward_meta(h=h, Dk=Dk, Dv=Dv, n_spans=16)
                for m, tag in ((wide, ""), (backward_meta(h=h, Dk=Dk, Dv=Dv, n_spans=16, max_rows=32), "+m32")):
                    if tag and m.dq_constexprs() == wide.dq_constexprs():
                        continue  # the cap changes nothing here
                    out.append(_variant("sel_bwd_dq_kernel", f"sel_bwd_dq/{dtype}/dk{Dk}-dv{Dv}/h{h}{tag}",
                                        m.dq_constexprs(), m.dq_warps, m.dq_stages, dtype, m.BLOCK_H))
            wide = backward_meta(h=16, Dk=Dk, Dv=Dv, n_spans=16)
            for m, tag in ((wide, ""), (backward_meta(h=16, Dk=Dk, Dv=Dv, n_spans=16, max_rows=32), "+m32")):
                if tag and m.KV_BLOCK_N == wide.KV_BLOCK_N:
                    continue
                out += _dkdv_per_shared(f"sel_bwd_dkdv/{dtype}/dk{Dk}-dv{Dv}{tag}", dtype, h=16, Dk=Dk, Dv=Dv,
                                        max_rows=32 if tag else 64)
                out.append(_variant("sel_bwd_reduce_kernel", f"sel_bwd_reduce/{dtype}/dk{Dk}-dv{Dv}{tag}",
                                    m.reduce_constexprs(), REDUCE_WARPS, 1, dtype, 0))
            if (Dk, Dv) == (128, 128):  # more heads than pairs per step: the flat walk (KV_HP = 0)
                out += _dkdv_per_shared(f"sel_bwd_dkdv/{dtype}/dk{Dk}-dv{Dv}/h64", dtype, h=64, Dk=Dk, Dv=Dv)
    for dtype, h, Dk, Dv, cap in (("fp16", 16, 128, 128, 64), ("bf16", 16, 128, 128, 64), ("bf16", 16, 192, 128, 64),
                                  ("fp16", 4, 64, 64, 64), ("bf16", 16, 128, 128, 32)):
        m = backward_meta(h=h, Dk=Dk, Dv=Dv, n_spans=16, max_rows=cap, dq_tokens=dq_tokens_per_program(h, cap))
        tag = "" if cap == 64 else "+m32"
        out.append(_variant("sel_bwd_dq_tok_kernel", f"sel_bwd_dq_tok/{dtype}/dk{Dk}-dv{Dv}/h{h}/tok{m.TOK}{tag}",
                            m.dq_tok_constexprs(), m.tok_warps, m.tok_stages, dtype, m.TOK * m.HP))
    m = backward_meta(h=16, Dk=128, Dv=128, n_spans=16, delta="fp32")
    for dtype in ("fp16", "bf16"):
        out.append(_variant("sel_bwd_dq_kernel", f"sel_bwd_dq/{dtype}/dk128-dv128/h16+load_delta",
                            m.dq_constexprs(), m.dq_warps, m.dq_stages, dtype, m.BLOCK_H))
    # The reader list's kernels read only spans and integer keys: one dtype; 16 entries a row (block indices)
    # and the 64-slot loop of unbounded ranges; the 32-key tiles of the row-capped planner.
    for cap in (64, 32):
        m = backward_meta(h=16, Dk=128, Dv=128, n_spans=16, max_rows=cap)
        for per_row, keys in ((16, "i32"), (528, "i64")):  # int32 keys where they fit (readers.reader_list)
            ce = m.reader_keys_constexprs(per_row)
            out.append(_variant("sel_bwd_reader_keys_kernel",
                                f"sel_bwd_reader_keys/n16/e{ce['BLOCK_E']}/bn{m.KV_BLOCK_N}/{keys}",
                                ce, READER_KEYS_WARPS, 1, "fp16", 0))
            out[-1]["types"]["KEYS"] = "*" + keys
            out.append(_variant("sel_bwd_reader_entries_kernel", f"sel_bwd_reader_entries/bn{m.KV_BLOCK_N}/{keys}",
                                {"BLOCK_N": m.KV_BLOCK_N, "BLOCK": READER_BLOCK}, READER_ENTRIES_WARPS, 1, "fp16", 0))
            out[-1]["types"]["KEYS"] = "*" + keys
    return out if full else [d for d in out if d["name"] in SMOKE_SUBSET]


FORWARD_MODULE = "nsa_triton_sel.kernels.forward"
KEYMAJOR_WS_MODULE = "nsa_triton_sel.kernels.keymajor_ws"
KEYMAJOR_BWD_GLUON_MODULE = "nsa_triton_sel.kernels.keymajor_bwd_gluon"
# The key-major forward's pointers of another element type, and its UPPERCASE sizes.
KEYMAJOR_TYPES = {
    "OP": "*fp16", "OP_SCALE": "*fp32", "LP": "*fp32", "LSE": "*fp32", "SPANS": "*i32", "ENTRIES": "*i32",
    "ORIGIN": "*i64", "CHUNKS": "*i64", "S": "i32", "G": "i32", "T": "i32", "NT": "i32", "DQP": "*fp16",
    "DQP_SCALE": "*fp32", "DELTA": "*fp32", "DO_L1_LOG2": "*fp32",
    "DLSE": "*fp32", "NONFINITE": "*i32", "WS": "*fp32", "CHUNKS_LEFT": "*i64",
}


def keymajor_variants() -> list[dict]:
    """The key-major forward's configuration classes (``plan.keymajor``), as compile-smoke specs in the format of
    :func:`backward_variants`: every padded group size up to the largest group the planner runs key-major (1, 2,
    4, ... up to ``MAX_H``; an odd h pads to the next power of two) in bf16, and h = 1 and 4 in fp16 too (the MMA
    of each dtype; the other group sizes change only the tile layout), Dk = 128 and Dk = 192 with Dv = 128 (two Dk
    slices, 32-key tiles, one head), the warp-specialised Gluon partial kernel where the planner runs it (bf16, Dk
    = Dv = 128, sm_90 on Triton >= 3.6: ``plan.keymajor.takes_ws``), and the merge with
    and without the LSE; the key-major backward (dk, dv and partial dq, on the same configuration; its Gluon kernel
    where the planner launches it: ``plan.keymajor.takes_gluon_backward``), its delta pass and its dq merge alike.  Only full 64-pair steps: the planner runs token-major under a row cap
    (``plan.keymajor.key_major``)."""
    from ...device import GLUON_WS_ARCHS, GLUON_WS_SINCE, SHARED_PER_BLOCK
    from ...plan.keymajor import BWD_GLUON_WARPS, DEEP_SHARED, MAX_H, WS_REGISTERS, WS_WARPS, keymajor_meta
    from ...plan.tiles import next_pow2

    groups = [1 << i for i in range(next_pow2(MAX_H).bit_length())]
    deep_archs = tuple(sorted(a for a, b in SHARED_PER_BLOCK.items() if b >= DEEP_SHARED))
    out = []
    for dtype in ("fp16", "bf16"):
        for (Dk, Dv), h in [((128, 128), g) for g in groups if dtype == "bf16" or g in (1, 4)] + [((192, 128), 1)]:
            # the Gluon kernels where the planner launches them (bf16 calls on a Triton that has them: m.ws,
            # m.bwd_gluon); the Triton kernels' constexprs do not depend on it
            m, deep = (keymajor_meta(h=h, Dk=Dk, Dv=Dv, n_spans=16, T=8192, span_len=64, aligned=True, B=1, S=8192,
                                     G=4, sm_count=132, shared=shared, gluon_ws=dtype == "bf16",
                                     gluon_bwd=dtype == "bf16") for shared in (None, DEEP_SHARED))
            tag = f"{dtype}/dk{Dk}-dv{Dv}/h{h}"
            fwd = {"name": f"sel_fwd_keymajor/{tag}", "kernel": f"{FORWARD_MODULE}:sel_fwd_keymajor_kernel",
                   "constexprs": m.kernel_constexprs(), "num_warps": m.num_warps, "num_stages": m.num_stages,
                   "dtype": dtype, "types": dict(KEYMAJOR_TYPES), "rows": m.ROWS}
            if deep.num_stages == m.num_stages:
                out.append(fwd)
            else:  # the archs whose programs hold the deeper pipeline run it, the others the shallow one
                out.append({**fwd, "skip_archs": deep_archs})
                out.append({**fwd, "name": f"{fwd['name']}/stages{deep.num_stages}", "num_stages": deep.num_stages,
                            "only_archs": deep_archs})
            if m.ws:  # the warp-specialised Gluon partial kernel
                out.append({"name": f"sel_fwd_keymajor_ws/{tag}", "kernel": f"{KEYMAJOR_WS_MODULE}:sel_fwd_keymajor_ws_kernel",
                            "constexprs": m.ws_constexprs(), "num_warps": WS_WARPS, "num_stages": 1,
                            "maxnreg": WS_REGISTERS, "dtype": dtype, "types": dict(KEYMAJOR_TYPES), "rows": m.ROWS,
                            "only": {f">={GLUON_WS_SINCE}": GLUON_WS_ARCHS}})
            if m.bwd_gluon:  # the backward's Gluon kernel
                out.append({"name": f"sel_bwd_keymajor_gluon/{tag}",
                            "kernel": f"{KEYMAJOR_BWD_GLUON_MODULE}:sel_bwd_keymajor_gluon_kernel",
                            "constexprs": m.bwd_gluon_constexprs(), "num_warps": BWD_GLUON_WARPS, "num_stages": 1,
                            "dtype": dtype, "types": dict(KEYMAJOR_TYPES), "rows": m.BLOCK_N,
                            "only": {f">={GLUON_WS_SINCE}": GLUON_WS_ARCHS}})
            out.append({"name": f"sel_bwd_keymajor/{tag}", "kernel": f"{BACKWARD_MODULE}:sel_bwd_keymajor_kernel",
                        "constexprs": m.bwd_constexprs(), "num_warps": m.bwd_warps, "num_stages": m.bwd_stages,
                        "dtype": dtype, "types": dict(KEYMAJOR_TYPES), "rows": max(m.bwd_rows, m.BLOCK_N)})
            if h == 1:  # the delta pass has no head dimension of its own
                out.append({"name": f"sel_bwd_dq_keymajor_delta/{dtype}/dk{Dk}-dv{Dv}",
                            "kernel": f"{BACKWARD_MODULE}:sel_bwd_dq_keymajor_delta_kernel",
                            "constexprs": m.delta_constexprs(), "num_warps": 4, "num_stages": 1, "dtype": dtype,
                            "types": dict(KEYMAJOR_TYPES), "rows": 0})
            if (Dk, Dv) == (128, 128):
                out.append({"name": f"sel_bwd_dq_keymajor_merge/{tag}",
                            "kernel": f"{BACKWARD_MODULE}:sel_bwd_dq_keymajor_merge_kernel",
                            "constexprs": m.dq_merge_constexprs(Dk), "num_warps": 4, "num_stages": 1, "dtype": dtype,
                            "types": dict(KEYMAJOR_TYPES), "rows": 0})
            for has_lse in (True, False):
                if (Dk, Dv) != (128, 128):
                    break
                ce = {**m.merge_constexprs(), "HAS_LSE": has_lse}
                out.append({"name": f"sel_fwd_keymajor_merge/{tag}" + ("+lse" if has_lse else ""),
                            "kernel": f"{FORWARD_MODULE}:sel_fwd_keymajor_merge_kernel", "constexprs": ce,
                            "num_warps": 4, "num_stages": 1, "dtype": dtype, "types": dict(KEYMAJOR_TYPES),
                            "rows": 0})
    return out
