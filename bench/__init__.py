"""The benchmarks, a package run from the project root: ``python -m bench.<folder>.<script>``.

- :mod:`.suites`: the pytest-benchmark suites of the ``bench-X`` lanes (their fixtures: ``bench/conftest.py``);
- :mod:`.ab`: the GPU A/B of a change against the landed main;
- :mod:`.perf`: timing scripts of the library's calls (the selection sweep, contender tables, host cost);
- :mod:`.train`: forward + backward against the peers;
- :mod:`.probes`: the kernels against their variants and ceilings;
- :mod:`.analysis`: the threshold rule and report, the README's pictures;
- :mod:`.device`: the GPU machine's drivers;
- :mod:`.common`: the pieces they share.
"""
