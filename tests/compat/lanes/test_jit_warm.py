"""The GPU lane's JIT warm-up: arguments Triton specialises as the captured launches were, where it runs, and
the committed launch list (its compiles need a GPU: the lane's own runs measure them)."""

from __future__ import annotations

import json
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
    bin_paths = None
    env = {}

    def __init__(self):
        self.logs = []

    def log(self, msg):
        self.logs.append(msg)


class _Proc:
    returncode = 0
    said = "jit_warm: 315 of 315 launches compiled into X over 16 processes in 35 s\n"

    def __init__(self, cmd, **kwargs):
        self.cmd, self.kwargs = cmd, kwargs
        if "stdout" in kwargs:
            kwargs["stdout"].write("a warning\n" + self.said)

    def wait(self):
        return self.returncode


@pytest.mark.parametrize("triton, gpus, warms", [("3.6.0", [(90, "H100")], True), ("3.9.0", [(90, "H100")], False),
                                                 ("3.6.0", [(90, "H100"), (80, "A100")], False)])
def test_the_gpu_parity_stage_warms_where_the_list_applies_and_says_why_not_elsewhere(monkeypatch, triton, gpus, warms):
    monkeypatch.setattr(checks.machine, "gpu_archs", lambda: gpus)
    monkeypatch.setattr(checks.subprocess, "Popen", _Proc)
    monkeypatch.delenv(jit_warm.ENV, raising=False)  # on by default
    s = _Session()
    warm = checks.start_jit_warm(s, {"triton": triton})
    assert (warm is not None) == warms
    if warms:
        proc = warm[0]
        assert proc.cmd[1:4] == ["-m", "nsa_triton_sel.compat.lanes.jit_warm", "--jobs"]
        assert proc.cmd[-2:] == ["--nice", str(jit_warm.NICE)]  # below the tests' priority
        checks.finish_jit_warm(s, warm)
        assert "315 of 315 launches" in s.logs[-1] and "after the tests" in s.logs[-1]
    else:
        assert "no JIT warm-up" in s.logs[0]


def test_a_lane_environment_runs_the_warm_up_with_its_own_interpreter(monkeypatch, tmp_path):
    (tmp_path / "python").write_text("#!/bin/sh\n")
    (tmp_path / "python").chmod(0o755)
    monkeypatch.setattr(checks.machine, "gpu_archs", lambda: [(90, "H100")])
    monkeypatch.setattr(checks.subprocess, "Popen", _Proc)
    s = _Session()
    monkeypatch.setenv("PYTHONHOME", "/elsewhere")
    s.bin_paths = [str(tmp_path)]
    s.env = {"TRITON_CACHE_DIR": "/lane/cache", "PYTHONHOME": None}  # None: nox unsets it for the session
    proc, _ = checks.start_jit_warm(s, {"triton": jit_warm.CAPTURED[0]})
    env = proc.kwargs["env"]
    assert proc.cmd[0] == str(tmp_path / "python") and env["TRITON_CACHE_DIR"] == "/lane/cache"
    assert "PYTHONHOME" not in env and all(isinstance(v, str) for v in env.values())


def test_a_warm_up_that_died_says_so(tmp_path):
    s = _Session()
    out = (tmp_path / "out").open("w+")
    proc = checks.subprocess.Popen([checks.sys.executable, "-c", "import sys; print('no torch here'); sys.exit(3)"],
                                   stdout=out, stderr=checks.subprocess.STDOUT)
    checks.finish_jit_warm(s, (proc, out))
    assert "exited with status 3: no torch here" in s.logs[0] and out.closed


def test_bad_arguments_are_one_line(capsys):
    assert jit_warm.main(["--jobs", "0"]) == 2
    assert jit_warm.main(["--specs", "nope.py:SPECS"]) == 2
    assert jit_warm.main(["--nice", "20"]) == 2
    assert capsys.readouterr().err.count("\n") == 3


def test_a_launch_that_does_not_warm_is_counted_not_raised(capsys, monkeypatch):
    monkeypatch.setattr(jit_warm, "warm_one", lambda spec, torch, device: (_ for _ in ()).throw(RuntimeError("no GPU")))
    assert jit_warm.child(jit_warm.LAUNCHES, 0, 100) == 0
    out, err = capsys.readouterr()
    n = len(load_specs(jit_warm.LAUNCHES)[0::100])
    assert out.strip() == f"JIT_WARM 0 {n}" and err.count("not warmed") == min(3, n)


@pytest.mark.parametrize("tests_raise", [False, True])
def test_parity_body_warms_beside_the_gpu_tests_and_waits_for_it(monkeypatch, tmp_path, tests_raise):
    order = []

    def tests(*a, **k):
        order.append("tests")
        if tests_raise:
            raise RuntimeError("pytest crashed")
        return [], None

    monkeypatch.setattr(checks, "start_jit_warm", lambda session, base: order.append("start") or "proc")
    monkeypatch.setattr(checks, "finish_jit_warm", lambda session, proc: order.append(f"wait {proc}"))
    monkeypatch.setattr(checks, "gpu_tests", tests)
    monkeypatch.setattr(checks, "process_reports", lambda path: [])
    monkeypatch.setattr(checks, "log_warm_misses", lambda session, reports: order.append("misses"))
    try:
        checks.parity_body(_Session(), None, {"triton": "3.6.0"}, tmp_path, [], SimpleNamespace(gpu=True))
    except RuntimeError:
        assert tests_raise
    assert order == ["start", "tests", "wait proc"] + ([] if tests_raise else ["misses"])


def test_the_processes_it_starts_report_back(tmp_path):
    """Run as ``python -m``: each child reports its count (here none warms: no GPU), none dies."""
    specs = load_specs(jit_warm.LAUNCHES)[:2]
    module = tmp_path / "two.py"
    module.write_text("from nsa_triton_sel.compat.registry.compile_spec import CompileSpec\nSPECS = [\n"
                      + "".join(f"    CompileSpec(name={s.name!r}, kernel={s.kernel!r}, types={dict(s.types)!r}, "
                                f"constexprs={dict(s.constexprs)!r}, note={s.note!r}),\n" for s in specs) + "]\n")
    warmed, total, died, _ = jit_warm.run(f"{module}:SPECS", 2, nice=1)
    assert (total, died) == (2, 0) and warmed == (2 if torch.cuda.is_available() else 0)


def test_nsa_sel_jit_warm_0_turns_it_off(monkeypatch):
    monkeypatch.setenv(jit_warm.ENV, "0")
    monkeypatch.setattr(checks.machine, "gpu_archs", lambda: [(90, "H100")])
    s = _Session()
    assert checks.start_jit_warm(s, {"triton": jit_warm.CAPTURED[0]}) is None and s.logs == []


def _launch(kernel, **spec):
    return {"kernel": kernel, "specialization": {"Q": "('*bf16', 'D')", "T": "('i32', 'D')", **spec},
            "options": {"num_warps": "4"}}


def test_the_misses_say_which_argument_the_warm_up_keyed_otherwise(tmp_path):
    keys = tmp_path / jit_warm.KEYS
    keys.write_text("\n".join(json.dumps(x) for x in (_launch("fwd"), _launch("fwd", T="('i32', '')"),
                                                      _launch("bwd"))) + "\n\n{\"kernel\": \"torn")
    reports = [{"jit": {"names": ["fwd in t::a", "fwd in t::b", "merge in t::c", "bwd in t::d", "bwd in t::e"],
                        "launches": [_launch("fwd"), _launch("fwd", Q="('*bf16', '')"), _launch("merge"),
                                     {**_launch("bwd"), "options": {"num_warps": "8"}}, None]}},
               {"jit": None}]
    lines = jit_warm.misses(reports, keys)
    assert lines == ["jit_warm: compiled by the tests, not warmed: fwd in t::b: Q test ('*bf16', ''), warmed ('*bf16', 'D')",
                     "jit_warm: compiled by the tests, not warmed: merge in t::c: the warm-up launched no merge",
                     "jit_warm: compiled by the tests, not warmed: bwd in t::d: launch options differ",
                     "jit_warm: 1 compile(s) keyed as a warmed launch was (the warm-up had not reached it yet, or "
                     "this Triton does not say the rest of its cache key)"]
    assert jit_warm.misses(reports, keys, shown=1)[1] == ("jit_warm: ... and 2 more compile(s) outside the warm "
                                                         "list")
    assert jit_warm.misses(reports, tmp_path / "none.jsonl") == [] and jit_warm.misses(reports, None) == []


def test_the_misses_say_which_part_of_the_cache_key_beyond_the_arguments_differs(tmp_path):
    warmed = {**_launch("bwd"), "cache": {"source": "abc", "backend": "12.8-90", "env": {"TRITON_X": "1"}}}
    keys = tmp_path / jit_warm.KEYS
    keys.write_text(json.dumps(warmed) + "\n")
    moved = {**_launch("bwd"), "cache": {"source": "abd", "backend": "13.0-90", "env": {"TRITON_X": "2"}}}
    same = {**_launch("bwd"), "cache": dict(warmed["cache"])}
    reports = [{"jit": {"names": ["bwd in t::a", "bwd in t::b"], "launches": [moved, same]}}]
    assert jit_warm.misses(reports, keys) == [
        "jit_warm: compiled by the tests, not warmed: bwd in t::a: the kernel's source key: test abd, warmed abc; "
        "the backend's key (ptxas version, arch): test 13.0-90, warmed 12.8-90; TRITON_X test 2, warmed 1",
        "jit_warm: 1 compile(s) keyed as a warmed launch was (the warm-up had not reached it yet, or this Triton "
        "does not say the rest of its cache key)"]


def test_the_launch_key_is_read_from_tritons_run_frame():
    from nsa_triton_sel.compat.lanes.pytest_plugin import launch_key

    class Kernel:
        __name__ = "sel_fwd_kernel"

        def run(self, *args, **kwargs):
            bound_args = {"Q": "q", "T": 64}  # noqa: F841 - read from this frame by launch_key
            specialization = [("*bf16", "D"), ("i32", "D")]  # noqa: F841
            options = {"num_warps": 4}  # noqa: F841
            return compile_it()

    class Backend:
        def hash(self):
            return "12.8-90"

    def compile(src=None, target=None, options=None):  # noqa: A001 - named as Triton's, whose frame is read
        backend, env_vars = Backend(), {"TRITON_X": 1}  # noqa: F841 - read from this frame by launch_key
        return listener()

    def compile_it():
        return compile(src=SimpleNamespace(fn=SimpleNamespace(cache_key="f" * 64)))

    def listener():  # Triton's compile calls the listener from below run
        return launch_key()

    assert Kernel().run() == {"kernel": "sel_fwd_kernel",
                              "specialization": {"Q": "('*bf16', 'D')", "T": "('i32', 'D')"},
                              "options": {"num_warps": "4"},
                              "cache": {"source": "f" * 16, "backend": "12.8-90", "env": {"TRITON_X": "1"}}}
    assert launch_key() is None  # no run frame above


def test_the_bench_stage_logs_what_the_warm_up_missed(monkeypatch, tmp_path):
    (tmp_path / jit_warm.KEYS).write_text(json.dumps(_launch("fwd")) + "\n")
    s = _Session()
    s.env = {"TRITON_CACHE_DIR": str(tmp_path)}
    reports = [{"jit": {"names": ["merge in t::c"], "launches": [_launch("merge")]}}]
    checks.log_warm_misses(s, reports)
    assert s.logs == ["parity-3.6: jit_warm: compiled by the tests, not warmed: merge in t::c: the warm-up "
                      "launched no merge"]


def test_a_warm_up_child_lists_each_launch_triton_keyed(monkeypatch, tmp_path):
    triton = pytest.importorskip("triton")
    compilation = getattr(getattr(triton, "knobs", None), "compilation", None)
    if compilation is None or not hasattr(compilation, "listener"):
        pytest.skip(f"Triton {triton.__version__} has no compilation listener (3.4+)")
    monkeypatch.setattr(compilation, "listener", None)  # restored after the test
    keys = tmp_path / jit_warm.KEYS
    jit_warm._listen(keys)

    class Kernel:
        __name__ = "sel_fwd_kernel"

        def run(self):
            bound_args, specialization, options = {"T": 64}, [("i32", "D")], {}  # noqa: F841 - read by launch_key
            compilation.listener(src=None, metadata={}, metadata_group={}, times=None, cache_hit=True)

    Kernel().run()
    compilation.listener(src=None, metadata={}, metadata_group={}, times=None, cache_hit=False)  # no run frame
    assert [json.loads(x)["specialization"] for x in keys.read_text().splitlines()] == [{"T": "('i32', 'D')"}]
