"""MATRIX.md: one row per release, every non-pass explained, GPU evidence, environments."""

from __future__ import annotations

import pytest

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
    row = next(ln for ln in md.splitlines() if ln.startswith("| compile-3.9 (3.9.0) |"))
    assert "| 3.9.0 | 1.26.4 |" in row  # triton imported, numpy imported
    assert "- 3.9.0: CPU build torch 2.13.0+cpu" in md  # the off-pair reason, once


KH, RH = "0123456789abcdef", "fedcba9876543210"
GPU_FP = {**F.CPU_FP, "torch": "2.11.0+cu130", "cuda_runtime": "13.0", "gpu_name": "NVIDIA H100 80GB HBM3",
          "compute_capability": "9.0", "compiler_hash": KH, "runtime_hash": RH}


def _gpu_run(version, date=F.DATE, fp=GPU_FP, fwd_ms=0.84, train_ms=3.0, auto=1.01):
    par = F.base(version, "parity", date, mode="gpu", fp=fp)
    ben = F.base(version, "bench", date, mode="gpu", fp=fp)
    can = {**F.base(version, "parity", date, mode="gpu", fp=fp), "check": "gpu-canary"}
    recs = [ledger.record(par, kernel="t::test_a[x]", verdict="pass",
                          metrics={"max_abs_err": 2e-3, "rel_err": 2.2e-3, "sdpa_rel_err": 2.0e-3}),
            ledger.record(par, kernel="t::test_b[y]", verdict="pass", metrics={"max_abs_err": 9e-3}),
            ledger.record({**par, "check": "backward"}, kernel="tests.test_backward_gpu::test_c", verdict="pass",
                          metrics={"max_abs_err": 3e-2}),
            ledger.record({**par, "check": "contract"}, kernel="tests.test_contract_gpu::test_d[decode-eager]",
                          verdict="pass"),
            ledger.record({**par, "check": "contract"}, kernel="tests.test_contract_gpu::test_d[packed-compile]",
                          verdict="xfail", message="off-pair: torch 2.11.0 pins triton 3.6.0"),
            ledger.record(can, kernel="gpu-canary/dot_trans_dk", verdict="fail", message="fired"),
            ledger.record(can, kernel="gpu-canary/odd_k_tail", verdict="pass")]
    for L, sp in ((256, 1.05), (1024, 0.97)):
        for impl, s_ in (("triton", sp), ("sdpa", 1.0)):
            recs.append(ledger.record(ben, kernel=f"b::test_packed[dense-N1024-H8-D128-L{L}-{impl}]",
                                      verdict="pass", metrics={"impl": impl, "speedup_vs_sdpa": s_, "median_ms": 0.1}))
    recs.append(ledger.record(ben, kernel="b::test_nsa[nsa-T4096-random-triton]", verdict="pass",
                              metrics={"impl": "triton", "speedup_vs_sdpa": 90.0, "median_ms": fwd_ms}))
    recs.append(ledger.record(ben, kernel="b::test_train[train-T4096-random-ours-api]", verdict="pass",
                              metrics={"impl": "ours-api", "median_ms": train_ms}))
    recs.append(ledger.record(ben, kernel="b::test_auto_route[inference]", verdict="pass" if auto <= 1.05 else "fail",
                              metrics={"auto_over_triton": auto}))
    return recs


def _render_at(recs, current=KH, windows=(), runtime=RH):
    verdicts = ledger.release_verdicts(F.TABLE, recs, list(windows), current=current, runtime=runtime)
    return ledger.render_matrix(F.TABLE, recs, list(windows), verdicts, "ledger.jsonl", "0123456789abcdef",
                                current=current, runtime=runtime)


def test_gpu_tables_show_errors_canaries_speed_ratios_and_auto_per_release():
    recs = F.all_pass("3.5") + F.all_pass("3.9") + _gpu_run("3.5", fwd_ms=1.26, train_ms=3.3) + _gpu_run("3.9")
    md = _render_at(recs)
    lines = md.splitlines()
    row = next(ln for ln in lines if ln.startswith("| 3.9.0 | H100 | 2.11.0+cu130 (off-pair) |"))
    assert "| 01234567 | 2/2 | 1/1 | 1/2 | 9.00e-03 | 3.00e-02 | dot_trans_dk (**unanswered**) |" in row
    fast = next(ln for ln in lines if ln.startswith("| 3.9.0 | H100 | 0.84 (1.00x) |"))
    assert "| 3.00 (1.00x) |" in fast and "| 1.01x (0.97-1.05) | 1.01 | — |" in fast
    slow = next(ln for ln in lines if ln.startswith("| 3.5.1 | H100 | 1.26 (1.50x) |"))
    assert "**needs an advisory window** (+50 % vs 3.9.0)" in slow
    assert not any(ln.startswith("| 3.1.0 | H100") for ln in lines)  # CPU-only lanes: no GPU row
    assert "| 3.9.0 | 3.9 | pass 2/2 | pass 3/3 | pass 2/2 | pass 1/1 | pass 1/2, 1 xfail |" in md
    assert "GPU contract runs of this runtime: 3.5.1 (H100), 3.9.0 (H100)." in md
    main = [ln for ln in lines if ln.startswith("| 3.")]
    assert any(ln.endswith("| **yes** | H100 |") for ln in main)


def test_advisory_window_is_named_when_one_covers_the_slow_release():
    from nsa_triton_sel import known_bad

    windows = known_bad.parse('schema = 1\n[[window]]\nid = "slow35"\ntriton = ">=3.5,<3.6"\narch = [90]\n'
                              'checks = ["bench"]\nmodes = ["gpu"]\nreason = "slow"\n')
    recs = F.all_pass("3.5") + F.all_pass("3.9") + _gpu_run("3.5", fwd_ms=1.26) + _gpu_run("3.9")
    assert "`slow35` (+50 % vs 3.9.0)" in _render_at(recs, windows=windows)


def _speed_note(tmp_path, monkeypatch, point="fwd+bwd 4K", kernels=KH, triton="==3.5.1", gpu="H100"):
    from nsa_triton_sel.compat.ledger import speed_notes

    path = tmp_path / "speed_notes.toml"
    path.write_text(f'schema = 1\n[[note]]\nid = "host4k"\ntriton = "{triton}"\ngpu = "{gpu}"\n'
                    f'point = "{point}"\nkernels = "{kernels}"\nwhy = "repeated runs: no slower"\n'
                    'evidence = "bench/results/x/README.md"\n')
    monkeypatch.setattr(speed_notes, "NOTES_FILE", path)


def _advisory_of(md, version="3.5.1"):
    row = next(ln for ln in md.splitlines() if ln.startswith(f"| {version} | H100 | ") and "x) |" in ln)
    return row.rstrip(" |").rpartition(" | ")[2]


def test_a_slow_point_answered_by_a_speed_note_names_the_note(tmp_path, monkeypatch):
    _speed_note(tmp_path, monkeypatch)
    recs = F.all_pass("3.5") + F.all_pass("3.9") + _gpu_run("3.5", train_ms=3.6) + _gpu_run("3.9")
    md = _render_at(recs)
    assert _advisory_of(md) == "note `host4k` (+20 % vs 3.9.0)"
    assert "- note `host4k`: Triton ==3.5.1 on the H100, fwd+bwd 4K, kernels 01234567: repeated runs" in md


@pytest.mark.parametrize("note, recs_kw", [
    ({"kernels": "feedfacefeedface"}, {"train_ms": 3.6}),  # the note is about other kernels
    ({"gpu": "H200"}, {"train_ms": 3.6}),  # about another GPU
    ({"triton": "==3.9.0"}, {"train_ms": 3.6}),  # about another release
    ({}, {"train_ms": 3.6, "fwd_ms": 1.26}),  # a second slow point that no note answers
])
def test_a_speed_note_answers_only_the_point_it_names(tmp_path, monkeypatch, note, recs_kw):
    _speed_note(tmp_path, monkeypatch, **note)
    recs = F.all_pass("3.5") + F.all_pass("3.9") + _gpu_run("3.5", **recs_kw) + _gpu_run("3.9")
    assert _advisory_of(_render_at(recs)).startswith("**needs an advisory window** (+")


def test_a_speed_note_on_a_point_within_the_rule_changes_nothing(tmp_path, monkeypatch):
    _speed_note(tmp_path, monkeypatch)
    recs = F.all_pass("3.5") + F.all_pass("3.9") + _gpu_run("3.5", train_ms=3.3) + _gpu_run("3.9")
    assert _advisory_of(_render_at(recs)) == "—"


def test_the_shipped_speed_notes_load_and_name_files_that_exist():
    from pathlib import Path

    from nsa_triton_sel.compat.ledger import gpu_tables

    repo = Path(__file__).resolve().parents[3]
    for n in gpu_tables.load_speed_notes():
        files = [f.strip() for f in n.evidence.split(";")]
        assert files and all((repo / f).is_file() for f in files), files


@pytest.mark.parametrize("body, words", [
    ('schema = 2\n', "schema 2 is not supported"),
    ('schema = 1\n[[note]]\nid = "a"\ntriton = ">=3.7"\ngpu = "H200"\npoint = "bwd 4K"\n'
     'kernels = "0123456789abcdef"\nwhy = "w"\nevidence = "e"\n', "'bwd 4K' is not a speed point (one of fwd 4K"),
    ('schema = 1\n[[note]]\nid = "a"\ntriton = "3.7"\ngpu = "H200"\npoint = "fwd 4K"\n'
     'kernels = "0123456789abcdef"\nwhy = "w"\nevidence = "e"\n', "is not a PEP 440 specifier"),
    ('schema = 1\n[[note]]\nid = "a"\ntriton = ">=3.7"\ngpu = "H200"\npoint = "fwd 4K"\n'
     'kernels = "b93c8ecb"\nwhy = "w"\nevidence = "e"\n', "must be a compiler-facing hash (16 hex digits"),
    ('schema = 1\n[[note]]\nid = "a"\ntriton = ">=3.7"\ngpu = "H200"\npoint = "fwd 4K"\n'
     'kernels = "0123456789abcdef"\nwhy = "w"\n', "missing ['evidence']"),
])
def test_a_bad_speed_note_says_what_is_wrong(tmp_path, body, words):
    import re

    from nsa_triton_sel.compat.ledger import gpu_tables, speed_notes

    path = tmp_path / "speed_notes.toml"
    path.write_text(body)
    with pytest.raises(ValueError, match=re.escape(words)):
        speed_notes.load(path, points=tuple(p[0] for p in gpu_tables.SPEED_POINTS))


def test_gpu_evidence_about_other_kernels_is_stale_and_not_counted():
    """After a kernel change (hash KH -> "new"), the GPU rows say stale, the GPU parity cell is
    empty again, and the release is not admitted for GPU use."""
    recs = F.all_pass("3.9") + _gpu_run("3.9")
    md = _render_at(recs, current="feedfacefeedface")
    assert "| 3.9.0 | 3.9 | pass 2/2 | pass 3/3 | — | — | — |" in md
    assert "01234567 **stale**" in md
    assert next(ln for ln in md.splitlines() if ln.startswith("| 3.9.0 | 3.9 |")).endswith("| **yes** | stale |")
    legacy = [{k: v for k, v in r.items() if k != "compiler_hash"} for r in _gpu_run("3.9")]  # unknown source
    assert "unknown **stale**" in _render_at(F.all_pass("3.9") + legacy)


def test_main_table_and_gpu_tables_fit_120_columns():
    recs = F.mixed() + _gpu_run("3.5") + _gpu_run("3.9")
    for ln in _render_at(recs).splitlines():
        if ln.startswith("| 3.") or ln.startswith("| Triton"):
            assert len(ln) <= 125, ln


def test_a_gpu_lane_run_on_a_cpu_machine_is_no_gpu_evidence():
    skips = F.recs("3.9", "parity", ["skip", "skip"], mode="gpu", fp={**F.CPU_FP, "compiler_hash": KH})
    md = _render_at(F.all_pass("3.9") + skips)
    assert "## GPU evidence per release" not in md
    verdict = ledger.release_verdicts(F.TABLE, F.all_pass("3.9") + skips, [], current=KH)["3.9.0"]
    assert verdict.tested == ["2.13.0+cpu (CPU)"] and not verdict.gpu.admitted


def test_a_runtime_edit_flags_the_contract_record_and_keeps_gpu_use():
    """A host-side edit (another runtime hash) keeps the compile/parity/bench cells and GPU use,
    marks the contract column stale, and says that no contract run of this runtime exists."""
    recs = F.all_pass("3.9") + _gpu_run("3.9")
    md = _render_at(recs, runtime="0" * 16)
    row = next(ln for ln in md.splitlines() if ln.startswith("| 3.9.0 | 3.9 |"))
    assert "| pass 2/2 | pass 1/1 | pass 1/2, 1 xfail *stale* |" in row
    assert row.endswith("| **yes** | H100 (contract *stale*) |")
    assert "**no GPU contract run of this runtime**" in md
    assert "| 01234567 | 2/2 | 1/1 | 1/2 *stale* |" in md


def test_a_release_without_a_contract_run_is_not_for_gpu_use():
    recs = F.all_pass("3.9") + [r for r in _gpu_run("3.9") if r["check"] != "contract"]
    md = _render_at(recs)
    assert next(ln for ln in md.splitlines() if ln.startswith("| 3.9.0 | 3.9 |")).endswith("| **yes** | **no** |")
