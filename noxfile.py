"""Triton compatibility matrix: compile-X / parity-X / bench-X per release of constraints/lanes.toml.

  nox                                the newest lane's compile-X parity-X (X: `python -m nsa_triton_sel.compat.core.lane_table --newest`)
  nox -s parity-3.1 bench-3.1        one lane (compile runs first) nox -t compile parity   every CPU lane
  nox -s compile-3.3.0               a patch release of lane 3.3   nox -s constraints      regenerate triton-X.txt
  nox -s check-upgrade -- 3.10.0     pre-upgrade check (add --admit to record a SAFE one)
  nox -t compile -- --specs M --results DIR   your own kernels (a spec module) on every release's compile lane,
                                     then `nsa-sel matrix --results DIR` (never this project's ledger)
  nox -s pin                         maintainers: merge run files into the tracked ledger, MATRIX.md, known-good.txt

compile-X: AOT compile smoke (nsa-sel smoke, no GPU needed) for this machine's GPU's arch, else sm_90;
`-- --all-archs` (NSA_SEL_ARCHS=all) compiles every arch of lanes.toml, as CI does (`-- --archs 80,90`: those).
parity-X: GPU parity, or without a GPU the interpreter suite (pytest -m interp) with the lane's numpy after an
interpreter probe.  bench-X: pytest-benchmark vs SDPA on a GPU (FlexAttention left out: NSA_BENCH_FLEX=1 puts it
back), else a recorded skip.  After `--`: --results DIR
(NSA_SEL_RESULTS), --wheelhouse DIR (NSA_SEL_WHEELHOUSE, offline), --torch SPEC (NSA_SEL_TORCH, CPU lanes),
--allow-off-pair (NSA_SEL_ALLOW_OFF_PAIR=1); the rest goes to pytest.  Compiles run one per usable core
(NSA_SEL_JOBS=N overrides).  NSA_SEL_GPU=0/1 forces the flavour.  --no-venv runs a lane in the current
environment when its exact Triton is installed there.

Every lane imports its own Triton and numpy (a CPU lane borrows only torch from this environment);
what each process imported is recorded and checked.  The session bodies live in
src/nsa_triton_sel/compat/lanes/nox_sessions.py; this file only declares them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nox

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.error_on_external_run = False

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "src"))  # the toolkit needs only the stdlib and packaging (a nox dependency)

from nsa_triton_sel.compat.core import lane_table, machine  # noqa: E402
from nsa_triton_sel.compat.lanes import nox_sessions  # noqa: E402

TABLE = lane_table.load_table(ROOT / "constraints" / "lanes.toml")
MATRIX = nox_sessions.Matrix(table=TABLE, root=ROOT, gpu=machine.gpu_mode())
nox.options.sessions = [f"compile-{TABLE.newest().name}", f"parity-{TABLE.newest().name}"]


def _lane_session(kind: str, lane: lane_table.Lane) -> None:
    """Register ``{kind}-{lane.name}``: parity and bench require the lane's compile session."""

    def session_fn(session: nox.Session) -> None:
        nox_sessions.run_lane(session, lane, kind, MATRIX)

    session_fn.__doc__ = nox_sessions.describe(kind, lane, TABLE)
    session_fn.__name__ = f"{kind}_{lane.name}".replace(".", "_").replace("-", "_")
    tags = [kind, f"triton-{lane.label}"] + (["patch"] if lane.patch else []) + (["candidate"] if lane.candidate else [])
    globals()[session_fn.__name__] = nox.session(
        name=f"{kind}-{lane.name}",
        tags=tags,
        requires=None if kind == "compile" else [f"compile-{lane.name}"],
        venv_backend="none" if (kind == "bench" and not MATRIX.gpu) else None,  # a CPU bench records a skip
        default=False,
    )(session_fn)


for _release in TABLE.releases:
    for _kind in nox_sessions.KINDS:
        _lane_session(_kind, _release)

if os.environ.get("NSA_SEL_CANDIDATE"):  # check-upgrade's temporary lane
    for _kind in nox_sessions.KINDS:
        _lane_session(_kind, lane_table.candidate_lane(os.environ["NSA_SEL_CANDIDATE"], TABLE))


@nox.session(venv_backend="none", default=False, tags=["ledger"])
def pin(session: nox.Session) -> None:
    """Merge lane run files into constraints/ledger.jsonl; render MATRIX.md and known-good.txt."""
    nox_sessions.pin(session)


@nox.session(venv_backend="none", default=False, tags=["ledger"])
def constraints(session: nox.Session) -> None:
    """Regenerate constraints/triton-X.txt from constraints/lanes.toml."""
    nox_sessions.constraints(session, MATRIX)


@nox.session(name="check-upgrade", venv_backend="none", default=False, tags=["ledger"])
def check_upgrade(session: nox.Session) -> None:
    """Pre-upgrade check of a Triton release: nox -s check-upgrade -- 3.10.0 [--admit]."""
    from nsa_triton_sel.compat.commands import upgrade  # noqa: PLC0415 - only this session needs it

    upgrade.nox_session(session)


if __name__ == "__main__":
    nox.main()
