"""The package registry without its known-bad skips: to measure which variants abort where."""
import dataclasses
from nsa_triton_sel.compat.specs import SPECS as _S

SPECS = [dataclasses.replace(s, skip=None) for s in _S]
