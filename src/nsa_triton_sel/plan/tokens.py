"""Tokens per program: one, a forced count, or as many as share their selections.

:func:`decide_tokens` is the one place this is decided: the forward's plan asks it, and the
backward's plan asks it the same question (the multi-token dq kernel).  Whether neighbouring tokens share their spans is
measured on the device without a host sync (:mod:`.share`, imported only when asked: this module
stays free of torch).
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


def decide_tokens(requested: int, spans, h: int, S: int, dev: Device, *, single: bool = False) -> int:
    """Tokens per program of a call: ``requested`` 1 or N (``NSA_SEL_TRITON_TOKENS``; N is checked here),
    0 = the multi-token count when neighbouring tokens share their spans (:func:`choose_tokens`), else 1.
    ``single`` (per-head programs, split-L decode, a traced launch): always 1."""
    if single or requested == 1:
        return 1
    if requested > 1:
        problem = tokens_problem(requested, h, dev)
        if problem:
            raise PlanError(f"NSA_SEL_TRITON_TOKENS={requested} cannot run these inputs: {problem}; "
                            f"accepted here: auto, 1, or such a power of two")
        return 1 if S == 1 else requested  # one query position: nothing to share
    return choose_tokens(spans, h, dev)


def choose_tokens(spans, h: int, dev: Device) -> int:
    """The multi-token count when neighbouring tokens share their spans (measured by :mod:`.share`), else 1."""
    tok = auto_tokens(h, spans.shape[1], dev)
    if tok == 1:
        return 1
    from .share import shared  # imports torch: only when a call gets here

    return tok if shared(spans) else 1
