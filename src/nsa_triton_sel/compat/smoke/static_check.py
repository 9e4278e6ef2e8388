"""Static check of kernel sources for Triton APIs outside a version range (AST, not regex).

Each ``@triton.jit`` function gets the intersection of the version ranges of the APIs it
uses (directly or through same-module ``@triton.jit`` helpers it calls), e.g.
``make_block_ptr`` -> ``<3.9``, ``make_tensor_descriptor`` -> ``>=3.4``.  Names are
resolved through the module's imports (``import triton.language as tl``, ``from triton
import language``), so an alias cannot hide a call and a comment or string cannot fake one.

One rule is about shapes rather than names: a ``tl.load`` whose pointer tile is narrower
than its mask (``X + offs[None, :]`` with a ``[:, None] & [None, :]`` mask) relies on the
two-way broadcast that only 3.5+ does - and usually hides a missing ``[:, None]``; the
same through ``tl.store`` compiles on no 3.x.  The shape inference is deliberately small
(``tl.arange``, ``[:, None]``/``[None, :]``, arithmetic, ``where``, ``.to``); anything
it cannot follow is left alone rather than guessed.

Run as ``python -m nsa_triton_sel.compat.smoke.static_check FILE.py...``.  Imports neither triton nor torch.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from dataclasses import asdict, dataclass, field

from packaging.specifiers import SpecifierSet
from packaging.version import Version

NEVER = "<0"  # a specifier no version satisfies

# qualified name -> (versions that have it, why)
API_RULES = {
    "triton.language.make_block_ptr": ("<3.9", "block pointers were removed in 3.9 (NotImplementedError)"),
    "triton.language.advance": ("<3.9", "tl.advance is not exported from 3.9"),
    "triton.language.make_tensor_descriptor": (">=3.4", "tensor descriptors need 3.4"),
    "triton.language._experimental_make_tensor_descriptor": (">=3.3,<3.4", "experimental name of 3.3"),
    "triton.tools.tensor_descriptor.TensorDescriptor": (">=3.4", "host tensor descriptors need 3.4"),
    "triton.tools.tensor_descriptor": (">=3.4", "triton.tools.tensor_descriptor needs 3.4"),
    "triton.ops": ("<3.2", "triton.ops was removed in 3.2"),
}
# (qualified callee, keyword) -> (versions, why)
KEYWORD_RULES = {
    ("triton.testing.do_bench", "fast_flush"): ("<3.2", "do_bench(fast_flush=...) was removed in 3.2"),
}
LOAD_BROADCAST = (">=3.5", "load through a pointer tile narrower than its mask: two-way broadcast needs 3.5+ "
                           "(and often hides a missing [:, None])")
STORE_BROADCAST = (NEVER, "store through a pointer tile narrower than its mask: a compile error on every 3.x")


@dataclass
class Finding:
    api: str
    line: int
    needs: str
    why: str


@dataclass
class KernelReport:
    """What one ``@triton.jit`` function (with its helpers) needs."""

    kernel: str
    findings: list = field(default_factory=list)

    @property
    def needs(self) -> str:
        """The intersection of the findings' ranges, ``""`` when unconstrained."""
        spec = SpecifierSet("")
        for f in self.findings:
            spec &= SpecifierSet(f.needs)
        return str(spec)

    def allows(self, version) -> bool:
        if any(f.needs == NEVER for f in self.findings):
            return False
        return SpecifierSet(self.needs).contains(Version(str(version)), prereleases=True)

    def to_dict(self, version=None) -> dict:
        out = {"needs": self.needs if not any(f.needs == NEVER for f in self.findings) else "none",
               "findings": [asdict(f) for f in self.findings]}
        if version is not None:
            out["installed_ok"] = self.allows(version)
        return out


# ---------------------------------------------------------------- name resolution

def import_aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> qualified name for the module's imports (top level and nested)."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    aliases[a.asname] = a.name
                else:
                    head = a.name.split(".")[0]
                    aliases[head] = head
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    return aliases


def dotted(node) -> str | None:
    """``tl.language.x`` for an attribute chain over a name, else ``None``."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def qualify(node, aliases: dict) -> str | None:
    name = dotted(node)
    if name is None:
        return None
    head, _, rest = name.partition(".")
    if head not in aliases:
        return None
    return aliases[head] + ("." + rest if rest else "")


def _rule_for(qual: str):
    """The API rule whose name is ``qual`` or a prefix module of it."""
    for name, rule in API_RULES.items():
        if qual == name or qual.startswith(name + "."):
            return name, rule
    return None


# ---------------------------------------------------------------- shape inference (tiny)

# A shape is (rank, axes): tl.arange -> (1, {1}); x[:, None] -> (2, {0}); x[None, :] -> (2, {1});
# a scalar is (0, set()); None means "cannot tell".


def _union(a, b):
    if a is None or b is None:
        return None
    return (max(a[0], b[0]), a[1] | b[1])


class _Shapes:
    def __init__(self, aliases: dict, params: set):
        self.aliases, self.env = aliases, {p: (0, frozenset()) for p in params}

    def of(self, node):
        if isinstance(node, ast.Constant):
            return (0, frozenset())
        if isinstance(node, ast.Name):
            return self.env.get(node.id)
        if isinstance(node, ast.BinOp):
            return _union(self.of(node.left), self.of(node.right))
        if isinstance(node, ast.BoolOp):
            return self._fold(node.values)
        if isinstance(node, ast.Compare):
            return self._fold([node.left, *node.comparators])
        if isinstance(node, ast.UnaryOp):
            return self.of(node.operand)
        if isinstance(node, ast.Subscript):
            return self._subscript(node)
        if isinstance(node, ast.Call):
            return self._call(node)
        return None

    def _fold(self, nodes):
        shape = (0, frozenset())
        for n in nodes:
            shape = _union(shape, self.of(n))
        return shape

    def _subscript(self, node):
        base = self.of(node.value)
        idx = node.slice
        if base is None or base[0] != 1 or not isinstance(idx, ast.Tuple) or len(idx.elts) != 2:
            return None
        kinds = ["none" if isinstance(e, ast.Constant) and e.value is None else
                 "all" if isinstance(e, ast.Slice) else "?" for e in idx.elts]
        if kinds == ["all", "none"]:
            return (2, frozenset({0}))
        if kinds == ["none", "all"]:
            return (2, frozenset({1}))
        return None

    def _call(self, node):
        fn = qualify(node.func, self.aliases)
        if fn == "triton.language.arange":
            return (1, frozenset({1}))
        if fn in ("triton.language.where", "triton.language.maximum", "triton.language.minimum"):
            return self._fold(node.args)
        if isinstance(node.func, ast.Attribute) and node.func.attr == "to":
            return self.of(node.func.value)
        return None

    def assign(self, stmt):
        if isinstance(stmt, ast.Assign):
            shape = self.of(stmt.value)
            for t in stmt.targets:
                if isinstance(t, ast.Name):
                    self.env[t.id] = shape
                else:  # tuple unpacking etc.: forget what we knew
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name):
                            self.env[n.id] = None
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            self.env[stmt.target.id] = _union(self.env.get(stmt.target.id), self.of(stmt.value))


def _narrower(ptr, mask) -> bool:
    """True when the pointer tile lacks a dimension that the 2-D mask has."""
    if ptr is None or mask is None or mask[0] != 2 or len(mask[1]) != 2:
        return False
    return ptr[1] < mask[1] or ptr[0] < 2


def _broadcast_findings(fn: ast.FunctionDef, aliases: dict) -> list[Finding]:
    params = {a.arg for a in fn.args.args}
    shapes, out = _Shapes(aliases, params), []
    for stmt in _statements(fn.body):
        for call in (n for n in ast.walk(stmt) if isinstance(n, ast.Call)):
            kind = qualify(call.func, aliases)
            if kind not in ("triton.language.load", "triton.language.store"):
                continue
            is_load = kind.endswith("load")
            mask = _arg(call, "mask", 1 if is_load else 2)
            ptr = _arg(call, "pointer", 0)
            if ptr is not None and mask is not None and _narrower(shapes.of(ptr), shapes.of(mask)):
                needs, why = LOAD_BROADCAST if is_load else STORE_BROADCAST
                out.append(Finding(api=f"tl.{'load' if is_load else 'store'} mask broadcast",
                                   line=call.lineno, needs=needs, why=why))
        shapes.assign(stmt)
    return out


def _statements(body):
    """Statements in source order, descending into if/for/while/with bodies."""
    for stmt in body:
        yield stmt
        for attr in ("body", "orelse", "finalbody"):
            inner = getattr(stmt, attr, None)
            if isinstance(inner, list) and not isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
                yield from _statements(inner)


def _arg(call: ast.Call, name: str, pos: int):
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return call.args[pos] if len(call.args) > pos else None


# ---------------------------------------------------------------- per function, per module

def _api_findings(node, aliases) -> list[Finding]:
    out = []
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            callee = qualify(n.func, aliases)
            for kw in n.keywords:
                rule = KEYWORD_RULES.get((callee, kw.arg))
                if rule:
                    out.append(Finding(api=f"{callee}({kw.arg}=...)", line=n.lineno, needs=rule[0], why=rule[1]))
        if isinstance(n, (ast.Attribute, ast.Name)) and not isinstance(getattr(n, "ctx", None), ast.Store):
            qual = qualify(n, aliases)
            hit = _rule_for(qual) if qual else None
            if hit and not _is_prefix_of_parent(n):
                out.append(Finding(api=qual, line=n.lineno, needs=hit[1][0], why=hit[1][1]))
    return out


def _is_prefix_of_parent(node) -> bool:
    return getattr(node, "_nsa_parent_attr", False)


def _mark_parents(tree):
    """Mark attribute nodes that are the ``value`` of a longer chain (report each use once)."""
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and isinstance(n.value, (ast.Attribute, ast.Name)):
            n.value._nsa_parent_attr = True


def _is_jit(fn: ast.FunctionDef, aliases) -> bool:
    for d in fn.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if qualify(target, aliases) in ("triton.jit", "triton.runtime.jit.jit"):
            return True
    return False


def _import_findings(tree) -> list[Finding]:
    """Imports of modules a rule covers (``from triton.tools.tensor_descriptor import ...``)."""
    out = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            hit = _rule_for(name)
            if hit:
                out.append(Finding(api=f"import {name}", line=node.lineno, needs=hit[1][0], why=hit[1][1]))
    return out


def check_source(source: str, filename: str = "<source>") -> dict[str, KernelReport]:
    """One :class:`KernelReport` per ``@triton.jit`` function, plus ``<module>`` for the rest."""
    tree = ast.parse(source, filename)
    _mark_parents(tree)
    aliases = import_aliases(tree)
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    jit = {name for name, fn in funcs.items() if _is_jit(fn, aliases)}
    own = {name: _api_findings(funcs[name], aliases) + _broadcast_findings(funcs[name], aliases) for name in jit}
    reports = {}
    for name in jit:
        rep = KernelReport(kernel=name)
        for helper in sorted(_reachable(name, funcs, jit)):
            rep.findings += own[helper]
        rep.findings.sort(key=lambda f: f.line)
        reports[name] = rep
    rest = [n for n in tree.body if not (isinstance(n, ast.FunctionDef) and n.name in jit)]
    module = KernelReport(kernel="<module>", findings=_import_findings(tree))
    for node in rest:
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            module.findings += _api_findings(node, aliases)
    reports["<module>"] = module
    return reports


def _reachable(name, funcs, jit) -> set:
    """``name`` and the same-module ``@triton.jit`` helpers it calls, transitively."""
    seen, todo = set(), [name]
    while todo:
        cur = todo.pop()
        if cur in seen:
            continue
        seen.add(cur)
        for n in ast.walk(funcs[cur]):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in jit:
                todo.append(n.func.id)
    return seen


def check_file(path: str) -> dict[str, KernelReport]:
    with open(path, encoding="utf-8") as f:
        return check_source(f.read(), path)


def source_file(kernel_ref: str) -> str | None:
    """The file behind ``module:attr`` (found without importing it) or ``file.py:attr``."""
    target = kernel_ref.rpartition(":")[0]
    if target.endswith(".py"):
        return target
    try:
        spec = importlib.util.find_spec(target)
    except (ImportError, ValueError):
        return None
    return spec.origin if spec and spec.origin and spec.origin.endswith(".py") else None


def check_specs(specs, version=None) -> dict:
    """``{kernel ref: {"needs", "findings", "installed_ok"}}`` for the kernels of ``specs``."""
    out, cache = {}, {}
    for spec in specs:
        ref = spec.kernel
        if ref in out:
            continue
        path = source_file(ref)
        if path is None:
            continue
        if path not in cache:
            try:
                cache[path] = check_file(path)
            except (OSError, SyntaxError) as e:
                cache[path] = e
        reports = cache[path]
        if isinstance(reports, Exception):
            out[ref] = {"needs": "", "findings": [], "error": str(reports)}
            continue
        rep = reports.get(ref.rpartition(":")[2])
        if rep is not None:
            out[ref] = rep.to_dict(version if version not in (None, "unknown") else None)
    return out


def main(argv: list[str] | None = None) -> int:
    """Print what each kernel of the given files needs; exit 1 if one needs no 3.x at all."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print("usage: python -m nsa_triton_sel.compat.smoke.static_check FILE.py...", file=sys.stderr)
        return 2
    bad = False
    for path in argv:
        for name, rep in check_file(path).items():
            info = rep.to_dict()
            bad |= info["needs"] == "none"
            print(f"{path}:{name}: needs triton {info['needs'] or 'any'}")
            for f in rep.findings:
                print(f"    line {f.line}: {f.api} ({f.needs}): {f.why}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
