"""Crash-safe file writes: one file atomically, several files as one commit, and a file lock.

- :func:`atomic_write_text` replaces one file so that a reader sees the old or the new text,
  never a torn one, and keeps the file's permission bits.
- :func:`commit` replaces several files (the ledger, ``MATRIX.md``, ``known-good.txt``) as one
  unit with a small journal: every new file is first written in full beside its target, then
  the journal listing them is written atomically (the commit point), then the files are renamed
  into place and the journal is removed.  A process killed before the commit point leaves the
  old files (plus stray temporaries that :func:`recover` removes); killed after it, the next
  :func:`recover` finishes the renames (roll forward).  Either way the three files end up from
  one generation.
- :func:`locked` serialises writers across processes (two ``nsa-sel pin`` at once).

Standard library only at import; ``filelock`` is imported when a lock is taken.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Iterator, Mapping

LOCK_TIMEOUT_S = 600.0  # a pin takes seconds; a lock held this long belongs to a hung process


def _default_mode() -> int:
    """The mode a new file gets from ``open()`` under the current umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _stage(path: Path, text: str) -> Path:
    """Write ``text`` to a temporary file beside ``path`` (fsynced, with ``path``'s mode)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o7777 if path.exists() else _default_mode()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fchmod(f.fileno(), mode)  # mkstemp creates 0600; keep what the file had
            os.fsync(f.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def atomic_write_text(path: Path | str, text: str) -> None:
    """Replace ``path`` with ``text``: readers see the old or the new file, never a torn one.

    The temporary file lives in the same directory (rename is atomic only within a filesystem)
    and is fsynced before the rename; the directory is fsynced after it so the rename survives
    a power loss.  On any failure the temporary file is removed and the original is untouched.
    """
    path = Path(path)
    tmp = _stage(path, text)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. platforms that cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def journal_path(anchor: Path) -> Path:
    """The journal of commits anchored at ``anchor`` (the ledger): a hidden file beside it."""
    return anchor.parent / f".{anchor.name}.journal"


def commit(files: Mapping[Path, str], journal: Path) -> None:
    """Replace every ``path: text`` of ``files`` as one unit (see the module docstring)."""
    staged: dict[Path, Path] = {}
    try:
        for path, text in files.items():
            staged[Path(path)] = _stage(Path(path), text)
        doc = {"kind": "nsa-sel-commit", "files": [[str(p), str(t)] for p, t in staged.items()]}
        atomic_write_text(journal, json.dumps(doc) + "\n")  # the commit point
    except BaseException:
        for tmp in staged.values():
            tmp.unlink(missing_ok=True)
        raise
    _roll_forward(journal)


def _roll_forward(journal: Path) -> None:
    doc = json.loads(journal.read_text())
    dirs = set()
    for target, tmp in doc["files"]:
        if Path(tmp).exists():  # not renamed yet (a rename either happened or did not)
            os.replace(tmp, target)
        dirs.add(Path(target).parent)
    for d in dirs:
        fsync_dir(d)
    journal.unlink()
    fsync_dir(journal.parent)


def recover(journal: Path, targets: list[Path]) -> str | None:
    """Finish or clean up after a commit that a killed process left behind.

    Rolls forward when the journal exists (the new files were complete before it was written);
    removes the temporaries of ``targets`` that no journal refers to (a commit killed before
    its commit point).  Returns what it did, or None when there was nothing to do.
    """
    done = []
    if journal.exists():
        try:
            _roll_forward(journal)
            done.append(f"finished an interrupted commit ({journal})")
        except (ValueError, KeyError, TypeError):  # a journal is written atomically; this is foreign
            raise ValueError(f"{journal}: not a commit journal; remove it by hand after checking") from None
    for target in [*targets, journal]:
        for stray in Path(target).parent.glob(f".{Path(target).name}.*.tmp"):
            stray.unlink(missing_ok=True)
            done.append(f"removed {stray.name}")
    return "; ".join(done) or None


@contextlib.contextmanager
def locked(anchor: Path, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold an exclusive inter-process lock tied to ``anchor`` (a hidden ``.lock`` file beside it)."""
    import filelock  # noqa: PLC0415 - only writers need it

    anchor = Path(anchor)
    anchor.parent.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(str(anchor.parent / f".{anchor.name}.lock"), timeout=timeout)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise TimeoutError(f"{anchor} is locked by another process for more than {timeout:.0f} s "
                           f"(a hung `nsa-sel pin`?)") from None
    try:
        yield
    finally:
        lock.release()
