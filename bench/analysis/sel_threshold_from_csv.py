#!/usr/bin/env python
"""Pick ``sel_triton_min_L`` per GPU from the benchmark CSVs, write a report, update the
thresholds file the dispatcher reads.

    python -m bench.analysis.sel_threshold_from_csv --dense bench/results/X/sel_dense.csv \
        --varlen bench/results/X/sel_varlen.csv --decode bench/results/X/sel_decode.csv \
        --max-mae 1e-3 --out bench/results/X/report.md --write-config

Rule, per (GPU, Triton release): the threshold is the smallest tested L such that
*every* gating row with L' >= L (every N, H, D, Dv and distribution, streams = 1) has
Triton at least ``margin`` times as fast as SDPA (``speedup`` column; default 1.0: a row
goes to SDPA only where SDPA was measured faster), MAE against the
float64 oracle at most ``max_mae``, status ok and no suspect flag.  "From which" is
meant literally: a configuration that loses at a larger L vetoes every smaller
threshold.  If even the largest L fails, the answer is "keep Triton off" (``null`` in the
thresholds file).  Dense (few) and varlen (many/mixed) rows gate; decode rows are
reported, and gate too with ``--gate-decode``.

Baselines (``--baseline``): ``fallback`` (default) compares against what the dispatcher
actually runs on a call below the threshold, ``packed_sdpa`` = gather + masked SDPA (the
``ref_gather_ms`` column; rows without it use ``ref_ms``); ``sdpa`` compares against SDPA on
the pre-gathered packed keys, gather not charged: the ``speedup`` column.  The report always shows both verdicts; the chosen one is written.

The report (Markdown) has the verdict and why, a per-L gate table, the suspect rows and
the full tables; the plot (PNG, needs matplotlib) shows speedup vs L per distribution
(rows) and head dims (columns), one line per (N, H).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path

from bench.analysis.threshold_rule import BASELINES, Verdict, as_float, config_name, gpu_key, load, row_speedup, verdicts
from bench.common import csvio, guards

REPO = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = REPO / "src" / "nsa_triton_sel" / "data" / "thresholds.json"
FAKE_TIMERS = ("model", "wall")  # dry runs and CPU runs: never evidence for the dispatcher


# ----------------------------------------------------------------------------- thresholds file
def update_thresholds(path: Path, entries: list[dict]) -> dict:
    """Insert or replace entries keyed by (gpu, triton) in the thresholds file, atomically.

    Creates the file (schema 2) if it does not exist; keeps every other entry and key as they
    are.  Every entry is checked as the dispatcher checks it (``config.entry_problem``): one that
    could move rows to SDPA without SDPA measured faster is refused.
    """
    from nsa_triton_sel import config

    path = Path(path)
    if path.exists():
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or data.get("schema") != config.THRESHOLDS_SCHEMA \
                or not isinstance(data.get("entries"), list):
            raise ValueError(f"{path}: not a thresholds file (expected schema {config.THRESHOLDS_SCHEMA} with an "
                             f"'entries' list)")
    else:
        data = {"schema": config.THRESHOLDS_SCHEMA, "entries": []}
    for e in entries:
        problem = config.entry_problem(e)
        if problem:
            raise ValueError(f"refusing the thresholds entry {e.get('gpu')}/{e.get('triton')}: {problem}")
    for e in entries:
        data["entries"] = [x for x in data["entries"] if (x.get("gpu"), x.get("triton")) != (e["gpu"], e["triton"])]
        data["entries"].append(e)
    data["entries"].sort(key=lambda x: (str(x.get("gpu")), str(x.get("triton"))))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=2)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return data


def config_entry(v: Verdict, margin: float, max_mae: float, source: str) -> dict:
    r = v.rows[0]
    return {"gpu": v.gpu, "cc": r.get("cc") or "", "triton": v.triton, "sel_triton_min_L": v.min_L,
            "source": source, "date": (r.get("date") or "")[:10], "margin": margin, "max_mae": max_mae,
            "baseline": v.baseline}


# ----------------------------------------------------------------------------- report
def _table(rows: list[dict], cols: list[str]) -> list[str]:
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(csvio.fmt(_num(r.get(c))) for c in cols) + " |")
    return out


def _num(x):
    try:
        v = float(x)
    except (TypeError, ValueError):
        return x
    if v.is_integer() and abs(v) < 1e9 and "." not in str(x):
        return int(v)
    return float(f"{v:.4g}")


def _sorted(rows):
    return sorted(rows, key=lambda r: (r.get("dist", ""), int(r["N"]), int(r["H"]), int(r["D"]), int(r["Dv"]),
                                       int(as_float(r.get("streams") or 1)), int(r["L"])))


def _gate_table(v: Verdict) -> list[str]:
    out = ["| L | configs | min speedup | slowest config | max MAE | failing |", "|---|---|---|---|---|---|"]
    for g in v.gates:
        fails = "; ".join(f"{c}: {w}" for c, w in g.failures[:3]) + (" …" if len(g.failures) > 3 else "")
        out.append(f"| {g.L} | {g.configs} | {csvio.fmt(g.min_speedup)} | {g.worst} | {csvio.fmt(g.max_mae)} | "
                   f"{len(g.failures)}{': ' + fails if fails else ''} |")
    return out


def speedup_ranges(rows: list[dict]) -> list[str]:
    """Per distribution: speedup range against both baselines, over ok rows with streams = 1."""
    out = ["| dist | rows | vs SDPA (packed) min–median–max | vs fallback (gather + SDPA) min–median–max |",
           "|---|---|---|---|"]
    for d in ("few", "many", "mixed", "decode"):
        rs = [r for r in rows if r.get("dist") == d and (r.get("status") or "ok") == "ok"
              and int(as_float(r.get("streams") or 1)) == 1]
        if not rs:
            continue
        cells = []
        for b in ("sdpa", "fallback"):
            sp = sorted(x for r in rs if not math.isnan(x := row_speedup(r, b)))
            cells.append(f"{sp[0]:.2f}x – {sp[len(sp) // 2]:.2f}x – {sp[-1]:.2f}x" if sp else "-")
        out.append(f"| {d} | {len(rs)} | {cells[0]} | {cells[1]} |")
    return out


def host_costs(rows: list[dict]) -> list[str]:
    """A line on the host launch cost per eager call (graph-timed rows exclude it)."""
    out = []
    for side, name in (("tri", "Triton"), ("ref", "SDPA")):
        xs = sorted(x for r in rows if not math.isnan(x := as_float(r.get(f"{side}_host_us"))))
        if xs:
            out.append(f"{name} {xs[len(xs) // 2]:.0f} us (range {xs[0]:.0f}–{xs[-1]:.0f})")
    if not out:
        return []
    return [f"Host cost of one eager call (GPU idle before it; not in the GPU times above, which are "
            f"CUDA-graph replays): median {', '.join(out)}. An eager caller pays it per call; under CUDA "
            f"graphs or when the GPU is busy with earlier work it is hidden.", ""]


def kernel_switch_section(rows: list[dict]) -> list[str]:
    """Where SDPA changed kernels between two L of a sweep (the ``ref_drop`` guard does not
    compare across such a switch; this table shows every one, faster or not)."""
    sw = guards.kernel_switches(rows)
    if not sw:
        return []
    L = ["", "## Reference kernel switches", "",
         "SDPA chooses its backend per shape. Across a switch the reference's time may drop although L grew; "
         "the ref_drop guard compares only L steps that ran the same kernels.", "",
         "| sweep | L | kernels | ref_ms | faster at larger L |", "|---|---|---|---|---|"]
    for prev, cur, dropped in sw:
        L.append(f"| {config_name(cur)} | {prev['L']} -> {cur['L']} | {prev['ref_kernel']} -> {cur['ref_kernel']} | "
                 f"{csvio.fmt(as_float(prev['ref_ms']))} -> {csvio.fmt(as_float(cur['ref_ms']))} | {'yes' if dropped else 'no'} |")
    return L


def render_report(vs: list[Verdict], rows: list[dict], args, plots: dict, others: list[Verdict] = ()) -> str:
    """The Markdown report: verdicts (chosen baseline, then the other), gates, speedup ranges,
    suspect rows, full tables, plots."""
    L = ["# Selection Triton threshold report", ""]
    files = sorted({r["file"] for r in rows})
    L += [f"Inputs: {', '.join(f'`{f}`' for f in files)}.",
          f"Rule: smallest L from which every configuration (streams={args.streams}"
          f"{', decode included' if args.gate_decode else ', dense + varlen'}) has speedup >= {args.margin:.2f}x "
          f"and MAE <= {args.max_mae:g}, status ok and no suspect flag"
          f"{' (suspect rows allowed)' if args.allow_suspect else ''}; otherwise keep Triton off.",
          f"Baseline: {getattr(args, 'baseline', 'sdpa')} = {BASELINES[getattr(args, 'baseline', 'sdpa')]}.", ""]
    for v in vs:
        r0 = v.rows[0]
        L += [f"## {v.gpu} (cc {r0.get('cc') or '?'}), Triton {r0.get('triton')}, torch {r0.get('torch')}, "
              f"CUDA {r0.get('cuda')}, driver {r0.get('driver') or '?'}", "",
              f"Measured ceilings: copy {csvio.fmt(as_float(r0.get('copy_gbs')))} GB/s, bf16 matmul "
              f"{csvio.fmt(as_float(r0.get('mm_tflops')))} TFLOP/s; timer {r0.get('timer')}, {r0.get('iters')} runs; "
              f"commit {r0.get('git_commit') or '?'}, {r0.get('date')}.", "",
              f"**Recommended sel_triton_min_L: {v.min_L if v.min_L is not None else 'null (keep Triton off)'}** "
              f"against {BASELINES[v.baseline]} ({v.reason}).", ""]
        L += _gate_table(v) + [""]
        for o in others:
            if (o.gpu, o.triton) == (v.gpu, v.triton):
                L += [f"For comparison, against {BASELINES[o.baseline]}: sel_triton_min_L would be "
                      f"**{o.min_L if o.min_L is not None else 'null (keep Triton off)'}** ({o.reason}).", ""]
                L += _gate_table(o) + [""]
        L += ["Speedup per distribution (Triton faster when > 1):", ""]
        L += speedup_ranges([r for r in rows if gpu_key(r) == (v.gpu, v.triton)]) + [""]
        L += host_costs([r for r in rows if gpu_key(r) == (v.gpu, v.triton)])
        if v.gpu in plots:
            L += [f"![speedup vs L]({plots[v.gpu]})", ""]
    sus = [r for r in rows if r.get("suspect") or (r.get("status") or "ok") != "ok"]
    L += ["## Suspect or failed rows", ""]
    L += (_table(_sorted(sus), ["kind", "dist", "N", "H", "D", "Dv", "L", "tri_ms", "ref_ms", "ref_gbs",
                                "copy_gbs", "mae", "status", "suspect"]) if sus else ["None: no guard fired."])
    L += kernel_switch_section(rows)
    cols = {"dense": ["N", "H", "D", "Dv", "L", "streams", "tri_ms", "ref_ms", "speedup", "mae", "ref_mae",
                      "tri_gbs", "ref_gbs", "tri_pct_bw", "ref_pct_bw", "tri_tflops", "suspect"],
            "varlen": ["dist", "N", "H", "D", "Dv", "L", "nspans", "streams", "tri_ms", "ref_ms", "speedup", "mae",
                       "tri_packed_ms", "ref_gather_ms", "tri_gbs", "ref_gbs", "tri_pct_bw", "suspect"],
            "decode": ["N", "H", "D", "Dv", "L", "nspans", "T", "tri_ms", "ref_ms", "speedup", "mae",
                       "ref_gather_ms", "tri_gbs", "ref_gbs", "tri_pct_bw", "suspect"]}
    for kind, title in (("dense", "Dense (few: one span)"), ("varlen", "Varlen (many / mixed spans)"),
                        ("decode", "Decode (one query, l_sel blocks)")):
        rs = [r for r in rows if r["kind"] == kind]
        if rs:
            L += ["", f"## {title}", ""] + _table(_sorted(rs), cols[kind])
    return "\n".join(L) + "\n"


def make_plot(rows: list[dict], v: Verdict, margin: float, path: Path) -> bool:
    """Speedup vs L: one panel per (distribution, Dk:Dv), one line per (N, H). False if no matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        csvio.progress("warning: matplotlib is not installed; no plot (pip install matplotlib)")
        return False
    rs = [r for r in rows if gpu_key(r) == (v.gpu, v.triton) and (r.get("status") or "ok") == "ok"
          and int(as_float(r.get("streams") or 1)) == 1]
    dists = [d for d in ("few", "many", "mixed", "decode") if any(r.get("dist") == d for r in rs)]
    dims = sorted({(int(r["D"]), int(r["Dv"])) for r in rs})
    if not dists or not dims:
        return False
    fig, axes = plt.subplots(len(dists), len(dims), figsize=(4.2 * len(dims), 3.2 * len(dists)),
                             squeeze=False, sharex=True, sharey=True)
    for i, d in enumerate(dists):
        for j, (dk, dv) in enumerate(dims):
            ax = axes[i][j]
            sub = [r for r in rs if r.get("dist") == d and (int(r["D"]), int(r["Dv"])) == (dk, dv)]
            for n, h in sorted({(int(r["N"]), int(r["H"])) for r in sub}):
                pts = sorted((int(r["L"]), row_speedup(r, v.baseline)) for r in sub
                             if (int(r["N"]), int(r["H"])) == (n, h))
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=f"N={n} H={h}")
            ax.axhline(margin, ls="--", c="k", lw=0.8)
            ax.axhline(1.0, ls=":", c="grey", lw=0.8)
            if v.min_L is not None:
                ax.axvline(v.min_L, ls="-.", c="tab:red", lw=0.8)
            ax.set_xscale("log", base=2)
            ax.set_title(f"{d}, Dk={dk} Dv={dv}", fontsize=9)
            if j == 0:
                ax.set_ylabel(f"speedup ({'SDPA' if v.baseline == 'sdpa' else 'gather+SDPA'} / Triton)")
                ax.set_yscale("log", base=2)
            if i == len(dists) - 1:
                ax.set_xlabel("L (selected keys per row)")
            if sub:
                ax.legend(fontsize=6)
    fig.suptitle(f"{v.gpu}, Triton {v.triton}, baseline {v.baseline}: dashed = margin {margin}x, "
                 f"red = min_L {v.min_L}", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# ----------------------------------------------------------------------------- cli
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sel_threshold_from_csv.py",
                                description="Pick sel_triton_min_L per GPU from bench_sel_triton.py CSVs.")
    p.add_argument("--dense", nargs="+", default=[], help="CSV(s) of dist few (mode dense)")
    p.add_argument("--varlen", nargs="+", default=[], help="CSV(s) of dist many/mixed (mode varlen)")
    p.add_argument("--decode", nargs="+", default=[], help="CSV(s) of --decode runs (reported; gate with --gate-decode)")
    p.add_argument("--margin", type=float, default=1.0,
                   help="required speedup (SDPA time / Triton time), default 1.0; --write-config refuses a "
                        "margin above 1.0 that moves rows to SDPA (SDPA must have been measured faster)")
    p.add_argument("--max-mae", type=float, default=1e-3, help="MAE bound against the float64 oracle, default 1e-3")
    p.add_argument("--streams", type=int, default=1, help="judge rows with this --streams value, default 1")
    p.add_argument("--baseline", default="fallback", choices=sorted(BASELINES),
                   help="what Triton must beat by --margin: fallback = the dispatcher's gather + SDPA path, "
                        "what a call below the threshold runs (default); sdpa = SDPA on pre-gathered keys")
    p.add_argument("--gate-decode", action="store_true", help="decode rows gate the threshold too")
    p.add_argument("--allow-suspect", action="store_true", help="do not let suspect rows veto (not recommended)")
    p.add_argument("--allow-missing", action="store_true", help="skip CSV paths that do not exist")
    p.add_argument("--out", default="report.md", help="Markdown report path, default report.md")
    p.add_argument("--plot", default=None, help="PNG path (default: next to --out, one per GPU)")
    p.add_argument("--no-plot", action="store_true", help="no PNG (e.g. where matplotlib is missing)")
    p.add_argument("--write-config", nargs="?", const=str(DEFAULT_CONFIG), default=None, metavar="PATH",
                   help=f"update the thresholds file (default {DEFAULT_CONFIG.relative_to(REPO)})")
    p.add_argument("--source", default=None, help="'source' recorded in the config entry (default: first CSV)")
    p.add_argument("--allow-fake", action="store_true",
                   help="let --write-config use rows timed by the dry-run model or the host clock (tests only)")
    return p


def main(argv=None) -> int:
    p = build_parser()
    a = p.parse_args(argv)
    if not (a.dense or a.varlen or a.decode):
        p.error("give at least one of --dense, --varlen, --decode")
    if a.margin <= 0 or a.max_mae <= 0:
        p.error(f"--margin and --max-mae must be positive, got {a.margin} and {a.max_mae}")
    try:
        rows = (load(a.dense, "dense", a.allow_missing) + load(a.varlen, "varlen", a.allow_missing)
                + load(a.decode, "decode", a.allow_missing))
    except FileNotFoundError as exc:
        p.error(str(exc))
    missing = [c for c in ("L", "N", "H", "D", "Dv", "speedup", "mae", "gpu", "triton") if rows and c not in rows[0]]
    if missing:
        p.error(f"the CSVs lack columns {missing}; they must come from python -m bench.perf.bench_sel_triton")
    kw = dict(streams=a.streams, gate_decode=a.gate_decode, allow_suspect=a.allow_suspect)
    vs = verdicts(rows, a.margin, a.max_mae, baseline=a.baseline, **kw)
    others = [o for b in sorted(BASELINES) if b != a.baseline for o in verdicts(rows, a.margin, a.max_mae, baseline=b, **kw)]
    out = Path(a.out)
    plots = {}
    if not a.no_plot:
        for i, v in enumerate(vs):
            png = Path(a.plot) if a.plot else out.with_suffix(".png")
            if len(vs) > 1:
                png = png.with_name(f"{png.stem}-{i}{png.suffix}")
            if make_plot(rows, v, a.margin, png):
                plots[v.gpu] = os.path.relpath(png, out.parent)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_report(vs, rows, a, plots, others))
    for v in vs + others:
        print(f"{v.gpu} / Triton {v.triton}, baseline {v.baseline}: sel_triton_min_L = "
              f"{v.min_L if v.min_L is not None else 'null'} ({v.reason})")
    print(f"report: {out}" + (f"; plots: {', '.join(plots.values())}" if plots else ""))
    if a.write_config:
        fake = sorted({r.get("timer") for v in vs for r in v.rows if r.get("timer") in FAKE_TIMERS})
        if fake and not a.allow_fake:
            print(f"error: refusing --write-config: rows were timed by {fake} (dry run / CPU), not the GPU clock",
                  file=sys.stderr)
            return 2
        source = a.source or (a.dense + a.varlen + a.decode)[0]
        entries = [config_entry(v, a.margin, a.max_mae, source) for v in vs]
        update_thresholds(Path(a.write_config), entries)
        print(f"updated {a.write_config}: " + ", ".join(f"{e['gpu']}/{e['triton']} -> {e['sel_triton_min_L']}"
                                                          for e in entries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
