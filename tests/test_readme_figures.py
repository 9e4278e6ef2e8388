"""The README's headline figures and docs/benchmarks.md's tables are the committed results', so they cannot drift.

Each figure is recomputed from the file the text names (the CSV and JSON under ``bench/results/``,
``constraints/MATRIX.md``) and compared with the text, rounded as the text rounds it.  A new measurement changes
the figures only when the text is updated with it: ``python tests/test_readme_figures.py`` prints the tables of
docs/benchmarks.md as they should read.  The main job's counts and minutes are held by
``tests/compat/test_readme_numbers.py``; the README's pictures are drawn by ``python -m bench.analysis.plots``.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
README = " ".join((ROOT / "README.md").read_text().split())  # whitespace-normalised: sentences wrap anywhere
BENCH_DOC = ROOT / "docs" / "benchmarks.md"
MATRIX = ROOT / "constraints" / "MATRIX.md"

CONTENDERS = "2026-11-23-h100-triton3.6-contenders-cudnn-kernels-defa1427"
FORWARD = f"{CONTENDERS}/perf_nsa.json"  # forward: ours against fla-core, XunhaoLai and cuDNN, same inputs
PEERS_TRAIN = f"{CONTENDERS}/train_nsa.csv"  # forward + backward against fla-core and packed SDPA too
TRAIN = "2026-11-28-h100-triton3.6-decode-pointers/train.csv"  # forward + backward against XunhaoLai, kernels of 11-28
TRAIN_H200 = "2026-11-29-h200-triton3.6-train-xunhaolai-e41314fa/train.csv"  # the same on an H200, current kernels
SMALL_GROUPS = "2026-11-30-h200-triton3.6-keymajor-bwd-gluon/call-6/small-groups.csv"  # h = 1-8, against FSA too
TS = (8192, 32768, 65536)
SELS = ("random", "local")


def _k(t: int) -> str:
    return f"{t // 1024}K"


def span(values, digits: int) -> str:
    """How the text writes a range of speed-ups: ``1.30-1.62x``."""
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}x"


def train_rows(name: str) -> dict:
    """``{(T, sel, contender): row}`` of a forward + backward CSV, the rows that ran."""
    with open(RESULTS / name, newline="") as f:
        return {(int(r["T"]), r["sel"], r["contender"]): r for r in csv.DictReader(f) if r["status"] == "ok"}


def forward_rows() -> list[dict]:
    return [r for r in json.loads((RESULTS / FORWARD).read_text())["rows"] if "ours-api_ms" in r]


def speedups(rows: dict, peer: str, key: str, sel: str | None = None) -> list[float]:
    return [float(rows[(t, s, peer)][key]) / float(rows[(t, s, "ours-api")][key])
            for t in TS for s in SELS if (sel in (None, s)) and (t, s, peer) in rows]


# --- the README's headline figures ------------------------------------------------------------------------


@pytest.mark.parametrize("source", [FORWARD, PEERS_TRAIN, TRAIN])
def test_the_readme_names_the_results_its_figures_come_from(source):
    assert f"bench/results/{source}" in README, source


def test_the_training_figures_are_the_newest_h100_run_against_xunhaolai():
    """A newer committed run of the same table (both contenders at every T and selection; a re-run of one cell
    is not the table) replaces the README's training figures."""
    runs = {}
    for path in RESULTS.rglob("*.csv"):
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        if rows and {"contender", "gpu", "date", "T", "sel"} <= set(rows[0]) and "H100" in rows[0]["gpu"] \
                and {(int(r["T"]), r["sel"], r["contender"]) for r in rows} >= \
                {(t, s, c) for t in TS for s in SELS for c in ("ours-api", "xunhaolai")}:
            runs[path.relative_to(RESULTS).as_posix()] = rows[0]["date"]
    assert max(runs, key=runs.get) == TRAIN, sorted(runs.items(), key=lambda kv: kv[1])[-3:]


def test_forward_against_fla_xunhaolai_and_cudnn():
    rows = [r for r in forward_rows() if r["case"].startswith("canonical")]
    assert {(r["T"], r["sel"]) for r in rows} == {(t, s) for t in TS for s in SELS}
    fla, xun = span([r["api_vs_fla"] for r in rows], 1), span([r["api_vs_xunhaolai"] for r in rows], 1)
    assert f"{fla} faster than fla-core 0.6.0 and {xun} faster than XunhaoLai's kernels" in README
    cudnn = {s: span([r["api_vs_cudnn"] for r in rows if r["sel"] == s], 2) for s in SELS}
    assert (f"cuDNN frontend 1.32 selection forward: {cudnn['random']} on random selections, "
            f"{cudnn['local']} on local ones") in README


def test_training_against_xunhaolai_and_its_memory():
    rows = train_rows(TRAIN)
    r, loc = span(speedups(rows, "xunhaolai", "fwdbwd_ms", "random"), 2), span(speedups(rows, "xunhaolai", "fwdbwd_ms", "local"), 2)
    assert f"{r} faster than XunhaoLai on random selections and {loc} on local ones" in README
    mem = {c: [float(rows[(t, "random", c)]["extra_peak_gib"]) for t in TS] for c in ("ours-api", "xunhaolai")}
    assert all(float(rows[(t, s, "ours-api")]["extra_peak_gib"]) < float(rows[(t, s, "xunhaolai")]["extra_peak_gib"])
               for t in TS for s in SELS), "the README says ours takes less extra memory than XunhaoLai at every T"
    ours, theirs = (" / ".join(f"{g:.2f}" for g in mem[c]) for c in ("ours-api", "xunhaolai"))
    assert f"less extra memory at every T ({ours} against {theirs} GiB at 8K / 32K / 64K)" in README
    h200 = train_rows(TRAIN_H200)
    r, loc = (span(speedups(h200, "xunhaolai", "fwdbwd_ms", sel), 2) for sel in SELS)
    assert f"on an H200 with the current ones {r} and {loc}" in README


def test_training_against_fla_and_packed_sdpa():
    rows = train_rows(PEERS_TRAIN)
    assert f"{span(speedups(rows, 'fla', 'fwdbwd_ms'), 1)} faster than fla-core 0.6.0 (forward + backward" in README
    sdpa = speedups(rows, "sdpa", "fwd_ms") + speedups(rows, "sdpa", "fwdbwd_ms")
    assert {t for (t, _, c) in rows if c == "sdpa"} == {8192}, "packed SDPA ran beyond T = 8K: update the README"
    with open(RESULTS / PEERS_TRAIN, newline="") as f:
        assert all("does not fit" in r["status"] for r in csv.DictReader(f) if r["contender"] == "sdpa" and int(r["T"]) > 8192)
    lo, hi = (round(x, -1) for x in (min(sdpa), max(sdpa)))
    assert f"{lo:.0f}-{hi:.0f}x slower than ours at T = 8K (forward and forward + backward) and does not fit beyond" in README


def matrix_tables() -> tuple[list[list[str]], list[list[str]]]:
    """constraints/MATRIX.md's main table and its speed table, as rows of cells."""
    text = MATRIX.read_text()
    main = text.split("| Triton | lane | compile |")[1].split("\n\n")[0]
    speed = text.split("| Triton | GPU | fwd 4K |")[1].split("\n\n")[0]
    cells = [[[c.strip() for c in ln.strip("|").split("|")] for ln in part.splitlines()[2:] if ln.startswith("|")]
             for part in (main, speed)]
    return cells[0], cells[1]


def _version(v: str) -> tuple:
    return tuple(int(x) for x in v.split("."))


def test_small_groups_against_fsa_and_xunhaolai():
    with open(RESULTS / SMALL_GROUPS, newline="") as f:
        rows = {(int(r["T"]), int(r["h"]), r["contender"]): r for r in csv.DictReader(f) if r["status"] == "ok"}

    def ratio(T, h, key, peers):
        return min(float(rows[(T, h, p)][key]) for p in peers) / float(rows[(T, h, "ours-api")][key])

    fwd, train = ([ratio(T, 1, k, ["fsa"]) for T in (32768, 65536)] for k in ("fwd_ms", "fwdbwd_ms"))
    assert f"{span(fwd, 2)} faster than FSA in the forward and {span(train, 2)} in forward + backward" in README
    for h, words in ((4, "with four"), (8, "with eight")):
        f_, t_ = (ratio(32768, h, k, ["fsa", "xunhaolai"]) for k in ("fwd_ms", "fwdbwd_ms"))
        assert f"{words}, {f_:.2f}x / {t_:.2f}x" in README, (h, f_, t_)
    assert f"bench/results/{SMALL_GROUPS}" in README


def test_the_compatibility_summary_is_matrix_mds():
    main, speed = matrix_tables()
    releases = [row[0] for row in main]
    known_good = [row[0] for row in main if row[10] == "**yes**"]
    assert known_good == releases, f"not every release is known-good now ({known_good}): update the README"
    assert f"All {len(releases)} Triton releases of `constraints/lanes.toml`, {releases[0]} to {releases[-1]}, are known-good" in README
    by_gpu: dict[str, list[str]] = {}
    for row in main:
        for gpu in (g.split(" (")[0] for g in row[11].split(", ") if g not in ("stale", "—", "**no**")):
            by_gpu.setdefault(gpu, []).append(row[0])
    text = " ".join(README.split())  # the README's line breaks fall anywhere in a sentence
    # no GPU verdict about today's kernels: the README says so instead of naming releases
    assert bool(by_gpu) != ("no release has GPU evidence about the current kernel sources" in text), by_gpu
    for gpu, admitted in by_gpu.items():
        listed = ", ".join(admitted[:-1]) + " and " + admitted[-1] if len(admitted) > 1 else admitted[0]
        assert f"on an {gpu}, Triton {listed} have passed" in text or f"Triton {listed} on an {gpu}" in text, (gpu, listed)
    stale_contract = any("contract *stale*" in row[11] for row in main)
    assert ("its GPU contract record is stale" in README) == stale_contract

    def ratios(row, columns=range(2, 6)):
        return [float(m) for m in re.findall(r"\(([\d.]+)x\)", " ".join(row[c] for c in columns))]

    def old_new(gpu, columns=range(2, 6)):
        rows = [row for row in speed if row[1] == gpu]
        return (max(x for row in rows if _version(row[0]) < (3, 6) for x in ratios(row)),
                round((max(x for row in rows if _version(row[0]) >= (3, 6) for x in ratios(row, columns)) - 1) * 100))

    old, new = old_new("H200")
    assert (f"On the H200, with the kernels of its last refresh, Triton 3.0-3.5 run the same kernels "
            f"up to {old:.2f}x slower "
            f"than the newest release") in text
    rows_35 = [row for row in speed if row[1] == "H200" and _version(row[0])[:2] == (3, 5)]
    fwd_35 = max(abs(x - 1) for row in rows_35 for x in ratios(row, (2, 3)))
    train_35 = sorted(x for row in rows_35 for x in ratios(row, (4, 5)))
    assert (f"3.5.0 and 3.5.1 are within {round(fwd_35 * 100)} % in the forward and "
            f"{round((train_35[0] - 1) * 100)}-{round((train_35[-1] - 1) * 100)} % behind in forward + backward") in text
    assert f"3.6 and newer are within {new} %" in text
    old, new = old_new("H100")
    assert f"On the H100, with the earlier kernels, up to {old:.2f}x slower and within {new} %" in text


def test_the_refresh_the_readme_names_took_what_it_says():
    """"N releases on G GPUs in M minutes: `bench/results/FOLDER/`": the refresh's own status.json says so."""
    m = re.search(r"(\d+) releases on (\d+) GPUs in (\d+) minutes: `bench/results/([^`/]+)/`", README)
    assert m, "the README names no GPU refresh"
    status = json.loads((RESULTS / m[4] / "status.json").read_text())
    assert status["final"] and len({t["version"] for t in status["tasks"]}) == int(m[1]) == len(status["expected"])
    assert len(status["gpus"]) == int(m[2]) and round(status["elapsed_s"] / 60) == int(m[3]), status["elapsed_s"]


# --- docs/benchmarks.md's tables ------------------------------------------------------------------------------


def forward_table() -> list[str]:
    out = []
    for r in forward_rows():
        case = f"{_k(r['T'])} {r['sel']}" if r["case"].startswith("canonical") else r["case"]
        cudnn = (f"{r['cudnn_ms']:.3f}", f"{r['api_vs_cudnn']:.2f}x") if "cudnn_ms" in r else (
            r["cudnn_status"].split(":")[0].lower(), "-")
        out.append(f"| {case} | {r['ours-api_ms']:.3f} | {r['fla_ms']:.3f} | {r['xunhaolai_ms']:.3f} | {cudnn[0]} | "
                   f"{r['api_vs_fla']:.2f}x | {r['api_vs_xunhaolai']:.2f}x | {cudnn[1]} |")
    return out


def xunhaolai_table(name: str) -> list[str]:
    rows = train_rows(name)
    out = []
    for s in SELS:
        cells = []
        for t in TS:
            ours, theirs = (float(rows[(t, s, c)]["fwdbwd_ms"]) for c in ("ours-api", "xunhaolai"))
            cells.append(f"{ours:.2f} / {theirs:.2f} ({theirs / ours:.2f}x)")
        out.append(f"| {s}: ours / XunhaoLai | " + " | ".join(cells) + " |")
    mem = [f"{float(rows[(t, 'random', 'ours-api')]['extra_peak_gib']):.2f} / "
           f"{float(rows[(t, 'random', 'xunhaolai')]['extra_peak_gib']):.2f}" for t in TS]
    out.append("| extra peak GiB: ours / XunhaoLai | " + " | ".join(mem) + " |")
    return out


def peers_table() -> list[str]:
    rows = train_rows(PEERS_TRAIN)
    out = []
    for s in SELS:
        for t in TS:
            ms = {c: float(rows[(t, s, c)]["fwdbwd_ms"]) if (t, s, c) in rows else None
                  for c in ("ours-api", "xunhaolai", "fla", "sdpa")}
            sdpa = f"{ms['sdpa']:.0f}" if ms["sdpa"] else "does not fit"
            out.append(f"| {_k(t)} {s} | {ms['ours-api']:.2f} | {ms['xunhaolai']:.2f} | {ms['fla']:.2f} | {sdpa} | "
                       f"{ms['fla'] / ms['ours-api']:.2f}x |")
    return out


TABLES = {"forward": forward_table, "h100": lambda: xunhaolai_table(TRAIN),
          "h200": lambda: xunhaolai_table(TRAIN_H200), "peers": peers_table}


@pytest.mark.parametrize("table", TABLES)
def test_the_benchmark_tables_are_the_committed_results(table):
    text = BENCH_DOC.read_text()
    missing = [row for row in TABLES[table]() if row not in text.splitlines()]
    assert not missing, f"docs/benchmarks.md's {table} table differs from its source; it should read:\n" + "\n".join(missing)


@pytest.mark.parametrize("source", [FORWARD, PEERS_TRAIN, TRAIN, TRAIN_H200])
def test_the_benchmark_tables_name_their_sources(source):
    assert f"bench/results/{source}" in " ".join(BENCH_DOC.read_text().split())


if __name__ == "__main__":
    for name, render in TABLES.items():
        print(f"{name}:", *render(), sep="\n")
