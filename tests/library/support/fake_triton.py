"""Stand-ins for Triton's launch path (``JITFunction`` -> ``CompiledKernel`` -> launcher), no GPU needed.

A fake ``JITFunction`` launches a fake ``CompiledKernel`` the way Triton 3.0-3.2 (non-constexpr arguments only,
launcher in the ``run`` attribute) and 3.3+ (every argument with the constexprs, 3.6+ behind a ``run`` property)
do.  Used by the bound launcher's tests (``test_bind.py``) and the replay's (``test_replay.py``).
"""

from types import SimpleNamespace

import torch

from nsa_triton_sel.kernels import bind


class AttrKernel:
    """3.0-3.5: the launcher is an instance attribute."""

    def __init__(self, launches):
        self.function, self.packed_metadata = 1234567890123, ("packed",)
        self.run = lambda *a: launches.append(a)


class PropKernel:
    """3.6+: the launcher lives in ``_run`` behind a read-only ``run`` property."""

    def __init__(self, launches):
        self.function, self.packed_metadata = 987654321987, ("packed",)
        self._run = lambda *a: launches.append(a)

    @property
    def run(self):
        return self._run


class FakeCudaLauncher:
    """Triton's launcher object (``CudaLauncher``): its ``__call__`` hands each launch on to the compiled ``launch``
    (an instance attribute) as a release does: ``"3.0"`` (3.0-3.2: as it is), ``"3.3"`` (the cooperative-grid flag
    and a scratch buffer inserted after the function), ``"3.5"`` (3.5-3.6: the flag, PDL and two scratch
    buffers), ``"3.7"`` (3.7+: those flags, the metadata and hooks, the buffers, annotations and signature, then the
    kernel's arguments as one tuple); ``"scratch"``: 3.5's with a scratch buffer allocated per launch;
    ``"unaccounted"``: 3.5's with a new object per launch where the scratch buffer goes, the sizes saying none."""

    def __init__(self, launches, convention):
        self.launches, self.convention, self.wrapper_calls = launches, convention, 0
        self.launch = lambda *a: launches.append(a)
        self.launch_cooperative_grid, self.launch_pdl = False, True
        self.global_scratch_size, self.profile_scratch_size = (128 if convention == "scratch" else 0), 0
        self.arg_annotations, self.kernel_signature = ["annotations"], b"signature"

    def __call__(self, *a):
        self.wrapper_calls += 1
        c, grid, rest = self.convention, a[:5], a[5:]
        if c == "3.0":
            return self.launch(*a)
        if c == "3.3":
            return self.launch(*grid, self.launch_cooperative_grid, None, *rest)
        if c == "3.7":
            return self.launch(*grid, self.launch_cooperative_grid, self.launch_pdl, *rest[:4], None, None,
                               self.arg_annotations, self.kernel_signature, rest[4:])
        scratch = object() if c in ("scratch", "unaccounted") else None
        return self.launch(*grid, self.launch_cooperative_grid, self.launch_pdl, scratch, None, *rest)


def launcher_kernel(convention):
    """A 3.6+-style compiled kernel (``run`` a property) whose launcher is a :class:`FakeCudaLauncher`."""

    class LauncherKernel:
        def __init__(self, launches):
            self.function, self.packed_metadata = 555555555555, ("packed",)
            self._run = FakeCudaLauncher(launches, convention)

        @property
        def run(self):
            return self._run

    return LauncherKernel


class FakeJIT:
    """``fn[grid](*args, **kw)``: one compiled kernel per specialisation, launched as Triton does."""

    def __init__(self, kernel_type, passes_constexprs, convert=None):
        self.launches, self.plain_calls, self.kernels = [], 0, {}
        self.kernel_type, self.passes_constexprs, self.convert = kernel_type, passes_constexprs, convert
        self.__name__ = "fake_kernel"

    def __getitem__(self, grid):
        def launch(*args, **kw):
            self.plain_calls += 1
            spec = tuple(a if type(a) is int else (a.dtype, a.data_ptr() & 15) if isinstance(a, torch.Tensor)
                         else float for a in args) + tuple(sorted(kw.items()))
            kernel = self.kernels.setdefault(spec, self.kernel_type(self.launches))
            passed = [self.convert(a) for a in args] if self.convert else list(args)
            tail = [v for k, v in sorted(kw.items()) if k.isupper()] if self.passes_constexprs else []
            g = tuple(grid) + (1,) * (3 - len(grid))
            if self.kernel_type is PropKernel:  # 3.5+: empty HookChains, launch metadata built every launch
                meta, hooks = {"name": "fake_kernel"}, (SimpleNamespace(calls=[]), SimpleNamespace(calls=[]))
            else:
                meta, hooks = None, (None, None)
            kernel.run(*g, "stream", kernel.function, kernel.packed_metadata, meta, *hooks, *passed, *tail)
            return kernel
        return launch


def bound(fn):
    b = bind.Bound(fn)
    b._stream, b._device, b._hooks = (lambda dev: "stream"), (lambda: 0), ()
    return b


PLAN = object()


def kw():
    return {"BLOCK": 64, "MODE": 2, "num_warps": 4}
