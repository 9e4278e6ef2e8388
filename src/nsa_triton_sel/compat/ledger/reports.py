"""Ledger records from what a lane's processes wrote: the smoke report, pytest's junit XML,
pytest-benchmark's JSON.

Each record carries the versions its producing process imported: a compile child reports
them with its result, pytest through the toolkit's pytest plugin
(:mod:`nsa_triton_sel.compat.lanes.pytest_plugin`), which the lane passes in as ``imported``.
A failure covered by a known-bad window becomes ``xfail`` naming the window, so the matrix
tells an expected failure from a new one.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

from ... import known_bad
from ..core import project
from ..core.verdicts import BAD, ERROR, FAIL, FROM_COMPILE, PASS, SKIP, XFAIL, backward_check
from .records import record


def records_from_smoke(report: dict, base: dict, windows: list | None = None) -> list[dict]:
    """Ledger records from an ``nsa-sel smoke --json`` report.

    Canaries (deliberately broken kernels) go to check ``compile-canary`` and pass when they
    failed the expected way.  Skipped variants and the static API check were decided by the
    smoke parent, which imports no Triton: their imported fields are None.
    """
    knobs = dict(base.get("knobs") or {})
    knobs.update({k: v for k, v in (report.get("env") or {}).items() if k != "TRITON_CACHE_DIR"})
    out = []
    for r in report.get("results", []):
        verdict = FROM_COMPILE.get(r.get("verdict"), ERROR)
        name = r.get("spec") or r.get("kernel", "?")
        check = "compile"
        if r.get("canary"):
            check = "compile-canary"
            if r.get("as_expected") is not None:
                verdict = PASS if r["as_expected"] else FAIL
        message = r.get("message") or ""
        check = backward_check(check, name)
        if check in ("compile", "backward") and verdict in BAD:
            why = known_bad.expected_failure(base["triton"], r.get("arch"), "compile", windows, base.get("mode"),
                                             message=message, variant=name)
            if why:
                verdict, message = XFAIL, f"known-bad {why} | {message}"
        metrics = dict(r.get("metrics") or {})
        if r.get("seconds") is not None:
            metrics["seconds"] = r["seconds"]
        out.append(record({**base, "check": check, "knobs": knobs}, kernel=name,
                          verdict=verdict, message=message, arch=r.get("arch"), metrics=metrics,
                          imported=r.get("imported") or {}))
    for s in report.get("skipped", []):  # variants the launchers never use on this Triton/arch
        out.append(record({**base, "check": backward_check("compile", s.get("spec", "?")), "knobs": knobs},
                          kernel=s.get("spec", "?"),
                          verdict=SKIP, message=s.get("why", "not launched there"), arch=s.get("arch"), imported={}))
    results = report.get("results", [])
    canaries = {r.get("kernel") for r in results if r.get("canary")} - {r.get("kernel") for r in results
                                                                        if not r.get("canary")}
    static = {ref: info for ref, info in (report.get("static") or {}).items()
              if ref.rpartition(":")[2] not in canaries}  # canaries need odd versions on purpose
    out += _static_records(static, {**base, "check": "compile-static", "knobs": knobs})
    return out


def _static_records(static: dict, base: dict) -> list[dict]:
    """The smoke's AST API-range check: does each kernel's source need a Triton this is not?"""
    out = []
    for ref, info in sorted((project.relative_to_project(r), i) for r, i in static.items()):
        needs = info.get("needs") or "any"
        findings = "; ".join(f"line {f.get('line')}: {f.get('api')} ({f.get('needs')})"
                             for f in info.get("findings", []) if isinstance(f, dict))
        if info.get("error"):
            verdict, msg = ERROR, info["error"]
        else:
            verdict = FAIL if info.get("installed_ok") is False else PASS
            msg = f"needs triton {needs}" + (f": {findings}" if findings else "")
        out.append(record(base, kernel=ref, verdict=verdict, message=msg, imported={}))
    return out


def records_from_junit(xml_text: str, base: dict, windows: list | None = None,
                       imported: dict | None = None) -> list[dict]:
    """One record per pytest test case from a ``--junitxml`` report.

    ``imported`` is what the pytest process imported (the toolkit's pytest plugin writes it).
    A failure covered by a known-bad window for this Triton and check (all archs, or the run's
    GPU arch) becomes ``xfail`` naming the window: the expectation lives in the data, not in the
    tests.
    """
    root = ET.fromstring(xml_text)
    arch = _arch_of(base)
    out = []
    for case in root.iter("testcase"):
        verdict, message = _junit_verdict(case)
        message = tidy_message(message)
        why = verdict in BAD and known_bad.expected_failure(base["triton"], arch, base["check"], windows,
                                                            base.get("mode"), message=message)
        if why:
            verdict, message = XFAIL, f"known-bad {why} | {message}"
        name = f"{case.get('classname', '')}::{case.get('name', '')}".lstrip(":")
        metrics = {"seconds": float(case.get("time") or 0.0), **_junit_properties(case)}
        check = backward_check(base["check"], name)  # gradient parity: the backward column
        out.append(record({**base, "check": check}, kernel=name, verdict=verdict, message=message, metrics=metrics,
                          imported=imported))
    return out


def unscoped_known_bad(records: list[dict], windows: list | None = None) -> dict[str, int]:
    """``{window id: records}``: failures that a known-bad window took as its own (``xfail``) without naming them.

    A window with no failure ``signature``, no ``variants`` and no ``paths`` claims every failure of its checks on
    its releases and archs, so a new defect there is recorded as that window's known failure.  Each of these
    records is a failure to read before the verdict is trusted (:func:`unscoped_warning`)."""
    pool = {w.id: w for w in (known_bad.load() if windows is None else windows)}
    out: dict[str, int] = {}
    for r in records:
        message = str(r.get("message") or "")
        if r.get("verdict") != XFAIL or not message.startswith("known-bad ["):
            continue
        for wid in re.findall(r"\[([^\]]+)\]", message.split(" | ", 1)[0]):
            w = pool.get(wid)
            if w is not None and not (w.signature or w.variants or w.paths):
                out[wid] = out.get(wid, 0) + 1
    return out


def unscoped_warning(records: list[dict], windows: list | None = None) -> str | None:
    """One line naming the failures :func:`unscoped_known_bad` finds, or None."""
    hits = unscoped_known_bad(records, windows)
    if not hits:
        return None
    what = ", ".join(f"{n} by {wid}" for wid, n in sorted(hits.items()))
    return (f"{sum(hits.values())} failure(s) taken as known-bad by a window that names no failure signature "
            f"({what}): such a window counts any failure there as its own; read them before trusting this verdict")


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
    for tag, verdict in (("failure", FAIL), ("error", ERROR)):
        el = case.find(tag)
        if el is not None:
            return verdict, el.get("message") or (el.text or "")
    el = case.find("skipped")
    if el is not None:
        kind = XFAIL if (el.get("type") or "") == "pytest.xfail" else SKIP
        return kind, el.get("message") or ""
    return PASS, ""


def attach_benchmarks(recs: list[dict], bench_json: dict) -> list[dict]:
    """Add pytest-benchmark statistics to the matching test records (matched by test name).

    A statistic that is NaN or infinite (a zero-time round, a speedup over nothing) is kept as null:
    the run file and the ledger are strict JSON, and a lane must not lose its run over one number."""
    by_name = {}
    for b in bench_json.get("benchmarks", []):
        stats = b.get("stats") or {}
        m = {f"{k}_s": stats[k] for k in ("min", "median", "mean", "stddev", "iqr") if k in stats}
        m.update({k: stats[k] for k in ("ops", "rounds") if k in stats})
        m.update({k: v for k, v in (b.get("extra_info") or {}).items() if isinstance(v, (int, float, str))})
        by_name[b.get("name")] = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in m.items()}
    for rec in recs:
        short = rec["kernel"].rsplit("::", 1)[-1]
        if short in by_name:
            rec["metrics"] = {**rec.get("metrics", {}), **by_name[short]}
    return recs
