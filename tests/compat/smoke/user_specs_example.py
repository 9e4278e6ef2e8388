"""Example: smoke-testing kernels that are not this project's.

A user describes their own ``@triton.jit`` kernels in the same spec format as the
package registry and points the harness at the list::

    nsa-sel smoke --specs my_pkg.my_module:SPECS --arch 80,90

(here: ``--specs user_specs_example:SPECS`` with ``tests/compat/smoke/`` on ``PYTHONPATH``, or
``--specs tests/compat/smoke/user_specs_example.py:SPECS``).  Only the constexprs, dtype and launch
options are given; the runtime arguments are read from the kernel and typed by the rule
(UPPERCASE -> pointer to ``dtype``, ``*_scale`` names -> fp32, others -> i32), with
``types`` for the exceptions.
"""

import triton
import triton.language as tl

from nsa_triton_sel.compat.registry.specs import CompileSpec


@triton.jit
def scaled_matmul(A, B, C, M, N, K, stride_am, stride_bk, stride_cm, sm_scale,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C = sm_scale * A @ B for one (BLOCK_M, BLOCK_N) tile, fp32 accumulation."""
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(A + rm[:, None] * stride_am + (k0 + rk)[None, :],
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        b = tl.load(B + (k0 + rk)[:, None] * stride_bk + rn[None, :],
                    mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(C + rm[:, None] * stride_cm + rn[None, :], acc * sm_scale,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


SPECS = [
    CompileSpec(
        name=f"user/scaled_matmul/{dtype}/{bm}x{bn}x{bk}",
        kernel=scaled_matmul,
        dtype=dtype,
        types={"C": "*fp32", "M": "i32", "N": "i32", "K": "i32"},  # fp32 output; UPPERCASE sizes
        constexprs={"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk},
        num_warps=4,
        num_stages=2,
    )
    for dtype, (bm, bn, bk) in (("fp16", (64, 64, 32)), ("bf16", (64, 64, 32)))
]
