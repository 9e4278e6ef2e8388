"""Canary kernels: tiny reproductions of the failure classes that broke the seeds.

Each canary has a :class:`~nsa_triton_sel.compat.specs.CompileSpec` in :data:`SPECS` that says
which verdict the smoke harness must reach on which Triton version
(``nsa-sel smoke --canaries`` or ``--specs tests/canaries/kernels.py:SPECS``):

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

This file imports only triton and :mod:`nsa_triton_sel.compat.specs` (the children load it by path).
"""

import triton
import triton.language as tl

from nsa_triton_sel.compat.specs import CompileSpec


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


_BCAST = "Cannot broadcast"
SPECS = [
    CompileSpec(
        name="canary/broadcast_load", kernel=broadcast_load, constexprs={"BLOCK": 64}, canary=True,
        expected={"<3.5": "compile_error", ">=3.5": "ok"}, expected_message={"<3.5": _BCAST},
        note="[1,64] pointer, [64,64] mask, load",
    ),
    CompileSpec(
        name="canary/broadcast_store", kernel=broadcast_store, constexprs={"BLOCK": 64}, canary=True,
        expected={">=3.0": "compile_error"},
        expected_message={"<3.6": _BCAST, ">=3.6": "Expected pointer argument to have shape"},
        note="[1,64] pointer, [64,64] mask, store",
    ),
    CompileSpec(
        name="canary/loop_bound_tensor", kernel=loop_bound_tensor, constexprs={"BLOCK": 64}, canary=True,
        expected={">=3.0": "crash"}, expected_message={">=3.0": "isIntOrFloat"},
        note="for-loop bound is a 1-element tensor: MLIR assertion abort",
    ),
    CompileSpec(
        name="canary/block_ptr", kernel=block_ptr, constexprs={"BLOCK": 64}, canary=True,
        expected={"<3.9": "ok", ">=3.9": ["unsupported", "compile_error"]},
        note="tl.make_block_ptr / tl.advance (removed in 3.9)",
    ),
]
