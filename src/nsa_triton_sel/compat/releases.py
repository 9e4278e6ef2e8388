"""``nsa-sel releases``: the release watcher.  What the package index has that ``lanes.toml`` lacks.

It lists the Triton releases on the index and the Triton requirement of every torch release from
the table's oldest torch on, compares both with ``constraints/lanes.toml``, and prints for each new
Triton the ``nsa-sel check-upgrade`` command that decides it (and, for a new torch whose Triton is
already tested, the lane whose ``torch`` list it belongs in).

The index is read through the PyPI JSON API layout: ``URL/<project>/json`` (every release, with
its files and whether they are yanked) and ``URL/<project>/<version>/json`` (a release's
``requires_dist``).  ``--index-url`` (or ``$NSA_SEL_INDEX_URL``) points it at a mirror or at a
``file://`` tree of the same layout (the tests use one; nothing here needs the network otherwise).

Exit status: 0 (report printed; with ``--fail-on-new`` only when nothing is new), 1 (``--fail-on-new``
and something is new), 2 (usage, lanes.toml), 3 (the index could not be read).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from . import lanes, project

DEFAULT_INDEX = "https://pypi.org/pypi"
ENV_INDEX = "NSA_SEL_INDEX_URL"


class IndexError_(RuntimeError):
    """The index could not be read; the message names the URL and why."""


def fetch_json(url: str, timeout: float) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - http(s) or file:// by design
            return json.loads(resp.read().decode("utf-8"))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise IndexError_(f"cannot read {url}: {getattr(exc, 'reason', exc)}") from None


def _final(version: str, pre: bool) -> Version | None:
    try:
        v = Version(version)
    except InvalidVersion:
        return None
    return v if pre or not (v.is_prerelease or v.is_devrelease) else None


def available(doc: dict, pre: bool = False) -> list[Version]:
    """Releases with at least one file that is not yanked (a release with no file cannot be installed)."""
    out = []
    for version, files in (doc.get("releases") or {}).items():
        v = _final(version, pre)
        if v is not None and any(not f.get("yanked") for f in files or []):
            out.append(v)
    return sorted(out)


def triton_requirement(doc: dict) -> Requirement | None:
    """The ``triton`` requirement of a torch release (its Linux wheel's pin), or None."""
    for raw in (doc.get("info") or {}).get("requires_dist") or []:
        try:
            req = Requirement(raw)
        except InvalidRequirement:
            continue
        if req.name.lower() == "triton" and "extra" not in str(req.marker or ""):
            return req
    return None


@dataclass
class TorchPin:
    torch: Version
    spec: str  # the requirement's specifier ("==3.1.0", "~=3.8.0"), "" when torch pins no Triton
    tritons: list[Version]  # index releases the specifier admits
    lane: str | None  # the lane whose torch list names this torch release
    new_tritons: list[Version] = field(default_factory=list)  # admitted, not in the table


@dataclass
class Report:
    index: str
    tritons: list[Version]
    known: dict  # Version -> "lane 3.3" / "lane 3.3 patch"
    pins: list[TorchPin]

    @property
    def new_tritons(self) -> list[Version]:
        from_index = [v for v in self.tritons if v not in self.known]
        from_torch = [v for p in self.pins for v in p.new_tritons]
        return sorted(set(from_index + from_torch))

    @property
    def new_torch(self) -> list[TorchPin]:
        return [p for p in self.pins if p.lane is None and p.spec]

    def commands(self) -> list[str]:
        return [f"nsa-sel check-upgrade {v}" for v in self.new_tritons]

    def verdict(self) -> str:
        if not self.new_tritons and not self.new_torch:
            return "UP TO DATE: every Triton release on the index and every torch release's Triton pin is in lanes.toml"
        return (f"NEW: {len(self.new_tritons)} Triton release(s) not in lanes.toml, "
                f"{len(self.new_torch)} torch release(s) not in any lane's torch list")

    def to_dict(self) -> dict:
        return {"index": self.index, "verdict": self.verdict(), "new_tritons": [str(v) for v in self.new_tritons],
                "new_torch": [{"torch": str(p.torch), "triton": p.spec,
                               "admits": [str(v) for v in p.tritons]} for p in self.new_torch],
                "commands": self.commands()}


def known_releases(table: lanes.Table) -> dict:
    return {r.version: f"lane {r.label}" + (" patch" if r.patch else "") for r in table.releases}


def torch_lanes(table: lanes.Table) -> dict:
    return {Version(t): r.label for r in table.releases for t in r.torch}


def watch(table: lanes.Table, index: str, pre: bool = False, timeout: float = 30.0) -> Report:
    """Read the index and compare it with the table."""
    index = index.rstrip("/")
    tritons = available(fetch_json(f"{index}/triton/json", timeout), pre)
    oldest = min(r.version for r in table.releases)
    tritons = [v for v in tritons if v >= Version(f"{oldest.major}.{oldest.minor}")]
    known, by_torch = known_releases(table), torch_lanes(table)
    floor = min(by_torch) if by_torch else Version("0")
    pins = []
    for tv in available(fetch_json(f"{index}/torch/json", timeout), pre):
        if tv < floor:
            continue
        req = triton_requirement(fetch_json(f"{index}/torch/{tv}/json", timeout))
        spec = str(req.specifier) if req else ""
        admitted = [v for v in tritons if req and req.specifier.contains(v, prereleases=pre)]
        pins.append(TorchPin(torch=tv, spec=spec, tritons=admitted, lane=by_torch.get(tv),
                             new_tritons=[v for v in admitted if v not in known]))
    return Report(index=index, tritons=tritons, known=known, pins=pins)


def render(report: Report) -> str:
    lines = [f"nsa-sel releases: {report.index}", "", "Triton releases on the index:"]
    for v in report.tritons:
        lines.append(f"  {str(v):<8} " + (f"in lanes.toml ({report.known[v]})" if v in report.known else "NEW"))
    lines += ["", "Triton pins of torch releases:"]
    for p in report.pins:
        admits = ", ".join(map(str, p.tritons)) or "no release on the index"
        pin = f"triton{p.spec} ({admits})" if p.spec else "no Triton requirement"
        where = f"lane {p.lane}" if p.lane else ("not in any lane's torch list" if p.spec else "-")
        new = f"; NEW Triton {', '.join(map(str, p.new_tritons))}" if p.new_tritons else ""
        lines.append(f"  torch {str(p.torch):<8} {pin}: {where}{new}")
    lines += ["", report.verdict()]
    if report.commands():
        lines += ["", "Decide each new Triton release (compile + parity; --admit records a SAFE one):"]
        lines += [f"  {c}" for c in report.commands()]
    known_pins = [p for p in report.new_torch if not p.new_tritons and p.tritons]
    if known_pins:
        lines += ["", "New torch releases of a tested Triton (GPU lanes install a lane's first torch):"]
    for p in known_pins:
        label = report.known.get(max(p.tritons), "?").removeprefix("lane ").removesuffix(" patch")
        lines.append(f"  torch {p.torch} pins a tested Triton: add \"{p.torch}\" to lane {label}'s torch list")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="nsa-sel releases", description=__doc__.split("\n\n")[0])
    p.add_argument("--index-url", default=os.environ.get(ENV_INDEX, DEFAULT_INDEX),
                   help=f"PyPI JSON API root (default ${ENV_INDEX} or {DEFAULT_INDEX}); file:// trees work")
    p.add_argument("--constraints", help="the constraints directory (default: found from the cwd)")
    p.add_argument("--pre", action="store_true", help="include pre-releases and dev releases")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per index request")
    p.add_argument("--json", metavar="FILE", help="also write the verdict, the new releases and the commands as JSON")
    p.add_argument("--fail-on-new", action="store_true", help="exit 1 when something is new (for CI)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        table = lanes.load_table(project.constraints_dir(args.constraints) / "lanes.toml")
    except (project.ProjectNotFound, lanes.TableError) as exc:
        print(f"nsa-sel releases: {exc}", file=sys.stderr)
        return 2
    try:
        report = watch(table, args.index_url, pre=args.pre, timeout=args.timeout)
    except IndexError_ as exc:
        print(f"nsa-sel releases: {exc} (--index-url {args.index_url})", file=sys.stderr)
        return 3
    print(render(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    return 1 if args.fail_on_new and (report.new_tritons or report.new_torch) else 0
