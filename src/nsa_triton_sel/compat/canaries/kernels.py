"""Canary kernels: tiny reproductions of the failure classes that broke the seeds.

Each canary has a :class:`~nsa_triton_sel.compat.registry.compile_spec.CompileSpec` in
:data:`nsa_triton_sel.compat.canaries.SPECS` that says which verdict the smoke harness must
reach on which Triton version (``nsa-sel smoke --canaries``):

- ``broadcast_load``: a load through a ``[1, 64]`` pointer tile with a ``[64, 64]``
  mask (the seeds' "Cannot broadcast" error: a row offset missing its ``[:, None]``).
  A ``compile_error`` on 3.0 - 3.4; 3.5+ broadcasts the pointer silently (``ok``) and
  would load the wrong elements;
- ``broadcast_store``: the store variant, a ``compile_error`` on every 3.x
  ("Cannot broadcast" up to 3.5, "Expected pointer argument to have shape" from 3.6);
- ``loop_bound_tensor``: a ``for`` loop whose bound is a one-element tensor; the MLIR
  ``isIntOrFloat`` assertion aborts the compiler process (a ``crash``);
- ``block_ptr``: ``tl.make_block_ptr`` / ``tl.advance``, removed in 3.9
  (``unsupported`` or ``compile_error`` there, ``ok`` before).

Only the compile children import this module (it imports triton); the specs live in the
package's ``__init__`` with string references, so the harness itself never imports Triton.
"""

import triton
import triton.language as tl


@triton.jit
def broadcast_load(X, Y, stride, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = (offs[:, None] < stride) & (offs[None, :] < stride)
    # Bug on purpose: the row term lacks [:, None], so the pointer tile is [1, BLOCK].
    x = tl.load(X + offs[None, :], mask=mask, other=0.0)
    tl.store(Y + offs[:, None] * stride + offs[None, :], x, mask=mask)


@triton.jit
def broadcast_store(X, Y, stride, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = (offs[:, None] < stride) & (offs[None, :] < stride)
    x = tl.load(X + offs[:, None] * stride + offs[None, :], mask=mask, other=0.0)
    tl.store(Y + offs[None, :], x, mask=mask)  # [1, BLOCK] pointer, [BLOCK, BLOCK] mask


@triton.jit
def loop_bound_tensor(X, Y, n, BLOCK: tl.constexpr):
    # The seeds' varlen kernels derived row_start from a 1-element tensor like this one.
    start = tl.full((1,), 0, tl.int32)
    end = start + n
    acc = tl.zeros((BLOCK,), tl.float32)
    offs = tl.arange(0, BLOCK)
    for i in range(start, end):
        acc += tl.load(X + i * BLOCK + offs).to(tl.float32)
    tl.store(Y + offs, acc.to(Y.dtype.element_ty))


@triton.jit
def block_ptr(X, Y, m, n, stride_m, BLOCK: tl.constexpr):
    src = tl.make_block_ptr(base=X, shape=(m, n), strides=(stride_m, 1), offsets=(0, 0),
                            block_shape=(BLOCK, BLOCK), order=(1, 0))
    acc = tl.zeros((BLOCK, BLOCK), tl.float32)
    for _ in range(0, n, BLOCK):
        acc += tl.load(src, boundary_check=(0, 1)).to(tl.float32)
        src = tl.advance(src, (0, BLOCK))
    dst = tl.make_block_ptr(base=Y, shape=(m, n), strides=(stride_m, 1), offsets=(0, 0),
                            block_shape=(BLOCK, BLOCK), order=(1, 0))
    tl.store(dst, acc.to(tl.float16), boundary_check=(0, 1))
