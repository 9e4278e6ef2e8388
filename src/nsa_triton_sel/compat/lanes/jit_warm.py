"""Fill a GPU lane's Triton cache before its tests: the launches they make, compiled over all cores at once.

``python -m nsa_triton_sel.compat.lanes.jit_warm --specs FILE.py:SPECS [--jobs N]``

The GPU tests JIT-compile their kernels in the processes that run them: pytest-xdist workers compile the same
kernel twice where two of them meet it first, and the benchmarks, one process, compile theirs one after another
(a cold bench stage spent about a third of its time compiling).  This warms the cache they read instead: every
launch a spec module lists (``nsa-sel capture`` of the lane's own tests on a GPU; :data:`LAUNCHES`) goes to
``JITFunction.warmup`` in one of ``--jobs`` processes, which compiles it exactly as the launch will (Triton's own
specialisation and cache key: small tensors of each pointer's dtype and alignment, integers of each one's
divisibility) and launches nothing.  The AOT compile smoke cannot do this: it compiles into a private cache per
compile, with signatures that do not carry Triton's specialisation of integers equal to 1 (every stride-1
dimension).

Best effort by design: a launch that does not warm (another Triton's planner chose other constexprs, a compiler
abort in a child) is compiled by its test as before.  A GPU lane's parity stage runs it beside its tests
(``--nice``: they keep the cores they need) for the Triton release and GPU arch the module was captured on
(:func:`applies`), unless ``NSA_SEL_JIT_WARM=0``; one summary line, exit 0 unless the arguments are wrong.
Beside the cache it fills it lists what Triton keyed each warmed launch on (:data:`KEYS`), and the lane names
each compile of its tests that the list does not cover, with the arguments it was keyed on otherwise
(:func:`misses`): where a capture is out of date, or a launch specialises differently from run to run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from ..core import machine
from ..registry import capture

# The launches of the GPU parity stage and the benchmarks, captured on an H100 (sm_90) with Triton 3.6.0.
LAUNCHES = "tests/gpu_launches.py:SPECS"
ENV = "NSA_SEL_JIT_WARM"  # "0": a GPU lane's parity stage runs no warm-up beside its tests (checks.start_jit_warm)
NICE = 10  # the children's niceness beside the tests: they take the cores the tests leave idle
KEYS = "nsa-sel-jit-warm-keys.jsonl"  # in the Triton cache it fills: what Triton keyed each warmed launch on
MODULE = "nsa_triton_sel.compat.lanes.jit_warm"  # the children's ``-m`` (``__name__`` is "__main__" under -m)
CAPTURED = ("3.6.0", 90)

TORCH_DTYPE = {triton: torch for torch, triton in capture.ELEMENT.items()}  # capture's table, read backwards


def applies(triton_version: str, arch: int | None) -> str | None:
    """None where the captured launches are this lane's; else why the warm is left out."""
    if (triton_version, arch) == CAPTURED:
        return None
    return (f"the warm list was captured with Triton {CAPTURED[0]} on sm_{CAPTURED[1]}; this lane runs "
            f"Triton {triton_version} on {f'sm_{arch}' if arch else 'no GPU'}: its tests compile their own")


def argument(kind: str, special: str | None, torch, device):
    """A value Triton specialises as the captured launch's argument was: ``kind`` a type string of
    ``nsa-sel capture`` (``*bf16:16``, ``i32``, ``i64:16``, ``fp32``), ``special`` "1" or "None" from its note."""
    if special == "None":
        return None
    if special == "1":
        return 1
    aligned = kind.endswith(":16")
    base = kind[:-3] if aligned else kind
    if base.startswith("*"):
        dtype = getattr(torch, TORCH_DTYPE[base[1:]])
        buf = torch.zeros(64, dtype=dtype, device=device)
        return buf if aligned else buf[1:]  # one element in: no longer 16-byte aligned
    if base in ("i32", "i64", "u64"):
        big = 1 << 33 if base != "i32" else 0
        return big + (16 if aligned else 17)
    if base in ("fp32", "fp64", "fp16", "bf16"):
        return 1.0
    if base == "i1":
        return True
    raise ValueError(f"unknown argument type {kind!r}")


def warm_one(spec, torch, device) -> None:
    from ..registry.compile_spec import load_object  # noqa: PLC0415 - the child's own import

    fn = load_object(spec.kernel) if isinstance(spec.kernel, str) else spec.kernel
    special = capture.special_of(spec.note)
    kwargs = {name: argument(kind, special.get(name), torch, device) for name, kind in spec.types.items()}
    kwargs.update(spec.constexprs)
    fn.warmup(grid=(1,), num_warps=spec.num_warps, num_stages=spec.num_stages, **kwargs)


def keys_path(env=os.environ) -> Path | None:
    """Where the warm-up lists what Triton keyed its launches on (:func:`.pytest_plugin.launch_key`): beside the
    cache it filled (``env``'s ``TRITON_CACHE_DIR``), so that a later stage's tests can tell a launch it missed
    from one it warmed (None: no cache named)."""
    cache = env.get("TRITON_CACHE_DIR")
    return Path(cache) / KEYS if cache else None


def _listen(keys: Path | None) -> None:
    """Append what Triton keys each warmed launch on to ``keys``, whether it compiled or loaded it (a compilation
    listener: Triton 3.4+; elsewhere nothing is listed)."""
    import triton  # noqa: PLC0415

    from .pytest_plugin import launch_key  # noqa: PLC0415

    compilation = getattr(getattr(triton, "knobs", None), "compilation", None)
    if keys is None or compilation is None or not hasattr(compilation, "listener"):
        return

    def listener(**kw):  # noqa: ARG001 - Triton's keyword arguments; the run frame says more
        try:
            key = launch_key()
        except Exception:  # noqa: BLE001 - a diagnostic: never fail the warm-up
            return
        if key is None:
            return
        line = json.dumps(key)
        with open(keys, "a") as f:  # one write per line: the children append side by side
            f.write(line + "\n")

    compilation.listener = listener


def misses(reports: list[dict], keys: Path | None, shown: int = 8) -> list[str]:
    """Why the tests' compiles (``reports``: the lane plugin's per-process files, their ``launches``) were not
    loads from the warmed cache: each launch of a kernel the warm-up never launched, or keyed differently from
    its closest warmed launch (the arguments and options that differ), up to ``shown`` lines and a count; [] where
    the warm-up listed nothing (it did not run here)."""
    if keys is None or not keys.is_file():
        return []
    warmed: dict[str, list[dict]] = {}
    for line in keys.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:  # a blank or torn line (a child killed mid-write): the others still say enough
            continue
        if isinstance(rec, dict) and "kernel" in rec:
            warmed.setdefault(rec["kernel"], []).append(rec)
    if not warmed:
        return []
    outside, same = [], 0
    for rep in reports:
        jit = rep.get("jit") or {}
        for name, launch in zip(jit.get("names", []), jit.get("launches", [])):
            if not launch:
                continue
            near = warmed.get(launch["kernel"], [])
            if not near:
                outside.append(f"{name}: the warm-up launched no {launch['kernel']}")
                continue
            diff = min((_differences(launch, w) for w in near), key=len)
            if not diff:
                same += 1
                continue
            outside.append(f"{name}: " + "; ".join(diff))
    lines = [f"jit_warm: compiled by the tests, not warmed: {line}" for line in outside[:shown]]
    if len(outside) > shown:
        lines.append(f"jit_warm: ... and {len(outside) - shown} more compile(s) outside the warm list")
    if same:
        lines.append(f"jit_warm: {same} compile(s) keyed as a warmed launch was (the warm-up had not reached it "
                     "yet, or this Triton does not say the rest of its cache key)")
    return lines


def _differences(launch: dict, warmed: dict) -> list[str]:
    """What differs between a test's launch and a warmed one: ``ARG test X, warmed Y`` per argument, or the
    options; where those agree, the part of Triton's cache key beyond them that differs (``cache_key_parts``)."""
    out = _changed(launch["specialization"], warmed["specialization"])
    if launch.get("options") != warmed.get("options"):
        out.append("launch options differ")
    if out:
        return out
    ca, cb = launch.get("cache") or {}, warmed.get("cache") or {}
    if ca.get("source") and cb.get("source") and ca["source"] != cb["source"]:
        out.append(f"the kernel's source key: test {ca['source']}, warmed {cb['source']}")
    if ca.get("backend") and cb.get("backend") and ca["backend"] != cb["backend"]:
        out.append(f"the backend's key (ptxas version, arch): test {ca['backend']}, warmed {cb['backend']}")
    if isinstance(ca.get("env"), dict) and isinstance(cb.get("env"), dict):
        out += _changed(ca["env"], cb["env"])
    return out


def _changed(test: dict, warmed: dict) -> list[str]:
    """``NAME test X, warmed Y`` for each name whose value differs between the two."""
    return [f"{k} test {test.get(k)}, warmed {warmed.get(k)}" for k in sorted(set(test) | set(warmed))
            if test.get(k) != warmed.get(k)]


def child(ref: str, index: int, of: int, nice: int = 0) -> int:
    if nice:
        os.nice(nice)
    import torch  # noqa: PLC0415

    _listen(keys_path())
    from .pytest_plugin import settle_cache_keys  # noqa: PLC0415

    settle_cache_keys()  # the keys the tests' processes give the kernels, whichever each launches first

    from ..registry.compile_spec import load_specs  # noqa: PLC0415

    specs = load_specs(ref)[index::of]
    failed = []
    for spec in specs:
        try:
            warm_one(spec, torch, "cuda")
        except Exception as exc:  # noqa: BLE001 - best effort: the test compiles it instead
            failed.append(f"{spec.name}: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:160]}")
    for line in failed[:3]:  # the first few say why; the count says how many
        print(f"jit_warm: not warmed: {line}", file=sys.stderr)
    print(f"JIT_WARM {len(specs) - len(failed)} {len(specs)}", flush=True)
    return 0


def run(ref: str, jobs: int, nice: int = 0) -> tuple[int, int, int, float]:
    """Warm ``ref``'s launches over ``jobs`` processes of niceness ``nice``: ``(warmed, listed, processes that
    died, seconds)``."""
    from ..registry.compile_spec import load_specs  # noqa: PLC0415

    total = len(load_specs(ref))
    jobs = max(1, min(jobs, total))
    keys = keys_path()
    if keys is not None:
        keys.parent.mkdir(parents=True, exist_ok=True)
        keys.write_text("")  # this run's list, not an earlier one's
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-m", MODULE, "--child", str(i), str(jobs), "--specs", ref,
                              "--nice", str(nice)],
                              stdout=subprocess.PIPE, text=True) for i in range(jobs)]
    warmed = died = 0
    for p in procs:
        out, _ = p.communicate()
        line = next((ln for ln in (out or "").splitlines() if ln.startswith("JIT_WARM ")), None)
        if p.returncode != 0 or line is None:
            died += 1
        else:
            warmed += int(line.split()[1])
    return warmed, total, died, time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=f"python -m {MODULE}",
                                description=__doc__.split("\n")[0])
    p.add_argument("--specs", default=LAUNCHES, help=f"the launches, a spec module (default {LAUNCHES})")
    p.add_argument("--jobs", type=int, default=machine.usable_cores(), help="processes (default: the usable cores)")
    p.add_argument("--nice", type=int, default=0, help="the processes' niceness (0-19; default 0)")
    p.add_argument("--child", nargs=2, type=int, metavar=("INDEX", "OF"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args.specs, *args.child, nice=args.nice)
    if args.jobs < 1:
        print(f"jit_warm: --jobs {args.jobs}: expected at least 1 process", file=sys.stderr)
        return 2
    if not 0 <= args.nice <= 19:
        print(f"jit_warm: --nice {args.nice}: expected 0 to 19", file=sys.stderr)
        return 2
    if not Path(args.specs.partition(":")[0]).is_file():
        print(f"jit_warm: --specs {args.specs}: no such spec module", file=sys.stderr)
        return 2
    warmed, total, died, seconds = run(args.specs, args.jobs, args.nice)
    print(f"jit_warm: {warmed} of {total} launches compiled into {os.environ.get('TRITON_CACHE_DIR', 'the default cache')} "
          f"over {args.jobs} processes in {seconds:.0f} s" + (f"; {died} process(es) died" if died else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
