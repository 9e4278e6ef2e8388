"""A GPU lane's tests over pytest-xdist workers sharing the GPU: the independent tests in parallel, the ``serial``
ones (timings) alone after them, both passes' records kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ledger_factory as F
from fake_nox import FakeSession
from nsa_triton_sel.compat.lanes import checks
from nsa_triton_sel.compat.core import machine


def _pytest(calls: list, collected: dict):
    """A pytest that records its arguments and reports the tests ``collected[marker expression]`` names."""
    def run(args, env):
        calls.append(args)
        rest = args[args.index("pytest") + 1:]
        expr = rest[rest.index("-m") + 1] if "-m" in rest else "bench/"
        names = collected.get(expr, [])
        xml = Path(next(a for a in args if a.startswith("--junitxml=")).split("=", 1)[1])
        cases = "".join(f'<testcase classname="t" name="{n}"/>' for n in names)
        xml.write_text(f"<testsuite>{cases}</testsuite>")
        Path(env[checks.IMPORTED_ENV]).write_text(json.dumps({"imported": {"triton": "3.1.0", "torch": "2.13.0+cpu"}}))
        Path(args[3]).write_text("0" if names else "5")
    return run


def test_independent_tests_run_over_workers_then_the_serial_ones_alone(tmp_path, monkeypatch):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_t.py").write_text("import pytest\n\npytestmark = pytest.mark.gpu\n\n\n"
                                                  "@pytest.mark.serial\ndef test_timing():\n    pass\n")
    monkeypatch.chdir(tmp_path)
    calls = []
    s = FakeSession("parity-3.1", tmp_path, {"pytest": _pytest(calls, {"(gpu) and not serial": ["a", "b"],
                                                                      "(gpu) and serial": ["timing"]})})
    recs, problem = checks.gpu_tests(s, F.base("3.1", "parity"), tmp_path, "gpu", [], workers=6)
    assert problem is None and sorted(r["kernel"].rpartition("::")[2] for r in recs) == ["a", "b", "timing"]
    first, second = calls
    assert first[first.index("-n") + 1] == "6" and "-n" not in second  # the timing test alone, one process
    assert any(a.endswith("parity-3.1.serial.junit.xml") for a in second)  # its own files: the first pass's stay


def test_a_selection_with_no_serial_test_is_not_a_skip(tmp_path):
    s = FakeSession("contract-3.1", tmp_path, {"pytest": _pytest([], {"(contract) and not serial": ["a"]})})
    recs, problem = checks.gpu_tests(s, F.base("3.1", "parity", mode="gpu"), tmp_path, "contract", [], workers=4)
    assert problem is None and [r["verdict"] for r in recs] == ["pass"]


def test_one_worker_is_one_plain_pass(tmp_path):
    calls = []
    s = FakeSession("parity-3.1", tmp_path, {"pytest": _pytest(calls, {"gpu": ["a"]})})
    recs, _ = checks.gpu_tests(s, F.base("3.1", "parity"), tmp_path, "gpu", [], workers=1)
    assert len(calls) == 1 and "-n" not in calls[0] and [r["verdict"] for r in recs] == ["pass"]


def test_worker_count_from_the_environment_or_the_cores(monkeypatch):
    monkeypatch.setattr(machine, "usable_cores", lambda: 32)
    monkeypatch.setattr(machine, "gpu_memory_gib", lambda: 79.6)
    monkeypatch.delenv(checks.GPU_WORKERS_ENV, raising=False)
    assert checks.gpu_test_workers() == checks.GPU_WORKERS_MAX  # pytest-xdist is a test dependency here
    monkeypatch.setattr(machine, "usable_cores", lambda: 12)
    assert checks.gpu_test_workers() == 12
    monkeypatch.setattr(machine, "gpu_memory_gib", lambda: 23.6)  # a 24 GB card: 5 workers
    assert checks.gpu_test_workers() == 5
    monkeypatch.setattr(machine, "gpu_memory_gib", lambda: 2.0)
    assert checks.gpu_test_workers() == 1
    monkeypatch.setenv(checks.GPU_WORKERS_ENV, "3")
    assert checks.gpu_test_workers() == 3
    monkeypatch.setenv(checks.GPU_WORKERS_ENV, "many")
    with pytest.raises(ValueError, match="NSA_SEL_GPU_WORKERS='many': expected a whole number"):
        checks.gpu_test_workers()
    monkeypatch.setenv(checks.GPU_WORKERS_ENV, "3")
    monkeypatch.setattr(checks.importlib.util, "find_spec", lambda name: None)
    assert checks.gpu_test_workers() == 1  # no pytest-xdist: one process


def test_the_gpus_a_process_may_use(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 3")
    assert machine.visible_gpus() == ["2", "3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert machine.visible_gpus() == []
    monkeypatch.setenv("NSA_SEL_GPU", "0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert machine.visible_gpus() == []


def test_a_gpu_pass_collects_only_the_files_that_use_its_marker(tmp_path, monkeypatch):
    tests = tmp_path / "tests"
    (tests / "sub").mkdir(parents=True)
    (tests / "test_cpu.py").write_text("def test_a():\n    pass\n")
    (tests / "sub" / "test_k_gpu.py").write_text("import pytest\n\npytestmark = pytest.mark.gpu\n")
    (tests / "test_t.py").write_text("import pytest\n\n\n@pytest.mark.gpu\n@pytest.mark.serial\ndef test_t():\n    pass\n")
    monkeypatch.chdir(tmp_path)
    assert checks.marked_files("gpu", []) == ["tests/sub/test_k_gpu.py", "tests/test_t.py"]
    assert checks.marked_files("serial", ["--durations=5", "-k", "x"]) == ["tests/test_t.py"]
    assert checks.marked_files("gpu", ["tests/test_cpu.py"]) == []  # the caller named its own paths
    assert checks.marked_files("gpu and not contract", []) == ["tests/sub/test_k_gpu.py", "tests/test_t.py"]
    assert checks.marked_files("gpu or contract", []) == []  # no marker every selected test has: pytest collects
    (tests / "test_writes_tests.py").write_text('SOURCE = "@pytest.mark.gpu"  # pytest.mark.serial\n')
    assert checks.marked_files("gpu", []) == ["tests/sub/test_k_gpu.py", "tests/test_t.py"]  # no mark: data
    calls = []
    s = FakeSession("parity-3.1", tmp_path, {"pytest": _pytest(calls, {"(gpu) and not serial": ["a"],
                                                                      "(gpu) and serial": ["t"]})})
    checks.gpu_tests(s, F.base("3.1", "parity"), tmp_path, "gpu", [], workers=4)
    assert list(calls[0][-2:]) == ["tests/sub/test_k_gpu.py", "tests/test_t.py"] and calls[1][-1] == "tests/test_t.py"


def test_a_lanes_benchmarks_leave_flexattention_out_unless_the_caller_asks(tmp_path, monkeypatch):
    envs = []
    pytest_ = _pytest([], {"bench/": ["a"]})
    s = FakeSession("bench-3.1", tmp_path, {"pytest": lambda args, env: (envs.append(env), pytest_(args, env))})
    monkeypatch.delenv("NSA_BENCH_FLEX", raising=False)
    recs, problem = checks.bench_body(s, None, F.base("3.1", "bench"), tmp_path, [], None)
    assert problem is None and envs[-1]["NSA_BENCH_FLEX"] == "0"
    monkeypatch.setenv("NSA_BENCH_FLEX", "1")
    checks.bench_body(s, None, F.base("3.1", "bench"), tmp_path, [], None)
    assert envs[-1]["NSA_BENCH_FLEX"] == "1"


def test_no_second_pytest_where_no_file_of_the_selection_has_a_serial_test(tmp_path, monkeypatch):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_k_gpu.py").write_text("import pytest\n\npytestmark = pytest.mark.gpu\n")
    (tests / "test_cpu_timing.py").write_text("import pytest\n\n\n@pytest.mark.serial\ndef test_t():\n    pass\n")
    monkeypatch.chdir(tmp_path)
    calls = []
    s = FakeSession("parity-3.1", tmp_path, {"pytest": _pytest(calls, {"(gpu) and not serial": ["a"]})})
    recs, problem = checks.gpu_tests(s, F.base("3.1", "parity"), tmp_path, "gpu", [], workers=4)
    assert problem is None and len(calls) == 1 and [r["verdict"] for r in recs] == ["pass"]


@pytest.mark.parametrize("expr, marker", [("gpu", "gpu"), ("(gpu) and not serial", "gpu"), ("not serial and contract",
                                          "contract"), ("gpu or contract", None), ("not gpu", None), ("", None)])
def test_the_marker_an_expression_requires(expr, marker):
    assert checks.required_marker(expr) == marker
