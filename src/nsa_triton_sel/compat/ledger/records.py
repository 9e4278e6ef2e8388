"""Ledger records: what one is, how one is built, and the checks every record must pass.

A *record* is a flat JSON object, one verdict of one kernel/test on one release::

    {"schema": 3, "lane": "3.1", "triton": "3.1.0", "check": "parity", "mode": "interp",
     "kernel": "tests/library/kernels/test_kernels_interp.py::test_fwd[fp16]", "arch": null, "verdict": "pass",
     "message": "", "metrics": {"seconds": 0.8},
     "triton_imported": "3.1.0", "process": {"numpy": "1.26.4", "torch": "2.13.0+cpu"},
     "torch": "2.13.0+cpu", "torch_paired": false, "off_pair_reason": "...", "python": "3.11.9",
     "numpy": "1.26.4", "cuda": null, "driver": null, "gpu": null, "knobs": {...}, "date": "...",
     "git_commit": "abc123", "compiler_hash": "6ebda527089c5540", "runtime_hash": "0c1e...", "session": "parity-3.1", "run_id": "parity-3.1@...", "machine": "cpu"}

``triton`` is the release the lane *declares*; ``triton_imported`` is the Triton the process that
produced the verdict actually imported, and ``process`` the numpy and torch it imported (None: it
did not import that package).  A record whose process imported another Triton than the one it
names is not evidence about that release: :func:`enforce_isolation` turns it into an ``error``
naming both versions, and the ledger keeps nothing else for it.  Schema 2 added the imported
versions (schema-1 records came from lanes that were not isolated and were dropped; see
``constraints/HISTORY.md``); schema 3 moved numpy's and torch's into ``process``, so that every
top-level ``*_imported`` field names a Triton (:func:`migrate` reads schema 2).  ``compiler_hash``
and ``runtime_hash`` (optional; absent = unknown) name the sources the run used
(:mod:`nsa_triton_sel.provenance`): evidence about other compiler-facing sources is stale, and a
contract record about another runtime is stale (:mod:`.evidence`).  ``kernel_hash``, in records
that predate them, is the hash of ``kernels/*.py`` alone: history, read by nothing but the backfill.
"""

from __future__ import annotations

import datetime as _dt
import math

from packaging.version import InvalidVersion, Version

from ..core.verdicts import CHECKS, ERROR, VERDICTS, check_record_verdict

SCHEMA = 3
IMPORTED_FIELDS = ("triton_imported", "process")
# Records of a compile lane run over a user's spec module (``nox -s compile-X -- --specs M``) carry the
# module's reference here: they judge that team's kernels, never this project's, so no pin takes them.
SPECS_FIELD = "specs"
REQUIRED_FIELDS = ("schema", "lane", "triton", "check", "mode", "kernel", "verdict", "run_id") + IMPORTED_FIELDS


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def imported_fields(versions: dict | None) -> dict:
    """``{"triton": "3.1.0", ...}`` (what a process reported) -> the record's imported fields."""
    versions = versions or {}
    return {"triton_imported": versions.get("triton"),
            "process": {"numpy": versions.get("numpy"), "torch": versions.get("torch")}}


def imported_versions(rec: dict) -> dict:
    """``{"triton": ..., "numpy": ..., "torch": ...}``: what the record's process imported."""
    process = rec.get("process") or {}
    return {"triton": rec.get("triton_imported"), "numpy": process.get("numpy"), "torch": process.get("torch")}


def migrate(rec):
    """A schema-2 record in schema 3 (its numpy and torch versions moved into ``process``); any other
    record unchanged (:func:`problems` reports what is wrong with it)."""
    if not isinstance(rec, dict) or rec.get("schema") != 2:
        return rec
    out = {k: v for k, v in rec.items() if k not in ("numpy_imported", "torch_imported")}
    out["schema"] = SCHEMA
    out["process"] = {"numpy": rec.get("numpy_imported"), "torch": rec.get("torch_imported")}
    return out


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
        # the sources it ran (nsa_triton_sel.provenance): what Triton compiled, and the rest of the runtime
        "compiler_hash": fp.get("compiler_hash"),
        "runtime_hash": fp.get("runtime_hash"),
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
    for field, empty in imported_fields(None).items():
        rec.setdefault(field, empty)
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
        out.append(f"schema {rec.get('schema')!r}, this code reads {SCHEMA} (and 2, migrated on load; schema-1 "
                   "records came from lanes that were not isolated: drop them with `nsa-sel pin --reset`)")
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
    return out + type_problems(rec)


_NONE = type(None)
# What the renderers and the merge assume of a field (checked, so a wrong type is a problem naming the field,
# not a traceback).
FIELD_TYPES = {"lane": str, "triton": str, "kernel": str, "run_id": str, "check": str, "verdict": str,
               "mode": (str, _NONE), "session": (str, _NONE), "machine": (str, _NONE), "message": (str, _NONE),
               "date": (str, _NONE), "triton_imported": (str, _NONE), "process": (dict, _NONE),
               "metrics": (dict, _NONE), "knobs": (dict, _NONE), "arch": (int, _NONE),
               "compiler_hash": (str, _NONE), "runtime_hash": (str, _NONE), "hashes_from": (str, _NONE)}
_SCALARS = (int, float, str, bool, _NONE)


def _type_name(t) -> str:
    names = [x.__name__ for x in (t if isinstance(t, tuple) else (t,))]
    return " or ".join("null" if n == "NoneType" else n for n in names)


def type_problems(rec: dict) -> list[str]:
    """Fields of the wrong JSON type, a date that is not ISO 8601, metrics that are not flat scalars."""
    out = []
    for name, want in FIELD_TYPES.items():
        value = rec.get(name)
        if name in rec and (not isinstance(value, want) or (name == "arch" and isinstance(value, bool))):
            out.append(f"`{name}` must be {_type_name(want)}, got {type(value).__name__}")
    if isinstance(rec.get("date"), str) and rec["date"]:
        try:
            _dt.datetime.fromisoformat(rec["date"])
        except ValueError:
            out.append(f"`date` {rec['date'][:40]!r} is not an ISO 8601 date")
    metrics = rec.get("metrics")
    if isinstance(metrics, dict):
        if not all(isinstance(v, _SCALARS) for v in metrics.values()):
            out.append("`metrics` values must be numbers, strings, booleans or null")
        bad = [k for k in NUMERIC_METRICS if k in metrics and metrics[k] is not None and not _finite(metrics[k])]
        if bad:
            out.append(f"metric(s) {', '.join(bad)} must be finite numbers")
    return out


NUMERIC_METRICS = ("seconds", "median_s", "median_ms", "speedup_vs_sdpa", "max_abs_err", "rel_err", "sdpa_rel_err")


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
