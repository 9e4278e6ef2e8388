"""The lanes table (``constraints/lanes.toml``) and what is derived from it: one lane per Triton minor
(exact Triton, the torch releases that pin it, Python range, numpy, extras), its patch releases
(``[[lane.patch]]``, checked with the lane's rules in sessions of their own), the noxfile's sessions
(:func:`load_table`) and the per-lane pip constraints files (:func:`constraints_text`; ``--write``/``--check``).
What this machine runs them on (cores, GPUs, archs) is :mod:`.machine`.  Standard library and ``packaging``
only: the noxfile imports it before any lane exists."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from ... import _toml
from . import project
from .atomic import FileProblem, atomic_write_text, read_text
from .verdicts import REQUIRABLE

SCHEMA = 1
LANE_KEYS = {"label", "triton", "torch", "torch_cuda", "python", "numpy", "numpy_reason", "extras",
             "extras_reason", "patch"}
PATCH_KEYS = {"triton", "torch", "torch_cuda"}
MATRIX_KEYS = {"required", "archs", "knobs"}


@dataclass(frozen=True)
class Lane:
    """One release to test.  ``label`` is the Triton minor ("3.3"), ``triton`` the release ("3.3.1").

    A patch release (``patch=True``) shares its lane's label and rules; ``name`` tells the
    sessions apart (``compile-3.3`` for the lane's own release, ``compile-3.3.0`` for the patch).
    """

    label: str
    triton: str
    torch: tuple[str, ...]
    python: str
    numpy: str
    torch_cuda: str | None = None
    extras: tuple[str, ...] = ()
    numpy_reason: str = ""
    extras_reason: str = ""
    candidate: bool = False  # a temporary lane built by check-upgrade, not in the table
    patch: bool = False

    @property
    def version(self) -> Version:
        return Version(self.triton)

    @property
    def name(self) -> str:
        """What the session names carry: the label, the exact release of a patch, or 'candidate'."""
        return "candidate" if self.candidate else self.triton if self.patch else self.label

    @property
    def title(self) -> str:
        """How messages name it: "3.1", "3.3.0 (patch of lane 3.3)", "3.10.0 (candidate)"."""
        if self.candidate:
            return f"{self.triton} (candidate)"
        return f"{self.triton} (patch of lane {self.label})" if self.patch else self.label

    @property
    def paired_torch(self) -> str | None:
        """The torch a GPU lane installs: the first of ``torch`` (None: no torch pins it yet)."""
        return self.torch[0] if self.torch else None

    def python_ok(self, python_version: str) -> bool:
        """Whether wheels of this lane exist for that interpreter (e.g. "3.11.9")."""
        return Version(python_version) in SpecifierSet(self.python)

    def torch_is_paired(self, torch_version: str | None, cuda: str | None) -> bool:
        """A torch counts as paired when it is a CUDA build of one of the lane's torch releases.

        A CPU build has no Triton requirement at all, so it never proves the pairing.
        """
        if not torch_version or not cuda:
            return False
        return Version(Version(torch_version).base_version) in {Version(t) for t in self.torch}

    def requirements(self) -> list[str]:
        """What a lane environment installs besides torch: exact Triton, numpy, extras."""
        numpy = f"numpy{self.numpy}" if self.numpy else "numpy"
        return [f"triton=={self.triton}", numpy, *self.extras]


@dataclass(frozen=True)
class Table:
    """The whole table: lanes sorted by Triton version, their patch releases, matrix-wide settings."""

    lanes: tuple[Lane, ...]
    required: tuple[str, ...] = ("compile", "parity")
    archs: tuple[int, ...] = (80, 89, 90)
    knobs: dict = field(default_factory=dict)
    patches: tuple[Lane, ...] = ()

    def lane(self, label: str) -> Lane:
        """The lane with that label; a clear error listing the labels otherwise."""
        for lane in self.lanes:
            if lane.label == label:
                return lane
        raise KeyError(f"no lane {label!r} in the table; lanes: {', '.join(self.labels)}")

    @property
    def labels(self) -> list[str]:
        return [lane.label for lane in self.lanes]

    @property
    def releases(self) -> tuple[Lane, ...]:
        """Every release the table tests (lanes and their patches), sorted by version."""
        return tuple(sorted(self.lanes + self.patches, key=lambda r: r.version))

    def for_version(self, version: str) -> Lane | None:
        """The release whose exact Triton is ``version`` (lane or patch), or None."""
        v = Version(version)
        return next((r for r in self.releases if r.version == v), None)

    def newest(self) -> Lane:
        return self.lanes[-1]


class TableError(ValueError):
    """lanes.toml does not parse or says something inconsistent; the message names the field."""


def _need(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise TableError(f"{where}: {what}")


def _strings(raw, where: str, key: str) -> tuple[str, ...]:
    value = [raw] if isinstance(raw, str) else raw
    _need(isinstance(value, list) and all(isinstance(v, str) for v in value), where,
          f"`{key}` must be a string or a list of strings, got {raw!r}")
    return tuple(value)


def _checked(where: str, key: str, text, parse) -> None:
    _need(isinstance(text, str), where, f"`{key}` must be a string, got {text!r}")
    try:
        parse(text)
    except (InvalidVersion, InvalidSpecifier, ValueError) as exc:  # ValueError: 5000 digits exceed int()'s limit
        raise TableError(f"{where}: `{key}` = {text[:60]!r} does not parse ({str(exc)[:120]})") from None


def _lane(raw: dict, where: str) -> tuple[Lane, list[Lane]]:
    _need(isinstance(raw, dict), where, "each [[lane]] must be a table")
    where = f"{where} [[lane]] {raw.get('label', '?')!r}"
    _need(not (raw.keys() - LANE_KEYS), where, f"unknown field(s) {sorted(raw.keys() - LANE_KEYS)}; "
          f"known: {sorted(LANE_KEYS)}")
    missing = {"label", "triton", "torch", "python"} - raw.keys()
    _need(not missing, where, f"lacks {sorted(missing)}")
    for key, parse in (("triton", Version), ("python", SpecifierSet), ("numpy", SpecifierSet)):
        _checked(where, key, raw.get(key, ""), parse)
    torch = _strings(raw["torch"], where, "torch")
    for t in torch:
        _checked(where, "torch", t, Version)
    lane = Lane(label=str(raw["label"]), triton=raw["triton"], torch=torch, python=raw["python"],
                numpy=raw.get("numpy", ""), torch_cuda=raw.get("torch_cuda"),
                extras=_strings(raw.get("extras", []), where, "extras"),
                numpy_reason=raw.get("numpy_reason", ""), extras_reason=raw.get("extras_reason", ""))
    v = lane.version
    _need(lane.label == f"{v.major}.{v.minor}", where, f"label must be the minor of triton {lane.triton}")
    patches = raw.get("patch", [])
    _need(isinstance(patches, list), where, f"`patch` must be [[lane.patch]] tables, got {patches!r}")
    return lane, [_patch(lane, p, where) for p in patches]


def _patch(lane: Lane, raw: dict, where: str) -> Lane:
    _need(isinstance(raw, dict), f"{where} [[lane.patch]]", f"each [[lane.patch]] must be a table, got {raw!r}")
    where = f"{where} [[lane.patch]] {raw.get('triton', '?')!r}"
    _need(not (raw.keys() - PATCH_KEYS), where, f"unknown field(s) {sorted(raw.keys() - PATCH_KEYS)}; "
          f"known: {sorted(PATCH_KEYS)}")
    _need("triton" in raw and "torch" in raw, where, "needs `triton` and `torch`")
    _checked(where, "triton", raw["triton"], Version)
    torch = _strings(raw["torch"], where, "torch")
    v = Version(raw["triton"])
    _need(f"{v.major}.{v.minor}" == lane.label and v != lane.version, where,
          f"a patch must be another release of the lane's minor {lane.label}")
    return replace(lane, triton=raw["triton"], torch=torch, torch_cuda=raw.get("torch_cuda", lane.torch_cuda),
                   patch=True)


def _matrix(m, where: str) -> dict:
    where = f"{where} [matrix]"
    _need(isinstance(m, dict), where, "must be a table")
    _need(not (m.keys() - MATRIX_KEYS), where, f"unknown field(s) {sorted(m.keys() - MATRIX_KEYS)}; "
          f"known: {sorted(MATRIX_KEYS)}")
    required = _strings(m.get("required", ["compile", "parity"]), where, "required")
    bad = [c for c in required if c not in REQUIRABLE]
    _need(not bad, where, f"`required` has unknown check(s) {bad}; accepted: {', '.join(REQUIRABLE)}")
    archs = m.get("archs", [80, 89, 90])
    _need(isinstance(archs, list) and archs and all(isinstance(a, int) and not isinstance(a, bool)
                                                    and 50 <= a <= 200 for a in archs), where,
          f"`archs` must be a non-empty list of compute capabilities as integers (e.g. [80, 89, 90]), got {archs!r}")
    knobs = m.get("knobs", {})
    _need(isinstance(knobs, dict) and all(isinstance(v, (str, int)) for v in knobs.values()), where,
          f"`knobs` must map names to strings, got {knobs!r}")
    return {"required": required, "archs": tuple(archs), "knobs": dict(knobs)}


def load_table(path: Path | str | None = None) -> Table:
    """Parse ``lanes.toml`` (default: the project's, see :mod:`.project`); lanes sorted by version."""
    path = Path(path) if path else project.constraints_dir() / project.TABLE_NAME
    try:
        data = _toml.loads(read_text(path))
    except FileProblem as exc:  # binary, a directory, unreadable: one line naming it, never a traceback
        raise TableError(str(exc)) from None
    except (_toml.TOMLDecodeError, RecursionError) as exc:  # RecursionError: nesting deeper than tomllib goes
        raise TableError(f"{path}: not valid TOML ({exc})") from None
    _need(data.get("schema") == SCHEMA, str(path), f"schema {data.get('schema')!r}, this code reads {SCHEMA}")
    unknown = data.keys() - {"schema", "matrix", "lane"}
    _need(not unknown, str(path), f"unknown top-level key(s) {sorted(unknown)}")
    rows = data.get("lane", [])
    _need(isinstance(rows, list) and rows, str(path),
          "no [[lane]] rows: the table needs at least one lane (label, triton, torch, python)")
    parsed = [_lane(raw, str(path)) for raw in rows]
    lanes = sorted((lane for lane, _ in parsed), key=lambda lane: lane.version)
    patches = [p for _, ps in parsed for p in ps]
    labels = [lane.label for lane in lanes]
    _need(len(set(labels)) == len(labels), str(path), f"duplicate lane labels in {labels}")
    versions = [r.triton for r in lanes + patches]
    _need(len({Version(v) for v in versions}) == len(versions), str(path), f"a release is listed twice in {versions}")
    return Table(lanes=tuple(lanes), patches=tuple(sorted(patches, key=lambda p: p.version)),
                 **_matrix(data.get("matrix", {}), str(path)))


def rules_for(version: str, table: Table) -> tuple[Lane, str]:
    """The lane whose rules (Python range, numpy, extras) a release not in the table should follow.

    The lane of the same minor when there is one; else the nearest lane below it; else the
    oldest lane.  Returns the lane and a phrase saying why it was picked.
    """
    v = Version(version)
    same = [lane for lane in table.lanes if (lane.version.major, lane.version.minor) == (v.major, v.minor)]
    if same:
        return same[0], f"lane {same[0].label} (same minor)"
    below = [lane for lane in table.lanes if lane.version < v]
    if below:
        return below[-1], f"lane {below[-1].label} (the nearest below)"
    return table.lanes[0], f"lane {table.lanes[0].label} (the oldest; the candidate is older than every lane)"


def candidate_lane(version: str, table: Table) -> Lane:
    """A temporary lane for a Triton release to pre-check (check-upgrade).

    A release the table already lists keeps its own row; any other follows :func:`rules_for`
    (never blindly the newest lane: numpy 2.4 breaks the 3.2-3.6 interpreter).  torch is known
    only for listed releases, so an unlisted candidate is never paired.
    """
    listed = table.for_version(version)
    if listed is not None:
        return replace(listed, candidate=True)
    base, why = rules_for(version, table)
    v = Version(version)
    return replace(base, label=f"{v.major}.{v.minor}", triton=str(v), torch=(), torch_cuda=None,
                   numpy_reason=f"from {why}: {base.numpy_reason}".rstrip(": "), candidate=True, patch=False)


def constraints_text(lane: Lane) -> str:
    """The pip/uv constraints file of one lane (comments say where each pin comes from)."""
    torch_alts = ", ".join(lane.torch[1:])
    lines = [
        f"# Lane {lane.label}: GENERATED from constraints/lanes.toml by `nox -s constraints`; do not edit.",
        f"# Triton {lane.triton} is pinned by torch {' / '.join(lane.torch) or '(none known yet)'}"
        f" (CUDA {lane.torch_cuda or '?'}); Python {lane.python}.",
        f"# Use, in a checkout (the package is not on PyPI): pip install -c constraints/triton-{lane.label}.txt .",
        "# (into an environment that already has this Triton: the file keeps pip from moving it or torch)",
        f"triton=={lane.triton}",
    ]
    if lane.paired_torch:
        lines.append(f"torch=={lane.paired_torch}" + (f"  # also pins this Triton: {torch_alts}" if torch_alts else ""))
    if lane.numpy:
        lines.append(f"numpy{lane.numpy}  # {lane.numpy_reason}" if lane.numpy_reason else f"numpy{lane.numpy}")
    for extra in lane.extras:
        lines.append(f"{extra}  # {lane.extras_reason}" if lane.extras_reason else extra)
    return "\n".join(lines) + "\n"


def constraints_path(lane: Lane, root: Path | None = None) -> Path:
    return (root or project.constraints_dir()) / f"triton-{lane.label}.txt"


def stale_constraints(table: Table, root: Path | None = None) -> list[Path]:
    """Constraint files that are missing or differ from what the table derives."""
    stale = []
    for lane in table.lanes:
        path = constraints_path(lane, root)
        if not path.exists() or read_text(path) != constraints_text(lane):  # a FIFO there: an error, not a hang
            stale.append(path)
    return stale


def write_constraints(table: Table, root: Path | None = None) -> list[Path]:
    """(Re)write every lane's constraints file atomically; returns the files that changed."""
    changed = stale_constraints(table, root)
    for lane in table.lanes:
        path = constraints_path(lane, root)
        if path in changed:
            atomic_write_text(path, constraints_text(lane))
    return changed


def main(argv: list[str] | None = None) -> int:
    """``python -m nsa_triton_sel.compat.core.lane_table [--write | --check | --newest | --oldest]`` (no option: list the releases)."""
    p = argparse.ArgumentParser(prog="python -m nsa_triton_sel.compat.core.lane_table", description=__doc__.splitlines()[0])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--write", action="store_true", help="regenerate constraints/triton-*.txt")
    g.add_argument("--check", action="store_true", help="exit 1 if a constraints file is stale")
    g.add_argument("--newest", action="store_true", help="print the newest lane's label (the main job's lane)")
    g.add_argument("--oldest", action="store_true", help="print the oldest lane's label")
    args = p.parse_args(argv)
    table = load_table()
    if args.newest or args.oldest:
        print(table.newest().name if args.newest else table.lanes[0].name)
        return 0
    if args.write:
        changed = write_constraints(table)
        print(f"{len(changed)} constraints file(s) rewritten" + "".join(f"\n  {c}" for c in changed))
        return 0
    if args.check:
        stale = stale_constraints(table)
        for path in stale:
            print(f"stale: {path} (run `nox -s constraints`)", file=sys.stderr)
        return 1 if stale else 0
    for r in table.releases:
        print(f"{r.name:<6} triton {r.triton:<7} torch {'/'.join(r.torch):<15} "
              f"python {r.python:<13} numpy{r.numpy or ' any':<8} {' '.join(r.extras)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
