"""The planner's path table from ``bench/probes/path_grid.py`` runs: check it, print its verdicts, write it.

    python -m bench.analysis.path_table GRID.json [GRID.json ...] --source bench/results/X/ [--write-config]

The grid files of one GPU (random and local selections; the environment of each must name the same GPU and
Triton; a cell measured several times, by ``--repeat`` or in several files, gets each path's median) become one
entry of ``src/nsa_triton_sel/data/paths.json`` (``--write-config``; an entry of the same GPU
and Triton release is replaced, the others kept).  Printed: per measured cell, the path the planner takes
(``plan.keymajor.path_verdict``: random selections run key-major where the verdict is "always" or "unshared",
local ones where it is "always") for a forward and for a training step, and how much slower that is than the
faster path of the cell.  Exits 1 where any cell's choice is more than 5 % slower than the faster path.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "src" / "nsa_triton_sel" / "data" / "paths.json"
WORST = 1.05  # the planner's choice may be at most this much slower than the faster path on a measured cell
COLUMNS = ("fwd_token", "fwd_key", "train_token", "train_key")


def entry_from(grids: list[dict], source: str) -> dict:
    envs = {(g["environment"]["gpu"], g["environment"]["triton"]) for g in grids}
    if len(envs) != 1:
        raise SystemExit(f"the grid files name several GPUs or Triton releases: {sorted(envs)}")
    (gpu, triton), env = envs.pop(), grids[0]["environment"]
    runs: dict[tuple, list[dict]] = {}
    for g in grids:
        for c in g["cells"]:
            runs.setdefault((c["sel"], c["T"], c["h"]), []).append(c)
    cells = []
    for (sel, T, h), rs in sorted(runs.items()):
        cell = {"sel": sel, "T": T, "h": h, "G": rs[0]["G"]}
        if len(rs) > 1:
            cell["runs"] = len(rs)
        for col in COLUMNS:
            if col.endswith("_key") and any(r["kernel_key"] != "keymajor" for r in rs):
                cell[col] = None  # the key-major path could not run this cell
            else:
                cell[col] = round(statistics.median(r[col] for r in rs), 4)
        cells.append(cell)
    return {"gpu": gpu, "cc": env["cc"], "triton": triton, "torch": env["torch"], "date": env["date"][:10],
            "source": source, "problem": {k: grids[0][k] for k in ("D", "block", "topn", "HQ")},
            "commands": sorted({g["command"] for g in grids}), "cells": cells}


def check(entry: dict) -> float:
    """Print the verdict per cell; return the worst ratio of the chosen path's time to the faster path's."""
    sys.path.insert(0, str(ROOT / "src"))
    import importlib  # noqa: PLC0415

    # the module (the package exports a function of its name), from this checkout
    KM = importlib.import_module("nsa_triton_sel.plan.keymajor")

    worst = 1.0
    print("| sel | T | h | forward: chosen, ratio to the faster | training: chosen, ratio to the faster |")
    print("|---|---|---|---|---|")
    for c in entry["cells"]:
        cols = []
        for col, grad in (("fwd", False), ("train", True)):
            verdict = KM.path_verdict((entry,), entry["gpu"], h=c["h"], T=c["T"], grad=grad)
            key = verdict == KM.ALWAYS or (verdict == KM.UNSHARED and c["sel"] == "random")
            times = [c[f"{col}_token"]] + ([c[f"{col}_key"]] if c[f"{col}_key"] is not None else [])
            chosen = c[f"{col}_key"] if key else c[f"{col}_token"]
            ratio = chosen / min(times)
            worst = max(worst, ratio)
            cols.append(f"{'key' if key else 'token'}, {ratio:.3f}")
        print(f"| {c['sel']} | {c['T']} | {c['h']} | {cols[0]} | {cols[1]} |")
    return worst


def render(data: dict) -> str:
    """The table as JSON with one line per cell."""
    text = json.dumps(data, indent=1)
    for e in data["entries"]:
        for c in e["cells"]:
            text = text.replace(json.dumps(c, indent=1).replace("\n", "\n    "), json.dumps(c), 1)
    return text + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("grids", nargs="+", help="path_grid --json files of one GPU")
    ap.add_argument("--source", required=True, help="the results folder the grids are committed in")
    ap.add_argument("--write-config", action="store_true", help=f"write the entry into {CONFIG.relative_to(ROOT)}")
    ap.add_argument("--config", default=str(CONFIG))
    a = ap.parse_args(argv)
    entry = entry_from([json.loads(Path(g).read_text()) for g in a.grids], a.source)
    worst = check(entry)
    print(f"\n{entry['gpu']}, Triton {entry['triton']}: {len(entry['cells'])} cells; the planner's choice is at most "
          f"{100 * (worst - 1):.1f} % slower than the faster path (bound {100 * (WORST - 1):.0f} %)")
    if a.write_config:
        path = Path(a.config)
        data = json.loads(path.read_text()) if path.exists() else {"schema": 1, "entries": []}
        data["entries"] = [e for e in data["entries"] if (e["gpu"], e["triton"]) != (entry["gpu"], entry["triton"])]
        data["entries"].append(entry)
        path.write_text(render(data))
        print(f"wrote {path}")
    return 0 if worst <= WORST else 1


if __name__ == "__main__":
    raise SystemExit(main())
