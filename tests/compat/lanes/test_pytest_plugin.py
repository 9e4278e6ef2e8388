"""The lanes' pytest plugin reports what the pytest process imported."""

from __future__ import annotations

import json
import subprocess
import sys


def test_plugin_writes_the_imported_versions(tmp_path):
    (tmp_path / "test_x.py").write_text("import numpy\n\ndef test_x():\n    assert numpy.__version__\n")
    out = tmp_path / "imported.json"
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "nsa_triton_sel.compat.lanes.pytest_plugin",
                          "-p", "no:cacheprovider", str(tmp_path / "test_x.py")], cwd=tmp_path,
                         env={**__import__("os").environ, "NSA_SEL_IMPORTED_JSON": str(out)},
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(out.read_text())
    import numpy

    assert doc["imported"]["numpy"] == numpy.__version__
    assert set(doc["imported"]) == {"triton", "numpy", "torch"} and doc["origins"]["numpy"]


def test_plugin_prints_a_progress_line_every_n_tests_without_a_terminal(tmp_path):
    """A line every N tests with counts and time, so a lane's log never stays silent for minutes."""
    tests = "import pytest\n" + "".join(f"def test_{i}():\n    pass\n" for i in range(5))
    tests += "@pytest.mark.skip(reason='x')\ndef test_s():\n    pass\ndef test_f():\n    assert 0\n"
    (tmp_path / "test_x.py").write_text(tests)
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "nsa_triton_sel.compat.lanes.pytest_plugin",
                          "-p", "no:cacheprovider", str(tmp_path / "test_x.py")], cwd=tmp_path,
                         env={**__import__("os").environ, "NSA_SEL_PROGRESS_EVERY": "3"},
                         capture_output=True, text=True)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("tests: ")]
    assert len(lines) == 3, res.stdout  # after 3, 6 and the 7th (last) test
    assert lines[0].startswith("tests: 3/7 (3 passed), ") and "elapsed" in lines[0]
    assert lines[-1].startswith("tests: 7/7 (1 failed, 5 passed, 1 skipped), ")


def test_plugin_rejects_a_bad_progress_setting(tmp_path):
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "nsa_triton_sel.compat.lanes.pytest_plugin",
                          "-p", "no:cacheprovider", str(tmp_path / "test_x.py")], cwd=tmp_path,
                         env={**__import__("os").environ, "NSA_SEL_PROGRESS_EVERY": "often"},
                         capture_output=True, text=True)
    assert res.returncode != 0 and "NSA_SEL_PROGRESS_EVERY='often'" in res.stdout + res.stderr


def test_jit_count_tells_compiles_from_cache_loads_and_calls_the_listener_it_replaced(monkeypatch):
    from types import SimpleNamespace

    from nsa_triton_sel.compat.lanes import pytest_plugin as plugin
    from nsa_triton_sel.compat.lanes.pytest_plugin import JitCount, jit_summary

    heard = []
    count = JitCount(previous=lambda **kw: heard.append(kw["cache_hit"]))
    times = SimpleNamespace(total=2_500_000)  # microseconds, as Triton's CompileTimes
    monkeypatch.setattr(plugin, "_TEST", None)  # restored after the test
    plugin.pytest_runtest_logstart("tests/test_x.py::test_y[a]", None)
    for key, hit in (("abc", False), ("abc", True), ("def", False)):
        count(src=None, metadata={"name": f"k_{key}"}, metadata_group={"k.json": f"/cache/{key}/k.json"}, times=times,
              cache_hit=hit)
    assert heard == [False, True, False]
    assert count.as_dict() == {"compiled": ["abc", "def"], "names": ["k_abc in test_x.py::test_y[a]",
                                                                      "k_def in test_x.py::test_y[a]"],
                               "launches": [None, None],  # not called from Triton's run: no key to read
                               "cached": 1, "compile_s": 5.0}
    other = {"compiled": ["abc"], "cached": 4, "compile_s": 1.0}  # a second process compiled "abc" too (no names)
    line = jit_summary([{"jit": count.as_dict()}, {"jit": other}, {"jit": None}])
    assert line == ("Triton JIT over 2 process(es): 3 compile(s) (6 s of compiling), 5 loaded from the cache "
                    "(hit rate 62%); 1 compile(s) of a kernel another process also compiled; compiled: "
                    "k_abc in test_x.py::test_y[a]; k_def in test_x.py::test_y[a]")
    assert jit_summary([{"jit": None}, {}]) is None


def test_a_stage_of_many_compiles_counts_them_by_kernel_with_inductors_together():
    from nsa_triton_sel.compat.lanes.pytest_plugin import LISTED, jit_summary

    names = ["sel_fwd_kernel in t::a"] * LISTED + ["triton_poi_fused_0 in t::b", "triton_red_fused_1 in t::b",
                                                   "sel_bwd_dq_kernel in t::c"]
    jit = {"compiled": [str(i) for i in range(len(names))], "names": names, "cached": 0, "compile_s": 1.0}
    assert jit_summary([{"jit": jit}]).endswith(
        "; by kernel: sel_fwd_kernel 8, torch.compile's (Inductor) 2, sel_bwd_dq_kernel 1")


def test_plugin_counts_the_triton_compiles_of_its_process(tmp_path):
    out = tmp_path / "imported.json"
    test = tmp_path / "test_one.py"
    test.write_text("import triton\n\n\ndef test_nothing():\n    pass\n")
    env = {**__import__("os").environ, "NSA_SEL_IMPORTED_JSON": str(out)}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "nsa_triton_sel.compat.lanes.pytest_plugin",
                    "-p", "no:cacheprovider", str(test)], env=env, check=True, capture_output=True, cwd=tmp_path)
    jit = json.loads(out.read_text())["jit"]
    import triton
    from triton import knobs  # noqa: F401 - the installed Triton has knobs (3.4+) here: it must count
    assert jit == {"compiled": [], "names": [], "launches": [], "cached": 0, "compile_s": 0.0}, triton.__version__


SETTLE_KERNELS = '''import triton
import triton.language as tl

SCALE = tl.constexpr(3)


@triton.jit
def leaf(x):
    return x * SCALE


@triton.jit
def middle(x):
    return leaf(x)


@triton.jit
def kernel(X):
    tl.store(X, middle(tl.load(X)))
'''

SETTLE_PROCESS = '''import json, sys
sys.path.insert(0, sys.argv[1])
from kpkg import mod
from nsa_triton_sel.compat.lanes.pytest_plugin import settle_cache_keys
if sys.argv[2] == "kernel-first":  # what Triton 3.2 - 3.7 leave in a process that hashed the kernel first:
    mod.kernel.cache_key              # a key and globals without its helpers' (here, SCALE)
    mod.kernel.hash, mod.kernel.used_global_vals = "without-the-helpers-globals", {}
n = settle_cache_keys("kpkg")
print(json.dumps([n, mod.kernel.cache_key, sorted(name for name, _ in mod.kernel.used_global_vals)]))
'''


def test_settled_cache_keys_do_not_depend_on_what_the_process_hashed_first(tmp_path):
    """Triton 3.2 - 3.7 key a kernel hashed before its helpers without their constexpr globals; settled, every
    process gives each function one key: the one with every callee's globals (here the leaf's SCALE)."""
    pkg = tmp_path / "kpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text(SETTLE_KERNELS)
    env = {**__import__("os").environ, "TRITON_INTERPRET": "0"}  # JITFunctions, as a GPU lane has them
    out = [json.loads(subprocess.run([sys.executable, "-c", SETTLE_PROCESS, str(tmp_path), order], env=env,
                                     check=True, capture_output=True, text=True).stdout)
           for order in ("kernel-first", "as-imported")]
    assert out[0] == out[1] and out[0][0] == 3 and out[0][2] == ["SCALE"], out


def test_a_lane_process_settles_the_kernels_keys_before_its_tests(monkeypatch):
    from nsa_triton_sel.compat.lanes import pytest_plugin

    calls = []
    monkeypatch.setenv(pytest_plugin.ENV, "x.json")
    monkeypatch.setattr(pytest_plugin, "settle_cache_keys", lambda: calls.append("settle"))
    monkeypatch.setattr(pytest_plugin, "_count_jit", lambda: calls.append("count"))
    pytest_plugin.pytest_collection_finish(None)
    assert calls == ["settle", "count"]
