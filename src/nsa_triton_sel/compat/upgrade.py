"""``nsa-sel check-upgrade VERSION``: may this project move to a Triton release not in the table yet?

It builds a temporary lane for the candidate (``NSA_SEL_CANDIDATE=VERSION`` makes the noxfile
generate ``compile-candidate``, ``parity-candidate`` and, on a GPU machine, ``bench-candidate``),
runs it with results in a temporary directory, and compares its verdicts with those of the newest
known-good version in the ledger.  It prints ``SAFE`` or ``BLOCKED`` with reasons and exits 1
when blocked.  Candidate records never enter the committed ledger.

The decision (:func:`decide`) is a pure function of records, so it is tested without running lanes:

- blocked when a required check of the candidate is not a pass (including a lane that could not
  be installed or was interrupted), naming every kernel that passed on the baseline and does not
  on the candidate as a regression;
- blocked when an all-arch known-bad window covers the candidate;
- blocked when a benchmark's median is slower than the baseline by more than ``max_slowdown``;
- compile metrics that grow (shared memory, registers, spills) are reported as notes only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from .. import known_bad
from . import lanes, ledger

SAFE, BLOCKED = "safe", "blocked"


@dataclass
class Decision:
    verdict: str
    candidate: str
    baseline: str | None
    reasons: list[str] = field(default_factory=list)  # why blocked
    notes: list[str] = field(default_factory=list)  # worth reading, not blocking

    @property
    def blocked(self) -> bool:
        return self.verdict == BLOCKED

    def render(self) -> str:
        head = f"check-upgrade: triton {self.candidate}"
        head += f" vs known-good {self.baseline}" if self.baseline else " (no known-good baseline in the ledger)"
        lines = [f"{head}: {self.verdict.upper()}"]
        lines += [f"  blocked: {r}" for r in self.reasons]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _index(recs: list[dict]) -> dict[tuple, dict]:
    return {(r["check"], r.get("mode"), r["kernel"], r.get("arch")): r for r in recs}


def _regressions(cand: list[dict], base: list[dict], check: str) -> list[str]:
    """Kernels of ``check`` that passed on the baseline and are bad (or gone bad) on the candidate."""
    c = _index([r for r in cand if r["check"] == check])
    out = []
    for key, b in _index([r for r in base if r["check"] == check]).items():
        got = c.get(key)
        if b["verdict"] == "pass" and got is not None and got["verdict"] in ledger.BAD:
            arch = f" [sm_{key[3]}]" if key[3] else ""
            out.append(f"regression in {check}: `{key[2]}`{arch} passed on the baseline, "
                       f"{got['verdict']} now: {ledger._first_line(got.get('message'))}")
    return out


def _metric_notes(cand: list[dict], base: list[dict], grow_limit: float = 0.10) -> list[str]:
    """Compile metrics that grew by more than ``grow_limit`` (e.g. shared memory bytes)."""
    c = _index([r for r in cand if r["check"] == "compile"])
    notes = []
    for key, b in _index([r for r in base if r["check"] == "compile"]).items():
        got = c.get(key)
        if got is None:
            continue
        for name, old in (b.get("metrics") or {}).items():
            new = (got.get("metrics") or {}).get(name)
            if name == "seconds" or not isinstance(old, (int, float)) or not isinstance(new, (int, float)):
                continue
            if old > 0 and new > old * (1 + grow_limit):
                notes.append(f"`{key[2]}` sm_{key[3]}: {name} {old} -> {new}")
    return notes


def _slowdowns(cand: list[dict], base: list[dict], max_slowdown: float) -> list[str]:
    c = _index([r for r in cand if r["check"] == "bench"])
    out = []
    for key, b in _index([r for r in base if r["check"] == "bench"]).items():
        old = (b.get("metrics") or {}).get("median_s")
        new = ((c.get(key) or {}).get("metrics") or {}).get("median_s")
        if old and new and new > old * (1 + max_slowdown):
            out.append(f"bench `{key[2]}`: median {old * 1e6:.1f} us -> {new * 1e6:.1f} us "
                       f"(+{(new / old - 1) * 100:.0f}%, limit {max_slowdown * 100:.0f}%)")
    return out


def decide(candidate: str, cand_recs: list[dict], baseline: str | None, base_recs: list[dict],
           required: tuple[str, ...] = ("compile", "parity"), windows: list | None = None,
           max_slowdown: float = 0.10) -> Decision:
    """SAFE or BLOCKED for ``candidate`` given its records and the baseline's (pure function)."""
    d = Decision(SAFE, candidate, baseline)
    for check in required:
        verdict, text = ledger.cell([r for r in cand_recs if r["check"] == check])
        if verdict == "not run":
            d.reasons.append(f"{check}: not run")
        elif verdict != "pass":
            regress = _regressions(cand_recs, base_recs, check)
            d.reasons += regress or [f"{check}: " + "; ".join(ledger.reasons(
                [r for r in cand_recs if r["check"] == check], limit=3))]
    for w in known_bad.touching(candidate, windows):
        if w.all_arch and not w.interp_only:
            d.reasons.append(f"known-bad window [{w.id}]: {w.reason}")
        else:
            d.notes.append(f"known-bad on some GPUs [{w.id}]: {w.describe()}")
    d.reasons += _slowdowns(cand_recs, base_recs, max_slowdown)
    d.notes += _metric_notes(cand_recs, base_recs)
    if not any(r["check"] == "bench" and r["verdict"] == "pass" for r in cand_recs):
        d.notes.append("no benchmark ran (no GPU): performance not compared")
    if baseline is None:
        d.notes.append("no known-good version in the ledger: verdicts judged on their own")
    if d.reasons:
        d.verdict = BLOCKED
    return d


def newest_known_good(table: lanes.Table, recs: list[dict], windows: list) -> lanes.Lane | None:
    """The newest lane admitted to known-good by the ledger, or None."""
    verdicts = ledger.lane_verdicts(table, recs, windows)
    good = [lane for lane in table.lanes if verdicts[lane.label][0]]
    return max(good, key=lambda lane: lane.version) if good else None


def _nox_command() -> list[str]:
    """nox from this interpreter when installed here, else the one on PATH."""
    try:
        import nox  # noqa: F401, PLC0415

        return [sys.executable, "-m", "nox"]
    except ImportError:
        exe = shutil.which("nox")
        if exe is None:
            raise SystemExit("check-upgrade needs nox (pip install 'nsa-triton-sel[matrix]')") from None
        return [exe]


def run_candidate(version: str, results: Path, gpu: bool | None = None) -> int:
    """Run the candidate lane's sessions through nox; their verdicts land in ``results``."""
    sessions = ["compile-candidate", "parity-candidate"] + (["bench-candidate"] if gpu else [])
    cmd = _nox_command() + ["-f", str(lanes.repo_root() / "noxfile.py"), "-s", *sessions,
                            "--no-stop-on-first-error", "--", "--results", str(results)]
    env = dict(os.environ, NSA_SEL_CANDIDATE=version)
    print(f"check-upgrade: running {' '.join(sessions)} for triton {version}", flush=True)
    return subprocess.call(cmd, env=env)


def _gpu_present() -> bool:
    forced = os.environ.get("NSA_SEL_GPU", "")
    if forced in ("0", "1"):
        return forced == "1"
    smi = shutil.which("nvidia-smi")
    return bool(smi) and subprocess.call([smi, "-L"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0


def main(argv: list[str] | None = None) -> int:
    """``nsa-sel check-upgrade VERSION [--ledger F] [--from-results DIR] [--max-slowdown 0.1]``."""
    p = argparse.ArgumentParser(prog="nsa-sel check-upgrade", description=__doc__.splitlines()[0])
    p.add_argument("version", help="candidate Triton release, e.g. 3.10.0")
    p.add_argument("--ledger", type=Path, default=lanes.constraints_dir() / "ledger.jsonl")
    p.add_argument("--from-results", type=Path, help="judge existing candidate run files instead of running")
    p.add_argument("--keep", action="store_true", help="keep the temporary results directory")
    p.add_argument("--max-slowdown", type=float, default=0.10, help="blocking benchmark slowdown (0.10 = 10%%)")
    args = p.parse_args(argv)
    try:
        version = str(Version(args.version))
    except InvalidVersion:
        p.error(f"not a version: {args.version!r}")
    table, windows = lanes.load_table(), known_bad.load()
    if table.for_version(version):
        print(f"check-upgrade: note: {version} is already lane {table.for_version(version).label}; "
              "checked as a candidate anyway")
    recs = ledger.load_ledger(args.ledger)
    base_lane = newest_known_good(table, recs, windows)
    base_recs = [r for r in recs if base_lane and r["lane"] == base_lane.label]
    cand_recs = _candidate_records(version, args)
    decision = decide(version, cand_recs, base_lane.triton if base_lane else None, base_recs,
                      table.required, windows, args.max_slowdown)
    print(decision.render())
    return 1 if decision.blocked else 0


def _candidate_records(version: str, args) -> list[dict]:
    """Run (or read) the candidate lane and return its records, interrupted markers included."""
    if args.from_results:
        recs, _ = ledger.load_run_files([args.from_results])
        return [r for r in recs if r.get("candidate")]
    tmp = Path(tempfile.mkdtemp(prefix=f"nsa-sel-upgrade-{version}-"))
    try:
        run_candidate(version, tmp, gpu=_gpu_present())
        recs, warns = ledger.load_run_files([tmp])
        for w in warns:
            print(f"check-upgrade: {w}")
        return recs
    finally:
        if args.keep:
            print(f"check-upgrade: results kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
