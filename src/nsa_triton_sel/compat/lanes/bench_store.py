"""pytest-benchmark storage for the bench lanes, and the ``--benchmark-compare-fail`` gate of check-upgrade.

Every ``bench-X`` run is saved in one storage (``<results>/benchmarks``, or ``$NSA_SEL_BENCH_STORAGE``)
under the name of its Triton release: ``<storage>/<machine id>/NNNN_<triton>.json``, pytest-benchmark's
own layout, so any two lanes compare with its own command::

    pytest-benchmark --storage file://out/lanes/benchmarks compare '*_3.6.0' '*_3.9.0' --group-by=group --columns=median

On a GPU machine, ``nsa-sel check-upgrade`` finds the saved run of its baseline release in that storage
and runs the candidate's bench lane with ``--benchmark-compare=NNNN --benchmark-compare-fail=median:P%``
(P from ``--max-slowdown``): pytest-benchmark then fails the run when a benchmark's median regressed,
the lane records that as a failed ``(benchmark-compare)`` bench record, and the upgrade is BLOCKED.
Standard library only.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

STORAGE_ENV = "NSA_SEL_BENCH_STORAGE"
COMPARE_ENV = "NSA_SEL_BENCH_COMPARE"  # a saved run's number (NNNN) in the storage
COMPARE_FAIL_ENV = "NSA_SEL_BENCH_COMPARE_FAIL"  # pytest-benchmark's expression, e.g. "median:10%"
GATE_KERNEL = "(benchmark-compare)"


def storage(results: Path) -> Path:
    return Path(os.environ.get(STORAGE_ENV) or Path(results) / "benchmarks")


def pytest_args(results: Path, triton: str) -> list[str]:
    """What a bench lane adds to pytest: save the run under its release; compare when the gate is armed."""
    args = [f"--benchmark-storage=file://{storage(results).resolve()}", f"--benchmark-save={triton}"]
    compare, fail = os.environ.get(COMPARE_ENV), os.environ.get(COMPARE_FAIL_ENV)
    if compare:
        args.append(f"--benchmark-compare={compare}")
        if fail:
            args.append(f"--benchmark-compare-fail={fail}")
    return args


def gate_armed() -> str | None:
    """The compare-fail expression when this run is gated, else None."""
    return os.environ.get(COMPARE_FAIL_ENV) if os.environ.get(COMPARE_ENV) else None


def saved_run(store: Path, triton: str) -> Path | None:
    """The newest saved run of ``triton`` in the storage (any machine folder), or None."""
    pattern = re.compile(rf"^(\d{{4}})_{re.escape(triton)}\.json$")
    found = [p for p in Path(store).glob("*/*.json") if pattern.match(p.name)]
    return max(found, key=lambda p: (p.stat().st_mtime, p.name)) if found else None


def arm_gate(baseline: str | None, max_slowdown: float, results: Path) -> str:
    """Set the gate's environment for the candidate's bench lane (child processes inherit it); a message."""
    store = storage(results)
    run = saved_run(store, baseline) if baseline else None
    if run is None:
        return (f"check-upgrade: no saved benchmark run of the baseline {baseline or '(none)'} in {store}: "
                "medians are compared with the ledger's bench records only (run `nox -s bench-X` first to gate)")
    os.environ[STORAGE_ENV] = str(store)
    os.environ[COMPARE_ENV] = run.name[:4]
    os.environ[COMPARE_FAIL_ENV] = f"median:{max_slowdown * 100:g}%"
    return (f"check-upgrade: the candidate's benchmarks are compared with {run} "
            f"(--benchmark-compare-fail={os.environ[COMPARE_FAIL_ENV]})")
