"""``bench.ab.run``: the table and the verdict of the GPU A/B, on made-up runs (the GPU part is pytest-benchmark's)."""

from __future__ import annotations

import pytest

from bench.ab import run as ab


def runs(**medians):
    """``{name: (group, median s, extra_info)}`` from ``name=(group, seconds[, extra])``."""
    return {f"test_{k}": (v[0], v[1], v[2] if len(v) > 2 else {}) for k, v in medians.items()}


def test_no_regression_gives_ratios_and_drift():
    b1 = runs(fwd=("fwd", 0.010), host=("host", 0.002, {"calls_per_round": 20}))
    head = runs(fwd=("fwd", 0.0101), host=("host", 0.0019, {"calls_per_round": 20}))
    b2 = runs(fwd=("fwd", 0.0100), host=("host", 0.0020, {"calls_per_round": 20}))
    lines, bad = ab.table(b1, head, b2, 0.03)
    assert bad == []
    text = "\n".join(lines)
    assert "| fwd | ms | 10 | 10.1 | 10 | 1.010 | 0.0 % |  |" in text
    assert "| host | us/call | 100 | 95 | 100 | 0.950 |" in text  # per call: 2 ms / 20 calls


def test_a_slower_row_and_a_noisy_base_are_marked():
    lines, bad = ab.table(runs(a=("train", 0.010), b=("fwd", 0.010)), runs(a=("train", 0.0104), b=("fwd", 0.010)),
                          runs(a=("train", 0.0100), b=("fwd", 0.0105)), 0.03)
    text = "\n".join(lines)
    assert bad == ["test_a: 10.4 ms against 10 (base-1)"]
    assert "**slower**" in text and "| b | ms | 10 | 10 | 10.5 | 0.976 | 5.0 % | noisy |" in text


@pytest.mark.parametrize("head_mib, regressed", [(1030.0, False), (1100.0, True)])
def test_extra_peak_memory_is_judged_against_the_larger_base(head_mib, regressed):
    mem = lambda m: {"extra_peak_mib": m}  # noqa: E731
    lines, bad = ab.table(runs(t=("train", 0.01, mem(1000.0))), runs(t=("train", 0.01, mem(head_mib))),
                          runs(t=("train", 0.01, mem(1010.0))), 0.03)
    assert bool(bad) == regressed
    assert any(line.startswith("| t peak | MiB | 1000 |") for line in lines)


def test_fail_must_be_a_whole_percentage():
    with pytest.raises(SystemExit) as exc:
        ab.main(["--fail", "0"])
    assert exc.value.code == 2
