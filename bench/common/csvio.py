"""The benchmark CSV: its schema (the seeds' columns first, then ours), reading and writing it,
and the list arguments of the sweep scripts.

``speedup`` is ref_ms / tri_ms; ``suspect`` lists the guards that fired (:mod:`bench.common.guards`).
"""

from __future__ import annotations

import csv
import math
import os
import sys
from pathlib import Path
from typing import Iterable

import torch

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
DISTS = ("few", "many", "mixed")
MODES = ("dense", "varlen", "decode")

# The CSV schema: the seeds' columns first (so their tooling still reads our files), then
# ours.  ``speedup`` is ref_ms / tri_ms.  ``suspect`` lists the guards that fired.
SEED_COLUMNS = ["mode", "N", "H", "D", "Dv", "L", "nspans", "streams", "tri_ms", "ref_ms", "speedup", "mae"]
EXTRA_COLUMNS = [
    "dist", "dtype", "T", "l_sel",
    "tri_gbs", "ref_gbs", "tri_tflops", "ref_tflops", "tri_pct_bw", "ref_pct_bw",
    "tri_p20_ms", "tri_p80_ms", "ref_p20_ms", "ref_p80_ms",
    "ref_mae", "tri_packed_ms", "ref_gather_ms", "tri_host_us", "ref_host_us", "mae_rows",
    "copy_gbs", "mm_tflops", "timer", "iters", "retries", "ref_kernel", "status", "suspect",
    "gpu", "cc", "triton", "torch", "cuda", "driver", "git_commit", "date",
]
COLUMNS = SEED_COLUMNS + EXTRA_COLUMNS


def int_list(text: str, name: str) -> list[int]:
    """'64,128' -> [64, 128]; raises ValueError naming the option on anything else."""
    try:
        vals = [int(x) for x in str(text).split(",") if x.strip() != ""]
    except ValueError:
        raise ValueError(f"{name} must be a comma-separated list of positive integers, got {text!r}") from None
    if not vals or any(v <= 0 for v in vals):
        raise ValueError(f"{name} must be a comma-separated list of positive integers, got {text!r}")
    return vals


def dims_list(text: str) -> list[tuple[int, int]]:
    """'64:64,128:64' -> [(64, 64), (128, 64)] (Dk:Dv pairs)."""
    out = []
    for item in str(text).split(","):
        parts = item.strip().split(":")
        try:
            dk, dv = int(parts[0]), int(parts[1])
            if len(parts) != 2 or dk <= 0 or dv <= 0:
                raise ValueError
        except (ValueError, IndexError):
            raise ValueError(f"--dims takes Dk:Dv pairs like 64:64,128:64; got {item!r} in {text!r}") from None
        out.append((dk, dv))
    return out


def fmt(v) -> str:
    """CSV cell text: floats with 6 significant digits, everything else as str."""
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.6g}"
    return "" if v is None else str(v)


def write_csv(path: str | os.PathLike, rows: Iterable[dict], append: bool = True,
              columns: list[str] | None = None) -> None:
    """Write rows with the full ``columns`` header (default: the sweep's COLUMNS); append keeps
    existing rows (header once).

    Appending to a file whose header differs is refused, because the threshold script reads
    columns by name and a mixed file would be misread.
    """
    columns = COLUMNS if columns is None else columns
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    exists = p.exists() and p.stat().st_size > 0
    if exists and append:
        with p.open(newline="") as fh:
            header = next(csv.reader(fh), [])
        if header != columns:
            raise ValueError(f"{p} has a different header ({len(header)} columns); "
                             f"write to a new file or delete it (expected: {','.join(columns[:6])},...)")
    mode = "a" if (exists and append) else "w"
    with p.open(mode, newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
        if mode == "w":
            w.writeheader()
        for r in rows:
            w.writerow({c: fmt(r.get(c)) for c in columns})


def read_csv(paths: Iterable[str | os.PathLike]) -> list[dict]:
    """Rows of one or more CSVs (missing files are an error: say which)."""
    rows = []
    for path in paths:
        p = Path(path)
        if not p.exists():
            raise FileNotFoundError(f"CSV not found: {p}")
        with p.open(newline="") as fh:
            rows.extend(csv.DictReader(fh))
    return rows


def progress(msg: str) -> None:
    """One progress line on stderr, flushed (long sweeps run unattended)."""
    print(msg, file=sys.stderr, flush=True)
