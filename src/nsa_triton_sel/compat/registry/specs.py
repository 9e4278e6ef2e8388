"""This package's compile registry: every kernel variant the launchers can pick, enumerated in one place, in the
format of :mod:`.compile_spec` (``CompileSpec`` is re-exported here: a team's spec modules import it from either).
"""

from __future__ import annotations

import dataclasses
import importlib

from .compile_spec import CompileSpec, check_unique

__all__ = ["CompileSpec", "SEL_TYPES", "SPECS", "backward_specs", "capped_specs", "keymajor_specs", "registry",
           "uncovered_kernels"]

# Pointer arguments of this package's kernels whose element type is not the data dtype.
SEL_TYPES = {
    "LSE": "*fp32",   # natural-log LSE output
    "OP": "*fp32",    # split-L partial outputs
    "LP": "*fp32",    # split-L partial log2-LSE
    "SPANS": "*i32",  # ranges [B, S, G, n, 2] or cu_seqlens
    "S": "i32",       # UPPERCASE sizes, not pointers
    "G": "i32",
}


# ---------------------------------------------------------------- this package's registry
#
# Derived from the launch planner (registry/variants.py sweeps nsa_triton_sel.plan): the variants are the launches
# the launchers can pick, and a variant whose dot is wider than a known-bad window's max_rows
# (data/known_bad.toml) is skipped there, because the planner never launches it there.  Nothing
# here is written by hand, so the registry cannot drift from the launchers.

FORWARD = "nsa_triton_sel.kernels.forward"
SEL_FWD = f"{FORWARD}:sel_fwd_kernel"
MERGE = f"{FORWARD}:merge_splits_kernel"
SEL_TOK = f"{FORWARD}:sel_fwd_tok_kernel"
ANY_RELEASE = ">=0"  # a version specifier every Triton release satisfies


def _skips(rows: int, name: str = "") -> dict | None:
    """{triton specifier: archs} where this variant is not compiled: the variants of a launch path a window
    steers the planner off (``paths``), the variants a row-cap window names (``variants``: the ones that abort
    there), or, for a row-cap window that names none, every variant wider than its cap (the capped planner
    never launches those there)."""
    from ... import known_bad

    skips = {}
    for w in known_bad.load():
        if not w.arch or (w.max_rows is None and not w.paths):
            continue
        hit = w.names(name) if (w.variants or w.paths) else rows > w.max_rows
        if hit:
            skips[str(w.triton)] = tuple(sorted(set(skips.get(str(w.triton), ())) | set(w.arch)))
    return skips or None


def _ident(kernel: str, constexprs, num_warps, num_stages, dtype, types) -> tuple:
    return (kernel.rpartition(":")[2], tuple(sorted(constexprs.items())), num_warps, num_stages, dtype,
            tuple(sorted({**SEL_TYPES, **dict(types)}.items())))


def capped_specs(specs: list[CompileSpec]) -> list[CompileSpec]:
    """What the planner launches under each row-cap window (``max_rows`` on some archs) that ``specs``
    do not already compile: ``variants.smoke_cases`` on a device capped at the window's rows, compiled only
    on the window's Triton releases and archs (``only``), named ``<case>+cap<rows>``."""
    from ... import known_bad
    from ...device import Device
    from .variants import smoke_cases

    have = {_ident(s.kernel, s.constexprs, s.num_warps, s.num_stages, s.dtype, s.types) for s in specs}
    out = []
    for w in known_bad.load():
        if w.max_rows is None or not w.arch:
            continue
        for arch in w.arch:
            dev = dataclasses.replace(Device.target(arch, ""), max_rows=w.max_rows)
            for case in smoke_cases(dev):
                key = _ident(case.kernel, case.constexprs, case.num_warps, case.num_stages, case.dtype, case.types)
                if key in have:
                    continue
                have.add(key)
                out.append(CompileSpec(
                    name=f"{case.name}+cap{w.max_rows}", kernel=f"{FORWARD}:{case.kernel}", constexprs=case.constexprs,
                    dtype=case.dtype, types={**SEL_TYPES, **dict(case.types)}, num_warps=case.num_warps,
                    num_stages=case.num_stages, only={str(w.triton): tuple(w.arch)},
                    note=f"launched under [{w.id}] (max_rows={w.max_rows})"))
    return out


def registry() -> list[CompileSpec]:
    """Every shipped variant class: one compile per tile class and constexpr value the planner picks.

    ``variants.smoke_cases()`` sweeps the planner over head dims (64/96/128/192/256, Dk != Dv),
    head blocks (16/32/64 rows and the per-head path), the ranges, block-index, dense and varlen
    layouts, decode split (with its merge), the multi-token kernel, fp16 and bf16, and keeps the
    fewest launches that cover them: about 60 compiles per arch.
    """
    from .variants import smoke_cases

    specs = []
    for case in smoke_cases():
        rows = case.rows or case.constexprs.get("BLOCK_H", 0)
        specs.append(CompileSpec(
            name=case.name, kernel=f"{FORWARD}:{case.kernel}", constexprs=case.constexprs, dtype=case.dtype,
            types={**SEL_TYPES, **dict(case.types)}, num_warps=case.num_warps, num_stages=case.num_stages,
            skip=_skips(rows, case.name), note=", ".join(f"{k}={v}" for k, v in case.constexprs.items()),
        ))
    specs += capped_specs(specs)
    specs += keymajor_specs()
    specs += backward_specs()
    check_unique(specs)
    return specs


def keymajor_specs() -> list[CompileSpec]:
    """The key-major forward's variant classes (``variants.keymajor_variants``), skipped where a window steers
    the planner off the path."""
    from .variants import keymajor_variants

    return _dict_specs(keymajor_variants())


def backward_specs(full: bool = False) -> list[CompileSpec]:
    """The backward kernels' variant classes (``variants.backward_variants``), with the
    same data-driven skips as the forward's: a variant whose dot is wider than a known-bad row cap is
    never launched there."""
    from .variants import backward_variants

    return _dict_specs(backward_variants(full))


def _dict_specs(variants: list[dict]) -> list[CompileSpec]:
    """Specs of variant dicts: ``rows`` (the widest dot M, for the row-cap windows' skips), and where the
    planner launches a variant on some archs only, ``only_archs`` (compiled there alone) or ``skip_archs`` (not
    compiled there), on every Triton release, or ``only`` (``{triton specifier: archs}``: compiled where one
    holds)."""
    specs = []
    for d in variants:
        d = dict(d)
        rows = d.pop("rows")
        skip = _skips(rows, d["name"]) or {}
        if "skip_archs" in d:
            skip[ANY_RELEASE] = tuple(sorted(set(skip.get(ANY_RELEASE, ())) | set(d.pop("skip_archs"))))
        only = {ANY_RELEASE: tuple(d.pop("only_archs"))} if "only_archs" in d else d.pop("only", None)
        specs.append(CompileSpec(**d, skip=skip or None, only=only, note=f"rows={rows}"))
    return specs


SPECS = registry()


def uncovered_kernels(module: str = FORWARD, specs=None) -> list[str]:
    """Public ``@triton.jit`` kernels of ``module`` that no spec compiles (imports triton)."""
    mod = importlib.import_module(module)
    covered = {s.kernel for s in (SPECS if specs is None else specs)}
    names = [n for n, obj in vars(mod).items()
             if not n.startswith("_") and hasattr(obj, "arg_names")]  # JIT or interpreted kernels
    return [n for n in names if f"{module}:{n}" not in covered]
