"""The GPU A/B: the working tree against a base revision, on one GPU, judged by pytest-benchmark's compare.

    python -m bench.ab.run --base main [--out DIR] [-k EXPR]
    python -m bench.ab.run --base-src DIR --base-name 40d7048   # a base exported beforehand (no git there)

Three runs of ``bench/ab/test_ab.py`` on the same GPU, one after another: the base, the head (this working
tree's ``src/``), the base again.  Each is saved with ``--benchmark-save``; the head's run compares itself with
the first base run through ``--benchmark-compare`` and fails any row whose median is more than ``--fail``
(default 3 %) slower (``--benchmark-compare-fail=median:3%``).  The second base run shows the drift of the
machine over the head's run: a row whose two base runs differ by more than the threshold is marked noisy.
Extra peak memory (train rows, ``extra_info``) is checked here with the same threshold.

Prints one table (milliseconds for fwd/train, microseconds for decode and per host call; head / base as the
ratio to the mean of the two base runs, with the drift between them) and writes it to ``DIR/ab.md`` with
the three saved runs beside it (``NNNN_base-1.json``, ...).  Exit status: 0 no row regressed; 1 a row regressed (the head's
pytest-benchmark compare failed, or memory grew); 2 a run failed or bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUITE = "bench/ab/test_ab.py"
UNIT = {"fwd": ("ms", 1e3), "train": ("ms", 1e3), "decode": ("us", 1e6), "host": ("us/call", 1e6)}


def log(*a) -> None:
    print(*a, file=sys.stderr, flush=True)


def base_tree(args) -> tuple[Path, str]:
    """``(src folder of the base, its name)``: a given folder, or a detached worktree of ``--base``."""
    if args.base_src:
        src = Path(args.base_src).resolve()
        if not (src / "nsa_triton_sel" / "__init__.py").is_file():
            raise SystemExit(f"bench.ab.run: --base-src {src} holds no nsa_triton_sel/__init__.py (give the src/ "
                             f"folder of the base, e.g. made by: git archive REV src | tar -x -C DIR)")
        return src, args.base_name or src.parent.name
    try:
        sha = subprocess.run(["git", "rev-parse", "--verify", f"{args.base}^{{commit}}"], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout.strip()
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"bench.ab.run: --base {args.base!r} is not a revision here: {exc.stderr.strip()}")
    tree = Path(tempfile.gettempdir()) / f"nsa-ab-{sha[:12]}"
    if not (tree / "src").is_dir():
        subprocess.run(["git", "worktree", "add", "--detach", "--force", str(tree), sha], cwd=ROOT, check=True,
                       capture_output=True)
    return tree / "src", args.base_name or f"{args.base}@{sha[:8]}"


def tree_env(src: Path) -> dict:
    """This process's environment with ``src`` (a tree's ``src/`` folder) first on the path, then this repository."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), str(ROOT), os.environ.get("PYTHONPATH", "")]),
                PYTHONUNBUFFERED="1")


def run_suite(label: str, src: Path, storage: Path, extra: list[str], pytest_args: list[str]) -> int:
    """One run of the suite with ``src`` first on the path; returns pytest's exit status."""
    env = tree_env(src)
    cmd = [sys.executable, "-m", "pytest", SUITE, "-q", "-p", "no:cacheprovider", "-o", "addopts=",
           f"--benchmark-storage=file://{storage}", f"--benchmark-save={label}", "--benchmark-sort=name",
           "--benchmark-columns=median,iqr,rounds",
           # the library differs between the runs by design: its fingerprint in machine_info too
           "-W", "ignore:Benchmark machine_info is different", *extra, *pytest_args]
    log(f"== [{time.strftime('%H:%M:%S')}] {label}: {src}")
    t0 = time.monotonic()
    rc = subprocess.run(cmd, cwd=ROOT, env=env).returncode
    log(f"== {label}: exit {rc} in {time.monotonic() - t0:.0f} s")
    return rc


def saved(storage: Path, label: str) -> Path:
    """The file pytest-benchmark saved for ``label`` (``<storage>/<machine>/<NNNN>_<label>.json``)."""
    found = sorted(storage.glob(f"*/*_{label}.json"))
    if not found:
        log(f"bench.ab.run: the {label} run saved nothing under {storage} (see its output above)")
        raise SystemExit(2)
    return found[-1]


def rows(path: Path) -> dict:
    """``{name: (group, median s, extra_info)}`` of one saved run."""
    data = json.loads(path.read_text())
    return {b["name"]: (b["group"], b["stats"]["median"], b.get("extra_info", {})) for b in data["benchmarks"]}


def table(b1: dict, head: dict, b2: dict, fail: float) -> tuple[list[str], list[str]]:
    """The Markdown table and the regressions it shows (time over ``fail`` against the first base run, as the
    compare judged; memory over ``fail`` against the larger base)."""
    out = ["| row | unit | base-1 | head | base-2 | head / base | base drift | |",
           "|---|---|---|---|---|---|---|---|"]
    bad = []
    for name in sorted(head, key=lambda n: (list(UNIT).index(head[n][0]) if head[n][0] in UNIT else 9, n)):
        group, h, info = head[name]
        if name not in b1 or name not in b2:
            out.append(f"| {name} | | - | | - | (not in both base runs) | | |")
            continue
        unit, mult = UNIT.get(group, ("s", 1.0))
        per = info.get("calls_per_round", 1)
        m1, m2 = b1[name][1], b2[name][1]
        base = statistics.mean([m1, m2])
        drift = abs(m2 - m1) / m1
        flag = ""
        if h > m1 * (1 + fail):
            flag = "**slower**"
            bad.append(f"{name}: {h * mult / per:.4g} {unit} against {m1 * mult / per:.4g} (base-1)")
        if drift > fail:
            flag += " noisy"
        short = name.removeprefix("test_")
        out.append(f"| {short} | {unit} | {m1 * mult / per:.4g} | {h * mult / per:.4g} | {m2 * mult / per:.4g} | "
                   f"{h / base:.3f} | {drift * 100:.1f} % | {flag.strip()} |")
        if "extra_peak_mib" in info and "extra_peak_mib" in b1[name][2]:
            mb = max(b1[name][2]["extra_peak_mib"], b2[name][2].get("extra_peak_mib", 0.0))
            mh = info["extra_peak_mib"]
            mflag = ""
            if mh > mb * (1 + fail) + 1.0:
                mflag = "**more memory**"
                bad.append(f"{name}: extra peak {mh:.0f} MiB against {mb:.0f} MiB")
            out.append(f"| {short} peak | MiB | {b1[name][2]['extra_peak_mib']:.0f} | {mh:.0f} | "
                       f"{b2[name][2].get('extra_peak_mib', float('nan')):.0f} | {mh / mb:.3f} | | {mflag} |")
    return out, bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ab.run", description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="main", help="the base revision (a detached git worktree is made of it)")
    ap.add_argument("--base-src", help="the base's src/ folder instead of --base (exported with git archive)")
    ap.add_argument("--base-name", help="what to call the base in the table")
    ap.add_argument("--out", default="out/ab", help="where the table and the saved runs go")
    ap.add_argument("--fail", type=int, default=3, help="whole percent slower (or more memory) that fails a row")
    ap.add_argument("-k", dest="select", help="only the rows pytest -k selects")
    a = ap.parse_args(argv)
    if not 0 < a.fail < 100:
        ap.error(f"--fail must be a whole percentage in 1..99, got {a.fail}")
    base_src, base_name = base_tree(a)
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    # under the project (pytest-benchmark names a storage outside the working directory wrongly), emptied first
    storage = ROOT / ".benchmarks" / "ab"
    storage.mkdir(parents=True, exist_ok=True)
    for old in storage.glob("*/*.json"):
        old.unlink()
    head_src = ROOT / "src"
    pyargs = ["-k", a.select] if a.select else []
    t0 = time.monotonic()
    rc1 = run_suite("base-1", base_src, storage, [], pyargs)
    b1 = saved(storage, "base-1")
    number = b1.name.split("_", 1)[0]
    rch = run_suite("head", head_src, storage, [f"--benchmark-compare={number}",
                                                f"--benchmark-compare-fail=median:{a.fail}%"], pyargs)
    rc2 = run_suite("base-2", base_src, storage, [], pyargs)
    lines, bad = table(rows(b1), rows(saved(storage, "head")), rows(saved(storage, "base-2")), a.fail / 100)
    head = [f"GPU A/B: head = {head_src} against base = {base_name} ({base_src}); "
            f"{time.monotonic() - t0:.0f} s; fail over {a.fail} %", ""]
    text = "\n".join(head + lines) + "\n"
    (out / "ab.md").write_text(text)
    for run in storage.glob("*/*.json"):
        shutil.copyfile(run, out / run.name)
    print(text)
    if rc1 or rc2 or (rch and not bad):
        log(f"bench.ab.run: a run failed (base-1 exit {rc1}, head exit {rch}, base-2 exit {rc2})")
        return 2 if (rc1 or rc2 or rch not in (0, 1)) else 1
    if bad or rch:
        log("bench.ab.run: REGRESSION: " + "; ".join(bad))
        return 1
    log("bench.ab.run: no row regressed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
