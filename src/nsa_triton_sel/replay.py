"""A repeated decode step replays the launches its signature's call made: the way down, taken once, remembered.

A decode step calls ``selection_attention`` with the same shapes, strides, dtypes, devices and options on
every token, and each step of the way down (``arguments`` -> ``op`` -> ``plan`` -> ``kernels.launch``)
answers it the same way every time.  Walking those steps costs the host more than the launch itself, so a
call that walked them with nothing but allocations and bound launches (``kernels/bind.py``) is remembered
here, as generated Python: one allocation per output and workspace, one call of each recorded launch with the
call's tensors in their places (:class:`Replay`): straight to the compiled C launch where Triton's launcher
object only inserts constants around it (``kernels.bind.Inner``), else through that object.  The next call
with the same signature runs that instead (:func:`lookup`); every other call takes the way down.

A replay passes the launchers device pointers as integers, which Triton's launcher takes as they are: it would
otherwise ask each tensor for its pointer and the driver whether the pointer is a device one, and the
signature already says every tensor is on the recorded device.  A buffer that no result returns and one launch
alone receives (the LSE of a call that does not return it) is written and never read: it is allocated once per
stream and kept (:class:`Replay`'s ``scratch``), not once per call.  Per stream, since the caching allocator
hands a freed block on only in its stream's order.

What a replay may skip is what a signature decides.  So a call is recorded (:func:`recordable`) and replayed
only where nothing else can change the answer:

- ``validate=False`` (the value checks read values), no packed batch, the native layout (``q [B, S, G, h, Dk]``),
  no debug flag, the kernel route without the ``sel_triton_min_L`` gate (which reads the spans' lengths);
- one query position (``S == 1``): the planner reads no span value there (``plan.share`` measures sharing
  between neighbouring tokens only where there are neighbours);
- a plain eager call on the GPU: real tensors (a ``torch.func`` or functionalized tensor has no storage
  pointer), no tracing, no dispatch mode, no CUDA-graph capture, no input that autograd records, bound
  launchers on, no launch hook (a profiler's) set, the device the call was recorded on current;
- every input pointer 16-byte aligned (Triton specialises a pointer on that), as when it was recorded.

The signature is every shape, stride, dtype and device the way down looked at, and the options as given
(``scale``, ``block_size``, ``backend``, ``return_lse``).  A recording keeps only what it can account for: every
tensor a launch received is an input or an allocation of the call, every launch went through a bound launcher,
at least one launch happened, and the call returned the allocations it made; otherwise the signature is
marked with the reason and taken down the way from then on (``report`` says which).  A launch that is not
bound yet (a signature's first two calls) is retried on the next call.  ``config.refresh`` and a kernel
failure (``arguments.forget_routes``) clear every replay; an exception in a replay clears it and the call
takes the way down, which raises or recovers as it would have.
"""

from __future__ import annotations

import threading

import torch

from . import caches
from .contract import is_compiling, wants_grad
from .kernels import bind

ENABLED = True  # tests and benchmarks switch it off to compare with the way down
MAX_SIGNATURES = 1024
RETRIES = 4  # recordings of a signature whose launches were not bound yet, before it is given up
_REPLAYS: dict = caches.register("replays", {})  # signature -> Replay, or the reason it takes the way down
MAX_STREAMS = 8  # per signature, streams with a scratch buffer kept; past it they are dropped (a stream per call)
_dispatch_mode = torch.utils._python_dispatch._get_current_dispatch_mode
# The current CUDA device and stream capture, asked of torch's C functions where it has them (the public
# wrappers first check that CUDA is initialised, which a replayed signature's recording already did)
_current_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device
_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", torch.cuda.is_current_stream_capturing)
_Tensor = torch.Tensor
# The recording of this thread's call, if any: ``ACTIVE.recording`` (read by ``kernels.launch`` as an attribute,
# not through a function: the launcher's hot path stays in its own module)
ACTIVE = threading.local()


def _signature(q, k, v, spans, blocks: bool, block_size, positions, scale, backend, return_lse) -> tuple:
    pos = None if positions is None else (positions.shape, positions.stride(), positions.dtype, positions.device)
    return (q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), spans.shape, spans.stride(), q.dtype,
            k.dtype, v.dtype, spans.dtype, q.device, k.device, v.device, spans.device, blocks, block_size, pos,
            scale, backend, return_lse)


def _plain_args(q, k, v, ranges, block_indices, block_size, positions, scale, return_lse):
    """``(spans, blocks)`` where the arguments are what a replay can take (exact types: ``return_lse=1`` or
    ``block_size=True`` are mistakes the way down reports), else None."""
    if (ranges is None) == (block_indices is None):
        return None
    spans, blocks = (ranges, False) if block_indices is None else (block_indices, True)
    if type(q) is not _Tensor or type(k) is not _Tensor or type(v) is not _Tensor or type(spans) is not _Tensor:
        return None
    if not (positions is None or type(positions) is _Tensor) or type(return_lse) is not bool:
        return None
    if not (block_size is None or type(block_size) is int) or not (scale is None or type(scale) is float):
        return None
    return spans, blocks


def lookup(q, k, v, ranges, block_indices, block_size, positions, scale, backend, return_lse):
    """The call's result by replay, or None (its signature not replayed, or not a call a replay may answer).
    The caller has checked ``validate is False``, no ``cu_seqlens`` and ``not is_compiling()``."""
    if not _REPLAYS or not ENABLED or not bind.ENABLED:  # (bound launchers off: the launches take Triton's way)
        return None
    plain = _plain_args(q, k, v, ranges, block_indices, block_size, positions, scale, return_lse)
    if plain is None:
        return None
    spans, blocks = plain
    try:
        replay = _REPLAYS.get(_signature(q, k, v, spans, blocks, block_size, positions, scale, backend, return_lse))
    except (RuntimeError, TypeError):  # a tensor without strides (sparse), an unhashable option
        return None
    if type(replay) is not Replay:
        return None
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):  # wants_grad, inline
        return None
    if _dispatch_mode() is not None or (q.is_cuda and _capturing()):
        return None
    try:
        p = (q.data_ptr(), k.data_ptr(), v.data_ptr(), spans.data_ptr(), 16 if positions is None else positions.data_ptr())
    except RuntimeError:  # a torch.func transform's tensor: no storage
        return None
    if (p[0] | p[1] | p[2] | p[3] | p[4]) & 15 or 0 in p:  # misaligned, or no storage (functionalized)
        return None
    b = replay.bound
    if _current_device() != replay.device_index or b._hooked():  # another device, or a profiler's launch hook
        return None
    try:
        result = replay.fn(p, b._stream(replay.device_index), replay.device)
    except Exception:  # noqa: BLE001 - the way down raises (or recovers) with its own message
        _REPLAYS.clear()
        return None
    replay.hits += 1
    return result


def recordable(call) -> bool:
    """Whether a parsed call made with ``validate=False`` and no ``cu_seqlens`` is one a replay may answer next
    time (the module docstring's conditions that the parsed call knows; the recording checks the rest)."""
    if not ENABLED:
        return False
    r, f = call.route, call.flags
    if call.kind != "eager" or not r.kernels or (r.min_L is not None and r.min_L > 1) or call.packed:
        return False
    if call.layout.native is not None or call.layout.back is not None or call.finish is not None:
        return False
    if f.debug_shapes or f.debug_timing or f.debug_compare:
        return False
    q = call.q
    if not q.is_cuda or q.shape[1] != 1:
        return False
    return not wants_grad(q, call.k, call.v)


class Recording:
    """What one call of the way down allocated and launched, for :func:`record` (active on this thread only:
    ``kernels.launch`` appends each allocation ``(tensor, shape, dtype)`` and each launch ``(bound, launcher, grid,
    args)``, and says why it cannot be replayed)."""

    def __init__(self, inputs):
        self.inputs = inputs  # q, k, v, spans, positions as the launches receive them
        self.allocs: list = []  # (tensor, shape, dtype)
        self.launches: list = []  # (bound, launcher, grid, args)
        self.refused: str | None = None
        self.retry = False

    def refuse(self, why: str, *, retry: bool = False) -> None:
        if self.refused is None:
            self.refused, self.retry = why, retry


def record(run, call, args: tuple):
    """``run(call)``, recorded: its result, and its replay remembered under the call's signature
    (``args``: selection_attention's ``q, k, v, ranges, block_indices, block_size, positions, scale, backend,
    return_lse`` as given)."""
    q, k, v, ranges, block_indices, block_size, positions, scale, backend, return_lse = args
    plain = _plain_args(q, k, v, ranges, block_indices, block_size, positions, scale, return_lse)
    if plain is None:
        return run(call)
    spans, blocks = plain
    try:
        key = _signature(q, k, v, spans, blocks, block_size, positions, scale, backend, return_lse)
        previous = _REPLAYS.get(key)
    except (RuntimeError, TypeError):
        return run(call)
    if isinstance(previous, str) or type(previous) is Replay:  # given up (or replayed, but this call was not)
        return run(call)
    rec = Recording((call.q, call.k, call.v, call.spans, call.positions))
    ACTIVE.recording = rec
    try:
        result = run(call)
    finally:
        ACTIVE.recording = None
    tries = (previous or 0) + 1
    replay = None if rec.refused else _build(rec, result, return_lse)
    if len(_REPLAYS) >= MAX_SIGNATURES and key not in _REPLAYS:
        _REPLAYS.clear()
    if type(replay) is Replay:
        _REPLAYS[key] = replay
    elif rec.retry and tries < RETRIES:
        _REPLAYS[key] = tries
    else:
        _REPLAYS[key] = rec.refused or replay or "nothing to replay"
    return result


def _build(rec: Recording, result, return_lse: bool):
    """The :class:`Replay` of a recording, or why there is none (a string)."""
    if not rec.launches:
        return "the call launched no kernel"
    out, lse = result if return_lse else (result, None)
    index = {id(t): i for i, (t, _, _) in enumerate(rec.allocs)}
    if id(out) not in index or (lse is not None and id(lse) not in index):
        return "the call returned a tensor it did not allocate as a launcher's output"
    returned = {id(out), id(lse)}
    uses: dict = {}
    for _, _, _, args in rec.launches:
        for a in args:
            if isinstance(a, torch.Tensor):
                uses[id(a)] = uses.get(id(a), 0) + 1
    # written by one launch, read by none: kept per stream (the module docstring)
    kept = [i for i, (t, _, _) in enumerate(rec.allocs) if id(t) not in returned and uses.get(id(t)) == 1]
    names = {id(t): f"p[{i}]" for i, t in enumerate(rec.inputs) if t is not None}
    names.update({id(t): f"a{i}.data_ptr()" for i, (t, _, _) in enumerate(rec.allocs)})
    names.update({id(rec.allocs[i][0]): f"w[{j}]" for j, i in enumerate(kept)})
    scope: dict = {"empty": torch.empty, "scratch": {}, "MAX_STREAMS": MAX_STREAMS}
    lines = ["def replay(p, stream, device):"]
    fresh = [i for i in range(len(rec.allocs)) if i not in kept]
    for i in fresh:
        # the recorded torch.empty as an empty tensor's new_empty_strided (its dtype and device, the recorded
        # contiguous strides): the same tensor without parsing a dtype and a device, which made torch.empty
        # take 1.3-2.2x its host time on the H200's host (bench.probes.host_steps)
        t, shape, dtype = rec.allocs[i]
        scope[f"like{i}"] = torch.empty(0, dtype=dtype, device=t.device).new_empty_strided
        lines.append(f"    a{i} = like{i}({tuple(shape)!r}, {tuple(t.stride())!r})")
    if kept:
        scope["kept"] = tuple((shape, dtype) for _, shape, dtype in (rec.allocs[i] for i in kept))
        lines += ["    w = scratch.get(stream)",
                  "    if w is None:",
                  "        if len(scratch) >= MAX_STREAMS:",
                  "            scratch.clear()",
                  "        held = tuple(empty(shape, dtype=dtype, device=device) for shape, dtype in kept)",
                  "        w = scratch[stream] = tuple(t.data_ptr() for t in held) + (held,)"]
    for j, (_, launcher, grid, args) in enumerate(rec.launches):
        values = []
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                if id(a) not in names:
                    return f"launch {j + 1} received a tensor that is neither an input nor an output (argument {i})"
                values.append(names[id(a)])
            elif type(a) is int:
                values.append(repr(a))
            elif type(a) is float:
                scope[f"c{j}_{i}"] = a
                values.append(f"c{j}_{i}")
            else:
                return f"launch {j + 1} received a {type(a).__name__} (argument {i})"
        g = tuple(grid) + (1,) * (3 - len(grid))
        scope.update({f"function{j}": launcher.function, f"packed{j}": launcher.packed})
        head = f"{g[0]}, {g[1]}, {g[2]}, stream, function{j}"
        hooks = f"packed{j}, None, None, None"  # no launch metadata or hooks: a hooked launch is not replayed
        inner = launcher.inner
        if inner is None:  # through Triton's launcher object
            scope.update({f"run{j}": launcher.run, f"tail{j}": launcher.tail})
            lines.append(f"    run{j}({head}, {hooks}, {', '.join(values)}, *tail{j})")
            continue
        # straight to the compiled launch, with the launcher object's constant insertions (kernels.bind.Inner)
        nb, na = len(inner.before), len(inner.after)
        before = [f"k{j}_{i}, " for i in range(nb)]
        after = [f"k{j}_{nb + i}, " for i in range(na)]
        tail = [f"k{j}_{nb + na + i}" for i in range(len(launcher.tail))]
        scope.update(zip([c.rstrip(", ") for c in before + after] + tail, inner.before + inner.after + launcher.tail))
        scope[f"launch{j}"] = inner.launch
        kernel_args = ", ".join(values + tail)
        if inner.grouped:
            lines.append(f"    launch{j}({head}, {''.join(before)}{hooks}, {''.join(after)}({kernel_args},))")
        else:
            lines.append(f"    launch{j}({head}, {''.join(before)}{hooks}, {kernel_args})")
    lines.append(f"    return (a{index[id(out)]}, a{index[id(lse)]})" if return_lse else f"    return a{index[id(out)]}")
    exec(compile("\n".join(lines), "<replay of a selection_attention signature>", "exec"), scope)  # noqa: S102
    bound = rec.launches[0][0]
    direct = all(launcher.inner is not None for _, launcher, _, _ in rec.launches)
    return Replay(scope["replay"], bound, out.device, bound._device(), "\n".join(lines), scope["scratch"], direct)


class Replay:
    """A signature's allocations and launches as one generated function ``fn(p, stream, device)`` (``source``;
    ``p``: the input pointers q, k, v, spans, positions), run by :func:`lookup` on the current stream of the
    recorded device; ``scratch``: per stream, the buffers written and never read (pointers, then the tensors that
    hold them)."""

    __slots__ = ("fn", "bound", "device", "device_index", "source", "scratch", "direct", "hits")

    def __init__(self, fn, bound, device, device_index, source, scratch, direct):
        self.fn, self.bound, self.device, self.device_index, self.source = fn, bound, device, device_index, source
        self.scratch, self.direct = scratch, direct  # direct: every launch straight to the compiled launch
        self.hits = 0


def forget() -> None:
    """Forget every replay (a kernel failure changes the route of its configuration)."""
    _REPLAYS.clear()


def _name(key: tuple) -> str:
    """A signature in words: the shapes of q, k, v and the spans, q's dtype, the spans' kind, and the LSE if
    returned (the strides, devices and other options are left out)."""
    shapes = " ".join(str(list(s)) for s in key[0:8:2])
    return f"{shapes} {str(key[8]).replace('torch.', '')} {'blocks' if key[16] else 'ranges'}" + \
        (" +lse" if key[21] else "")


def report() -> dict[str, str]:
    """Per remembered signature (:func:`_name`; ``#2``, ``#3``... where two differ only in what it leaves out):
    replayed (and how often), or why not."""
    out = {}
    for key, r in _REPLAYS.items():
        name = base = _name(key)
        n = 1
        while name in out:
            n += 1
            name = f"{base} #{n}"
        if type(r) is Replay:
            out[name] = f"replayed {r.hits} time(s)" + (", straight to the compiled launch" if r.direct else "")
        elif isinstance(r, str):
            out[name] = f"the way down: {r}"
        else:
            out[name] = f"recording: {r} call(s) with a launch not bound yet"
    return out
