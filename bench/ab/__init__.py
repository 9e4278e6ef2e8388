"""The GPU A/B: the working tree against a base revision on one GPU, on pytest-benchmark's own compare.

- ``test_ab.py``: the suite (the canonical grid through the public ``selection_attention`` only, so any
  revision of the library can be measured by it);
- ``run.py``: the driver (base, head, base again; ``--benchmark-compare-fail`` judges the head; a table of
  ratios with the base's drift; extra peak memory checked beside it).

README.md beside this file says how to run it and how to quote it.
"""
