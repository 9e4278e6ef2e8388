"""CPU tests of bench/analysis/path_table.py: grid files of path_grid.py into the planner's path table (repeated
cells by their median, a path that could not run as no time), the 5 % check and ``--write-config``."""

from __future__ import annotations

import json

from bench.analysis import path_table as PT

ENV = {"gpu": "GPU A", "cc": "9.0", "triton": "3.6.0", "torch": "2.11.0", "date": "2026-11-27T00:00:00+00:00"}


def grid(cells, command="python -m bench.probes.path_grid --sel random"):
    return {"environment": ENV, "D": 128, "block": 64, "topn": 16, "HQ": 32, "rep_ms": 100, "command": command,
            "cells": cells}


def cell(sel, T, h, ft, fk, tt, tk, kernel_key="keymajor"):
    return {"sel": sel, "T": T, "h": h, "G": 32 // h, "fwd_token": ft, "fwd_key": fk, "train_token": tt,
            "train_key": tk, "kernel_key": kernel_key, "kernel_token": "ranges", "peak_gib_token": 1.0,
            "peak_gib_key": 2.0, "max_diff": 0.0}


def test_repeated_cells_take_each_paths_median_and_a_path_that_did_not_run_has_no_time():
    runs = [grid([cell("random", 4096, 1, 10, k, 20, 8), cell("random", 4096, 16, 1, 1, 2, 2, kernel_key="ranges")])
            for k in (5, 9, 6)]
    entry = PT.entry_from(runs, "bench/results/x/")
    one, wide = entry["cells"]
    assert (one["fwd_key"], one["fwd_token"], one["runs"]) == (6, 10, 3)
    assert wide["fwd_key"] is None and wide["train_key"] is None
    assert entry["gpu"] == "GPU A" and entry["source"] == "bench/results/x/"


def test_the_check_reports_the_chosen_paths_distance_to_the_faster_one(capsys):
    entry = PT.entry_from([grid([cell("random", 4096, 1, 10, 5, 20, 10), cell("random", 4096, 8, 10, 12, 20, 25)]),
                           grid([cell("local", 4096, 1, 10, 10.2, 20, 10), cell("local", 4096, 8, 10, 20, 20, 30)],
                                "python -m bench.probes.path_grid --sel local")], "x")
    assert PT.check(entry) == 1.0  # h = 1: key-major (local forward: token-major); h = 8: token-major
    out = capsys.readouterr().out
    assert "| random | 4096 | 1 | key, 1.000 | key, 1.000 |" in out
    assert "| local | 4096 | 1 | token, 1.000 | key, 1.000 |" in out


def test_write_config_replaces_the_entry_of_the_same_gpu_and_release(tmp_path):
    config = tmp_path / "paths.json"
    other = {"gpu": "GPU B", "triton": "3.6.0", "source": "y", "cells": [{"sel": "random", "T": 1, "h": 1,
             "fwd_token": 1, "fwd_key": 1, "train_token": 1, "train_key": 1}]}
    config.write_text(json.dumps({"schema": 1, "entries": [other, {**other, "gpu": "GPU A"}]}))
    g = tmp_path / "g.json"
    g.write_text(json.dumps(grid([cell("random", 4096, 1, 10, 5, 20, 10)])))
    assert PT.main([str(g), "--source", "x", "--write-config", "--config", str(config)]) == 0
    entries = json.loads(config.read_text())["entries"]
    assert [e["gpu"] for e in entries] == ["GPU B", "GPU A"] and entries[1]["cells"][0]["fwd_key"] == 5


def test_a_choice_more_than_5_percent_behind_the_faster_path_fails(tmp_path, capsys):
    """Key-major only on local selections (random ones: slower) is a verdict the planner cannot give (it runs
    key-major on local selections only where random ones prefer it too): the local cell runs 2x behind."""
    g = tmp_path / "g.json"
    g.write_text(json.dumps(grid([cell("random", 4096, 1, 10, 12, 20, 24), cell("local", 4096, 1, 10, 5, 20, 10)])))
    assert PT.main([str(g), "--source", "x"]) == 1
    assert "| local | 4096 | 1 | token, 2.000 | token, 2.000 |" in capsys.readouterr().out
