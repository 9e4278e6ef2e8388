"""A fake package index in the PyPI JSON API layout, as a directory tree read through ``file://``
(``<root>/<project>/json``, ``<root>/<project>/<version>/json``), for ``nsa-sel releases`` tests.

``python tests/compat/commands/fake_index.py DIR`` writes the default one: every release of lanes.toml plus
Triton 3.10.0 (new, pinned by a new torch 2.16.0), torch 2.15.1 (new, pins the tested 3.9.0), a yanked
3.6.1, a pre-release and a Triton 2.x release that the watcher must ignore.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from nsa_triton_sel.compat.core import lane_table, project

FILE = [{"filename": "x.whl", "yanked": False}]
YANKED = [{"filename": "x.whl", "yanked": True}]


def default_releases(table: lane_table.Table) -> tuple[dict, dict]:
    """``(triton releases -> files, torch release -> its triton requirement or None)``."""
    tritons = {r.triton: FILE for r in table.releases}
    tritons.update({"3.10.0": FILE, "3.11.0rc1": FILE, "3.6.1": YANKED, "2.3.1": FILE})
    torch = {}
    for r in table.releases:
        for t in r.torch:
            torch[t] = "~=3.8.0" if t.startswith("2.14.") else f"=={r.triton}"
    torch.update({"2.15.1": "==3.9.0", "2.16.0": "==3.10.0", "2.3.0": "==2.3.1"})
    return tritons, torch


def write_index(root: Path, tritons: dict, torch: dict) -> str:
    """Write the tree under ``root``; returns its ``file://`` URL."""
    (root / "triton").mkdir(parents=True, exist_ok=True)
    (root / "triton" / "json").write_text(json.dumps({"info": {"name": "triton"}, "releases": tritons}))
    (root / "torch").mkdir(parents=True, exist_ok=True)
    (root / "torch" / "json").write_text(json.dumps({"info": {"name": "torch"},
                                                     "releases": {v: FILE for v in torch}}))
    for version, spec in torch.items():
        reqs = ["filelock", "typing-extensions>=4.10.0", "numpy; extra == \"numpy\""]
        if spec:
            reqs.append(f"triton{spec}; platform_system == \"Linux\" and platform_machine == \"x86_64\"")
        (root / "torch" / version).mkdir(exist_ok=True)
        (root / "torch" / version / "json").write_text(json.dumps({"info": {"name": "torch", "version": version,
                                                                            "requires_dist": reqs}}))
    return root.resolve().as_uri()


if __name__ == "__main__":
    table = lane_table.load_table(project.constraints_dir() / "lanes.toml")
    print(write_index(Path(sys.argv[1]), *default_releases(table)))
