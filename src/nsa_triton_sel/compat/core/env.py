"""The environment fingerprint and the interpreter probe (``nsa-sel doctor`` prints both: :mod:`..commands.doctor`).

:func:`fingerprint` is cheap (imports and queries only, no kernel runs): benchmark and
ledger rows embed it so every number can be traced to the software and hardware that
produced it.  :func:`interpreter_usable` is the separate, slower probe that runs a tiny
known Triton kernel under ``TRITON_INTERPRET=1`` in a child process and checks it
against numpy, because some Triton/numpy pairs (Triton 3.0/3.1 with numpy 2.x) give
silently wrong results instead of failing.
"""

from __future__ import annotations

import datetime as _dt
import functools
import importlib.util
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

# Every set TRITON_* variable is recorded (a ledger row without the knobs cannot be
# reproduced); these are the ones that matter most, and TRITON_DEFAULT_FP_FUSION also
# gets its own key because its default changes in Triton 3.10.
TRITON_KNOBS = (
    "TRITON_DEFAULT_FP_FUSION",
    "TRITON_INTERPRET",
    "TRITON_F32_DEFAULT",
    "TRITON_PTXAS_PATH",
    "TRITON_CACHE_DIR",
    "TRITON_ALWAYS_COMPILE",
    "TRITON_DEBUG",
)
# Not Triton's, but they change which device or how CUDA runs.
OTHER_KNOBS = ("CUDA_VISIBLE_DEVICES", "CUDA_LAUNCH_BLOCKING")


def _knobs(prefix: str = "TRITON_") -> dict:
    """Set environment variables named ``prefix*`` or in OTHER_KNOBS, sorted by name."""
    return {
        k: v for k, v in sorted(os.environ.items()) if k.startswith(prefix) or k in OTHER_KNOBS
    }


def dist_version(dist: str) -> str | None:
    """Installed version of a distribution, or None (never imports it)."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


IMPORT_CHECKED = ("triton", "numpy", "torch")


def imported_versions(names: tuple[str, ...] = IMPORT_CHECKED) -> dict:
    """The versions of the packages this process has *imported* (None: not imported).

    Installed metadata can disagree with what a process imports (a directory earlier on
    ``sys.path`` shadows the installed package), so every process that produces a verdict
    reports this, and the ledger checks it against the release the lane names.
    """
    out = {}
    for name in names:
        mod = sys.modules.get(name)
        version = getattr(mod, "__version__", None) if mod is not None else None
        out[name] = str(version) if version is not None else None
    return out


def imported_origins(names: tuple[str, ...] = IMPORT_CHECKED) -> dict:
    """Where each imported package came from (its directory), for logs; None when not imported."""
    out = {}
    for name in names:
        mod = sys.modules.get(name)
        path = getattr(mod, "__file__", None) if mod is not None else None
        out[name] = os.path.dirname(path) if path else None
    return out


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
    here = Path(__file__).resolve()
    # Only if this very file is tracked there: an installed copy inside some other
    # repository (a venv under a checkout) must not report that repository's commit.
    if _run(["git", "ls-files", "--error-unmatch", here.name], cwd=str(here.parent)) is None:
        return None
    commit = _run(["git", "rev-parse", "HEAD"], cwd=str(here.parent))
    if commit is None:
        return None
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=str(here.parent))
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
        "cuda_driver": None,  # the driver release, e.g. "550.54.15" (nvidia-smi)
        "cuda_driver_api": None,  # the newest CUDA the driver supports, e.g. "12.4"
        "cuda_available": False,
        "gpu_count": 0,
        "gpu_name": None,
        "compute_capability": None,
        "sm_count": None,
        "cudnn": None,
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
    info["cudnn"] = torch.backends.cudnn.version()
    info["cuda_driver"] = _nvidia_smi().get("driver")
    info["cuda_driver_api"] = _driver_api_from_torch()
    return info


def _driver_api_from_torch() -> str | None:
    """The CUDA version the driver supports (e.g. '12.4') via torch's private binding."""
    try:
        import torch

        v = torch._C._cuda_getDriverVersion()  # int like 12040; private, may vanish
        return f"{v // 1000}.{(v % 1000) // 10}"
    except Exception:  # noqa: BLE001 - best effort only
        return None


def fingerprint() -> dict:
    """The software and hardware a result was produced on, as a flat JSON-able dict.

    Cheap: version look-ups, ``torch.cuda`` queries, one ``git`` and (on a GPU box) one
    ``nvidia-smi`` call, made once per process and cached; the date and the knobs are
    read fresh on every call.  Triton itself is not imported, so this works where
    triton is missing or broken.
    """
    fp = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    fp.update(_static_fingerprint())
    fp["triton_env"] = _knobs()
    fp["TRITON_DEFAULT_FP_FUSION"] = os.environ.get("TRITON_DEFAULT_FP_FUSION")
    return fp


def lane_fingerprint() -> dict:
    """:func:`fingerprint` plus what this process imports of Triton, numpy and torch: each import is tried
    (its error kept under ``import_errors``), then the versions imported and where each came from.  A lane
    checks it before it runs (in the lane's own interpreter) and stamps its records with it."""
    fp = fingerprint()
    for name in ("triton", "numpy", "torch"):
        try:
            __import__(name)
        except Exception as exc:  # noqa: BLE001 - reported; the lane refuses an environment without its Triton
            fp.setdefault("import_errors", {})[name] = repr(exc)
    fp["imported"], fp["origins"] = imported_versions(), imported_origins()
    return fp


@functools.lru_cache(maxsize=1)
def _static_fingerprint() -> dict:
    """The parts that cannot change while a process runs (a copy is returned)."""
    fp = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "torch": _torch_version(),
        "triton": dist_version("triton"),
        "numpy": dist_version("numpy"),
        "nsa_triton_sel": dist_version("nsa-triton-sel"),
        # NSA_SEL_GIT_COMMIT wins: a copied checkout may carry a stale .git (the GPU machine's copy
        # reported the session's first commit, d8a4c4d-dirty, for code of 94d3abac).
        "git_commit": os.environ.get("NSA_SEL_GIT_COMMIT") or _git_commit(),
        **_source_hashes(),
    }
    fp.update(_cuda_info())
    return fp


def _source_hashes() -> dict:
    """``compiler_hash`` and ``runtime_hash`` of the sources this process runs (nsa_triton_sel.provenance);
    None where unreadable."""
    from ...provenance import FIELDS, hashes  # noqa: PLC0415 - standard library only

    try:
        return hashes()
    except (OSError, ValueError):
        return dict.fromkeys(FIELDS.values())


def _torch_version() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    return torch.__version__


# ---------------------------------------------------------------------------------
# Interpreter probe
# ---------------------------------------------------------------------------------

PROBE_TIMEOUT_S = 180.0
_PROBE_MARK = "NSA_SEL_PROBE_RESULT "


# The probe is a standalone script, written to a temporary directory and run by the
# same Python: Triton 3.0/3.1 only accept ``tl`` as a module global of the kernel's
# module (kernels defined inside a function fail with "triton.language must be visible
# from within jit'd function"), and a script needs nothing of this package, so it also
# works in a lane environment where the package is not installed.
#
# It covers what the selection kernels rely on: a masked load/add/store with a ragged
# tail (Triton 3.0/3.1 + numpy 2.x get the masked lanes wrong), and a ``tl.dot``
# accumulated over a loop with a *runtime* bound (Triton 3.2-3.6 + numpy 2.4 raise a
# TypeError there).  It prints the max errors against numpy.
_PROBE_SCRIPT = """
import json
import numpy as np
import torch
import triton
import triton.language as tl


@triton.jit
def masked_add(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    y = tl.load(y_ptr + offs, mask=m, other=0.0)
    tl.store(o_ptr + offs, x + y, mask=m)


@triton.jit
def small_dot(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):  # runtime bound on purpose
        a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :])
        b = tl.load(b_ptr + (k0 + rk)[:, None] * BN + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


def main():
    # Data lives in here, not in module globals: Triton 3.0/3.1 scan the kernel's
    # globals with `value in [tl, tl.core]`, which raises on a global numpy array.
    rng = np.random.default_rng(0)
    n = 100  # not a multiple of BLOCK: the tail is masked
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    o = torch.zeros(n)
    masked_add[(triton.cdiv(n, 64),)](torch.from_numpy(x), torch.from_numpy(y), o, n, BLOCK=64)
    add_err = float(np.abs(o.numpy() - (x + y)).max())

    M, N, K = 16, 16, 32
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = torch.zeros(M, N)
    small_dot[(1,)](torch.from_numpy(a), torch.from_numpy(b), c, K, BM=M, BN=N, BK=16)
    dot_err = float(np.abs(c.numpy() - a.astype(np.float64) @ b.astype(np.float64)).max())
    versions = {"triton": triton.__version__, "numpy": np.__version__, "torch": str(torch.__version__)}
    print(MARK + json.dumps({"add_max_err": add_err, "dot_max_err": dot_err, **versions}))


main()
"""


def install_hint(missing: list[str], constraints: str | None = None) -> str:
    """One pip command installing ``missing``: numpy as ``lanes.toml`` pairs it with the installed Triton
    (Triton 3.0/3.1 need numpy<2), triton as ``known-good.txt`` admits it, when the project is found."""
    from . import lane_table, project  # noqa: PLC0415

    specs = {name: name for name in missing}
    try:
        cdir = project.constraints_dir(constraints)
        release = lane_table.load_table(cdir / project.TABLE_NAME).for_version(dist_version("triton") or "0")
    except (OSError, ValueError, RecursionError):  # no project here, or its table is unreadable: plain names
        cdir, release = None, None
    if "numpy" in specs and release is not None and release.numpy:
        specs["numpy"] = f"numpy{release.numpy}"
    line = "pip install " + " ".join(shlex.quote(s) for s in specs.values())
    if "triton" in specs and cdir is not None and (cdir / "known-good.txt").is_file():
        line += f" -c {shlex.quote(str(cdir / 'known-good.txt'))}"
    return line


def interpreter_usable(timeout: float = PROBE_TIMEOUT_S, constraints: str | None = None) -> dict:
    """Can the Triton interpreter be trusted here?  Runs the probe in a child process.

    ``TRITON_INTERPRET`` is read when triton is imported, so the probe needs a fresh
    interpreter with the variable set from the start.  Returns ``{"status": "ok" |
    "wrong" | "error", "detail": str, ...}``: ``wrong`` means the kernels ran but
    disagree with numpy (a silent miscompute, the dangerous case), ``error`` means they
    did not run (exception, crash, timeout, triton missing).
    """
    env = dict(os.environ, TRITON_INTERPRET="1")
    base = {"triton": dist_version("triton"), "numpy": dist_version("numpy")}
    missing = [name for name in IMPORT_CHECKED if importlib.util.find_spec(name) is None]
    if missing:  # the matrix extra alone has no numpy: say what to install, not "No module named 'numpy'"
        return {**base, "status": "error",
                "detail": f"{' and '.join(missing)} not installed: the Triton interpreter and this probe need "
                          f"{'it' if len(missing) == 1 else 'them'}",
                "fix": install_hint(missing, constraints)}
    with tempfile.TemporaryDirectory(prefix="nsa_sel_probe_") as tmp:
        script = Path(tmp) / "nsa_sel_interp_probe.py"
        script.write_text(f"MARK = {_PROBE_MARK!r}\n" + _PROBE_SCRIPT)
        try:
            res = subprocess.run(
                [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=timeout,
                cwd=tmp,
            )
        except subprocess.TimeoutExpired:
            return {**base, "status": "error", "detail": f"probe timed out after {timeout:.0f} s"}
    found = [ln for ln in res.stdout.splitlines() if ln.startswith(_PROBE_MARK)]
    if res.returncode != 0 or not found:
        return {**base, "status": "error", "detail": _last_error(res)}
    # The child's own versions (what it imported) override the installed metadata.
    errs = json.loads(found[-1][len(_PROBE_MARK):])
    return {**base, **_judge(errs), "imported": {k: errs.get(k) for k in IMPORT_CHECKED}}


def _last_error(res: subprocess.CompletedProcess) -> str:
    """The informative tail of a failed child: its last stderr line and exit code."""
    lines = [ln for ln in (res.stderr or "").splitlines() if ln.strip()]
    tail = lines[-1].strip() if lines else "no output"
    return f"exit code {res.returncode}: {tail}"


def _judge(errs: dict) -> dict:
    """ok/wrong from the probe's errors.  fp32 add is exact; the fp16 dot accumulates in
    fp32 over K=32 products of ~N(0,1) values, so 1e-2 is generous yet far below the
    errors of a broken interpreter (~1e37 and ~20)."""
    ok = errs["add_max_err"] <= 1e-6 and errs["dot_max_err"] <= 1e-2
    detail = f"masked add max err {errs['add_max_err']:.3g}, tl.dot max err {errs['dot_max_err']:.3g}"
    return {**errs, "status": "ok" if ok else "wrong", "detail": detail}
