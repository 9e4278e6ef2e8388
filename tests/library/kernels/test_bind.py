"""The bound launcher (``kernels/bind.py``) against stand-ins for Triton's two launcher conventions.

No GPU here: a fake ``JITFunction`` launches a fake ``CompiledKernel`` the way Triton 3.0-3.2
(non-constexpr arguments only, launcher in the ``run`` attribute) and 3.3+ (every argument with the
constexprs, 3.6+ behind a ``run`` property) do; the straight launch a replay makes (``Inner``) against the
installed Triton's own launcher object.  The real kernels through the bound launcher are
tested on the GPU (``test_kernels_gpu.py::test_bound_launcher_*``).
"""

from types import SimpleNamespace

import pytest
import torch

from fake_triton import PLAN, AttrKernel, FakeJIT, PropKernel, bound, kw
from nsa_triton_sel.kernels import bind


@pytest.mark.parametrize("kernel_type, constexprs", [(AttrKernel, False), (AttrKernel, True), (PropKernel, True)],
                         ids=["3.0-3.2", "3.3-3.5", "3.6+"])
def test_third_call_launches_the_recorded_launcher_with_the_same_arguments(kernel_type, constexprs):
    fn = FakeJIT(kernel_type, constexprs)
    b = bound(fn)
    x, y = torch.zeros(8), torch.zeros(4, dtype=torch.int32)
    for _ in range(4):
        b(PLAN, (3, 2), (x, y, 5, 0.25, 128), kw)
    assert fn.plain_calls == 2  # the first call and the recording; the last two are bound
    assert b.bound_launches == 2 and b.off is None
    assert len(fn.launches) == 4
    first = fn.launches[0]
    for later in fn.launches[1:]:  # the same grid, stream, kernel, metadata and arguments
        assert len(later) == len(first)
        assert all(a is c or a == c for a, c in zip(later[:6] + later[9:], first[:6] + first[9:]))
    assert fn.launches[-1][6:9] == (None, None, None)  # no hook to call, no launch metadata to build
    assert sum(type(e) is bind._Launcher for e in b.shapes.values()) == 1


def test_a_new_integer_value_is_a_new_shape_not_a_replay():
    fn = FakeJIT(PropKernel, True)
    b = bound(fn)
    x = torch.zeros(8)
    for _ in range(3):
        b(PLAN, (1,), (x, 16), kw)
    b(PLAN, (1,), (x, 17), kw)  # Triton specialises on divisibility: a different compiled kernel
    assert fn.plain_calls == 3
    assert fn.launches[-1][9:11] == (x, 17)


def test_a_new_tensor_alignment_is_a_new_shape():
    fn = FakeJIT(PropKernel, True)
    b = bound(fn)
    base = torch.zeros(64)
    for _ in range(3):
        b(PLAN, (1,), (base[:8],), kw)
    b(PLAN, (1,), (base[1:9],), kw)  # 4 bytes off 16-byte alignment
    assert fn.plain_calls == 3


def test_a_launcher_that_gets_other_arguments_than_passed_turns_the_binding_off():
    fn = FakeJIT(AttrKernel, False, convert=lambda a: a.data_ptr() if isinstance(a, torch.Tensor) else a)
    b = bound(fn)
    x = torch.zeros(8)
    for _ in range(4):
        b(PLAN, (1,), (x, 3), kw)
    assert b.off and "argument 0 reached the launcher as int" in b.off
    assert fn.plain_calls == 4 and len(fn.launches) == 4 and b.bound_launches == 0


def test_launch_hooks_take_the_plain_path():
    fn = FakeJIT(PropKernel, True)
    b = bound(fn)
    hooks = SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None)
    b._hooks = (hooks,)
    x = torch.zeros(8)
    for _ in range(3):
        b(PLAN, (1,), (x,), kw)
    assert b.bound_launches == 1
    hooks.launch_enter_hook = print  # a profiler: Triton must see the launch and build its metadata
    b(PLAN, (1,), (x,), kw)
    assert b.bound_launches == 1 and fn.plain_calls == 3


def test_an_empty_hook_chain_is_no_hook():
    """Triton 3.5+ keeps its hooks in HookChain objects, never None: empty ones must not block the binding."""
    fn = FakeJIT(PropKernel, True)
    b = bound(fn)
    hooks = SimpleNamespace(launch_enter_hook=SimpleNamespace(calls=[]), launch_exit_hook=SimpleNamespace(calls=[]))
    b._hooks = (hooks,)
    for _ in range(3):
        b(PLAN, (1,), (torch.zeros(8),), kw)
    assert b.bound_launches == 1
    hooks.launch_enter_hook.calls.append(print)
    b(PLAN, (1,), (torch.zeros(8),), kw)
    assert b.bound_launches == 1 and fn.plain_calls == 3


def test_disabled_is_the_plain_path(monkeypatch):
    monkeypatch.setattr(bind, "ENABLED", False)
    fn = FakeJIT(PropKernel, True)
    b = bound(fn)
    for _ in range(3):
        b(PLAN, (1,), (torch.zeros(8),), kw)
    assert fn.plain_calls == 3 and b.bound_launches == 0


def test_report_says_why_a_kernel_is_notbound():
    from nsa_triton_sel import caches

    caches.clear()
    fn = FakeJIT(AttrKernel, False, convert=lambda a: a.data_ptr() if isinstance(a, torch.Tensor) else a)
    b = bind.bound(fn)
    b._stream, b._device, b._hooks = (lambda dev: "stream"), (lambda: 0), ()
    x = torch.zeros(8)
    for _ in range(2):
        b(PLAN, (1,), (x,), kw)
    assert bind.report()["fake_kernel"].startswith("JITFunction.run: argument 0")
    caches.clear()  # the registry (config.refresh) forgets the recorded launches and the reasons
    assert bind.report() == {}


def test_the_key_has_each_integer_run_as_a_slice_each_tensor_twice_and_no_float():
    key = bind.key_function("ttiifii")
    x, y = torch.zeros(8), torch.zeros(8, dtype=torch.float16)[1:]
    assert key(PLAN, lambda: 3, (x, y, 5, 6, 0.5, 7, 8)) == (PLAN, 3, x.dtype, 0, y.dtype, 2, (5, 6), (7, 8))
    assert key(PLAN, lambda: 3, (x, y, 5, 6, 0.25, 7, 8)) == key(PLAN, lambda: 3, (x, y, 5, 6, 0.5, 7, 8))


def test_a_float_is_never_a_new_shape_and_an_integer_where_a_tensor_was_stops_the_binding():
    fn = FakeJIT(PropKernel, True)
    b = bound(fn)
    x = torch.zeros(8)
    for scale in (0.5, 0.5, 0.25):
        b(PLAN, (1,), (x, 16, scale), kw)
    assert fn.plain_calls == 2 and b.bound_launches == 1 and fn.launches[-1][9:12] == (x, 16, 0.25)
    b(PLAN, (1,), (3, 16, 0.5), kw)  # the key function cannot read a tensor's dtype from an int
    assert b.off and "cannot key the arguments" in b.off and fn.plain_calls == 3


def test_a_new_shape_with_another_argument_layout_stops_the_binding():
    fn = FakeJIT(PropKernel, True)
    b = bound(fn)
    x = torch.zeros(8)
    for _ in range(3):
        b(PLAN, (1,), (x, 16), kw)
    b(PLAN, (1,), (x, 1.5), kw)  # a float where an int was: the key would drop it
    assert b.off == "the argument types changed between calls: tf after ti" and fn.plain_calls == 3


def test_an_argument_of_another_type_is_the_plain_path_with_the_reason():
    fn = FakeJIT(PropKernel, True)
    b = bound(fn)
    b(PLAN, (1,), (torch.zeros(8), None), kw)
    assert b.off == "cannot key arguments of types other than tensor, int and float (1: NoneType)"


def test_the_launch_straight_is_what_the_installed_tritons_launcher_object_passes(monkeypatch):
    """``Inner`` derived from the installed Triton's own ``CudaLauncher.__call__`` (its compiled C launch replaced by
    a recorder: building it needs a GPU driver) rebuilds exactly the call that object makes.  Run under each release
    with ``PYTHONPATH=<its unpacked wheel>`` (``bench/results/2026-11-28-cpu-triton3.0-3.9-launcher-arrangements/``)."""
    import triton

    nvidia = pytest.importorskip("triton.backends.nvidia.driver")
    if hasattr(triton.runtime.driver, "_active"):  # 3.8+ reads the active driver (its profile-scratch allocator)
        monkeypatch.setattr(triton.runtime.driver, "_active", SimpleNamespace(allocate_default_profile_scratch=None))
    launcher = object.__new__(nvidia.CudaLauncher)
    passed = []
    vars(launcher).update(launch=lambda *a, **k: passed.append((a, k)), global_scratch_size=0, global_scratch_align=1,
                          profile_scratch_size=0, profile_scratch_align=1, launch_cooperative_grid=False,
                          launch_pdl=False, num_ctas=1, gsan_enabled=False, arg_annotations=["annotations"],
                          kernel_signature=b"signature")  # what each release's __init__ sets that __call__ reads
    outer = (2, 1, 1, 123456, 987654, ("packed",), object(), object(), object(), 10, 20, 30, 0.5, 64, 2)
    launcher(*outer)
    ((inner_args, keywords),) = passed
    inner = bind._inner(launcher, outer, inner_args)
    assert not keywords and inner is not None, f"Triton {triton.__version__}: {inner_args}"
    assert inner.arguments(outer) == inner_args and inner.launch is launcher.launch
    print(f"Triton {triton.__version__}: {'grouped' if inner.grouped else 'flat'}, inserted before the metadata "
          f"{inner.before}, after it {inner.after}")
    launcher.global_scratch_size = 128  # scratch memory per launch: no straight launch
    assert bind._inner(launcher, outer, inner_args) is None
