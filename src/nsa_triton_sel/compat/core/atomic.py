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
- :func:`locked` serialises writers across processes (two ``nsa-sel pin`` at once) and leaves no
  lock file behind.
- :func:`read_text` reads a file the toolkit was handed: only a regular file, bounded, UTF-8,
  never blocking (a FIFO named ``*.json`` or a link to ``/dev/zero`` is an error, not a hang);
  :func:`loads_json` / :func:`read_json` parse strict JSON (no NaN or Infinity, no number out of a
  float's range, nesting past the parser an error); :func:`check_output` vets a path the user asks
  a command to write, before the command does its work.

A symlinked target keeps being a symlink: the write goes through to the file it points at.
Recovery renames only the files its caller names (and their temporaries beside them): a
journal listing anything else is refused, never obeyed.

Standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Iterator, Mapping

from ...files import READ_LIMIT, FileProblem, _kind, read_text  # noqa: F401 - the toolkit's names for them

LOCK_TIMEOUT_S = 600.0  # a pin takes seconds; a lock held this long belongs to a hung process


class JournalError(ValueError):
    """A commit journal that is not one this code wrote for these files; nothing was renamed."""


class _NotJSON(ValueError):
    pass


def _no_constant(name: str):
    raise _NotJSON(f"{name} is not JSON (strict JSON has no NaN or Infinity)")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotJSON(f"the number {text[:24]}{'...' if len(text) > 24 else ''} is out of range (not a finite float)")
    return value


def loads_json(text: str):
    """Strict JSON: what ``json.loads`` reads, less NaN, Infinity and numbers beyond a float (``1e400``), which
    it takes silently and ``json.dumps`` then writes as non-JSON; a ValueError with a one-line reason for
    anything else it cannot read (a syntax error with its position, nesting deeper than the parser goes,
    an integer of thousands of digits)."""
    try:
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except _NotJSON as exc:
        raise ValueError(str(exc)) from None
    except RecursionError:
        raise ValueError("nested deeper than the JSON parser goes") from None
    except ValueError as exc:  # e.g. an integer beyond sys.get_int_max_str_digits()
        raise ValueError(f"not readable as JSON: {str(exc)[:120]}") from None


def dumps_json(value, **kw) -> str:
    """JSON text that :func:`loads_json` reads back: NaN and Infinity are refused (a ValueError), never written."""
    return json.dumps(value, allow_nan=False, **kw)


def read_json(path: Path | str, limit: int = READ_LIMIT):
    """The strict JSON document in the regular file ``path`` (:func:`read_text`, :func:`loads_json`); a
    :class:`FileProblem` naming the file and what is wrong otherwise."""
    text = read_text(path, limit)
    try:
        return loads_json(text)
    except ValueError as exc:
        raise FileProblem(f"{path}: {exc}") from None


def check_output(path: Path | str, option: str) -> Path:
    """A file a command was asked to write (``--json FILE``), vetted before the command does its work: a
    regular file or nothing yet, in an existing, writable directory.  A :class:`FileProblem` naming the
    option otherwise (a directory, FIFO, device or symlink loop in the way; a missing directory)."""
    if not str(path):
        raise FileProblem(f"{option} '': expected a file path")
    path = Path(path)
    where = f"{option} {path}"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if path.is_symlink():
            raise FileProblem(f"{where}: a symlink to a missing file; give a file path") from None
        st = None
    except OSError as exc:  # a symlink loop, a file used as a directory, no permission
        raise FileProblem(f"{where}: cannot be written ({exc.strerror})") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise FileProblem(f"{where}: is {_kind(st.st_mode)}; expected a file path")
    parent = path.parent
    if not parent.is_dir():
        raise FileProblem(f"{where}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (st is not None and not os.access(path, os.W_OK)):
        raise FileProblem(f"{where}: not writable")
    return path


def write_target(path: Path | str) -> Path:
    """Where writing ``path`` must go: the file a symlink points at (so the link stays a link); a symlink
    loop is a :class:`FileProblem` (a rename would replace the link with a file)."""
    path = Path(path)
    if not path.is_symlink():
        return path
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise FileProblem(f"{path}: a symlink loop, not a file; nothing was written") from None
    return Path(os.path.realpath(path))


def _check_writable(path: Path, need_dir: bool = False) -> None:
    """Refuse, before anything is written, a target that a rename could not replace."""
    if path.exists() and not path.is_file():
        raise FileProblem(f"{path}: is {_kind(path.stat().st_mode)}, not a regular file; nothing was written")
    if need_dir and not path.parent.is_dir():
        raise FileProblem(f"{path}: directory {path.parent} does not exist; nothing was written")


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
    path = write_target(path)
    _check_writable(path)
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
    """Replace every ``path: text`` of ``files`` as one unit (see the module docstring).

    Every target is checked first (a directory in the way would otherwise fail a rename after
    the commit point); symlinked targets are written through.
    """
    real = {Path(os.path.abspath(write_target(p))): text for p, text in files.items()}
    for path in real:
        _check_writable(path, need_dir=True)
    staged: dict[Path, Path] = {}
    try:
        for path, text in real.items():
            staged[path] = _stage(path, text)
        doc = {"kind": "nsa-sel-commit", "files": [[str(p), str(t)] for p, t in staged.items()]}
        atomic_write_text(journal, json.dumps(doc) + "\n")  # the commit point
    except BaseException:
        for tmp in staged.values():
            tmp.unlink(missing_ok=True)
        raise
    _roll_forward(journal, list(real))


def _allowed(targets) -> set[Path]:
    """The paths a journal for ``targets`` may name: each as given and as its symlink's target."""
    out = set()
    for t in targets:
        out |= {Path(os.path.abspath(t)), Path(os.path.realpath(t))}
    return out


def _journal_files(journal: Path, targets) -> list[tuple[Path, Path]]:
    """The (target, temporary) pairs of a journal, each checked to be one ``targets`` allows.

    A journal is written atomically by :func:`commit`, so one that does not parse, or that names
    any other file, did not come from here: it is refused, and nothing is renamed.
    """
    refuse = f"{journal}: not a commit journal of this tool; nothing was renamed (remove it by hand after checking)"
    try:
        doc = json.loads(read_text(journal, limit=1 << 20))
    except (FileProblem, ValueError, RecursionError):
        raise JournalError(refuse) from None
    files = doc.get("files") if isinstance(doc, dict) and doc.get("kind") == "nsa-sel-commit" else None
    if not isinstance(files, list) or not all(isinstance(f, list) and len(f) == 2 and all(isinstance(x, str) and x
                                                                                      for x in f) for f in files):
        raise JournalError(refuse)
    allowed, pairs = _allowed(targets), []
    for target, tmp in ((Path(os.path.abspath(a)), Path(os.path.abspath(b))) for a, b in files):
        if target not in allowed:
            names = ", ".join(sorted({str(Path(t)) for t in targets}))
            raise JournalError(f"{journal}: names {target}, which is not one of the files it may replace "
                               f"({names}); refused, nothing was renamed (remove the journal by hand after checking)")
        if tmp.parent != target.parent or not (tmp.name.startswith(f".{target.name}.") and tmp.name.endswith(".tmp")):
            raise JournalError(f"{journal}: its temporary {tmp} is not a temporary of {target}; refused, nothing "
                               "was renamed (remove the journal by hand after checking)")
        pairs.append((target, tmp))
    return pairs


def _roll_forward(journal: Path, targets) -> None:
    dirs = set()
    for target, tmp in _journal_files(journal, targets):
        if tmp.exists():  # not renamed yet (a rename either happened or did not)
            os.replace(tmp, target)
        dirs.add(target.parent)
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
    if journal.exists() or journal.is_symlink():
        _roll_forward(journal, targets)  # a JournalError when it is not ours: nothing renamed
        done.append(f"finished an interrupted commit ({journal})")
    for target in [*targets, *(write_target(t) for t in targets), journal]:
        for stray in Path(target).parent.glob(f".{Path(target).name}.*.tmp"):
            stray.unlink(missing_ok=True)
            done.append(f"removed {stray.name}")
    return "; ".join(done) or None


@contextlib.contextmanager
def locked(anchor: Path, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold an exclusive inter-process lock tied to ``anchor``: ``flock`` on a hidden ``.lock`` file beside it,
    removed again on release, so a pin (a refused one too) leaves nothing behind.

    Removing a lock file is safe with both halves of the usual protocol: the holder removes it while it
    still holds the lock, and whoever gets the lock checks that the path still names the file it locked
    (else it locked a file its holder removed, and starts over).  ``filelock`` keeps its file for want of
    the second half, hence this.
    """
    import fcntl  # noqa: PLC0415 - POSIX, like the rest of the toolkit's process handling

    anchor = Path(anchor)
    anchor.parent.mkdir(parents=True, exist_ok=True)
    path = anchor.parent / f".{anchor.name}.lock"
    deadline = time.monotonic() + timeout
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{anchor} is locked by another process for more than {timeout:.0f} s "
                                   f"(a hung `nsa-sel pin`?)") from None
            time.sleep(0.05)
            continue
        try:
            current = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            current = None
        if current is not None and os.path.samestat(current, os.fstat(fd)):
            break
        os.close(fd)  # the holder before us removed this file: lock the one at the path now
    try:
        yield
    finally:
        try:
            os.unlink(path)  # while still holding the lock (see above)
        except FileNotFoundError:
            pass
        finally:
            os.close(fd)
