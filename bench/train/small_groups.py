"""Small GQA groups (h = 1-8 query heads per KV head): this package against FSA and XunhaoLai.

The grid of the small-group issue (bf16, D = 128, blocks of 64, top-16 random causal selections including the
token's own block and block 0; the same inputs for every contender): T, HQ / H in

    32K 32/32 (h 1), 64K 16/16 (h 1), 32K 32/8 (h 4), 32K 32/4 (h 8), 32K 64/4 (h 16)

Contenders: ``ours-api`` (``selection_attention``: the planner picks the forward, key-major for small groups),
``ours-api-token`` (the same with the key-major forward turned off: the token-major kernels), ``ours-token`` and
``ours-key`` (the kernels without the operator, on ranges of unbounded length), ``xunhaolai`` and ``fsa`` (fetched, never committed: FSA with its one-line fix for
Triton >= 3.6).  Per row: forward, forward + backward and backward ms (``triton.testing.do_bench``, median, L2
flushed, warm-up outside), the forward's effective bytes (each selected key's K and V row read once per
(token, KV head), q and o once) as GB/s, and TFLOP/s against a measured bf16 matmul ceiling, with the
environment.  ``--check`` compares every contender's output and gradients with ``ours-token`` first.

    python -m bench.train.small_groups --peers DIR [--grid 32768:32:32,...] [--csv out/small_groups.csv]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys

import torch

from bench.common import csvio
from bench.train import train_contenders as TC
from bench.train import train_nsa

GRID = ((32768, 32, 32), (65536, 16, 16), (32768, 32, 8), (32768, 32, 4), (32768, 64, 4))
COLUMNS = ["T", "HQ", "H", "h", "contender", "fwd_ms", "fwdbwd_ms", "bwd_ms", "fwd_gbs", "tflops", "pct_mm",
           "extra_peak_gib", "status", "mm_tflops", "gpu", "cc", "triton", "torch", "cuda", "driver", "git_commit",
           "date"]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def contender(name: str, p: TC.Problem):
    if name == "ours-api":
        return TC.ours_api(p)
    if name == "ours-api-token":  # measured under key_major_off
        c = TC.ours_api(p)
        c.name = name
        return c
    if name == "ours-token":
        return TC.ours(p, name="ours-token", forward="ranges")
    if name == "ours-key":
        return TC.ours(p, name="ours-key", forward="keymajor")
    status = TC.peer_status(name)
    if status:
        return status
    return TC.PEERS[name](p)


@contextlib.contextmanager
def key_major_off(off: bool):
    """The planner with the key-major path turned off (``plan.keymajor.forced("token")``) where ``off``: what the
    operator ran before the key-major path."""
    if not off:
        yield
        return
    with importlib.import_module("nsa_triton_sel.plan.keymajor").forced("token"):
        yield


def forward_bytes(p: TC.Problem) -> int:
    """Bytes a forward must move at least once per (token, KV head): the selected keys' K and V rows, q and o."""
    d = p.q.shape[-1]
    return (p.keys * 2 * d + 2 * p.q.numel()) * p.q.element_size()


def measure_row(row: dict, c, p: TC.Problem, bench, mm: float, ref_out, check: bool):
    """Fill ``row`` with ``c``'s timings (and, with ``check``, its output's distance to ``ref_out``, the first
    contender's output, which it returns)."""
    if check:
        out = c.forward()
        o = out.detach().float().reshape(p.q.shape[:4] + (-1,))
        if ref_out is None:
            ref_out = o
        row["status"] = f"max|out - first|={(o - ref_out).abs().max().item():.3e}"
        del out
    row.update(train_nsa.measure(c, p, bench, False))
    row["fwd_gbs"] = forward_bytes(p) / row["fwd_ms"] / 1e6
    row["pct_mm"] = 100 * row["tflops"] / mm
    row.setdefault("status", "ok")
    return ref_out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers", help="folder with xunhaolai/, fsa_pkg/, einops_pkg/")
    ap.add_argument("--grid", help="comma list of T:HQ:H (default: the issue's five rows)")
    ap.add_argument("--contenders", default="ours-api-token,ours-api,xunhaolai,fsa")
    ap.add_argument("--rep-ms", type=int, default=200)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--csv")
    a = ap.parse_args(argv)
    train_nsa.add_peers(a.peers)
    if a.peers:
        sys.path.insert(0, str(__import__("pathlib").Path(a.peers, "fsa_pkg")))
    grid = GRID if not a.grid else tuple(tuple(int(x) for x in g.split(":")) for g in a.grid.split(","))
    bench = train_nsa.make_bench(a.rep_ms, False)
    from bench.common import accounting

    env = accounting.env_columns()
    mm = accounting.measure_ceilings(dry_run=False)["mm_tflops"]
    log(f"environment: {env}; bf16 matmul ceiling {mm:.0f} TFLOP/s")
    rows = []
    for T, HQ, H in grid:
        h = HQ // H
        p = TC.make_problem(T, "random", h=h, groups=H)
        ref_out = None
        for name in a.contenders.split(","):
            c = contender(name, p)
            row = {"T": T, "HQ": HQ, "H": H, "h": h, "contender": name, "mm_tflops": mm, **env}
            if isinstance(c, str):
                row["status"] = c
                log(f"T={T} {HQ}/{H} {name}: {c}")
                rows.append(row)
                continue
            try:
                with key_major_off(name == "ours-api-token"):
                    ref_out = measure_row(row, c, p, bench, mm, ref_out, a.check)
            except Exception as exc:  # noqa: BLE001 - one contender's failure is a row, not the end of the run
                row["status"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            log(f"T={T} {HQ}/{H} (h={h}) {name:10s} fwd {row.get('fwd_ms', float('nan')):8.2f} ms  fwd+bwd "
                f"{row.get('fwdbwd_ms', float('nan')):8.2f} ms  bwd {row.get('bwd_ms', float('nan')):8.2f} ms  "
                f"fwd {row.get('fwd_gbs', float('nan')):7.0f} GB/s  peak +{row.get('extra_peak_gib', float('nan')):.2f}"
                f" GiB  {row.get('status', '')}")
            rows.append(row)
            del c
            torch.cuda.empty_cache()
        del p
        torch.cuda.empty_cache()
    if a.csv:
        csvio.write_csv(a.csv, rows, append=False, columns=COLUMNS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
