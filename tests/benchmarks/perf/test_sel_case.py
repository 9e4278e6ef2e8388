"""CPU tests of one comparison of the sweep: identical inputs, re-timing noisy rows, the timer label."""

from __future__ import annotations

import torch

from bench.common import guards
from bench.perf import bench_sel_triton as B
from bench.perf import sel_case


def test_make_case_packs_exactly_the_selected_keys():
    a = B.parse_args(["--dry-run", "--dist", "mixed"])
    case = sel_case.make_case(a, "mixed", 6, 4, 16, 8, 40, torch.device("cpu"))
    assert case.kp.shape == (6, 40, 16) and case.vp.shape == (6, 40, 8) and case.T == 160
    r = case.ranges[:, 0, 0].long()
    for i in range(6):
        keys = torch.cat([torch.arange(s, e) for s, e in r[i].tolist() if e > s])
        torch.testing.assert_close(case.kp[i], case.k5[i, 0, keys])


def test_noisy_rows_are_re_timed_and_the_quietest_attempt_kept(monkeypatch):
    a = B.parse_args(["--dry-run", "--retries", "2"])
    spreads = iter([(0.01, 0.10), (0.01, 0.05), (0.01, 0.011), (0.01, 0.011)])

    def fake_run_case(*args):
        p20, p80 = next(spreads)
        return {"status": "ok", "tri_p20_ms": p20, "tri_p80_ms": p80, "ref_p20_ms": 0.02, "ref_p80_ms": 0.021}

    monkeypatch.setattr(sel_case, "run_case", fake_run_case)
    r = sel_case.timed_case(a, "few", 4, 2, 64, 64, 16, 1, None, None, None, None)
    assert r["retries"] == 2 and r["tri_p80_ms"] == 0.011  # third attempt quiet: stop there
    a0 = B.parse_args(["--dry-run", "--retries", "0"])
    spreads = iter([(0.01, 0.10)])
    r0 = sel_case.timed_case(a0, "few", 4, 2, 64, 64, 16, 1, None, None, None, None)
    assert r0["retries"] == 0 and guards.noisy_sides(r0) == ["tri"]  # kept, and the guard will flag it


def test_timer_label_names_sides_timed_another_way():
    assert sel_case.timer_label("cuda-graph", {"tri": "cuda-graph", "ref": "cuda-graph"}) == "cuda-graph"
    assert sel_case.timer_label("cuda-graph", {"tri": "cuda-graph", "ref_gather": "cuda-events"}) == \
        "cuda-graph; ref_gather=cuda-events"
