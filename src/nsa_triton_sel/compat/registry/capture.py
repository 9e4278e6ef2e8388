"""``nsa-sel capture -o specs.py -- CMD ...``: the kernel specialisations a real run launched, as a spec module.

The command runs with a recorder on Triton's launch path (``JITFunction.run``, and the interpreter's
``InterpretedFunction.run`` under ``TRITON_INTERPRET=1``), installed in every Python process it starts (a
``sitecustomize`` first on ``PYTHONPATH``; one the environment had is still run after it).  Each launch is
recorded once per specialisation: the kernel (``module:attr``, or ``file.py:attr``), the type of every runtime
argument as Triton specialises it (a tensor -> a pointer to its element type, an int -> ``i32``/``i64``, a float
-> ``fp32``; pointers 16-byte aligned and ints divisible by 16 carry ``:16``, as Triton marks them), the
constexpr values, ``num_warps``, ``num_stages`` and the GPU arch (none under the interpreter).  An autotuned
kernel's launches go through the same path, so every config that ran is recorded.  After the command, the
records of all its processes are merged into a module of :class:`~.compile_spec.CompileSpec`, ready for
``nsa-sel smoke --specs specs.py:SPECS`` and ``nsa-sel check-upgrade --specs``.

What a spec cannot hold is said in its ``note``: an integer argument that was 1 (Triton specialises it to a
constant; it is compiled here as a plain integer) and an argument that was ``None``.
"""

from __future__ import annotations

import argparse
import atexit
import datetime
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

RECORDS_ENV = "NSA_SEL_CAPTURE_RECORDS"  # the JSON-lines file every process of the command appends to
# torch dtype -> Triton element type (triton's own table, ``JITFunction._type_of``, by name)
ELEMENT = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64", "int8": "i8",
           "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8", "bool": "i1",
           "float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5"}
DEFAULTS = {"num_warps": 4, "num_stages": 3}  # Triton's launch defaults on NVIDIA GPUs

_SEEN: Counter = Counter()  # this process's specialisations -> launches


_SPECIAL = re.compile(r"(\w+) was (1|None)\b")  # a note's "NAME was 1" / "NAME was None" (:func:`spec_dicts` writes them)


def special_of(note: str) -> dict[str, str]:
    """What a captured spec's note says it cannot hold: argument name -> "1" or "None"."""
    return dict(_SPECIAL.findall(note or ""))


# ---------------------------------------------------------------- the recorder (inside the command's processes)

def type_of(value) -> tuple[str, str]:
    """``(Triton type with ":16" where Triton marks it, what a spec cannot say or "")`` of one runtime argument."""
    if value is None:
        return "i32", "None"
    if hasattr(value, "data_ptr") and hasattr(value, "dtype"):
        elem = ELEMENT.get(str(value.dtype).rpartition(".")[2], str(value.dtype))
        return f"*{elem}" + (":16" if value.data_ptr() % 16 == 0 else ""), ""
    if isinstance(value, bool):
        return "i1", ""
    if isinstance(value, int):
        kind = "i32" if -(1 << 31) <= value < (1 << 31) else "u64" if value >= (1 << 63) else "i64"
        return kind + (":16" if value % 16 == 0 else ""), "1" if value == 1 else ""
    if isinstance(value, float):
        return "fp32", ""
    return type(value).__name__, "unrecorded type"


def constexpr_value(value):
    """A constexpr as a literal a spec module can hold (a ``tl.dtype`` or another object: its ``str``)."""
    value = getattr(value, "value", value)  # tl.constexpr(...)
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def describe(kernel, args: tuple, kwargs: dict) -> dict:
    """One launch of ``kernel`` (a JITFunction or InterpretedFunction) as a record."""
    from .compile_spec import kernel_params, kernel_ref

    params = kernel_params(kernel)
    names = [p[0] for p in params]
    given = dict(zip(names, args))
    given.update({k: v for k, v in kwargs.items() if k in names})
    options = {k: v for k, v in kwargs.items() if k not in names and k not in ("grid", "warmup")}
    types, constexprs, special, arch = {}, {}, {}, None
    for name, is_constexpr, default in params:
        value = given.get(name, default)
        if is_constexpr:
            constexprs[name] = constexpr_value(value)
            continue
        types[name], why = type_of(value)
        if why:
            special[name] = why
        device = getattr(value, "device", None)
        if getattr(device, "type", None) == "cuda" and arch is None:
            import torch  # noqa: PLC0415 - a CUDA tensor: torch is imported

            major, minor = torch.cuda.get_device_capability(device)
            arch = major * 10 + minor
    return {"kernel": kernel_ref(kernel), "types": types, "constexprs": constexprs, "special": special,
            "num_warps": int(options.get("num_warps") or DEFAULTS["num_warps"]),
            "num_stages": int(options.get("num_stages") or DEFAULTS["num_stages"]), "arch": arch}


def record(kernel, args: tuple, kwargs: dict) -> None:
    try:
        rec = describe(kernel, args, kwargs)
    except Exception as exc:  # noqa: BLE001 - the user's run must go on; the failure is recorded instead
        rec = {"kernel": repr(kernel), "error": f"{type(exc).__name__}: {exc}"}
    key = json.dumps(rec, sort_keys=True)
    _SEEN[key] += 1
    if _SEEN[key] == 1:
        _append([rec])


def _append(recs: list[dict]) -> None:
    path = os.environ.get(RECORDS_ENV)
    if path:
        with open(path, "a") as f:  # one write per line: processes append side by side
            for rec in recs:
                f.write(json.dumps(rec, sort_keys=True) + "\n")


def _counts_at_exit() -> None:
    _append([{"count": n, "of": json.loads(key)} for key, n in _SEEN.items() if n > 1])


def _recording(run):
    def run_recorded(self, *args, **kwargs):
        if not kwargs.get("warmup"):
            record(self, args, kwargs)
        return run(self, *args, **kwargs)

    run_recorded.__wrapped__ = run
    return run_recorded


def install() -> None:
    """Put the recorder on Triton's launch path (JIT and interpreter) in this process."""
    try:
        from triton.runtime import jit
    except ImportError:
        return
    jit.JITFunction.run = _recording(jit.JITFunction.run)
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:
        InterpretedFunction = None
    if InterpretedFunction is not None and "run" in vars(InterpretedFunction):
        InterpretedFunction.run = _recording(InterpretedFunction.run)
    elif InterpretedFunction is not None:  # Triton 3.0 - 3.2: run is made per instance, in __init__
        init = InterpretedFunction.__init__

        def init_recorded(self, *a, **k):
            init(self, *a, **k)
            inner = self.run

            def run(*args, **kwargs):
                if not kwargs.get("warmup"):
                    record(self, args, kwargs)
                return inner(*args, **kwargs)

            self.run = run

        InterpretedFunction.__init__ = init_recorded
    atexit.register(_counts_at_exit)


SITECUSTOMIZE = '''\
# Written by nsa-sel capture: records every Triton launch of this process, then runs the sitecustomize the
# environment had (if any).
import importlib.util, os, sys
_here = os.path.dirname(os.path.abspath(__file__))
from nsa_triton_sel.compat.registry import capture as _capture
_capture.install()
for _entry in sys.path:
    _file = os.path.join(_entry or os.getcwd(), "sitecustomize.py")
    if os.path.abspath(_entry or os.getcwd()) != _here and os.path.isfile(_file):
        _spec = importlib.util.spec_from_file_location("_nsa_sel_user_sitecustomize", _file)
        _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
        break
'''


# ---------------------------------------------------------------- the command and the spec module it writes

def merge(lines: list[str]) -> tuple[list[dict], list[dict]]:
    """The records of every process, once each, with their launch counts: ``(specialisations, errors)``."""
    counts: dict[str, int] = {}
    for line in lines:
        if not line.strip():
            continue
        rec = json.loads(line)
        if "of" in rec:  # a process's launch count of a specialisation it had already written
            key = json.dumps(rec["of"], sort_keys=True)
            counts[key] = counts.get(key, 1) + rec["count"] - 1
        else:
            counts.setdefault(json.dumps(rec, sort_keys=True), 1)
    recs = [dict(json.loads(k), launches=n) for k, n in counts.items()]
    return [r for r in recs if "error" not in r], [r for r in recs if "error" in r]


def spec_dicts(recs: list[dict]) -> list[dict]:
    """:class:`~.compile_spec.CompileSpec` fields of each specialisation, named ``kernel/NN``, in kernel order."""
    out, per_kernel = [], Counter()
    for rec in sorted(recs, key=lambda r: (r["kernel"], json.dumps(r, sort_keys=True))):
        name = rec["kernel"].rpartition(":")[2]
        per_kernel[name] += 1
        elems = [t.split(":")[0][1:] for t in rec["types"].values() if t.startswith("*")]
        dtype = next((e for e in elems if e in ("fp16", "bf16", "fp32")), "fp16")
        where = f"sm_{rec['arch']}" if rec["arch"] else "the interpreter"
        note = f"captured: {rec['launches']} launch(es) on {where}"
        if rec["special"]:
            note += "; " + ", ".join(f"{n} was {w}" for n, w in sorted(rec["special"].items()))
        out.append({"name": f"{name}/{per_kernel[name]:02d}", "kernel": rec["kernel"], "dtype": dtype,
                    "types": rec["types"], "constexprs": rec["constexprs"], "num_warps": rec["num_warps"],
                    "num_stages": rec["num_stages"], "note": note})
    return out


def module_text(specs: list[dict], command: list[str], triton: str, launches: int) -> str:
    kernels = len({s["kernel"] for s in specs})
    lines = [f'"""Compile specs captured by `nsa-sel capture` from: {shlex.join(command)}',
             "",
             f"{datetime.date.today()}, Triton {triton}: {len(specs)} specialisation(s) of {kernels} kernel(s), "
             f"{launches} launch(es).",
             "Check them on any release: nsa-sel smoke --specs THIS_FILE.py:SPECS --arch 90 [--python OTHER_PYTHON]",
             '"""', "", "from nsa_triton_sel.compat.registry.compile_spec import CompileSpec", "", "SPECS = ["]
    for s in specs:
        fields = ", ".join(f"{k}={v!r}" for k, v in s.items())
        lines.append(f"    CompileSpec({fields}),")
    lines.append("]")
    return "\n".join(lines) + "\n"


def _triton_version(python: str) -> str:
    res = subprocess.run([python, "-c", "import triton; print(triton.__version__)"], capture_output=True, text=True)
    return res.stdout.strip() or "(not importable)"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="nsa-sel capture", description=__doc__.split("\n")[0])
    p.add_argument("-o", "--output", required=True, type=Path, help="the spec module to write (a .py file)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run (e.g. python -m pytest)")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("no command given: nsa-sel capture -o specs.py -- python -m pytest tests/...")
    if args.output.suffix != ".py":
        p.error(f"-o {args.output}: the spec module must be a .py file")
    with tempfile.TemporaryDirectory(prefix="nsa-sel-capture-") as tmp:
        (Path(tmp) / "sitecustomize.py").write_text(SITECUSTOMIZE)
        records = Path(tmp) / "records.jsonl"
        records.touch()
        package = str(Path(__file__).resolve().parents[3])  # this package's root, for the command's Pythons
        path = os.pathsep.join(x for x in (tmp, package, os.environ.get("PYTHONPATH", "")) if x)
        env = {**os.environ, "PYTHONPATH": path, RECORDS_ENV: str(records)}
        print(f"capture: running {shlex.join(command)}", file=sys.stderr)
        rc = subprocess.call(command, env=env)
        recs, errors = merge(records.read_text().splitlines())
    for e in errors:
        print(f"capture: a launch of {e['kernel']} could not be recorded: {e['error']}", file=sys.stderr)
    if not recs:
        print(f"capture: the command (exit status {rc}) launched no Triton kernel; {args.output} not written",
              file=sys.stderr)
        return 1
    specs = spec_dicts(recs)
    python = command[0] if "python" in Path(command[0]).name else sys.executable
    launches = sum(r["launches"] for r in recs)
    args.output.write_text(module_text(specs, command, _triton_version(python), launches))
    print(f"capture: {len(specs)} specialisation(s) of {len({s['kernel'] for s in specs})} kernel(s) -> "
          f"{args.output} (the command exited with status {rc})", file=sys.stderr)
    return 0 if rc == 0 else 1
