"""A repeated decode step's replay (``replay.py``) without a GPU: what it records, what it refuses, which calls it answers.

The launches go through the bound launcher (``kernels/bind.py``) of a stand-in Triton kernel (``test_bind``'s),
and the launcher's inputs are a CUDA-looking view of CPU tensors, so ``kernels.launch._go`` reports them to
the recording as it does on a GPU.  The real kernels replayed on a GPU, against the oracle and the way down
bit for bit: ``tests/test_contract_gpu.py::test_a_repeated_decode_step_replays_its_launches``.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from fake_triton import FakeJIT, PropKernel, bound, kw, launcher_kernel

from nsa_triton_sel import plan as P
from nsa_triton_sel import replay
from nsa_triton_sel.kernels import bind, launch
from nsa_triton_sel.plan import share



class _Cudaish(torch.Tensor):
    """A CPU tensor that ``_go`` takes for a GPU one (the fake launcher reads nothing)."""

    @property
    def is_cuda(self):
        return True


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.setattr(replay, "_current_device", lambda: 0)  # the fake launcher's device (no CUDA here)
    replay.forget()
    yield
    replay.forget()


@pytest.fixture
def kernel(monkeypatch):
    fn = FakeJIT(PropKernel, True)
    b = bound(fn)
    monkeypatch.setattr(bind, "bound", lambda f: b)
    return fn, b


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 1, 1, 4, 8, generator=g)
    k = torch.randn(2, 1, 16, 8, generator=g)
    v = torch.randn(2, 1, 16, 8, generator=g)
    spans = torch.zeros(2, 1, 1, 3, 2, dtype=torch.int32)
    return q, k, v, spans


def _args(q, k, v, spans, **kw):
    a = dict(ranges=spans, block_indices=None, block_size=None, positions=None, scale=None, backend="auto",
             return_lse=False)
    a.update(kw)
    return (q, k, v, a["ranges"], a["block_indices"], a["block_size"], a["positions"], a["scale"], a["backend"],
            a["return_lse"])


def _way_down(return_lse=False, foreign=None):
    """A stand-in for steps 2-5: two outputs, one launch of the stand-in kernel over the call's tensors."""
    def run(call):
        o = launch._empty((2, 1, 1, 4, 8), torch.float32, call.q.device)
        lse = launch._empty((2, 1, 1, 4), torch.float32, call.q.device)
        args = (call.q, call.k, call.v, call.spans, o, foreign if foreign is not None else lse, 16, 3, 0.125)
        launch._go(run.fn, None, P, (2, 1), args, kw)
        return (o, lse) if return_lse else o
    return run


def _call(q, k, v, spans):
    return SimpleNamespace(q=_Cudaish._make_subclass(_Cudaish, q), k=k, v=v, spans=spans, positions=None)


def _record(fn, q, k, v, spans, run, **kw):
    run.fn = fn
    return replay.record(run, _call(q, k, v, spans), _args(q, k, v, spans, **kw))


def test_a_signature_replays_once_its_launch_is_bound_with_the_new_tensors_in_their_places(kernel):
    fn, b = kernel
    q, k, v, spans = _inputs()
    run = _way_down()
    for i in range(3):  # the launch is bound on the third call: that one is recorded
        _record(fn, q, k, v, spans, run)
        assert (replay.lookup(*_args(q, k, v, spans)) is None) == (i < 2)
    assert list(replay.report().values())[0].startswith("replayed")
    q2, k2, v2, s2 = _inputs(1)
    before = len(fn.launches)
    out = replay.lookup(*_args(q2, k2, v2, s2))
    assert fn.plain_calls == 2 and len(fn.launches) == before + 1
    got = fn.launches[-1]
    assert got[:3] == (2, 1, 1) and got[3] == "stream" and got[6:9] == (None, None, None)
    passed = got[9:18]  # device pointers, as integers
    assert passed[:4] == (q2.data_ptr(), k2.data_ptr(), v2.data_ptr(), s2.data_ptr())
    assert passed[4] == out.data_ptr() and out.shape == (2, 1, 1, 4, 8) and out.dtype == torch.float32
    assert type(passed[5]) is int and passed[5] not in passed[:5]
    assert passed[6:] == (16, 3, 0.125)
    assert got[18:] == (64, 2)  # the constexprs Triton 3.3+ passes, as recorded
    assert list(replay.report().values()) == ["replayed 2 time(s)"]  # (the loop's last lookup, and this one)


def test_return_lse_gives_both_outputs_and_is_part_of_the_signature(kernel):
    fn, _ = kernel
    q, k, v, spans = _inputs()
    run = _way_down(return_lse=True)
    for _ in range(3):
        _record(fn, q, k, v, spans, run, return_lse=True)
    out, lse = replay.lookup(*_args(q, k, v, spans, return_lse=True))
    assert out.shape == (2, 1, 1, 4, 8) and lse.shape == (2, 1, 1, 4)
    assert replay.lookup(*_args(q, k, v, spans, return_lse=False)) is None
    for _ in range(3):
        _record(fn, q, k, v, spans, _way_down(), return_lse=False)
    assert replay.lookup(*_args(q, k, v, spans, return_lse=False)) is not None
    names = replay.report()
    assert len(names) == 2 and sorted(names.values()) == ["replayed 1 time(s)", "replayed 1 time(s)"], names
    assert any(n.endswith("float32 ranges +lse") for n in names) and any(n.endswith("float32 ranges") for n in names)


def test_a_buffer_written_and_never_read_is_kept_per_stream_and_a_returned_one_is_new_every_call(kernel, monkeypatch):
    fn, b = kernel
    q, k, v, spans = _inputs()
    for return_lse in (False, True):
        for _ in range(3):
            _record(fn, q, k, v, spans, _way_down(return_lse), return_lse=return_lse)
    results, lse_pointers = [], []
    for stream in ("stream", "stream", "another stream", "stream"):
        monkeypatch.setattr(b, "_stream", lambda dev, s=stream: s)
        results.append(replay.lookup(*_args(q, k, v, spans)))  # LSE not returned: written, never read
        lse_pointers.append(fn.launches[-1][9 + 5])
        assert fn.launches[-1][3] == stream
    assert lse_pointers[0] == lse_pointers[1] == lse_pointers[3] != lse_pointers[2]
    assert lse_pointers[0] not in {r.data_ptr() for r in results}
    assert len({r.data_ptr() for r in results}) == len(results)  # the outputs are new tensors every call
    (replay_,) = [r for r in replay._REPLAYS.values() if len(r.scratch)]
    assert set(replay_.scratch) == {"stream", "another stream"}
    out1, lse1 = replay.lookup(*_args(q, k, v, spans, return_lse=True))
    out2, lse2 = replay.lookup(*_args(q, k, v, spans, return_lse=True))
    assert lse1 is not lse2 and fn.launches[-1][9 + 5] == lse2.data_ptr() != lse1.data_ptr()


def test_streams_past_the_bound_drop_the_kept_buffers(kernel, monkeypatch):
    fn, b = kernel
    q, k, v, spans = _inputs()
    for _ in range(3):
        _record(fn, q, k, v, spans, _way_down())
    (replay_,) = replay._REPLAYS.values()
    for i in range(replay.MAX_STREAMS + 3):
        monkeypatch.setattr(b, "_stream", lambda dev, s=i: s)
        assert replay.lookup(*_args(q, k, v, spans)) is not None
        assert 1 <= len(replay_.scratch) <= replay.MAX_STREAMS


def _replayed_through(convention, monkeypatch):
    """A signature recorded (and bound) with a stand-in of Triton's launcher object of ``convention``: the fake
    ``JITFunction``, its ``Bound`` and its one compiled kernel."""
    fn = FakeJIT(launcher_kernel(convention), True)
    b = bound(fn)
    monkeypatch.setattr(bind, "bound", lambda f: b)
    q, k, v, spans = _inputs()
    for _ in range(3):
        _record(fn, q, k, v, spans, _way_down())
    (kernel,) = fn.kernels.values()
    return fn, b, kernel


@pytest.mark.parametrize("convention", ["3.0", "3.3", "3.5", "3.7"])
def test_a_replay_calls_the_compiled_launch_with_what_the_launcher_object_would_pass_it(convention, monkeypatch):
    fn, _, kernel = _replayed_through(convention, monkeypatch)
    launcher, wrapped = kernel.run, kernel.run.wrapper_calls
    q2, k2, v2, s2 = _inputs(1)
    out = replay.lookup(*_args(q2, k2, v2, s2))
    assert out is not None and launcher.wrapper_calls == wrapped  # straight to the compiled launch
    (replay_,) = replay._REPLAYS.values()
    lse = replay_.scratch["stream"][0]
    outer = (2, 1, 1, "stream", kernel.function, kernel.packed_metadata, None, None, None, q2.data_ptr(),
             k2.data_ptr(), v2.data_ptr(), s2.data_ptr(), out.data_ptr(), lse, 16, 3, 0.125, 64, 2)
    launcher(*outer)  # what the launcher object passes the same launch
    assert fn.launches[-2] == fn.launches[-1]
    assert type(fn.launches[-1][-1]) is tuple if convention == "3.7" else fn.launches[-1][-6:] == outer[-6:]
    assert list(replay.report().values()) == ["replayed 1 time(s), straight to the compiled launch"]


@pytest.mark.parametrize("convention", ["scratch", "unaccounted"])
def test_a_launcher_that_passes_a_new_object_per_launch_is_replayed_through_the_launcher(convention, monkeypatch):
    fn, b, kernel = _replayed_through(convention, monkeypatch)
    assert all(e.inner is None for e in b.shapes.values() if type(e) is bind._Launcher)
    wrapped = kernel.run.wrapper_calls
    first = replay.lookup(*_args(*_inputs(1)))
    second = replay.lookup(*_args(*_inputs(2)))
    assert first is not None and second is not None and kernel.run.wrapper_calls == wrapped + 2
    assert fn.launches[-1][7] is not fn.launches[-2][7]  # a scratch object per launch, as the launcher made it
    assert list(replay.report().values()) == ["replayed 2 time(s)"]


@pytest.mark.parametrize("change", ["stride", "misaligned", "shape", "dtype", "grad", "scale", "backend", "blocks",
                                    "disabled", "unbound", "hooked", "device", "dispatch mode", "vmap"])
def test_a_call_the_replay_cannot_answer_takes_the_way_down(kernel, change, monkeypatch):
    fn, b = kernel
    q, k, v, spans = _inputs()
    run = _way_down()
    for _ in range(3):
        _record(fn, q, k, v, spans, run)
    assert replay.lookup(*_args(q, k, v, spans)) is not None
    kw = {}
    if change == "stride":
        q = torch.randn(2, 1, 1, 8, 4).transpose(3, 4)
    elif change == "misaligned":
        q = torch.randn(q.numel() + 1)[1:].view(q.shape)
    elif change == "shape":
        k, v = torch.randn(2, 1, 32, 8), torch.randn(2, 1, 32, 8)
    elif change == "dtype":
        q = q.double()
    elif change == "grad":
        q = q.clone().requires_grad_()
    elif change == "scale":
        kw["scale"] = 0.5
    elif change == "backend":
        kw["backend"] = "triton"
    elif change == "blocks":
        kw = dict(ranges=None, block_indices=spans[..., 0], block_size=64)
    elif change == "disabled":
        monkeypatch.setattr(replay, "ENABLED", False)
    elif change == "unbound":  # bound launchers switched off: the launches take Triton's own way
        monkeypatch.setattr(bind, "ENABLED", False)
    elif change == "hooked":
        monkeypatch.setattr(b, "_hooked", lambda: True)
    elif change == "device":
        monkeypatch.setattr(replay, "_current_device", lambda: 1)
    if change == "dispatch mode":
        from torch.utils._python_dispatch import TorchDispatchMode

        class Count(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                return func(*args, **(kwargs or {}))

        with Count():
            assert replay.lookup(*_args(q, k, v, spans)) is None
        return
    if change == "vmap":
        seen = []

        def under_vmap(x):
            seen.append(replay.lookup(*_args(x, k, v, spans)))
            return x

        torch.func.vmap(under_vmap)(torch.stack([q, q]))
        assert seen == [None]
        return
    assert replay.lookup(*_args(q, k, v, spans, **kw)) is None


@pytest.mark.parametrize("kw", [dict(return_lse=1), dict(block_size=True), dict(scale=1), dict(block_indices="x"),
                                dict(ranges=None), dict(positions=[0])])
def test_arguments_the_way_down_would_refuse_are_never_replayed(kernel, kw):
    fn, _ = kernel
    q, k, v, spans = _inputs()
    run = _way_down()
    for _ in range(3):
        _record(fn, q, k, v, spans, run)
    assert replay.lookup(*_args(q, k, v, spans, **kw)) is None


def test_a_launch_of_a_tensor_that_is_neither_input_nor_output_gives_the_signature_up(kernel):
    fn, _ = kernel
    q, k, v, spans = _inputs()
    run = _way_down(foreign=torch.zeros(3))
    for _ in range(4):
        _record(fn, q, k, v, spans, run)
    assert replay.lookup(*_args(q, k, v, spans)) is None
    (why,) = replay.report().values()
    assert "neither an input nor an output" in why


def test_a_call_that_launches_nothing_or_through_jitfunction_run_is_given_up(kernel, monkeypatch):
    fn, b = kernel
    q, k, v, spans = _inputs()

    def nothing(call):
        return launch._empty((2,), torch.float32, call.q.device)

    nothing.fn = fn
    replay.record(nothing, _call(q, k, v, spans), _args(q, k, v, spans))
    assert list(replay.report().values()) == ["the way down: the call launched no kernel"]
    replay.forget()
    b.off = "a reason"
    for _ in range(3):
        _record(fn, q, k, v, spans, _way_down())
    assert list(replay.report().values()) == ["the way down: fake_kernel launches through JITFunction.run: a reason"]


def test_a_launch_never_bound_is_retried_then_given_up(kernel, monkeypatch):
    fn, b = kernel
    q, k, v, spans = _inputs()
    monkeypatch.setattr(b, "_hooked", lambda: True)  # every launch takes the plain path
    for i in range(replay.RETRIES + 2):
        _record(fn, q, k, v, spans, _way_down())
    (why,) = replay.report().values()
    assert why == "the way down: fake_kernel is not bound yet"


def test_an_exception_in_a_replay_forgets_every_replay(kernel, monkeypatch):
    fn, b = kernel
    q, k, v, spans = _inputs()
    for _ in range(3):
        _record(fn, q, k, v, spans, _way_down())
    monkeypatch.setattr(b, "_stream", lambda dev: 1 / 0)
    assert replay.lookup(*_args(q, k, v, spans)) is None
    assert replay.report() == {}


def test_the_planner_reads_no_span_value_for_one_query_position_unless_it_plans_the_key_major_path(monkeypatch):
    """What lets a replay skip the planner: at S = 1 ``plan_call`` asks the sharing probe only on the way to the
    key-major forward (several launches over a reader list built with torch ops, which no recording keeps)."""
    import nsa_triton_sel.plan.call as call_mod

    asked = []
    real = share.shared

    def probe(spans):
        asked.append(True)
        return real(spans)

    monkeypatch.setattr(share, "shared", probe)
    for h in (1, 2, 4, 8, 16):
        for B in (1, 8, 64, 512):
            for blocks in (False, True):
                for grad in (False, True):
                    call_mod._SIGNATURES.clear()
                    asked.clear()
                    q = torch.empty(1, 1, 2, h, 64).expand(B, 1, 2, h, 64)
                    k = torch.empty(1, 2, 4096, 64).expand(B, 2, 4096, 64)
                    spans = torch.zeros(B, 1, 2, 16, dtype=torch.int32) if blocks else \
                        torch.zeros(B, 1, 2, 16, 2, dtype=torch.int32)
                    p = P.plan_call(q, k, k, spans, None, per_head=False, tokens=0, span_len=64 if blocks else 0,
                                    packed=False, grad=grad)
                    assert p.tokens == 1
                    assert not asked or p.forward.kernel == "keymajor", (h, B, blocks, grad, p.forward.kernel)
