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

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from ..._toml import loads

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
    path = NOTES_FILE if path is None else path
    data = loads(Path(path).read_text())
    if data.get("schema") != 1:
        raise ValueError(f"{path}: schema {data.get('schema')!r} is not supported (expected 1)")
    return [_note(path, i, raw, points) for i, raw in enumerate(data.get("note", []))]


def _note(path: Path, i: int, raw: dict, points: tuple[str, ...]) -> SpeedNote:
    where = f"{path}: note {i + 1}"
    missing = [f for f in FIELDS if not raw.get(f)]
    if missing or set(raw) - set(FIELDS):
        raise ValueError(f"{where}: needs exactly the fields {', '.join(FIELDS)} (missing {missing}, "
                         f"unknown {sorted(set(raw) - set(FIELDS))})")
    if points and raw["point"] not in points:
        raise ValueError(f"{where}: point {raw['point']!r} is not a speed point (one of {', '.join(points)})")
    try:
        spec = SpecifierSet(raw["triton"])
    except InvalidSpecifier as exc:
        raise ValueError(f"{where}: triton {raw['triton']!r} is not a PEP 440 specifier ({exc})") from None
    kernels = str(raw["kernels"])
    if len(kernels) != 16 or any(c not in "0123456789abcdef" for c in kernels):
        raise ValueError(f"{where}: kernels {kernels!r} must be a compiler-facing hash (16 hex digits, "
                         "nsa_triton_sel.provenance.compiler_hash())")
    return SpeedNote(str(raw["id"]), spec, str(raw["gpu"]), str(raw["point"]), kernels, str(raw["why"]),
                     str(raw["evidence"]))
