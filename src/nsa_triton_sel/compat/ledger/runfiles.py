"""Run files: what one lane session leaves in the results directory.

Every nox lane session writes one *run file* (``<results>/<session>.json``), atomically, first
with ``status: "running"`` when the session starts, then with its records and
``status: "complete"`` (or ``"interrupted"``/``"error"``).  A run file still ``"running"`` when
``nsa-sel pin`` reads it belongs to a lane that crashed or was killed: pin reports it as
``interrupted``, never as passed.

Reading is strict: every ``*.json`` in a results directory must be a complete, valid run file.
An empty or truncated file, one without ``"kind"``, or a record with an unknown verdict is a
:class:`RunFileError` naming the file, so a lost result is never silently skipped.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from ..core.atomic import FileProblem, atomic_write_text, dumps_json, loads_json, read_text
from ..core.verdicts import ERROR, INTERRUPTED
from .records import SCHEMA, migrate, now_iso, problems, record

KIND = "lane-run"
RUN_FILE_STATES = ("running", "complete", "interrupted", "error")


class RunFileError(ValueError):
    """A results file that cannot be read as a lane run file; the message names the file."""


def run_file(results: Path, session: str) -> Path:
    return Path(results) / f"{session}.json"


def write_run(path: Path, *, base: dict, status: str, started: str, records: list[dict],
              note: str = "", stage: str = "") -> None:
    """Write one run file atomically (at session start, after set-up, and at its end).

    ``base`` holds the run's shared record fields (lane, check, mode, session, run_id, machine,
    date, ...): it is what an ``interrupted`` marker is built from if the session never finishes.
    ``stage`` names where an unfinished run stopped: ``"set-up"`` (the environment could not be
    built: no verdict about the Triton) or ``"checks"``.
    """
    if status not in RUN_FILE_STATES:
        raise ValueError(f"status {status!r} not in {RUN_FILE_STATES}")
    doc = {"schema": SCHEMA, "kind": KIND, "session": base.get("session"), "lane": base.get("lane"),
           "triton": base.get("triton"), "check": base.get("check"), "mode": base.get("mode"),
           "run_id": base.get("run_id"), "status": status, "started": started,
           "finished": None if status == "running" else now_iso(), "note": note, "stage": stage, "base": base,
           "records": records}
    atomic_write_text(path, dumps_json(doc, indent=1, sort_keys=True) + "\n")  # strict: pin reads it so


def records_of_run(doc: dict) -> list[dict]:
    """The records of a run file; an unfinished run also yields an ``interrupted`` marker.

    The marker carries the run's identity, so it replaces older results of the same release and
    check in the merge: a crashed lane is reported as such instead of silently keeping the
    verdicts of an earlier run.
    """
    recs = list(doc.get("records", []))
    status = doc.get("status")
    if status == "complete":
        return recs
    template = dict(doc.get("base") or (recs[0] if recs else {}))
    for k in ("lane", "triton", "check", "mode", "session", "run_id"):
        template.setdefault(k, doc.get(k))
    template.setdefault("schema", SCHEMA)
    template.setdefault("date", doc.get("started"))
    template.setdefault("machine", "cpu")
    what = "never finished (crashed or was killed)" if status == "running" else f"ended with status {status}"
    msg = f"session {doc.get('session')} started {doc.get('started')} {what}; {len(recs)} partial record(s)"
    if doc.get("note"):
        msg += f"; {doc['note']}"
    marker = record(template, kernel="(lane session)", verdict=INTERRUPTED if status != "error" else ERROR,
                    message=msg, stage=doc.get("stage") or "")
    return recs + [marker]


def read_run_file(path: Path) -> dict:
    """One run file, checked; a :class:`RunFileError` naming the file and what is wrong."""
    try:
        text = read_text(path)  # a FIFO or a link to /dev/zero named *.json: an error, never a hang
    except FileProblem as exc:
        raise RunFileError(str(exc)) from None
    if not text.strip():
        raise RunFileError(f"{path}: empty (a lane was killed while writing it, or the disk filled up); "
                           "re-run its session or remove the file")
    try:
        doc = loads_json(text)  # NaN, Infinity, 1e400, a 5000-digit number, nesting past the parser: refused
    except ValueError as exc:
        raise RunFileError(f"{path}: not a lane run file: {exc}; truncated? re-run its session or remove the file") \
            from None
    if not isinstance(doc, dict) or "kind" not in doc:
        raise RunFileError(f"{path}: no \"kind\" field: not a lane run file (results directories hold only "
                           f"run files of kind {KIND!r})")
    if doc["kind"] != KIND:
        raise RunFileError(f"{path}: kind {doc['kind']!r}, expected {KIND!r}")
    if doc.get("status") not in RUN_FILE_STATES:
        raise RunFileError(f"{path}: status {doc.get('status')!r}, expected one of {RUN_FILE_STATES}")
    if not isinstance(doc.get("records"), list):
        raise RunFileError(f"{path}: \"records\" must be a list")
    doc["records"] = [migrate(rec) for rec in doc["records"]]
    for i, rec in enumerate(doc["records"]):
        bad = problems(rec)
        if bad:
            raise RunFileError(f"{path}: record {i} ({_name(rec)}): {'; '.join(bad)}")
    return doc


def _name(rec) -> str:
    return f"kernel {rec.get('kernel')!r}" if isinstance(rec, dict) else "?"


def load_run_files(dirs: Iterable[Path]) -> tuple[list[dict], list[str]]:
    """All records from the run files under ``dirs`` plus notes on unfinished lanes.

    Raises :class:`RunFileError` for any file that is not a valid run file.
    """
    recs, notes = [], []
    for d in dirs:
        try:  # glob() skips an unreadable directory without a word: list it ourselves
            names = sorted(os.listdir(d))
        except OSError as exc:
            raise RunFileError(f"{d}: cannot list the results directory ({exc.strerror})") from None
        for path in (Path(d) / n for n in names if n.endswith(".json")):
            doc = read_run_file(path)
            if doc.get("status") != "complete":
                notes.append(f"{path}: lane session {doc.get('session')} is {doc.get('status')}: reported as such")
            recs.extend(records_of_run(doc))
    return recs, notes
