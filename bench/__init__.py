"""The benchmarks, a package run from the project root: ``python -m bench.<script>``.

Scripts: ``bench_sel_triton`` (the seeds' sweep, Triton vs packed SDPA), ``sel_threshold_from_csv``
(report, plot and ``sel_triton_min_L`` from its CSVs), ``bench_nsa`` and ``perf_nsa`` (NSA
contender tables), ``decode_splits``, ``host_cost`` (the host cost of a call); ``test_bench_sel`` is
the pytest-benchmark suite the ``bench-X`` lanes run (``pytest bench/``), ``run_h100.sh`` the whole
GPU benchmark in one call.  Shared pieces, one concern each:

- :mod:`.csvio`: the CSV schema, reading/writing it, list arguments;
- :mod:`.accounting`: bytes, FLOPs, effective rates, device ceilings, the environment columns;
- :mod:`.timers`: CUDA-event, CUDA-graph, wall and modelled timers;
- :mod:`.problems`: span layouts and NSA selections, the contenders' adapters;
- :mod:`.guards`: suspect-row guards of a sweep;
- :mod:`.sel_case`: one comparison of the sweep; :mod:`.threshold_rule`: the threshold rule.
"""
