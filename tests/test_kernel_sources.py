"""Static rules on the kernel sources that GPU evidence depends on.

The GPU canary ``cumsum_spans`` fires on Triton 3.0 and 3.2 for sm_90 (tl.cumsum prefix sums broadcast into
span indexing give wrong keys); the note in ``compat/canaries/notes.toml`` says our kernels are not hit
because they compute prefix sums with triangular masked reductions.  This test is what keeps that true.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import triton.language as tl

from nsa_triton_sel import provenance

CUMSUM = re.compile(r"\btl\s*\.\s*cumsum\s*\(")


def _code_lines(text: str) -> list[tuple[int, str]]:
    """(line number, code) without comments and docstring lines (which may name tl.cumsum to explain)."""
    out, in_doc = [], False
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        quotes = stripped.count('"""')
        if in_doc or stripped.startswith('"""'):
            in_doc = in_doc != (quotes % 2 == 1)
            continue
        out.append((n, line.split("#", 1)[0]))
    return out


def test_no_kernel_calls_tl_cumsum():
    calls = [f"{name}:{n}: {code.strip()}" for name, body in provenance.kernel_sources().items()
             for n, code in _code_lines(body.decode()) if CUMSUM.search(code)]
    assert not calls, "tl.cumsum miscompiles on Triton 3.0/3.2 for sm_90 (canaries/notes.toml); use the " \
                      f"triangular prefix sum of kernels/common.py _prefix_sum instead: {calls}"


def test_the_rule_sees_a_call():
    """The rule can fail: a call in code is found, the same words in a comment or a docstring are not."""
    src = 'def f():\n    """uses tl.cumsum(x) in prose"""\n    y = tl.cumsum(x, 0)  # tl.cumsum(\n'
    assert [n for n, code in _code_lines(src) if CUMSUM.search(code)] == [3]


# -- one standard for the kernel modules --

KERNELS = Path(provenance.KERNEL_DIR)
KERNEL_MODULES = ("forward.py", "backward.py", "common.py")
MODES = ("MODE_RANGES", "MODE_DENSE", "MODE_CU", "MODE_BLOCKS")


def _planner_modes() -> dict[str, int]:
    """The host planner's span modes, wherever the planner keeps them (plan.tiles, formerly kernels.meta)."""
    for name in ("nsa_triton_sel.plan.tiles", "nsa_triton_sel.kernels.meta"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        if all(hasattr(mod, m) for m in MODES):
            return {m: getattr(mod, m) for m in MODES}
    raise AssertionError("no planner module with MODE_* found (tried nsa_triton_sel.plan.tiles, kernels.meta)")


def test_kernel_span_modes_are_the_planners():
    from nsa_triton_sel.kernels import common

    kernel = {m: getattr(common, m) for m in MODES}
    assert all(isinstance(v, tl.constexpr) for v in kernel.values()), kernel
    assert {m: v.value for m, v in kernel.items()} == _planner_modes()


def test_kernel_globals_are_constexpr_objects():
    """A global read in @triton.jit code must be a tl.constexpr (plain ints/floats break on some 3.x)."""
    from nsa_triton_sel.kernels import common

    for name in (*MODES, "LN2", "LOG2E"):
        assert isinstance(getattr(common, name), tl.constexpr), name


def _jit_functions(text: str) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)
            and any("jit" in ast.unparse(d) for d in n.decorator_list)}


def _body_without_docstring(fn: ast.FunctionDef) -> str:
    body = fn.body[1:] if fn.body and isinstance(fn.body[0], ast.Expr) \
        and isinstance(fn.body[0].value, ast.Constant) and isinstance(fn.body[0].value.value, str) else fn.body
    return ast.dump(ast.Module(body=body, type_ignores=[]))


def test_no_jit_helper_is_written_twice():
    """Shared helpers live once, in kernels/common.py: no two @triton.jit functions of the kernel modules
    have the same body (forward._cumsum and backward._prefix_sum used to be one copied into the other)."""
    seen, twice = {}, []
    for name in KERNEL_MODULES:
        for fn_name, fn in _jit_functions((KERNELS / name).read_text()).items():
            key = _body_without_docstring(fn)
            if key in seen:
                twice.append(f"{name}:{fn_name} == {seen[key]}")
            seen.setdefault(key, f"{name}:{fn_name}")
    assert not twice, f"duplicated @triton.jit bodies (move them to kernels/common.py): {twice}"


LITERAL_MODE = re.compile(r"\bSPAN_MODE\s*[!=]=\s*\d")
LOG_CONSTANT = re.compile(r"\b(1\.44269504|0\.69314718)")


def test_kernels_name_their_modes_and_log_constants():
    """SPAN_MODE is compared with MODE_* (never a bare number), and log2(e)/ln(2) are written once, in
    common.py (backward._log2_lse used to spell log2(e) as a literal)."""
    bad = []
    for name in ("forward.py", "backward.py"):
        for n, code in _code_lines((KERNELS / name).read_text()):
            if LITERAL_MODE.search(code) or LOG_CONSTANT.search(code):
                bad.append(f"{name}:{n}: {code.strip()}")
    assert not bad, f"use the named constants of kernels/common.py: {bad}"


def test_common_helpers_fit_the_installed_triton():
    """static_check follows only same-module helpers, so the shared ones are checked here on their own."""
    import triton
    from packaging.version import Version

    from nsa_triton_sel.compat.smoke import static_check

    for name, rep in static_check.check_file(str(KERNELS / "common.py")).items():
        assert rep.allows(Version(triton.__version__)), (name, rep.to_dict())


def test_kernel_modules_import_only_triton_and_common():
    """The compile-smoke children load the kernel modules without torch; common.py must stay that way too."""
    allowed = {"triton", "triton.language", "common"}
    for name in KERNEL_MODULES:
        tree = ast.parse((KERNELS / name).read_text())
        for node in tree.body:
            if isinstance(node, ast.Import):
                mods = {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                mods = {node.module or ""}
            else:
                continue
            assert mods <= allowed, f"{name} imports {sorted(mods - allowed)}: kernel modules import only triton"
