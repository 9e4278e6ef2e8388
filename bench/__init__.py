"""The benchmarks, a package run from the project root: ``python -m bench.<script>``.

Scripts: ``bench_sel_triton`` (the seeds' sweep, Triton vs packed SDPA), ``sel_threshold_from_csv``
(report, plot and ``sel_triton_min_L`` from its CSVs), ``bench_nsa`` and ``perf_nsa`` (NSA
contender tables), ``decode_splits``, ``host_cost`` (the host cost of a call); ``test_bench_sel`` is
the pytest-benchmark suite the ``bench-X`` lanes run (``pytest bench/``), ``run_h100.sh`` the whole
GPU benchmark in one call.  Shared pieces (CSV, accounting, timers, problems, guards) are in
:mod:`.common`; :mod:`.sel_case` is one comparison of the sweep, :mod:`.threshold_rule` the threshold rule.
"""
