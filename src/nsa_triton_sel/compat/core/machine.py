"""This machine as the lanes see it: the cores a run may use, the GPUs ``nvidia-smi`` shows, the flavour
(GPU or CPU) the lanes run in, and the archs one compile run covers (asked for, this machine's GPU, or
the GPU-less default).  Standard library only: the noxfile imports it before any lane exists."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from .lane_table import Table


def parse_archs(text, what: str = "--arch") -> list[int]:
    """``"80,89,90"`` or ``"sm_90"`` or an iterable of ints -> ``[80, 89, 90]``; rejects nonsense.

    ``what`` names the input in the error (an option or an environment variable)."""
    items = text.split(",") if isinstance(text, str) else list(text)
    archs = []
    for item in items:
        s = str(item).strip().lower().removeprefix("sm_").removeprefix("sm")
        if not s.isdigit() or not 50 <= int(s) <= 200:
            raise ValueError(f"{what}: bad arch {item!r}: expected compute capabilities like 80,89,90 (or sm_100), "
                             f"or 'all' where the table's archs are meant")
        archs.append(int(s))
    if not archs:
        raise ValueError(f"{what}: no arch given")
    return sorted(set(archs))


# The archs a lane's compile smoke covers when nobody asks for others and no GPU is visible.  sm_90
# (H100) is the one arch with GPU evidence, and one arch keeps the README's main job (a compile lane and
# the interpreter parity suite) within its minutes on a 2-core box: every arch adds a full set of
# compiles.  lanes.toml's `archs` (the full sweep) is one flag away (--all-archs); CI and check-upgrade
# run it.
NO_GPU_ARCHS = (90,)
NO_GPU_WHY = "no GPU visible here: the GPU-less default"
ALL = "all"


@dataclass(frozen=True)
class ArchChoice:
    """Which archs one compile run covers, why, and which of the table's it leaves out."""

    archs: tuple[int, ...]
    why: str
    table: tuple[int, ...]

    @property
    def rest(self) -> tuple[int, ...]:
        """The table's archs this run does not compile (the full sweep's remainder)."""
        return tuple(a for a in self.table if a not in self.archs)

    @property
    def label(self) -> str:
        return ", ".join(f"sm_{a}" for a in self.archs)


def usable_cores() -> int:
    """The cores this process may use (its affinity mask, not the machine's count: a container or
    ``taskset`` gets fewer): the compile jobs and interpreter test workers of a lane, one per core."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no sched_getaffinity (macOS)
        return max(1, os.cpu_count() or 1)


def _smi_rows(query: str) -> list[str] | None:
    """``nvidia-smi --query-gpu=QUERY`` rows for the GPUs this process may see (``CUDA_VISIBLE_DEVICES`` honoured
    with ``-i``); None where there is none to ask (no ``nvidia-smi``, ``NSA_SEL_GPU=0``, the variable set and empty)
    or it fails."""
    if os.environ.get("NSA_SEL_GPU", "").strip() == "0":
        return None
    smi = shutil.which("nvidia-smi")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if smi is None or (visible is not None and not visible.strip()):
        return None
    cmd = [smi, f"--query-gpu={query}", "--format=csv,noheader"] + (["-i", visible.strip()] if visible else [])
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.splitlines() if res.returncode == 0 else None


def gpu_archs() -> list[tuple[int, str]]:
    """(compute capability as an int, name) of each GPU ``nvidia-smi`` shows this process, [] without one.

    ``nvidia-smi`` rather than torch: the noxfile's process must not import torch (a lane brings its
    own), and a CPU torch sees no GPU anyway.  ``CUDA_VISIBLE_DEVICES`` is honoured (``-i``; set and
    empty: none); ``NSA_SEL_GPU=0`` (the CPU flavour, forced) means none."""
    out = []
    for line in _smi_rows("compute_cap,name") or []:
        cap, _, name = line.partition(",")
        major, dot, minor = cap.strip().partition(".")
        if dot and major.isdigit() and minor.isdigit():  # an old driver without compute_cap prints "[N/A]"
            out.append((int(major) * 10 + int(minor), name.strip()))
    return out


def gpu_memory_gib() -> float | None:
    """The memory of the smallest GPU ``nvidia-smi`` shows this process, in GiB (None: no GPU, or not said)."""
    sizes = []
    for line in _smi_rows("memory.total") or []:
        value = line.strip().split(" ")[0]  # "81559 MiB"
        if value.isdigit():
            sizes.append(int(value) / 1024)
    return min(sizes) if sizes else None


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` entries: that variable's own list when it is set,
    else each index ``nvidia-smi`` shows; [] without one (or with ``NSA_SEL_GPU=0``)."""
    if os.environ.get("NSA_SEL_GPU", "").strip() == "0":
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip()]
    return [ln.strip() for ln in _smi_rows("index") or [] if ln.strip().isdigit()]


def compile_archs(table: Table, requested: str | None = None, gpus: list[tuple[int, str]] | None = None,
                  what: str = "--archs") -> ArchChoice:
    """The archs a compile run covers: ``requested`` (``"all"``: the table's; ``"80,90"``: those), else
    this machine's GPUs' (``gpus``, default :func:`gpu_archs`), else :data:`NO_GPU_ARCHS`."""
    every = tuple(table.archs)
    if requested is not None and requested.strip():
        if requested.strip().lower() == ALL:
            return ArchChoice(every, f"every arch of lanes.toml ({what} {ALL})", every)
        return ArchChoice(tuple(parse_archs(requested, what)), f"asked for ({what})", every)
    gpus = gpu_archs() if gpus is None else gpus
    if gpus:
        names = ", ".join(sorted({f"{name} (sm_{cc})" for cc, name in gpus}))
        return ArchChoice(tuple(sorted({cc for cc, _ in gpus})), f"this machine's GPU: {names}", every)
    return ArchChoice(NO_GPU_ARCHS, NO_GPU_WHY, every)


def gpu_mode() -> bool:
    """Which flavour the lanes run here: GPU when NSA_SEL_GPU=1, or when unset and nvidia-smi lists a GPU."""
    forced = os.environ.get("NSA_SEL_GPU", "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        res = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return res.returncode == 0 and "GPU" in res.stdout
