"""Which kernels a result is about: a hash of the Triton kernel sources.

Every ledger record carries :func:`kernel_source_hash` of the tree that produced it, so evidence
gathered before a kernel change can be told from evidence about the kernels that ship now
(``MATRIX.md`` marks it *stale*).  The hash covers every ``*.py`` file of
``nsa_triton_sel/kernels/`` (the kernels, their launchers and launch tables): a change to any of
them can change what a GPU runs.  Standard library only, so the toolkit (and a lane that has no
torch) can compute it; :func:`hash_sources` is shared with the toolkit, which hashes the same files
at a git commit for records that predate the field.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from pathlib import Path

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"
KERNEL_GLOB = "*.py"
KERNEL_PATH = "src/nsa_triton_sel/kernels"  # the same files, relative to the repository root
HASH_CHARS = 16


def hash_sources(files: Mapping[str, bytes]) -> str:
    """sha256 over ``(file name, contents)`` in name order, first 16 hex digits.

    Names are base names (``forward.py``), so a checkout, an installed package and a
    ``git show`` of a commit hash alike.  Line endings are normalised to ``\\n`` (a Windows
    checkout is the same source).
    """
    if not files:
        raise ValueError("no kernel sources to hash (expected the *.py files of nsa_triton_sel/kernels)")
    h = hashlib.sha256()
    for name in sorted(files):
        body = files[name].replace(b"\r\n", b"\n")
        h.update(name.encode() + b"\0" + str(len(body)).encode() + b"\0" + body)
    return h.hexdigest()[:HASH_CHARS]


def kernel_sources(root: Path | None = None) -> dict[str, bytes]:
    """``{base name: bytes}`` of the kernel sources under ``root`` (default: this package's)."""
    root = Path(root) if root is not None else KERNEL_DIR
    return {p.name: p.read_bytes() for p in sorted(root.glob(KERNEL_GLOB))}


@functools.lru_cache(maxsize=4)
def kernel_source_hash(root: Path | None = None) -> str:
    """The hash of the kernel sources this process would run (cached: sources do not change under it)."""
    return hash_sources(kernel_sources(root))
