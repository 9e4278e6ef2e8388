"""CPU tests of suspect-row guards of a sweep."""

from __future__ import annotations

from sweep_rows import row

from bench.common import guards


def test_honest_sweep_raises_no_flag():
    rows = [row(L, 0.01 + L * 0.0005) for L in (16, 32, 64, 128, 256, 512, 1024)]
    assert all(r["suspect"] == "" for r in guards.flag_suspects(rows))


def test_small_latency_bound_sweep_is_not_called_flat():
    # N=64, H=4, D=64: even at L=1024 the work is ~5 us at copy bandwidth, so a flat
    # ~10 us reference is honest launch latency, not skipped work.
    rows = [row(L, 0.010 + 0.0001 * (i % 2), N=64, H=4, D=64) for i, L in enumerate((16, 64, 256, 1024))]
    assert all("ref_flat" not in r["suspect"] for r in guards.flag_suspects(rows))


def test_the_seeds_bug_is_caught():
    # SDPA at a constant 0.02 ms whatever L (one row timed, 64 keys read): flat, and
    # above the copy bandwidth at large L.
    rows = guards.flag_suspects([row(L, 0.02) for L in (64, 128, 256, 512, 1024)])
    assert all("ref_flat" in r["suspect"] for r in rows)
    assert "ref_bw>copy" in rows[-1]["suspect"] and "ref_bw>copy" not in rows[0]["suspect"]


def test_drop_nan_and_triton_bandwidth_guards():
    rows = guards.flag_suspects([row(64, 0.10), row(128, 0.05), row(256, 0.2)])
    assert rows[1]["suspect"] == "ref_drop" and rows[0]["suspect"] == rows[2]["suspect"] == ""
    jitter = guards.flag_suspects([row(16, 0.0100, N=64, H=4, D=64), row(32, 0.0084, N=64, H=4, D=64)])
    assert jitter[1]["suspect"] == ""  # 16 % but 1.6 us: launch-latency noise, not a drop
    nan = guards.flag_suspects([row(64, 0.1, mae=float("nan"))])
    assert nan[0]["suspect"] == "nan"
    fast = guards.flag_suspects([row(1024, 1.0, tri_ms=1e-4)])
    assert fast[0]["suspect"] == "tri_bw>copy"


def test_ref_drop_is_judged_within_one_reference_kernel():
    # SDPA on the H100: flash at L=1 (cuDNN refuses one key), cuDNN from L=2; the switch is
    # faster although L grew.  Within one kernel the same drop is still a ref_drop.
    flash, cudnn = "pytorch_flash::flash_fwd_kernel", "cudnn_generated_fort_native_sdpa_sm90"
    rows = guards.flag_suspects([row(1, 0.029, ref_kernel=flash), row(2, 0.024, ref_kernel=cudnn),
                            row(4, 0.024, ref_kernel=cudnn), row(8, 0.018, ref_kernel=cudnn)])
    assert [r["suspect"] for r in rows] == ["", "", "", "ref_drop"]
    sw = guards.kernel_switches(rows)
    assert len(sw) == 1 and sw[0][0]["L"] == 1 and sw[0][1]["L"] == 2 and sw[0][2] is True
    # Without kernel names (CPU, old CSVs) every step is compared.
    plain = guards.flag_suspects([row(1, 0.029), row(2, 0.024)])
    assert plain[1]["suspect"] == "ref_drop" and guards.kernel_switches(plain) == []


def test_noisy_timings_are_flagged_per_side():
    quiet = row(64, 0.1, tri_p20_ms=0.066, tri_p80_ms=0.070, ref_p20_ms=0.098, ref_p80_ms=0.102)
    spiky = row(64, 0.1, tri_p20_ms=0.0067, tri_p80_ms=0.1056, ref_p20_ms=0.098, ref_p80_ms=0.102)
    tiny = row(64, 0.1, tri_p20_ms=0.0030, tri_p80_ms=0.0045, ref_p20_ms=0.098, ref_p80_ms=0.102)
    assert guards.noisy_sides(quiet) == [] and guards.noisy_sides(spiky) == ["tri"]
    assert guards.noisy_sides(tiny) == []  # 1.5x but 1.5 us apart: launch jitter
    assert guards.flag_suspects([spiky])[0]["suspect"] == "tri_noisy"


def test_guards_are_per_sweep():
    # Same L values, different N: the drop from one group to the other is not a drop.
    rows = guards.flag_suspects([row(64, 0.5, N=1024), row(64, 0.01, N=64), row(128, 0.02, N=64)])
    assert all(r["suspect"] == "" for r in rows)
