"""The pytest-benchmark suites the ``bench-X`` lanes run (their fixtures and hooks: ``bench/conftest.py``)."""
