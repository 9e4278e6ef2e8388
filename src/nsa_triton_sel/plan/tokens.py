"""Tokens per program: one, a forced count, or as many as share their selections.

:func:`static_tokens` (from the shapes) and :func:`choose_tokens` (from the spans) are the one place this is
decided, for the forward and for the backward's multi-token dq kernel alike (``plan.plan_call`` asks them
once per call).  Whether neighbouring tokens share their spans is measured on the device without a host
sync (:mod:`.share`, imported only when asked: this module stays free of torch).
"""

from __future__ import annotations

from ..device import ROWS, Device
from . import tiles as M


class PlanError(ValueError):
    """A request the planner cannot honour (a forced ``NSA_SEL_TRITON_TOKENS``): raised to the caller,
    never taken for a kernel failure (the dispatcher's fallback re-raises it)."""


def tokens_problem(tokens: int, h: int, dev: Device) -> str | None:
    """Why ``tokens`` tokens per program cannot run ``h`` heads on this device, or None."""
    cap = dev.max_rows
    return M.tokens_problem(tokens, h, cap if cap < ROWS else None)


def auto_tokens(h: int, S: int, dev: Device) -> int:
    """Tokens per program worth trying when neighbours share spans (1: the single-token kernel)."""
    tok = M.tokens_per_program(h, dev.max_rows)
    return tok if tok > 1 and S >= 2 * tok else 1


def static_tokens(requested: int, h: int, S: int, dev: Device, *, single: bool = False) -> tuple[int, int]:
    """Tokens per program known from the shapes alone: ``(tokens, candidate)``.  ``tokens`` > 0 is the answer
    (``requested`` 1 or N from ``NSA_SEL_TRITON_TOKENS``, N checked here; ``single``: per-head programs,
    split-L decode or a traced launch take 1); ``tokens`` 0 means "``candidate`` tokens if neighbouring tokens
    share their spans, else 1" (:func:`choose_tokens` measures that per call)."""
    if single or requested == 1:
        return 1, 1
    if requested > 1:
        problem = tokens_problem(requested, h, dev)
        if problem:
            raise PlanError(f"NSA_SEL_TRITON_TOKENS={requested} cannot run these inputs: {problem}; "
                            f"accepted here: auto, 1, or such a power of two")
        return (1 if S == 1 else requested), 1  # one query position: nothing to share
    candidate = auto_tokens(h, S, dev)
    return (0, candidate) if candidate > 1 else (1, 1)


def shared(spans) -> bool:
    """Whether neighbouring tokens share their spans (measured by :mod:`.share`)."""
    from .share import shared as measured  # imports torch: only when a call gets here

    return measured(spans)


def choose_tokens(spans, candidate: int) -> int:
    """``candidate`` when neighbouring tokens share their spans, else 1."""
    return candidate if shared(spans) else 1
