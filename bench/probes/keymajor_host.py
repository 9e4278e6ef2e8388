"""Is the key-major path bound by the host at short sequences?  Host time per call against GPU time, both paths.

    python -m bench.probes.keymajor_host [--T 2048,4096,8192,16384] [--h 1,4,8] [--HQ 32] [--calls 8]
                                         [--profile 4096:8] [--top 30]

Per cell (the path grid's problem: bf16, D = 128, blocks of 64, top-16 random causal selections, ``G = HQ / h``;
``selection_attention`` on block indices, inputs that require grad) and per path (``plan.keymajor.forced``), for a
forward and for a forward + backward:

- ``bench``: ``triton.testing.do_bench`` (median, L2 flushed), as the path grid times it: an eager call's cost,
  host gaps included;
- ``gpu``: the same runs with the GPU held in a spin kernel while the host enqueues them (``timers.CudaEventTimer``):
  the GPU's time alone;
- ``host``: the host's microseconds per call while the GPU is held (nothing waits for the GPU; a call that
  synchronises would show the hold);
- ``launches``: the GPU kernels (and memsets / copies) of one call, from the torch profiler.

Where ``host`` comes near ``gpu``, an eager call is bound by its host work.  ``--profile T:h`` then runs the
key-major forward + backward of that cell under ``cProfile`` (the top functions by their own time), and
``--steps T:h`` times each step of the way down of that cell's training call on its own (host microseconds, the
GPU held): the ranges, the reader lists and their parts, each launch, the whole forward and backward; ``--ops T:h``
lists the torch operators of that cell's training call on either path by their own host time (``torch.profiler``).
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import io
import pstats

import torch

from bench.common import timers
from bench.probes import host_steps
from bench.train import train_contenders as TC
from bench.train import train_nsa


def log(*a):
    print(*a, flush=True)


def host_us(fn, calls: int, hold_ms: float = 45.0) -> float:
    """Host microseconds per call, best of 5 rounds of ``calls``, the GPU held through each round."""
    cycles = timers._calibrate_sleep(torch.cuda._sleep)
    return host_steps.best_us(fn, calls, 5, lambda: torch.cuda._sleep(int(hold_ms * cycles)))


def launches(fn) -> int:
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for ev in prof.events() if ev.device_type.name == "CUDA")


def measure(p: TC.Problem, path: str, bench, held, calls: int) -> dict:
    KM = importlib.import_module("nsa_triton_sel.plan.keymajor")
    with KM.forced(path):
        c = TC.ours_api(p)

        def fwd():
            with torch.no_grad():
                return c.forward()

        def train():
            torch.autograd.backward(c.forward(), c.grad_out)

        def train_clean():
            train()
            for x in c.leaves:
                x.grad = None

        train_clean()
        out = {}
        for name, fn in (("fwd", fwd), ("train", train_clean)):
            fn()
            out[f"{name}_bench"] = bench(fn) if name == "fwd" else bench(train, grad_to_none=c.leaves)
            out[f"{name}_gpu"] = held(fn).median_ms
            out[f"{name}_host"] = host_us(fn, calls) / 1e3
            out[f"{name}_launches"] = launches(fn)
        return out


def profile_cell(p: TC.Problem, top: int) -> None:
    KM = importlib.import_module("nsa_triton_sel.plan.keymajor")
    with KM.forced("key"):
        c = TC.ours_api(p)
        for label, fn in (("forward", lambda: c.forward()),
                          ("forward + backward", lambda: torch.autograd.backward(c.forward(), c.grad_out))):
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            torch.cuda._sleep(int(200 * timers._calibrate_sleep(torch.cuda._sleep)))
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(5):
                fn()
            prof.disable()
            torch.cuda.synchronize()
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(top)
            log(f"### cProfile, key-major {label}, 5 calls (T = {p.T}, h = {p.q.shape[3]}, G = {p.q.shape[2]})")
            log(s.getvalue())


def steps(p: TC.Problem, calls: int) -> None:
    """Host microseconds of each step of a training call's way down, the GPU held (see the module's doc)."""
    KM = importlib.import_module("nsa_triton_sel.plan.keymajor")
    from nsa_triton_sel import plan, selection_attention
    from nsa_triton_sel.contract import block_indices_to_ranges
    from nsa_triton_sel.kernels import launch, readers as R

    T, bs = p.T, 64
    q, k, v, blocks, go = p.q, p.k, p.v, p.blocks, p.grad_out
    ranges = block_indices_to_ranges(blocks, bs, T, None, validate=False)
    scale = p.scale
    rows = [("torch.empty([1]) (one torch op)", lambda: torch.empty(1, device=q.device)),
            ("x + 1 on 16 elements (one launch)", lambda: ranges.view(-1)[:16] + 1),
            ("block_indices_to_ranges", lambda: block_indices_to_ranges(blocks, bs, T, None, validate=False))]
    for path in ("token", "key"):
        with KM.forced(path):
            pl = plan.plan_call(q, k, v, blocks, None, per_head=False, tokens=0, span_len=bs, packed=False,
                                grad=True)
            lists: list = []
            out, lse = launch.forward(pl, q, k, v, blocks, None, scale=scale, block_size=bs, readers_out=lists)
            rows.append((f"[{path}] plan.plan_call", lambda pl=pl: plan.plan_call(
                q, k, v, blocks, None, per_head=False, tokens=0, span_len=bs, packed=False, grad=True)))
            rows.append((f"[{path}] launch.forward ({pl.forward.kernel})", lambda pl=pl: launch.forward(
                pl, q, k, v, blocks, None, scale=scale, block_size=bs)))
            if path == "key":
                meta = pl.forward.meta
                rl = R.keymajor_reader_list(ranges, T, meta)
                keys = torch.randint(0, 1 << 30, (rl.entries.shape[0],), dtype=torch.int32, device=q.device)
                rows += [("[key]   keymajor_reader_list", lambda: R.keymajor_reader_list(ranges, T, meta)),
                         ("[key]     torch.sort(int32 keys, stable)", lambda: torch.sort(keys, stable=True)),
                         ("[key]     _chunk_table", lambda: R._chunk_table(rl.offsets, rl.entries.shape[0],
                                                                            rl.chunk))]
                rows.append(("[key] launch.backward (+ a reader list)", lambda pl=pl, out=out, lse=lse: launch.backward(
                    pl, q, k, v, ranges, out, lse, go, None, scale=scale,
                    readers=[launch.keymajor_reader_list(ranges, T, pl.forward.meta)])))
            else:
                bm = pl.backward
                rows.append(("[token]   reader_list", lambda pl=pl, bm=bm: R.reader_list(
                    ranges, T, bm, per_row=pl.reader_per_row, chunk=pl.reader_chunk)))
                rows.append(("[token] launch.backward", lambda pl=pl, out=out, lse=lse: launch.backward(
                    pl, q, k, v, ranges, out, lse, go, None, scale=scale)))
            leaves = [x.detach().requires_grad_() for x in (q, k, v)]

            def train(leaves=leaves):
                o = selection_attention(*leaves, block_indices=blocks, block_size=bs, validate=False)
                torch.autograd.backward(o, go)
                for x in leaves:
                    x.grad = None
            rows.append((f"[{path}] selection_attention forward + backward", train))
    log(f"### host us per call, the GPU held (T = {p.T}, h = {p.q.shape[3]}, G = {p.q.shape[2]}; best of 5 x {calls})")
    for name, fn in rows:
        with KM.forced("key" if "[key]" in name else "token"):
            try:
                fn()
                log(f"{host_us(fn, calls) :10.1f}  {name}")
            except Exception as exc:  # noqa: BLE001
                log(f"{'failed':>10}  {name}: {type(exc).__name__}: {str(exc)[:200]}")


def ops(p: TC.Problem, top: int) -> None:
    """The torch operators of one training call on each path, by their own host time (``torch.profiler``)."""
    from torch.profiler import ProfilerActivity, profile

    from nsa_triton_sel.kernels import bind

    KM = importlib.import_module("nsa_triton_sel.plan.keymajor")
    for path in ("token", "key"):
        with KM.forced(path):
            c = TC.ours_api(p)

            def train():
                torch.autograd.backward(c.forward(), c.grad_out)
                for x in c.leaves:
                    x.grad = None
            for _ in range(3):
                train()
            torch.cuda.synchronize()
            torch.cuda._sleep(int(100 * timers._calibrate_sleep(torch.cuda._sleep)))
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(5):
                    train()
            torch.cuda.synchronize()
            log(f"### torch operators of 5 training calls, {path}-major (T = {p.T}, h = {p.q.shape[3]})")
            log(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top))
            log(f"### how each kernel launched, {path}-major (kernels.bind.report(); leaving forced() clears it)")
            for name, how in sorted(bind.report().items()):
                log(f"{name}: {how}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.probes.keymajor_host", description=__doc__.splitlines()[0])
    ap.add_argument("--T", default="2048,4096,8192,16384")
    ap.add_argument("--h", default="1,4,8")
    ap.add_argument("--HQ", type=int, default=32)
    ap.add_argument("--calls", type=int, default=8, help="calls per host round (the launch queue holds ~1000)")
    ap.add_argument("--rep-ms", type=int, default=100)
    ap.add_argument("--profile", default="4096:8", help="T:h of the cell to cProfile ('' for none)")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--steps", default="", help="T:h of the cell whose steps to time ('' for none)")
    ap.add_argument("--ops", default="", help="T:h of the cell whose torch operators to list ('' for none)")
    ap.add_argument("--grid", action=argparse.BooleanOptionalAction, default=True, help="the cells' table")
    a = ap.parse_args(argv)
    from bench.common import accounting
    import nsa_triton_sel

    log(f"library: {nsa_triton_sel.__file__}")
    log(f"environment: {accounting.env_columns()}")
    bench = train_nsa.make_bench(a.rep_ms, False)
    held = timers.CudaEventTimer(iters=20, warmup=3)
    log("| T | h | G | path | fwd ms: bench / gpu / host | launches | fwd + bwd ms: bench / gpu / host | launches |")
    log("|---|---|---|---|---|---|---|---|")
    for T in map(int, a.T.split(",")) if a.grid else ():
        for h in map(int, a.h.split(",")):
            G = max(a.HQ // h, 1)
            p = TC.make_problem(T, "random", h=h, groups=G)
            for path in ("token", "key"):
                try:
                    m = measure(p, path, bench, held, a.calls)
                except Exception as exc:  # noqa: BLE001 - a cell's failure is a line
                    log(f"| {T} | {h} | {G} | {path} | {type(exc).__name__}: {str(exc)[:160]} |")
                    continue
                log(f"| {T} | {h} | {G} | {path} | {m['fwd_bench']:.3f} / {m['fwd_gpu']:.3f} / {m['fwd_host']:.3f} | "
                    f"{m['fwd_launches']} | {m['train_bench']:.3f} / {m['train_gpu']:.3f} / {m['train_host']:.3f} | "
                    f"{m['train_launches']} |")
            del p
            torch.cuda.empty_cache()
    if a.steps:
        T, h = map(int, a.steps.split(":"))
        steps(TC.make_problem(T, "random", h=h, groups=max(a.HQ // h, 1)), a.calls)
    if a.ops:
        T, h = map(int, a.ops.split(":"))
        ops(TC.make_problem(T, "random", h=h, groups=max(a.HQ // h, 1)), a.top)
    if a.profile:
        T, h = map(int, a.profile.split(":"))
        profile_cell(TC.make_problem(T, "random", h=h, groups=max(a.HQ // h, 1)), a.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
