"""Step 4 of the way down: the planner, everything about a call's launches, forward and backward, in one place.

Given the shapes of a call, its spans, the device (``nsa_triton_sel.device``) and the known-bad row caps,
the planner decides the kernel (single-token, split-L decode, multi-token), the rows per program, tokens per
program, decode splits, tiles, warps and stages, the grids, and the backward's kernels and reader-list
bound.  The launchers in ``kernels/`` only read what it decided.

- :mod:`.call`: :func:`plan_call`, the operator's one question, and its :class:`Plan` (forward + backward);
- :mod:`.tiles`: the forward kernels' constexprs and launch options (``KernelMeta``, ``TokMeta``), the head
  dimensions table;
- :mod:`.forward`: one forward :class:`Launch` (:func:`selection`, :func:`packed`);
- :mod:`.tokens`: tokens per program (the sharing probe in :mod:`.share`);
- :mod:`.backward`: the backward kernels' configuration (``BackwardMeta``).

Pure Python at import (no torch, no triton): the compile-smoke registry (``compat/registry/variants.py``)
sweeps these functions in processes that may have no torch.
"""

from __future__ import annotations

from .call import Plan, entries_per_row, plan_call
from .forward import MAX_DECODE_SPLITS, Launch, cdiv, decode_splits, keymajor, packed, selection, use_decode
from .tokens import PlanError, auto_tokens, choose_tokens, static_tokens, tokens_problem

__all__ = ["MAX_DECODE_SPLITS", "Launch", "Plan", "PlanError", "auto_tokens", "cdiv", "choose_tokens",
           "decode_splits", "entries_per_row", "keymajor", "packed", "plan_call", "selection", "static_tokens",
           "tokens_problem", "use_decode"]
