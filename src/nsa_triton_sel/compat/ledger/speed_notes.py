"""Notes on speed points that broke the advisory rule without the release being slower (``speed_notes.toml``).

The advisory rule (:data:`.gpu_tables.SLOW`) reads one benchmark run per release.  A point whose time is mostly
the host's (an eager training call at T = 4K) also moves with what else the machine did meanwhile, so a single run
can put a release more than 15 % behind the newest when repeated runs of the two side by side do not.  Such a
flag needs one of two answers, like a fired canary: an advisory known-bad window (the release is slower), or a
note here that names the point, the kernels the flagged run measured, and the repeated runs that answer it.
A note covers only records of those kernels: the next refresh's run on other kernels is judged afresh.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from ..core.notes_file import entries, triton_specifier

NOTES_FILE = Path(__file__).with_name("speed_notes.toml")
FIELDS = ("id", "triton", "gpu", "point", "kernels", "why", "evidence")


@dataclass(frozen=True)
class SpeedNote:
    id: str
    triton: SpecifierSet
    gpu: str
    point: str
    kernels: str
    why: str
    evidence: str

    def covers(self, version: str, gpu: str, point: str, kernels: str) -> bool:
        """This release's ``point`` measured on ``gpu`` (short name, e.g. H200) on compiler-facing ``kernels``."""
        return (point == self.point and gpu == self.gpu and kernels == self.kernels
                and self.triton.contains(Version(version), prereleases=True))


def load(path: Path | None = None, points: tuple[str, ...] = ()) -> list[SpeedNote]:
    """The notes of ``path`` (default :data:`NOTES_FILE`), validated: a bad field names the note, the field and
    what is accepted (``points``: the speed points a note may name; empty: any)."""
    return [_note(where, raw, points) for where, raw in entries(NOTES_FILE if path is None else path, FIELDS)]


def _note(where: str, raw: dict, points: tuple[str, ...]) -> SpeedNote:
    if points and raw["point"] not in points:
        raise ValueError(f"{where}: point {raw['point']!r} is not a speed point (one of {', '.join(points)})")
    spec = triton_specifier(where, raw["triton"])
    kernels = str(raw["kernels"])
    if len(kernels) != 16 or any(c not in "0123456789abcdef" for c in kernels):
        raise ValueError(f"{where}: kernels {kernels!r} must be a compiler-facing hash (16 hex digits, "
                         "nsa_triton_sel.provenance.compiler_hash())")
    return SpeedNote(str(raw["id"]), spec, str(raw["gpu"]), str(raw["point"]), kernels, str(raw["why"]),
                     str(raw["evidence"]))
