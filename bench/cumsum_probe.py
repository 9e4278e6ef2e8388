"""Which part of the GPU canary `cumsum_spans` goes wrong on Triton 3.2.0 (H100)?

Runs the canary's kernel as shipped (nsa_triton_sel.compat.canaries.gpu_kernels), the same kernel with
num_warps=1, a bare tl.cumsum of the int32 span lengths, and the canary's span indexing with the prefix
sums computed by a triangular masked reduction (the way this project's kernels compute them).  Each
against torch; three repeats of each.  Usage (a GPU): PYTHONPATH=<triton tree>:src python -m bench.cumsum_probe
(its output on the H100: bench/results/2026-11-23-h100-triton3.1-3.8-gpu-evidence-kernels-c77c8425/cumsum_probe.log)
"""
import torch
import triton
import triton.language as tl

from nsa_triton_sel.compat.canaries import gpu_kernels as G


@triton.jit
def _bare_cumsum(LENS, OUT, NSPAN: tl.constexpr):
    s = tl.arange(0, NSPAN)
    tl.store(OUT + s, tl.cumsum(tl.load(LENS + s), 0))


@triton.jit
def _spans_triangular(LENS, STARTS, X, OUT, NSPAN: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    s = tl.arange(0, NSPAN)
    lens = tl.load(LENS + row * NSPAN + s)
    starts = tl.load(STARTS + row * NSPAN + s)
    ends = tl.sum(tl.where(s[None, :] <= s[:, None], lens[None, :], 0), 1)  # inclusive prefix sums, no cumsum
    j = tl.arange(0, BLOCK)
    span = tl.sum((ends[None, :] <= j[:, None]).to(tl.int32), 1)
    before = tl.sum(tl.where(s[None, :] < span[:, None], lens[None, :], 0), 1)
    first = tl.sum(tl.where(s[None, :] == span[:, None], starts[None, :], 0), 1)
    total = tl.sum(lens, 0)
    valid = j < total
    x = tl.load(X + first + (j - before), mask=valid, other=0.0)
    tl.store(OUT + row * BLOCK + j, x, mask=valid)


def inputs():
    g = torch.Generator().manual_seed(2)
    rows, nspan, block, T = 8, 4, 64, 256
    lens = torch.randint(0, 17, (rows, nspan), generator=g, dtype=torch.int32)
    starts = torch.stack([torch.randperm(T // 16, generator=g)[:nspan] * 16 for _ in range(rows)]).to(torch.int32)
    x = torch.randn(T, generator=g)
    ref = torch.zeros(rows, block, dtype=torch.float64)
    for r in range(rows):
        keys = torch.cat([torch.arange(int(s), int(s) + int(n)) for s, n in zip(starts[r], lens[r])])
        ref[r, : len(keys)] = x.double()[keys]
    return lens, starts, x, ref, rows, nspan, block


def spans(kernel, num_warps):
    lens, starts, x, ref, rows, nspan, block = inputs()
    out = torch.zeros(rows, block, device="cuda")
    kernel[(rows,)](lens.cuda(), starts.cuda(), x.cuda(), out, NSPAN=nspan, BLOCK=block, num_warps=num_warps)
    bad = (out.double().cpu() - ref).abs() > 1e-6
    return f"max err {float((out.double().cpu() - ref).abs().max()):.3g}, wrong rows {sorted(set(bad.nonzero()[:, 0].tolist()))}"


def bare(num_warps):
    lens = inputs()[0]
    wrong = []
    for r in range(lens.shape[0]):
        out = torch.empty(4, dtype=torch.int32, device="cuda")
        _bare_cumsum[(1,)](lens[r].cuda(), out, NSPAN=4, num_warps=num_warps)
        if not torch.equal(out.cpu(), torch.cumsum(lens[r], 0).to(torch.int32)):
            wrong.append((lens[r].tolist(), out.cpu().tolist()))
    return f"{len(wrong)}/{lens.shape[0]} rows wrong" + (f", e.g. tl.cumsum({wrong[0][0]}) = {wrong[0][1]}" if wrong else "")


def main() -> None:
    print(f"triton {triton.__version__} from {triton.__file__}; torch {torch.__version__}; {torch.cuda.get_device_name()}")
    for rep in range(3):
        for w in (4, 1):
            print(f"[{rep}] canary kernel (tl.cumsum), num_warps={w}: {spans(G._cumsum_spans_kernel, w)}")
            print(f"[{rep}] same indexing, triangular prefix sums, num_warps={w}: {spans(_spans_triangular, w)}")
            print(f"[{rep}] bare tl.cumsum of int32[4], num_warps={w}: {bare(w)}")


if __name__ == "__main__":
    main()
