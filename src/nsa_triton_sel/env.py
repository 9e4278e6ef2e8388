"""The environment fingerprint, and ``nsa-sel doctor``.

:func:`fingerprint` is cheap (imports and queries only, no kernel runs): benchmark and
ledger rows embed it so every number can be traced to the software and hardware that
produced it.  :func:`interpreter_usable` is the separate, slower probe that runs a tiny
known Triton kernel under ``TRITON_INTERPRET=1`` in a child process and checks it
against numpy, because some Triton/numpy pairs (Triton 3.0/3.1 with numpy 2.x) give
silently wrong results instead of failing.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

# Knobs that change what Triton compiles or how it runs; a ledger row without them
# cannot be reproduced.  (TRITON_DEFAULT_FP_FUSION changes its default in 3.10.)
TRITON_KNOBS = (
    "TRITON_DEFAULT_FP_FUSION",
    "TRITON_INTERPRET",
    "TRITON_CACHE_DIR",
    "TRITON_PTXAS_PATH",
    "TRITON_F32_DEFAULT",
    "TRITON_ALWAYS_COMPILE",
    "TRITON_DEBUG",
    "TRITON_HIP_USE_BLOCK_PINGPONG",
)


def _version(dist: str) -> str | None:
    """Installed version of a distribution, or None (never imports it)."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _run(cmd: list[str], timeout: float = 5.0, cwd: str | None = None) -> str | None:
    """stdout of a short helper command, or None if it is missing or fails."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() if res.returncode == 0 else None


def _git_commit() -> str | None:
    """Commit of the checkout this package was imported from (None for a wheel install)."""
    here = Path(__file__).resolve().parent
    commit = _run(["git", "rev-parse", "HEAD"], cwd=str(here))
    if commit is None:
        return None
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=str(here))
    return commit + ("-dirty" if dirty else "")


def _nvidia_smi() -> dict:
    """Driver version and GPU name from nvidia-smi (torch cannot report the driver)."""
    out = _run(["nvidia-smi", "--query-gpu=driver_version,name", "--format=csv,noheader"])
    if not out:
        return {}
    first = out.splitlines()[0].split(",")
    return {"driver": first[0].strip(), "name": first[1].strip() if len(first) > 1 else None}


def _cuda_info() -> dict:
    """CUDA runtime, driver and device 0 properties; all None without a GPU."""
    info = {
        "cuda_runtime": None,
        "cuda_driver": None,
        "cuda_available": False,
        "gpu_count": 0,
        "gpu_name": None,
        "compute_capability": None,
        "sm_count": None,
    }
    try:
        import torch
    except ImportError:
        return info
    info["cuda_runtime"] = torch.version.cuda  # what torch was built against
    if not torch.cuda.is_available():
        return info
    info["cuda_available"] = True
    info["gpu_count"] = torch.cuda.device_count()
    props = torch.cuda.get_device_properties(0)
    info["gpu_name"] = props.name
    info["compute_capability"] = f"{props.major}.{props.minor}"
    info["sm_count"] = props.multi_processor_count
    smi = _nvidia_smi()
    info["cuda_driver"] = smi.get("driver") or _driver_from_torch()
    return info


def _driver_from_torch() -> str | None:
    """The CUDA driver API version (e.g. '12.4') via torch's private binding, if any."""
    try:
        import torch

        v = torch._C._cuda_getDriverVersion()  # int like 12040; private, may vanish
        return f"{v // 1000}.{(v % 1000) // 10}"
    except Exception:  # noqa: BLE001 - best effort only
        return None


def fingerprint() -> dict:
    """The software and hardware a result was produced on, as a flat JSON-able dict.

    Cheap: version look-ups, ``torch.cuda`` queries, one ``git`` and (on a GPU box) one
    ``nvidia-smi`` call.  Triton itself is not imported, so this works where triton is
    missing or broken.
    """
    fp = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "torch": _torch_version(),
        "triton": _version("triton"),
        "numpy": _version("numpy"),
        "nsa_triton_sel": _version("nsa-triton-sel"),
        "git_commit": _git_commit(),
    }
    fp.update(_cuda_info())
    fp["triton_env"] = {k: os.environ.get(k) for k in TRITON_KNOBS if os.environ.get(k) is not None}
    fp["TRITON_DEFAULT_FP_FUSION"] = os.environ.get("TRITON_DEFAULT_FP_FUSION")
    return fp


def _torch_version() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    return torch.__version__


def main(argv: list[str] | None = None) -> int:
    """``nsa-sel doctor [--json] [--no-interp]``."""
    p = argparse.ArgumentParser(prog="nsa-sel doctor", description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object to stdout")
    p.add_argument("--no-interp", action="store_true", help="skip the Triton interpreter probe")
    args = p.parse_args(argv)
    report = fingerprint()
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        for key, val in report.items():
            print(f"{key:<26} {val}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
