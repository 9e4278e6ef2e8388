"""``tomllib`` on every supported Python: the standard library from 3.11, ``tomli`` before.

One place for the shim, so the known-bad windows (library) and the lanes table (toolkit) read
TOML the same way.
"""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - pyproject.toml requires tomli there
    import tomli as tomllib

loads = tomllib.loads
TOMLDecodeError = tomllib.TOMLDecodeError

__all__ = ["TOMLDecodeError", "loads", "tomllib"]
