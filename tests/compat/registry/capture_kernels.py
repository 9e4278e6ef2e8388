"""Kernels in the styles of the common Triton code (fla, XunhaoLai, FSA, Triton's tutorials), for the capture tests:
lowercase ``*_ptr`` arguments and ``cu_seqlens``, an autotuned kernel, and a one-element tuple of pointers (FSA's
``lse_ptrs = (ptr + off,)``) that some Triton releases reject.  ``python capture_kernels.py`` launches each once
on the device it finds (the CPU under ``TRITON_INTERPRET=1``)."""

import inspect

import torch
import triton
import triton.language as tl


@triton.jit
def scale_rows(x_ptr, out_ptr, cu_seqlens, n_cols, scale, BLOCK: tl.constexpr):
    """out = scale * x for the rows of sequence ``program_id`` (packed by cu_seqlens)."""
    seq = tl.program_id(0)
    start, end = tl.load(cu_seqlens + seq), tl.load(cu_seqlens + seq + 1)
    cols = tl.arange(0, BLOCK)
    for row in range(start, end):
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
        tl.store(out_ptr + row * n_cols + cols, x * scale, mask=cols < n_cols)


def _run_once(kernel_call, quantiles=None, **_):
    """The interpreter has no timer: each config runs once and takes the same time (the first one wins)."""
    kernel_call()
    return [1.0, 1.0, 1.0] if quantiles else 1.0


CONFIGS = [triton.Config({"BLOCK": 32}, num_warps=1), triton.Config({"BLOCK": 64}, num_warps=2)]
BENCH = {"do_bench": _run_once} if not torch.cuda.is_available() and "do_bench" in inspect.signature(
    triton.autotune).parameters else {}


@triton.autotune(configs=CONFIGS, key=["n"], **BENCH)
@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


@triton.jit
def tuple_store(x_ptr, lse_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    lse_ptrs = (lse_ptr + offs,)  # a one-element tuple where a pointer block is meant
    tl.store(lse_ptrs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def main() -> None:
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(10, 40, device=dev)
    cu = torch.tensor([0, 4, 10], device=dev, dtype=torch.int32)
    scale_rows[(2,)](x, torch.empty_like(x), cu, 40, 0.5, BLOCK=64)
    y = torch.zeros(100, device=dev)
    add_one[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](y, 100)
    try:
        tuple_store[(1,)](x, torch.empty(64, device=dev), 40, BLOCK=64)
    except Exception as exc:  # noqa: BLE001 - rejected by some releases: the launch is what is captured
        print(f"tuple_store: {type(exc).__name__}")


if __name__ == "__main__":
    main()
