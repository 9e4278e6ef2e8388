"""Runtime configuration of the dispatcher: the seeds' environment flags and the thresholds file.

Flags are read once per process, on the first call (:func:`flags`), and the thresholds file
once per path: a decode step must not pay for eight ``os.environ`` lookups and a file ``stat``
(measured: the per-call flag and thresholds reads were most of the dispatcher's host time).
After changing a flag or the thresholds file at run time, call :func:`refresh` (it also
forgets the devices and launch plans read so far).  Graphs already traced by ``torch.compile``
keep the values they were traced with: ``torch._dynamo.reset()`` retraces them.

========================  =======  =====================================================
flag                      default  effect
========================  =======  =====================================================
NSA_USE_TRITON_SEL        auto     ``0`` forces the packed-SDPA path, ``1`` asks for Triton
NSA_SEL_TRITON_MIN_L      file     rows with fewer selected keys go to the packed-SDPA path
NSA_SEL_TRITON_GROUP      1        ``0``: one program per head instead of per GQA group
NSA_SEL_TRITON_TOKENS     auto     tokens per program: ``1`` one token, ``N`` force N (power of 2)
NSA_FORCE_PARITY          0        ``1``: the reference path (packed SDPA in float32)
NSA_DEBUG_TIMING          0        log the time of each path (synchronises)
NSA_DEBUG_COMPARE         0        log the error of the result against the packed-SDPA path
NSA_DEBUG_SHAPES          0        log shapes, strides, dtypes and the chosen path
NSA_SEL_OP                custom   the operator torch.compile sees: ``custom`` (custom_op, opaque)
                                   or ``triton`` (triton_op: Inductor launches the kernels; torch >= 2.6)
========================  =======  =====================================================

``sel_triton_min_L`` defaults come from ``data/thresholds.json``, written from benchmark
evidence by ``bench/sel_threshold_from_csv.py --write-config``: one entry per
(GPU, Triton minor version); ``null`` there means "keep Triton off on this GPU".
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from packaging.version import InvalidVersion, Version

THRESHOLDS_ENV = "NSA_SEL_THRESHOLDS_FILE"  # points the dispatcher at another thresholds file
OFF = None  # a min_L of None keeps Triton off


def _flag(name: str, default: str = "0") -> str:
    return os.environ.get(name, default).strip().lower()


def _bool_flag(name: str, default: bool) -> bool:
    raw = _flag(name, "1" if default else "0")
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"{name}={os.environ.get(name)!r} is not a boolean; accepted: 0/1, true/false, yes/no, on/off")


@dataclass(frozen=True)
class Flags:
    use_triton: bool | None  # None: auto
    min_L_override: int | None
    group: bool
    tokens: int | None  # None: auto (multi-token kernel when neighbouring tokens share spans)
    force_parity: bool
    debug_timing: bool
    debug_compare: bool
    debug_shapes: bool
    op: str = "custom"  # NSA_SEL_OP


_FLAGS: list[Flags] = []  # the flags of this process, read on first use


def flags() -> Flags:
    """The NSA_* flags of this process, read (and validated) once; :func:`refresh` re-reads them."""
    if not _FLAGS:
        _FLAGS.append(read_flags())
    return _FLAGS[0]


def refresh() -> None:
    """Re-read the flags and the thresholds file, and forget cached devices, plans and routes.

    Call it after changing an ``NSA_*`` variable, ``TRITON_INTERPRET`` or the thresholds file
    while the process runs (tests do).  A bad flag raises on the next call, not here.
    """
    from . import known_bad, plan

    _FLAGS.clear()
    _load.cache_clear()
    known_bad._cached.cache_clear()
    plan.clear_caches()
    for hook in REFRESH_HOOKS:
        hook()


REFRESH_HOOKS: list = []  # other modules' caches (the dispatcher's routes), cleared by refresh()


def read_flags() -> Flags:
    """The NSA_* environment flags, validated (a typo raises instead of being ignored)."""
    use = os.environ.get("NSA_USE_TRITON_SEL")
    use_triton = None if use is None or use.strip().lower() in ("", "auto") else _bool_flag("NSA_USE_TRITON_SEL", False)
    raw_min = os.environ.get("NSA_SEL_TRITON_MIN_L")
    min_L = None
    if raw_min is not None and raw_min.strip():
        try:
            min_L = int(raw_min)
        except ValueError:
            raise ValueError(f"NSA_SEL_TRITON_MIN_L={raw_min!r} is not an integer; accepted: an integer >= 0") from None
        if min_L < 0:
            raise ValueError(f"NSA_SEL_TRITON_MIN_L={min_L} is negative; accepted: an integer >= 0")
    raw_tok = os.environ.get("NSA_SEL_TRITON_TOKENS", "auto").strip().lower()
    if raw_tok in ("", "auto"):
        tokens = None
    else:
        try:
            tokens = int(raw_tok)
        except ValueError:
            tokens = 0
        if tokens < 1 or tokens & (tokens - 1):
            raise ValueError(
                f"NSA_SEL_TRITON_TOKENS={raw_tok!r}; accepted: auto, 1, or a power of two (tokens per program)"
            )
    return Flags(
        use_triton=use_triton,
        min_L_override=min_L,
        group=_bool_flag("NSA_SEL_TRITON_GROUP", True),
        tokens=tokens,
        force_parity=_bool_flag("NSA_FORCE_PARITY", False),
        debug_timing=_bool_flag("NSA_DEBUG_TIMING", False),
        debug_compare=_bool_flag("NSA_DEBUG_COMPARE", False),
        debug_shapes=_bool_flag("NSA_DEBUG_SHAPES", False),
        op=_choice_flag("NSA_SEL_OP", "custom", ("custom", "triton")),
    )


def _choice_flag(name: str, default: str, accepted: tuple[str, ...]) -> str:
    raw = _flag(name, default) or default
    if raw not in accepted:
        raise ValueError(f"{name}={os.environ.get(name)!r}; accepted: {', '.join(accepted)}")
    return raw


def thresholds_path() -> Path:
    override = os.environ.get(THRESHOLDS_ENV)
    if override:
        return Path(override)
    return Path(str(resources.files("nsa_triton_sel") / "data" / "thresholds.json"))


@lru_cache(maxsize=8)
def _load(path: str) -> dict:
    with open(path) as fh:
        data = json.load(fh)
    if data.get("schema") != 1 or not isinstance(data.get("entries"), list):
        raise ValueError(f"{path}: not a thresholds file (expected schema 1 with an 'entries' list)")
    return data


def load_thresholds(path: str | Path | None = None) -> dict:
    """The thresholds file, read once per path (:func:`refresh` reads it again)."""
    return _load(str(path if path is not None else thresholds_path()))


def _minor(version: str) -> str:
    try:
        v = Version(version)
    except InvalidVersion:
        return version
    return f"{v.major}.{v.minor}"


def lookup_min_L(gpu_name: str, cc: str, triton_version: str, path: str | Path | None = None) -> int | None:
    """``sel_triton_min_L`` for this GPU and Triton: exact GPU name first, then compute capability.

    Entries are matched on the Triton minor version (``"3.6"``) or ``"*"``; with no match
    the file's ``default_min_L`` applies.  ``None`` means keep Triton off.
    """
    data = load_thresholds(path)
    minor = _minor(triton_version)
    candidates = [e for e in data["entries"] if e.get("triton") in (minor, "*")]
    for key, want in (("gpu", gpu_name), ("cc", cc)):
        hits = [e for e in candidates if e.get(key) == want]
        if hits:
            hits.sort(key=lambda e: e.get("triton") == "*")  # an exact minor wins over "*"
            return hits[0]["sel_triton_min_L"]
    return data.get("default_min_L", 4096)
