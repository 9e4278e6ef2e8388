"""Ahead-of-time compile of one kernel specialisation, without a GPU, on Triton 3.0 - 3.9.

This module runs inside the smoke harness's child processes (``python -m
nsa_triton_sel.compat.smoke.aot REQUEST.json RESULT.json``); it imports triton and the kernel's
module, never torch.  A compiler abort (a C++ assertion) kills the child, not the
harness: the parent turns the missing result plus the exit status into a ``crash``.

``triton.compile(ASTSource(...), target=GPUTarget("cuda", cc, warp_size))`` takes its
arguments in two families, told apart by introspection, never by version strings:

- 3.0 - 3.2: ``ASTSource(fn, signature, constants, attrs)`` - the signature lists only
  the runtime arguments (name -> type), constexpr values go in ``constants``, ``attrs``
  is an ``AttrsDescriptor`` (3.0/3.1 in ``triton.compiler.compiler`` with
  ``divisible_by_16``; 3.2 in ``triton.backends.compiler`` with ``from_hints``);
- 3.3 and later: ``ASTSource(fn, signature, constexprs, attrs)`` - the signature lists
  every argument in order, constexpr ones typed ``"constexpr"``; ``attrs`` maps
  ``(index,)`` to ``[["tt.divisibility", 16]]``.

Arguments are compiled with the value hints a real launch specialises on: pointers 16-byte aligned (what
a torch allocation gives), and, for this package's kernels, the integers a launch on contiguous tensors gives as
divisible by 16 or equal to 1 (:func:`~nsa_triton_sel.compat.registry.compile_spec.launch_hints`); a type
``"i32:1"`` is a constexpr 1 from 3.3 on and ``equal_to_1`` before.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

from ..core.env import imported_versions
from ..registry.compile_spec import derive_signature, launch_hints, load_object
from ..core.verdicts import COMPILE_ERROR, OK, UNSUPPORTED  # the verdicts a child can reach (crash/timeout: parent)

FAMILY_CONSTEXPRS, FAMILY_CONSTANTS = "constexprs", "constants"


class Unsupported(Exception):
    """The installed Triton lacks an API or a target that the compile needs."""


def ast_family(ast_source_cls) -> str:
    """``"constexprs"`` (3.3+) or ``"constants"`` (3.0 - 3.2), read from ``ASTSource.__init__``."""
    params = inspect.signature(ast_source_cls.__init__).parameters
    if FAMILY_CONSTEXPRS in params:
        return FAMILY_CONSTEXPRS
    if FAMILY_CONSTANTS in params:
        return FAMILY_CONSTANTS
    # A signature we have never seen: say so rather than guess.
    raise Unsupported(f"unknown ASTSource signature {list(params)}")


def triton_api():
    """``(triton, ASTSource, GPUTarget, family)`` of the installed Triton."""
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as e:
        raise Unsupported(f"this Triton has no ahead-of-time compile API: {e}") from e
    return triton, ASTSource, GPUTarget, ast_family(ASTSource)


def _old_attrs(aligned_idx: list[int], one_idx: list[int] = ()):
    """3.0 - 3.2: the ``AttrsDescriptor`` that marks ``aligned_idx`` divisible by 16 and ``one_idx`` equal to 1."""
    import triton.backends.compiler as backend_compiler

    if hasattr(backend_compiler, "AttrsDescriptor"):  # 3.2
        return backend_compiler.AttrsDescriptor.from_hints({**{i: 16 for i in aligned_idx}, **{i: 1 for i in one_idx}})
    from triton.compiler.compiler import AttrsDescriptor  # 3.0, 3.1

    return AttrsDescriptor(divisible_by_16=set(aligned_idx), equal_to_1=set(one_idx))


def make_source(ASTSource, family: str, fn, types: dict, constexprs: dict, aligned=None):
    """The ``ASTSource`` for ``fn`` in the argument family this Triton accepts.

    ``types`` maps every runtime argument to a type string, ``constexprs`` every constexpr
    one to its value; ``aligned`` names the arguments Triton marks divisible by 16 (a pointer's
    address, an integer's value).  By default: the types that end in ``:16`` (a captured spec
    says it for each argument), or else every pointer.  An integer typed ``"i32:1"`` is compiled as
    a launch with the value 1 compiles it.
    """
    names = list(fn.arg_names)
    ones = [n for n, t in types.items() if t.endswith(":1")]
    if aligned is None and any(t.endswith(":16") for t in types.values()):
        aligned = [n for n, t in types.items() if t.endswith(":16")]  # as a captured run saw them
    elif aligned is None:
        aligned = [n for n, t in types.items() if t.startswith("*")]
    types = {n: t.rpartition(":")[0] if t.endswith((":16", ":1")) else t for n, t in types.items()}
    aligned_idx = [names.index(n) for n in aligned]
    if family == FAMILY_CONSTEXPRS:
        constexprs = {**constexprs, **{n: 1 for n in ones}}
        signature = {n: "constexpr" if n in constexprs else types[n] for n in names}
        attrs = {(i,): [["tt.divisibility", 16]] for i in aligned_idx}
        return ASTSource(fn, signature, constexprs=dict(constexprs), attrs=attrs)
    signature = {n: types[n] for n in names if n not in constexprs}
    return ASTSource(fn, signature, constants=dict(constexprs),
                     attrs=_old_attrs(aligned_idx, [names.index(n) for n in ones]))


def _source_class(fn, ASTSource):
    """The source class that compiles ``fn``: Gluon's for a ``@gluon.jit`` kernel (its own front end), else
    ``ASTSource``."""
    if type(fn).__name__ != "GluonJITFunction":
        return ASTSource
    from triton.experimental.gluon._runtime import GluonASTSource

    return GluonASTSource


def compile_request(req: dict) -> dict:
    """Compile one request (``CompileSpec.request(arch)``); returns the result dict, never raises."""
    t0 = time.perf_counter()
    result = {"verdict": OK, "message": "", "metrics": {}, "family": None}
    try:
        triton, ASTSource, GPUTarget, family = triton_api()
        result.update(family=family, triton=triton.__version__)
        fn = _load_kernel(req["kernel"])
        types, constexprs = derive_signature(fn, req)
        types = launch_hints(req["kernel"], types)
        result["signature"] = types
        src = make_source(_source_class(fn, ASTSource), family, fn, types, constexprs)
        target = GPUTarget("cuda", int(req["arch"]), int(req.get("warp_size", 32)))
        options = {"num_warps": int(req["num_warps"]), "num_stages": int(req["num_stages"])}
        if req.get("maxnreg"):
            options["maxnreg"] = int(req["maxnreg"])
        compiled = triton.compile(src, target=target, options=options)
        result["metrics"] = collect_metrics(compiled)
    except Unsupported as e:
        result.update(verdict=UNSUPPORTED, message=str(e))
    except Exception as e:  # noqa: BLE001 - every compiler failure is a verdict, not a harness error
        verdict, message = classify_exception(e, int(req["arch"]))
        result.update(verdict=verdict, message=message, chain=error_chain(e),
                      traceback=traceback.format_exc()[-4000:], target_unsupported=message.startswith(TARGET))
    result["seconds"] = round(time.perf_counter() - t0, 3)
    result["imported"] = imported_versions()  # what this child really compiled with
    return result


def _load_kernel(ref: str):
    try:
        fn = load_object(ref)
    except ImportError as e:
        # A kernel module importing a triton API this version lacks (tensor descriptors
        # before 3.4, say) is "unsupported"; any other import error is the spec's fault.
        if (e.name or "").startswith("triton"):
            raise Unsupported(f"importing {ref}: {e}") from e
        raise
    while not hasattr(fn, "params") and hasattr(getattr(fn, "fn", None), "arg_names"):
        fn = fn.fn  # @triton.autotune / @triton.heuristics wrap the JIT function: its configs are the spec's
    if not hasattr(fn, "arg_names") or not hasattr(fn, "params"):
        raise TypeError(f"{ref} is a {type(fn).__name__}, not a @triton.jit kernel "
                        "(is TRITON_INTERPRET set in the environment?)")
    return fn


def cause_chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its ``__cause__``/``__context__`` ancestors, outermost first, cycle-safe."""
    chain, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        chain.append(exc)
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    return chain


def _last_line(text) -> str:
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def error_chain(exc: BaseException) -> list[str]:
    """``Type: last line`` of each exception in the chain, outermost first."""
    return [f"{type(e).__name__}: {_last_line(e)}"[:600] for e in cause_chain(exc)]


def root_message(exc: BaseException) -> str:
    """The innermost non-empty message: on Triton 3.0 - 3.4 the text is only in ``__cause__``."""
    for e in reversed(cause_chain(exc)):
        text = _last_line(e)
        if text:
            return f"{type(e).__name__}: {text}"[:1000]
    return type(exc).__name__


def classify_exception(exc: BaseException, arch: int | None = None) -> tuple[str, str]:
    """``unsupported`` for an API this Triton removed or lacks, or for a target its bundled ``ptxas``
    cannot assemble for (``arch``); else ``compile_error``."""
    message = root_message(exc)
    for e in cause_chain(exc):
        if isinstance(e, NotImplementedError):
            return UNSUPPORTED, message
        if isinstance(e, AttributeError) and "triton" in str(e):
            return UNSUPPORTED, message  # e.g. "module 'triton.language' has no attribute 'advance'"
    if arch is not None:
        why = target_problem(arch, "\n".join(f"{e!r} {e}" for e in cause_chain(exc)))
        if why:
            return UNSUPPORTED, f"{why} | {message}"[:1000]
    return COMPILE_ERROR, message


# ---------------------------------------------------------------- can the bundled toolchain target the arch?
#
# A release whose ptxas predates an arch (sm_100 needs CUDA 12.8, sm_103 12.9) cannot compile for it:
# that is an ``unsupported`` verdict about the release, not a compile error of our kernels.  Asked only
# after a compile failed, so a working compile never pays for the two ptxas runs.

# What ptxas (or Triton quoting it) says when it does not know the target or the PTX ISA asked for.
PTXAS_TARGET_REJECTIONS = ("is not defined for option 'gpu-name'", "Unsupported .target", "Unsupported .version")


def ptxas_path(arch: int) -> str | None:
    """The ptxas Triton runs for ``arch``: its own lookup where it has one, else the bundled binary."""
    try:
        import triton
        from triton.backends.nvidia import compiler as nv
    except Exception:  # noqa: BLE001 - no NVIDIA backend: nothing to ask
        return None
    for lookup in (lambda: nv.get_ptxas(arch).path, lambda: nv.get_ptxas().path,  # 3.4+ (per arch from 3.7)
                   lambda: nv._path_to_binary("ptxas")[0]):  # 3.0 - 3.3
        try:
            path = lookup()
        except Exception:  # noqa: BLE001 - that lookup does not exist in this release
            continue
        if path:
            return str(path)
    path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    return path if os.access(path, os.X_OK) else None


def ptxas_targets(ptxas: str) -> tuple[str, list[str]]:
    """``(version line, sm_* names its --gpu-name accepts)`` of a ptxas binary (empty when unreadable)."""
    def run(flag):
        try:
            return subprocess.run([ptxas, flag], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            return ""

    m = re.search(r"release ([\d.]+), (V[\d.]+)", run("--version"))
    version = f"CUDA {m.group(1)}, {m.group(2)}" if m else ""
    section = run("--help").partition("--gpu-name")[2].split("\n--", 1)[0]
    return version, re.findall(r"'(sm_\d+[a-z]?)'", section)


TARGET = "the bundled ptxas"  # how a target_problem() message starts
_PTXAS_IN_COMMAND = re.compile(r"""['"]?(/[^'"\s]*/ptxas[\w.-]*)['"]?""")


def _ptxas_named_in(error_text: str) -> str | None:
    """The ptxas binary the failed command ran (Triton 3.3 runs ptxas-blackwell for sm_100+ while its
    lookup names ptxas): the one whose version and targets explain the failure."""
    m = _PTXAS_IN_COMMAND.search(error_text)
    return m.group(1) if m and os.access(m.group(1), os.X_OK) else None


def _variant(ptxas: str | None) -> str:
    """``-blackwell`` for Triton's second bundled ptxas, so the message names the binary that ran."""
    name = os.path.basename(ptxas or "")
    return name[len("ptxas"):] if name.startswith("ptxas") else ""


def target_problem(arch: int, error_text: str, ptxas: str | None = None) -> str | None:
    """Why the compile that failed with ``error_text`` failed for want of a ptxas that targets ``sm_<arch>``,
    or None: a failure that never reached ptxas (a front-end error) is the kernel's, on any arch."""
    if "ptxas" not in error_text.lower() and not any(p in error_text for p in PTXAS_TARGET_REJECTIONS):
        return None
    ptxas = ptxas or _ptxas_named_in(error_text) or ptxas_path(arch)
    version, names = ptxas_targets(ptxas) if ptxas else ("", [])
    tool = f"{TARGET}{_variant(ptxas)} ({version or 'version unknown'})"
    if names and not any(n in (f"sm_{arch}", f"sm_{arch}a") for n in names):
        newest = max(names, key=lambda n: (int(re.sub(r"\D", "", n)), n))
        return f"{tool} cannot target sm_{arch}: its --gpu-name accepts up to {newest}"
    hit = next((p for p in PTXAS_TARGET_REJECTIONS if p in error_text), None)
    return f"{tool} rejects sm_{arch} code ({hit!r})" if hit else None


# ---------------------------------------------------------------- metrics

_RES_RE = re.compile(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)")


def collect_metrics(compiled) -> dict:
    """PTX/cubin sizes, shared memory, tensor-core kind, and registers/local memory from cuobjdump."""
    asm = getattr(compiled, "asm", {}) or {}
    ptx, cubin = asm.get("ptx"), asm.get("cubin")
    metrics = {
        "ptx_bytes": len(ptx) if ptx is not None else None,
        "cubin_bytes": len(cubin) if cubin is not None else None,
        "registers": None,
        "spills": None,
        "shared": _meta(compiled, "shared"),
        "num_warps": _meta(compiled, "num_warps"),
        "num_stages": _meta(compiled, "num_stages"),
        "mma": mma_kind(ptx or ""),
    }
    if isinstance(cubin, (bytes, bytearray)):
        metrics.update(resource_usage(bytes(cubin)))
    return metrics


def mma_kind(ptx: str) -> str:
    """Which tensor-core instruction the dots became (``"none"``: FMA or no dot at all)."""
    if "tcgen05.mma" in ptx:
        return "tcgen05"
    if "wgmma.mma_async" in ptx:
        return "wgmma"
    if re.search(r"\bmma\.sync", ptx):
        return "mma.sync"
    return "none"


def _meta(compiled, key):
    md = getattr(compiled, "metadata", None)
    value = md.get(key) if isinstance(md, dict) else getattr(md, key, None)
    return value if isinstance(value, int) else None


def _cuobjdump() -> str | None:
    """The ``cuobjdump`` bundled with the Triton wheel (every 3.x ships one), else ``PATH``'s."""
    import triton

    path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    return path if os.access(path, os.X_OK) else shutil.which("cuobjdump")


def resource_usage(cubin: bytes) -> dict:
    """Registers and stack-frame bytes per thread of the cubin (best effort).

    Triton deletes its ``ptxas -v`` log, so the numbers are read back from the cubin
    with the bundled cuobjdump.  ptxas puts spilled registers in the stack frame, so
    ``spills`` is its ``STACK`` plus ``LOCAL`` bytes (0 = no spill; ``registers`` at the
    255 ceiling with ``spills > 0`` is register pressure).
    """
    tool = _cuobjdump()
    if tool is None:
        return {}
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    try:
        out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    finally:
        os.unlink(f.name)
    m = _RES_RE.search(out)
    if not m:
        return {}
    reg, stack, _shared, local = (int(x) for x in m.groups())
    return {"registers": reg, "spills": stack + local, "stack": stack, "local": local}


# ---------------------------------------------------------------- child entry point

def main(argv: list[str] | None = None) -> int:
    """``python -m nsa_triton_sel.compat.smoke.aot REQUEST.json RESULT.json``: compile, write the result, exit 0."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2:
        print("usage: python -m nsa_triton_sel.compat.smoke.aot REQUEST.json RESULT.json", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        req = json.load(f)
    try:  # import first and say what was imported: a compiler abort later still leaves this behind
        import triton  # noqa: F401 - imported for what it says it is
    except Exception:  # noqa: BLE001 - compile_request reports it as a verdict
        pass
    write_json(argv[1] + ".imported", imported_versions())
    write_json(argv[1], compile_request(req))
    return 0


def write_json(path: str, doc: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)  # atomic: a half-written result never reads as a verdict


if __name__ == "__main__":
    sys.exit(main())
