"""What the library knows about a device: read once per torch device, then a dict lookup.

A fact source, not a step of the call: the dispatcher reads it to route a call (is Triton
importable, which GPU for the thresholds file) and the planner to size launches (SMs, the
compute capability, the rows a known-bad window lets this Triton compile, whether it has the
warp-specialised Gluon kernel).  Pure Python at
import (no torch, no triton): :func:`device_of` imports torch when first asked about a device.
``config.refresh`` forgets what was read (the ``devices`` cache).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from . import caches, known_bad

ROWS = 64  # the widest dot M tile the kernels use (h = 64 heads of a group, or TOK x HP rows)
INTERPRETER_SMS = 8  # the interpreter has no SMs: any small number exercises the split path

# Shared memory one program (thread block) may use, per compute capability (CUDA programming guide,
# "technical specifications per compute capability": the opt-in maximum per block).  The consumer
# parts (sm_86/89 Ada, sm_120/121 RTX 50xx) have less than half of Hopper's and Blackwell-datacenter's,
# so a tile that fits sm_90 may not launch there: the compile smoke checks every compiled variant's
# shared memory against this table (an arch missing here is not checked).
SHARED_PER_BLOCK = {
    80: 166912, 86: 101376, 87: 166912, 89: 101376,  # Ampere 163 KiB, consumer Ampere / Ada 99 KiB
    90: 232448, 100: 232448, 103: 232448,            # Hopper, Blackwell B200/GB200, B300/GB300: 227 KiB
    120: 101376, 121: 101376,                        # Blackwell RTX 50xx / DGX Spark: 99 KiB
}


def shared_limit(arch: int | None) -> int | None:
    """Bytes of shared memory a program may use on ``arch`` (None: unknown arch, or no GPU)."""
    return None if arch is None else SHARED_PER_BLOCK.get(int(arch))


# The warp-specialised Gluon partial kernel of the key-major forward (``kernels/keymajor_ws.py``): the archs it is
# written for (Hopper's wgmma and mbarriers) and the first Triton whose Gluon has the API it uses.
GLUON_WS_ARCHS = (90,)
GLUON_WS_SINCE = "3.6"


def gluon_ws(triton_version: str | None, arch: int | None, interpreter: bool = False) -> bool:
    """Whether the Triton ``triton_version`` compiles the warp-specialised key-major partial kernel for ``arch``
    (never under the interpreter, which runs no Gluon)."""
    if interpreter or arch not in GLUON_WS_ARCHS or not triton_version:
        return False
    try:
        return Version(triton_version).release >= Version(GLUON_WS_SINCE).release
    except InvalidVersion:
        return False


def row_cap(triton_version: str | None, arch: int | None) -> int:
    """Rows per program the installed Triton compiles for ``arch``: 64 unless a window caps it."""
    cap = known_bad.row_cap(triton_version, arch)
    return ROWS if cap is None else min(ROWS, cap)


@dataclass(frozen=True)
class Device:
    """What routing and planning need to know about the device."""

    type: str  # "cuda", or "cpu" for the Triton interpreter
    arch: int | None  # compute capability as an int (90 = sm_90); None off CUDA
    sm_count: int
    name: str  # GPU name ("cpu" off CUDA): the thresholds file is keyed by it
    triton: str  # the installed Triton version ("" without Triton)
    interpreter: bool = False  # TRITON_INTERPRET=1 when the device was first read
    max_rows: int = ROWS  # largest dot M tile this Triton compiles here (:func:`row_cap`)
    avoided: frozenset[str] = frozenset()  # launch paths this Triton must not take here (``known_bad.avoided_paths``)
    gluon_ws: bool = False  # this Triton has the key-major forward's warp-specialised Gluon kernel here (:func:`gluon_ws`)

    @classmethod
    def target(cls, arch: int | None, triton: str, sm_count: int = 132, name: str = "target") -> Device:
        """A device described by hand (the compile-smoke registry plans for archs it does not have)."""
        return cls("cuda" if arch else "cpu", arch, sm_count, name, triton, arch is None, row_cap(triton, arch),
                   known_bad.avoided_paths(triton, arch), gluon_ws(triton, arch, arch is None))

    @property
    def cc(self) -> str:
        """Compute capability as the thresholds file writes it ("9.0"; "cpu" off CUDA)."""
        return "cpu" if self.arch is None else f"{self.arch // 10}.{self.arch % 10}"


def triton_version() -> str:
    try:
        import triton
    except Exception:  # noqa: BLE001 - any import failure means "no Triton"
        return ""
    return triton.__version__


_DEVICES: dict[tuple[str, int | None], Device] = caches.register("devices", {})


def device_of(device) -> Device:
    """The :class:`Device` record of a torch device, read once (the only CUDA queries of a call)."""
    key = (device.type, device.index)
    hit = _DEVICES.get(key)
    if hit is None:
        hit = _DEVICES[key] = _read_device(device)
    return hit


def _read_device(device) -> Device:
    interp = os.environ.get("TRITON_INTERPRET") == "1"
    version = triton_version()
    if device.type != "cuda":
        return Device(device.type, None, INTERPRETER_SMS, "cpu", version, interp, ROWS)
    import torch

    props = torch.cuda.get_device_properties(device)
    arch = props.major * 10 + props.minor
    return Device("cuda", arch, props.multi_processor_count, props.name, version, interp, row_cap(version, arch),
                  known_bad.avoided_paths(version, arch), gluon_ws(version, arch, interp))
