"""Canary kernels that reproduce the seeds' compile-failure classes (see ``kernels.py``)."""
