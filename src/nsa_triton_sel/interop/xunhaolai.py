"""XunhaoLai's ``topk_sparse_attention`` (native-sparse-attention-triton), on this package's kernels.

Port: ``from nsa_triton_sel.interop.xunhaolai import topk_sparse_attention`` and keep the call
``topk_sparse_attention(q, k, v, topk_idx, block_size, cu_seqlens, softmax_scale=None)``.

Its semantics, as its Triton kernel and its torch reference define them:

- ``q [total, HQ, D]``, ``k/v [total, H, D]`` packed by ``cu_seqlens [N + 1]`` (queries and keys alike);
  query head ``j`` reads key/value head ``j // (HQ // H)``; the output is ``[total, HQ, D]``;
  ``softmax_scale`` defaults to ``1 / sqrt(D)``.
- ``topk_idx [H, total, k]``: block ``i`` is keys ``[i * block_size, (i + 1) * block_size)`` of the
  query's own sequence; a query at position ``t`` (counted from its sequence's start) sees keys ``<= t``
  only, and blocks after ``t // block_size`` or negative (``-1``: padding) are ignored.
- Differences, all outside its contract: any ``block_size`` and any integer dtypes are accepted (it
  asserts 32/64/128/256 and int32); the valid indices may sit in any slots (it needs them first,
  padding on the right); a token with no valid block gets a zero output (it gives NaN); a block
  repeated within a row raises ``ValueError``; ``cu_seqlens=None`` is one sequence.
"""

from __future__ import annotations

from .. import api, arguments
from ..contract import require_tensors


def topk_sparse_attention(q, k, v, topk_idx, block_size: int, cu_seqlens, softmax_scale=None, *,
                          validate: bool = True):
    """XunhaoLai's ``topk_sparse_attention``: ``o [total, HQ, D]``; differentiable.

    ``validate`` (not XunhaoLai's): ``False`` skips the value checks and their host sync (hot loops)."""
    require_tensors(3, "(q/k/v [total, heads, D], topk_idx [H, total, k])", q=q, k=k, topk_idx=topk_idx)
    return api.run(arguments.parse(q, k, v, block_indices=topk_idx.permute(1, 0, 2), block_size=block_size,
                                   scale=softmax_scale, cu_seqlens=cu_seqlens, validate=validate, lenient=True))
