"""The package registry without its known-bad skips: to measure which variants abort where.

``nsa-sel smoke --arch 90 --specs bench/uncapped_specs.py:SPECS`` under the Triton of a window; what it found
for the 64-row tiles of Triton 3.0-3.2: bench/results/2026-11-22-cpu-triton3.0-3.2-row-cap-compiles/README.md."""
import dataclasses
from nsa_triton_sel.compat.registry.specs import SPECS as _S

SPECS = [dataclasses.replace(s, skip=None) for s in _S]
