"""Give records that predate ``kernel_hash`` the hash of the kernel sources at the commit they name.

``python -m nsa_triton_sel.compat.ledger.backfill [LEDGER]`` rewrites the ledger in place (then run
``nsa-sel pin`` to re-render MATRIX.md and known-good.txt).  The rule, deliberately strict:

- a clean commit (``git_commit`` a full sha known to this repository): the hash of
  ``src/nsa_triton_sel/kernels/*.py`` at that commit (``git show``), ``kernel_hash_from: "git <sha>"``;
- a ``-dirty`` commit, no commit (a run from a copy without ``.git``) or one this clone lacks: left
  unknown (``kernel_hash: null``, ``kernel_hash_from`` saying why).  Unknown counts as stale for GPU
  use: the uncommitted edits could have touched the kernels, and a GPU run is cheap to repeat.
- a record that already has a hash (or a decided `kernel_hash_from`) is never touched.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ...provenance import KERNEL_PATH, hash_sources
from ..atomic import atomic_write_text
from .store import dump_ledger, load_ledger


def hash_at_commit(commit: str, repo: Path) -> str | None:
    """The kernel-source hash at ``commit`` in ``repo``; None when git cannot show it."""
    ls = subprocess.run(["git", "-C", str(repo), "ls-tree", "--name-only", f"{commit}:{KERNEL_PATH}"],
                        capture_output=True, text=True)
    if ls.returncode != 0:
        return None
    files = {}
    for name in ls.stdout.split():
        if name.endswith(".py"):
            show = subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{KERNEL_PATH}/{name}"],
                                  capture_output=True)
            if show.returncode != 0:
                return None
            files[name] = show.stdout
    return hash_sources(files) if files else None


def backfill(recs: list[dict], repo: Path) -> tuple[list[dict], dict[str, int]]:
    """(records with ``kernel_hash`` filled where it can be, counts per outcome)."""
    cache: dict[str, str | None] = {}
    counts: dict[str, int] = {}
    out = []
    for rec in recs:
        if rec.get("kernel_hash") or "kernel_hash_from" in rec:  # known, or already decided
            out.append(rec)
            continue
        commit = rec.get("git_commit") or ""
        if not commit:
            h, source = None, "unknown: the run named no commit (a copy without .git)"
        elif commit.endswith("-dirty"):
            h, source = None, f"unknown: {commit} (uncommitted edits)"
        else:
            if commit not in cache:
                cache[commit] = hash_at_commit(commit, repo)
            h = cache[commit]
            source = f"git {commit}" if h else f"unknown: commit {commit} not in this clone"
        counts[source] = counts.get(source, 0) + 1
        out.append({**rec, "kernel_hash": h, "kernel_hash_from": source})
    return out, counts


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    path = Path(argv[0] if argv else "constraints/ledger.jsonl")
    recs, counts = backfill(load_ledger(path), path.resolve().parent.parent)
    atomic_write_text(path, dump_ledger(recs))
    for source, n in sorted(counts.items()):
        print(f"{n:>5}  {source}")
    print(f"{path}: {len(recs)} records; now run `nsa-sel pin` to re-render MATRIX.md and known-good.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
