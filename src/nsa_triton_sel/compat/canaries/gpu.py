"""Run the GPU canaries (:mod:`.gpu_kernels`), each in a child process, and turn them into ledger records.

A canary *fires* when its kernel gives a result off its float64 reference (record verdict ``fail``),
kills its process (an illegal memory access poisons the CUDA context, so each canary has a process
of its own: ``crash``) or hangs (``timeout``).  It passes when the release computes it right.  A
canary that cannot run (no CUDA device) is a ``skip`` with the reason.  The records go to check
``gpu-canary``; MATRIX.md lists per release which fired.  A canary that fires says the release has
that miscompile class; whether *our* kernels are hit is what the GPU parity suite decides.

``python -m nsa_triton_sel.compat.canaries.gpu --json OUT`` runs them all (the GPU runner does);
the child is ``python -m nsa_triton_sel.compat.canaries.gpu --child module:function``.
This module imports neither torch nor Triton (the parent must survive anything a child does).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass

from ..core.verdicts import CRASH, ERROR, FAIL, PASS, SKIP, TIMEOUT

MODULE = "nsa_triton_sel.compat.canaries.gpu"
KERNELS = "nsa_triton_sel.compat.canaries.gpu_kernels"
MARK = "NSA_SEL_GPU_CANARY "
DEVICE_ENV = "NSA_SEL_CANARY_DEVICE"  # "cpu" with TRITON_INTERPRET=1: the tests run the arithmetic on a CPU


@dataclass(frozen=True)
class GpuCanary:
    name: str
    target: str  # "module:function" returning {"max_err": float, "tol": float}
    source: str  # the public report it reproduces


CANARIES = (
    GpuCanary("dot_trans_dk", f"{KERNELS}:check_dot_trans_dk",
              "tl.dot(tl.trans(ds), q) wrong dk on Hopper, Triton 3.4-<3.7.1 (fla-org/flash-linear-attention #640, #826)"),
    GpuCanary("warps4_m64", f"{KERNELS}:check_warps4_m64",
              "num_warps=4 with a 64-row tile dot miscompiles on 3.7.1 (fla #984, #988)"),
    GpuCanary("odd_k_tail", f"{KERNELS}:check_odd_k_tail",
              "odd K with masked tail tiles: illegal memory access on 3.7 (fla #1241)"),
    GpuCanary("cumsum_spans", f"{KERNELS}:check_cumsum_spans",
              "tl.cumsum span indexing gave NaN on Triton 3.0, sm_90 (this project: triton30-sm90-cumsum)"),
)


def child(target: str) -> int:
    """In the child: run one canary and print its result line (exit 0 even when it fired)."""
    device = os.environ.get(DEVICE_ENV) or "cuda"
    if device == "cuda":
        import torch  # noqa: PLC0415 - only the child touches CUDA
    if device == "cuda" and not torch.cuda.is_available():
        print(MARK + json.dumps({"status": "skip", "why": "no CUDA device (torch.cuda.is_available() is False)"}))
        return 0
    module, _, fn = target.partition(":")
    try:
        res = getattr(importlib.import_module(module), fn)(device)
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - a compile error or a Python-side failure is reported, not raised
        print(MARK + json.dumps({"status": "error", "why": f"{type(exc).__name__}: {str(exc)[-300:]}"}))
        return 0
    err, tol = res["max_err"], res["tol"]
    fired = not (err == err and err <= tol)  # NaN compares unequal to itself
    print(MARK + json.dumps({"status": "wrong" if fired else "ok", "max_err": err, "tol": tol}))
    return 0


def run_one(canary: GpuCanary, timeout_s: float = 120.0, env: dict | None = None) -> dict:
    """One canary in its own process: ``{"name", "verdict", "message", "metrics", "seconds"}``."""
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", MODULE, "--child", canary.target]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired:
        return _result(canary, TIMEOUT, f"no result within {timeout_s:.0f} s (hung)", {}, t0)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith(MARK)]
    if not lines:
        tail = (res.stderr or res.stdout).strip().splitlines()[-3:]
        why = f"the child died (exit status {res.returncode}, e.g. an illegal memory access or an abort)"
        return _result(canary, CRASH, why + (": " + " | ".join(tail) if tail else ""), {}, t0)
    out = json.loads(lines[-1][len(MARK):])
    status = out.get("status")
    if status == "skip":
        return _result(canary, SKIP, out["why"], {}, t0)
    if status == "error":
        return _result(canary, ERROR, out["why"], {}, t0)
    metrics = {k: out[k] for k in ("max_err", "tol") if isinstance(out.get(k), (int, float))}
    msg = f"max error {out.get('max_err')} vs bound {out.get('tol'):.3g}"
    if status == "wrong":
        return _result(canary, FAIL, f"FIRED: {msg}: {canary.source}", metrics, t0)
    return _result(canary, PASS, f"computed right ({msg})", metrics, t0)


def _result(canary, verdict, message, metrics, t0) -> dict:
    return {"name": canary.name, "verdict": verdict, "message": message,
            "metrics": {**metrics, "seconds": round(time.monotonic() - t0, 3)}}


def run_all(canaries=CANARIES, timeout_s: float = 120.0, env: dict | None = None) -> list[dict]:
    return [run_one(c, timeout_s, env) for c in canaries]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nsa_triton_sel.compat.canaries.gpu",
                                description="run the GPU miscompile canaries, each in its own process")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--json", help="write the results here")
    p.add_argument("--timeout", type=float, default=120.0)
    args = p.parse_args(argv)
    if args.child:
        return child(args.child)
    results = run_all(timeout_s=args.timeout)
    for r in results:
        print(f"{r['name']:<14} {r['verdict']:<8} {r['message']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
