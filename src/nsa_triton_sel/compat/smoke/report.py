"""What one ``nsa-sel smoke`` run found: one :class:`SmokeResult` per compile, the :class:`SmokeReport`.

The report's JSON (``to_json``) is what the ledger reads (:func:`..ledger.records_from_smoke`).
Exit status of a run: 0 all variants ``ok`` and all canaries as expected; 1 a variant is not
``ok``; 3 only a canary differs from its expectation; 4 the children imported a Triton other
than the one the run was started for (``--expect-triton``): no verdict of that run is about
the Triton it names.
"""

from __future__ import annotations

import json
import platform
import sys
from dataclasses import asdict, dataclass, field

from packaging.version import InvalidVersion, Version

from ..core.verdicts import OK

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_CANARY, EXIT_WRONG_TRITON = 0, 1, 2, 3, 4


@dataclass
class SmokeResult:
    """One compile's verdict (one row of the JSON ``results``)."""

    spec: str
    kernel: str
    arch: int
    verdict: str
    message: str = ""
    canary: bool = False
    expected: list | None = None
    as_expected: bool | None = None
    seconds: float = 0.0
    metrics: dict = field(default_factory=dict)
    returncode: int | None = None
    stderr_tail: str = ""
    imported: dict = field(default_factory=dict)  # {"triton": ..., "numpy": ..., "torch": ...} of the child


@dataclass
class SmokeReport:
    """Everything one run found; ``to_json()`` is the ledger's input format (schema 2)."""

    triton: str  # what the children imported (the probes'), or the expected release when none said
    archs: list
    jobs: int
    env: dict
    started: str
    wall_s: float = 0.0
    results: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    static: dict = field(default_factory=dict)
    expected_triton: str | None = None  # the release the run was started for (a lane's declared one)
    python: str = field(default_factory=platform.python_version)
    platform: str = field(default_factory=platform.platform)
    executable: str = field(default_factory=lambda: sys.executable)

    @property
    def failed(self) -> list[SmokeResult]:
        """Non-canary results whose verdict is not ``ok``."""
        return [r for r in self.results if not r.canary and r.verdict != OK]

    @property
    def canary_mismatches(self) -> list[SmokeResult]:
        return [r for r in self.results if r.canary and r.as_expected is False]

    @property
    def imported_tritons(self) -> list[str]:
        """Every Triton version a child imported (more than one, or another than expected: a leak)."""
        return sorted({r.imported.get("triton") for r in self.results if r.imported.get("triton")})

    @property
    def wrong_triton(self) -> list[str]:
        """Imported versions that are not the expected release (empty without an expectation)."""
        if not self.expected_triton:
            return []
        return [v for v in self.imported_tritons if not _same(v, self.expected_triton)]

    @property
    def exit_code(self) -> int:
        if self.wrong_triton:
            return EXIT_WRONG_TRITON
        if self.failed:
            return EXIT_FAILED
        return EXIT_CANARY if self.canary_mismatches else EXIT_OK

    def to_dict(self) -> dict:
        return {
            "schema": 2, "tool": "nsa-sel smoke", "triton": self.triton, "expected_triton": self.expected_triton,
            "imported_tritons": self.imported_tritons, "python": self.python, "platform": self.platform,
            "executable": self.executable, "started": self.started, "wall_s": round(self.wall_s, 2),
            "jobs": self.jobs, "archs": list(self.archs), "env": self.env,
            "results": [asdict(r) for r in self.results], "skipped": self.skipped, "static": self.static,
        }

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent)


def _same(a: str, b: str) -> bool:
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b
