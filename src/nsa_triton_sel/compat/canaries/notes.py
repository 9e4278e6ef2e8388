"""Notes on GPU canaries that fired without hitting this project's kernels (``notes.toml`` beside this file).

A fired canary needs one of two answers, so that none is left unexplained: a known-bad window that covers
the release's GPU parity (our kernels are hit; the window carries a reproducer), or a note saying why our
kernels are not hit.  :func:`answer` finds it; MATRIX.md prints it beside the canary and flags a canary with
neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from ..._toml import loads
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
    data = loads(Path(path).read_text())
    if data.get("schema") != 1:
        raise ValueError(f"{path}: schema {data.get('schema')!r} is not supported (expected 1)")
    return [_note(path, i, raw) for i, raw in enumerate(data.get("note", []))]


def _note(path: Path, i: int, raw: dict) -> CanaryNote:
    where = f"{path}: note {i + 1}"
    missing = [f for f in FIELDS if not raw.get(f)]
    if missing or set(raw) - set(FIELDS):
        raise ValueError(f"{where}: needs exactly the fields {', '.join(FIELDS)} (missing {missing}, "
                         f"unknown {sorted(set(raw) - set(FIELDS))})")
    names = [c.name for c in CANARIES]
    if raw["canary"] not in names:
        raise ValueError(f"{where}: canary {raw['canary']!r} is not a GPU canary (one of {', '.join(names)})")
    try:
        spec = SpecifierSet(raw["triton"])
    except InvalidSpecifier as exc:
        raise ValueError(f"{where}: triton {raw['triton']!r} is not a PEP 440 specifier ({exc})") from None
    if not isinstance(raw["arch"], list) or not all(isinstance(a, int) for a in raw["arch"]):
        raise ValueError(f"{where}: arch must be a list of compute capabilities as integers, e.g. [90]")
    return CanaryNote(raw["canary"], spec, tuple(raw["arch"]), str(raw["why"]), str(raw["evidence"]))


def answer(canary: str, version: str, arch: int | None, windows: list, notes: list[CanaryNote]) -> str | None:
    """``"window"`` when a known-bad window covers this release's GPU parity there, ``"note"`` when a note
    covers the canary, else None (the canary still needs an answer)."""
    if any(w.covers(version, arch, "parity", "gpu") for w in windows):
        return "window"
    return "note" if any(n.covers(canary, version, arch) for n in notes) else None
