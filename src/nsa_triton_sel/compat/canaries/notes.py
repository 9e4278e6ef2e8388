"""Notes on GPU canaries that fired without hitting this project's kernels (``notes.toml`` beside this file).

A fired canary needs one of two answers, so that none is left unexplained: a known-bad window that covers
the release's GPU parity (our kernels are hit; the window carries a reproducer), or a note saying why our
kernels are not hit.  :func:`answer` finds it; MATRIX.md prints it beside the canary and flags a canary with
neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from ..core.notes_file import entries, triton_specifier
from .gpu import CANARIES

NOTES_FILE = Path(__file__).with_name("notes.toml")
FIELDS = ("canary", "triton", "arch", "why", "evidence")


@dataclass(frozen=True)
class CanaryNote:
    canary: str
    triton: SpecifierSet
    arch: tuple[int, ...]
    why: str
    evidence: str

    def covers(self, canary: str, version: str, arch: int | None) -> bool:
        return (canary == self.canary and self.triton.contains(Version(version), prereleases=True)
                and arch in self.arch)


def load(path: Path = NOTES_FILE) -> list[CanaryNote]:
    """The notes, validated: a bad field names the note, the field and what is accepted."""
    return [_note(where, raw) for where, raw in entries(path, FIELDS)]


def _note(where: str, raw: dict) -> CanaryNote:
    names = [c.name for c in CANARIES]
    if raw["canary"] not in names:
        raise ValueError(f"{where}: canary {raw['canary']!r} is not a GPU canary (one of {', '.join(names)})")
    spec = triton_specifier(where, raw["triton"])
    if not isinstance(raw["arch"], list) or not all(isinstance(a, int) for a in raw["arch"]):
        raise ValueError(f"{where}: arch must be a list of compute capabilities as integers, e.g. [90]")
    return CanaryNote(raw["canary"], spec, tuple(raw["arch"]), str(raw["why"]), str(raw["evidence"]))


def answer(canary: str, version: str, arch: int | None, windows: list, notes: list[CanaryNote]) -> str | None:
    """``"window"`` when a known-bad window covers this release's GPU parity there, ``"note"`` when a note
    covers the canary, else None (the canary still needs an answer)."""
    if any(w.covers(version, arch, "parity", "gpu") for w in windows):
        return "window"
    return "note" if any(n.covers(canary, version, arch) for n in notes) else None
