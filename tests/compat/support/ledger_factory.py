"""Records for the ledger tests: a small table, a CPU fingerprint, runs of pass/fail verdicts."""

from __future__ import annotations

from nsa_triton_sel.compat.core import lane_table
from nsa_triton_sel.compat import ledger

LANE_31 = lane_table.Lane(label="3.1", triton="3.1.0", torch=("2.5.1",), python=">=3.9", numpy="<2")
LANE_33 = lane_table.Lane(label="3.3", triton="3.3.1", torch=("2.7.1",), python=">=3.9", numpy="<2.4")
LANE_35 = lane_table.Lane(label="3.5", triton="3.5.1", torch=("2.9.1",), python=">=3.10", numpy="<2.4")
LANE_39 = lane_table.Lane(label="3.9", triton="3.9.0", torch=("2.15.0",), python=">=3.11", numpy=">=1.26")
PATCH_330 = lane_table.Lane(label="3.3", triton="3.3.0", torch=("2.7.0",), python=">=3.9", numpy="<2.4", patch=True)
PATCH_350 = lane_table.Lane(label="3.5", triton="3.5.0", torch=("2.9.0",), python=">=3.10", numpy="<2.4", patch=True)
TABLE = lane_table.Table(lanes=(LANE_31, LANE_33, LANE_35, LANE_39), patches=(PATCH_330, PATCH_350),
                    required=("compile", "parity"))
CPU_FP = {"python": "3.11.7", "torch": "2.13.0+cpu", "cuda_runtime": None, "numpy": "1.26.4",
          "git_commit": "abc", "triton_env": {"TRITON_DEFAULT_FP_FUSION": "1", "TRITON_CACHE_DIR": "/x"}}
DATE = "2026-11-22T16:00:00+00:00"


def release(name: str) -> lane_table.Lane:
    """A lane by label ("3.5" -> 3.5.1) or a release by version ("3.5.0", a patch)."""
    return TABLE.lane(name) if name in TABLE.labels else TABLE.for_version(name)


def base(version, check, date=DATE, mode=None, fp=CPU_FP):
    lane = release(version)
    mode = mode or {"compile": "aot", "parity": "interp", "bench": "cpu"}[check]
    imported = {"triton": lane.triton, "numpy": "1.26.4", "torch": "2.13.0+cpu"}
    return ledger.base_record(lane, {**fp, "imported": imported, "date": date}, check=check, mode=mode,
                              session=f"{check}-{lane.name}", run_id=f"{check}-{lane.name}@{date}")


def recs(version, check, verdicts, date=DATE, **kw):
    b = base(version, check, date, **kw)
    return [ledger.record(b, kernel=f"k{i}", verdict=v, message=f"{v} msg {i}") for i, v in enumerate(verdicts)]


def all_pass(version, date=DATE):
    return recs(version, "compile", ["pass", "pass"], date) + recs(version, "parity", ["pass"] * 3, date)


def mixed():
    out = all_pass("3.1") + all_pass("3.5") + all_pass("3.9")
    out += recs("3.3", "compile", ["pass", "fail"]) + recs("3.3", "parity", ["pass"])
    return out


def write_runs(results, records):
    by_session = {}
    for r in records:
        by_session.setdefault(r["session"], []).append(r)
    for session, rs in by_session.items():
        ledger.write_run(ledger.run_file(results, session), base=rs[0], status="complete",
                         started=rs[0]["date"], records=rs)


def table_toml() -> str:
    """:data:`TABLE` written as a lanes.toml."""
    out = ['schema = 1\n[matrix]\nrequired = ["compile", "parity"]\n']
    for lane in TABLE.lanes:
        out.append(f'\n[[lane]]\nlabel = "{lane.label}"\ntriton = "{lane.triton}"\ntorch = {list(lane.torch)!r}\n'
                   f'python = "{lane.python}"\nnumpy = "{lane.numpy}"\n'.replace("'", '"'))
        for patch in (p for p in TABLE.patches if p.label == lane.label):
            out.append(f'\n[[lane.patch]]\ntriton = "{patch.triton}"\ntorch = {list(patch.torch)!r}\n'.replace("'", '"'))
    return "".join(out)


TABLE_TOML = table_toml()


def constraints_dir(tmp_path):
    """A constraints directory holding :data:`TABLE` as lanes.toml (and nothing else yet)."""
    cdir = tmp_path / "constraints"
    cdir.mkdir(parents=True, exist_ok=True)
    (cdir / "lanes.toml").write_text(TABLE_TOML)
    return cdir
