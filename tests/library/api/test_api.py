"""The public function (``api.py``) and its route: every flag's effect, the thresholds file reaching the decision, fallbacks.

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
from nsa_triton_sel import arguments, config, device, failures, known_bad, reference, selection_attention
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
    failures.FORWARD.clear()
    config.refresh()
    yield
    failures.FORWARD.clear()


@pytest.fixture
def spy(monkeypatch):
    """Record the dispatcher's kernel launches: [launcher name, (q, k, v, spans), kwargs, plan]."""
    calls = []
    names = {"ranges": "sel_attn_ranges", "decode": "sel_attn_decode", "tokens": "sel_attn_tokens"}
    real = launch.launch

    def launched(plan, *a, **kw):
        calls.append([names[plan.kernel], a, kw, plan])
        return real(plan, *a, **kw)

    monkeypatch.setattr(launch, "launch", launched)
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


def test_min_L_gate_sends_a_call_to_sdpa_only_when_every_row_is_below_it(monkeypatch, spy):
    p = problem(S=4, n=4, seed=3)
    longest = int((p.ranges[..., 1] - p.ranges[..., 0]).sum(-1).max())
    monkeypatch.setenv("NSA_SEL_TRITON_MIN_L", str(longest))  # one row reaches it: the kernels take all
    out, lse = selection_attention(p.q, p.k, p.v, p.ranges, return_lse=True)
    assert [c[0] for c in spy] == ["sel_attn_ranges"] and torch.equal(spy[0][1][3], p.ranges)
    check_against_oracle(out, lse, p.q, p.k, p.v, p.ranges, what="gate: kernels")
    monkeypatch.setenv("NSA_SEL_TRITON_MIN_L", str(longest + 1))  # every row below: packed SDPA
    out, lse = selection_attention(p.q, p.k, p.v, p.ranges, return_lse=True)
    assert len(spy) == 1
    check_against_oracle(out, lse, p.q, p.k, p.v, p.ranges, what="gate: sdpa")


def test_group_flag_selects_per_head_programs(monkeypatch, spy):
    from nsa_triton_sel import op

    monkeypatch.setenv("NSA_SEL_TRITON_MIN_L", "0")
    asked, real = [], op.plan.plan_call
    monkeypatch.setattr(op.plan, "plan_call", lambda *a, **kw: asked.append(kw["per_head"]) or real(*a, **kw))
    p = problem(h=20)
    selection_attention(p.q, p.k, p.v, p.ranges)
    monkeypatch.setenv("NSA_SEL_TRITON_GROUP", "0")
    out, lse = selection_attention(p.q, p.k, p.v, p.ranges, return_lse=True)
    assert asked == [False, True]
    assert [c[3].meta.BLOCK_H for c in spy] == [32, 16]  # the group's 20 heads in one block, or 16-row blocks
    check_against_oracle(out, lse, p.q, p.k, p.v, p.ranges, what="per-head")


def test_force_parity_takes_reference_path(monkeypatch, spy):
    monkeypatch.setenv("NSA_SEL_TRITON_MIN_L", "0")
    monkeypatch.setenv("NSA_FORCE_PARITY", "1")
    p = problem()
    assert arguments.route_of(p.q, p.k, p.v).path == "reference"
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


def write_thresholds(path, min_L, release, gpu="cpu", margin=1.0):
    path.write_text(json.dumps({"schema": 2, "entries": [
        {"gpu": gpu, "cc": "cpu", "triton": release, "sel_triton_min_L": min_L, "source": "test", "margin": margin}]}))


def installed_release():
    import triton
    from packaging.version import Version

    return Version(triton.__version__).base_version


def test_thresholds_file_reaches_the_decision(monkeypatch, tmp_path, spy):
    path = tmp_path / "thresholds.json"
    monkeypatch.setenv("NSA_SEL_THRESHOLDS_FILE", str(path))
    p = problem()
    write_thresholds(path, 1, installed_release())
    d = arguments.route_of(p.q, p.k, p.v)
    assert (d.path, d.min_L) == ("triton", 1) and "measured for cpu" in d.reason
    selection_attention(p.q, p.k, p.v, p.ranges)
    assert len(spy) == 1
    write_thresholds(path, None, installed_release())
    config.refresh()  # the thresholds file is read once per process
    d = arguments.route_of(p.q, p.k, p.v)
    assert d.path == "sdpa" and "null" in d.reason
    selection_attention(p.q, p.k, p.v, p.ranges)
    assert len(spy) == 1
    # The environment variable overrides the file.
    monkeypatch.setenv("NSA_SEL_TRITON_MIN_L", "7")
    assert arguments.route_of(p.q, p.k, p.v).min_L == 7


@pytest.mark.parametrize("gpu, release", [("cpu", "2.9.0"), ("cpu", "OTHER-MINOR"), ("NVIDIA A100-SXM4-80GB", "SAME")])
def test_another_gpus_or_releases_entry_never_applies(monkeypatch, tmp_path, gpu, release):
    from packaging.version import Version

    v = Version(installed_release())
    release = {"SAME": str(v), "OTHER-MINOR": f"{v.major}.{v.minor}.{v.micro + 1}"}.get(release, release)
    path = tmp_path / "thresholds.json"
    monkeypatch.setenv("NSA_SEL_THRESHOLDS_FILE", str(path))
    write_thresholds(path, None, release, gpu=gpu)  # "keep Triton off" measured elsewhere
    p = problem()
    d = arguments.route_of(p.q, p.k, p.v)
    assert (d.path, d.min_L) == ("triton", config.DEFAULT_MIN_L) == ("triton", 1)
    assert "default" in d.reason and "no measurement for cpu" in d.reason


@pytest.mark.parametrize("entry, problem_text", [
    ({"sel_triton_min_L": 4096, "margin": 1.2}, "may only do where SDPA was measured faster"),
    ({"sel_triton_min_L": None}, "margin"),
    ({"triton": "3.6"}, "not a series"),
    ({"triton": "three"}, "'triton' must be the release"),
    ({"sel_triton_min_L": 0}, "integer >= 1 or null"),
    ({"gpu": ""}, "'gpu' must be a non-empty string"),
])
def test_a_thresholds_entry_that_could_move_rows_without_evidence_is_refused(monkeypatch, tmp_path, entry,
                                                                            problem_text):
    e = {"gpu": "cpu", "cc": "cpu", "triton": "3.6.0", "sel_triton_min_L": 1, "source": "test"}
    e.update(entry)
    path = tmp_path / "thresholds.json"
    path.write_text(json.dumps({"schema": 2, "entries": [e]}))
    monkeypatch.setenv("NSA_SEL_THRESHOLDS_FILE", str(path))
    p = problem()
    with pytest.raises(ValueError, match="entries\\[0\\]: .*" + problem_text.replace("(", "\\(")):
        arguments.route_of(p.q, p.k, p.v)


def test_a_schema_1_thresholds_file_is_refused_with_what_to_do(monkeypatch, tmp_path):
    path = tmp_path / "thresholds.json"
    path.write_text(json.dumps({"schema": 1, "default_min_L": 4096, "entries": []}))
    monkeypatch.setenv("NSA_SEL_THRESHOLDS_FILE", str(path))
    p = problem()
    with pytest.raises(ValueError, match="schema 2 .*found schema 1.*re-measure"):
        arguments.route_of(p.q, p.k, p.v)


def test_the_shipped_thresholds_file_loads_and_moves_no_row_anywhere():
    data = config.load_thresholds()
    assert data["schema"] == 2 and data["entries"]
    assert all(e["sel_triton_min_L"] == 1 for e in data["entries"]), "a shipped entry sends rows to SDPA"


def test_the_debug_log_names_the_entry_or_default_that_applied(caplog):
    p = problem()
    with caplog.at_level(logging.DEBUG, logger="nsa_triton_sel"):
        arguments.route_of(p.q, p.k, p.v)
    assert "sel_triton_min_L=1" in caplog.text and "default: thresholds.json has no measurement for cpu" in caplog.text


UNMEASURED = [("NVIDIA H100 80GB HBM3", 90, "3.7.0"), ("NVIDIA H100 80GB HBM3", 90, "3.4.0"),
              ("NVIDIA A100-SXM4-80GB", 80, "3.6.0"), ("NVIDIA GeForce RTX 4090", 89, "3.6.0"),
              ("NVIDIA H100 80GB HBM3", 90, "3.6.1+git0123abc"), ("NVIDIA B200", 100, "3.9.0")]


@pytest.mark.parametrize("gpu, arch, release", UNMEASURED)
def test_no_nsa_row_goes_to_sdpa_where_nobody_measured(monkeypatch, spy, gpu, arch, release):
    """Where no threshold was measured, no NSA row goes to SDPA: a default of 4096 would send every NSA row
    (16 x 64 = 1024 keys) through packed SDPA, 400-600x slower (Triton 3.7.1 on the H100, and every GPU but
    cc 9.0)."""

    dev = device.Device("cpu", arch, 132, gpu, release, True)  # the interpreter runs it, named as that GPU
    from nsa_triton_sel.arguments import route
    from nsa_triton_sel.plan import call

    monkeypatch.setattr(route, "device_of", lambda device: dev)  # the route (the thresholds entry)
    monkeypatch.setattr(call, "device_of", lambda device: dev)  # the plan
    p = problem(B=1, S=2, G=1, h=2, Dk=16, Dv=16, T=1024 + 64, n=16, empty_frac=0.0)
    blocks = torch.randperm(16, generator=torch.Generator().manual_seed(0))
    start = (blocks * 64).to(torch.int32)  # an NSA row: 16 blocks of 64 keys, 1024 keys
    ranges = torch.stack([start, start + 64], -1).expand(1, 2, 1, 16, 2).contiguous()
    r = arguments.route_of(p.q, p.k, p.v)
    assert (r.path, r.min_L) == ("triton", 1), r
    assert f"no measurement for {gpu} with Triton {release.split('+')[0]}" in r.reason
    out = selection_attention(p.q, p.k, p.v, ranges)
    assert [c[0] for c in spy] == ["sel_attn_ranges"], "an NSA row did not reach the kernel"
    check_against_oracle(out, None, p.q, p.k, p.v, ranges, what=f"{gpu} {release}")


@pytest.mark.parametrize("why, setup, reason", [
    ("NSA_USE_TRITON_SEL=0", lambda mp, p: mp.setenv("NSA_USE_TRITON_SEL", "0"), "NSA_USE_TRITON_SEL=0"),
    ("NSA_FORCE_PARITY=1", lambda mp, p: mp.setenv("NSA_FORCE_PARITY", "1"), "NSA_FORCE_PARITY=1"),
    ("fp32", lambda mp, p: None, "dtype torch.float32"),
    ("head dims", lambda mp, p: None, "head dims Dk=320"),
    ("no triton", lambda mp, p: mp.setattr(arguments.route, "device_of", lambda d: device.Device(
        "cpu", None, 1, "cpu", "", True)), "triton is not importable"),
    ("earlier failure", lambda mp, p: failures.FORWARD.__setitem__(
        failures.key(p.q.device, p.q.dtype, 32, 32, 3), "boom"), "failed earlier for this configuration"),
    ("no interpreter", lambda mp, p: mp.setenv("TRITON_INTERPRET", "0"), "Triton needs CUDA"),
    ("measured null", lambda mp, p: (write_thresholds(p.path, None, installed_release()),
                                     mp.setenv("NSA_SEL_THRESHOLDS_FILE", str(p.path))), "measured faster at every L"),
])
def test_each_fallback_to_sdpa_names_its_reason(monkeypatch, tmp_path, spy, why, setup, reason):
    kw = {"fp32": dict(dtype=torch.float32), "head dims": dict(Dk=320)}.get(why, {})
    p = problem(**kw)
    p.path = tmp_path / "thresholds.json"
    config.refresh()  # (a refresh also forgets remembered kernel failures: it comes first)
    setup(monkeypatch, p)  # its setenv re-reads the flags
    r = arguments.route_of(p.q, p.k, p.v)
    assert r.path in ("sdpa", "reference") and reason in r.reason, r
    selection_attention(p.q, p.k, p.v, p.ranges)
    assert spy == []


def test_kernel_failure_is_reported_once_and_remembered(monkeypatch):
    monkeypatch.setenv("NSA_SEL_TRITON_MIN_L", "0")
    calls = []

    def broken(*a, **kw):
        calls.append(1)
        raise RuntimeError("forced failure")

    monkeypatch.setattr(launch, "launch", broken)
    p = problem()
    with pytest.warns(RuntimeWarning, match="forced failure"):
        out = selection_attention(p.q, p.k, p.v, p.ranges)
    assert torch.equal(out, reference.packed_sdpa(p.q, p.k, p.v, p.ranges))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # (ours; not an old interpreter's numpy DeprecationWarning)
        out2 = selection_attention(p.q, p.k, p.v, p.ranges)
    assert calls == [1], "a failed configuration must not be retried"
    assert torch.equal(out, out2)
    assert "failed earlier" in arguments.route_of(p.q, p.k, p.v).reason
    # Another configuration (other h) is still tried.
    p2 = problem(h=2)
    with pytest.warns(RuntimeWarning):
        selection_attention(p2.q, p2.k, p2.v, p2.ranges)
    assert calls == [1, 1]


def test_requires_grad_goes_through_the_kernels_and_their_backward(monkeypatch, spy, caplog):
    """Training inputs take the kernel path (its autograd is the backward kernels), not packed SDPA."""
    monkeypatch.setenv("NSA_SEL_TRITON_MIN_L", "0")
    monkeypatch.setenv("NSA_DEBUG_SHAPES", "1")
    calls = []
    real = launch.backward
    monkeypatch.setattr(launch, "backward", lambda *a, **k: calls.append(1) or real(*a, **k))
    p = problem()
    q = p.q.clone().requires_grad_(True)
    with caplog.at_level(logging.INFO, logger="nsa_triton_sel"):
        out = selection_attention(q, p.k, p.v, p.ranges)
    assert out.grad_fn is not None and "-> triton" in caplog.text
    out.float().sum().backward()
    assert calls == [1] and q.grad is not None and torch.isfinite(q.grad).all()


def test_a_failing_backward_kernel_falls_back_once_with_a_warning(monkeypatch):
    from nsa_triton_sel import op

    monkeypatch.setenv("NSA_SEL_TRITON_MIN_L", "0")
    monkeypatch.setattr(failures, "BACKWARD", failures.Failures("the Triton backward kernels", "instead"))
    calls = []

    def boom(*a, **k):
        calls.append(1)
        raise RuntimeError("simulated backward kernel failure")

    monkeypatch.setattr(launch, "backward", boom)
    p = problem()

    def grads():
        xs = [x.clone().requires_grad_(True) for x in (p.q, p.k, p.v)]
        selection_attention(*xs, p.ranges).float().sum().backward()
        return [x.grad for x in xs]

    with pytest.warns(RuntimeWarning, match="backward kernels failed.*simulated"):
        first = grads()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # (ours; not an old interpreter's numpy DeprecationWarning)
        second = grads()  # remembered: no retry, no second warning
    assert calls == [1]
    want = op._reference_backward(p.q, p.k, p.v, p.ranges, torch.ones(p.q.shape[:4] + (p.v.shape[-1],),
                                  dtype=p.q.dtype), torch.zeros(p.q.shape[:4]), 1.0 / p.q.shape[-1] ** 0.5)
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
    assert spy[3][3].meta.TOK == 2
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
        warnings.simplefilter("error", RuntimeWarning)  # (ours; not an old interpreter's numpy DeprecationWarning)
        assert known_bad.warn_if_known_bad() is None
