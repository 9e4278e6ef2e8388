"""Ledger records: what one is, how one is built, and the checks every record must pass.

A *record* is a flat JSON object, one verdict of one kernel/test on one release::

    {"schema": 2, "lane": "3.1", "triton": "3.1.0", "check": "parity", "mode": "interp",
     "kernel": "tests/test_kernels_interp.py::test_fwd[fp16]", "arch": null, "verdict": "pass",
     "message": "", "metrics": {"seconds": 0.8},
     "triton_imported": "3.1.0", "numpy_imported": "1.26.4", "torch_imported": "2.13.0+cpu",
     "torch": "2.13.0+cpu", "torch_paired": false, "off_pair_reason": "...", "python": "3.11.9",
     "numpy": "1.26.4", "cuda": null, "driver": null, "gpu": null, "knobs": {...}, "date": "...",
     "git_commit": "abc123", "session": "parity-3.1", "run_id": "parity-3.1@...", "machine": "cpu"}

``triton`` is the release the lane *declares*; ``*_imported`` are the versions the process that
produced the verdict actually imported (None: it did not import that package).  A record whose
process imported another Triton than the one it names is not evidence about that release:
:func:`enforce_isolation` turns it into an ``error`` naming both versions, and the ledger keeps
nothing else for it.  Schema 2 added the imported fields (schema-1 records came from lanes that
were not isolated and were dropped; see ``constraints/HISTORY.md``).
"""

from __future__ import annotations

import datetime as _dt

from packaging.version import InvalidVersion, Version

from ..verdicts import CHECKS, ERROR, VERDICTS, check_record_verdict

SCHEMA = 2
IMPORTED_FIELDS = ("triton_imported", "numpy_imported", "torch_imported")
REQUIRED_FIELDS = ("schema", "lane", "triton", "check", "mode", "kernel", "verdict", "run_id") + IMPORTED_FIELDS


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def imported_fields(versions: dict | None) -> dict:
    """``{"triton": "3.1.0", ...}`` (what a process reported) -> the record's ``*_imported`` fields."""
    versions = versions or {}
    return {f"{name}_imported": versions.get(name) for name in ("triton", "numpy", "torch")}


def base_record(lane, fp: dict, *, check: str, mode: str, session: str, run_id: str,
                knobs: dict | None = None) -> dict:
    """The fields every record of one run shares, from the lane and its environment fingerprint.

    ``fp`` is the fingerprint taken *inside* the lane environment (its ``imported`` entry says
    what that process imported).  ``triton`` is the lane's declared release.  torch counts as
    paired only for a CUDA build of a torch release that pins this Triton; otherwise
    ``off_pair_reason`` says what ran instead.
    """
    torch_v, cuda = fp.get("torch"), fp.get("cuda_runtime")
    paired = lane.torch_is_paired(torch_v, cuda)
    knobs = dict(knobs or {})
    knobs.update(fp.get("triton_env") or {})
    knobs.pop("TRITON_CACHE_DIR", None)  # a path, not a knob that changes results
    return {
        "schema": SCHEMA,
        "lane": lane.label,
        "triton": lane.triton,
        "check": check,
        "mode": mode,
        **imported_fields(fp.get("imported")),
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


def off_pair_reason(lane, torch_v: str | None, cuda: str | None) -> str:
    """Why the torch of a run is not the paired one (for the ledger and MATRIX.md)."""
    want = " or ".join(lane.torch) or "(none known yet)"
    if not torch_v:
        return f"no torch importable; triton {lane.triton} pairs with torch {want}"
    if not cuda:
        return f"CPU build torch {torch_v} (no Triton pin); triton {lane.triton} pairs with CUDA torch {want}"
    return f"torch {torch_v} reused from the environment; triton {lane.triton} pairs with torch {want}"


def record(base: dict, *, kernel: str, verdict: str, message: str = "", arch: int | None = None,
           metrics: dict | None = None, imported: dict | None = None, **extra) -> dict:
    """One verdict on top of a run's base fields; the verdict must be a record verdict.

    ``imported`` (``{"triton": ..., "numpy": ..., "torch": ...}``) is what the producing process
    imported; without it the base's fields stand.
    """
    check_record_verdict(verdict)
    rec = dict(base)
    rec.update(kernel=kernel, verdict=verdict, message=clip(message), arch=arch, metrics=metrics or {})
    if imported is not None:
        rec.update(imported_fields(imported))
    for field in IMPORTED_FIELDS:
        rec.setdefault(field, None)
    rec.update(extra)
    return rec


def clip(message: str | None, limit: int = 400) -> str:
    """Messages are for humans scanning a table: the informative tail, bounded."""
    text = (message or "").strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def isolation_problem(rec: dict) -> str | None:
    """Why a record is not evidence about the release it names, or None.

    Its process imported a Triton other than the declared one (e.g. the invoking environment's
    3.9 leaking into lane 3.1).
    """
    got = rec.get("triton_imported")
    if not isinstance(got, str):
        return None
    try:
        same = Version(got) == Version(str(rec.get("triton")))
    except InvalidVersion:
        same = False
    if same:
        return None
    return (f"its process imported triton {got}, not the lane's {rec.get('triton')}: the lane is not "
            "isolated from the invoking environment, so this verdict is about another Triton")


def enforce_isolation(rec: dict) -> dict:
    """``rec`` unchanged, or an ``error`` record naming the isolation problem (original kept)."""
    problem = isolation_problem(rec)
    if problem is None:
        return rec
    was = f"{rec.get('verdict')}: {rec.get('message') or ''}".rstrip(": ")
    return {**rec, "verdict": ERROR, "isolation_error": problem, "message": clip(f"{problem} | was {was}")}


def problems(rec) -> list[str]:
    """What is wrong with a record read from a file (empty: nothing)."""
    if not isinstance(rec, dict):
        return [f"a record must be a JSON object, got {type(rec).__name__}"]
    out = []
    if rec.get("schema") != SCHEMA:
        out.append(f"schema {rec.get('schema')!r}, this code reads {SCHEMA} (schema-1 records came from lanes "
                   "that were not isolated; drop them with `nsa-sel pin --reset`)")
    missing = [f for f in REQUIRED_FIELDS if f not in rec]
    if missing:
        out.append(f"missing field(s) {', '.join(missing)}")
    if "verdict" in rec and rec["verdict"] not in VERDICTS:
        out.append(f"unknown verdict {rec['verdict']!r}; accepted: {', '.join(VERDICTS)}")
    if "check" in rec and rec["check"] not in CHECKS:
        out.append(f"unknown check {rec['check']!r}; accepted: {', '.join(CHECKS)}")
    try:
        Version(str(rec.get("triton")))
    except InvalidVersion:
        out.append(f"triton {rec.get('triton')!r} is not a version")
    return out
