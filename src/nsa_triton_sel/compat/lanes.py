"""The lanes table (``constraints/lanes.toml``) and what is derived from it.

One lane per Triton minor release: its exact Triton, the torch releases that pin it, the Python
range, the numpy the interpreter needs, and extra requirements.  The noxfile builds its sessions
from :func:`load_lanes`; :func:`constraints_text` renders the per-lane pip constraints files
(``constraints/triton-<label>.txt``), which ``python -m nsa_triton_sel.compat.lanes --write`` (or
``nox -s constraints``) regenerates and ``--check`` verifies.

This module needs only the standard library and ``packaging`` so that the noxfile can import it
from ``src/`` before any lane environment exists.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - nox itself depends on tomli on 3.10
    import tomli as tomllib

SCHEMA = 1


def repo_root() -> Path:
    """The checkout this module lives in (src layout: ``<root>/src/nsa_triton_sel``)."""
    return Path(__file__).resolve().parents[3]


def constraints_dir() -> Path:
    """Where the table and its derived files live; ``NSA_SEL_CONSTRAINTS`` overrides it."""
    return Path(os.environ.get("NSA_SEL_CONSTRAINTS") or repo_root() / "constraints")


@dataclass(frozen=True)
class Lane:
    """One row of the table.  ``label`` is the Triton minor ("3.3"), ``triton`` the release ("3.3.1")."""

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

    @property
    def version(self) -> Version:
        return Version(self.triton)

    @property
    def slug(self) -> str:
        """The label as nox normalises it in directory names ("3.1" -> "3-1")."""
        return self.label.replace(".", "-")

    @property
    def paired_torch(self) -> str:
        """The torch a GPU lane installs: the first of ``torch``."""
        return self.torch[0]

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
    """The whole table: lanes sorted by Triton version, plus matrix-wide settings."""

    lanes: tuple[Lane, ...]
    required: tuple[str, ...] = ("compile", "parity")
    archs: tuple[int, ...] = (80, 89, 90)
    knobs: dict = field(default_factory=dict)
    other_releases: tuple[str, ...] = ()

    def lane(self, label: str) -> Lane:
        """The lane with that label; a clear error listing the labels otherwise."""
        for lane in self.lanes:
            if lane.label == label:
                return lane
        raise KeyError(f"no lane {label!r} in the table; lanes: {', '.join(self.labels)}")

    @property
    def labels(self) -> list[str]:
        return [lane.label for lane in self.lanes]

    def for_version(self, version: str) -> Lane | None:
        """The lane whose exact Triton is ``version`` (local/patch must match), or None."""
        v = Version(version)
        return next((lane for lane in self.lanes if lane.version == v), None)

    def newest(self) -> Lane:
        return self.lanes[-1]


def _lane(raw: dict) -> Lane:
    missing = {"label", "triton", "torch", "python"} - raw.keys()
    if missing:
        raise ValueError(f"lane {raw.get('label', '?')!r} lacks {sorted(missing)}")
    lane = Lane(
        label=str(raw["label"]),
        triton=str(raw["triton"]),
        torch=tuple(raw["torch"]) if isinstance(raw["torch"], list) else (raw["torch"],),
        python=raw["python"],
        numpy=raw.get("numpy", ""),
        torch_cuda=raw.get("torch_cuda"),
        extras=tuple(raw.get("extras", ())),
        numpy_reason=raw.get("numpy_reason", ""),
        extras_reason=raw.get("extras_reason", ""),
    )
    _validate(lane)
    return lane


def _validate(lane: Lane) -> None:
    """Reject rows whose fields do not parse or disagree, at load time rather than mid-run."""
    v = lane.version  # raises InvalidVersion on garbage
    if lane.label != f"{v.major}.{v.minor}":
        raise ValueError(f"lane {lane.label!r}: label must be the minor of triton {lane.triton}")
    SpecifierSet(lane.python)
    SpecifierSet(lane.numpy)
    for t in lane.torch:
        Version(t)


def load_table(path: Path | None = None) -> Table:
    """Parse ``lanes.toml``; lanes come back sorted by Triton version (3.10 after 3.9)."""
    path = path or constraints_dir() / "lanes.toml"
    data = tomllib.loads(Path(path).read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema {data.get('schema')!r}, this code reads {SCHEMA}")
    lanes = sorted((_lane(raw) for raw in data.get("lane", [])), key=lambda lane: lane.version)
    labels = [lane.label for lane in lanes]
    if len(set(labels)) != len(labels):
        raise ValueError(f"{path}: duplicate lane labels in {labels}")
    m = data.get("matrix", {})
    return Table(
        lanes=tuple(lanes),
        required=tuple(m.get("required", ("compile", "parity"))),
        archs=tuple(int(a) for a in m.get("archs", (80, 89, 90))),
        knobs=dict(m.get("knobs", {})),
        other_releases=tuple(m.get("other_releases", ())),
    )


def load_lanes(path: Path | None = None) -> list[Lane]:
    """Just the lanes, sorted by Triton version."""
    return list(load_table(path).lanes)


def candidate_lane(version: str, table: Table) -> Lane:
    """A temporary lane for a Triton release not in the table (check-upgrade).

    It inherits the newest lane's numpy and Python range: the best guess until the release is
    measured and given its own row.  torch is unknown, so nothing counts as paired.
    """
    v = Version(version)
    base = table.newest()
    return Lane(
        label=f"{v.major}.{v.minor}",
        triton=str(v),
        torch=("0",),  # no torch release is known to pin it yet
        python=base.python,
        numpy=base.numpy,
        extras=base.extras,
        numpy_reason=f"assumed from lane {base.label}",
        candidate=True,
    )


def constraints_text(lane: Lane) -> str:
    """The pip/uv constraints file of one lane (comments say where each pin comes from)."""
    torch_alts = ", ".join(lane.torch[1:])
    lines = [
        f"# Lane {lane.label}: GENERATED from constraints/lanes.toml by `nox -s constraints`; do not edit.",
        f"# Triton {lane.triton} is pinned by torch {' / '.join(lane.torch)}"
        f" (CUDA {lane.torch_cuda or '?'}); Python {lane.python}.",
        "# Use: pip install -c constraints/triton-%s.txt nsa-triton-sel" % lane.label,
        f"triton=={lane.triton}",
        f"torch=={lane.paired_torch}" + (f"  # also pins this Triton: {torch_alts}" if torch_alts else ""),
    ]
    if lane.numpy:
        lines.append(f"numpy{lane.numpy}  # {lane.numpy_reason}" if lane.numpy_reason else f"numpy{lane.numpy}")
    for extra in lane.extras:
        lines.append(f"{extra}  # {lane.extras_reason}" if lane.extras_reason else extra)
    return "\n".join(lines) + "\n"


def constraints_path(lane: Lane, root: Path | None = None) -> Path:
    return (root or constraints_dir()) / f"triton-{lane.label}.txt"


def stale_constraints(table: Table, root: Path | None = None) -> list[Path]:
    """Constraint files that are missing or differ from what the table derives."""
    stale = []
    for lane in table.lanes:
        path = constraints_path(lane, root)
        if not path.exists() or path.read_text() != constraints_text(lane):
            stale.append(path)
    return stale


def write_constraints(table: Table, root: Path | None = None) -> list[Path]:
    """(Re)write every lane's constraints file atomically; returns the files that changed."""
    from .ledger import atomic_write_text  # local import: ledger imports this module

    changed = stale_constraints(table, root)
    for lane in table.lanes:
        path = constraints_path(lane, root)
        if path in changed:
            atomic_write_text(path, constraints_text(lane))
    return changed


def main(argv: list[str] | None = None) -> int:
    """``python -m nsa_triton_sel.compat.lanes [--write | --check | --list]``."""
    p = argparse.ArgumentParser(prog="python -m nsa_triton_sel.compat.lanes", description=__doc__.splitlines()[0])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--write", action="store_true", help="regenerate constraints/triton-*.txt")
    g.add_argument("--check", action="store_true", help="exit 1 if a constraints file is stale")
    args = p.parse_args(argv)
    table = load_table()
    if args.write:
        changed = write_constraints(table)
        print(f"{len(changed)} constraints file(s) rewritten" + "".join(f"\n  {c}" for c in changed))
        return 0
    if args.check:
        stale = stale_constraints(table)
        for path in stale:
            print(f"stale: {path} (run `nox -s constraints`)", file=sys.stderr)
        return 1 if stale else 0
    for lane in table.lanes:
        print(f"{lane.label:<5} triton {lane.triton:<7} torch {'/'.join(lane.torch):<15} "
              f"python {lane.python:<13} numpy{lane.numpy or ' any':<8} {' '.join(lane.extras)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
