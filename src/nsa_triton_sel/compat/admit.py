"""``nsa-sel check-upgrade VERSION --admit``: record a SAFE candidate as a release of the table.

Admitting does three things, in this order, each re-runnable:

1. the release joins ``constraints/lanes.toml`` when it is not there yet: as a ``[[lane.patch]]``
   of the lane of its minor, or as a new ``[[lane]]`` that follows the rules of the lanes around
   it (:func:`.core.lane_table.rules_for`); its torch list starts empty (no torch release is known to pin
   it) and the per-lane constraints files are regenerated;
2. the candidate's records are relabelled as that release's (lane, session names, no
   ``candidate`` flag);
3. ``nsa-sel pin`` merges them into the ledger and re-renders MATRIX.md and known-good.txt.
"""

from __future__ import annotations

import json
from pathlib import Path

from packaging.version import Version

from .core import lane_table, project
from .core.atomic import atomic_write_text, read_text
from . import ledger


def release_block(version: str, table: lane_table.Table) -> tuple[str | None, str]:
    """(label of the lane to attach to, or None for a new lane; the TOML text to add)."""
    v = Version(version)
    same = [lane for lane in table.lanes if (lane.version.major, lane.version.minor) == (v.major, v.minor)]
    note = "# admitted by `nsa-sel check-upgrade --admit`: no torch release is known to pin it yet"
    if same:
        return same[0].label, f"[[lane.patch]]\n{note}\ntriton = {json.dumps(str(v))}\ntorch = []\n"
    rules, why = lane_table.rules_for(version, table)
    lines = ["[[lane]]", note, f'label = "{v.major}.{v.minor}"', f"triton = {json.dumps(str(v))}", "torch = []",
             f"python = {json.dumps(rules.python)}", f"numpy = {json.dumps(rules.numpy)}",
             f"numpy_reason = {json.dumps(f'from {why}: {rules.numpy_reason}')}"]
    if rules.extras:
        lines += [f"extras = {json.dumps(list(rules.extras))}", f"extras_reason = {json.dumps(rules.extras_reason)}"]
    return None, "\n".join(lines) + "\n"


def add_release(table_path: Path, version: str) -> None:
    """Insert the release into lanes.toml (after its lane's block, or as a new lane at the end)."""
    table = lane_table.load_table(table_path)
    if table.for_version(version):
        return
    label, block = release_block(version, table)
    lines = read_text(table_path).splitlines(keepends=True)
    at = len(lines)
    if label is not None:
        start = next(i for i, ln in enumerate(lines) if ln.strip() == f'label = "{label}"')
        at = next((i for i in range(start, len(lines)) if lines[i].strip() == "[[lane]]"), len(lines))
    text = "".join(lines[:at]).rstrip("\n") + "\n\n" + block + ("\n" + "".join(lines[at:]) if at < len(lines) else "")
    atomic_write_text(table_path, text)
    lane_table.load_table(table_path)  # what was written must parse


def relabel(rec: dict, release: lane_table.Lane) -> dict:
    """A candidate record as a record of ``release``."""
    out = {**rec, "candidate": False, "lane": release.label, "triton": release.triton}
    for key in ("session", "run_id"):
        if isinstance(out.get(key), str):
            out[key] = out[key].replace("-candidate", f"-{release.name}", 1)
    return out


def admit(version: str, cand_recs: list[dict], cdir: Path, ledger_path: Path, log=print) -> None:
    table_path = cdir / project.TABLE_NAME
    add_release(table_path, version)
    table = lane_table.load_table(table_path)
    release = table.for_version(version)
    changed = lane_table.write_constraints(table, cdir)
    log(f"admit: triton {version} is {'lane ' + release.label if not release.patch else 'a patch of lane ' + release.label}"
        f" in {table_path}" + (f"; rewrote {', '.join(p.name for p in changed)}" if changed else ""))
    recs = [relabel(r, release) for r in cand_recs]
    ledger.pin([], ledger_path, cdir / "MATRIX.md", cdir / "known-good.txt", table=table, admitted=recs, log=log)
