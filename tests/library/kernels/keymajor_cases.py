"""The key-major forward's cases, shared by its interpreter and GPU tests: what broke the seeds (L just over 64,
multi-span and multi-tile rows, empty rows, partial tiles, odd h, Dk = 192 and Dk != Dv, strided inputs) and
what is new here (a span over several key tiles, a tile read by several chunks, a non-finite value that only
its readers may see)."""

from __future__ import annotations

import pytest
import torch

from kernel_checks import check_against_oracle
from nsa_triton_sel.contract import block_indices_to_ranges
from nsa_triton_sel.kernels import direct
from nsa_triton_sel.testing import make_problem, nsa_block_indices

# (name, make_problem keywords, span_len): spans of at most span_len keys (0: the problem's own bound)
RANGE_CASES = [
    ("h1-multispan", dict(B=1, S=6, G=2, h=1, Dk=32, Dv=32, T=150, n=4), 70),
    ("h3-empty-rows", dict(B=2, S=3, G=1, h=3, Dk=16, Dv=48, T=100, n=3, empty_frac=0.4), 100),
    ("h8-dk192-dv128-strided", dict(B=1, S=3, G=2, h=8, Dk=192, Dv=128, T=130, n=3, noncontiguous=True), 130),
]


# The Gluon kernels' configuration (bf16, Dk = Dv = 128) on what broke the seeds: L just over 64, rows without
# keys, a last partial key tile, multi-span rows, odd and even h
GLUON_RANGE_CASES = [
    ("h1-multispan-L65", dict(B=1, S=70, G=2, h=1, Dk=128, Dv=128, T=65, n=4), 64),
    ("h3-empty-rows", dict(B=2, S=40, G=1, h=3, Dk=128, Dv=128, T=300, n=3, empty_frac=0.4), 100),
    ("h5-partial-tile", dict(B=1, S=90, G=2, h=5, Dk=128, Dv=128, T=1000, n=5), 64),
    ("h8-multispan", dict(B=1, S=50, G=3, h=8, Dk=128, Dv=128, T=777, n=6), 130),
]


def ranges_case(kw, span_len, dtype, device, seed):
    p = make_problem(**kw, dtype=dtype, seed=seed)
    r = p.ranges.long()
    r[..., 1] = torch.minimum(r[..., 1], r[..., 0] + span_len)  # spans of at most span_len keys
    return p.q.to(device), p.k.to(device), p.v.to(device), r.to(torch.int32).to(device)


def check_ranges(kw, span_len, dtype, device, seed, check=check_against_oracle, **tune):
    q, k, v, r = ranges_case(kw, span_len, dtype, device, seed)
    out, lse = direct.sel_attn_keymajor(q, k, v, r, span_len=span_len, return_lse=True, **tune)
    check(out, lse, q, k, v, r, what=f"keymajor {kw} {dtype}")
    dirty = torch.full_like(out, float("nan"))
    direct.sel_attn_keymajor(q, k, v, r, span_len=span_len, out=dirty, **tune)
    assert torch.equal(dirty, out), "an output element was not written"
    return out


def blocks_case(B, S, G, h, D, T, bs, n, dtype, device, seed, positions=False, Dv=None):
    gen = torch.Generator().manual_seed(seed)
    pos = (torch.arange(S) + (T - S)) if positions else None
    blocks = nsa_block_indices(B, S, G, T, bs, n, "random", gen, pos)
    q = torch.randn(B, S, G, h, D, generator=gen).to(dtype)
    k = torch.randn(B, G, T, D, generator=gen).to(dtype)
    v = torch.randn(B, G, T, Dv or D, generator=gen).to(dtype)
    pos_d = pos.to(device) if pos is not None else None
    return q.to(device), k.to(device), v.to(device), blocks.to(device), pos_d


def check_blocks(B, S, G, h, D, T, bs, n, dtype, device, seed, positions=False, check=check_against_oracle, **tune):
    q, k, v, blocks, pos = blocks_case(B, S, G, h, D, T, bs, n, dtype, device, seed, positions)
    out, lse = direct.sel_attn_keymajor(q, k, v, blocks, block_size=bs, positions=pos, return_lse=True, **tune)
    ranges = block_indices_to_ranges(blocks, bs, T, pos)
    check(out, lse, q, k, v, ranges, what=f"keymajor blocks h={h} T={T} bs={bs} {dtype}")
    return out


def inf_value_case(dtype, device):
    """``v[key 0] = inf`` in a tile that token 0 reads (keys 0..2) and token 1 does not (keys 5..8)."""
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(1, 2, 1, 2, 16, generator=gen).to(dtype)
    k = torch.randn(1, 1, 12, 16, generator=gen).to(dtype)
    v = torch.randn(1, 1, 12, 16, generator=gen).to(dtype)
    v[0, 0, 0, 3] = float("inf")
    r = torch.tensor([[[[[0, 3]]], [[[5, 9]]]]], dtype=torch.int32).view(1, 2, 1, 1, 2)
    out = direct.sel_attn_keymajor(q.to(device), k.to(device), v.to(device), r.to(device), span_len=9).cpu()
    assert torch.isfinite(out[0, 1]).all(), "a row that never read the inf value got a non-finite output"
    bad = ~torch.isfinite(out[0, 0, 0])  # [h, Dv]: the reader's column 3 only
    assert bad[:, 3].all() and not bad[:, :3].any() and not bad[:, 4:].any(), out[0, 0, 0]



def check_deterministic_and_graph(run):
    """``run()`` -> ``(out, lse)``: two eager runs are bit-identical, and a run captured in a CUDA graph (after a
    warm-up) replays to the same bits."""
    out1, lse1 = run()
    out2, lse2 = run()
    assert torch.equal(out1, out2) and torch.equal(lse1, lse2), "two runs differ"
    run()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got, got_lse = run()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(got, out1) and torch.equal(got_lse, lse1)


def why_no_keymajor(device) -> str | None:
    """Why the planner never takes the key-major path on ``device`` with the installed Triton (None: it may).

    The key-major kernels step over 64 (entry, head) pairs per MMA: a release whose row cap on this arch is
    lower (Triton 3.0 and 3.1 on sm_90), or a known-bad window that avoids the path (3.0-3.2 on sm_80/89), does
    not compile them there, and the planner runs the token-major kernels instead."""
    import importlib

    from nsa_triton_sel.device import device_of

    dev = device_of(torch.device(device))
    rows = importlib.import_module("nsa_triton_sel.plan.keymajor").ROWS
    if "keymajor" in dev.avoided:
        return f"Triton {dev.triton} on sm_{dev.arch}: a known-bad window avoids the key-major path"
    if dev.max_rows < rows:
        return (f"Triton {dev.triton} on sm_{dev.arch} compiles dots of at most {dev.max_rows} rows; the key-major "
                f"kernels take {rows}-pair steps (the planner runs the token-major kernels here)")
    return None


@pytest.fixture
def keymajor_here():
    """Skips, naming the cause, where the key-major kernels are never launched (:func:`why_no_keymajor`)."""
    why = why_no_keymajor("cuda" if torch.cuda.is_available() else "cpu")
    if why:
        pytest.skip(why)


@pytest.fixture
def keymajor_from_few_rows(keymajor_here):
    """The planner takes the key-major path wherever it can, from one (token, group) row on (small test shapes
    that the path table has not measured)."""
    import importlib

    with importlib.import_module("nsa_triton_sel.plan.keymajor").forced("key"):
        yield


def assert_keymajor(q, k, v, blocks, bs, pos=None, *, dq=True):
    """The planner takes the key-major forward for this call (and the key-major dq, with ``dq``)."""
    from nsa_triton_sel import plan

    p = plan.plan_call(q, k, v, blocks, pos, per_head=False, tokens=0, span_len=bs, packed=False)
    if dq:
        assert p.forward.kernel == "keymajor" and p.dq_groups_per_pass > 0, (p.forward.kernel, p.dq_groups_per_pass)
    else:
        assert p.forward.kernel == "keymajor", p.forward.kernel


def check_operator_gradients(B, S, G, h, D, T, bs, n, dtype, device, seed, *, Dv=None, lse_grad=False,
                             positions=False, tol=2e-2):
    """The operator on block indices, where the planner takes the key-major forward and dq: its output and the
    gradients of q, k and v (through the LSE output too, with ``lse_grad``) against float64 autograd of the
    oracle, on the same random output gradients."""
    from nsa_triton_sel import failures, reference, selection_attention

    q, k, v, blocks, pos = blocks_case(B, S, G, h, D, T, bs, n, dtype, device, seed, positions, Dv)
    assert_keymajor(q, k, v, blocks, bs, pos)
    xs = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    res = selection_attention(*xs, block_indices=blocks, block_size=bs, positions=pos, return_lse=lse_grad)
    out, lse = res if lse_grad else (res, None)
    gen = torch.Generator().manual_seed(seed + 1)
    go = torch.randn(out.shape, generator=gen).to(device)
    gl = torch.randn(out.shape[:-1], generator=gen).to(device) if lse_grad else None
    loss = (out.float() * go).sum() + ((lse.float() * gl).sum() if lse_grad else 0.0)
    loss.backward()
    # the kernels ran: a failure would have been answered by the packed-SDPA path (and these checks would pass)
    assert not failures.FORWARD and not failures.BACKWARD, (dict(failures.FORWARD), dict(failures.BACKWARD))
    r = block_indices_to_ranges(blocks, bs, T, pos).cpu()
    ys = [x.detach().cpu().double().requires_grad_() for x in (q, k, v)]
    want = reference.oracle(*ys, r, return_lse=lse_grad)
    want_out, want_lse = want if lse_grad else (want, None)
    ref_loss = (want_out * go.cpu().double()).sum()
    if lse_grad:
        ref_loss = ref_loss + (torch.where(torch.isfinite(want_lse), want_lse, 0.0) * gl.cpu().double()).sum()
    ref_loss.backward()
    what = f"keymajor grads B={B} S={S} G={G} h={h} D={D} Dv={Dv} T={T} {dtype} seed={seed}"
    assert (out.detach().cpu().double() - want_out).abs().max() < 5e-3 * 4, what
    for name, x, y in zip("qkv", xs, ys):
        err = (x.grad.cpu().double() - y.grad).abs().max()
        bound = tol * max(1.0, float(y.grad.abs().max()))
        assert err < bound, f"d{name}: {err:.3e} >= {bound:.3e} ({what})"
    return xs


def check_inf_key_confined(device):
    """``k[key 5] = inf`` in the key tile that both tokens read (token 0 keys 0..3, token 1 keys 4..7): the tile takes
    the key-major backward's slow walk; only token 1's dq, and the dk, dv of the keys token 1 read, may be non-finite."""
    from nsa_triton_sel import selection_attention

    q, k, v, _, _ = blocks_case(1, 2, 1, 2, 16, 32, 4, 1, torch.float16, "cpu", seed=3)
    blocks = torch.tensor([0, 1], dtype=torch.int32).view(1, 2, 1, 1)
    k[0, 0, 5, 3] = float("inf")
    xs = [x.to(device).requires_grad_() for x in (q, k, v)]
    pos = torch.tensor([10, 11], device=device)  # both past their blocks: nothing clamped; both in key tile 0
    out = selection_attention(*xs, block_indices=blocks.to(device), block_size=4, positions=pos)
    out.sum().backward()
    dq, dk, dv = (x.grad[0].cpu() for x in xs)
    assert torch.isfinite(dq[0]).all(), "a token that never read the inf key got a non-finite dq"
    assert not torch.isfinite(dq[1]).all()
    assert torch.isfinite(dk[0, :4]).all() and torch.isfinite(dv[0, :4]).all(), "keys only token 0 read got NaN"


def check_nan_query_confined(device):
    """A NaN in token 0's q: the delta pass raises the non-finite flag, so the backward isolates the row; only
    token 0's dq and the dk, dv of the keys it read may be NaN."""
    from nsa_triton_sel import selection_attention

    q, k, v, _, _ = blocks_case(1, 2, 1, 2, 16, 32, 4, 1, torch.float16, "cpu", seed=4)
    blocks = torch.tensor([0, 1], dtype=torch.int32).view(1, 2, 1, 1)  # token 0: keys 0..3, token 1: keys 4..7
    q[0, 0, 0, 1, 3] = float("nan")
    xs = [x.to(device).requires_grad_() for x in (q, k, v)]
    out = selection_attention(*xs, block_indices=blocks.to(device), block_size=4,
                              positions=torch.tensor([10, 11], device=device))
    out.sum().backward()
    dq, dk, dv = (x.grad[0].cpu() for x in xs)
    assert torch.isfinite(dq[1]).all() and not torch.isfinite(dq[0]).all()
    assert torch.isfinite(dk[0, 4:]).all() and torch.isfinite(dv[0, 4:]).all(), "keys token 0 never read got NaN"
    assert not torch.isfinite(dk[0, :4]).all()


def check_backward_reads_forward_readers(device, dtype, monkeypatch):
    """Through the operator, in three passes of one KV head: the key-major backward reads the forward's reader
    lists (none is built again), and its gradients are bit for bit those of a backward that builds its own."""
    import importlib

    from nsa_triton_sel import caches, plan, selection_attention
    from nsa_triton_sel.contract import resolve_scale
    from nsa_triton_sel.kernels import launch

    km = importlib.import_module("nsa_triton_sel.plan.keymajor")
    # one KV head per pass (see the passes test)
    monkeypatch.setattr(km, "WORKSPACE_BYTES", km.workspace_bytes(24, 3, 2, 16, 16))
    caches.clear()
    built = []
    real = launch.keymajor_reader_list
    monkeypatch.setattr(launch, "keymajor_reader_list", lambda *a, **kw: built.append(1) or real(*a, **kw))
    q, k, v, blocks, _ = blocks_case(2, 12, 3, 2, 16, 60, 16, 3, dtype, device, seed=11)
    go = torch.randn(q.shape, generator=torch.Generator().manual_seed(12)).to(dtype).to(device)
    xs = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    selection_attention(*xs, block_indices=blocks, block_size=16).backward(go)
    p = plan.plan_call(q, k, v, blocks, None, per_head=False, tokens=0, span_len=16, packed=False, grad=True)
    assert p.dq_groups_per_pass == 1 and p.backward_reads_forward_readers
    assert len(built) == 3, f"{len(built)} reader lists built for 3 forward passes and their backward"
    sc = resolve_scale(None, q.shape[-1])
    out, lse = launch.forward(p, q, k, v, blocks, None, scale=sc, block_size=16)
    want = launch.backward(p, q, k, v, block_indices_to_ranges(blocks, 16, 60), out, lse, go, None, scale=sc)
    assert len(built) == 9, len(built)  # and three more for this forward, three for this backward
    for name, x, w in zip("qkv", xs, want):
        assert torch.equal(x.grad, w), f"d{name} differs from the backward that built its own reader lists"


def check_values_past_float16(device):
    """bf16 values past float16's range (v and the output gradient scaled by 2^20, so the partial outputs reach
    about 4e6 and the partial dq about 1e12): the key-major partials are stored in float16 divided by a power of
    two from a bound on their size, so the output and dq match the float64 oracle relative to their size (float16
    partials without the scale would overflow to inf)."""
    from nsa_triton_sel import reference, selection_attention

    big = 2.0 ** 20
    q, k, v, blocks, _ = blocks_case(1, 24, 2, 2, 16, 80, 16, 3, torch.bfloat16, "cpu", seed=9)
    v = (v.float() * big).to(torch.bfloat16)
    assert_keymajor(*(x.to(device) for x in (q, k, v, blocks)), 16)
    xs = [x.to(device).requires_grad_() for x in (q, k, v)]
    out = selection_attention(*xs, block_indices=blocks.to(device), block_size=16)
    go = torch.randn(out.shape, generator=torch.Generator().manual_seed(10)) * big
    (out.float() * go.to(device)).sum().backward()
    ys = [x.detach().double().requires_grad_() for x in (q, k, v)]
    want = reference.oracle(*ys, block_indices_to_ranges(blocks, 16, 80))
    (want * go.double()).sum().backward()
    for name, got, ref in (("out", out.detach(), want.detach()), ("dq", xs[0].grad, ys[0].grad)):
        got = got.cpu().double()
        assert torch.isfinite(got).all(), f"{name} is not finite"
        err = float((got - ref).abs().max() / ref.abs().max())
        assert err < 2e-2, f"{name}: error {err:.3e} of its largest value"


def check_small_columns_beside_an_outlier(device):
    """One value channel 2^22 times the others (an outlier channel, as large activations make them): the forward's
    partials are scaled by their tile's largest value, not by each row's, so the other channels keep float16's
    precision (scaled by the row's largest magnitude, they would fall 2^22 below it, among float16's subnormals)."""
    from nsa_triton_sel import reference, selection_attention

    q, k, v, blocks, _ = blocks_case(1, 24, 2, 2, 16, 80, 16, 3, torch.bfloat16, "cpu", seed=13)
    v = v.float()
    v[..., 0] *= 2.0 ** 22
    v = v.to(torch.bfloat16)
    assert_keymajor(*(x.to(device) for x in (q, k, v, blocks)), 16, dq=False)
    out = selection_attention(q.to(device), k.to(device), v.to(device), block_indices=blocks.to(device),
                              block_size=16).cpu().double()
    want = reference.oracle(q.double(), k.double(), v.double(), block_indices_to_ranges(blocks, 16, 80))
    for col, name in ((slice(0, 1), "the outlier channel"), (slice(1, None), "the other channels")):
        err = float((out[..., col] - want[..., col]).abs().max() / want[..., col].abs().max())
        assert err < 2e-2, f"{name}: error {err:.3e} of their largest value"


def check_lse_gradient_past_float16(device):
    """A loss that weighs the LSE by 2^20 (the output gradient left small): the partial dq's bound counts the LSE
    gradient (through delta), so dq, about 1e7 here, stays finite in the float16 partials and matches the float64
    oracle."""
    from nsa_triton_sel import reference, selection_attention

    big = 2.0 ** 20
    q, k, v, blocks, _ = blocks_case(1, 24, 2, 2, 16, 80, 16, 3, torch.bfloat16, "cpu", seed=15)
    assert_keymajor(*(x.to(device) for x in (q, k, v, blocks)), 16)
    gen = torch.Generator().manual_seed(16)
    xs = [x.to(device).requires_grad_() for x in (q, k, v)]
    out, lse = selection_attention(*xs, block_indices=blocks.to(device), block_size=16, return_lse=True)
    go = torch.randn(out.shape, generator=gen)
    gl = torch.randn(lse.shape, generator=gen) * big
    ((out.float() * go.to(device)).sum() + (lse * gl.to(device)).sum()).backward()
    ys = [x.detach().double().requires_grad_() for x in (q, k, v)]
    want, want_lse = reference.oracle(*ys, block_indices_to_ranges(blocks, 16, 80), return_lse=True)
    ((want * go.double()).sum() + (want_lse * gl.double()).sum()).backward()
    got, ref = xs[0].grad.cpu().double(), ys[0].grad
    assert torch.isfinite(got).all(), "dq is not finite"
    err = float((got - ref).abs().max() / ref.abs().max())
    assert err < 2e-2, f"dq: error {err:.3e} of its largest value"


@pytest.fixture
def gluon_here():
    """Skips, naming the cause, where the planner never launches the key-major Gluon kernels (the forward's
    warp-specialised partial kernel, the backward's kernel)."""
    from nsa_triton_sel.device import device_of

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    why = why_no_keymajor("cuda")
    if why:
        pytest.skip(why)
    dev = device_of(torch.device("cuda"))
    if not dev.gluon_ws:
        pytest.skip(f"Triton {dev.triton} on sm_{dev.arch} has no key-major Gluon kernels "
                    "(sm_90 and Triton >= 3.6: device.gluon_ws)")


def kernels_run(fn, names) -> set[str]:
    """Which of the kernels ``names`` ``fn()`` launched (CUDA profiler)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    launched = {e.name for e in prof.events()}
    return {k for k in names if any(n.startswith(k) for n in launched)}


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal element for element, NaN where the other has NaN."""
    nan = torch.isnan(a)
    return torch.equal(nan, torch.isnan(b)) and torch.equal(a[~nan], b[~nan])


def assert_same_bits(got, want, names, what, whose):
    """Each of ``got`` equals ``want``'s bit for bit (NaN where it has NaN), named ``names``."""
    for name, a, b in zip(names, got, want):
        assert same_bits(a, b), f"{what}: {name} differs from {whose} " \
                                f"(max |diff| {(a.float() - b.float()).abs().nan_to_num().max().item()})"


def q_past_2_31_elements(seed, device="cuda"):
    """An NSA case whose q has a batch stride past 2^31 elements (B = 2, S = T = 256, G = 1, h = 2, D = 128, bf16,
    16-byte rows): ``(q, k, v, blocks, T)``; q's storage is freed with q."""
    gen = torch.Generator(device=device).manual_seed(seed)
    S, G, h, T, D = 256, 1, 2, 256, 128
    stride_b = (1 << 31) + 4096  # elements between the two batch rows (a multiple of 8: 16-byte rows)
    base = torch.empty(stride_b + S * G * h * D, dtype=torch.bfloat16, device=device)
    q = base.as_strided((2, S, G, h, D), (stride_b, G * h * D, h * D, D, 1))
    q[0].copy_(torch.randn(S, G, h, D, generator=gen, device=device))
    q[1].copy_(torch.randn(S, G, h, D, generator=gen, device=device))
    k = torch.randn(2, G, T, D, generator=gen, device=device).to(torch.bfloat16)
    v = torch.randn(2, G, T, D, generator=gen, device=device).to(torch.bfloat16)
    blocks = blocks_case(2, S, G, h, D, T, 64, 4, torch.bfloat16, device, seed)[3]
    return q, k, v, blocks, T


def check_training_step_deterministic_and_graph(xs, forward, go):
    """A training step (``forward()`` -> the output, backward with ``go`` into ``xs``' gradients): two eager steps
    give bit-identical gradients, and a step captured in a CUDA graph (after a warm-up on a side stream) replays to
    the same bits."""
    def step():
        for x in xs:
            x.grad = None
        forward().backward(go)
        return [x.grad.clone() for x in xs]

    first, second = step(), step()
    for a, b, name in zip(first, second, "qkv"):
        assert torch.equal(a, b), f"d{name} differs between two runs"
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    for x in xs:
        x.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        forward().backward(go)
    graph.replay()
    torch.cuda.synchronize()
    for x, want, name in zip(xs, first, "qkv"):
        assert torch.equal(x.grad, want), f"d{name} from the CUDA graph differs"
