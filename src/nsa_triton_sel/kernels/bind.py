"""Launch a compiled Triton kernel through its launcher, without ``JITFunction.run``.

``kernel[grid](*args, **constexprs)`` binds and specialises every argument on every call, at a host
cost that grows with the argument count (``bench/perf/host_cost.py`` measures it).  A decode step launches
``sel_fwd_kernel`` with about 50 arguments, so that binding is most of its host time.  :class:`Bound` skips it for a call shape seen before:

1. first call of a shape: the plain Triton launch; it compiles (or finds) the kernel and returns the
   ``CompiledKernel``;
2. second call: the plain launch again, with the compiled kernel's launcher wrapped to *record* the
   arguments Triton passes it.  Triton's own call is the specification: the recording must start
   with exactly this call's arguments (the same objects, the same scalars), and whatever follows
   them (3.3+ passes the constexprs too, 3.0-3.2 does not) is constant for the shape;
3. later calls: the recorded launcher is called directly, with the current stream, and ``None`` for
   the launch metadata and hooks (3.5+ passes its empty ``HookChain`` objects and builds launch
   metadata for them on every launch).

The second call also records what Triton's launcher object passes on to the compiled C ``launch`` it wraps
(:class:`Inner`): where that is the launch's own arguments with constants inserted, a replay (``replay.py``)
calls ``launch`` itself and skips the object's per-launch Python.

A shape is everything Triton specialises on: the launch plan (constexprs, warps, stages; plans are
frozen dataclasses, compared by value), every integer
argument's value, each tensor's dtype and 16-byte alignment, and the device.  Its key is built by a function
generated for the kernel's argument layout (which positions hold tensors, integers, floats), seen on the
first call: runs of integers go in as tuple slices and each tensor as two items, with no loop over the
arguments, since the key is built on every launch.  A call whose layout differs from the first one's (checked
whenever a shape is new) stops the binding.  Anything unexpected
(a recording that does not match, a launcher Triton does not expose, an exception) disables the
binding for that kernel and records why (:func:`report`); the launch then stays ``JITFunction.run``,
which every Triton 3.0-3.9 runs.  Launch hooks (profilers) also take the plain path.  Not used
under the interpreter or ``torch.compile`` (``wrap``): the callers pass those to Triton as before.
"""

from __future__ import annotations

import torch

from .. import caches
from .params import packer

ENABLED = True  # tests and benchmarks switch it off to compare with JITFunction.run
MAX_SHAPES = 4096  # per kernel; past it the table is cleared (shapes churn, the binding no longer pays)
_ALL: dict = caches.register("bound_launchers", {})  # JITFunction -> Bound


def _hook_holders():
    """Where this Triton keeps its launch hooks: ``triton.knobs.runtime`` (3.5+) and/or ``CompiledKernel``."""
    import triton

    holders = []
    runtime = getattr(getattr(triton, "knobs", None), "runtime", None)
    if runtime is not None and hasattr(runtime, "launch_enter_hook"):
        holders.append(runtime)
    try:
        from triton.compiler import CompiledKernel
    except ImportError:  # pragma: no cover - every 3.x has it
        CompiledKernel = None
    if CompiledKernel is not None and hasattr(CompiledKernel, "launch_enter_hook"):
        holders.append(CompiledKernel)
    return tuple(holders)


def _active(hook) -> bool:
    """A launch hook that does something: 3.0-3.4 keep ``None`` or a callable, 3.5+ a ``HookChain``
    that is never ``None`` (empty: ``calls == []``)."""
    return hook is not None and bool(getattr(hook, "calls", True))


class _Pending:
    """A shape launched once through Triton: its compiled kernel, to be recorded on the next call."""

    __slots__ = ("kernel", "plan")

    def __init__(self, kernel, plan):
        self.kernel, self.plan = kernel, plan


class _Launcher:
    """A recorded launch: the launcher, the kernel handle and metadata, the constant tail, and how the launcher
    hands a launch on to its compiled ``launch`` (:class:`Inner`, or None: only through the launcher)."""

    __slots__ = ("run", "function", "packed", "tail", "plan", "inner")

    def __init__(self, run, function, packed, tail, plan, inner=None):
        self.run, self.function, self.packed, self.tail, self.plan = run, function, packed, tail, plan
        self.inner = inner


class Inner:
    """How Triton's launcher object (``CudaLauncher``) passes a launch on to the compiled C ``launch`` it wraps.

    The wrapper's own work is constant for a compiled kernel that needs no scratch memory: it inserts the same
    values (the cooperative-grid and PDL flags, ``None`` scratch buffers, 3.7+ also the argument annotations and
    signature) around the launch's own arguments ``(gridX, gridY, gridZ, stream, function, metadata,
    launch_metadata, enter_hook, exit_hook, *args)``.  Two arrangements exist (recorded from the wrapper's call,
    never assumed per release):

    - flat (3.0-3.6): ``grid, stream, function, *before, metadata, launch_metadata, hooks, *args``;
    - grouped (3.7+): ``grid, stream, function, *before, metadata, launch_metadata, hooks, *after, args`` (the
      kernel's arguments as one tuple).
    """

    __slots__ = ("launch", "before", "after", "grouped")

    def __init__(self, launch, before: tuple, after: tuple, grouped: bool):
        self.launch, self.before, self.after, self.grouped = launch, before, after, grouped

    def arguments(self, outer: tuple) -> tuple:
        """What the wrapper passes ``launch`` for its own arguments ``outer``."""
        if self.grouped:
            return (*outer[:5], *self.before, *outer[5:9], *self.after, tuple(outer[9:]))
        return (*outer[:5], *self.before, *outer[5:])


def _inner(launcher, outer: tuple, inner: tuple) -> Inner | None:
    """The :class:`Inner` of ``launcher`` from one launch (its arguments ``outer``, and ``inner``, what it passed
    its ``launch``), or None where a launch cannot skip the wrapper: it allocates scratch memory or instruments
    launches (per call), or it passed something the two arrangements do not account for."""
    if getattr(launcher, "global_scratch_size", 0) or getattr(launcher, "profile_scratch_size", 0) or \
            getattr(launcher, "gsan_enabled", False):
        return None
    n = len(outer)
    if n < 9 or len(inner) < 6 or not all(map(_same, inner[:5], outer[:5])):
        return None
    last = inner[-1]
    if type(last) is tuple and len(last) == n - 9 and all(map(_same, last, outer[9:])):
        found = [s for s in range(5, len(inner) - 4) if all(map(_same, inner[s:s + 4], outer[5:9]))]
        if not found:
            return None
        cut = Inner(launcher.launch, inner[5:found[0]], inner[found[0] + 4:-1], True)
    else:
        cut = Inner(launcher.launch, inner[5:len(inner) - (n - 5)], (), False)
    held = list(vars(launcher).values()) if hasattr(launcher, "__dict__") else []
    for c in cut.before + cut.after:  # flags, None buffers, or the launcher's own constants: never a call's
        if not (c is None or type(c) in (bool, int) or any(c is x for x in held)):
            return None
    rebuilt = cut.arguments(outer)
    return cut if len(rebuilt) == len(inner) and all(map(_same, rebuilt, inner)) else None


def _swap_run(kernel, new):
    """Replace a ``CompiledKernel``'s launcher: 3.6+ keep it in ``_run`` behind a ``run`` property,
    3.0-3.5 in the instance attribute ``run`` (set on first access)."""
    if isinstance(getattr(type(kernel), "run", None), property):
        kernel._run = new
    else:
        kernel.run = new


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return a is b
    return type(a) is type(b) and a == b


class Bound:
    """One ``@triton.jit`` kernel, launched by :meth:`__call__` (see the module docstring)."""

    def __init__(self, fn):
        self.fn = fn
        self._pack = None
        self.name = getattr(fn, "__name__", None) or getattr(getattr(fn, "fn", None), "__name__", "kernel")
        self.shapes: dict = {}
        self.off: str | None = None  # why this kernel launches through JITFunction.run
        if type(fn).__name__ == "InterpretedFunction":  # TRITON_INTERPRET=1 when the kernel was decorated
            self.off = "the Triton interpreter runs this kernel"
        self.bound_launches = 0
        self._stream = None
        self._device = None
        self._hooks = ()
        self._layout = None  # the type of each argument position ("t", "i", "f"), from the first call
        self._key_of = None  # (plan, device, args) -> key, generated for that layout

    @property
    def pack(self):
        """``pack(**named) -> args``: the kernel's arguments in its order, from keywords (``params.packer``)."""
        if self._pack is None:
            self._pack = packer(self.fn)
        return self._pack

    def __call__(self, plan, grid, args, kwargs):
        """Launch ``fn[grid](*args, **kwargs())``; ``plan`` fixes ``kwargs`` (a callable: built on a miss only).
        Returns the recorded launcher where it launched (a replay calls it again: ``replay.py``), else None."""
        if self.off is not None or not ENABLED or type(grid) is not tuple or self._hooked():
            self.fn[grid](*args, **kwargs())
            return None
        if self._key_of is None:
            why = self._start(args)
            if why:
                return self._give_up(why, grid, args, kwargs)
        try:
            key = self._key_of(plan, self._device, args)
        except Exception as e:  # noqa: BLE001 - an argument we cannot key: the plain path, with the reason
            return self._give_up(f"cannot key the arguments: {e!r}", grid, args, kwargs)
        entry = self.shapes.get(key)
        if type(entry) is _Launcher:
            g = grid + (1,) * (3 - len(grid))
            entry.run(g[0], g[1], g[2], self._stream(self._device()), entry.function, entry.packed, None, None,
                      None, *args, *entry.tail)
            self.bound_launches += 1
            return entry
        if _layout(args) != self._layout:  # a new shape: its key is only as good as the layout it was built for
            return self._give_up(f"the argument types changed between calls: {_layout(args)} after {self._layout}",
                                 grid, args, kwargs)
        if entry is None:
            if len(self.shapes) >= MAX_SHAPES:
                self.shapes.clear()
            self.shapes[key] = _Pending(self.fn[grid](*args, **kwargs()), plan)
            return None
        self._record(key, entry, grid, args, kwargs)
        return None

    def _hooked(self) -> bool:
        for h in self._hooks:
            if _active(h.launch_enter_hook) or _active(h.launch_exit_hook):
                return True
        return False

    def _start(self, args) -> str | None:
        """The first call: the driver's stream and device getters, the hook holders, the argument layout and its
        key function; why the binding cannot start, or None."""
        if self._stream is None:
            import triton

            drv = triton.runtime.driver.active
            self._stream, self._device = drv.get_current_stream, drv.get_current_device
            self._hooks = _hook_holders()
        layout = _layout(args)
        if "?" in layout:
            bad = [f"{i}: {type(a).__name__}" for i, a in enumerate(args) if _kind(a) == "?"]
            return f"cannot key arguments of types other than tensor, int and float ({', '.join(bad)})"
        self._layout, self._key_of = layout, key_function(layout)
        return None

    def _record(self, key, pending: _Pending, grid, args, kwargs):
        """The second call of a shape: launch through Triton, recording what it passes the launcher."""
        kernel, seen, passed = pending.kernel, [], []
        try:
            real = kernel.run
        except Exception as e:  # noqa: BLE001
            return self._give_up(f"the compiled kernel exposes no launcher: {e!r}", grid, args, kwargs)

        def record(*a):
            seen.append(a)
            return real(*a)

        launch = getattr(real, "launch", None)  # Triton's launcher object wraps a compiled C launch

        def record_inner(*a, **kw):
            passed.append((a, kw))
            return launch(*a, **kw)

        try:
            _swap_run(kernel, record)
        except Exception as e:  # noqa: BLE001
            return self._give_up(f"cannot wrap the launcher: {e!r}", grid, args, kwargs)
        try:
            if callable(launch):
                real.launch = record_inner
        except (AttributeError, TypeError):
            launch = None
        try:
            self.fn[grid](*args, **kwargs())
        finally:
            _swap_run(kernel, real)
            if callable(launch):
                real.launch = launch
        why = self._check(seen, kernel, args)
        if why:
            self.off = why
            self.shapes.clear()
            return None
        a = seen[0]
        inner = _inner(real, a, passed[0][0]) if len(passed) == 1 and not passed[0][1] else None
        self.shapes[key] = _Launcher(real, a[4], a[5], tuple(a[9 + len(args):]), pending.plan, inner)
        return None

    @staticmethod
    def _check(seen, kernel, args) -> str | None:
        """Why the recorded launch cannot be replayed (None: it can)."""
        if len(seen) != 1:
            return f"Triton called the recorded launcher {len(seen)} times for one launch (another compiled kernel?)"
        a = seen[0]
        if len(a) < 9 + len(args):
            return f"the launcher got {len(a)} arguments, fewer than 9 + the call's {len(args)}"
        if _active(a[7]) or _active(a[8]):
            return "Triton passed launch hooks while none were set"
        if a[4] != getattr(kernel, "function", a[4]):
            return "the recorded kernel handle is not the compiled kernel's"
        for i, (got, want) in enumerate(zip(a[9:], args)):
            if not _same(got, want):
                return f"argument {i} reached the launcher as {type(got).__name__} {got!r:.40}, not as passed"
        return None

    def _give_up(self, why, grid, args, kwargs):
        self.off = why
        self.shapes.clear()
        self.fn[grid](*args, **kwargs())
        return None


def _kind(a) -> str:
    if type(a) is int:
        return "i"
    if type(a) is float:
        return "f"
    return "t" if isinstance(a, torch.Tensor) else "?"


def _layout(args) -> str:
    return "".join(map(_kind, args))


def key_function(layout: str):
    """``key(plan, device, args)`` for calls whose arguments have ``layout`` (a letter per position: ``t`` tensor,
    ``i`` int, ``f`` float): the plan, the device, each run of ints as one slice, each tensor's dtype and 16-byte
    alignment; floats are left out (passed as fp32, never specialised)."""
    parts, i = [], 0
    while i < len(layout):
        if layout[i] == "i":
            j = i
            while j < len(layout) and layout[j] == "i":
                j += 1
            parts.append(f"a[{i}:{j}]")
            i = j
            continue
        if layout[i] == "t":
            parts.append(f"a[{i}].dtype, a[{i}].data_ptr() & 15")
        i += 1
    source = f"def key(plan, device, a):\n    return (plan, device(), {', '.join(parts)})\n"
    scope: dict = {}
    exec(compile(source, f"<launch key for {layout}>", "exec"), scope)  # noqa: S102 - built from the layout
    return scope["key"]


def bound(fn) -> Bound:
    """The :class:`Bound` of ``fn`` (one per kernel, process-wide)."""
    b = _ALL.get(id(fn))  # by id: a kernel's own hash is Python code; the Bound keeps fn, so the id stays its own
    if b is None or b.fn is not fn:
        b = _ALL[id(fn)] = Bound(fn)
    return b


def report() -> dict[str, str]:
    """Per kernel launched so far: how it launches, and why not bound where it is not."""
    out = {}
    for b in _ALL.values():
        if b.off is not None:
            out[b.name] = f"JITFunction.run: {b.off}"
        else:
            n = sum(type(e) is _Launcher for e in b.shapes.values())
            out[b.name] = f"bound launcher: {n} shape(s), {b.bound_launches} bound launch(es)"
    return out
