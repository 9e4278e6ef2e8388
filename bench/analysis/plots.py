"""The README's two pictures, from committed results only: ``python -m bench.analysis.plots``.

- ``contenders.png``: forward and forward + backward time of the public API against fla-core 0.6.0,
  XunhaoLai's kernels and the packed-SDPA path (torch's SDPA; on the H100 sweep its calls ran cuDNN's
  kernels), by sequence length T, random and local selections (:data:`TRAIN_CSV`);
- ``releases.png``: per Triton release, the verdict of each correctness check in
  ``constraints/ledger.jsonl`` (compile, backward, parity on the interpreter and on a GPU), and the
  speed of our kernel in each pytest-benchmark group relative to the newest release that has a GPU
  bench run (the ``*.benchmark.json`` of :data:`LANE_BENCH`, from the GPU refresh's bench stage).

Needs matplotlib (the ``bench`` extra).  ``--out DIR`` writes elsewhere (default ``bench/results/plots``).
"""

from __future__ import annotations

import argparse
import csv
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
TRAIN_CSV = RESULTS / "2026-11-23-h100-triton3.6-contenders-cudnn-kernels-defa1427" / "train_nsa.csv"
# The bench runs of all 13 releases on one machine of two H200s, each benchmark alone on its GPU, every eager round
# held while the host enqueues it (kernels b93c8ecb; timings from several machines would not compare)
LANE_BENCH = RESULTS / "2026-11-30-h200-triton3.0-3.9-bench-refresh-held-rounds" / "benchmarks"
LEDGER = ROOT / "constraints" / "ledger.jsonl"
LANES = ROOT / "constraints" / "lanes.toml"

CONTENDERS = {  # csv name -> (label, colour)
    "ours-api": ("ours (selection_attention)", "#1f77b4"),
    "fla": ("fla-core 0.6.0", "#d62728"),
    "xunhaolai": ("XunhaoLai", "#ff7f0e"),
    "sdpa": ("packed SDPA (cuDNN)", "#7f7f7f"),
}
CHECKS = [("compile", "aot", "compile\n(AOT)"), ("backward", None, "backward\n(compile+grad)"),
          ("parity", "interp", "parity\n(interpreter)"), ("parity", "gpu", "parity\n(GPU)")]
VERDICT_COLOUR = {"pass": "#2ca02c", "xfail": "#bcbd22", "skip": "#c7c7c7", "not run": "#f0f0f0"}
BAD_COLOUR = "#d62728"


def load_train(path: Path = TRAIN_CSV) -> list[dict]:
    """Rows of the forward + backward table that ran (status ok), times as floats."""
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r["status"] == "ok" and r["contender"] in CONTENDERS:
                rows.append({**r, "T": int(r["T"]), "fwd_ms": float(r["fwd_ms"]), "fwdbwd_ms": float(r["fwdbwd_ms"])})
    return rows


def gpu_of(rows: list[dict]) -> str:
    r = rows[0]
    return f"{r['gpu']}, Triton {r['triton']}, torch {r['torch']}"


def plot_contenders(rows: list[dict], out: Path) -> Path:
    """Grouped bars per (T, selection): each contender's time relative to ours (ours = 1), log scale."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 - only this command needs it

    cases = sorted({(r["T"], r["sel"]) for r in rows}, key=lambda c: (c[0], c[1] != "random"))
    peers = [n for n in CONTENDERS if n != "ours-api"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    width = 0.8 / len(peers)
    for ax, key, title in ((axes[0], "fwd_ms", "forward"), (axes[1], "fwdbwd_ms", "forward + backward")):
        ours = {(r["T"], r["sel"]): r[key] for r in rows if r["contender"] == "ours-api"}
        for k, name in enumerate(peers):
            label, colour = CONTENDERS[name]
            for i, case in enumerate(cases):
                x = i + (k - (len(peers) - 1) / 2) * width
                theirs = next((r[key] for r in rows if r["contender"] == name and (r["T"], r["sel"]) == case), None)
                if theirs is None or case not in ours:
                    ax.text(x, 1.05, "n/a", ha="center", va="bottom", fontsize=6, rotation=90, color=colour)
                    continue
                ratio = theirs / ours[case]
                ax.bar(x, ratio, width, color=colour, label=label if i == 0 else None)
                ax.text(x, ratio * 1.04, f"{ratio:.1f}x" if ratio < 10 else f"{ratio:.0f}x", ha="center",
                        va="bottom", fontsize=6)
        ax.axhline(1.0, color=CONTENDERS["ours-api"][1], lw=1.5, label="ours (selection_attention) = 1")
        ax.set_yscale("log")
        ax.set_ylim(0.5, 500)
        ax.set_xticks(range(len(cases)))
        ax.set_xticklabels([f"T={t // 1024}K\n{sel}" for t, sel in cases], fontsize=8)
        ax.set_ylabel("time relative to ours (higher: ours is faster)")
        ax.set_title(f"{title}: ours takes " + ", ".join(f"{ours[c]:.1f}" for c in cases) + " ms", fontsize=9)
        ax.grid(True, axis="y", which="both", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(f"NSA selection attention, bf16, G=4 h=16 D=128, 16 blocks of 64 per token: {gpu_of(rows)}\n"
                 "n/a: packed SDPA does not fit in memory beyond T=8K", fontsize=9)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    path = out / "contenders.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def release_cells(records: list[dict], releases: list[str]) -> list[list[tuple[str, str]]]:
    """``[release][check]`` -> (verdict, count text) over the ledger's records."""
    from nsa_triton_sel.compat.ledger import cell  # noqa: PLC0415

    out = []
    for rel in releases:
        row = []
        for check, mode, _ in CHECKS:
            recs = [r for r in records if r["triton"] == rel and r["check"] == check
                    and (mode is None or r.get("mode") == mode)]
            verdict, _ = cell(recs)
            counts: dict[str, int] = {}
            for r in recs:
                counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
            text = "\n".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda kv: kv[0] != "pass"))
            row.append((verdict, text or "not run"))
        out.append(row)
    return out


def bench_medians(folder: Path = LANE_BENCH) -> dict[str, dict[str, float]]:
    """``{triton: {group: median seconds of our kernel}}`` from the GPU lanes' pytest-benchmark JSON."""
    out = {}
    for path in sorted(folder.glob("*.benchmark.json")):
        doc = json.loads(path.read_text())
        triton = (doc.get("machine_info", {}).get("nsa_env") or {}).get("triton") or _triton_of(doc, path)
        ours = {b["group"]: b["stats"]["median"] for b in doc["benchmarks"]
                if re.search(r"-triton\]$", b["name"]) and b.get("group")}
        out[triton] = ours
    return out


def _bench_envs(folder: Path) -> list[dict]:
    """The environment each bench run recorded (``machine_info.nsa_env``)."""
    return [json.loads(p.read_text()).get("machine_info", {}).get("nsa_env") or {} for p in folder.glob("*.benchmark.json")]


def bench_commits(folder: Path = LANE_BENCH) -> list[str]:
    return sorted({(env.get("git_commit") or "?")[:7] for env in _bench_envs(folder)})


def bench_gpus(folder: Path = LANE_BENCH) -> list[str]:
    """The GPUs the bench runs ran on (short names: "H200")."""
    return sorted({(env.get("gpu_name") or "?").removeprefix("NVIDIA ").split(" ")[0] for env in _bench_envs(folder)})


def _triton_of(doc: dict, path: Path) -> str:
    """The Triton of a bench run: its extra_info, else the lane label of the file name."""
    for b in doc["benchmarks"]:
        v = (b.get("extra_info") or {}).get("triton")
        if v:
            return v
    return path.name.split("-")[1].removesuffix(".benchmark.json") + ".0"


def plot_releases(releases: list[str], cells, medians: dict, out: Path, commits: tuple = (), gpus: tuple = ()) -> Path:
    import matplotlib.pyplot as plt  # noqa: PLC0415
    from matplotlib.colors import TwoSlopeNorm  # noqa: PLC0415

    groups = sorted({g for m in medians.values() for g in m})
    newest = max(medians, key=_vkey) if medians else None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 0.36 * len(releases) + 2.2),
                                   gridspec_kw={"width_ratios": [len(CHECKS), max(len(groups), 1)]})
    for i, row in enumerate(cells):
        for j, (verdict, text) in enumerate(row):
            colour = VERDICT_COLOUR.get(verdict, BAD_COLOUR)
            ax1.add_patch(plt.Rectangle((j, i), 1, 1, color=colour, ec="white"))
            ax1.text(j + 0.5, i + 0.5, text, ha="center", va="center", fontsize=6.5,
                     color="white" if colour in (BAD_COLOUR, VERDICT_COLOUR["pass"]) else "black")
    _axes(ax1, [c[2] for c in CHECKS], releases, "correctness: ledger records of each check, by verdict")
    ratios = [[(medians.get(rel, {}).get(g) / medians[newest][g]) if rel in medians and newest
               and g in medians[newest] and medians[rel].get(g) else float("nan") for g in groups] for rel in releases]
    im = ax2.imshow(ratios, cmap="RdYlGn_r", norm=TwoSlopeNorm(vmin=0.5, vcenter=1.0, vmax=2.0), aspect="auto",
                    extent=(0, len(groups), len(releases), 0))
    for i, row in enumerate(ratios):
        for j, r in enumerate(row):
            ax2.text(j + 0.5, i + 0.5, f"{r:.2f}x" if r == r else "-", ha="center", va="center", fontsize=7,
                     color="black" if r == r else "#999999")
    _axes(ax2, [_short(g) for g in groups], releases,
          f"our kernel's median time / Triton {newest}'s, {'/'.join(gpus) or 'GPU'} bench lanes"
          f"{' of commit ' + ', '.join(commits) if commits else ''} (-: no GPU bench run)")
    bar = fig.colorbar(im, ax=ax2, fraction=0.03, pad=0.02)
    bar.set_label("time relative to the newest (red: slower)", fontsize=8)
    fig.suptitle("Triton releases: correctness verdicts and speed relative to the newest benchmarked release",
                 fontsize=10)
    fig.tight_layout()
    path = out / "releases.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _short(group: str) -> str:
    """``dense-N1024-H8-D128-L256`` -> ``dense\nL256``; ``nsa-T4096-local`` -> ``nsa T4096\nlocal``."""
    parts = group.split("-")
    if parts[0] == "nsa":
        return f"nsa {parts[1]}\n{parts[-1]}"
    return f"{'-'.join(parts[:2]) if parts[0] == 'varlen' else parts[0]}\n{parts[-1]}"


def _axes(ax, xlabels, ylabels, title):
    ax.set_xlim(0, len(xlabels))
    ax.set_ylim(len(ylabels), 0)
    ax.set_xticks([i + 0.5 for i in range(len(xlabels))])
    ax.set_xticklabels(xlabels, fontsize=7)
    ax.set_yticks([i + 0.5 for i in range(len(ylabels))])
    ax.set_yticklabels(ylabels, fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.tick_params(length=0)


def _vkey(v: str):
    from packaging.version import Version  # noqa: PLC0415

    return Version(v)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.analysis.plots", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=RESULTS / "plots", help="output folder (default bench/results/plots)")
    args = p.parse_args(argv)
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
    except ImportError:
        p.exit(2, "python -m bench.analysis.plots needs matplotlib: pip install -e '.[bench]'\n")
    from nsa_triton_sel.compat.core import lane_table  # noqa: PLC0415
    from nsa_triton_sel.compat import ledger  # noqa: PLC0415

    args.out.mkdir(parents=True, exist_ok=True)
    releases = [r.triton for r in lane_table.load_table(LANES).releases]
    cells = release_cells(ledger.load_ledger(LEDGER), releases)
    written = [plot_contenders(load_train(), args.out),
               plot_releases(releases, cells, bench_medians(), args.out, tuple(bench_commits()),
                             tuple(bench_gpus()))]
    for path in written:
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} ({path.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
