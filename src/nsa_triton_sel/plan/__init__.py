"""The planner: everything about a launch, decided in one place, forward and backward.

Given the shapes of a call, its spans, the device (``nsa_triton_sel.device``) and the known-bad
row caps, the planner decides the kernel (single-token, split-L decode, multi-token), the rows per
program, tokens per program, decode splits, tiles, warps and stages, and the grids.  The
launchers in ``kernels/`` only read what it decided.

- :mod:`.tiles`: the forward kernels' constexprs and launch options (``KernelMeta``, ``TokMeta``);
- :mod:`.forward`: the forward's :class:`Plan` (:func:`for_call`, :func:`selection`, :func:`packed`);
- :mod:`.tokens`: tokens per program (:func:`decide_tokens`; the sharing probe in :mod:`.share`);
- :mod:`.backward`: the backward kernels' configuration (``BackwardMeta``, :func:`backward.for_call`).

Pure Python at import (no torch, no triton): the compile-smoke registry (``compat/variants.py``)
sweeps these functions in processes that may have no torch.
"""

from __future__ import annotations

from .forward import MAX_DECODE_SPLITS, Plan, cdiv, decode_splits, for_call, packed, selection, use_decode
from .tokens import PlanError, auto_tokens, decide_tokens, tokens_problem

__all__ = ["MAX_DECODE_SPLITS", "Plan", "PlanError", "auto_tokens", "cdiv", "clear_caches", "decide_tokens",
           "decode_splits", "for_call", "packed", "selection", "tokens_problem", "use_decode"]


def clear_caches() -> None:
    """Forget the devices, plans and sharing measurements read so far (``config.refresh`` calls this)."""
    import sys

    from .. import device

    device.clear()
    selection.cache_clear()
    packed.cache_clear()
    share = sys.modules.get(f"{__name__}.share")  # only if a call imported it (it imports torch)
    if share is not None:
        share.clear()
