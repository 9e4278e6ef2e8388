"""Give records that predate ``compiler_hash`` / ``runtime_hash`` the hashes of the commit they name.

``python -m nsa_triton_sel.compat.ledger.backfill [LEDGER]`` rewrites the ledger in place (then run
``nsa-sel pin`` to re-render MATRIX.md and known-good.txt).  The rule, deliberately strict:

- a clean commit (``git_commit`` a sha known to this repository): both hashes of the package's files at
  that commit (``git ls-tree`` + ``git cat-file``, the rules of :mod:`nsa_triton_sel.provenance`),
  ``hashes_from: "git <sha>"``.  A record that also carries the older ``kernel_hash`` (the hash of
  ``kernels/*.py`` alone) is checked against it: where the commit's kernels hash otherwise,
  the run had uncommitted kernel edits, and its hashes stay unknown;
- a ``-dirty`` commit, no commit (a run from a copy without ``.git``) or one this clone lacks: left
  unknown (both hashes null, ``hashes_from`` saying why).  Unknown counts as stale for GPU use: the
  uncommitted edits could have touched the kernels, and a GPU run is cheap to repeat;
- a record that already has a ``compiler_hash`` (or a decided ``hashes_from``) is never touched.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ... import provenance
from ..core.atomic import atomic_write_text
from .store import dump_ledger, load_ledger

LEGACY_FIELD = "kernel_hash"  # the older records' hash: kernels/*.py by base name


def files_at_commit(commit: str, repo: Path) -> dict[str, bytes] | None:
    """``{path relative to the package: bytes}`` of every file the hashes cover at ``commit``; None when
    git cannot show it."""
    ls = subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "--name-only", commit, "--",
                         provenance.PACKAGE_PATH], capture_output=True, text=True)
    if ls.returncode != 0:
        return None
    prefix = provenance.PACKAGE_PATH + "/"
    names = [n[len(prefix):] for n in ls.stdout.splitlines()
             if n.startswith(prefix) and provenance.kind_of(n[len(prefix):]) is not None]
    if not names:
        return None
    batch = "".join(f"{commit}:{prefix}{n}\n" for n in names).encode()
    cat = subprocess.run(["git", "-C", str(repo), "cat-file", "--batch"], input=batch, capture_output=True)
    if cat.returncode != 0:
        return None
    out, data, pos = {}, cat.stdout, 0
    for name in names:  # "<sha> blob <size>\n<contents>\n" per object, in order
        end = data.index(b"\n", pos)
        header = data[pos:end].split()
        if len(header) != 3 or header[1] != b"blob":
            return None
        size = int(header[2])
        out[name] = data[end + 1:end + 1 + size]
        pos = end + 1 + size + 1
    return out


def legacy_kernel_hash(files: dict[str, bytes]) -> str | None:
    """The older records' ``kernel_hash`` of the same files: ``kernels/*.py`` (no subfolder) by base name."""
    kernels = {n.split("/", 1)[1]: b for n, b in files.items()
               if n.startswith("kernels/") and n.count("/") == 1 and n.endswith(".py")}
    return provenance.hash_sources(kernels) if kernels else None


def hashes_at_commit(commit: str, repo: Path) -> tuple[dict[str, str | None], str | None] | None:
    """(both hashes, the legacy kernel hash) at ``commit``; None when git cannot show it."""
    files = files_at_commit(commit, repo)
    if files is None:
        return None
    return provenance.hashes_of(files), legacy_kernel_hash(files)


def backfill(recs: list[dict], repo: Path) -> tuple[list[dict], dict[str, int]]:
    """(records with the hashes filled where they can be, counts per outcome)."""
    cache: dict[str, tuple | None] = {}
    counts: dict[str, int] = {}
    out = []
    unknown = dict.fromkeys(provenance.FIELDS.values())
    for rec in recs:
        if rec.get("compiler_hash") or "hashes_from" in rec:  # known, or already decided
            out.append(rec)
            continue
        commit = rec.get("git_commit") or ""
        hashes = unknown
        if not commit:
            source = "unknown: the run named no commit (a copy without .git)"
        elif commit.endswith("-dirty"):
            source = f"unknown: {commit} (uncommitted edits)"
        else:
            if commit not in cache:
                cache[commit] = hashes_at_commit(commit, repo)
            found = cache[commit]
            if found is None:
                source = f"unknown: commit {commit} not in this clone"
            elif rec.get(LEGACY_FIELD) and found[1] != rec[LEGACY_FIELD]:
                source = (f"unknown: the run's kernel_hash {rec[LEGACY_FIELD]} is not that of commit {commit} "
                          f"({found[1]}): it ran uncommitted kernel edits")
            else:
                hashes, source = found[0], f"git {commit}"
        counts[source] = counts.get(source, 0) + 1
        out.append({**rec, **hashes, "hashes_from": source})
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
