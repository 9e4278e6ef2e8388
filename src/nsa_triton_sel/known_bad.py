"""Known-bad Triton windows (package data ``data/known_bad.toml``) and the runtime guard.

A window is data: a PEP 440 specifier of Triton versions, optionally the GPU architectures it
affects and the checks it explains, and a one-line reason.  Three consumers read it:

- :func:`check_installed`, called by the dispatcher at import, returns the reason when the
  installed Triton is known-bad (for this GPU when one is visible), so it can warn once;
- the pin logic (:mod:`nsa_triton_sel.compat.ledger`) keeps versions under an all-arch window out of
  ``known-good.txt`` and lists every window in ``MATRIX.md``;
- tests and check-upgrade ask :func:`matching` / :func:`expected_failure` whether a failure is
  expected;
- the launch planner (:mod:`nsa_triton_sel.plan`) and the compile-smoke registry read
  :func:`row_cap`: a window with ``max_rows`` names the largest dot M tile that version compiles
  for that arch, so the launchers never hand a larger one to the compiler and the registry skips
  (and lists) the variants above it.  This is the one place that rule is written.  Likewise
  :func:`avoided_paths`: a window with ``paths`` names launch paths the planner does not take there.

Only the standard library and ``packaging`` are imported: this runs at package import.
"""

from __future__ import annotations

import fnmatch
import os
import sys
import warnings
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata, resources
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from . import caches
from .files import read_text
from ._toml import tomllib

SCHEMA = 1


class KnownBadTritonWarning(UserWarning):
    """The installed Triton falls in a known-bad window."""


@dataclass(frozen=True)
class Window:
    id: str
    triton: SpecifierSet
    reason: str
    arch: tuple[int, ...] = ()  # empty: every target
    checks: tuple[str, ...] = ()  # empty: every check
    modes: tuple[str, ...] = ()  # empty: every mode; ("interp",) = a Triton-interpreter-only problem
    link: str = ""
    max_rows: int | None = None  # the largest dot M tile that compiles there; the launchers cap at it
    signature: str = ""  # a failure is this window's only if its message contains this ("" = any failure)
    variants: tuple[str, ...] = ()  # compile-variant name patterns (fnmatch) the window names: skipped there
    paths: tuple[str, ...] = ()  # launch paths (PATHS) the planner does not take there; their variants are skipped

    @property
    def mitigated(self) -> bool:
        """The planner steers around it (a row cap, or launch paths it does not take): no runtime warning."""
        return self.max_rows is not None or bool(self.paths)

    def names(self, variant: str) -> bool:
        """Whether the window names this compile variant (one of its ``variants`` patterns, or of its
        ``paths``' variants, matches)."""
        patterns = self.variants + tuple(pat for p in self.paths for pat in PATHS[p])
        return any(fnmatch.fnmatchcase(variant, pat) for pat in patterns)

    def explains(self, message: str | None) -> bool:
        """Whether a failure with this message is the window's own (its ``signature`` is in it)."""
        return not self.signature or self.signature in (message or "")

    def covers(self, version: str | Version, arch: int | None = None, check: str | None = None,
               mode: str | None = None) -> bool:
        """Whether this window applies to that Triton (and arch/check/mode when given).

        An arch-specific window does not cover a question asked without an arch: the caller does
        not know the target, so it cannot claim the failure.  The same holds for a mode-specific
        window asked without a mode.  Pre-releases inside the range count (``3.5.0rc1`` is
        inside ``>=3.4,<3.7.1``; ``3.4.0rc1`` is not inside ``>=3.4``, as PEP 440 orders it first).
        """
        v = version if isinstance(version, Version) else Version(version)
        if not self.triton.contains(v, prereleases=True):
            return False
        if self.arch and (arch is None or int(arch) not in self.arch):
            return False
        if self.modes and (mode is None or mode not in self.modes):
            return False
        return not (self.checks and check is not None and check not in self.checks)

    @property
    def all_arch(self) -> bool:
        return not self.arch

    @property
    def interp_only(self) -> bool:
        """A defect of the Triton interpreter, not of compiled kernels: never excludes a release."""
        return bool(self.modes) and set(self.modes) <= {"interp"}

    def describe(self) -> str:
        where = f" on sm_{'/'.join(map(str, self.arch))}" if self.arch else ""
        where += f" ({'/'.join(self.modes)} only)" if self.modes else ""
        return f"triton {self.triton}{where}: {self.reason}"


def default_path() -> Path | None:
    """``$NSA_SEL_KNOWN_BAD``, else the windows shipped as package data (``data/known_bad.toml``).

    The data travels inside the wheel, so an installed package has the same guard as a checkout.
    """
    env = os.environ.get("NSA_SEL_KNOWN_BAD")
    if env:
        return Path(env)
    packaged = Path(str(resources.files("nsa_triton_sel") / "data" / "known_bad.toml"))
    return packaged if packaged.exists() else None


def parse(text: str, source: str = "<known-bad>") -> list[Window]:
    """Windows from TOML text; every field is validated so a typo fails loudly, not silently."""
    data = tomllib.loads(text)
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{source}: schema {data.get('schema')!r}, this code reads {SCHEMA}")
    windows = []
    for raw in data.get("window", []):
        missing = {"id", "triton", "reason"} - raw.keys()
        if missing:
            raise ValueError(f"{source}: window {raw.get('id', '?')!r} lacks {sorted(missing)}")
        windows.append(
            Window(
                id=raw["id"],
                triton=SpecifierSet(raw["triton"]),
                reason=raw["reason"],
                arch=tuple(int(a) for a in raw.get("arch", ())),
                checks=tuple(raw.get("checks", ())),
                modes=_modes(raw.get("modes", ()), raw["id"], source),
                link=raw.get("link", ""),
                max_rows=_max_rows(raw.get("max_rows"), raw["id"], source),
                signature=str(raw.get("signature", "")),
                variants=tuple(str(p) for p in raw.get("variants", ())),
                paths=_paths(raw.get("paths", ()), raw["id"], source),
            )
        )
    return windows


MIN_ROWS = 16  # tl.dot's smallest M on every Triton 3.x


def _max_rows(raw, wid: str, source: str) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < MIN_ROWS or raw & (raw - 1):
        raise ValueError(f"{source}: window {wid!r} has max_rows = {raw!r}; accepted: a power of two >= {MIN_ROWS}")
    return raw


MODES = ("aot", "interp", "gpu", "cpu")

# Launch paths a window can steer the planner off, with the compile variants (fnmatch) each launches.
PATHS = {"keymajor": ("sel_fwd_keymajor*", "sel_bwd_keymajor*", "sel_bwd_dq_keymajor*")}


def _paths(raw, wid: str, source: str) -> tuple[str, ...]:
    bad = set(raw) - set(PATHS)
    if bad:
        raise ValueError(f"{source}: window {wid!r} has unknown paths {sorted(bad)}; known: {sorted(PATHS)}")
    return tuple(raw)


def _modes(raw, wid: str, source: str) -> tuple[str, ...]:
    bad = set(raw) - set(MODES)
    if bad:
        raise ValueError(f"{source}: window {wid!r} has unknown modes {sorted(bad)}; known: {MODES}")
    return tuple(raw)


def load(path: Path | None = None) -> list[Window]:
    """The windows in ``path`` (default: :func:`default_path`); none if there is no file."""
    path = path or default_path()
    if path is None or not Path(path).exists():
        return []
    return parse(read_text(path), str(path))  # a regular file only: a FIFO named here is an error, not a hang


@lru_cache(maxsize=1)
def _cached() -> tuple[Window, ...]:
    return tuple(load())


caches.register("known_bad_windows", clear=_cached.cache_clear, size=lambda: _cached.cache_info().currsize)


def matching(version: str, arch: int | None = None, check: str | None = None,
             windows: list[Window] | None = None, mode: str | None = None) -> list[Window]:
    """Every window covering that Triton version (and arch/check/mode when given)."""
    pool = _cached() if windows is None else windows
    return [w for w in pool if w.covers(version, arch, check, mode)]


def touching(version: str, windows: list[Window] | None = None) -> list[Window]:
    """Every window whose Triton range covers the version, whatever its arch or checks."""
    pool = _cached() if windows is None else windows
    v = Version(version)
    return [w for w in pool if w.triton.contains(v, prereleases=True)]


def expected_failure(version: str, arch: int | None = None, check: str | None = None,
                     windows: list[Window] | None = None, mode: str | None = None,
                     message: str | None = None, variant: str | None = None) -> str | None:
    """The reason a failure of ``check`` is expected there, or None (for xfail marks).

    With ``message`` (what the failure said), a window with a ``signature`` claims it only if the
    message carries that signature: any other failure in the window stays a failure.  With ``variant``
    (the compile variant that failed), a window naming variants (``variants``, ``paths``) claims only those.
    """
    hits = [w for w in matching(version, arch, check, windows, mode)
            if (message is None or w.explains(message))
            and (variant is None or not (w.variants or w.paths) or w.names(variant))]
    return "; ".join(f"[{w.id}] {w.reason}" for w in hits) or None


def row_cap(version: str | None, arch: int | None, windows: list[Window] | None = None) -> int | None:
    """The largest dot M tile (rows per program) Triton ``version`` compiles for ``arch``, or None (no cap).

    The smallest ``max_rows`` of the windows covering that version and arch.  Without a version
    (no Triton) or an arch (the interpreter) nothing is capped.
    """
    if not version or arch is None:
        return None
    caps = [w.max_rows for w in matching(version, arch, None, windows) if w.max_rows is not None]
    return min(caps) if caps else None


def avoided_paths(version: str | None, arch: int | None, windows: list[Window] | None = None) -> frozenset[str]:
    """The launch paths (:data:`PATHS`) the planner must not take with Triton ``version`` on ``arch``: those the
    covering windows name.  Without a version or an arch (the interpreter) none."""
    if not version or arch is None:
        return frozenset()
    return frozenset(p for w in matching(version, arch, None, windows) for p in w.paths)


def excluding_windows(version: str, windows: list[Window] | None = None) -> list[Window]:
    """All-arch windows covering the version: these keep it out of known-good.txt.

    Interpreter-only windows never do: they describe the test harness, not the compiled kernel.
    """
    pool = _cached() if windows is None else windows
    v = Version(version)
    return [w for w in pool if w.all_arch and not w.interp_only and w.triton.contains(v, prereleases=True)]


def _installed_triton() -> str | None:
    try:
        return metadata.version("triton")
    except metadata.PackageNotFoundError:
        return None


def _current_arch() -> int | None:
    """Compute capability of device 0 as an int (90), only if torch is already imported."""
    torch = sys.modules.get("torch")  # never import torch from here
    try:
        if torch is not None and torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability(0)
            return major * 10 + minor
    except Exception:  # noqa: BLE001 - a guard must never break the import
        return None
    return None


def check_installed(arch: int | None = None, windows: list[Window] | None = None) -> str | None:
    """The reason the installed Triton is known-bad here, or None.

    ``arch`` defaults to the visible GPU's compute capability; without a GPU only all-arch
    windows apply.  Never raises: a broken windows file or version is reported as None plus a
    warning, because the dispatcher calls this at import.
    """
    version = _installed_triton()
    if version is None:
        return None
    interp = os.environ.get("TRITON_INTERPRET") == "1"
    try:
        arch = arch if arch is not None else _current_arch()
        # Kernels run compiled on a visible GPU: windows of the "gpu" mode (wrong results or slow
        # there) apply; under the interpreter only "interp" ones; without either, mode-free ones.
        mode = "interp" if interp else ("gpu" if arch is not None else None)
        # A mitigated window is handled (the launchers cap the tile or take another path there): no warning.
        hits = [w for w in (_cached() if windows is None else windows)
                if w.covers(version, arch, None, mode) and not w.mitigated]
    except (InvalidVersion, ValueError, OSError) as exc:
        warnings.warn(f"known-bad windows unreadable: {exc}", KnownBadTritonWarning, stacklevel=2)
        return None
    if not hits:
        return None
    return f"Triton {version} is known-bad: " + "; ".join(f"{w.reason} [{w.id}]" for w in hits)


def warn_if_known_bad(arch: int | None = None) -> str | None:
    """Emit a :class:`KnownBadTritonWarning` naming the reason; returns it (or None)."""
    reason = check_installed(arch)
    if reason:
        warnings.warn(reason, KnownBadTritonWarning, stacklevel=2)
    return reason
