"""Work accounting and the device's ceilings, so a time becomes an effective rate.

Per call over N rows, H query heads per row, L selected keys per row:

- effective bytes = q + selected K/V + o, each counted once:
  ``elem * N * (H*Dk + L*(Dk + Dv) + H*Dv)``;
- FLOPs = ``2*N*H*L*Dk`` (scores) + ``2*N*H*L*Dv`` (probabilities times values).

Both sides of a comparison are charged the same logical work, so GB/s and TFLOP/s are
"effective" rates: a side that moves more bytes than the minimum (a gather, padding)
simply shows a lower rate.  :func:`env_columns` is the environment every CSV row carries.
"""

from __future__ import annotations

import math
import time
from importlib import metadata

import torch


from .timers import CudaEventTimer


def sel_bytes(N: int, H: int, Dk: int, Dv: int, L: int, elem: int) -> int:
    """Minimum bytes one selection-attention call moves: q + selected K/V + o, once each."""
    return elem * N * (H * Dk + L * (Dk + Dv) + H * Dv)


def sel_flops(N: int, H: int, Dk: int, Dv: int, L: int) -> int:
    """Matmul FLOPs of one call: QK^T (2·H·L·Dk per row) plus PV (2·H·L·Dv per row)."""
    return 2 * N * H * L * (Dk + Dv)


def rates(ms: float, nbytes: int, flops: int, copy_gbs: float) -> tuple[float, float, float]:
    """(GB/s, TFLOP/s, % of measured copy bandwidth) for a time in ms; NaN if ms is not positive."""
    if not (ms > 0) or math.isnan(ms):
        return float("nan"), float("nan"), float("nan")
    gbs = nbytes / ms / 1e6
    tflops = flops / ms / 1e9
    pct = 100.0 * gbs / copy_gbs if copy_gbs and copy_gbs > 0 else float("nan")
    return gbs, tflops, pct


def measure_ceilings(dry_run: bool = False, copy_bytes: int = 1 << 30, mm_n: int = 8192) -> dict:
    """Copy bandwidth (GB/s, read + write counted) and bf16 matmul TFLOP/s of device 0.

    Measured once per run with do_bench-style median timing; dry runs return nominal
    H100 figures so the rest of the pipeline can be exercised.
    """
    if dry_run or not torch.cuda.is_available():
        return {"copy_gbs": 3000.0, "mm_tflops": 700.0, "ceilings": "nominal (dry run)"}
    timer = CudaEventTimer(iters=20, warmup=3)
    src = torch.empty(copy_bytes // 2, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    t_copy = timer(lambda: dst.copy_(src)).median_ms
    copy_gbs = 2 * copy_bytes / t_copy / 1e6
    del src, dst
    a = torch.randn(mm_n, mm_n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(mm_n, mm_n, device="cuda", dtype=torch.bfloat16)
    t_mm = timer(lambda: a @ b).median_ms
    mm_tflops = 2 * mm_n**3 / t_mm / 1e9
    del a, b, timer
    torch.cuda.empty_cache()
    return {"copy_gbs": copy_gbs, "mm_tflops": mm_tflops, "ceilings": "measured"}


def _installed(dist: str) -> str | None:
    """Installed version of a distribution, or None: the standard library's answer, so that a benchmark of
    another revision's package (the A/B's base) needs nothing of this revision's toolkit."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def env_columns() -> dict:
    """The environment columns of every CSV row, from ``nsa_triton_sel.compat.core.env.fingerprint``.

    Imported lazily: the fingerprint module may be newer than this file, and a missing
    field must not stop a benchmark.
    """
    try:
        from nsa_triton_sel.compat.core.env import fingerprint

        fp = fingerprint()
    except Exception as exc:  # noqa: BLE001 - the benchmark still runs, the CSV says why
        fp = {"error": repr(exc)}
    gpu = fp.get("gpu_name")
    if gpu is None and torch.cuda.is_available():
        gpu = torch.cuda.get_device_name(0)
    return {
        "gpu": gpu or "cpu",
        "cc": fp.get("compute_capability") or "",
        "triton": fp.get("triton") or _installed("triton") or "",
        "torch": fp.get("torch") or torch.__version__,
        "cuda": fp.get("cuda_runtime") or (torch.version.cuda or ""),
        "driver": fp.get("cuda_driver") or "",
        "git_commit": fp.get("git_commit") or "",
        "date": fp.get("date") or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }

