"""MATRIX.md's GPU evidence: one row per release that ran on a GPU, in two tables of ~120 columns.

- *Correctness*: GPU parity (forward) and gradient parity pass counts and their largest errors
  against the float64 oracle, the torch it ran with, the compiler-facing sources it is about (stale
  when they are not the pinned ones), the GPU contract run (its pass count; *stale* when it ran
  another runtime), and which GPU canaries fired (``check: gpu-canary``: a verdict
  ``fail`` means the canary's miscompile showed on that release; our kernels are judged by the
  parity columns, not by the canaries).
- *Speed*: pytest-benchmark medians at the canonical NSA shape (G=4 x h=16, D=128, block 64,
  top-16, random selection) for the forward (``test_nsa``) and forward + backward
  (``test_train``), each with its ratio to the newest release measured on the same GPU with the
  same kernels; the seeds' packed shape (Triton over SDPA); ``auto`` over ``backend="triton"``
  (``test_auto_route``, must be <= 1.05); and the advisory rule: a release that is correct but
  more than 15 % slower than the newest needs an advisory known-bad window (like
  ``triton30-sm90-slow``), named here when one covers it, unless every point that slow is answered
  by a speed note (``speed_notes.toml``: repeated runs show the release is not slower there).
"""

from __future__ import annotations

import statistics

from packaging.version import Version

from ..core.verdicts import BAD, PASS
from ..canaries import notes as canary_notes
from . import speed_notes
from .evidence import COMPILER_FIELD, hashes_text, is_gpu, is_stale, on_gpu_machine, runtime_stale, short_gpu

SLOW = 1.15  # the advisory rule: slower than the newest release by more than 15 %
SPEED_POINTS = (("fwd 4K", "nsa-T4096-random", "triton"), ("fwd 32K", "nsa-T32768-random", "triton"),
                ("fwd+bwd 4K", "train-T4096-random", "ours-api"), ("fwd+bwd 32K", "train-T32768-random", "ours-api"))
SEEDS_PREFIXES = ("dense-", "varlen-", "decode-")  # the seeds' packed groups of bench/suites/test_bench_sel.py


def bench_point(rec: dict) -> tuple[str, str] | None:
    """(group, impl) of a pytest-benchmark record: ``test_packed[dense-...-L256-triton]`` -> group, triton."""
    m = rec.get("metrics") or {}
    kernel = rec.get("kernel") or ""
    if "[" not in kernel or "impl" not in m:
        return None
    param = kernel[kernel.index("[") + 1:].rstrip("]")
    impl = str(m["impl"])
    return (param[: -len(impl) - 1] if param.endswith("-" + impl) else param), impl


def _runs(table, recs: list[dict]) -> list[tuple]:
    """(release, GPU, its GPU records) for every release and GPU with GPU records, in table order."""
    out = []
    for rel in table.releases:
        mine = [r for r in recs if r.get("triton") == rel.triton and is_gpu(r) and on_gpu_machine(r)]
        for gpu in sorted({r.get("machine") for r in mine}):
            out.append((rel, gpu, [r for r in mine if r.get("machine") == gpu]))
    return out


def _count(recs: list[dict], check: str) -> str:
    sel = [r for r in recs if r.get("check") == check and r.get("mode") == "gpu"]
    if not sel:
        return "—"
    bad = sum(r["verdict"] in BAD for r in sel)
    return f"**{bad} bad**/{len(sel)}" if bad else f"{sum(r['verdict'] == PASS for r in sel)}/{len(sel)}"


def _max_metric(recs: list[dict], check: str, key: str) -> str:
    vals = [m[key] for r in recs if r.get("check") == check and r.get("mode") == "gpu"
            for m in [r.get("metrics") or {}] if isinstance(m.get(key), (int, float))]
    return f"{max(vals):.2e}" if vals else "—"


def canaries_fired(recs: list[dict], windows: list = (), notes: list | None = None) -> str:
    """Which GPU canaries fired, each with its answer: the known-bad window that covers our kernels there,
    or the note that says why they are not hit; one with neither is flagged."""
    sel = [r for r in recs if r.get("check") == "gpu-canary"]
    if not sel:
        return "—"
    notes = canary_notes.load() if notes is None else notes
    fired = []
    for r in sel:
        if r["verdict"] not in BAD:
            continue
        name = r["kernel"].rpartition("/")[2]
        said = name + ("" if r["verdict"] == "fail" else f" ({r['verdict']})")
        ans = canary_notes.answer(name, r.get("triton") or "0", _arch([r]), list(windows), notes)
        fired.append(f"{said} ({ans or '**unanswered**'})")  # short: windows and notes are listed below
    return ", ".join(fired) if fired else f"none of {len(sel)}"


def _kernels(recs: list[dict], current: str | None) -> str:
    stale = any(is_stale(r, current) for r in recs)
    return hashes_text(recs, COMPILER_FIELD, 8) + (" **stale**" if stale else "")


def _contract(recs: list[dict], runtime: str | None) -> str:
    """The GPU contract run: ``n/N`` passes (or the bad count), *stale* when it ran another runtime."""
    sel = [r for r in recs if r.get("check") == "contract" and r.get("mode") == "gpu"]
    if not sel:
        return "—"
    return _count(recs, "contract") + (" *stale*" if any(runtime_stale(r, runtime) for r in sel) else "")


def _torch(recs: list[dict]) -> str:
    r = next((x for x in recs if x.get("mode") == "gpu"), recs[0])
    return f"{r.get('torch')}" + ("" if r.get("torch_paired") else " (off-pair)")


def _points(recs: list[dict]) -> dict:
    out = {}
    for r in recs:
        gi = bench_point(r) if r.get("check") == "bench" else None
        if gi and r.get("verdict") == PASS and "median_ms" in (r.get("metrics") or {}):
            out[gi] = r["metrics"]
    return out


def correctness_rows(table, recs: list[dict], current: str | None, windows: list = (),
                     notes: list | None = None, runtime: str | None = None) -> list[list[str]]:
    rows = []
    for rel, gpu, mine in _runs(table, recs):
        rows.append([rel.triton, short_gpu(gpu), _torch(mine), _kernels(mine, current), _count(mine, "parity"),
                     _count(mine, "backward"), _contract(mine, runtime), _max_metric(mine, "parity", "max_abs_err"),
                     _max_metric(mine, "backward", "max_abs_err"), canaries_fired(mine, windows, notes)])
    return rows


def speed_rows(table, recs: list[dict], windows: list, notes: list | None = None) -> list[list[str]]:
    notes = load_speed_notes() if notes is None else notes
    runs = [(rel, gpu, mine, _points(mine)) for rel, gpu, mine in _runs(table, recs)]
    newest: dict[tuple, tuple] = {}  # (GPU, kernel hash) -> (version, points) of the newest release with points
    for rel, gpu, mine, pts in runs:
        key = (gpu, _hash_of(mine))
        if pts and (key not in newest or rel.version > newest[key][0]):
            newest[key] = (rel.version, pts)
    rows = []
    for rel, gpu, mine, pts in runs:
        base = newest.get((gpu, _hash_of(mine)), (None, {}))
        cells, worst, noted = [], 0.0, {}  # noted: the notes answering a slow point -> that point's ratio
        for label, group, impl in SPEED_POINTS:
            t, ref = pts.get((group, impl)), base[1].get((group, impl))
            if not t:
                cells.append("—")
                continue
            ratio = t["median_ms"] / ref["median_ms"] if ref else None
            note = next((n for n in notes if n.covers(rel.triton, short_gpu(gpu), label, _hash_of(mine))), None)
            if note and ratio and ratio > SLOW:
                noted[note.id] = max(noted.get(note.id, 0.0), ratio)
            else:
                worst = max(worst, ratio or 0.0)
            cells.append(f"{t['median_ms']:.2f}" + (f" ({ratio:.2f}x)" if ratio else ""))
        seeds = [m["speedup_vs_sdpa"] for (g, i), m in pts.items()
                 if i == "triton" and g.startswith(SEEDS_PREFIXES) and "speedup_vs_sdpa" in m]
        rows.append([rel.triton, short_gpu(gpu)] + cells + [
            f"{statistics.median(seeds):.2f}x ({min(seeds):.2f}-{max(seeds):.2f})" if seeds else "—",
            _auto(mine), _advisory(rel, mine, worst, base[0], windows, noted)])
    return rows


def load_speed_notes() -> list:
    return speed_notes.load(points=tuple(p[0] for p in SPEED_POINTS))


def _hash_of(recs: list[dict]) -> str:
    return hashes_text(recs, COMPILER_FIELD)


def _auto(recs: list[dict]) -> str:
    sel = [r for r in recs if "test_auto_route" in (r.get("kernel") or "")]
    if not sel:
        return "—"
    ratios = [m["auto_over_triton"] for r in sel for m in [r.get("metrics") or {}]
              if isinstance(m.get("auto_over_triton"), (int, float))]
    bad = any(r["verdict"] in BAD for r in sel)
    text = f"{max(ratios):.2f}" if ratios else sel[0]["verdict"]
    return f"**{text}**" if bad else text


def _advisory(rel, recs: list[dict], worst: float, newest: Version | None, windows: list,
              noted: dict | None = None) -> str:
    """The advisory cell: the window covering a slow release, else the speed notes answering every slow point
    (the flag when one is unanswered); ``worst`` is the largest ratio among the points no note answers."""
    noted = noted or {}
    if newest is None or (worst <= SLOW and not noted):
        return "—"
    if worst <= SLOW:
        return ", ".join(f"note `{i}` (+{(r - 1) * 100:.0f} % vs {newest})" for i, r in noted.items())
    arch = _arch(recs)
    cover = [w.id for w in windows if w.covers(rel.triton, arch, "bench", "gpu")]
    slower = f"+{(max([worst, *noted.values()]) - 1) * 100:.0f} % vs {newest}"
    return f"`{cover[0]}` ({slower})" if cover else f"**needs an advisory window** ({slower})"


def _arch(recs: list[dict]) -> int | None:
    cc = next((r.get("compute_capability") for r in recs if r.get("compute_capability")), None)
    try:
        major, minor = str(cc).split(".")
        return int(major) * 10 + int(minor)
    except (ValueError, AttributeError):
        return None


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + \
        ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def gpu_evidence(table, recs: list[dict], windows: list | None = None, current: str | None = None,
                 runtime: str | None = None) -> list[str]:
    """The GPU section of MATRIX.md (empty when no record came from a GPU)."""
    notes = canary_notes.load()
    rows = correctness_rows(table, recs, current, windows or [], notes, runtime)
    if not rows:
        return []
    out = ["", "## GPU evidence per release", "",
           f"Compiler-facing sources now: `{current or '?'}`; rows about other sources are **stale**: they count "
           "for nothing (not the cells above, not known-good) until the release is re-run. contract: the GPU "
           f"contract suite's passes; *stale* = it ran another runtime than `{runtime or '?'}` (GPU use stands; "
           "re-run it on the newest and the oldest release). Errors are the largest "
           "absolute errors against the float64 oracle (forward: GPU parity tests; backward: gradient parity). "
           "Canaries: minimal kernels of public GPU miscompile classes (`nsa_triton_sel.compat.canaries.gpu`).", ""]
    out += _table(["Triton", "GPU", "torch", "kernels", "parity", "backward", "contract", "fwd err", "bwd err",
                   "canaries fired"],
                  rows)
    out += ["", "A fired canary is answered by a known-bad window that covers GPU parity there (our kernels are "
            "hit: see 'Known-bad windows') or by a note (`nsa_triton_sel/compat/canaries/notes.toml`: why they "
            "are not); **unanswered**: neither yet. Notes:", ""]
    out += [f"- note `{n.canary}` on Triton {n.triton} (sm_{'/'.join(map(str, n.arch))}): {n.why} ({n.evidence})"
            for n in notes] or ["- no notes"]
    out += ["", "Speed: pytest-benchmark medians in ms on the GPU clock (canonical NSA shape: G=4 x h=16, D=128, "
            "block 64, top-16, random selection; `(x)` = ratio to the newest release on that GPU with the same "
            "kernels); seeds = the seeds' packed shapes, Triton's speedup over SDPA (median, range); auto = "
            f"`backend=\"auto\"` over `backend=\"triton\"` at T=8K (worst of inference, training; must be <= 1.05); "
            f"advisory: correct but more than {round((SLOW - 1) * 100)} % slower than the newest release: the "
            "known-bad window that says so, or the speed note whose repeated runs show it is not "
            "(`nsa_triton_sel/compat/ledger/speed_notes.toml`).", ""]
    snotes = load_speed_notes()
    out += _table(["Triton", "GPU"] + [p[0] for p in SPEED_POINTS] + ["seeds vs SDPA", "auto", "advisory"],
                  speed_rows(table, recs, windows or [], snotes))
    out += ["", "Speed notes:", ""]
    out += [f"- note `{n.id}`: Triton {n.triton} on the {n.gpu}, {n.point}, kernels {n.kernels[:8]}: {n.why} "
            f"({n.evidence})" for n in snotes] or ["- no notes"]
    return out
