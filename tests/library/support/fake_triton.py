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
