"""Reading a file a user named: a regular file only, never blocking, bounded, UTF-8.

A FIFO given where a file is expected (a thresholds file, a known-bad windows file, a ledger) must be an
error, not a hang, and a link to ``/dev/zero`` must not be read forever.  Used by the library (``config``,
``known_bad``) and the toolkit (``compat/core/atomic.py`` re-exports it).  Standard library only.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

READ_LIMIT = 256 * 2**20  # the real ledger is a few MB; anything this large is not one of our files


class FileProblem(ValueError):
    """A file that cannot be read or replaced as a text file; the message names it and says why."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_text(path: Path | str, limit: int = READ_LIMIT) -> str:
    """The UTF-8 text of the regular file ``path``; a :class:`FileProblem` naming it otherwise.

    Opened non-blocking and checked with ``fstat`` on the open descriptor (no race with a swap),
    so a FIFO never hangs the caller and a device (``/dev/zero``) is never read; a file over
    ``limit`` bytes is refused rather than read into memory.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise FileProblem(f"{path}: unreadable ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileProblem(f"{path}: is {_kind(st.st_mode)}, not a regular file")
        if st.st_size > limit:  # refused by its size, unread (a sparse 300 MiB file costs nothing to make)
            raise FileProblem(f"{path}: larger than {limit >> 20} MiB: not a file this tool wrote")
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise FileProblem(f"{path}: larger than {limit >> 20} MiB: not a file this tool wrote")
    except OSError as exc:
        raise FileProblem(f"{path}: unreadable ({exc.strerror})") from None
    finally:
        os.close(fd)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileProblem(f"{path}: not UTF-8 text (a binary file? bad byte at offset {exc.start})") from None
