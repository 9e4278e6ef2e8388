"""The verdict ledger: lane records, merge, atomic writes, MATRIX.md and known-good.txt.

Every nox lane session writes one *run file* into a results directory (``$NSA_SEL_RESULTS``,
``--results DIR``, default ``out/lanes``): a JSON document written atomically twice, first with
``status: "running"`` when the session starts, then with its records and ``status: "complete"``
(or ``"interrupted"``/``"error"``).  A run file still ``"running"`` when ``nsa-sel pin`` reads it
belongs to a lane that crashed or was killed: pin reports it as ``interrupted``, never as passed.

A *record* is a flat JSON object, one verdict of one kernel/test on one lane::

    {"schema": 1, "lane": "3.1", "triton": "3.1.0", "check": "parity", "mode": "interp",
     "kernel": "tests/test_kernels_interp.py::test_fwd[fp16]", "arch": null, "verdict": "pass",
     "message": "", "metrics": {"seconds": 0.8}, "torch": "2.13.0+cpu", "torch_paired": false,
     "off_pair_reason": "...", "python": "3.11.9", "numpy": "1.26.4", "cuda": null,
     "driver": null, "gpu": null, "knobs": {"TRITON_DEFAULT_FP_FUSION": "1"},
     "date": "2026-11-22T16:40:00+00:00", "git_commit": "abc123", "session": "parity-3.1",
     "run_id": "parity-3.1@2026-11-22T16:40:00+00:00", "machine": "cpu"}

``nsa-sel pin`` merges run files into ``constraints/ledger.jsonl``: for each (lane, check, mode,
machine) the newest run replaces every older record, so a re-run lane never keeps stale rows.
It then renders ``constraints/MATRIX.md`` and ``constraints/known-good.txt``.  All three files are
written with :func:`atomic_write_text` (temp file + fsync + rename), so an interrupted pin leaves
the previous versions intact.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import statistics
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Iterable

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .. import known_bad
from . import lanes

SCHEMA = 1
VERDICTS = ("pass", "fail", "error", "crash", "timeout", "interrupted", "skip", "xfail", "unsupported")
BAD = frozenset({"fail", "error", "crash", "timeout", "interrupted"})
CHECKS = ("compile", "parity", "bench", "compile-canary", "compile-static")
SMOKE_VERDICTS = {"ok": "pass", "compile_error": "fail", "crash": "crash", "timeout": "timeout",
                  "unsupported": "unsupported"}
RUN_FILE_STATES = ("running", "complete", "interrupted", "error")


# ----------------------------------------------------------------------------------------------
# Atomic files
# ----------------------------------------------------------------------------------------------

def atomic_write_text(path: Path | str, text: str) -> None:
    """Replace ``path`` with ``text`` so readers see the old or the new file, never a torn one.

    The temporary file lives in the same directory (rename is atomic only within a filesystem)
    and is fsynced before the rename; the directory is fsynced after it so the rename survives
    a power loss.  On any failure the temporary file is removed and the original is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. platforms that cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# ----------------------------------------------------------------------------------------------
# Records
# ----------------------------------------------------------------------------------------------

def base_record(lane: lanes.Lane, fp: dict, *, check: str, mode: str, session: str,
                run_id: str, knobs: dict | None = None) -> dict:
    """The fields every record of one run shares, from the lane and its environment fingerprint.

    ``fp`` is :func:`nsa_triton_sel.compat.env.fingerprint` as run *inside* the lane environment.
    torch counts as paired only for a CUDA build of a torch release that pins this Triton;
    otherwise ``off_pair_reason`` says what ran instead.
    """
    torch_v, cuda = fp.get("torch"), fp.get("cuda_runtime")
    paired = lane.torch_is_paired(torch_v, cuda)
    knobs = dict(knobs or {})
    knobs.update(fp.get("triton_env") or {})
    knobs.pop("TRITON_CACHE_DIR", None)  # a path, not a knob that changes results
    return {
        "schema": SCHEMA,
        "lane": lane.label,
        "triton": fp.get("triton") or lane.triton,
        "check": check,
        "mode": mode,
        "torch": torch_v,
        "torch_paired": paired,
        "off_pair_reason": None if paired else off_pair_reason(lane, torch_v, cuda),
        "python": fp.get("python"),
        "numpy": fp.get("numpy"),
        "cuda": cuda,
        "driver": fp.get("cuda_driver"),
        "gpu": fp.get("gpu_name"),
        "compute_capability": fp.get("compute_capability"),
        "arch": None,
        "knobs": knobs,
        "date": fp.get("date") or now_iso(),
        "git_commit": fp.get("git_commit"),
        "session": session,
        "run_id": run_id,
        "machine": fp.get("gpu_name") or "cpu",
        "candidate": lane.candidate,
    }


def off_pair_reason(lane: lanes.Lane, torch_v: str | None, cuda: str | None) -> str:
    """Why the torch of a run is not the paired one (for the ledger and MATRIX.md)."""
    want = " or ".join(lane.torch)
    if not torch_v:
        return f"no torch importable; triton {lane.triton} pairs with torch {want}"
    if not cuda:
        return f"CPU build torch {torch_v} (no Triton pin); triton {lane.triton} pairs with CUDA torch {want}"
    return f"torch {torch_v} reused from the environment; triton {lane.triton} pairs with torch {want}"


def record(base: dict, *, kernel: str, verdict: str, message: str = "", arch: int | None = None,
           metrics: dict | None = None, **extra) -> dict:
    """One verdict on top of a run's base fields; the verdict must be one of :data:`VERDICTS`."""
    if verdict not in VERDICTS:
        raise ValueError(f"verdict {verdict!r} not in {VERDICTS}")
    rec = dict(base)
    rec.update(kernel=kernel, verdict=verdict, message=_clip(message), arch=arch, metrics=metrics or {})
    rec.update(extra)
    return rec


def _clip(message: str | None, limit: int = 400) -> str:
    """Messages are for humans scanning a table: the informative tail, bounded."""
    text = (message or "").strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def records_from_smoke(report: dict, base: dict, windows: list | None = None) -> list[dict]:
    """Ledger records from an ``nsa-sel smoke --json`` report.

    Canaries (deliberately broken kernels) go to check ``compile-canary`` and pass when they
    failed the expected way.  A real failure inside a known-bad window becomes ``xfail`` with
    the window named, so the matrix tells an expected failure from a new one.
    """
    knobs = dict(base.get("knobs") or {})
    knobs.update({k: v for k, v in (report.get("env") or {}).items() if k != "TRITON_CACHE_DIR"})
    out = []
    for r in report.get("results", []):
        verdict = SMOKE_VERDICTS.get(r.get("verdict"), "error")
        check = "compile"
        if r.get("canary"):
            check = "compile-canary"
            if r.get("as_expected") is not None:
                verdict = "pass" if r["as_expected"] else "fail"
        message = r.get("message") or ""
        if check == "compile" and verdict in BAD:
            why = known_bad.expected_failure(base["triton"], r.get("arch"), "compile", windows, base.get("mode"))
            if why:
                verdict, message = "xfail", f"known-bad {why} | {message}"
        metrics = dict(r.get("metrics") or {})
        if r.get("seconds") is not None:
            metrics["seconds"] = r["seconds"]
        out.append(record({**base, "check": check, "knobs": knobs}, kernel=r.get("spec") or r.get("kernel", "?"),
                          verdict=verdict, message=message, arch=r.get("arch"), metrics=metrics))
    for s in report.get("skipped", []):  # variants the dispatcher never launches on this Triton/arch
        out.append(record({**base, "check": "compile", "knobs": knobs}, kernel=s.get("spec", "?"),
                          verdict="skip", message=s.get("why", "not launched there"), arch=s.get("arch")))
    results = report.get("results", [])
    canaries = {r.get("kernel") for r in results if r.get("canary")} - {r.get("kernel") for r in results
                                                                        if not r.get("canary")}
    static = {ref: info for ref, info in (report.get("static") or {}).items()
              if ref.rpartition(":")[2] not in canaries}  # canaries need odd versions on purpose
    out += _static_records(static, {**base, "check": "compile-static", "knobs": knobs})
    return out


def _repo_relative(ref: str) -> str:
    """'/abs/checkout/tests/x.py:k' -> 'tests/x.py:k', so records compare across machines."""
    root = str(lanes.repo_root()) + os.sep
    return ref[len(root):] if ref.startswith(root) else ref


def _static_records(static: dict, base: dict) -> list[dict]:
    """The smoke's AST API-range check: does each kernel's source need a Triton this is not?"""
    out = []
    for ref, info in sorted((_repo_relative(r), i) for r, i in static.items()):
        needs = info.get("needs") or "any"
        findings = "; ".join(f"line {f.get('line')}: {f.get('api')} ({f.get('needs')})"
                             for f in info.get("findings", []) if isinstance(f, dict))
        if info.get("error"):
            verdict, msg = "error", info["error"]
        else:
            verdict = "fail" if info.get("installed_ok") is False else "pass"
            msg = f"needs triton {needs}" + (f": {findings}" if findings else "")
        out.append(record(base, kernel=ref, verdict=verdict, message=msg))
    return out


def records_from_junit(xml_text: str, base: dict, windows: list | None = None) -> list[dict]:
    """One record per pytest test case from a ``--junitxml`` report.

    A failure covered by a known-bad window for this Triton and check (all archs, or the run's
    GPU arch) becomes ``xfail`` naming the window: the expectation lives in the data, not in the
    tests.
    """
    root = ET.fromstring(xml_text)
    arch = _arch_of(base)
    why = known_bad.expected_failure(base["triton"], arch, base["check"], windows, base.get("mode"))
    out = []
    for case in root.iter("testcase"):
        verdict, message = _junit_verdict(case)
        message = tidy_message(message)
        if why and verdict in BAD:
            verdict, message = "xfail", f"known-bad {why} | {message}"
        name = f"{case.get('classname', '')}::{case.get('name', '')}".lstrip(":")
        metrics = {"seconds": float(case.get("time") or 0.0), **_junit_properties(case)}
        out.append(record(base, kernel=name, verdict=verdict, message=message, metrics=metrics))
    return out


def _junit_properties(case: ET.Element) -> dict:
    """Numeric ``record_property`` values of a test case (e.g. its oracle errors)."""
    out = {}
    for prop in case.iter("property"):
        try:
            out[prop.get("name")] = float(prop.get("value"))
        except (TypeError, ValueError):
            continue
    return out


def _arch_of(base: dict) -> int | None:
    """The run's GPU arch as an int (from a '9.0' compute capability), None on CPU."""
    cc = base.get("compute_capability")
    try:
        major, minor = str(cc).split(".")
        return int(major) * 10 + int(minor)
    except (ValueError, AttributeError):
        return None


_WRAPPED = re.compile(r"InterpreterError\((['\"])(.*)\1\)", re.S)


def tidy_message(message: str) -> str:
    """Unwrap the interpreter's nested ``InterpreterError('InterpreterError(...)')`` reprs.

    Each nesting level escapes the quotes again, so the cause ("'int' object has no attribute
    'to'") ends up buried under backslashes; the innermost error is what a reader needs.
    """
    text = message or ""
    for _ in range(8):
        m = _WRAPPED.search(text)
        if not m:
            break
        inner = m.group(2).replace("\\'", "'").replace("\\\"", '"').replace("\\\\", "\\")
        text = inner
    return text


def _junit_verdict(case: ET.Element) -> tuple[str, str]:
    """pytest's junit encoding: failure/error/skipped children; xfail is a skipped with type."""
    for tag, verdict in (("failure", "fail"), ("error", "error")):
        el = case.find(tag)
        if el is not None:
            return verdict, el.get("message") or (el.text or "")
    el = case.find("skipped")
    if el is not None:
        kind = "xfail" if (el.get("type") or "") == "pytest.xfail" else "skip"
        return kind, el.get("message") or ""
    return "pass", ""


def attach_benchmarks(recs: list[dict], bench_json: dict) -> list[dict]:
    """Add pytest-benchmark statistics to the matching test records (matched by test name)."""
    by_name = {}
    for b in bench_json.get("benchmarks", []):
        stats = b.get("stats") or {}
        m = {f"{k}_s": stats[k] for k in ("min", "median", "mean", "stddev", "iqr") if k in stats}
        m.update({k: stats[k] for k in ("ops", "rounds") if k in stats})
        m.update({k: v for k, v in (b.get("extra_info") or {}).items() if isinstance(v, (int, float, str))})
        by_name[b.get("name")] = m
    for rec in recs:
        short = rec["kernel"].rsplit("::", 1)[-1]
        if short in by_name:
            rec["metrics"] = {**rec.get("metrics", {}), **by_name[short]}
    return recs


# ----------------------------------------------------------------------------------------------
# Run files (one per lane session)
# ----------------------------------------------------------------------------------------------

def results_dir(explicit: str | None = None) -> Path:
    """``--results``, else ``$NSA_SEL_RESULTS``, else ``out/lanes`` in the checkout."""
    return Path(explicit or os.environ.get("NSA_SEL_RESULTS") or lanes.repo_root() / "out" / "lanes")


def run_file(results: Path, session: str) -> Path:
    return Path(results) / f"{session}.json"


def write_run(path: Path, *, base: dict, status: str, started: str, records: list[dict],
              note: str = "") -> None:
    """Write one run file atomically (at session start, after set-up, and at its end).

    ``base`` holds the run's shared record fields (lane, check, mode, session, run_id, machine,
    date, ...): it is what an ``interrupted`` marker is built from if the session never finishes.
    """
    if status not in RUN_FILE_STATES:
        raise ValueError(f"status {status!r} not in {RUN_FILE_STATES}")
    doc = {"schema": SCHEMA, "kind": "lane-run", "session": base.get("session"), "lane": base.get("lane"),
           "check": base.get("check"), "mode": base.get("mode"), "run_id": base.get("run_id"),
           "status": status, "started": started, "finished": None if status == "running" else now_iso(),
           "note": note, "base": base, "records": records}
    atomic_write_text(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")


def records_of_run(doc: dict) -> list[dict]:
    """The records of a run file; an unfinished run also yields an ``interrupted`` marker.

    The marker carries the run's identity, so it replaces older results of the same lane and
    check in the merge: a crashed lane is reported as such instead of silently keeping the
    verdicts of an earlier run.
    """
    recs = list(doc.get("records", []))
    status = doc.get("status")
    if status == "complete":
        return recs
    template = dict(doc.get("base") or (recs[0] if recs else {}))
    for k in ("lane", "check", "mode", "session", "run_id"):
        template.setdefault(k, doc.get(k))
    template.setdefault("date", doc.get("started"))
    template.setdefault("machine", "cpu")
    what = "never finished (crashed or was killed)" if status == "running" else f"ended with status {status}"
    msg = f"session {doc.get('session')} started {doc.get('started')} {what}; {len(recs)} partial record(s)"
    if doc.get("note"):
        msg += f"; {doc['note']}"
    marker = record(template, kernel="(lane session)", verdict="interrupted" if status != "error" else "error",
                    message=msg)
    return recs + [marker]


def load_run_files(dirs: Iterable[Path]) -> tuple[list[dict], list[str]]:
    """All records from the run files under ``dirs``, plus warnings for unreadable files."""
    recs, warns = [], []
    for d in dirs:
        for path in sorted(Path(d).glob("*.json")):
            try:
                doc = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError) as exc:  # cannot happen with atomic writes
                warns.append(f"{path}: unreadable ({exc}); skipped")
                continue
            if doc.get("kind") != "lane-run":
                continue
            if doc.get("status") != "complete":
                warns.append(f"{path}: lane session {doc.get('session')} is {doc.get('status')}: reported as such")
            recs.extend(records_of_run(doc))
    return recs, warns


# ----------------------------------------------------------------------------------------------
# Ledger: load, merge, save
# ----------------------------------------------------------------------------------------------

def load_ledger(path: Path) -> list[dict]:
    """Records of a JSON-Lines ledger; a missing file is an empty ledger, a bad line an error."""
    path = Path(path)
    if not path.exists():
        return []
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: not a JSON record ({exc})") from None
    return out


def run_key(rec: dict) -> tuple:
    """Records sharing this key describe the same question; only the newest run answers it."""
    return (rec.get("lane"), rec.get("check"), rec.get("mode"), rec.get("machine") or "cpu")


def _when(rec: dict) -> _dt.datetime:
    try:
        when = _dt.datetime.fromisoformat(rec.get("date") or "")
    except ValueError:
        when = _dt.datetime.min
    return when if when.tzinfo else when.replace(tzinfo=_dt.timezone.utc)


def merge(ledger: list[dict], new: list[dict]) -> list[dict]:
    """Ledger + new records, keeping for each :func:`run_key` only the newest run's records.

    Runs are ordered by their date; on a tie the new records win, so re-pinning the same run
    files is idempotent.
    """
    newest: dict[tuple, tuple[_dt.datetime, int, str]] = {}
    for order, recs in ((0, ledger), (1, new)):
        for rec in recs:
            key, stamp = run_key(rec), (_when(rec), order, rec.get("run_id") or "")
            if key not in newest or stamp > newest[key]:
                newest[key] = stamp
    seen, out = set(), []
    for order, recs in ((1, new), (0, ledger)):
        for rec in recs:
            key = run_key(rec)
            when, win_order, win_run = newest[key]
            if (rec.get("run_id") or "") != win_run or order != win_order:
                continue
            ident = (key, rec.get("kernel"), rec.get("arch"))
            if ident not in seen:  # duplicate rows of one run (pinned twice) collapse
                seen.add(ident)
                out.append(rec)
    return sort_records(out)


def sort_records(recs: list[dict]) -> list[dict]:
    def key(r):
        return (Version(r.get("triton") or "0"), r.get("check") or "", r.get("mode") or "",
                r.get("machine") or "", r.get("kernel") or "", r.get("arch") or 0)
    return sorted(recs, key=key)


def dump_ledger(recs: list[dict]) -> str:
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in recs)


# ----------------------------------------------------------------------------------------------
# Verdicts per lane and check
# ----------------------------------------------------------------------------------------------

def cell(recs: list[dict]) -> tuple[str, str]:
    """(verdict, short text) of one check on one lane, over every mode and machine.

    Any bad record makes the cell bad (the worst kind is named); otherwise a pass anywhere makes
    it pass; a cell of skips/unsupported only is ``skip``.
    """
    if not recs:
        return "not run", "—"
    counts = defaultdict(int)
    for r in recs:
        counts[r["verdict"]] += 1
    n = len(recs)
    for bad in ("interrupted", "crash", "timeout", "error", "fail"):
        if counts[bad]:
            nbad = sum(counts[b] for b in BAD)
            return bad, f"**{bad.upper()}** {nbad}/{n}"
    if counts["pass"]:
        extra = "".join(f", {counts[k]} {k}" for k in ("xfail", "skip", "unsupported") if counts[k])
        return "pass", f"pass {counts['pass']}/{n}{extra}"
    return "skip", "skip"


def reasons(recs: list[dict], limit: int = 5) -> list[str]:
    """Human lines for the non-pass records of a cell (bad ones first)."""
    bad = [r for r in recs if r["verdict"] in BAD]
    other = [r for r in recs if r["verdict"] in ("skip", "xfail", "unsupported")] if not bad else []
    pick = bad or other
    seen, lines = set(), []
    for r in pick:
        where = f" [sm_{r['arch']}]" if r.get("arch") else ""
        line = f"{r['verdict']}: `{r['kernel']}`{where}: {_first_line(r.get('message'))}"
        if r.get("message") in seen and len(pick) > limit:
            continue
        seen.add(r.get("message"))
        lines.append(line)
    if len(lines) > limit:
        lines = lines[:limit] + [f"... and {len(lines) - limit} more"]
    return lines


def _first_line(message: str | None, limit: int = 200) -> str:
    lines = [ln.strip() for ln in (message or "").splitlines() if ln.strip()]
    text = lines[-1] if lines else "(no message)"
    return (text[: limit - 3] + "...") if len(text) > limit else text.replace("|", "\\|")


def by_lane_check(recs: list[dict]) -> dict[tuple[str, str], list[dict]]:
    out: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in recs:
        out[(r["lane"], r["check"])].append(r)
    return out


def lane_verdicts(table: lanes.Table, recs: list[dict], windows: list) -> dict[str, tuple[bool, list[str]]]:
    """For each lane: (admitted to known-good?, reasons it is not)."""
    grouped = by_lane_check(recs)
    out = {}
    for lane in table.lanes:
        why = []
        for check in table.required:
            verdict, _ = cell(grouped.get((lane.label, check), []))
            if verdict == "not run":
                why.append(f"{check} not run")
            elif verdict != "pass":
                first = reasons(grouped[(lane.label, check)], limit=1)
                why.append(f"{check} {verdict}" + (f" ({first[0]})" if first else ""))
        for w in known_bad.excluding_windows(lane.triton, windows):
            why.append(f"known-bad [{w.id}]: {w.reason}")
        out[lane.label] = (not why, why)
    return out


# ----------------------------------------------------------------------------------------------
# known-good.txt
# ----------------------------------------------------------------------------------------------

def known_good_specifier(admitted: list[str], excluded: list[str]) -> str:
    """A PEP 440 specifier admitting exactly ``admitted`` among ``admitted + excluded``.

    Bounds come from the admitted range; inside it, an excluded release whose minor has no
    admitted release is excluded as a whole minor (``!=3.3.*``, which also catches future patch
    releases of a failing minor), otherwise by exact version.  No admitted version at all gives
    ``<0``, which admits nothing.
    """
    if not admitted:
        return "<0"
    good = sorted({Version(v) for v in admitted})
    lo, hi = good[0], good[-1]
    good_minors = {(v.major, v.minor) for v in good}
    parts = [f">={lo}", f"<={hi}"]
    for v in sorted({Version(x) for x in excluded} - set(good)):
        if not lo < v < hi:
            continue
        part = f"!={v.major}.{v.minor}.*" if (v.major, v.minor) not in good_minors else f"!={v}"
        if part not in parts:
            parts.append(part)
    spec = ",".join(parts)
    SpecifierSet(spec)  # must parse
    return spec


def render_known_good(table: lanes.Table, verdicts: dict, windows: list, ledger_name: str) -> str:
    admitted = [l.triton for l in table.lanes if verdicts[l.label][0]]
    excluded = [l.triton for l in table.lanes if not verdicts[l.label][0]] + list(table.other_releases)
    lines = [
        f"# GENERATED by `nsa-sel pin` from {ledger_name}; do not edit by hand.",
        f"# Admits exactly the Triton releases that passed every required check ({', '.join(table.required)})",
        "# on every machine the ledger has results from; every other known release is excluded below.",
        "# Use: pip install -c constraints/known-good.txt nsa-triton-sel",
        "#",
    ]
    for lane in table.lanes:
        ok, why = verdicts[lane.label]
        if ok:
            lines.append(f"# admitted  {lane.triton:<7} (lane {lane.label}; torch {' / '.join(lane.torch)})")
        else:
            lines.append(f"# excluded  {lane.triton:<7} (lane {lane.label}): {'; '.join(why)}")
    for rel in table.other_releases:
        lines.append(f"# excluded  {rel:<7} (not a tested lane release)")
    for w in windows:
        if not w.all_arch:
            lines.append(f"# note: [{w.id}] {w.describe()} (runtime guard; not excluded here)")
        elif w.interp_only:
            lines.append(f"# note: [{w.id}] {w.describe()} (a Triton-interpreter defect; not excluded here)")
    lines.append(f"triton{known_good_specifier(admitted, excluded)}")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------
# MATRIX.md
# ----------------------------------------------------------------------------------------------

MATRIX_COLUMNS = (("compile", None, "compile (AOT)"), ("parity", "interp", "parity (interpreter)"),
                  ("parity", "gpu", "parity (GPU)"), ("bench", None, "bench"), ("compile-canary", None, "canaries"),
                  ("compile-static", None, "static API range"))


def _select(recs: list[dict], mode: str | None) -> list[dict]:
    return [r for r in recs if mode is None or r.get("mode") == mode]


def render_matrix(table: lanes.Table, recs: list[dict], windows: list, verdicts: dict, ledger_name: str) -> str:
    grouped = by_lane_check(recs)
    head = ["Triton", "lane"] + [c[2] for c in MATRIX_COLUMNS] + ["known-good"]
    out = [
        "# Triton compatibility matrix",
        "",
        f"Generated by `nsa-sel pin` from `{ledger_name}` ({len(recs)} records). Do not edit by hand.",
        f"Required checks for known-good: {', '.join(table.required)}. Cells count records "
        "(kernel variants x archs for compile, test cases for parity and bench); — = not run.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    notes: list[str] = []
    for lane in table.lanes:
        row = [lane.triton, lane.label]
        for check, mode, title in MATRIX_COLUMNS:
            cell_recs = _select(grouped.get((lane.label, check), []), mode)
            verdict, text = cell(cell_recs)
            row.append(text)
            if verdict != "pass":
                if not (mode == "gpu" and verdict == "not run"):
                    notes.append(_note(lane, check, title, verdict, cell_recs, grouped, table.required))
        ok, why = verdicts[lane.label]
        row.append("**yes**" if ok else "no")
        out.append("| " + " | ".join(row) + " |")
    out += gpu_evidence(table, recs)
    out += ["", "## Reasons for every non-pass", ""] + [n for n in notes if n]
    out += ["", "## Known-bad windows", ""]
    out += [f"- `{w.id}`: {w.describe()}" + (f" ({w.link})" if w.link else "") for w in windows] or ["- none"]
    out += ["", "## Environments of the newest runs", ""] + _env_table(recs)
    return "\n".join(out) + "\n"


SEEDS_MAIN = "dense-N1024-H8-D128-"  # the seeds' main packed shape (N=1024, H=8, D=Dv=128), per L


def _bench_point(rec: dict) -> tuple[str, str] | None:
    """(group, impl) of a pytest-benchmark record: ``test_packed[dense-...-L256-triton]`` -> group, triton."""
    m = rec.get("metrics") or {}
    kernel = rec.get("kernel") or ""
    if "[" not in kernel or "impl" not in m:
        return None
    param = kernel[kernel.index("[") + 1:].rstrip("]")
    impl = str(m["impl"])
    return (param[: -len(impl) - 1] if param.endswith("-" + impl) else param), impl


def _fmt_x(vals: list[float]) -> str:
    return "/".join(f"{v:.2f}x" for v in vals) if vals else "—"


def gpu_evidence(table: lanes.Table, recs: list[dict]) -> list[str]:
    """Per lane with GPU records: parity errors against the float64 oracle and the bench speedups."""
    rows = []
    for lane in table.lanes:
        par = [r for r in recs if r.get("lane") == lane.label and r.get("check") == "parity" and r.get("mode") == "gpu"]
        ben = [r for r in recs if r.get("lane") == lane.label and r.get("check") == "bench" and r.get("mode") == "gpu"]
        if not par and not ben:
            continue
        env = (par or ben)[0]
        mets = [r.get("metrics") or {} for r in par]
        abs_err = [m["max_abs_err"] for m in mets if isinstance(m.get("max_abs_err"), (int, float))]
        ratio = [m["rel_err"] / m["sdpa_rel_err"] for m in mets
                 if isinstance(m.get("rel_err"), (int, float)) and m.get("sdpa_rel_err")]
        passed = sum(r["verdict"] == "pass" for r in par)
        points = {}
        for r in ben:
            gi = _bench_point(r)
            if gi and r.get("verdict") == "pass":
                points[gi] = r["metrics"]
        seeds = [points[(g, "triton")]["speedup_vs_sdpa"] for g, i in sorted(points, key=lambda k: (len(k[0]), k[0]))
                 if i == "triton" and g.startswith(SEEDS_MAIN) and "speedup_vs_sdpa" in points[(g, i)]]
        nsa = []
        for pattern in ("random", "local"):
            t = points.get((f"nsa-T4096-{pattern}", "triton"))
            f = points.get((f"nsa-T4096-{pattern}", "fla"))
            nsa.append("—" if not t else f"{t['median_ms']:.2f} ms, {t['speedup_vs_sdpa']:.0f}x SDPA"
                       + (f", fla {f['median_ms']:.2f} ms" if f else ", fla —"))
        paired = "paired" if env.get("torch_paired") else "off-pair"
        rows.append([lane.triton, f"{env.get('machine')}", f"{env.get('torch')} ({paired})",
                     f"{passed}/{len(par)}" if par else "—",
                     f"{max(abs_err):.2e}" if abs_err else "—", f"{max(ratio):.2f}" if ratio else "—",
                     _fmt_x(seeds) + (f" (median {statistics.median(seeds):.2f}x)" if seeds else ""),
                     nsa[0], nsa[1]])
    if not rows:
        return []
    head = ["Triton", "GPU", "torch", "parity (GPU) pass", "max abs err", "max rel err / SDPA's",
            "seeds N=1024 H=8 D=128: Triton speedup over SDPA, L=256/1024", "NSA T=4096 random (Triton)",
            "NSA T=4096 local (Triton)"]
    return ["", "## GPU evidence per version", "",
            "Parity errors are against the float64 oracle over every GPU parity test (bf16 and fp16); the last "
            "ratio compares the kernel's relative error with the packed-SDPA path's in the same dtype. Speedups "
            "are pytest-benchmark medians on the GPU clock (CUDA-graph replay for the kernels, L2 flushed); "
            "'x SDPA' on NSA shapes is against the packed-SDPA path (gather + SDPA), the dispatcher's fallback.",
            "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + \
        ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def _note(lane, check, title, verdict, cell_recs, grouped, required) -> str:
    """One bullet explaining a non-pass cell; empty for optional checks that simply did not run."""
    if verdict == "not run":
        if check not in required:
            return ""  # e.g. GPU columns of a CPU-only ledger: the table's "—" says it all
        if check != "compile" and cell(grouped.get((lane.label, "compile"), []))[0] in BAD:
            return f"- **{lane.triton} · {title}**: not run: its `compile-{lane.label}` prerequisite failed"
        return f"- **{lane.triton} · {title}**: not run (no record in the ledger)"
    body = "; ".join(reasons(cell_recs)) or verdict
    return f"- **{lane.triton} · {title}**: {body}"


def _env_table(recs: list[dict]) -> list[str]:
    head = ["lane", "check", "mode", "machine", "python", "torch", "torch paired", "numpy", "triton",
            "CUDA", "driver", "knobs", "commit", "date"]
    rows, seen = [], set()
    for r in recs:
        key = run_key(r)
        if key in seen or r.get("check") not in ("compile", "parity", "bench"):
            continue  # canary/static rows share the compile run's environment
        seen.add(key)
        paired = "yes" if r.get("torch_paired") else f"no: {r.get('off_pair_reason') or '?'}"
        knobs = ", ".join(f"{k}={v}" for k, v in sorted((r.get("knobs") or {}).items())) or "—"
        commit = (r.get("git_commit") or "?")[:12]
        rows.append([r.get("lane"), r.get("check"), r.get("mode"), r.get("machine"), r.get("python"),
                     r.get("torch"), paired, r.get("numpy"), r.get("triton"), r.get("cuda") or "—",
                     r.get("driver") or "—", knobs, commit, (r.get("date") or "")[:16]])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


# ----------------------------------------------------------------------------------------------
# pin
# ----------------------------------------------------------------------------------------------

def pin(result_dirs: list[Path], ledger_path: Path, matrix_path: Path, known_good_path: Path,
        table: lanes.Table | None = None, windows: list | None = None, log=print) -> dict:
    """Merge run files into the ledger and regenerate MATRIX.md and known-good.txt (atomically)."""
    table = table or lanes.load_table()
    windows = known_bad.load() if windows is None else windows
    new, warns = load_run_files([d for d in result_dirs if Path(d).is_dir()])
    for w in warns:
        log(f"warning: {w}")
    new = [r for r in new if not r.get("candidate")]  # check-upgrade lanes never enter the ledger
    merged = [r for r in merge(load_ledger(ledger_path), new) if not _canary_static(r)]
    verdicts = lane_verdicts(table, merged, windows)
    name = _rel(ledger_path)
    atomic_write_text(ledger_path, dump_ledger(merged))
    atomic_write_text(matrix_path, render_matrix(table, merged, windows, verdicts, name))
    atomic_write_text(known_good_path, render_known_good(table, verdicts, windows, name))
    log(f"ledger: {len(merged)} records ({len(new)} from {len(result_dirs)} results dir(s)) -> {ledger_path}")
    for lane in table.lanes:
        ok, why = verdicts[lane.label]
        log(f"  {lane.triton:<7} {'known-good' if ok else 'excluded: ' + '; '.join(why)}")
    return {"records": len(merged), "new": len(new), "verdicts": verdicts, "warnings": warns}


def _canary_static(rec: dict) -> bool:
    """Static-check rows of the test canaries (written before runs filtered them): not a verdict."""
    return rec.get("check") == "compile-static" and "canaries/" in (rec.get("kernel") or "")


def _rel(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(lanes.repo_root()))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    """``nsa-sel pin [--results DIR ...] [--ledger F] [--matrix F] [--known-good F]``."""
    cdir = lanes.constraints_dir()
    p = argparse.ArgumentParser(prog="nsa-sel pin", description="merge lane results into the ledger; "
                                "render MATRIX.md and known-good.txt")
    p.add_argument("--results", action="append", default=None,
                   help="directory of lane run files (repeatable; default $NSA_SEL_RESULTS or out/lanes)")
    p.add_argument("--ledger", type=Path, default=cdir / "ledger.jsonl")
    p.add_argument("--matrix", type=Path, default=cdir / "MATRIX.md")
    p.add_argument("--known-good", type=Path, default=cdir / "known-good.txt")
    args = p.parse_args(argv)
    dirs = [Path(d) for d in (args.results or [str(results_dir())])]
    missing = [d for d in dirs if not d.is_dir()]
    for d in missing:
        print(f"nsa-sel pin: no results directory {d} (re-rendering from the ledger only)", file=sys.stderr)
    pin(dirs, args.ledger, args.matrix, args.known_good)
    return 0  # interrupted lanes are recorded as such; the ledger itself is valid


if __name__ == "__main__":
    sys.exit(main())
