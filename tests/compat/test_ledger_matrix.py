"""MATRIX.md: one row per release, every non-pass explained, GPU evidence, environments."""

from __future__ import annotations

import ledger_factory as F
from nsa_triton_sel.compat import ledger


def _render(recs):
    return ledger.render_matrix(F.TABLE, recs, [], ledger.release_verdicts(F.TABLE, recs, []), "ledger.jsonl",
                                "0123456789abcdef")


def test_render_matrix_lists_every_non_pass_reason():
    recs = F.mixed() + [ledger.record(F.base("3.9", "bench"), kernel="(bench)", verdict="skip",
                                      message="bench-3.9 needs a CUDA GPU")]
    md = _render(recs)
    assert "| 3.3.1 | 3.3 | **FAIL** 1/2 |" in md
    assert "| 3.3.0 | 3.3 (patch) | — |" in md
    assert "**3.3.1 · compile (AOT)**: fail: `k1`: fail msg 1" in md
    assert "**3.9.0 · bench**: skip: `(bench)`: bench-3.9 needs a CUDA GPU" in md
    assert "CPU build torch 2.13.0+cpu" in md  # off-pair reason in the environment table
    assert "generation 0123456789abcdef" in md


def test_environment_table_shows_what_the_processes_imported():
    md = _render(F.all_pass("3.9"))
    row = next(ln for ln in md.splitlines() if ln.startswith("| 3.9 | compile |"))
    assert "| 3.9.0 | 3.9.0 | 1.26.4 |" in row  # declared, triton imported, numpy imported


def test_render_matrix_shows_gpu_parity_errors_and_speedups_per_version():
    gpu_fp = {**F.CPU_FP, "torch": "2.11.0+cu130", "cuda_runtime": "13.0", "gpu_name": "NVIDIA H100"}
    par = F.base("3.9", "parity", mode="gpu", fp=gpu_fp)
    ben = F.base("3.9", "bench", mode="gpu", fp=gpu_fp)
    recs = F.all_pass("3.9") + [
        ledger.record(par, kernel="t::test_a[x]", verdict="pass",
                      metrics={"max_abs_err": 2e-3, "rel_err": 2.2e-3, "sdpa_rel_err": 2.0e-3}),
        ledger.record(par, kernel="t::test_b[y]", verdict="pass",
                      metrics={"max_abs_err": 9e-3, "rel_err": 1e-3, "sdpa_rel_err": 1e-3}),
    ]
    for L, sp in ((256, 1.05), (1024, 0.97)):
        for impl, s_ in (("triton", sp), ("sdpa", 1.0)):
            recs.append(ledger.record(ben, kernel=f"b::test_packed[dense-N1024-H8-D128-L{L}-{impl}]",
                                      verdict="pass", metrics={"impl": impl, "speedup_vs_sdpa": s_, "median_ms": 0.1}))
    recs.append(ledger.record(ben, kernel="b::test_nsa[nsa-T4096-random-triton]", verdict="pass",
                              metrics={"impl": "triton", "speedup_vs_sdpa": 90.0, "median_ms": 0.84}))
    recs.append(ledger.record(ben, kernel="b::test_nsa[nsa-T4096-random-fla]", verdict="pass",
                              metrics={"impl": "fla", "speedup_vs_sdpa": 60.0, "median_ms": 1.29}))
    md = _render(recs)
    row = next(ln for ln in md.splitlines() if ln.startswith("| 3.9.0 | NVIDIA H100 |"))
    assert "| 2/2 | 9.00e-03 | 1.10 | 1.05x/0.97x (median 1.01x) | 0.84 ms, 90x SDPA, fla 1.29 ms | — |" in row
    assert "(off-pair)" in row
    assert not any(ln.startswith("| 3.1.0 | ") and "H100" in ln for ln in md.splitlines())  # CPU-only lanes: no row
