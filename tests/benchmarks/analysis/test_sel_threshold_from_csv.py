"""CPU tests of bench/analysis/sel_threshold_from_csv.py: the threshold rule (margin and MAE gates,
"from which L", keep-off), per-GPU verdicts, the report and plot, ``--write-config``
round trip, and the end-to-end effect on the dispatcher."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bench.analysis import sel_threshold_from_csv as S
from bench.analysis import threshold_rule
from bench.common import csvio

BENCH = Path(__file__).resolve().parents[3] / "bench"

LS = (16, 64, 256, 1024)
CONFIGS = [("few", 64, 4, 64), ("few", 1024, 8, 128), ("many", 1024, 8, 128), ("mixed", 256, 4, 64)]


def rows_for(speedup, *, mae=1e-4, gpu="NVIDIA H100 80GB HBM3", triton="3.6.0", timer="cuda-events", **extra):
    """Rows of every CONFIGS x LS, with ``speedup(dist, N, L)`` and ``mae`` (value or callable)."""
    out = []
    for dist, N, H, D in CONFIGS:
        for L in LS:
            sp = speedup(dist, N, L)
            m = mae(dist, N, L) if callable(mae) else mae
            out.append({"mode": "dense" if dist == "few" else "varlen", "dist": dist, "N": N, "H": H, "D": D,
                        "Dv": D, "L": L, "nspans": 1 if dist == "few" else 8, "streams": 1, "tri_ms": 1.0 / sp,
                        "ref_ms": 1.0, "speedup": sp, "mae": m, "status": "ok", "suspect": "", "gpu": gpu,
                        "cc": "9.0", "triton": triton, "torch": "2.11.0", "cuda": "12.8", "timer": timer,
                        "iters": 25, "copy_gbs": 3000.0, "mm_tflops": 700.0, "date": "2026-11-22T16:00:00+00:00",
                        **extra})
    return out


def split_write(tmp_path, rows, stem=""):
    dense, varlen = tmp_path / f"{stem}dense.csv", tmp_path / f"{stem}varlen.csv"
    csvio.write_csv(dense, [r for r in rows if r["mode"] == "dense"], append=False)
    csvio.write_csv(varlen, [r for r in rows if r["mode"] == "varlen"], append=False)
    return dense, varlen


def tag(rows):
    for r in rows:
        r["kind"], r["file"] = r["mode"], "x.csv"
    return rows


def judge(rows, margin=1.2, max_mae=1e-3, **kw):
    vs = threshold_rule.verdicts(tag(rows), margin, max_mae, **kw)
    assert len(vs) == 1
    return vs[0]


# ----------------------------------------------------------------------------- the rule
def test_smallest_L_from_which_every_configuration_is_fast_enough():
    v = judge(rows_for(lambda d, N, L: 0.8 if L < 256 else 1.5))
    assert v.min_L == 65 and "from L=256" in v.reason and "at L=64" in v.reason


def test_keep_off_when_the_largest_L_fails_somewhere():
    v = judge(rows_for(lambda d, N, L: 0.9 if (d == "mixed" and L == 1024) else 2.0))
    assert v.min_L is None and "keep Triton off" in v.reason and "mixed N=256" in v.reason


def test_from_which_means_all_larger_L_too():
    # Fast at 64, slow at 256 for one config, fast again from 1024: rows up to 256 go to SDPA.
    v = judge(rows_for(lambda d, N, L: 0.7 if (d == "many" and L == 256) else 1.6))
    assert v.min_L == 257


def test_margin_gate():
    rows = rows_for(lambda d, N, L: 1.1)
    assert judge(rows, margin=1.2).min_L is None
    assert judge(rows_for(lambda d, N, L: 1.1), margin=1.05).min_L == 1  # never slower: every row to the kernels


def test_mae_gate():
    bad_mae = rows_for(lambda d, N, L: 2.0, mae=lambda d, N, L: 5e-3 if L == 64 else 1e-4)
    assert judge(bad_mae, max_mae=1e-3).min_L == 65
    assert judge(rows_for(lambda d, N, L: 2.0, mae=lambda d, N, L: 5e-3 if L == 64 else 1e-4),
                 max_mae=1e-2).min_L == 1
    nan_mae = rows_for(lambda d, N, L: 2.0, mae=lambda d, N, L: float("nan") if L == 1024 else 1e-4)
    assert judge(nan_mae).min_L is None


def test_suspect_and_failed_rows_veto():
    rows = rows_for(lambda d, N, L: 2.0)
    rows[5]["suspect"] = "ref_flat"  # CONFIGS[1], L=64
    assert judge(rows).min_L == 65
    assert judge(rows_for(lambda d, N, L: 2.0), allow_suspect=True).min_L == 1
    rows = rows_for(lambda d, N, L: 2.0)
    rows[-1]["status"] = "error: OutOfMemoryError"
    assert judge(rows).min_L is None


def test_verdicts_per_gpu_and_triton_release_streams_and_decode():
    rows = rows_for(lambda d, N, L: 2.0) + rows_for(lambda d, N, L: 0.5, gpu="NVIDIA A100-SXM4-80GB")
    rows += rows_for(lambda d, N, L: 0.5, triton="3.5.1")
    rows += [dict(r, streams=2) for r in rows_for(lambda d, N, L: 0.1)]  # concurrency rows do not gate
    dec = [dict(r, mode="decode", dist="decode") for r in rows_for(lambda d, N, L: 0.5)]
    vs = {(v.gpu, v.triton): v.min_L for v in threshold_rule.verdicts(tag(rows + dec), 1.2, 1e-3)}
    assert vs == {("NVIDIA A100-SXM4-80GB", "3.6.0"): None, ("NVIDIA H100 80GB HBM3", "3.5.1"): None,
                  ("NVIDIA H100 80GB HBM3", "3.6.0"): 1}
    gated = {(v.gpu, v.triton): v.min_L for v in threshold_rule.verdicts(tag(rows + dec), 1.2, 1e-3, gate_decode=True)}
    assert gated[("NVIDIA H100 80GB HBM3", "3.6.0")] is None


def test_fallback_baseline_judges_against_gather_plus_sdpa():
    # SDPA on pre-gathered keys ties Triton (1.0x everywhere); the dispatcher's fallback
    # (gather + SDPA, ref_gather_ms) is 3x slower than Triton from L = 64, 0.9x below.
    rows = rows_for(lambda d, N, L: 1.0)
    for r in rows:
        r["ref_gather_ms"] = 3.0 if r["L"] >= 64 else 0.9
    rows[0]["ref_gather_ms"] = ""  # a row without the column falls back to ref_ms: 1.0x
    assert judge(rows).min_L is None
    v = judge(rows, baseline="fallback")
    assert v.min_L == 17 and v.baseline == "fallback"  # measured slower at L=16 only
    assert threshold_rule.row_speedup(rows[1], "fallback") == pytest.approx(3.0) and threshold_rule.row_speedup(rows[0], "fallback") == 1.0
    with pytest.raises(ValueError, match="baseline must be one of"):
        threshold_rule.row_speedup(rows[0], "flash")


def test_report_shows_both_baselines_and_speedup_ranges(tmp_path):
    rows = rows_for(lambda d, N, L: 0.9)
    for r in rows:
        r["ref_gather_ms"] = 3.0 / 0.9  # 3x the Triton time (1 / 0.9 ms)
    dense, varlen = split_write(tmp_path, rows)
    cfg = tmp_path / "t.json"
    assert S.main(["--dense", str(dense), "--varlen", str(varlen), "--out", str(tmp_path / "r.md"), "--no-plot",
                   "--baseline", "fallback", "--write-config", str(cfg)]) == 0
    text = (tmp_path / "r.md").read_text()
    assert "**Recommended sel_triton_min_L: 1** against the dispatcher's fallback" in text
    assert "For comparison, against SDPA on the pre-gathered packed keys (gather not timed): " \
           "sel_triton_min_L would be **null (keep Triton off)**" in text
    assert "| few | 8 | 0.90x – 0.90x – 0.90x | 3.00x – 3.00x – 3.00x |" in text
    assert json.loads(cfg.read_text())["entries"][0]["baseline"] == "fallback"


def test_report_lists_reference_kernel_switches(tmp_path):
    rows = rows_for(lambda d, N, L: 1.5)
    for r in rows:
        r["ref_kernel"] = "flash_fwd" if r["L"] == 16 else "cudnn_sdpa"
        r["ref_ms"] = 1.0 if r["L"] == 16 else 0.5 + r["L"] / 1024
    dense, varlen = split_write(tmp_path, rows)
    assert S.main(["--dense", str(dense), "--varlen", str(varlen), "--out", str(tmp_path / "r.md"), "--no-plot"]) == 0
    text = (tmp_path / "r.md").read_text()
    assert "## Reference kernel switches" in text
    assert "| few N=64 H=4 D=64 Dv=64 | 16 -> 64 | flash_fwd -> cudnn_sdpa | 1 -> 0.5625 | yes |" in text


def test_bad_gates_are_refused():
    with pytest.raises(ValueError, match="positive"):
        threshold_rule.choose_threshold(tag(rows_for(lambda d, N, L: 2.0)), 0.0, 1e-3)


# ----------------------------------------------------------------------------- cli, report, config
def test_cli_report_plot_and_config_round_trip(tmp_path, capsys):
    dense, varlen = split_write(tmp_path, rows_for(lambda d, N, L: 0.8 if L < 64 else 1.4))
    cfg = tmp_path / "thresholds.json"
    cfg.write_text(json.dumps({"schema": 2, "entries": [
        {"gpu": "NVIDIA A100-SXM4-80GB", "cc": "8.0", "triton": "3.6.0", "sel_triton_min_L": None,
         "source": "old", "date": "2026-01-01", "margin": 1.0, "max_mae": 0.001},
        {"gpu": "NVIDIA H100 80GB HBM3", "cc": "9.0", "triton": "3.6.0", "sel_triton_min_L": 4096,
         "source": "stale", "date": "2026-01-01", "margin": 1.0, "max_mae": 0.001}]}))
    out = tmp_path / "rep" / "report.md"
    rc = S.main(["--dense", str(dense), "--varlen", str(varlen), "--max-mae", "1e-3",
                 "--out", str(out), "--write-config", str(cfg), "--source", "bench/results/h100/sel_dense.csv"])
    assert rc == 0
    text = out.read_text()
    assert "**Recommended sel_triton_min_L: 17**" in text and "| 16 | 4 |" in text
    assert "## Dense (few: one span)" in text and "## Varlen (many / mixed spans)" in text
    assert "None: no guard fired." in text
    pytest.importorskip("matplotlib")
    assert (tmp_path / "rep" / "report.png").stat().st_size > 1000 and "![speedup vs L](report.png)" in text
    data = json.loads(cfg.read_text())
    assert data["schema"] == 2 and "default_min_L" not in data and len(data["entries"]) == 2
    h100 = [e for e in data["entries"] if e["gpu"] == "NVIDIA H100 80GB HBM3"]
    assert h100 == [{"gpu": "NVIDIA H100 80GB HBM3", "cc": "9.0", "triton": "3.6.0", "sel_triton_min_L": 17,
                     "source": "bench/results/h100/sel_dense.csv", "date": "2026-11-22", "margin": 1.0,
                     "max_mae": 0.001, "baseline": "fallback"}]
    assert any(e["gpu"] == "NVIDIA A100-SXM4-80GB" and e["source"] == "old" for e in data["entries"])
    assert "NVIDIA H100 80GB HBM3 / Triton 3.6.0, baseline fallback: sel_triton_min_L = 17" in capsys.readouterr().out


def test_write_config_refuses_a_margin_that_moves_rows_where_triton_was_faster(tmp_path):
    """A margin may not send rows to SDPA where Triton was faster: with --margin 1.2, rows where Triton was
    1.1x faster would go to SDPA."""
    dense, varlen = split_write(tmp_path, rows_for(lambda d, N, L: 1.1 if L < 64 else 1.4))
    cfg = tmp_path / "t.json"
    with pytest.raises(ValueError, match="may only do where SDPA was measured faster"):
        S.main(["--dense", str(dense), "--varlen", str(varlen), "--margin", "1.2", "--out",
                str(tmp_path / "r.md"), "--no-plot", "--write-config", str(cfg)])
    assert not cfg.exists()
    assert S.main(["--dense", str(dense), "--varlen", str(varlen), "--out", str(tmp_path / "r.md"), "--no-plot",
                   "--write-config", str(cfg)]) == 0
    assert json.loads(cfg.read_text())["entries"][0]["sel_triton_min_L"] == 1  # Triton faster at every L


def test_write_config_creates_the_file_and_writes_null_for_keep_off(tmp_path):
    dense, varlen = split_write(tmp_path, rows_for(lambda d, N, L: 0.5))
    cfg = tmp_path / "new" / "thresholds.json"
    assert S.main(["--dense", str(dense), "--varlen", str(varlen), "--out", str(tmp_path / "r.md"),
                   "--no-plot", "--write-config", str(cfg)]) == 0
    data = json.loads(cfg.read_text())
    assert data["entries"][0]["sel_triton_min_L"] is None and "null (keep Triton off)" in (tmp_path / "r.md").read_text()
    assert not list(cfg.parent.glob("*.tmp"))  # the atomic write left nothing behind


def test_write_config_refuses_dry_run_numbers(tmp_path, capsys):
    dense, varlen = split_write(tmp_path, rows_for(lambda d, N, L: 2.0, timer="model"))
    cfg = tmp_path / "t.json"
    args = ["--dense", str(dense), "--varlen", str(varlen), "--out", str(tmp_path / "r.md"), "--no-plot",
            "--write-config", str(cfg)]
    assert S.main(args) == 2 and not cfg.exists()
    assert "refusing --write-config" in capsys.readouterr().err
    assert S.main(args + ["--allow-fake"]) == 0 and cfg.exists()


@pytest.mark.parametrize("argv, needle", [
    ([], "give at least one of --dense, --varlen, --decode"),
    (["--dense", "/nonexistent/x.csv"], "CSV not found: /nonexistent/x.csv"),
    (["--dense", "DENSE", "--margin", "0"], "--margin and --max-mae must be positive"),
])
def test_cli_errors(argv, needle, tmp_path, capsys):
    dense, _ = split_write(tmp_path, rows_for(lambda d, N, L: 2.0))
    argv = [str(dense) if a == "DENSE" else a for a in argv]
    with pytest.raises(SystemExit) as exc:
        S.main(argv + ["--out", str(tmp_path / "r.md")])
    assert exc.value.code == 2 and needle in capsys.readouterr().err


def test_allow_missing_skips_absent_files(tmp_path):
    dense, _ = split_write(tmp_path, rows_for(lambda d, N, L: 2.0))
    assert S.main(["--dense", str(dense), "--decode", str(tmp_path / "none.csv"), "--allow-missing",
                   "--out", str(tmp_path / "r.md"), "--no-plot"]) == 0


def test_thresholds_file_that_is_not_one_is_refused(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text('{"runtime": {"sel_triton_min_L": 64}}')
    with pytest.raises(ValueError, match="not a thresholds file"):
        S.update_thresholds(bad, [])


# ----------------------------------------------------------------------------- dispatcher
def test_written_threshold_reaches_the_dispatcher(tmp_path, monkeypatch):
    """--write-config for this machine's (GPU, Triton) changes what the dispatcher decides."""
    config = pytest.importorskip("nsa_triton_sel.config")
    arguments = pytest.importorskip("nsa_triton_sel.arguments")
    import triton

    from nsa_triton_sel.device import device_of

    dev = device_of(torch.device("cpu"))
    gpu, cc = dev.name, dev.cc
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # lets the dispatcher consider Triton on CPU tensors
    for name in ("NSA_SEL_TRITON_MIN_L", "NSA_USE_TRITON_SEL", "NSA_FORCE_PARITY"):
        monkeypatch.delenv(name, raising=False)
    q = torch.zeros(1, 1, 1, 4, 16, dtype=torch.float16)
    k = v = torch.zeros(1, 1, 64, 16, dtype=torch.float16)

    def decide_with(speedup, name):
        rows = rows_for(speedup, gpu=gpu, triton=triton.__version__)
        for r in rows:
            r["cc"] = cc
        dense, varlen = split_write(tmp_path, rows, stem=name)
        cfg = tmp_path / f"{name}.json"
        assert S.main(["--dense", str(dense), "--varlen", str(varlen), "--out", str(tmp_path / f"{name}.md"),
                       "--no-plot", "--write-config", str(cfg)]) == 0
        assert config.lookup_min_L(gpu, cc, triton.__version__, path=cfg) == json.loads(
            cfg.read_text())["entries"][0]["sel_triton_min_L"]
        monkeypatch.setenv(config.THRESHOLDS_ENV, str(cfg))
        config.refresh()  # flags and the thresholds file are read once per process
        return arguments.route_of(q, k, v)

    d = decide_with(lambda dist, N, L: 0.8 if L < 256 else 1.5, "on")
    assert d.path == "triton" and d.min_L == 65, d
    d = decide_with(lambda dist, N, L: 0.8, "off")
    assert d.path == "sdpa" and "null" in d.reason, d
