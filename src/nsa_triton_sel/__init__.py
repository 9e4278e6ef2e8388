"""nsa-triton-sel: Triton kernels for the selection branch of Native Sparse Attention.

The public entry point is :func:`selection_attention`; :mod:`nsa_triton_sel.reference`
holds the float64 oracle and the packed-SDPA path.  Attributes are imported lazily so
that ``import nsa_triton_sel.kernels.forward`` (the compile-smoke child processes) does not
pay for the rest of the library.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_LAZY = {
    "selection_attention": "nsa_triton_sel.api",
    "block_indices_to_ranges": "nsa_triton_sel.contract",
    "oracle": "nsa_triton_sel.reference",
    "packed_sdpa": "nsa_triton_sel.reference",
    "sel_attn_ranges": "nsa_triton_sel.kernels.direct",
    "sel_attn_blocks": "nsa_triton_sel.kernels.direct",
    "sel_attn_tokens": "nsa_triton_sel.kernels.direct",
    "sel_attn_decode": "nsa_triton_sel.kernels.direct",
    "sel_attn_fwd_dense": "nsa_triton_sel.kernels.direct",
    "sel_attn_fwd_varlen": "nsa_triton_sel.kernels.direct",
    "kernel_source_hash": "nsa_triton_sel.provenance",  # which kernels a result is about (the ledger)
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'nsa_triton_sel' has no attribute {name!r}")
