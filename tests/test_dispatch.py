"""The dispatcher: every flag's effect, the thresholds file reaching the decision, fallbacks.

Runs on the CPU with the Triton interpreter (conftest sets TRITON_INTERPRET=1 there).
"""

from __future__ import annotations

import json
import logging
import os
import warnings

import pytest
import torch

from kernel_checks import check_against_oracle
from nsa_triton_sel import config, dispatch, known_bad, reference, selection_attention
from nsa_triton_sel.kernels import launch
from nsa_triton_sel.testing import make_problem

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="CPU dispatcher tests use the interpreter")

FLAGS = ["NSA_USE_TRITON_SEL", "NSA_SEL_TRITON_MIN_L", "NSA_SEL_TRITON_GROUP", "NSA_FORCE_PARITY",
         "NSA_SEL_TRITON_TOKENS",
         "NSA_DEBUG_TIMING", "NSA_DEBUG_COMPARE", "NSA_DEBUG_SHAPES", "NSA_SEL_THRESHOLDS_FILE"]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in FLAGS:
        monkeypatch.delenv(name, raising=False)
    # Flags are read once per process: every setenv here is followed by config.refresh().
    setenv = monkeypatch.setenv

    def setenv_and_refresh(name, value, prepend=None):
        setenv(name, value, prepend)
        config.refresh()

    monkeypatch.setenv = setenv_and_refresh
    dispatch._FAILED.clear()
    config.refresh()
    yield
    dispatch._FAILED.clear()


@pytest.fixture
def spy(monkeypatch):
    """Record the dispatcher's kernel launches: [launcher name, (q, k, v, spans), kwargs]."""
    calls = []
    names = {"ranges": "sel_attn_ranges", "decode": "sel_attn_decode", "tokens": "sel_attn_tokens"}
    real = {name: getattr(launch, name) for name in ("selection", "run", "run_tokens")}

    def selection(*a, **kw):
        calls.append([None, a, kw])
        return real["selection"](*a, **kw)

    def launched(name):
        def f(plan, *a, **kw):
            calls[-1][0] = names[plan.kernel]
            return real[name](plan, *a, **kw)

        return f

    monkeypatch.setattr(launch, "selection", selection)
    monkeypatch.setattr(launch, "run", launched("run"))
    monkeypatch.setattr(launch, "run_tokens", launched("run_tokens"))
    return calls


def problem(**kw):
    args = dict(B=1, S=3, G=2, h=3, Dk=32, Dv=32, T=140, n=3, seed=1, empty_frac=0.2)
    args.update(kw)
    return make_problem(**args)


def test_min_L_zero_runs_triton_and_matches_oracle(monkeypatch, spy):
    monkeypatch.setenv("NSA_SEL_TRITON_MIN_L", "0")
    p = problem()
    out, lse = selection_attention(p.q, p.k, p.v, p.ranges, return_lse=True)
    assert [c[0] for c in spy] == ["sel_attn_ranges"]
    check_against_oracle(out, lse, p.q, p.k, p.v, p.ranges, what="dispatch min_L=0")


def test_use_triton_sel_0_forces_sdpa(monkeypatch, spy):
    monkeypatch.setenv("NSA_SEL_TRITON_MIN_L", "0")
    monkeypatch.setenv("NSA_USE_TRITON_SEL", "0")
    p = problem()
    out = selection_attention(p.q, p.k, p.v, p.ranges)
    assert spy == []
    assert torch.equal(out, reference.packed_sdpa(p.q, p.k, p.v, p.ranges))


def test_min_L_splits_rows_between_paths(monkeypatch, spy):
    p = problem(S=4, n=4, seed=3)
    lens = (p.ranges[..., 1] - p.ranges[..., 0]).sum(-1)
    cut = int(lens.flatten().sort().values[lens.numel() // 2])  # about half the rows each way
    monkeypatch.setenv("NSA_SEL_TRITON_MIN_L", str(cut))
    sdpa_rows_seen = []
    real = reference.packed_sdpa

    def packed(*a, **kw):
        sdpa_rows_seen.append(kw.get("rows"))
        return real(*a, **kw)

    monkeypatch.setattr(reference, "packed_sdpa", packed)
    out, lse = selection_attention(p.q, p.k, p.v, p.ranges, return_lse=True)
    sent = spy[0][1][3]  # the ranges the kernel saw
    sent_lens = (sent[..., 1] - sent[..., 0]).sum(-1)
    assert torch.equal(sent_lens, torch.where(lens < cut, 0, lens)), "rows below min_L must not reach Triton"
    # ... and only the rows below min_L go through packed SDPA (not every row, masked).
    assert len(sdpa_rows_seen) == 1 and torch.equal(sdpa_rows_seen[0], (lens < cut).flatten().nonzero()[:, 0])
    check_against_oracle(out, lse, p.q, p.k, p.v, p.ranges, what="split rows")


def test_group_flag_selects_per_head_programs(monkeypatch, spy):
    monkeypatch.setenv("NSA_SEL_TRITON_MIN_L", "0")
    p = problem()
    selection_attention(p.q, p.k, p.v, p.ranges)
    monkeypatch.setenv("NSA_SEL_TRITON_GROUP", "0")
    out, lse = selection_attention(p.q, p.k, p.v, p.ranges, return_lse=True)
    assert [c[2]["per_head"] for c in spy] == [False, True]
    check_against_oracle(out, lse, p.q, p.k, p.v, p.ranges, what="per-head")


def test_force_parity_takes_reference_path(monkeypatch, spy):
    monkeypatch.setenv("NSA_SEL_TRITON_MIN_L", "0")
    monkeypatch.setenv("NSA_FORCE_PARITY", "1")
    p = problem()
    assert dispatch.route(p.q, p.k, p.v).path == "reference"
    out, lse = selection_attention(p.q, p.k, p.v, p.ranges, return_lse=True)
    assert spy == [] and out.dtype == p.v.dtype
    check_against_oracle(out, lse, p.q, p.k, p.v, p.ranges, what="reference path")


@pytest.mark.parametrize(
    "flag, text",
    [("NSA_DEBUG_SHAPES", "q=[1, 3, 2, 3, 32]"), ("NSA_DEBUG_TIMING", "time="), ("NSA_DEBUG_COMPARE", "max_abs=")],
)
def test_debug_flags_log(monkeypatch, caplog, flag, text):
    monkeypatch.setenv("NSA_SEL_TRITON_MIN_L", "0")
    p = problem()
    with caplog.at_level(logging.INFO, logger="nsa_triton_sel"):
        selection_attention(p.q, p.k, p.v, p.ranges)
    assert text not in caplog.text
    monkeypatch.setenv(flag, "1")
    with caplog.at_level(logging.INFO, logger="nsa_triton_sel"):
        selection_attention(p.q, p.k, p.v, p.ranges)
    assert text in caplog.text


def test_bad_flag_value_is_an_error(monkeypatch):
    p = problem()
    monkeypatch.setenv("NSA_SEL_TRITON_MIN_L", "lots")
    with pytest.raises(ValueError, match="NSA_SEL_TRITON_MIN_L"):
        selection_attention(p.q, p.k, p.v, p.ranges)
    monkeypatch.setenv("NSA_SEL_TRITON_MIN_L", "0")
    monkeypatch.setenv("NSA_USE_TRITON_SEL", "maybe")
    with pytest.raises(ValueError, match="NSA_USE_TRITON_SEL"):
        selection_attention(p.q, p.k, p.v, p.ranges)


def write_thresholds(path, min_L, triton_minor):
    path.write_text(json.dumps({"schema": 1, "default_min_L": 4096, "entries": [
        {"gpu": "cpu", "cc": "cpu", "triton": triton_minor, "sel_triton_min_L": min_L, "source": "test"}]}))


def test_thresholds_file_reaches_the_decision(monkeypatch, tmp_path, spy):
    import triton
    from packaging.version import Version

    v = Version(triton.__version__)
    path = tmp_path / "thresholds.json"
    monkeypatch.setenv("NSA_SEL_THRESHOLDS_FILE", str(path))
    p = problem()
    write_thresholds(path, 0, f"{v.major}.{v.minor}")
    d = dispatch.route(p.q, p.k, p.v)
    assert (d.path, d.min_L) == ("triton", 0)
    selection_attention(p.q, p.k, p.v, p.ranges)
    assert len(spy) == 1
    write_thresholds(path, None, f"{v.major}.{v.minor}")
    config.refresh()  # the thresholds file is read once per process
    d = dispatch.route(p.q, p.k, p.v)
    assert d.path == "sdpa" and "off" in d.reason
    selection_attention(p.q, p.k, p.v, p.ranges)
    assert len(spy) == 1
    # An entry for another Triton minor does not apply: the file's default does.
    write_thresholds(path, 0, "2.9")
    config.refresh()
    assert dispatch.route(p.q, p.k, p.v).min_L == 4096
    # The environment variable overrides the file.
    monkeypatch.setenv("NSA_SEL_TRITON_MIN_L", "7")
    assert dispatch.route(p.q, p.k, p.v).min_L == 7


def test_kernel_failure_is_reported_once_and_remembered(monkeypatch):
    monkeypatch.setenv("NSA_SEL_TRITON_MIN_L", "0")
    calls = []

    def broken(*a, **kw):
        calls.append(1)
        raise RuntimeError("forced failure")

    monkeypatch.setattr(launch, "selection", broken)
    p = problem()
    with pytest.warns(RuntimeWarning, match="forced failure"):
        out = selection_attention(p.q, p.k, p.v, p.ranges)
    assert torch.equal(out, reference.packed_sdpa(p.q, p.k, p.v, p.ranges))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out2 = selection_attention(p.q, p.k, p.v, p.ranges)
    assert calls == [1], "a failed configuration must not be retried"
    assert torch.equal(out, out2)
    assert "failed earlier" in dispatch.route(p.q, p.k, p.v).reason
    # Another configuration (other h) is still tried.
    p2 = problem(h=2)
    with pytest.warns(RuntimeWarning):
        selection_attention(p2.q, p2.k, p2.v, p2.ranges)
    assert calls == [1, 1]


def test_requires_grad_goes_through_the_kernels_and_their_backward(monkeypatch, spy, caplog):
    """Training inputs take the kernel path (its autograd is the backward kernels), not packed SDPA."""
    from nsa_triton_sel import op
    from nsa_triton_sel.kernels import grad

    monkeypatch.setenv("NSA_SEL_TRITON_MIN_L", "0")
    monkeypatch.setenv("NSA_DEBUG_SHAPES", "1")
    calls = []
    real = grad.sel_attn_backward
    monkeypatch.setattr(grad, "sel_attn_backward", lambda *a, **k: calls.append(1) or real(*a, **k))
    p = problem()
    q = p.q.clone().requires_grad_(True)
    with caplog.at_level(logging.INFO, logger="nsa_triton_sel"):
        out = selection_attention(q, p.k, p.v, p.ranges)
    assert out.grad_fn is not None and "-> triton" in caplog.text
    out.float().sum().backward()
    assert calls == [1] and q.grad is not None and torch.isfinite(q.grad).all()
    assert op.backward is op.kernel_backward


def test_a_failing_backward_kernel_falls_back_once_with_a_warning(monkeypatch):
    from nsa_triton_sel import op
    from nsa_triton_sel.kernels import grad

    monkeypatch.setenv("NSA_SEL_TRITON_MIN_L", "0")
    monkeypatch.setattr(op, "_BWD_FAILED", {})
    calls = []

    def boom(*a, **k):
        calls.append(1)
        raise RuntimeError("simulated backward kernel failure")

    monkeypatch.setattr(grad, "sel_attn_backward", boom)
    p = problem()

    def grads():
        xs = [x.clone().requires_grad_(True) for x in (p.q, p.k, p.v)]
        selection_attention(*xs, p.ranges).float().sum().backward()
        return [x.grad for x in xs]

    with pytest.warns(RuntimeWarning, match="backward kernels failed.*simulated"):
        first = grads()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = grads()  # remembered: no retry, no second warning
    assert calls == [1]
    want = op.reference_backward(p.q, p.k, p.v, p.ranges, None, None, torch.ones(p.q.shape[:4] + (p.v.shape[-1],),
                                 dtype=p.q.dtype), 1.0 / p.q.shape[-1] ** 0.5)
    for a, b, c in zip(first, second, want):
        assert torch.equal(a, b) and torch.allclose(a.float(), c.float(), atol=1e-3)


def test_explicit_backends(monkeypatch):
    p = problem()
    ref = reference.oracle(p.q, p.k, p.v, p.ranges)
    for backend in ("triton", "sdpa", "reference", "oracle"):
        out = selection_attention(p.q, p.k, p.v, p.ranges, backend=backend)
        assert (out.double() - ref).abs().mean() < 1e-3, backend
    with pytest.raises(ValueError, match="backend"):
        selection_attention(p.q, p.k, p.v, p.ranges, backend="cuda")
    p32 = problem(dtype=torch.float32)
    with pytest.raises(ValueError, match="backend='triton' cannot run"):
        selection_attention(p32.q, p32.k, p32.v, p32.ranges, backend="triton")


def test_decode_shape_uses_split_kernel(monkeypatch, spy):
    monkeypatch.setenv("NSA_SEL_TRITON_MIN_L", "0")
    p = problem(S=1, G=1, h=4, T=300, n=4)
    out, lse = selection_attention(p.q, p.k, p.v, p.ranges, return_lse=True)
    assert [c[0] for c in spy] == ["sel_attn_decode"]
    check_against_oracle(out, lse, p.q, p.k, p.v, p.ranges, what="dispatch decode")


def test_block_indices_input(monkeypatch):
    monkeypatch.setenv("NSA_SEL_TRITON_MIN_L", "0")
    p = problem(S=5, T=130)
    bi = torch.tensor([0, 1, -1, 2], dtype=torch.int32).expand(1, 5, 2, 4).contiguous()
    out = selection_attention(p.q, p.k, p.v, block_indices=bi, block_size=64)
    from nsa_triton_sel.contract import block_indices_to_ranges

    r = block_indices_to_ranges(bi, 64, 130)
    check_against_oracle(out, None, p.q, p.k, p.v, r, what="block indices")
    with pytest.raises(ValueError, match="exactly one"):
        selection_attention(p.q, p.k, p.v, p.ranges, block_indices=bi, block_size=64)
    with pytest.raises(ValueError, match="block_size"):
        selection_attention(p.q, p.k, p.v, block_indices=bi)


def test_multi_token_kernel_chosen_for_shared_selections(monkeypatch, spy):
    monkeypatch.setenv("NSA_SEL_TRITON_MIN_L", "0")
    p = problem(S=12, G=1, h=16, n=3)
    selection_attention(p.q, p.k, p.v, p.ranges)  # random spans: neighbours share nothing
    shared = p.ranges[:, :1].expand_as(p.ranges).contiguous()
    out, lse = selection_attention(p.q, p.k, p.v, shared, return_lse=True)
    assert [c[0] for c in spy] == ["sel_attn_ranges", "sel_attn_tokens"]
    check_against_oracle(out, lse, p.q, p.k, p.v, shared, what="auto multi-token")
    monkeypatch.setenv("NSA_SEL_TRITON_TOKENS", "1")
    selection_attention(p.q, p.k, p.v, shared)
    monkeypatch.setenv("NSA_SEL_TRITON_TOKENS", "2")
    selection_attention(p.q, p.k, p.v, p.ranges)
    assert [c[0] for c in spy[2:]] == ["sel_attn_ranges", "sel_attn_tokens"]
    assert spy[3][2]["tokens"] == 2
    monkeypatch.setenv("NSA_SEL_TRITON_TOKENS", "3")
    with pytest.raises(ValueError, match="NSA_SEL_TRITON_TOKENS"):
        selection_attention(p.q, p.k, p.v, p.ranges)


def test_known_bad_triton_warns(monkeypatch):
    monkeypatch.setattr(known_bad, "check_installed", lambda arch=None: "[w1] broken on this GPU")
    with pytest.warns(known_bad.KnownBadTritonWarning, match=r"\[w1\] broken on this GPU"):
        assert known_bad.warn_if_known_bad() == "[w1] broken on this GPU"
    monkeypatch.setattr(known_bad, "check_installed", lambda arch=None: None)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert known_bad.warn_if_known_bad() is None
