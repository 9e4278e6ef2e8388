"""``nsa-sel releases``: the release watcher.  What the package index has that ``lanes.toml`` lacks.

It lists the Triton releases on the index and the Triton requirement of every torch release from
the table's oldest torch on, compares both with ``constraints/lanes.toml``, and prints for each new
Triton the ``nsa-sel check-upgrade`` command that decides it (and, for a new torch whose Triton is
already tested, the lane whose ``torch`` list it belongs in).

The index is read through the PyPI JSON API layout: ``URL/<project>/json`` (every release, with
its files and whether they are yanked) and ``URL/<project>/<version>/json`` (a release's
``requires_dist``).  ``--index-url`` (or ``$NSA_SEL_INDEX_URL``) points it at a mirror or at a
``file://`` tree of the same layout (the tests use one; nothing here needs the network otherwise).

Every read is bounded: a ``file://`` document is read as :func:`..core.atomic.read_text` reads a file (a
regular file only, never blocking on a FIFO, at most 64 MiB), an ``http(s)://`` one with ``--timeout``
per request and a deadline for the whole body; other schemes are refused.  A document of the wrong
shape (``releases`` not an object, a file list that is not a list, ...) is an error naming the URL.

Exit status: 0 (report printed; with ``--fail-on-new`` only when nothing is new), 1 (``--fail-on-new``
and something is new), 2 (bad usage, an unreadable lanes.toml, an index that cannot be read or is
not of the PyPI JSON layout, a ``--json`` path that cannot be written: one line, nothing written).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import Version

from ..core import lane_table, project
from ..core.atomic import FileProblem, atomic_write_text, check_output, loads_json, read_text
from ..core.command import Parser, fail, seconds

DEFAULT_INDEX = "https://pypi.org/pypi"
ENV_INDEX = "NSA_SEL_INDEX_URL"
MAX_DOCUMENT = 64 << 20  # PyPI's torch/json is about 2 MB


class IndexError_(RuntimeError):
    """The index could not be read, or is not of the PyPI JSON layout; the message names the URL and why."""


def check_index_url(index: str) -> str:
    """``index`` if it is an ``http(s)://`` or a local ``file://`` URL; an IndexError_ saying what is accepted."""
    parts = urllib.parse.urlsplit(index)
    if parts.scheme in ("http", "https") and parts.hostname:
        return index
    if parts.scheme == "file" and parts.netloc in ("", "localhost") and parts.path.startswith("/"):
        return index
    raise IndexError_(f"--index-url {index!r}: expected an http://, https:// or local file:/// URL of the PyPI "
                      "JSON API layout")


def fetch_text(url: str, timeout: float, headers: dict | None = None) -> str:
    """The text at ``url`` (``file://`` or ``http(s)://``), read within ``timeout`` seconds and at most
    :data:`MAX_DOCUMENT` bytes; an IndexError_ naming the URL otherwise."""
    try:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme == "file":
            return read_text(urllib.request.url2pathname(parts.path), MAX_DOCUMENT)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"unsupported URL scheme {parts.scheme!r}")
        return _read_http(url, timeout, headers or {})
    except FileProblem as exc:
        raise IndexError_(f"cannot read {url}: {str(exc).split(': ', 1)[-1]}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:  # URLError and timeouts are OSErrors
        raise IndexError_(f"cannot read {url}: {getattr(exc, 'reason', None) or exc}") from None


def fetch_json(url: str, timeout: float) -> dict:
    """The JSON object at ``url`` (strict JSON, read as :func:`fetch_text` reads); an IndexError_ naming it
    otherwise."""
    try:
        doc = loads_json(fetch_text(url, timeout))
    except ValueError as exc:
        raise IndexError_(f"cannot read {url}: {exc}") from None
    if not isinstance(doc, dict):
        raise IndexError_(f"{url}: expected a JSON object (the PyPI JSON API layout), got {type(doc).__name__}")
    return doc


def _read_http(url: str, timeout: float, headers: dict) -> str:
    """The body at ``url``: ``timeout`` bounds each socket operation, and the whole read too (a server that
    trickles a byte a second never ends a per-operation timeout)."""
    deadline = time.monotonic() + timeout
    req = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - http(s) only here
        chunks, size = [], 0
        while chunk := resp.read1(1 << 16):  # what has arrived (read() would wait for all 64 KiB)
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_DOCUMENT:
                raise ValueError(f"larger than {MAX_DOCUMENT >> 20} MiB: not a PyPI JSON API document")
            if time.monotonic() > deadline:
                raise TimeoutError(f"not read within --timeout {timeout:g} s")
    return b"".join(chunks).decode("utf-8")


def _shape(url: str, doc: dict, releases: bool) -> dict:
    """``doc`` checked to have the fields this module reads with the types it reads them as."""
    def need(ok: bool, what: str) -> None:
        if not ok:
            raise IndexError_(f"{url}: {what} (not the PyPI JSON API layout)")

    info = doc.get("info")
    need(info is None or isinstance(info, dict), f"`info` must be an object, got {type(info).__name__}")
    reqs = (info or {}).get("requires_dist")
    need(reqs is None or (isinstance(reqs, list) and all(isinstance(r, str) for r in reqs)),
         "`info.requires_dist` must be a list of strings")
    if releases:
        rel = doc.get("releases")
        need(isinstance(rel, dict), f"`releases` must be an object mapping versions to file lists, got "
             f"{type(rel).__name__}")
        for version, files in rel.items():
            need(isinstance(files, list) and all(isinstance(f, dict) for f in files),
                 f"release {version[:40]!r}: its files must be a list of objects")
    return doc


def _final(version: str, pre: bool) -> Version | None:
    try:
        v = Version(version)
    except ValueError:  # InvalidVersion, or a number beyond int()'s digit limit: not a release we can use
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
        except (InvalidRequirement, ValueError):  # a 5000-digit version exceeds int()'s digit limit
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


def known_releases(table: lane_table.Table) -> dict:
    return {r.version: f"lane {r.label}" + (" patch" if r.patch else "") for r in table.releases}


def torch_lanes(table: lane_table.Table) -> dict:
    return {Version(t): r.label for r in table.releases for t in r.torch}


def watch(table: lane_table.Table, index: str, pre: bool = False, timeout: float = 30.0) -> Report:
    """Read the index and compare it with the table."""
    index = check_index_url(index).rstrip("/")
    tritons = available(_shape(f"{index}/triton/json", fetch_json(f"{index}/triton/json", timeout), True), pre)
    oldest = min(r.version for r in table.releases)
    tritons = [v for v in tritons if v >= Version(f"{oldest.major}.{oldest.minor}")]
    known, by_torch = known_releases(table), torch_lanes(table)
    floor = min(by_torch) if by_torch else Version("0")
    pins = []
    for tv in available(_shape(f"{index}/torch/json", fetch_json(f"{index}/torch/json", timeout), True), pre):
        if tv < floor:
            continue
        url = f"{index}/torch/{tv}/json"
        req = triton_requirement(_shape(url, fetch_json(url, timeout), False))
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
    p = Parser(prog="nsa-sel releases", description=__doc__.split("\n\n")[0],
               epilog="exit status: 0 report printed; 1 --fail-on-new and something is new; 2 bad usage, an "
                      "unreadable lanes.toml or index, or a --json path that cannot be written (one line)")
    p.add_argument("--index-url", default=os.environ.get(ENV_INDEX, DEFAULT_INDEX),
                   help=f"PyPI JSON API root (default ${ENV_INDEX} or {DEFAULT_INDEX}); file:// trees work")
    p.add_argument("--constraints", help="the constraints directory (default: found from the cwd)")
    p.add_argument("--pre", action="store_true", help="include pre-releases and dev releases")
    p.add_argument("--timeout", type=seconds, default=30.0, help="seconds per index request (at most a day)")
    p.add_argument("--json", metavar="FILE", help="also write the verdict, the new releases and the commands as JSON")
    p.add_argument("--fail-on-new", action="store_true", help="exit 1 when something is new (for CI)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        table = lane_table.load_table(project.constraints_dir(args.constraints) / "lanes.toml")
        if args.json is not None:  # before the index is read: a bad path must not cost the run
            check_output(args.json, "--json")
        report = watch(table, args.index_url, pre=args.pre, timeout=args.timeout)
    except (project.ProjectNotFound, lane_table.TableError, FileProblem) as exc:
        return fail("releases", exc)
    except IndexError_ as exc:  # it names the URL it could not read
        return fail("releases", exc)
    print(render(report))
    if args.json:
        try:
            atomic_write_text(args.json, json.dumps(report.to_dict(), indent=2) + "\n")
        except (OSError, ValueError) as exc:
            return fail("releases", f"--json {args.json}: cannot write it ({getattr(exc, 'strerror', None) or exc})")
    return 1 if args.fail_on_new and (report.new_tritons or report.new_torch) else 0
