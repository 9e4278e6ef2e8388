"""Drop-in replacements for the selection branch of other NSA implementations, on this package's kernels.

- :func:`nsa_triton_sel.interop.fla.parallel_nsa`: fla-core's ``parallel_nsa`` (0.6.0) given ``block_indices``;
- :func:`nsa_triton_sel.interop.xunhaolai.topk_sparse_attention`: XunhaoLai's ``topk_sparse_attention``.

Both are thin wrappers of :func:`nsa_triton_sel.selection_attention` (the same operator underneath:
differentiable, ``torch.compile``-friendly) that take the peer's arguments, layouts and conventions.
"""
