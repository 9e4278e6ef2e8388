"""The GPU lane's JIT warm-up: arguments Triton specialises as the captured launches were, where it runs, and
the committed launch list (its compiles need a GPU: the lane's own runs measure them)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from nsa_triton_sel.compat.lanes import checks, jit_warm
from nsa_triton_sel.compat.registry.compile_spec import load_specs


def test_pointers_keep_their_dtype_and_alignment():
    aligned = jit_warm.argument("*bf16:16", None, torch, "cpu")
    loose = jit_warm.argument("*fp32", None, torch, "cpu")
    assert aligned.dtype == torch.bfloat16 and aligned.data_ptr() % 16 == 0
    assert loose.dtype == torch.float32 and loose.data_ptr() % 16 != 0


def test_integers_keep_their_width_divisibility_and_the_ones_triton_makes_constants():
    assert jit_warm.argument("i32:16", None, torch, "cpu") % 16 == 0
    assert jit_warm.argument("i32", None, torch, "cpu") % 16 != 0
    big = jit_warm.argument("i64", None, torch, "cpu")
    assert big >= 1 << 31 and big % 16 != 0
    assert jit_warm.argument("i32", "1", torch, "cpu") == 1  # a stride of 1: Triton compiles it as a constant
    assert jit_warm.argument("*fp16:16", "None", torch, "cpu") is None
    assert jit_warm.argument("fp32", None, torch, "cpu") == 1.0
    with pytest.raises(ValueError, match="unknown argument type"):
        jit_warm.argument("tensordesc", None, torch, "cpu")


def test_it_applies_only_to_the_release_and_arch_it_was_captured_on():
    assert jit_warm.applies(*jit_warm.CAPTURED) is None
    assert "Triton 3.9.0 on sm_90" in jit_warm.applies("3.9.0", 90)
    assert "no GPU" in jit_warm.applies(jit_warm.CAPTURED[0], None)


def test_the_launch_list_loads_and_names_only_package_kernels():
    specs = load_specs(jit_warm.LAUNCHES)
    assert len(specs) > 100 and all(s.kernel.startswith("nsa_triton_sel.kernels.") for s in specs)
    assert all(" was 1" in s.note for s in specs if "sq_d" in s.types)  # stride-1 dims are recorded as such


class _Session:
    name = "parity-3.6"

    def __init__(self):
        self.logs, self.ran = [], []

    def log(self, msg):
        self.logs.append(msg)

    def run(self, *args, **kwargs):
        self.ran.append(args)


@pytest.mark.parametrize("triton, gpus, warms", [("3.6.0", [(90, "H100")], True), ("3.9.0", [(90, "H100")], False),
                                                 ("3.6.0", [(90, "H100"), (80, "A100")], False)])
def test_the_gpu_parity_stage_warms_where_the_list_applies_and_says_why_not_elsewhere(monkeypatch, triton, gpus, warms):
    monkeypatch.setattr(checks.machine, "gpu_archs", lambda: gpus)
    monkeypatch.setenv(jit_warm.ENV, "1")
    s = _Session()
    checks.warm_jit(s, {"triton": triton})
    assert bool(s.ran) == warms and bool(s.logs) != warms
    if warms:
        assert s.ran[0][:3] == ("python", "-m", "nsa_triton_sel.compat.lanes.jit_warm")


def test_bad_arguments_are_one_line(capsys):
    assert jit_warm.main(["--jobs", "0"]) == 2
    assert jit_warm.main(["--specs", "nope.py:SPECS"]) == 2
    assert capsys.readouterr().err.count("\n") == 2


def test_a_launch_that_does_not_warm_is_counted_not_raised(capsys, monkeypatch):
    monkeypatch.setattr(jit_warm, "warm_one", lambda spec, torch, device: (_ for _ in ()).throw(RuntimeError("no GPU")))
    assert jit_warm.child(jit_warm.LAUNCHES, 0, 100) == 0
    out, err = capsys.readouterr()
    n = len(load_specs(jit_warm.LAUNCHES)[0::100])
    assert out.strip() == f"JIT_WARM 0 {n}" and err.count("not warmed") == min(3, n)


def test_parity_body_warms_before_the_gpu_tests(monkeypatch):
    order = []
    monkeypatch.setattr(checks, "warm_jit", lambda session, base: order.append("warm"))
    monkeypatch.setattr(checks, "gpu_tests", lambda *a, **k: (order.append("tests"), ([], None))[1])
    checks.parity_body(None, None, {"triton": "3.6.0"}, None, [], SimpleNamespace(gpu=True))
    assert order == ["warm", "tests"]


def test_the_processes_it_starts_report_back(tmp_path):
    """Run as ``python -m``: each child reports its count (here none warms: no GPU), none dies."""
    specs = load_specs(jit_warm.LAUNCHES)[:2]
    module = tmp_path / "two.py"
    module.write_text("from nsa_triton_sel.compat.registry.compile_spec import CompileSpec\nSPECS = [\n"
                      + "".join(f"    CompileSpec(name={s.name!r}, kernel={s.kernel!r}, types={dict(s.types)!r}, "
                                f"constexprs={dict(s.constexprs)!r}, note={s.note!r}),\n" for s in specs) + "]\n")
    warmed, total, died, _ = jit_warm.run(f"{module}:SPECS", 2)
    assert (total, died) == (2, 0) and warmed == (2 if torch.cuda.is_available() else 0)


def test_without_the_opt_in_the_parity_stage_warms_nothing(monkeypatch):
    monkeypatch.delenv(jit_warm.ENV, raising=False)
    monkeypatch.setattr(checks.machine, "gpu_archs", lambda: [(90, "H100")])
    s = _Session()
    checks.warm_jit(s, {"triton": jit_warm.CAPTURED[0]})
    assert s.ran == [] and s.logs == []
