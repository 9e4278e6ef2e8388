"""bench/results/: folders named by what they hold, each with a README, no code, and every
reference to a result file pointing at one that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
FOLDERS = sorted(p for p in RESULTS.iterdir() if p.is_dir())
# Where results are cited: the README, docs/, bench's READMEs, the plots, the package data whose text MATRIX.md renders
# (known_bad.toml, canaries/notes.toml), the thresholds' sources.
CITING = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md",
          *sorted((ROOT / "bench").glob("*/README.md")), ROOT / "bench" / "analysis" / "plots.py", RESULTS / "README.md",
          ROOT / "constraints" / "HISTORY.md", ROOT / "src" / "nsa_triton_sel" / "data" / "known_bad.toml",
          ROOT / "src" / "nsa_triton_sel" / "data" / "thresholds.json",
          ROOT / "src" / "nsa_triton_sel" / "compat" / "canaries" / "notes.toml",
          *sorted(RESULTS.glob("*/README.md")), *sorted(RESULTS.glob("*/*/README.md"))]


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_a_results_folder_says_what_it_holds(folder):
    assert (folder / "README.md").is_file(), f"{folder.name} has no README.md saying what it holds"
    # date-machine-triton...-what (plots/ is drawn, not measured: named by what it holds)
    assert folder.name == "plots" or re.fullmatch(r"\d{4}-\d\d-\d\d-(h100|h200|cpu)-triton\d\.\d[\w.-]*-[a-z][\w.-]+",
                                                  folder.name), folder.name


def test_nothing_in_results_is_named_after_how_the_work_was_organised_nor_is_code():
    bad = [p.relative_to(RESULTS) for p in RESULTS.rglob("*") if re.search(r"session|issue\d|issue-?\d", p.name)]
    assert not bad, bad
    code = [p.relative_to(RESULTS) for p in RESULTS.rglob("*.py")]
    assert not code, f"code belongs in bench/, not in results: {code}"


def test_every_cited_result_exists():
    missing = []
    for path in CITING:
        for ref in re.findall(r"(?:bench/|`)results/[\w.\-/]+", path.read_text()):  # bench/README.md: `results/...`
            target = ROOT / ("bench/" + ref.lstrip("`") if ref.startswith("`") else ref).rstrip(".")
            if "X" not in target.name and "*" not in ref and not target.exists():
                missing.append(f"{path.relative_to(ROOT)}: {ref}")
    assert not missing, missing
