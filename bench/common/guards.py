"""Suspect-row guards of a sweep: a reference that gets faster as L grows, a flat sweep where
honest work must show, noisy timings, and the kernel switches that explain a drop.
"""

from __future__ import annotations

import math
from typing import Iterable

from .accounting import sel_bytes


# Guard tolerances.  A reference that gets >15 % faster when L grows is not noise for
# kernels timed as a median over tens of L2-flushed runs; a "flat" sweep is flagged only
# where the bandwidth floor at the largest L is at least twice the smallest measured
# time, i.e. where honest work must be visible above launch latency.
DROP_TOL = 0.15
DROP_ABS_MS = 0.002  # and by more than 2 us: launch-bound kernels jitter by about that much
FLAT_MIN_RATIO = 1.2
FLAT_FLOOR_FACTOR = 2.0
# A timing is noisy when its 80 % quantile is over NOISE_RATIO times its 20 % quantile (and
# more than NOISE_ABS_MS apart): quiet rows sit near 1.05, disturbed ones at 1.5-15.
NOISE_RATIO = 1.3
NOISE_ABS_MS = 0.002


def group_key(row: dict) -> tuple:
    """Rows that differ only in L form one sweep."""
    return tuple(str(row.get(c, "")) for c in ("mode", "dist", "N", "H", "D", "Dv", "streams", "dtype", "l_sel", "gpu"))


def _f(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def flag_suspects(rows: list[dict]) -> list[dict]:
    """Fill each row's ``suspect`` column (';'-joined flags, '' when clean); returns rows.

    Per row: ``nan`` (a NaN time, MAE or output), ``tri_bw>copy`` / ``ref_bw>copy``
    (effective bandwidth above the measured copy bandwidth: the side cannot have done
    the work), ``tri_noisy`` / ``ref_noisy`` (the side's timings spread too much for its
    median to mean anything: see :func:`noisy_sides`).  Per sweep (same config, growing
    L): ``ref_drop`` (the reference got more than DROP_TOL and DROP_ABS_MS faster than at
    the previous L while running the same kernels), ``ref_flat`` (the reference at the
    largest L is under FLAT_MIN_RATIO times its smallest-L time although the bandwidth
    floor at the largest L is at least FLAT_FLOOR_FACTOR times that time).

    Why ``ref_drop`` needs the same kernels: SDPA picks its backend per shape (on the H100,
    cuDNN does not take a key length of 1, so L = 1 runs the flash or memory-efficient
    kernel and L >= 2 cuDNN).  A drop across such a switch shows that SDPA's kernels
    differ in fixed cost, not that the reference skipped work; :func:`kernel_switches`
    lists those drops for the reports instead.  Rows without ``ref_kernel`` (CPU runs,
    older CSVs) are always compared.
    """
    flags: dict[int, list[str]] = {id(r): [] for r in rows}
    for r in rows:
        f = flags[id(r)]
        if r.get("status", "ok") not in ("ok", ""):
            continue
        if any(math.isnan(_f(r.get(c))) for c in ("tri_ms", "ref_ms", "mae")):
            f.append("nan")
        copy = _f(r.get("copy_gbs"))
        for side in ("tri", "ref"):
            if _f(r.get(f"{side}_gbs")) > copy:
                f.append(f"{side}_bw>copy")
        f.extend(f"{side}_noisy" for side in noisy_sides(r))
    for sweep in _sweeps(r for r in rows if not math.isnan(_f(r.get("ref_ms")))):
        for prev, cur in zip(sweep, sweep[1:]):
            if _dropped(prev, cur) and not _switched(prev, cur):
                flags[id(cur)].append("ref_drop")
        _flat_check(sweep, flags)
    for r in rows:
        r["suspect"] = ";".join(flags[id(r)])
    return rows


def noisy_sides(r: dict) -> list[str]:
    """The sides (``tri``, ``ref``) whose 80 % quantile is over NOISE_RATIO times their 20 %
    quantile and more than NOISE_ABS_MS above it: a disturbance (host stall, clock change)
    hit a good share of the runs, and the median may be one of them."""
    out = []
    for side in ("tri", "ref"):
        p20, p80 = _f(r.get(f"{side}_p20_ms")), _f(r.get(f"{side}_p80_ms"))
        if p80 > NOISE_RATIO * p20 and p80 - p20 > NOISE_ABS_MS:
            out.append(side)
    return out


def _dropped(prev: dict, cur: dict) -> bool:
    t_prev, t_cur = _f(prev["ref_ms"]), _f(cur["ref_ms"])
    return t_cur < t_prev * (1 - DROP_TOL) and t_prev - t_cur > DROP_ABS_MS


def _switched(prev: dict, cur: dict) -> bool:
    a, b = prev.get("ref_kernel") or "", cur.get("ref_kernel") or ""
    return bool(a and b and a != b)


def kernel_switches(rows: list[dict]) -> list[tuple[dict, dict, bool]]:
    """Per sweep, each step to the next L where the reference's kernels changed:
    ``(previous row, row, the time dropped more than the ref_drop tolerance)``."""
    out = []
    for sweep in _sweeps(r for r in rows if r.get("ref_kernel")):
        out += [(p, c, _dropped(p, c)) for p, c in zip(sweep, sweep[1:]) if _switched(p, c)]
    return out


def _sweeps(rows: Iterable[dict]) -> list[list[dict]]:
    """The ok rows grouped into sweeps (:func:`group_key`), each sorted by L."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("status", "ok") in ("ok", ""):
            groups.setdefault(group_key(r), []).append(r)
    return [sorted(g, key=lambda r: int(r["L"])) for g in groups.values()]


def _flat_check(sweep: list[dict], flags: dict) -> None:
    if len(sweep) < 3:
        return
    lo, hi = sweep[0], sweep[-1]
    if int(hi["L"]) < 8 * int(lo["L"]):
        return
    elem = 2
    nbytes = sel_bytes(int(hi["N"]), int(hi["H"]), int(hi["D"]), int(hi["Dv"]), int(hi["L"]), elem)
    floor_ms = nbytes / (_f(hi["copy_gbs"]) * 1e6)
    t_lo, t_hi = _f(lo["ref_ms"]), _f(hi["ref_ms"])
    if floor_ms >= FLAT_FLOOR_FACTOR * t_lo and t_hi < FLAT_MIN_RATIO * t_lo:
        for r in sweep:
            flags[id(r)].append("ref_flat")
