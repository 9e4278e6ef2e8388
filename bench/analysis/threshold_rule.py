"""The threshold rule of ``python -m bench.analysis.sel_threshold_from_csv``: which benchmark rows count as
evidence, and from which L Triton beats the baseline by the margin within the MAE gate
(``sel_triton_min_L``), per GPU and Triton release (the dispatcher applies an entry only to
exactly that GPU and release).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import csvio


def as_float(x) -> float:
    try:
        return float(str(x).rstrip("x"))
    except (TypeError, ValueError):
        return float("nan")


def load(paths: list[str], kind: str, allow_missing: bool = False) -> list[dict]:
    """Rows of the given CSVs, tagged with ``kind`` (dense/varlen/decode) and their file."""
    rows = []
    for p in paths or []:
        if not Path(p).exists():
            if allow_missing:
                csvio.progress(f"warning: {kind} CSV {p} does not exist; skipped")
                continue
            raise FileNotFoundError(f"--{kind} CSV not found: {p}")
        for r in csvio.read_csv([p]):
            r["kind"], r["file"] = kind, str(p)
            rows.append(r)
    return rows


def triton_release(version: str) -> str:
    """The release a row ran on ("3.6.0"; local and dev parts dropped)."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(str(version)).base_version
    except InvalidVersion:
        return str(version)


def gpu_key(r: dict) -> tuple[str, str]:
    """Rows are judged per (GPU name, Triton release)."""
    return (r.get("gpu") or "unknown", triton_release(r.get("triton") or "?"))


def config_name(r: dict) -> str:
    d = r.get("dist") or r.get("mode")
    return f"{d} N={r['N']} H={r['H']} D={r['D']} Dv={r['Dv']}"


BASELINES = {"sdpa": "SDPA on the pre-gathered packed keys (gather not timed)",
             "fallback": "the dispatcher's fallback, packed_sdpa (gather + masked SDPA)"}


def row_speedup(r: dict, baseline: str = "sdpa") -> float:
    """Baseline time / Triton time for one row (see the module docstring)."""
    if baseline == "sdpa":
        return as_float(r.get("speedup"))
    if baseline != "fallback":
        raise ValueError(f"baseline must be one of {sorted(BASELINES)}, got {baseline!r}")
    ref = as_float(r.get("ref_gather_ms"))
    if math.isnan(ref):
        ref = as_float(r.get("ref_ms"))
    tri = as_float(r.get("tri_ms"))
    return ref / tri if tri > 0 else float("nan")


def row_failure(r: dict, margin: float, max_mae: float, allow_suspect: bool, baseline: str = "sdpa") -> str | None:
    """Why this row vetoes Triton at its L, or None if it passes."""
    if (r.get("status") or "ok") != "ok":
        return f"status {r['status']}"
    if r.get("suspect") and not allow_suspect:
        return f"suspect ({r['suspect']})"
    sp, mae = row_speedup(r, baseline), as_float(r.get("mae"))
    if math.isnan(sp) or sp < margin:
        return f"speedup {sp:.2f}x < {margin:.2f}x"
    if math.isnan(mae) or mae > max_mae:
        return f"MAE {mae:.2e} > {max_mae:.0e}"
    return None


@dataclass
class LGate:
    L: int
    configs: int
    min_speedup: float
    worst: str
    max_mae: float
    failures: list = field(default_factory=list)  # (config, reason)


@dataclass
class Verdict:
    gpu: str
    triton: str
    min_L: int | None
    reason: str
    gates: list
    rows: list
    baseline: str = "sdpa"


def choose_threshold(rows: list[dict], margin: float, max_mae: float, *, allow_suspect: bool = False,
                     gpu: str = "", triton: str = "", baseline: str = "sdpa") -> Verdict:
    """The smallest L from which every gating row passes (see the module docstring)."""
    if margin <= 0 or max_mae <= 0:
        raise ValueError(f"margin and max_mae must be positive, got {margin}, {max_mae}")
    by_L: dict[int, list[dict]] = {}
    for r in rows:
        by_L.setdefault(int(r["L"]), []).append(r)
    gates = []
    for L in sorted(by_L):
        rs = by_L[L]
        sps = [(row_speedup(r, baseline), config_name(r)) for r in rs]
        finite = [s for s in sps if not math.isnan(s[0])]
        worst = min(finite) if finite else (float("nan"), "-")
        maes = [as_float(r.get("mae")) for r in rs if not math.isnan(as_float(r.get("mae")))]
        fails = [(config_name(r), why) for r in rs
                 if (why := row_failure(r, margin, max_mae, allow_suspect, baseline))]
        gates.append(LGate(L, len(rs), worst[0], worst[1], max(maes) if maes else float("nan"), fails))
    if not gates:
        return Verdict(gpu, triton, None, "no gating rows: keep Triton off", [], rows, baseline)
    # Walk down from the largest L while every row passes; the last passing L is the answer.
    first_pass = None
    for g in reversed(gates):
        if g.failures:
            break
        first_pass = g.L
    if first_pass is None:
        g = gates[-1]
        cfg, why = g.failures[0]
        return Verdict(gpu, triton, None, f"keep Triton off: even at the largest tested L={g.L}, {len(g.failures)} of "
                       f"{g.configs} configurations fail (e.g. {cfg}: {why})", gates, rows, baseline)
    below = [g for g in gates if g.L < first_pass]
    if not below:  # never measured slower: no row may go to SDPA (only a measured loss moves rows off the kernels)
        return Verdict(gpu, triton, 1, f"from L={first_pass} (the smallest tested) every configuration passes: "
                       f"the kernels take every row", gates, rows, baseline)
    # Only the rows where the baseline was measured faster (up to the largest failing L) go to it;
    # untested L between that and the first passing L stay with the kernels.
    cfg, why = below[-1].failures[0]
    min_L = below[-1].L + 1
    reason = f"from L={first_pass} every configuration passes; at L={below[-1].L}: {cfg}: {why}; so L < {min_L} to SDPA"
    return Verdict(gpu, triton, min_L, reason, gates, rows, baseline)


def verdicts(rows: list[dict], margin, max_mae, *, streams: int = 1, gate_decode: bool = False,
             allow_suspect: bool = False, baseline: str = "sdpa") -> list[Verdict]:
    """One verdict per (GPU, Triton minor) present in the rows."""
    gating = [r for r in rows if int(as_float(r.get("streams") or 1)) == streams
              and (r["kind"] in ("dense", "varlen") or (gate_decode and r["kind"] == "decode"))]
    out = []
    for key in sorted({gpu_key(r) for r in gating}):
        rs = [r for r in gating if gpu_key(r) == key]
        out.append(choose_threshold(rs, margin, max_mae, allow_suspect=allow_suspect, gpu=key[0], triton=key[1],
                                    baseline=baseline))
    return out
