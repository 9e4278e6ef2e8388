"""Every cache of the runtime, in one registry: register, clear, report.

A call remembers what it learnt about a signature (checked structure, route, plan, prepared launch,
pinned landing buffers, sharing measurements, device records, kernel failures) so a repeated call
(a decode step, a training step) skips the work.  Each such table registers here once, at import,
with a name; :func:`clear` empties all of them (``config.refresh`` calls it after a flag, the
thresholds file or ``TRITON_INTERPRET`` changed), and :func:`report` says what each holds.

Pure Python, no imports of the package: any module may register.
"""

from __future__ import annotations

from typing import Callable

_TABLES: dict[str, tuple[Callable[[], None], Callable[[], int]]] = {}


def register(name: str, table=None, *, clear: Callable[[], None] | None = None,
             size: Callable[[], int] | None = None):
    """Register a cache under ``name``: a dict-like ``table`` (its ``clear`` and ``len``), or the two callables.
    Returns ``table`` (so ``_PLANS = caches.register("plans", {})`` reads as a declaration)."""
    if table is not None:
        clear = clear or table.clear
        size = size or (lambda: len(table))
    if clear is None:
        raise TypeError(f"cache {name!r}: give a table or a clear function")
    _TABLES[name] = (clear, size or (lambda: -1))
    return table


def clear() -> None:
    """Empty every registered cache."""
    for clear_fn, _ in _TABLES.values():
        clear_fn()


def report() -> dict[str, int]:
    """``{name: entries}`` of every registered cache (``-1``: the cache cannot count itself)."""
    return {name: size() for name, (_, size) in sorted(_TABLES.items())}
