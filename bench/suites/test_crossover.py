"""The crossover of this (GPU, Triton release): where, if anywhere, the dispatcher's packed-SDPA path
beats the kernels, written as this release's ``sel_triton_min_L`` thresholds entry.

A ``bench-X`` lane on a GPU runs it with the rest of the bench suite: a short sweep of
``python -m bench.perf.bench_sel_triton`` (one span and mixed spans, L from 1 to 1024) judged by
``python -m bench.analysis.sel_threshold_from_csv`` against the fallback the dispatcher would run
(gather + SDPA), which writes the entry for exactly this GPU and Triton release into
``NSA_SEL_THRESHOLDS_OUT`` (default: the package's ``data/thresholds.json`` in this checkout, so
the lane's result is a diff to commit); the sweep's CSVs and report go to ``NSA_SEL_CROSSOVER_DIR``
(default: the test's temporary directory) and the entry's ``source`` names them.  A sweep row that
failed fails the test (a failed row would otherwise read as "SDPA faster" and write ``null``).  The
entry's value is recorded as a test property, so the ledger shows it beside the lane's other bench
records.

``NSA_BENCH_DRYRUN=1`` runs the same steps on the CPU with tiny shapes and a modelled clock
(``--allow-fake``) into a temporary file: it checks the plumbing, never writes the package's file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from bench.analysis import sel_threshold_from_csv
from bench.perf import bench_sel_triton

DRY = os.environ.get("NSA_BENCH_DRYRUN") == "1"
OUT_ENV = "NSA_SEL_THRESHOLDS_OUT"

GPU_SWEEP = ["--N", "1024", "--H", "8", "--D", "128", "--L_list", "1,16,64,256,1024", "--iters", "20",
             "--budget-s", "90"]
DRY_SWEEP = ["--dry-run", "--N", "8", "--H", "2", "--D", "16", "--L_list", "1,16", "--iters", "2", "--mae-rows", "2"]


@pytest.mark.skipif(not DRY and not torch.cuda.is_available(),
                    reason="the crossover is measured on a GPU (NSA_BENCH_DRYRUN=1 checks the plumbing on a CPU)")
def test_crossover_writes_this_releases_threshold_entry(tmp_path, record_property):
    sweep = DRY_SWEEP if DRY else GPU_SWEEP
    out = Path(os.environ.get("NSA_SEL_CROSSOVER_DIR") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    csvs = {}
    for kind, dist in (("dense", "few"), ("varlen", "mixed")):
        csvs[kind] = out / f"crossover_{kind}.csv"
        csvs[kind].unlink(missing_ok=True)
        bench_sel_triton.main(sweep + ["--dist", dist, "--csv", str(csvs[kind])])
        failed = [f"L={r.get('L')}: {r.get('status')}" for r in _rows(csvs[kind]) if (r.get("status") or "ok") != "ok"]
        assert not failed, f"the {dist} sweep failed at {failed}: no crossover can be measured"
    target = Path(os.environ.get(OUT_ENV) or "") if os.environ.get(OUT_ENV) else (
        tmp_path / "thresholds.json" if DRY else sel_threshold_from_csv.DEFAULT_CONFIG)
    argv = ["--dense", str(csvs["dense"]), "--varlen", str(csvs["varlen"]), "--out", str(out / "crossover.md"),
            "--no-plot", "--write-config", str(target), "--source", f"bench/suites/test_crossover.py: {csvs['dense'].name}, "
            f"{csvs['varlen'].name}"]
    assert sel_threshold_from_csv.main(argv + (["--allow-fake"] if DRY else [])) == 0
    assert _rows(csvs["dense"]), "the sweep wrote no rows"
    gpu, release = _measured_on(csvs["dense"])
    entry = [e for e in json.loads(target.read_text())["entries"] if (e["gpu"], e["triton"]) == (gpu, release)]
    assert len(entry) == 1, f"no thresholds entry for {gpu} / Triton {release} in {target}"
    record_property("sel_triton_min_L", entry[0]["sel_triton_min_L"])
    record_property("thresholds_gpu", gpu)
    record_property("thresholds_triton", release)
    print(f"crossover: {gpu} / Triton {release}: sel_triton_min_L = {entry[0]['sel_triton_min_L']} -> {target}")


def _rows(csv_path: Path) -> list[dict]:
    from bench.common import csvio

    return csvio.read_csv([str(csv_path)]) if csv_path.exists() else []


def _measured_on(csv_path: Path) -> tuple[str, str]:
    from bench.analysis import threshold_rule

    return threshold_rule.gpu_key(_rows(csv_path)[0])
