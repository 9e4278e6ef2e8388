"""pytest-benchmark suite: Triton selection attention and SDPA side by side per shape group.

Run (GPU only; skipped with a reason elsewhere)::

    pytest bench/suites/test_bench_sel.py --benchmark-json=bench-triton-X.json \
        --benchmark-group-by=group --benchmark-columns=min,median,iqr,rounds

Groups (``benchmark.group``): the seeds' packed shapes (``dense``/``varlen``/``decode``,
Triton vs ``sdpa_rows`` on the same packed tensors) and NSA-shaped ranges-native inputs
(``nsa-*``: Triton ``sel_attn_ranges`` vs ``packed_sdpa``, plus fla-core's
``parallel_nsa_fwd``, XunhaoLai's ``_topk_sparse_attention_fwd`` and FlexAttention when they
are usable), and the training step (``train-*``: forward + backward of the public
``selection_attention`` on inputs that require grad, against the packed-SDPA path, fla-core's
``ParallelNSAFunction`` and XunhaoLai's ``topk_sparse_attention``).  Before timing, every
contender is checked against the first one's output (``torch.testing.assert_close``).
Set ``NSA_BENCH_FLEX=0`` to leave FlexAttention out (its first call compiles).  The peers are
imported from ``NSA_BENCH_PEERS`` (a folder with ``fla_core/``, ``xunhaolai/``, ``einops_pkg/``)
or the environment, and skipped with the reason where they do not import.
"""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("pytest_benchmark", reason="pytest-benchmark is not installed (pip install -e .[bench])")
from bench.common import accounting, problems
from bench.perf import sel_case

# (group id, dist, N, H, Dk, Dv, L) for the packed groups.
PACKED = [
    ("dense-N1024-H8-D128-L256", "few", 1024, 8, 128, 128, 256),
    ("dense-N1024-H8-D128-L1024", "few", 1024, 8, 128, 128, 1024),
    ("varlen-many-N1024-H8-D128-L512", "many", 1024, 8, 128, 128, 512),
    ("varlen-mixed-N256-H4-D64-L256", "mixed", 256, 4, 64, 64, 256),
    ("decode-N64-H4-D128-L512", "decode", 64, 4, 128, 128, 512),
]
# NSA_BENCH_T: the sequence lengths of the canonical NSA groups (the GPU runner uses 4096,32768).
NSA_T = [int(t) for t in os.environ.get("NSA_BENCH_T", "4096").split(",") if t.strip()]
NSA = [(f"nsa-T{t}-{p}", t, p) for t in NSA_T for p in ("random", "local")]
NSA_DIMS: dict = {}  # canonical G=4, h=16, D=128, block 64, top-16
# Packed SDPA (a gather + SDPA per chunk of rows) takes seconds per call beyond this: compared up to it only.
SDPA_MAX_T = int(os.environ.get("NSA_BENCH_SDPA_MAX_T", "8192"))
DRY = os.environ.get("NSA_BENCH_DRYRUN") == "1"
DEVICE = "cpu" if DRY else "cuda"
if DRY:  # plumbing check on the CPU (see bench/conftest.py): tiny shapes, same groups
    PACKED = [(g, d, 4, 4, 32, 32 if d != "decode" else 32, 64 if d != "decode" else 128)
              for g, d, *_ in PACKED]
    NSA = [(g, 32, p) for g, _, p in NSA if p == "random"]  # one row per contender: the plumbing is the same
    NSA_DIMS = dict(G=2, h=4, D=32, bs=16, topn=2)


def _args(dist):
    from bench.perf import bench_sel_triton as B

    return B.parse_args(["--dry-run"] + (["--decode", "1"] if dist == "decode" else ["--dist", dist]))


@pytest.mark.parametrize("impl", ["triton", "sdpa"])
@pytest.mark.parametrize("shape", PACKED, ids=[s[0] for s in PACKED])
def test_packed(gpu_bench, benchmark, shape, impl):
    """Seed shapes: Triton kernel vs SDPA on the identical packed tensors."""
    gid, dist, N, H, Dk, Dv, L = shape
    a = _args(dist)
    a.dtype, a.extra = "fp16", False
    case = sel_case.make_case(a, dist, N, H, Dk, Dv, L, torch.device(DEVICE))
    tri, ref, _, _ = sel_case.sides(a, dist, case)
    o_ref = ref()
    torch.testing.assert_close(tri().float().reshape(o_ref.shape), o_ref.float(), atol=2e-2, rtol=2e-2)
    benchmark.group = gid
    benchmark.extra_info.update({"dist": dist, "N": N, "H": H, "D": Dk, "Dv": Dv, "L": L, "impl": impl})
    gpu_bench(tri if impl == "triton" else ref, nbytes=accounting.sel_bytes(N, H, Dk, Dv, L, case.q.element_size()),
              flops=accounting.sel_flops(N, H, Dk, Dv, L))


@pytest.fixture(scope="module")
def nsa_inputs():
    cache = {}

    def get(T, pattern):
        if (T, pattern) not in cache:
            cache.clear()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            cache[(T, pattern)] = problems.nsa_problem(T, pattern=pattern, device=DEVICE,
                                                dtype=torch.float16 if DRY else torch.bfloat16, **NSA_DIMS)
        return cache[(T, pattern)]

    return get


def _nsa_fn(impl, p):
    from nsa_triton_sel.kernels.direct import sel_attn_ranges
    from nsa_triton_sel.reference import packed_sdpa

    if impl == "triton":
        return lambda: sel_attn_ranges(p["q"], p["k"], p["v"], p["ranges"])
    if impl == "dispatch":  # what a user gets: the dispatcher picks the kernel variant
        from nsa_triton_sel import selection_attention

        return lambda: selection_attention(p["q"], p["k"], p["v"], p["ranges"], backend="triton", validate=False)
    if impl == "sdpa":
        if p["T"] > SDPA_MAX_T:
            pytest.skip(f"packed SDPA at T={p['T']} takes seconds per call; compared up to T={SDPA_MAX_T} "
                        "(NSA_BENCH_SDPA_MAX_T)")
        return lambda: packed_sdpa(p["q"], p["k"], p["v"], p["ranges"], validate=False)
    if impl in ("fla", "xunhaolai"):
        from bench.perf import perf_nsa

        fn = perf_nsa.peer(impl, p)
        if isinstance(fn, str):
            pytest.skip(f"{impl} not usable here: {fn}")
        return fn
    if impl == "flex":
        if os.environ.get("NSA_BENCH_FLEX", "1") == "0":
            pytest.skip("FlexAttention disabled by NSA_BENCH_FLEX=0")
        try:
            return problems.flex_contender(p)
        except Exception as exc:  # noqa: BLE001 - an optional contender
            pytest.skip(f"FlexAttention not usable here: {type(exc).__name__}: {exc}")
    raise ValueError(impl)


def _as_tokens(o, p):
    """Any contender's output as [B, S, G, h, D] float32."""
    B, S, G, h, D = p["B"], p["S"], p["G"], p["h"], p["D"]
    if isinstance(o, tuple):
        o = o[0]
    if o.dim() == 4 and o.shape[1] == G and o.shape[2] == S * h:  # flex: [B, G, S*h, D]
        o = o.view(B, G, S, h, D).permute(0, 2, 1, 3, 4)
    return o.reshape(B, S, G, h, D).float()


@pytest.mark.parametrize("impl", ["triton", "dispatch", "sdpa", "fla", "xunhaolai"])
@pytest.mark.parametrize("shape", NSA, ids=[s[0] for s in NSA])
def test_nsa(gpu_bench, benchmark, nsa_inputs, shape, impl):
    """Canonical NSA selection (G=4, h=16, D=128, block 64, top-16) on the ranges-native path."""
    _nsa_case(gpu_bench, benchmark, nsa_inputs, shape, impl)


@pytest.mark.parametrize("shape", NSA, ids=[s[0] for s in NSA])
def test_nsa_flex(gpu_bench, benchmark, nsa_inputs, shape):
    """FlexAttention on the same inputs; last in the file because its first call compiles."""
    _nsa_case(gpu_bench, benchmark, nsa_inputs, shape, "flex")


def _nsa_case(gpu_bench, benchmark, nsa_inputs, shape, impl):
    gid, T, pattern = shape
    p = nsa_inputs(T, pattern)
    fn = _nsa_fn(impl, p)
    want = _as_tokens(_nsa_fn("triton", p)(), p) if impl != "triton" else None
    got = _as_tokens(fn(), p)
    if want is not None:
        torch.testing.assert_close(got, want, atol=3e-2, rtol=3e-2)
    benchmark.group = gid
    nbytes, flops = problems.nsa_work(p)
    benchmark.extra_info.update({"T": T, "pattern": pattern, "G": p["G"], "h": p["h"], "D": p["D"],
                                 "block": p["bs"], "topn": p["topn"], "impl": impl})
    # Only our kernel is captured: packed_sdpa and the dispatcher sync with the host (longest
    # row, locality check), fla and FlexAttention are other projects' code; all run for
    # milliseconds here, where an eager launch gap is noise.
    gpu_bench(fn, nbytes=nbytes, flops=flops, rounds=10 if impl == "sdpa" else 20, graph=impl == "triton")


TRAIN = [(f"train-T{t}-{s}", t, s) for t in NSA_T for s in ("random", "local")]
if DRY:
    TRAIN = [(g, 64, s) for g, _, s in TRAIN if s == "random"]


@pytest.mark.parametrize("impl", ["ours-api", "sdpa", "fla", "xunhaolai"])
@pytest.mark.parametrize("shape", TRAIN, ids=[s[0] for s in TRAIN])
def test_train(gpu_bench, benchmark, shape, impl):
    """Forward + backward on the canonical NSA shape: every contender gets the same block
    indices and output gradient; its input gradients are checked against ours first."""
    from bench.train import train_contenders as TC

    gid, T, sel = shape
    small = {"h": 4, "d": 32} if DRY else {}
    p = TC.make_problem(T, sel, device=DEVICE, dtype=torch.float16 if DRY else torch.bfloat16, **small)
    if impl in TC.PEERS:
        why = TC.peer_status(impl) if not DRY else "needs a GPU"
        if why:
            pytest.skip(f"{impl} not usable here: {why}")
    if impl == "sdpa" and T > SDPA_MAX_T:
        pytest.skip(f"packed SDPA training at T={T} does not fit the time budget; compared up to T={SDPA_MAX_T}")
    make = {"ours-api": TC.ours_api, "sdpa": TC.sdpa, **TC.PEERS}[impl]

    def grads(c):
        for x in c.leaves:
            x.grad = None
        torch.autograd.backward(c.forward(), c.grad_out)
        return c.to_ours([x.grad for x in c.leaves])

    c = make(p)
    if impl != "ours-api":
        # A sanity check that both compute the same gradients, not the correctness test (that is the
        # float64 comparison of tests/library/kernels/test_backward_gpu.py): two bf16 gradients of O(1) values differ by a
        # few bf16 ulps, and on the H100 2 of 2M dk elements of packed SDPA vs ours differed by 0.054.
        for got, want in zip(grads(c), grads(TC.ours_api(p))):
            torch.testing.assert_close(got.float(), want.float(), atol=1e-1, rtol=5e-2)

    def step():
        for x in c.leaves:
            x.grad = None
        torch.autograd.backward(c.forward(), c.grad_out)

    benchmark.group = gid
    benchmark.extra_info.update({"T": T, "sel": sel, "impl": impl, "G": TC.G, "h": p.q.shape[3], "D": p.q.shape[4],
                                 "block": TC.BS, "topn": TC.TOPK})
    # Timed eagerly, every contender alike (packed SDPA synchronises with the host, so no step is captured): each
    # round is held behind a spin kernel while the host enqueues it, so the time is the step's GPU time, and
    # extra_info["host_launch_us"] what the host spends on it.
    gpu_bench(step, nbytes=0, flops=int(p.flops()), rounds=5 if impl == "sdpa" else 15, graph=False)
