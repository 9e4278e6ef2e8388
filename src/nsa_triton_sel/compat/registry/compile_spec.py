"""The compile-spec format: one ``@triton.jit`` kernel specialisation to compile ahead of time, the rule that types
its runtime arguments, and loading spec modules (this package's registry is :mod:`.specs`; a team's own kernels
come as a module of the same format).

A :class:`CompileSpec` names a ``@triton.jit`` kernel (``"module:attr"`` or
``"path/file.py:attr"``), the constexpr values and launch options of one
specialisation, and the element dtype of its data pointers.  It never lists the
kernel's runtime arguments: :func:`derive_signature` reads them from the
JITFunction (``fn.params``) and types them with a small rule, so an argument the
kernel gains later is typed without editing this file or the smoke code:

- a name listed in ``spec.types`` gets that type (``"{dtype}"`` is substituted): the one mapping that gives
  pointers of another element type (``{"lse_ptr": "*fp32"}``) and every other exception;
- ``cu_seqlens``, ``cu_seqlens_q``, ... are ``*i32`` (the packed-batch offsets of the common kernels);
- a name ending in ``_ptr`` or ``_ptrs`` (fla's, XunhaoLai's, FSA's and Triton's tutorials' convention), or an
  UPPERCASE name (``Q``), is a pointer to the spec's dtype (``*fp16``);
- a name in :data:`FLOAT_ARGS` is ``fp32``; any other runtime argument is ``i32``.

``nsa-sel capture`` writes spec modules whose ``types`` name every runtime argument, as the run saw it.

The same format describes a user's own kernels: ``nsa-sel smoke --specs
my_pkg.my_module:SPECS`` (see ``tests/compat/smoke/user_specs_example.py``).  This module imports
neither torch nor triton, so the parent process and the children stay light.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ..core.verdicts import COMPILE_VERDICTS

DTYPES = ("fp16", "bf16", "fp32")
FLOAT_ARGS = frozenset({"qk_scale", "sm_scale", "scale", "softmax_scale", "eps"})

@dataclass(frozen=True)
class CompileSpec:
    """One kernel specialisation to compile ahead of time.

    ``skip`` maps a Triton version specifier to the archs on which the launchers never
    use this variant (not compiled there, listed as skipped); ``only`` the other way round: a
    variant that only a row-capped planner launches (under a known-bad window) is compiled there
    and skipped everywhere else.  ``expected`` (canaries only) maps a version specifier (``"<3.5"``) to the verdict
    or verdicts accepted there; the first matching specifier wins.  ``expected_message``
    maps specifiers to a substring the verdict's message must contain.
    """

    name: str
    kernel: Any  # "module:attr", "path.py:attr", or the JITFunction itself (resolved on load)
    constexprs: Mapping[str, Any] = field(default_factory=dict)
    dtype: str = "fp16"
    num_warps: int = 4
    num_stages: int = 3
    types: Mapping[str, str] = field(default_factory=dict)
    canary: bool = False
    expected: Mapping[str, Any] | None = None
    expected_message: Mapping[str, str] | None = None
    skip: Mapping[str, Any] | None = None  # {triton specifier: archs where this variant is never launched}
    note: str = ""
    only: Mapping[str, Any] | None = None  # {triton specifier: archs}: compiled there and nowhere else
    maxnreg: int | None = None  # the launch's register cap a thread (the warp-specialised kernel's)

    def __post_init__(self):
        if not isinstance(self.kernel, str):
            object.__setattr__(self, "kernel", kernel_ref(self.kernel))
        if ":" not in self.kernel:
            raise ValueError(f"spec {self.name!r}: kernel must be 'module:attr' or 'file.py:attr', got {self.kernel!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"spec {self.name!r}: dtype {self.dtype!r} not in {DTYPES}")
        for spec, verdicts in (self.expected or {}).items():
            bad = set(_as_list(verdicts)) - set(COMPILE_VERDICTS)
            if bad:
                raise ValueError(f"spec {self.name!r}: expected[{spec!r}] has unknown verdicts {sorted(bad)}")

    @property
    def kernel_name(self) -> str:
        return self.kernel.rpartition(":")[2]

    def request(self, arch: int, warp_size: int = 32) -> dict:
        """The JSON request a child process compiles (see :func:`nsa_triton_sel.compat.smoke.aot.compile_request`)."""
        return {
            "name": self.name, "kernel": self.kernel, "dtype": self.dtype,
            "constexprs": dict(self.constexprs), "types": dict(self.types),
            "num_warps": self.num_warps, "num_stages": self.num_stages,
            "arch": int(arch), "warp_size": int(warp_size),
            **({"maxnreg": int(self.maxnreg)} if self.maxnreg else {}),
        }

    def expected_verdicts(self, version) -> list[str] | None:
        """The verdicts a canary may have on Triton ``version`` (``None``: no expectation)."""
        hit = _first_match(self.expected, version)
        return None if hit is None else _as_list(hit)

    def expected_substring(self, version) -> str | None:
        return _first_match(self.expected_message, version)

    def skipped(self, version, arch: int) -> bool:
        """True where the launchers never use this variant (e.g. 64-row tiles on 3.0 + Hopper)."""
        from packaging.specifiers import SpecifierSet
        from packaging.version import Version

        v = Version(str(version))
        if self.only and not any(SpecifierSet(spec).contains(v, prereleases=True) and int(arch) in archs
                                 for spec, archs in self.only.items()):
            return True
        return any(SpecifierSet(spec).contains(v, prereleases=True) and int(arch) in archs
                   for spec, archs in (self.skip or {}).items())

    def skip_reason(self) -> str:
        if self.only:
            return f"not launched there: the planner launches it only where only={dict(self.only)} holds"
        return f"not launched there (skip={dict(self.skip or {})})"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _as_list(v) -> list[str]:
    return [v] if isinstance(v, str) else list(v)


def _first_match(table, version):
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    v = Version(str(version))
    for spec, value in (table or {}).items():
        if SpecifierSet(spec).contains(v, prereleases=True):
            return value
    return None


# ---------------------------------------------------------------- signature derivation

def arg_type(name: str, dtype: str, types: Mapping[str, str]) -> str:
    """Triton type string of runtime argument ``name`` under the typing rule above."""
    if name in types:
        return types[name].format(dtype=dtype)
    if name.startswith("cu_seqlens"):
        return "*i32"
    if name.isupper() or name.endswith(("_ptr", "_ptrs")):
        return f"*{dtype}"
    if name in FLOAT_ARGS:
        return "fp32"
    return "i32"


def kernel_params(fn) -> list[tuple[str, bool, Any]]:
    """``(name, is_constexpr, default)`` of each argument of a ``@triton.jit`` function, in order.

    Reads ``fn.params`` (a JITFunction); under ``TRITON_INTERPRET=1`` the decorated object
    has no ``params``, so the Python signature and its ``tl.constexpr`` annotations are used.
    """
    if hasattr(fn, "params"):
        return [(p.name, bool(p.is_constexpr), getattr(p, "default", inspect.Parameter.empty))
                for p in fn.params]
    py = getattr(fn, "fn", fn)
    out = []
    for p in inspect.signature(py).parameters.values():
        ann = p.annotation
        text = ann if isinstance(ann, str) else getattr(ann, "__name__", "")
        out.append((p.name, "constexpr" in str(text), p.default))
    return out


def derive_signature(fn, req: Mapping) -> tuple[dict, dict]:
    """``(types of the runtime arguments, constexpr values)`` of JITFunction ``fn`` for a request.

    Raises ``ValueError`` when the request misses a constexpr that has no default, or
    names one the kernel does not have (a stale spec must fail loudly, not compile
    something else).
    """
    given = dict(req.get("constexprs") or {})
    types, constexprs = {}, {}
    kname = getattr(fn, "__name__", None) or getattr(getattr(fn, "fn", None), "__name__", "kernel")
    for name, is_constexpr, default in kernel_params(fn):
        if is_constexpr:
            if name in given:
                constexprs[name] = given.pop(name)
            elif default is not inspect.Parameter.empty:
                constexprs[name] = default
            else:
                raise ValueError(f"{req.get('name')}: no value for constexpr {name} of {kname}")
        else:
            types[name] = arg_type(name, req.get("dtype", "fp16"), req.get("types") or {})
    if given:
        raise ValueError(f"{req.get('name')}: {kname} has no constexpr {sorted(given)}")
    return types, constexprs


# ---------------------------------------------------------------- the values a launch specialises on
#
# A launch specialises every integer argument equal to 1 (a constexpr from Triton 3.3 on, ``equal_to_1`` before)
# and marks every one divisible by 16; the compiled code then has vectorised loads and, for the key-major
# backward, no spills.  A compile without those hints builds code that never runs (scalar loads, thousands of
# spilled bytes), some variants several times more slowly.  This package's kernels are launched on contiguous tensors
# whose head dims are multiples of 16 (the layouts ``tests/gpu_launches.py`` captured from the GPU suite), so
# their registry specs compile with the hints such a launch gives; sizes (``T``, ``S``, ``h``, ...) stay
# unhinted, the general case.  A captured spec (its types carry ``:16``) already says what its launch saw.

PACKAGE_KERNELS = "nsa_triton_sel.kernels."  # the modules whose argument names follow the rule below
# The innermost stride of q, k, v, o, do, dq (head dim), of the per-head float32 rows (LSE, delta: [B, S, G, h])
# and of the ranges ([B, S, G, n, 2]).
UNIT_STRIDES = frozenset({"sq_d", "sk_d", "sv_d", "so_d", "sdo_d", "sdq_d", "sl_h", "sd_h", "sr_e"})
# Head dims, the selection block, and the outer strides of tensors whose innermost axis is a head dim.
ALIGNED_INTS = frozenset({"Dk", "Dv", "block_size"} | {
    f"s{t}_{axis}" for t in ("q", "k", "v", "o", "do", "dq", "dk", "dv") for axis in ("b", "s", "g", "h", "t")})


def launch_hints(kernel: str, types: Mapping[str, str]) -> dict[str, str]:
    """``types`` with the value hints a launch of this package's kernel gives (``:16`` divisible by 16, ``:1``
    equal to 1; pointers ``:16``, 16-byte aligned as a torch allocation is); other kernels' types, and a spec
    whose types already carry hints, unchanged."""
    if not str(kernel).startswith(PACKAGE_KERNELS) or any(t.endswith((":16", ":1")) for t in types.values()):
        return dict(types)
    out = {}
    for name, t in types.items():
        if t.startswith("*") or (t == "i32" and name in ALIGNED_INTS):
            out[name] = t + ":16"
        elif t == "i32" and name in UNIT_STRIDES:
            out[name] = t + ":1"
        else:
            out[name] = t
    return out


# ---------------------------------------------------------------- loading specs and kernels

def kernel_ref(obj) -> str:
    """A reference a child process can load: ``module:attr`` if importable, else ``file.py:attr``."""
    fn = getattr(obj, "fn", obj)
    name, module = fn.__name__, getattr(fn, "__module__", None)
    path = inspect.getsourcefile(fn)
    loaded = sys.modules.get(module) if module else None
    if module and module != "__main__" and not getattr(loaded, "__nsa_by_path__", False):
        found = importlib.util.find_spec(module) if _safe_find(module) else None
        if found is not None and found.origin and path and os.path.samefile(found.origin, path):
            return f"{module}:{name}"
    if not path:
        raise ValueError(f"cannot locate the source of kernel {name!r}")
    return f"{os.path.abspath(path)}:{name}"


def _safe_find(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def load_object(ref: str):
    """Resolve ``"pkg.module:attr"`` or ``"path/file.py:attr"`` (see :func:`resolve`)."""
    target, sep, attr = ref.rpartition(":")
    if not sep or not target or not attr:
        raise ValueError(f"bad reference {ref!r}: expected 'module:attr' or 'path/file.py:attr'")
    kind, where = resolve(target)
    module = importlib.import_module(target) if kind == "module" else _load_file(where)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ValueError(f"{target} has no attribute {attr!r}") from None


def resolve(target: str) -> tuple[str, str]:
    """How ``target`` (the part of a reference before ``:``) is loaded: ``("file", path)`` for a name ending in
    ``.py`` or holding a path separator; else ``("module", its file)`` when it imports as a module (the current
    directory on ``sys.path``, as ``python -m`` has it), else ``("file", its __init__.py)`` for a folder of that
    name.  A module comes before a folder: a spec module ``team_specs.py`` beside a ``team_specs/`` data folder is
    the module."""
    if target.endswith(".py") or os.sep in target:
        return "file", os.path.abspath(target)
    if os.getcwd() not in sys.path:  # console scripts do not put the cwd on sys.path
        sys.path.insert(0, os.getcwd())
    found = importlib.util.find_spec(target) if _safe_find(target) else None
    if found is not None and found.origin not in (None, "namespace"):  # (a bare folder imports as a namespace)
        return "module", found.origin
    if os.path.isdir(target):
        return "file", os.path.join(os.path.abspath(target), "__init__.py")
    raise ValueError(f"No module named {target!r} (sys.path starts {sys.path[:3]}), and no file or folder of that "
                     f"name here ({os.getcwd()})")


def _load_file(path: str):
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"no such file: {path}")
    # A stable name (str hash() is salted per process): children load the same file alike.
    mod_name = "_nsa_specs_" + hashlib.sha1(path.encode()).hexdigest()[:12]
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(spec)
    module.__nsa_by_path__ = True  # kernel_ref() must then refer to it by path
    sys.modules[mod_name] = module  # triton's JIT looks the module up while decorating
    try:
        spec.loader.exec_module(module)
    except ModuleNotFoundError as e:
        sys.modules.pop(mod_name, None)
        if (e.name or "").startswith("nsa_triton_sel.compat"):
            raise ValueError(f"{path} imports {e.name}, which this nsa-sel does not have: spec modules import "
                             f"CompileSpec from {__name__} (re-run `nsa-sel capture` to write the module again, "
                             f"or change its import)") from e
        raise
    return module


def load_specs(ref: str) -> list[CompileSpec]:
    """The specs behind ``ref``: a list/tuple of :class:`CompileSpec` or dicts, or a callable returning one."""
    obj = load_object(ref if ":" in ref else ref + ":SPECS")
    if callable(obj) and not isinstance(obj, (list, tuple)):
        obj = obj()
    if not isinstance(obj, Iterable):
        raise ValueError(f"{ref} is not a list of compile specs")
    specs = [s if isinstance(s, CompileSpec) else spec_from_dict(s, f"{ref}[{i}]") for i, s in enumerate(obj)]
    check_unique(specs)
    return specs


SPEC_FIELDS = tuple(f.name for f in dataclasses.fields(CompileSpec))


def spec_from_dict(raw, where: str = "spec") -> CompileSpec:
    """A :class:`CompileSpec` from a mapping; unknown or missing fields are a ValueError naming them."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected a CompileSpec or a dict, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(SPEC_FIELDS))
    if unknown:
        raise ValueError(f"{where}: unknown CompileSpec field(s) {unknown}; known: {', '.join(SPEC_FIELDS)}")
    missing = [f for f in ("name", "kernel") if f not in raw]
    if missing:
        raise ValueError(f"{where}: missing CompileSpec field(s) {missing}")
    return CompileSpec(**raw)


def check_unique(specs: list[CompileSpec]) -> None:
    seen = set()
    for s in specs:
        if s.name in seen:
            raise ValueError(f"duplicate spec name {s.name!r}")
        seen.add(s.name)


# ---------------------------------------------------------------- loading user specs in a child

def _child_main(argv: list[str]) -> int:
    """``python -m nsa_triton_sel.compat.registry.compile_spec REF OUT.json``: load ``REF``'s specs, write them as JSON.

    ``nsa-sel smoke --specs`` imports a user's spec module here, in a child under a timeout: a
    module that hangs, crashes or raises at import cannot take the harness down.  OUT gets
    ``{"specs": [...], "source": "module|file <where>"}`` or ``{"error": "<what went wrong>"}``.
    """
    import json  # noqa: PLC0415

    from nsa_triton_sel.compat.registry import compile_spec as specs  # noqa: PLC0415 - the module a user's imports see

    ref, out = argv
    try:
        target = (ref if ":" in ref else ref + ":SPECS").rpartition(":")[0]
        kind, where = specs.resolve(target)
        doc = {"specs": [s.to_dict() for s in specs.load_specs(ref)], "source": f"{kind} {where}"}
    except SyntaxError as e:
        doc = {"error": f"SyntaxError: {e.msg} ({e.filename}, line {e.lineno})"}
    except Exception as e:  # noqa: BLE001 - any failure of a user's module is reported, not raised
        doc = {"error": f"{type(e).__name__}: {e}"}
    with open(out, "w") as f:
        json.dump(doc, f)
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
