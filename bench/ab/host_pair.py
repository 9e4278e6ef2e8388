"""Host time per eager decode call, head against base, in paired rounds: the A/B's host rows, judged where the
machine's own speed moves.

    python -m bench.ab.host_pair --base-src DIR/src [--base-name NAME] [--pairs 150] [--out DIR]

On the lent GPU machines a process's host speed moves in phases (whole rounds of calls run much slower, this thread's
CPU time with them, for both trees alike), so a median per process, taken minutes apart from the other
tree's, says more about the phase than about the tree.  Here two worker processes, one per tree
(``PYTHONPATH``: its ``src/`` first), each hold the A/B suite's decode problem (``test_ab.decode_problem``) warm, and
take turns: a round is ``--calls`` eager calls through ``selection_attention`` (``validate=False``) with the GPU idle
at its start and end, the two trees' rounds adjacent, their order alternating (base-head, head-base, ...).  A
phase then slows both rounds of a pair: the verdict is the median over pairs of head / base, and its 10th-90th
percentile range says how settled it is.  Slower than ``--fail`` percent (median) fails: exit status 1.

Writes ``OUT/host-pair.md`` (the table) and ``OUT/host-pair.json`` (every round, both trees, wall and CPU
microseconds per call, and how each worker's kernels launched).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.ab import run

ROOT = run.ROOT
KINDS = ("ranges", "blocks")


def worker(calls: int) -> int:
    """One tree's side: the decode problem warm, then one timed round per line read (the kind to call)."""
    import torch

    import nsa_triton_sel
    from bench.ab import test_ab
    from nsa_triton_sel import selection_attention as sa

    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)  # the CPU dry run: no GPU
    p = test_ab.decode_problem()
    fns = {
        "ranges": lambda: sa(p["q"], p["k"], p["v"], p["ranges"], validate=False),
        "blocks": lambda: sa(p["q"], p["k"], p["v"], block_indices=p["blocks"], block_size=test_ab.BS,
                             positions=p["positions"], validate=False),
    }
    for fn in fns.values():
        for _ in range(3 * calls):  # compile, plan, record the launches
            fn()
    sync()
    print(json.dumps({"ready": str(nsa_triton_sel.__file__), "launches": test_ab.launch_report()}), flush=True)
    for line in sys.stdin:
        fn = fns[line.strip()]
        sync()
        t0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(calls):
            fn()
        wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
        sync()  # the other tree's round starts on an idle GPU
        print(json.dumps({"wall_us": wall / calls * 1e6, "cpu_us": cpu / calls * 1e6}), flush=True)
    return 0


class Side:
    def __init__(self, name: str, src: Path, calls: int):
        self.name = name
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.ab.host_pair", "--worker", "--calls", str(calls)],
                                     cwd=ROOT, env=run.tree_env(src), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.hello = self.read()
        if "ready" not in self.hello:
            raise SystemExit(f"bench.ab.host_pair: the {name} worker did not start: {self.hello}")

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"bench.ab.host_pair: the {self.name} worker exited (status {self.proc.wait()})")
        return json.loads(line)

    def round(self, kind: str) -> dict:
        self.proc.stdin.write(kind + "\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def summary(rounds: dict, fail: float) -> tuple[list[str], list[str]]:
    out = ["| row | unit | base (median) | head (median) | pairs | head / base, median of pairs | 10-90 % of pairs | |",
           "|---|---|---|---|---|---|---|---|"]
    bad = []
    for kind in KINDS:
        base = [r["wall_us"] for r in rounds[kind]["base"]]
        head = [r["wall_us"] for r in rounds[kind]["head"]]
        ratios = [h / b for h, b in zip(head, base)]
        med = statistics.median(ratios)
        flag = "**slower**" if med > 1 + fail else ""
        if flag:
            bad.append(f"host_decode[{kind}]: head / base {med:.3f} (median of {len(ratios)} pairs)")
        out.append(f"| host_decode[{kind}] | us/call | {statistics.median(base):.1f} | {statistics.median(head):.1f} | "
                   f"{len(ratios)} | {med:.3f} | {pct(ratios, 0.1):.3f}-{pct(ratios, 0.9):.3f} | {flag} |")
    return out, bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ab.host_pair", description=__doc__.splitlines()[0])
    ap.add_argument("--base-src", help="the base's src/ folder (git archive REV src | tar -x -C DIR)")
    ap.add_argument("--base-name", default="base")
    ap.add_argument("--head-src", default=str(ROOT / "src"), help="the head's src/ folder (default: this tree's)")
    ap.add_argument("--pairs", type=int, default=150, help="rounds per tree and kind")
    ap.add_argument("--calls", type=int, default=20, help="eager calls per round (back to back, as a decode loop)")
    ap.add_argument("--fail", type=int, default=3, help="whole percent slower (median of pairs) that fails")
    ap.add_argument("--out", default="out/host-pair")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return worker(a.calls)
    if not a.base_src or not (Path(a.base_src) / "nsa_triton_sel" / "__init__.py").is_file():
        ap.error(f"--base-src {a.base_src!r} holds no nsa_triton_sel/__init__.py (give the base's src/ folder)")
    if a.pairs < 10 or a.calls < 1:
        ap.error(f"--pairs must be at least 10 and --calls at least 1 (got {a.pairs}, {a.calls})")
    t0 = time.monotonic()
    sides = {"base": Side(a.base_name, Path(a.base_src).resolve(), a.calls),
             "head": Side("head", Path(a.head_src).resolve(), a.calls)}
    rounds = {k: {"base": [], "head": []} for k in KINDS}
    for i in range(a.pairs):
        for kind in KINDS:
            for who in (("base", "head") if i % 2 == 0 else ("head", "base")):
                rounds[kind][who].append(sides[who].round(kind))
        if (i + 1) % 50 == 0:
            print(f"host_pair: {i + 1}/{a.pairs} pairs, {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    for s in sides.values():
        s.close()
    lines, bad = summary(rounds, a.fail / 100)
    head = (f"Host A/B in paired rounds: head = {sides['head'].hello['ready']} against {a.base_name} = "
            f"{sides['base'].hello['ready']}; {a.pairs} pairs of {a.calls} calls per kind, "
            f"{time.monotonic() - t0:.0f} s; fail over {a.fail} %")
    launches = [f"- {who} launches: {sides[who].hello['launches']}" for who in ("base", "head")]
    text = "\n".join([head, "", *lines, "", *launches]) + "\n"
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "host-pair.md").write_text(text)
    (out / "host-pair.json").write_text(json.dumps({"rounds": rounds, "hello": {k: s.hello for k, s in sides.items()},
                                                     "calls": a.calls, "pairs": a.pairs}, indent=1) + "\n")
    print(text, end="")
    if bad:
        print("slower: " + "; ".join(bad), file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
