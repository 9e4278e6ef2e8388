"""Which code a result is about: two hashes of this package's sources, one per kind of evidence.

Every ledger record carries both hashes of the tree that produced it, so an edit stales only the evidence it
can affect:

- the **compiler-facing** hash (``compiler_hash``): what Triton compiles, i.e. the ``@triton.jit``
  sources and every table that decides one of their constexprs (the planner's tiles, warps, stages and
  tokens per program; the registry of variants the compile smoke builds).  A change here can change the
  machine code of some release, so it stales that release's compile, parity, gradient and bench
  evidence (``MATRIX.md`` marks it *stale*; it counts for nothing until the release is re-run);
- the **runtime** hash (``runtime_hash``): the rest of the runtime package (argument handling, routing,
  the operator, launchers and host binding, references, package data).  A change here cannot change what
  Triton compiles, so compile/parity/bench evidence stays valid; it stales only the GPU *contract*
  record (the user-facing calls on a GPU: ``tests/test_contract_gpu*.py``), which is re-run on the
  newest and the oldest release.

The split is a set of rules over paths relative to the package directory (``nsa_triton_sel/``), not a
list of files, so it survives files moving between subpackages.  Matching is :mod:`fnmatch`'s, where
``*`` also crosses ``/`` (``plan/*.py`` is every ``.py`` file under ``plan/``, at any depth).  The
first kind whose rules match a path wins; compat/ (the toolkit, checked by CI on every change) and this
module are neither kind, except the two registry modules named in :data:`COMPILER_FACING`.

Standard library only (and the pure-Python cache registry, ``caches``), so the toolkit (and a lane that
has no torch) can compute it; the toolkit applies the same rules to the files of a git commit
(:func:`hashes_of`) for records that predate the fields.  :func:`kernel_source_hash` is kept as the name
of the compiler-facing hash.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
from collections.abc import Mapping
from pathlib import Path

from . import caches

PACKAGE_DIR = Path(__file__).resolve().parent
PACKAGE_PATH = "src/nsa_triton_sel"  # the package directory, relative to the repository root
HASH_CHARS = 16

COMPILER, RUNTIME = "compiler", "runtime"
# What Triton compiles, and the tables that decide its constexprs.
COMPILER_FACING = (
    "kernels/forward.py", "kernels/backward.py", "kernels/common.py",  # the @triton.jit sources
    "kernels/keymajor_ws.py", "kernels/keymajor_bwd_gluon.py",  # the @gluon.jit sources
    "plan/*.py",  # tiles, warps, stages, tokens per program: constexprs of every launch
    "compat/registry/variants.py", "compat/registry/specs.py",  # the compile registry: which constexpr sets are built
)
# Everything else the runtime package ships: its Python and its package data.
RUNTIME_FACING = ("*.py", "data/*.toml", "data/*.json")
# The toolkit (except the registry above: CI re-runs its checks on every change) and this module, which
# defines the hashes and runs in no user call.
NEITHER = ("compat/*", "provenance.py")
RULES = ((COMPILER, COMPILER_FACING), (None, NEITHER), (RUNTIME, RUNTIME_FACING))
FIELDS = {COMPILER: "compiler_hash", RUNTIME: "runtime_hash"}  # the ledger's field of each hash


def kind_of(path: str) -> str | None:
    """``"compiler"``, ``"runtime"`` or None (not hashed) for a path relative to the package directory."""
    path = path.replace("\\", "/")
    if "__pycache__" in path.split("/"):
        return None
    for kind, patterns in RULES:
        if any(fnmatch.fnmatchcase(path, p) for p in patterns):
            return kind
    return None


def hash_sources(files: Mapping[str, bytes]) -> str:
    """sha256 over ``(name, contents)`` in name order, first 16 hex digits.

    Names are paths relative to the package directory (``kernels/forward.py``), so a checkout, an
    installed package and the files of a git commit hash alike.  Line endings are normalised to
    ``\\n`` (a Windows checkout is the same source).
    """
    if not files:
        raise ValueError("no sources to hash (expected files of the nsa_triton_sel package)")
    h = hashlib.sha256()
    for name in sorted(files):
        body = files[name].replace(b"\r\n", b"\n")
        h.update(name.encode() + b"\0" + str(len(body)).encode() + b"\0" + body)
    return h.hexdigest()[:HASH_CHARS]


def package_files(root: Path | None = None) -> dict[str, bytes]:
    """``{path relative to the package: bytes}`` of every file a hash covers under ``root``
    (default: this package's directory)."""
    root = Path(root) if root is not None else PACKAGE_DIR
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and kind_of(rel) is not None:
            out[rel] = p.read_bytes()
    return out


def split(files: Mapping[str, bytes]) -> dict[str, dict[str, bytes]]:
    """``{"compiler": {...}, "runtime": {...}}``: the files of each kind (others dropped)."""
    out: dict[str, dict[str, bytes]] = {COMPILER: {}, RUNTIME: {}}
    for name, body in files.items():
        kind = kind_of(name)
        if kind is not None:
            out[kind][name] = body
    return out


def hashes_of(files: Mapping[str, bytes]) -> dict[str, str | None]:
    """``{"compiler_hash": ..., "runtime_hash": ...}`` of a package's files (paths relative to the
    package; a kind with no file is None)."""
    parts = split(files)
    return {FIELDS[k]: (hash_sources(v) if v else None) for k, v in parts.items()}


@functools.lru_cache(maxsize=4)
def _hashes(root: Path | None) -> tuple[tuple[str, str | None], ...]:
    return tuple(hashes_of(package_files(root)).items())


caches.register("source_hashes", clear=_hashes.cache_clear, size=lambda: _hashes.cache_info().currsize)


def hashes(root: Path | None = None) -> dict[str, str | None]:
    """Both hashes of the package this process runs (or of ``root``), cached: sources do not change
    under a running process."""
    return dict(_hashes(Path(root) if root is not None else None))


def compiler_hash(root: Path | None = None) -> str:
    """The compiler-facing hash (:data:`COMPILER_FACING`); stales compile, parity and bench evidence."""
    value = hashes(root)["compiler_hash"]
    if value is None:
        raise ValueError(f"no compiler-facing sources under {root or PACKAGE_DIR} ({', '.join(COMPILER_FACING)})")
    return value


def runtime_hash(root: Path | None = None) -> str:
    """The runtime hash (the rest of the package, :data:`RUNTIME_FACING`); stales the GPU contract record."""
    value = hashes(root)["runtime_hash"]
    if value is None:
        raise ValueError(f"no runtime sources under {root or PACKAGE_DIR}")
    return value


# The name this hash had when it covered kernels/*.py alone (the ledger's `kernel_hash`, now history).
kernel_source_hash = compiler_hash

# The kernel package's sources, for checks over them (tests/test_kernel_sources.py); not a hash input by itself.
KERNEL_DIR = PACKAGE_DIR / "kernels"
KERNEL_GLOB = "*.py"
KERNEL_PATH = PACKAGE_PATH + "/kernels"


def kernel_sources(root: Path | None = None) -> dict[str, bytes]:
    """``{base name: bytes}`` of the ``*.py`` files of ``kernels/`` (default: this package's)."""
    root = Path(root) if root is not None else KERNEL_DIR
    return {p.name: p.read_bytes() for p in sorted(root.glob(KERNEL_GLOB))}
