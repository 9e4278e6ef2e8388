"""fla-core's ``parallel_nsa`` (fla 0.6.0, ``fla.ops.nsa``), selection branch, on this package's kernels.

Port: ``from nsa_triton_sel.interop.fla import parallel_nsa`` and keep the call
``parallel_nsa(q, k, v, block_indices=..., block_counts=..., block_size=64, scale=None, cu_seqlens=...)``.

fla's semantics, as its kernels and its naive reference define them:

- ``q [B, TQ, HQ, K]``, ``k [B, TK, H, K]``, ``v [B, TK, H, V]``; query head ``j`` reads key/value head
  ``j // (HQ // H)``; the output is ``[B, TQ, HQ, V]`` in q's dtype; ``scale`` defaults to ``K ** -0.5``.
- ``block_indices [B, TQ, H, S]``: block ``i`` is keys ``[i * block_size, (i + 1) * block_size)`` of the
  query's own sequence.  Causal inside a block: a query at position ``t`` sees keys ``<= t`` only, and a
  block starting after ``t`` is ignored, as is any negative index (``-1`` is the padding).
- The queries are the last ``TQ`` tokens of their sequence: position ``t = TK - TQ + i`` (per sequence
  with ``cu_seqlens=(cu_seqlens_q, cu_seqlens_k)``; ``t = i`` when queries and keys are packed alike).
- ``block_counts``: an int or a ``[B, TQ, H]`` tensor, the number of leading slots of each row that are
  used; the slots at or after it are ignored (a count above ``S`` means all ``S``).  Unlike fla 0.6.0,
  whose forward reads every slot when ``block_counts`` is an int (its dk/dv backward reads only the
  first ``block_counts``), an int is honoured here in the forward and the backward alike; ``None``
  (the default here) uses every slot.
- ``cu_seqlens``: ``[N + 1]`` (``B = 1``), or the tuple ``(cu_seqlens_q, cu_seqlens_k)`` for decode and
  chunked prefill, which here also has gradients.

A block repeated within a row raises ``ValueError`` (fla would count its keys twice).  A token whose
slots are all padding gets a zero output.
"""

from __future__ import annotations

import torch

from .. import api, arguments
from ..contract import require_tensors


def _used_slots(block_indices, block_counts):
    """``block_indices`` with the slots at or after ``block_counts`` made padding (an int: a view)."""
    if block_counts is None:
        return block_indices
    if isinstance(block_counts, bool) or not isinstance(block_counts, (int, torch.Tensor)):
        raise TypeError(f"block_counts must be an int, a [B, TQ, H] integer tensor or None, got "
                        f"{type(block_counts).__name__}")
    if isinstance(block_counts, int):
        if block_counts < 0:
            raise ValueError(f"block_counts={block_counts}; accepted: an int >= 0 (the number of slots used)")
        return block_indices[..., :block_counts]
    if block_counts.dtype.is_floating_point or block_counts.dtype == torch.bool:
        raise TypeError(f"block_counts must be an integer tensor, got {block_counts.dtype}")
    if tuple(block_counts.shape) != tuple(block_indices.shape[:-1]):
        raise ValueError(f"block_counts has shape {list(block_counts.shape)}; expected [B, TQ, H] = "
                         f"{list(block_indices.shape[:-1])} (block_indices without its last dimension)")
    slot = torch.arange(block_indices.shape[-1], device=block_indices.device)
    return torch.where(slot < block_counts[..., None], block_indices, -1)


def parallel_nsa(q, k, v, block_indices, block_counts=None, block_size: int = 64, scale=None, cu_seqlens=None, *,
                 validate: bool = True):
    """fla's ``parallel_nsa`` for given ``block_indices`` (the selection branch): ``o [B, TQ, HQ, V]``.

    ``validate`` (not fla's): ``False`` skips the value checks and their host sync (hot loops)."""
    require_tensors(4, "in fla's layout ([B, T, heads, ...])", q=q, k=k, block_indices=block_indices)
    idx = _used_slots(block_indices, block_counts)
    kw = dict(block_indices=idx, block_size=block_size, scale=scale, validate=validate, lenient=True)
    if cu_seqlens is None:
        TQ, TK = q.shape[1], k.shape[1]
        positions = None if TQ == TK else torch.arange(TK - TQ, TK, device=q.device)
        return api.run(arguments.parse(q, k, v, positions=positions, **kw))
    if isinstance(cu_seqlens, (tuple, list)):
        if len(cu_seqlens) != 2:
            raise ValueError("cu_seqlens as a tuple is (cu_seqlens_q, cu_seqlens_k)")
        return api.run(arguments.parse(q, k, v, cu_seqlens_q=cu_seqlens[0], cu_seqlens_k=cu_seqlens[1], **kw))
    return api.run(arguments.parse(q, k, v, cu_seqlens=cu_seqlens, **kw))
