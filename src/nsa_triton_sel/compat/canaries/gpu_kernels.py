"""GPU canaries: minimal Triton kernels of the public GPU miscompile classes, each with a float64 check.

Each ``check_*`` function runs its kernel on ``device`` and returns ``{"max_err": ..., "tol": ...}``
(the largest absolute error against a float64 reference and the bound); the child process of
:mod:`.gpu` calls one of them and reports.  A miscompile shows as an error above the bound (or NaN),
an illegal memory access as the child dying.  Under ``TRITON_INTERPRET=1`` they run on the CPU (the
arithmetic only: the interpreter cannot show a code-generation bug, which is why these run on GPUs).

- ``dot_trans_dk``: ``dk = tl.dot(tl.trans(ds), q)``, the attention backward's dk pattern that gave a
  silently wrong dk on Hopper from Triton 3.4 up to 3.7.1 (fla-org/flash-linear-attention #640, #826);
- ``warps4_m64``: a 64-row tile dot accumulated over K under ``num_warps=4`` (fla #984 / #988: still
  miscompiled on 3.7.1);
- ``odd_k_tail``: odd K with masked tail tiles (fla #1241: an illegal memory access on 3.7);
- ``cumsum_spans``: this project's own: span starts from ``tl.cumsum`` over span lengths, then a
  per-key span lookup (NaN for rows with 2+ spans on Triton 3.0, sm_90).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _dot_trans_kernel(DS, Q, DK, BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr):
    m = tl.arange(0, BM)
    n = tl.arange(0, BN)
    d = tl.arange(0, D)
    ds = tl.load(DS + m[:, None] * BN + n[None, :])  # [BM, BN]
    q = tl.load(Q + m[:, None] * D + d[None, :])  # [BM, D]
    dk = tl.dot(tl.trans(ds), q)  # [BN, D]
    tl.store(DK + n[:, None] * D + d[None, :], dk)


@triton.jit
def _tiled_dot_kernel(A, B, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    m = tl.arange(0, BM)
    n = tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        k = k0 + tl.arange(0, BK)
        a = tl.load(A + m[:, None].to(tl.int64) * K + k[None, :], mask=(m[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(B + k[:, None].to(tl.int64) * N + n[None, :], mask=(k[:, None] < K) & (n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(C + m[:, None] * N + n[None, :], acc, mask=(m[:, None] < M) & (n[None, :] < N))


@triton.jit
def _cumsum_spans_kernel(LENS, STARTS, X, OUT, NSPAN: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    s = tl.arange(0, NSPAN)
    lens = tl.load(LENS + row * NSPAN + s)
    starts = tl.load(STARTS + row * NSPAN + s)
    ends = tl.cumsum(lens, 0)  # inclusive prefix sums: where each span ends in the flattened keys
    j = tl.arange(0, BLOCK)
    # span of flattened key j: the number of spans ending at or before j
    span = tl.sum((ends[None, :] <= j[:, None]).to(tl.int32), 1)
    before = tl.sum(tl.where(s[None, :] < span[:, None], lens[None, :], 0), 1)
    first = tl.sum(tl.where(s[None, :] == span[:, None], starts[None, :], 0), 1)
    total = tl.sum(lens, 0)
    valid = j < total
    key = first + (j - before)
    x = tl.load(X + key, mask=valid, other=0.0)
    tl.store(OUT + row * BLOCK + j, x, mask=valid)


def _err(got: torch.Tensor, ref: torch.Tensor, rel: float) -> dict:
    diff = (got.double().cpu() - ref).abs()
    bad = bool(torch.isnan(got).any())
    scale = float(ref.abs().max()) or 1.0
    return {"max_err": float("nan") if bad else float(diff.max()), "tol": rel * scale}


def check_dot_trans_dk(device: str) -> dict:
    g = torch.Generator().manual_seed(0)
    BM, BN, D = 64, 64, 64
    ds = torch.randn(BM, BN, generator=g).to(torch.float16)
    q = torch.randn(BM, D, generator=g).to(torch.float16)
    dk = torch.empty(BN, D, dtype=torch.float32, device=device)
    _dot_trans_kernel[(1,)](ds.to(device), q.to(device), dk, BM=BM, BN=BN, D=D)
    return _err(dk, ds.double().T @ q.double(), 2e-3)


def _tiled(device: str, M: int, N: int, K: int, BK: int, num_warps: int) -> dict:
    g = torch.Generator().manual_seed(1)
    a = torch.randn(M, K, generator=g).to(torch.float16)
    b = torch.randn(K, N, generator=g).to(torch.float16)
    c = torch.empty(M, N, dtype=torch.float32, device=device)
    BM, BN = triton.next_power_of_2(max(M, 16)), triton.next_power_of_2(max(N, 16))
    _tiled_dot_kernel[(1,)](a.to(device), b.to(device), c, M, N, K, BM=BM, BN=BN, BK=BK, num_warps=num_warps)
    return _err(c, a.double() @ b.double(), 2e-3)


def check_warps4_m64(device: str) -> dict:
    return _tiled(device, M=64, N=64, K=256, BK=32, num_warps=4)


def check_odd_k_tail(device: str) -> dict:
    return _tiled(device, M=48, N=40, K=67, BK=32, num_warps=4)


def check_cumsum_spans(device: str) -> dict:
    g = torch.Generator().manual_seed(2)
    rows, nspan, block, T = 8, 4, 64, 256
    lens = torch.randint(0, 17, (rows, nspan), generator=g, dtype=torch.int32)
    starts = torch.stack([torch.randperm(T // 16, generator=g)[:nspan] * 16 for _ in range(rows)]).to(torch.int32)
    x = torch.randn(T, generator=g)
    out = torch.zeros(rows, block, device=device)
    _cumsum_spans_kernel[(rows,)](lens.to(device), starts.to(device), x.to(device), out, NSPAN=nspan, BLOCK=block)
    ref = torch.zeros(rows, block, dtype=torch.float64)
    for r in range(rows):
        keys = torch.cat([torch.arange(int(s), int(s) + int(n)) for s, n in zip(starts[r], lens[r])])
        ref[r, : len(keys)] = x.double()[keys]
    return _err(out, ref, 1e-6)
