"""Runtime configuration of the dispatcher: the seeds' environment flags, the thresholds file and the path table.

Flags are read once per process, on the first call (:func:`flags`), and the thresholds file
once per path: a decode step must not pay for eight ``os.environ`` lookups and a file ``stat``
(measured: the per-call flag and thresholds reads were most of the dispatcher's host time).
After changing a flag or the thresholds file at run time, call :func:`refresh` (it also
forgets the devices and launch plans read so far).  Graphs already traced by ``torch.compile``
keep the values they were traced with: ``torch._dynamo.reset()`` retraces them.

The flags (``NSA_USE_TRITON_SEL``, ``NSA_SEL_TRITON_MIN_L``, ``NSA_SEL_TRITON_GROUP``,
``NSA_SEL_TRITON_TOKENS``, ``NSA_FORCE_PARITY``, ``NSA_DEBUG_*``, ``NSA_SEL_OP``) and their effects are
tabled once, in the README ("The dispatcher and its flags"); :func:`read_flags` validates them.

``sel_triton_min_L`` is 1 (the kernels take every call) unless ``data/thresholds.json`` has a
measurement for exactly this GPU (its name) and this Triton release (``"3.6.0"``): a GPU lane's
``bench-X`` measures where packed SDPA beats the kernels and writes that entry
(``bench/analysis/sel_threshold_from_csv.py --write-config``).  No other GPU's or release's numbers
ever apply: the measured H100 crossover is L = 1, and packed SDPA loses by orders of magnitude
at NSA's shapes, so guessing a threshold where nobody measured would send every NSA call
to the slow path, orders of magnitude slower.  An entry may only raise the
threshold where SDPA was measured faster (its ``margin`` is at most 1.0); ``null`` ("keep
Triton off") only where SDPA was faster at every measured L.

``data/paths.json`` (``NSA_SEL_PATHS_FILE`` names another) is the planner's path table: per GPU, the
key-major and token-major paths timed over group sizes, sequence lengths and selection kinds
(``bench/probes/path_grid.py``, written by ``bench/analysis/path_table.py --write-config``);
``plan.keymajor`` reads the verdict.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from packaging.version import InvalidVersion, Version

from . import caches
from .files import read_text

THRESHOLDS_ENV = "NSA_SEL_THRESHOLDS_FILE"  # points the dispatcher at another thresholds file
DEFAULT_MIN_L = 1  # no measurement for this (GPU, Triton release): the kernels take every call
THRESHOLDS_SCHEMA = 2  # entries keyed by the exact Triton release; schema 1 keyed by minor and guessed a default
PATHS_ENV = "NSA_SEL_PATHS_FILE"  # points the planner at another path table
PATHS_SCHEMA = 1
PATH_CELL_KEYS = ("sel", "T", "h", "fwd_token", "fwd_key", "train_token", "train_key")


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


_FLAGS: list[Flags] = caches.register("flags", [])  # the flags of this process, read on first use
QUIET = Flags(use_triton=None, min_L_override=None, group=True, tokens=None, force_parity=False, debug_timing=False,
              debug_compare=False, debug_shapes=False)  # a traced call's (its route reads the real ones)


def flags() -> Flags:
    """The NSA_* flags of this process, read (and validated) once; :func:`refresh` re-reads them."""
    if not _FLAGS:
        _FLAGS.append(read_flags())
    return _FLAGS[0]


def refresh() -> None:
    """Re-read the flags and the thresholds file, and empty every cache of the runtime (``caches``):
    devices, routes, plans, prepared launches, remembered kernel failures.

    Call it after changing an ``NSA_*`` variable, ``TRITON_INTERPRET`` or the thresholds file
    while the process runs (tests do).  A bad flag raises on the next call, not here.
    """
    caches.clear()


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


def _read_entries(path: str, *, what: str, schema: int, writer: str, entry_problem, why_not_older: str = "") -> dict:
    """The JSON file at ``path`` of ``{"schema": schema, "entries": [...]}``, each entry checked by
    ``entry_problem``; ``ValueError`` naming the file (and the entry) otherwise."""
    data = json.loads(read_text(path))  # a regular file only: a FIFO named here is an error, not a hang
    if not isinstance(data, dict) or data.get("schema") != schema or not isinstance(data.get("entries"), list):
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{path}: not {what} of schema {schema} (found schema {found!r}); expected "
                         f"{{\"schema\": {schema}, \"entries\": [...]}} as written by '{writer}'{why_not_older}")
    for n, e in enumerate(data["entries"]):
        problem = entry_problem(e)
        if problem:
            raise ValueError(f"{path}: entries[{n}]: {problem}")
    return data


def _measured_entry_problem(e) -> str | None:
    """What every measured entry needs: an object naming the GPU, the Triton release and the source."""
    if not isinstance(e, dict):
        return f"an entry must be an object, got {type(e).__name__}"
    for key in ("gpu", "triton", "source"):
        if not isinstance(e.get(key), str) or not e[key]:
            return f"'{key}' must be a non-empty string (got {e.get(key)!r})"
    return None


@lru_cache(maxsize=8)
def _load(path: str) -> dict:
    """The thresholds file at ``path``, parsed and checked (cached: registered as ``thresholds``)."""
    return _read_entries(path, what="a thresholds file", schema=THRESHOLDS_SCHEMA, entry_problem=entry_problem,
                         writer="python -m bench.analysis.sel_threshold_from_csv --write-config",
                         why_not_older=" (schema 1 files guessed a threshold for unmeasured GPUs and releases: "
                                       "re-measure instead)")


caches.register("thresholds", clear=_load.cache_clear, size=lambda: _load.cache_info().currsize)


def entry_problem(e) -> str | None:
    """Why a thresholds entry cannot be used, or None."""
    problem = _measured_entry_problem(e)
    if problem:
        return problem
    try:
        release = Version(e["triton"])
    except InvalidVersion:
        return f"'triton' must be the release the measurement ran on, e.g. '3.6.0' (got {e['triton']!r})"
    if len(release.release) < 3:
        return f"'triton' must name a release, e.g. '3.6.0', not a series (got {e['triton']!r})"
    min_L = e.get("sel_triton_min_L", "missing")
    if min_L is not None and (type(min_L) is not int or min_L < 1):
        return f"'sel_triton_min_L' must be an integer >= 1 or null (got {min_L!r})"
    margin = e.get("margin")
    if min_L != 1 and not (isinstance(margin, (int, float)) and 0 < margin <= 1.0):
        return (f"sel_triton_min_L={min_L} moves calls to packed SDPA, which an entry may only do where SDPA was "
                f"measured faster: its 'margin' must be in (0, 1.0] (got {margin!r})")
    return None


def load_thresholds(path: str | Path | None = None) -> dict:
    """The thresholds file, read once per path (:func:`refresh` reads it again)."""
    return _load(str(path if path is not None else thresholds_path()))


def release_of(version: str) -> str:
    """A Triton version as the thresholds file keys it: the release, without local or dev parts."""
    try:
        return Version(version).base_version
    except InvalidVersion:
        return version


@dataclass(frozen=True)
class Threshold:
    """The ``sel_triton_min_L`` that applies, and why (``doctor`` and the debug log print it)."""

    min_L: int | None  # None: packed SDPA for every call (only from a measurement)
    why: str


def threshold_for(gpu_name: str, triton_version: str, path: str | Path | None = None) -> Threshold:
    """``sel_triton_min_L`` for exactly this GPU and Triton release, else :data:`DEFAULT_MIN_L`."""
    path = thresholds_path() if path is None else Path(path)
    release = release_of(triton_version)
    for e in load_thresholds(path)["entries"]:
        if e["gpu"] == gpu_name and release_of(e["triton"]) == release:
            return Threshold(e["sel_triton_min_L"],
                             f"measured for {gpu_name} with Triton {release} ({e['source']}, {e.get('date', 'no date')}) "
                             f"in {path.name}")
    return Threshold(DEFAULT_MIN_L, f"default: {path.name} has no measurement for {gpu_name} with Triton "
                                    f"{release or '(none)'}, so the kernels take every call")


def lookup_min_L(gpu_name: str, cc: str, triton_version: str, path: str | Path | None = None) -> int | None:
    """``sel_triton_min_L`` for this GPU and Triton release (``cc`` is not used for matching: another
    GPU of the same compute capability is another measurement)."""
    return threshold_for(gpu_name, triton_version, path).min_L


def paths_path() -> Path:
    override = os.environ.get(PATHS_ENV)
    if override:
        return Path(override)
    return Path(str(resources.files("nsa_triton_sel") / "data" / "paths.json"))


@lru_cache(maxsize=8)
def _load_paths(path: str) -> tuple:
    """The path table at ``path``: its entries, parsed and checked (cached: registered as ``path_tables``)."""
    return tuple(_read_entries(path, what="a path table", schema=PATHS_SCHEMA, entry_problem=path_entry_problem,
                               writer="python -m bench.analysis.path_table --write-config")["entries"])


caches.register("path_tables", clear=_load_paths.cache_clear, size=lambda: _load_paths.cache_info().currsize)


def path_entry_problem(e) -> str | None:
    """Why a path-table entry cannot be used, or None."""
    problem = _measured_entry_problem(e)
    if problem:
        return problem
    cells = e.get("cells")
    if not isinstance(cells, list) or not cells:
        return "'cells' must be a non-empty list of measured cells"
    for n, c in enumerate(cells):
        if not isinstance(c, dict) or any(k not in c for k in PATH_CELL_KEYS):
            return f"cells[{n}] must be an object with {', '.join(PATH_CELL_KEYS)}"
        if c["sel"] not in ("random", "local"):
            return f"cells[{n}]: 'sel' must be 'random' or 'local' (got {c['sel']!r})"
        for k in ("T", "h"):
            if type(c[k]) is not int or c[k] < 1:
                return f"cells[{n}]: '{k}' must be a positive integer (got {c[k]!r})"
        for k in PATH_CELL_KEYS[3:]:
            if c[k] is None and k.endswith("_key"):  # the key-major path could not run this cell
                continue
            if isinstance(c[k], bool) or not isinstance(c[k], (int, float)) or not c[k] > 0:
                return f"cells[{n}]: '{k}' must be a positive time in ms (got {c[k]!r})"
    return None


def load_path_entries(path: str | Path | None = None) -> tuple:
    """The path table's entries (``data/paths.json`` unless :data:`PATHS_ENV` names another file), read once per
    path (:func:`refresh` reads it again)."""
    return _load_paths(str(path if path is not None else paths_path()))
