"""Shared pieces of the selection benchmarks: work accounting, timers, device ceilings,
problem builders, suspect guards and CSV writing.

Nothing here imports Triton or the kernels at module level, so the CPU unit tests
(``tests/test_bench_cli.py``, ``tests/test_threshold.py``) can import it cheaply.

Accounting (per call over N rows, H query heads per row, L selected keys per row):

- effective bytes = q + selected K/V + o, each counted once:
  ``elem * N * (H*Dk + L*(Dk + Dv) + H*Dv)``;
- FLOPs = ``2*N*H*L*Dk`` (scores) + ``2*N*H*L*Dv`` (probabilities times values).

Both sides of a comparison are charged the same logical work, so GB/s and TFLOP/s are
"effective" rates: a side that moves more bytes than the minimum (a gather, padding)
simply shows a lower rate.
"""

from __future__ import annotations

import csv
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import torch

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
DISTS = ("few", "many", "mixed")
MODES = ("dense", "varlen", "decode")

# The CSV schema: the seeds' columns first (so their tooling still reads our files), then
# ours.  ``speedup`` is ref_ms / tri_ms.  ``suspect`` lists the guards that fired.
SEED_COLUMNS = ["mode", "N", "H", "D", "Dv", "L", "nspans", "streams", "tri_ms", "ref_ms", "speedup", "mae"]
EXTRA_COLUMNS = [
    "dist", "dtype", "T", "l_sel",
    "tri_gbs", "ref_gbs", "tri_tflops", "ref_tflops", "tri_pct_bw", "ref_pct_bw",
    "tri_p20_ms", "tri_p80_ms", "ref_p20_ms", "ref_p80_ms",
    "ref_mae", "tri_packed_ms", "ref_gather_ms", "tri_host_us", "ref_host_us", "mae_rows",
    "copy_gbs", "mm_tflops", "timer", "iters", "retries", "ref_kernel", "status", "suspect",
    "gpu", "cc", "triton", "torch", "cuda", "driver", "git_commit", "date",
]
COLUMNS = SEED_COLUMNS + EXTRA_COLUMNS

# Guard tolerances.  A reference that gets >15 % faster when L grows is not noise for
# kernels timed as a median over tens of L2-flushed runs; a "flat" sweep is flagged only
# where the bandwidth floor at the largest L is at least twice the smallest measured
# time, i.e. where honest work must be visible above launch latency.
DROP_TOL = 0.15
DROP_ABS_MS = 0.002  # and by more than 2 us: launch-bound kernels jitter by about that much
FLAT_MIN_RATIO = 1.2
FLAT_FLOOR_FACTOR = 2.0
# A timing is noisy when its 80 % quantile is over NOISE_RATIO times its 20 % quantile (and
# more than NOISE_ABS_MS apart): quiet rows sit near 1.05, disturbed ones at 1.5-15.
NOISE_RATIO = 1.3
NOISE_ABS_MS = 0.002

# The GPU hold before timed runs (CudaEventTimer._event_loop): HOLD_FACTOR times the host's
# estimated enqueue time, within HOLD_MS_RANGE.
HOLD_FACTOR = 2.0
HOLD_PER_RUN_MS = 0.03  # the flush and two event records the warm-up runs do not have
HOLD_MS_RANGE = (0.5, 50.0)


# ----------------------------------------------------------------------------- accounting
def sel_bytes(N: int, H: int, Dk: int, Dv: int, L: int, elem: int) -> int:
    """Minimum bytes one selection-attention call moves: q + selected K/V + o, once each."""
    return elem * N * (H * Dk + L * (Dk + Dv) + H * Dv)


def sel_flops(N: int, H: int, Dk: int, Dv: int, L: int) -> int:
    """Matmul FLOPs of one call: QK^T (2·H·L·Dk per row) plus PV (2·H·L·Dv per row)."""
    return 2 * N * H * L * (Dk + Dv)


def rates(ms: float, nbytes: int, flops: int, copy_gbs: float) -> tuple[float, float, float]:
    """(GB/s, TFLOP/s, % of measured copy bandwidth) for a time in ms; NaN if ms is not positive."""
    if not (ms > 0) or math.isnan(ms):
        return float("nan"), float("nan"), float("nan")
    gbs = nbytes / ms / 1e6
    tflops = flops / ms / 1e9
    pct = 100.0 * gbs / copy_gbs if copy_gbs and copy_gbs > 0 else float("nan")
    return gbs, tflops, pct


# ----------------------------------------------------------------------------- parsing
def int_list(text: str, name: str) -> list[int]:
    """'64,128' -> [64, 128]; raises ValueError naming the option on anything else."""
    try:
        vals = [int(x) for x in str(text).split(",") if x.strip() != ""]
    except ValueError:
        raise ValueError(f"{name} must be a comma-separated list of positive integers, got {text!r}") from None
    if not vals or any(v <= 0 for v in vals):
        raise ValueError(f"{name} must be a comma-separated list of positive integers, got {text!r}")
    return vals


def dims_list(text: str) -> list[tuple[int, int]]:
    """'64:64,128:64' -> [(64, 64), (128, 64)] (Dk:Dv pairs)."""
    out = []
    for item in str(text).split(","):
        parts = item.strip().split(":")
        try:
            dk, dv = int(parts[0]), int(parts[1])
            if len(parts) != 2 or dk <= 0 or dv <= 0:
                raise ValueError
        except (ValueError, IndexError):
            raise ValueError(f"--dims takes Dk:Dv pairs like 64:64,128:64; got {item!r} in {text!r}") from None
        out.append((dk, dv))
    return out


# ----------------------------------------------------------------------------- timers
@dataclass
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float


def _quantiles(times: list[float]) -> Timing:
    times = sorted(times)
    n = len(times)

    def q(p):
        return times[min(n - 1, max(0, int(round(p * (n - 1)))))]

    return Timing(statistics.median(times), q(0.2), q(0.8))


class CudaEventTimer:
    """CUDA-event timing with the L2 flushed before every timed run.

    Same method as ``triton.testing.do_bench`` (which it can delegate to), but driven by
    iteration counts so a sweep's cost is predictable: one untimed call (compile),
    ``warmup`` untimed calls, then ``iters`` runs, each preceded by zeroing a buffer
    twice the size of the L2 (so every run reads its inputs from HBM) and bracketed by
    events on the current stream.  Returns the median and the 20/80 % quantiles.
    """

    name = "cuda-events"

    def __init__(self, iters: int = 50, warmup: int = 5, use_do_bench: bool = False, rep_ms: int = 30):
        self.iters, self.warmup = iters, warmup
        self.use_do_bench, self.rep_ms = use_do_bench, rep_ms
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        l2 = int(getattr(props, "L2_cache_size", 0) or (50 << 20))
        self.flush_buf = torch.empty(max(256 << 20, 2 * l2), dtype=torch.int8, device="cuda")
        if use_do_bench:
            self.name = "do_bench"

    def __call__(self, fn: Callable[[], object], graph: bool = True) -> Timing:
        """Time ``fn``; ``graph=False`` says it synchronises with the host (no GPU hold then)."""
        if self.use_do_bench:
            import triton.testing

            med, p20, p80 = triton.testing.do_bench(fn, warmup=5, rep=self.rep_ms, quantiles=[0.5, 0.2, 0.8])
            return Timing(med, p20, p80)
        fn()
        torch.cuda.synchronize()
        return self._event_loop(fn, hold=graph)

    # Set by the last _event_loop: how long the GPU was held, and whether the host still
    # was enqueueing when the hold ended (then host stalls may show up as GPU time).
    last_hold_ms, last_host_behind = 0.0, False
    _cycles_per_ms: float | None = None

    def _event_loop(self, run: Callable[[], object], hold: bool = True) -> Timing:
        """``warmup`` untimed calls of ``run``, then ``iters`` timed ones, each after an L2 flush
        and between two events; the host never waits inside the loop.

        Before the timed runs the GPU is held in a spin kernel long enough for the host to
        enqueue all of them.  Without the hold, a host stall (another process, the GC) in
        the middle of the loop lets the GPU run dry, and the idle gap lands between a start
        and an end event: the first H100 sweep had rows whose 80 % quantile was 15x their
        20 % quantile for that reason.  ``hold=False`` for a ``run`` that synchronises with
        the host (it would only wait for the hold to end; its gaps are part of its cost).
        """
        t0 = time.perf_counter()
        for _ in range(self.warmup):
            run()
        per_run_ms = (time.perf_counter() - t0) * 1e3 / max(1, self.warmup)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.iters)]
        torch.cuda.synchronize()
        hold_ms = self._hold_gpu(HOLD_FACTOR * self.iters * (per_run_ms + HOLD_PER_RUN_MS)) if hold else 0.0
        t0 = time.perf_counter()
        for i in range(self.iters):
            self.flush_buf.zero_()
            starts[i].record()
            run()
            ends[i].record()
        self.last_hold_ms = hold_ms
        self.last_host_behind = hold and (time.perf_counter() - t0) * 1e3 > hold_ms
        torch.cuda.synchronize()
        return _quantiles([s.elapsed_time(e) for s, e in zip(starts, ends)])

    def _hold_gpu(self, want_ms: float) -> float:
        """Enqueue a spin kernel of about ``want_ms`` (clamped to HOLD_MS_RANGE); returns the
        milliseconds held, 0 where torch has no ``cuda._sleep`` (then nothing is held)."""
        sleep = getattr(torch.cuda, "_sleep", None)
        if sleep is None:
            return 0.0
        if self._cycles_per_ms is None:
            type(self)._cycles_per_ms = _calibrate_sleep(sleep)
        ms = min(max(want_ms, HOLD_MS_RANGE[0]), HOLD_MS_RANGE[1])
        sleep(int(ms * self._cycles_per_ms))
        return ms


def _calibrate_sleep(sleep: Callable[[int], None], cycles: int = 2_000_000) -> float:
    """GPU clock cycles per millisecond of ``torch.cuda._sleep`` (it spins on the SM clock)."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    sleep(cycles // 10)  # first launch outside the measurement
    a.record()
    sleep(cycles)
    b.record()
    torch.cuda.synchronize()
    return cycles / max(a.elapsed_time(b), 1e-3)


def capture_graph(fn: Callable[[], object]):
    """One call of ``fn`` recorded as a CUDA graph: ``(graph, output)``.

    Two eager calls on a side stream first (compilation, allocator warm-up), as the
    ``torch.cuda.graphs`` notes require.  ``fn`` must not synchronise with the host
    (``.item()``, ``.tolist()``, ...): capture raises then.
    """
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    torch.cuda.synchronize()
    return graph, out


def cuda_kernels(fn: Callable[[], object]) -> str:
    """The GPU kernels one call of ``fn`` launches, as short names joined by ``+`` in launch
    order (template arguments, parameters and memsets dropped), from the torch profiler.

    Recorded for the reference side so a reader (and the ``ref_drop`` guard) can see when
    SDPA changed backend between two shapes.  '' where the profiler saw no kernel.
    """
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - no CUPTI: rows then lack ref_kernel and are always compared
        return ""
    names = []
    for ev in prof.events():
        if ev.device_type.name != "CUDA" or ev.name.startswith(("Memset", "Memcpy")):
            continue
        short = ev.name.removeprefix("void ").split("<")[0].split("(")[0].strip().replace(",", " ")
        if short and short not in names:
            names.append(short)
    return "+".join(names)


def host_launch_us(fn: Callable[[], object], n: int = 5) -> float:
    """Median host time (us) to enqueue one eager call, GPU idle before each (what an
    eager caller pays before the GPU starts; a graph replay does not pay it)."""
    times = []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


class GraphTimer(CudaEventTimer):
    """GPU time of one call with the host's launch cost taken out: CUDA-graph replay.

    Why: the Triton launchers spend tens of microseconds in Python per call.  With a
    kernel of a few microseconds, the host cannot stay ahead of the GPU, so the start
    event fires while the launch is still being prepared and the gap is timed as kernel
    time (it made identical configurations differ 10x in the first H100 sweep).  A graph
    replay enqueues the recorded kernels at once, so both sides are charged GPU time only.

    Per timed run: L2 flush, start event, ``graph.replay()``, end event (host never
    waits inside the loop); median and 20/80 % quantiles of ``iters`` runs after
    ``warmup`` replays.  ``fn`` that synchronise (``graph=False`` from the caller, or a
    failed capture) are timed eagerly by :class:`CudaEventTimer`; :attr:`last` says which
    method timed the latest call and :attr:`last_host_us` the eager enqueue cost.
    """

    name = "cuda-graph"

    def __init__(self, iters: int = 50, warmup: int = 5):
        super().__init__(iters=iters, warmup=warmup)
        self.last, self.last_host_us = self.name, float("nan")

    def __call__(self, fn: Callable[[], object], graph: bool = True) -> Timing:
        fn()  # compile outside everything
        torch.cuda.synchronize()
        self.last_host_us = host_launch_us(fn)
        if not graph:
            self.last = CudaEventTimer.name
            return super().__call__(fn, graph=False)
        try:
            g, _ = capture_graph(fn)
        except Exception as exc:  # noqa: BLE001 - a synchronising fn: time it eagerly, say so
            torch.cuda.synchronize()
            self.last = f"{CudaEventTimer.name} (capture failed: {type(exc).__name__})"
            return super().__call__(fn, graph=False)
        self.last = self.name
        timing = self._event_loop(g.replay)
        del g  # frees the graph's private memory pool
        return timing


class WallTimer:
    """Host clock (CPU runs only: interpreter checks, never for reported numbers)."""

    name = "wall"

    def __init__(self, iters: int = 3, warmup: int = 1):
        self.iters, self.warmup = max(1, iters), warmup

    def __call__(self, fn, graph: bool = True):  # noqa: ARG002 - same call as the GPU timers
        for _ in range(1 + self.warmup):
            fn()
        times = []
        for _ in range(self.iters):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return _quantiles(times)


class ModelTimer:
    """A fake clock for ``--dry-run``: runs ``fn`` once (so the code path is exercised)
    and returns a time from a roofline model of the work declared with :meth:`expect`.

    Deterministic and monotone in L, so the sweep, the guards and the threshold logic can
    be tested end to end on a CPU.  The "triton" side is modelled 1.5x more efficient at
    large L and slower at small L, which gives a threshold inside the sweep.
    """

    name = "model"

    def __init__(self, copy_gbs: float = 3000.0):
        self.copy_gbs = copy_gbs
        self.nbytes, self.side = 0, "ref"

    def expect(self, nbytes: int, side: str) -> None:
        self.nbytes, self.side = nbytes, side

    def __call__(self, fn, graph: bool = True):  # noqa: ARG002 - same call as the GPU timers
        fn()
        eff = 0.9 if self.side == "tri" else 0.6
        fixed = 0.012 if self.side == "tri" else 0.008
        ms = fixed + self.nbytes / (eff * self.copy_gbs * 1e6)
        return Timing(ms, ms * 0.98, ms * 1.02)


def on_streams(fn: Callable[[], object], k: int) -> Callable[[], None]:
    """Launch ``fn`` on ``k`` side streams at once (the seeds' concurrency stress).

    The caller divides the measured time by ``k``.  Each stream waits for the current
    stream first (so the L2 flush is done) and the current stream waits for all of them
    (so the end event covers every launch).
    """
    if k <= 1 or not torch.cuda.is_available():
        return fn
    streams = [torch.cuda.Stream() for _ in range(k)]

    def run():
        cur = torch.cuda.current_stream()
        for s in streams:
            s.wait_stream(cur)
            with torch.cuda.stream(s):
                fn()
        for s in streams:
            cur.wait_stream(s)

    return run


# ----------------------------------------------------------------------------- ceilings
def measure_ceilings(dry_run: bool = False, copy_bytes: int = 1 << 30, mm_n: int = 8192) -> dict:
    """Copy bandwidth (GB/s, read + write counted) and bf16 matmul TFLOP/s of device 0.

    Measured once per run with do_bench-style median timing; dry runs return nominal
    H100 figures so the rest of the pipeline can be exercised.
    """
    if dry_run or not torch.cuda.is_available():
        return {"copy_gbs": 3000.0, "mm_tflops": 700.0, "ceilings": "nominal (dry run)"}
    timer = CudaEventTimer(iters=20, warmup=3)
    src = torch.empty(copy_bytes // 2, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    t_copy = timer(lambda: dst.copy_(src)).median_ms
    copy_gbs = 2 * copy_bytes / t_copy / 1e6
    del src, dst
    a = torch.randn(mm_n, mm_n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(mm_n, mm_n, device="cuda", dtype=torch.bfloat16)
    t_mm = timer(lambda: a @ b).median_ms
    mm_tflops = 2 * mm_n**3 / t_mm / 1e9
    del a, b, timer
    torch.cuda.empty_cache()
    return {"copy_gbs": copy_gbs, "mm_tflops": mm_tflops, "ceilings": "measured"}


# ----------------------------------------------------------------------------- environment
def env_columns() -> dict:
    """The environment columns of every CSV row, from ``nsa_triton_sel.compat.env.fingerprint``.

    Imported lazily: the fingerprint module may be newer than this file, and a missing
    field must not stop a benchmark.
    """
    try:
        from nsa_triton_sel.compat.env import fingerprint

        fp = fingerprint()
    except Exception as exc:  # noqa: BLE001 - the benchmark still runs, the CSV says why
        fp = {"error": repr(exc)}
    gpu = fp.get("gpu_name")
    if gpu is None and torch.cuda.is_available():
        gpu = torch.cuda.get_device_name(0)
    return {
        "gpu": gpu or "cpu",
        "cc": fp.get("compute_capability") or "",
        "triton": fp.get("triton") or _version("triton"),
        "torch": fp.get("torch") or torch.__version__,
        "cuda": fp.get("cuda_runtime") or (torch.version.cuda or ""),
        "driver": fp.get("cuda_driver") or "",
        "git_commit": fp.get("git_commit") or "",
        "date": fp.get("date") or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _version(dist: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return ""


# ----------------------------------------------------------------------------- problems
def _spans_from_lengths(lens: torch.Tensor, T: int, gen: torch.Generator) -> torch.Tensor:
    """Place spans of lengths ``lens [N, n]`` (0 = padding) disjointly, in order, at random
    offsets of a ``T``-long key sequence; returns int32 ``[N, n, 2]``.

    The free keys (T - L) are split into n + 1 random gaps by sorted uniform cuts, so
    spans are scattered over the whole sequence rather than packed at its start.
    """
    N, n = lens.shape
    L = lens.sum(-1, keepdim=True)
    free = (T - L).clamp_min(0)
    cuts = (torch.rand(N, n, generator=gen) * (free + 1)).floor().clamp(max=free).to(torch.int64)
    cuts = cuts.sort(dim=-1).values  # gap before span j = cuts[j] - cuts[j-1]
    before = torch.cumsum(lens, -1) - lens  # keys of earlier spans
    start = cuts + before
    end = start + lens
    start = torch.where(lens > 0, start, end)  # padding: an empty span
    return torch.stack([start, end], -1).to(torch.int32)


def span_lengths(dist: str, N: int, L: int, gen: torch.Generator, n_max: int = 8) -> torch.Tensor:
    """Span lengths ``[N, slots]`` summing to L per row.

    few: one span of L.  many: 8 equal spans (the first L % 8 get one key more).
    mixed: 2, 4 or 8 spans (random per row) of random positive lengths; unused slots
    of the 8 are padding (length 0).
    """
    if dist == "few":
        return torch.full((N, 1), L, dtype=torch.int64)
    if dist == "many":
        base = torch.full((N, n_max), L // n_max, dtype=torch.int64)
        base[:, : L % n_max] += 1
        return base
    if dist == "mixed":
        choices = torch.tensor([2, 4, 8])
        n_row = choices[torch.randint(0, 3, (N,), generator=gen)].clamp(max=max(1, L))
        lens = torch.zeros(N, n_max, dtype=torch.int64)
        for n in n_row.unique().tolist():
            rows = (n_row == n).nonzero().flatten()
            # n - 1 distinct cut points in 1..L-1 give n positive parts.
            cut = torch.rand(len(rows), L - 1, generator=gen).argsort(-1)[:, : n - 1] + 1
            edges = torch.cat([torch.zeros(len(rows), 1, dtype=torch.int64), cut.sort(-1).values,
                               torch.full((len(rows), 1), L, dtype=torch.int64)], -1)
            lens[rows, :n] = edges.diff(dim=-1)
        return lens
    raise ValueError(f"dist must be one of {DISTS}, got {dist!r}")


def decode_lengths(N: int, L: int, l_sel: int, T: int, gen: torch.Generator) -> torch.Tensor:
    """Decode ranges ``[N, nb, 2]``: ``nb = L / l_sel`` distinct random blocks of ``l_sel`` keys
    among the ``T / l_sel`` blocks of the cache, sorted (adjacent blocks stay separate spans,
    as an unmerged top-n selection would give them)."""
    if L % l_sel:
        raise ValueError(f"decode needs L to be a multiple of l_sel={l_sel}, got L={L}")
    nb, n_blocks = L // l_sel, T // l_sel
    if nb > n_blocks:
        raise ValueError(f"decode: L={L} needs {nb} blocks but T={T} has only {n_blocks}")
    blocks = torch.rand(N, n_blocks, generator=gen).argsort(-1)[:, :nb].sort(-1).values
    start = blocks * l_sel
    return torch.stack([start, start + l_sel], -1).to(torch.int32)


def gather_index(spans: torch.Tensor, L: int) -> torch.Tensor:
    """Key index ``[N, L]`` of every selected key, in span order, for spans ``[N, n, 2]``
    whose lengths sum to exactly L per row."""
    lens = (spans[..., 1] - spans[..., 0]).to(torch.int64)
    cum = lens.cumsum(-1)
    slot = torch.arange(L).expand(spans.shape[0], L)
    j = torch.searchsorted(cum, slot.contiguous(), right=True)
    first = (cum - lens).gather(-1, j)
    return spans[..., 0].to(torch.int64).gather(-1, j) + slot - first


# ----------------------------------------------------------------------------- guards
def group_key(row: dict) -> tuple:
    """Rows that differ only in L form one sweep."""
    return tuple(str(row.get(c, "")) for c in ("mode", "dist", "N", "H", "D", "Dv", "streams", "dtype", "l_sel", "gpu"))


def _f(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def flag_suspects(rows: list[dict]) -> list[dict]:
    """Fill each row's ``suspect`` column (';'-joined flags, '' when clean); returns rows.

    Per row: ``nan`` (a NaN time, MAE or output), ``tri_bw>copy`` / ``ref_bw>copy``
    (effective bandwidth above the measured copy bandwidth: the side cannot have done
    the work), ``tri_noisy`` / ``ref_noisy`` (the side's timings spread too much for its
    median to mean anything: see :func:`noisy_sides`).  Per sweep (same config, growing
    L): ``ref_drop`` (the reference got more than DROP_TOL and DROP_ABS_MS faster than at
    the previous L while running the same kernels), ``ref_flat`` (the reference at the
    largest L is under FLAT_MIN_RATIO times its smallest-L time although the bandwidth
    floor at the largest L is at least FLAT_FLOOR_FACTOR times that time).

    Why ``ref_drop`` needs the same kernels: SDPA picks its backend per shape (on the H100,
    cuDNN does not take a key length of 1, so L = 1 runs the flash or memory-efficient
    kernel and L >= 2 cuDNN).  A drop across such a switch shows that SDPA's kernels
    differ in fixed cost, not that the reference skipped work; :func:`kernel_switches`
    lists those drops for the reports instead.  Rows without ``ref_kernel`` (CPU runs,
    older CSVs) are always compared.
    """
    flags: dict[int, list[str]] = {id(r): [] for r in rows}
    for r in rows:
        f = flags[id(r)]
        if r.get("status", "ok") not in ("ok", ""):
            continue
        if any(math.isnan(_f(r.get(c))) for c in ("tri_ms", "ref_ms", "mae")):
            f.append("nan")
        copy = _f(r.get("copy_gbs"))
        for side in ("tri", "ref"):
            if _f(r.get(f"{side}_gbs")) > copy:
                f.append(f"{side}_bw>copy")
        f.extend(f"{side}_noisy" for side in noisy_sides(r))
    for sweep in _sweeps(r for r in rows if not math.isnan(_f(r.get("ref_ms")))):
        for prev, cur in zip(sweep, sweep[1:]):
            if _dropped(prev, cur) and not _switched(prev, cur):
                flags[id(cur)].append("ref_drop")
        _flat_check(sweep, flags)
    for r in rows:
        r["suspect"] = ";".join(flags[id(r)])
    return rows


def noisy_sides(r: dict) -> list[str]:
    """The sides (``tri``, ``ref``) whose 80 % quantile is over NOISE_RATIO times their 20 %
    quantile and more than NOISE_ABS_MS above it: a disturbance (host stall, clock change)
    hit a good share of the runs, and the median may be one of them."""
    out = []
    for side in ("tri", "ref"):
        p20, p80 = _f(r.get(f"{side}_p20_ms")), _f(r.get(f"{side}_p80_ms"))
        if p80 > NOISE_RATIO * p20 and p80 - p20 > NOISE_ABS_MS:
            out.append(side)
    return out


def _dropped(prev: dict, cur: dict) -> bool:
    t_prev, t_cur = _f(prev["ref_ms"]), _f(cur["ref_ms"])
    return t_cur < t_prev * (1 - DROP_TOL) and t_prev - t_cur > DROP_ABS_MS


def _switched(prev: dict, cur: dict) -> bool:
    a, b = prev.get("ref_kernel") or "", cur.get("ref_kernel") or ""
    return bool(a and b and a != b)


def kernel_switches(rows: list[dict]) -> list[tuple[dict, dict, bool]]:
    """Per sweep, each step to the next L where the reference's kernels changed:
    ``(previous row, row, the time dropped more than the ref_drop tolerance)``."""
    out = []
    for sweep in _sweeps(r for r in rows if r.get("ref_kernel")):
        out += [(p, c, _dropped(p, c)) for p, c in zip(sweep, sweep[1:]) if _switched(p, c)]
    return out


def _sweeps(rows: Iterable[dict]) -> list[list[dict]]:
    """The ok rows grouped into sweeps (:func:`group_key`), each sorted by L."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("status", "ok") in ("ok", ""):
            groups.setdefault(group_key(r), []).append(r)
    return [sorted(g, key=lambda r: int(r["L"])) for g in groups.values()]


def _flat_check(sweep: list[dict], flags: dict) -> None:
    if len(sweep) < 3:
        return
    lo, hi = sweep[0], sweep[-1]
    if int(hi["L"]) < 8 * int(lo["L"]):
        return
    elem = 2
    nbytes = sel_bytes(int(hi["N"]), int(hi["H"]), int(hi["D"]), int(hi["Dv"]), int(hi["L"]), elem)
    floor_ms = nbytes / (_f(hi["copy_gbs"]) * 1e6)
    t_lo, t_hi = _f(lo["ref_ms"]), _f(hi["ref_ms"])
    if floor_ms >= FLAT_FLOOR_FACTOR * t_lo and t_hi < FLAT_MIN_RATIO * t_lo:
        for r in sweep:
            flags[id(r)].append("ref_flat")


# ----------------------------------------------------------------------------- csv
def fmt(v) -> str:
    """CSV cell text: floats with 6 significant digits, everything else as str."""
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.6g}"
    return "" if v is None else str(v)


def write_csv(path: str | os.PathLike, rows: Iterable[dict], append: bool = True) -> None:
    """Write rows with the full COLUMNS header; append keeps existing rows (header once).

    Appending to a file whose header differs from COLUMNS is refused, because the
    threshold script reads columns by name and a mixed file would be misread.
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    exists = p.exists() and p.stat().st_size > 0
    if exists and append:
        with p.open(newline="") as fh:
            header = next(csv.reader(fh), [])
        if header != COLUMNS:
            raise ValueError(f"{p} has a different header ({len(header)} columns); "
                             f"write to a new file or delete it (expected: {','.join(COLUMNS[:6])},...)")
    mode = "a" if (exists and append) else "w"
    with p.open(mode, newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS, extrasaction="ignore")
        if mode == "w":
            w.writeheader()
        for r in rows:
            w.writerow({c: fmt(r.get(c)) for c in COLUMNS})


def read_csv(paths: Iterable[str | os.PathLike]) -> list[dict]:
    """Rows of one or more CSVs (missing files are an error: say which)."""
    rows = []
    for path in paths:
        p = Path(path)
        if not p.exists():
            raise FileNotFoundError(f"CSV not found: {p}")
        with p.open(newline="") as fh:
            rows.extend(csv.DictReader(fh))
    return rows


def progress(msg: str) -> None:
    """One progress line on stderr, flushed (long sweeps run unattended)."""
    print(msg, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- NSA shapes
def nsa_problem(T: int, **kw) -> dict:
    """Inputs of the canonical NSA selection call: ``nsa_triton_sel.testing.nsa_problem`` (the one builder)."""
    from nsa_triton_sel.testing import nsa_problem as build

    return build(T, **kw)


def nsa_work(p: dict) -> tuple[int, int]:
    """(effective bytes, FLOPs) of an NSA problem: q, o once; selected K/V once per (token, group)."""
    elem = p["q"].element_size()
    qo = p["B"] * p["S"] * p["G"] * p["h"] * 2 * p["D"] * elem
    kv = p["keys"] * 2 * p["D"] * elem
    return qo + kv, 4 * p["keys"] * p["h"] * p["D"]


def fla_contender(p: dict):
    """A zero-argument callable running fla-core's ``parallel_nsa_fwd`` on ``p``, or raise
    ImportError/TypeError with the reason (signatures differ across fla releases)."""
    import inspect

    from fla.ops.nsa.parallel import parallel_nsa_fwd  # noqa: PLC0415

    B, S, G, h, D, T = p["B"], p["S"], p["G"], p["h"], p["D"], p["T"]
    if S != T:
        raise TypeError("fla parallel_nsa_fwd benchmarks prefill only (S == T)")
    q = p["q"].reshape(B, T, G * h, D).contiguous()
    k = p["k"].transpose(1, 2).contiguous()  # [B, T, G, D]
    v = p["v"].transpose(1, 2).contiguous()
    blocks = p["blocks"]  # [B, S, G, n]
    # fla marks "no block" with an index past the causal limit; its kernel masks those.
    bi = torch.where(blocks < 0, torch.full_like(blocks, T), blocks).to(torch.long).contiguous()
    kw = {"q": q, "k": k, "v": v, "block_indices": bi, "block_counts": p["topn"],
          "block_size": p["bs"], "scale": D ** -0.5, "window_size": 0}
    params = inspect.signature(parallel_nsa_fwd).parameters
    missing = [n for n, prm in params.items() if prm.default is inspect.Parameter.empty and n not in kw]
    if missing:
        raise TypeError(f"unsupported fla parallel_nsa_fwd signature: needs {missing}")
    kw = {n: v for n, v in kw.items() if n in params}
    return lambda: parallel_nsa_fwd(**kw)


def flex_contender(p: dict):
    """FlexAttention on the same selection: the h heads of a group become h query rows per
    token (query index s*h + j), so the block mask is per (b, group); mask = selected
    block and causal.  Returns a zero-argument callable (compiles on first call)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    B, S, G, h, D, T, bs = p["B"], p["S"], p["G"], p["h"], p["D"], p["T"], p["bs"]
    nb = -(-T // bs)
    sel = torch.zeros(B, G, S, nb + 1, dtype=torch.bool, device=p["q"].device)
    blocks = p["blocks"].permute(0, 2, 1, 3)  # [B, G, S, n]
    sel.scatter_(-1, torch.where(blocks < 0, nb, blocks), True)
    sel = sel[..., :nb].contiguous()
    pos = p["positions"]

    def mask_mod(b, g, qi, kv):
        s = qi // h
        return sel[b, g, s, kv // bs] & (kv <= pos[s])

    # _compile=True fuses the mask evaluation: the eager path would materialise
    # [B, G, S*h, T] booleans plus int64 index temporaries (tens of GB at T=4096).
    bm = create_block_mask(mask_mod, B, G, S * h, T, device=p["q"].device, _compile=p["q"].is_cuda)
    q = p["q"].permute(0, 2, 1, 3, 4).reshape(B, G, S * h, D)
    fn = torch.compile(flex_attention, dynamic=False)
    return lambda: fn(q, p["k"], p["v"], block_mask=bm, scale=D ** -0.5)
