"""``nsa-sel capture``: a real run's kernel launches as a spec module (kernels in the common styles, under the
interpreter on the CPU), the typing rule for code without a capture, and how ``--specs`` finds a module."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nsa_triton_sel.compat.registry import capture
from nsa_triton_sel.compat.registry.compile_spec import CompileSpec, arg_type, load_specs, resolve

HERE = Path(__file__).resolve().parent
KERNELS = HERE / "capture_kernels.py"
pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")


@pytest.mark.parametrize(("name", "want"), [
    ("x_ptr", "*fp16"), ("lse_ptrs", "*fp16"), ("Q", "*fp16"), ("cu_seqlens", "*i32"), ("cu_seqlens_k", "*i32"),
    ("n_cols", "i32"), ("sm_scale", "fp32"), ("stride_qm", "i32"),
])
def test_the_typing_rule_fits_common_code(name, want):
    assert arg_type(name, "fp16", {}) == want
    assert arg_type(name, "fp16", {name: "*fp32"}) == "*fp32"  # the one mapping of exceptions wins


def test_specs_resolve_an_importable_module_before_a_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    (tmp_path / "team_specs").mkdir()  # a data folder of the same name, no __init__.py
    (tmp_path / "team_specs.py").write_text("SPECS = []\n")
    assert resolve("team_specs") == ("module", str(tmp_path / "team_specs.py"))
    (tmp_path / "only_folder").mkdir()
    assert resolve("only_folder") == ("file", str(tmp_path / "only_folder" / "__init__.py"))
    assert resolve("x/y.py") == ("file", str(tmp_path / "x" / "y.py"))
    with pytest.raises(ValueError, match="No module named .no_such_specs. .*and no file or folder"):
        resolve("no_such_specs")


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """``nsa-sel capture`` of ``python capture_kernels.py`` under the interpreter: the spec module's path."""
    out = tmp_path_factory.mktemp("capture") / "team_specs.py"
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    res = subprocess.run([sys.executable, "-m", "nsa_triton_sel.compat.commands.cli", "capture", "-o", str(out), "--",
                          sys.executable, str(KERNELS)], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "4 specialisation(s) of 3 kernel(s)" in res.stderr, res.stderr[-2000:]
    return out


def test_capture_writes_every_specialisation_that_ran(captured):
    specs = {s.name: s for s in load_specs(f"{captured}:SPECS")}
    assert sorted(specs) == ["add_one/01", "add_one/02", "scale_rows/01", "tuple_store/01"]
    rows = specs["scale_rows/01"]
    assert rows.kernel == f"{KERNELS}:scale_rows" and rows.constexprs == {"BLOCK": 64}
    assert rows.types == {"x_ptr": "*fp32:16", "out_ptr": "*fp32:16", "cu_seqlens": "*i32:16", "n_cols": "i32",
                          "scale": "fp32"}
    assert (rows.num_warps, rows.num_stages, rows.dtype) == (4, 3, "fp32")
    assert "1 launch(es) on the interpreter" in rows.note
    tuned = sorted((s.constexprs["BLOCK"], s.num_warps) for n, s in specs.items() if n.startswith("add_one/"))
    assert tuned == [(32, 1), (64, 2)]  # both autotune configs ran (the first one twice: tuning, then the launch)
    assert "2 launch(es)" in specs["add_one/01"].note


def test_the_record_of_one_launch():
    class Tensor:  # what the recorder reads of a tensor: its address, element type and device
        dtype, device = "torch.bfloat16", None

        def __init__(self, ptr):
            self.ptr = ptr

        def data_ptr(self):
            return self.ptr

    assert capture.type_of(Tensor(4096)) == ("*bf16:16", "")
    assert capture.type_of(Tensor(4098)) == ("*bf16", "")
    assert capture.type_of(48) == ("i32:16", "") and capture.type_of(1) == ("i32", "1")
    assert capture.type_of(1 << 40) == ("i64:16", "") and capture.type_of(0.5) == ("fp32", "")
    assert capture.type_of(None) == ("i32", "None")


def test_captured_specs_compile_as_the_rule_types_them(captured):
    """The same kernels typed by the rule alone (no capture) get the same verdicts as the captured specs: the
    rule fits code written in these styles; and the tuple of pointers is judged the same either way."""
    from nsa_triton_sel.compat.smoke.run import run_smoke

    got = load_specs(f"{captured}:SPECS")
    ruled = [CompileSpec(name=f"rule/{s.name}", kernel=s.kernel, constexprs=s.constexprs, dtype=s.dtype,
                         num_warps=s.num_warps, num_stages=s.num_stages) for s in got]
    report = run_smoke(got + ruled, archs=[90], jobs=2, timeout=120, progress="off")
    verdicts = {r.spec: r.verdict for r in report.results}
    assert verdicts["scale_rows/01"] == verdicts["add_one/01"] == verdicts["add_one/02"] == "ok", verdicts
    for s in got:
        assert verdicts[s.name] == verdicts[f"rule/{s.name}"], (s.name, verdicts)


def test_capture_says_when_nothing_ran(tmp_path):
    out = tmp_path / "specs.py"
    res = subprocess.run([sys.executable, "-m", "nsa_triton_sel.compat.commands.cli", "capture", "-o", str(out), "--",
                          sys.executable, "-c", "print('no kernels')"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and "launched no Triton kernel" in res.stderr and not out.exists()


def test_a_spec_module_importing_a_toolkit_path_that_is_gone_says_where_compile_spec_is(tmp_path):
    old = tmp_path / "old_specs.py"
    old.write_text("from nsa_triton_sel.compat.compile_spec import CompileSpec\nSPECS = []\n")
    with pytest.raises(ValueError, match=r"imports nsa_triton_sel\.compat\.compile_spec.*"
                                         r"nsa_triton_sel\.compat\.registry\.compile_spec.*nsa-sel capture"):
        load_specs(f"{old}:SPECS")
