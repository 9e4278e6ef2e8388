"""``nsa-sel smoke``: compile every registered kernel variant ahead of time, without a GPU.

Each (spec, arch) compile runs in its own child process (``python -m nsa_triton_sel.compat.smoke.aot``)
with its own ``TRITON_CACHE_DIR`` and a timeout, several at once, because some compiler
failures are C++ assertion aborts that kill the process - a try/except in the parent
would never see them.  The verdicts:

- ``ok``: PTX and cubin produced (sizes, registers, stack/spills, shared memory recorded);
- ``compile_error``: the compiler raised; the message is the root cause, found by walking
  the exception's cause chain (on Triton 3.0 - 3.4 the text is only in ``__cause__``);
- ``crash``: the child died (signal or exit code) - the tail of its stderr, e.g. the MLIR
  assertion, is kept;
- ``timeout``: the child ran past ``--timeout`` and was killed with its process group;
- ``unsupported``: the installed Triton lacks the target (a tiny probe kernel does not
  compile for that arch) or an API the kernel uses.

Canary specs (``--canaries``, shipped in :mod:`nsa_triton_sel.compat.canaries`) carry the
verdict they must reach on each Triton version; they never fail the run by being not ``ok``,
only by being unexpected.  Every argument is checked before anything runs: a bad path or a
spec module that does not import is reported at once (exit 2), never after a long run.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ..core.atomic import FileProblem, atomic_write_text, check_output
from ..core.command import Parser, fail, seconds
from ..registry.compile_spec import CompileSpec, check_unique, spec_from_dict
from .children import FP_FUSION_DEFAULT, run_module, stderr_tail
from .report import EXIT_USAGE
from .run import DEFAULT_ARCHS, parse_archs, run_smoke

EPILOG = ("exit status: 0 all ok and canaries as expected; 1 a variant is not ok; 2 bad usage; "
          "3 only a canary differs from its expectation; 4 the children imported another Triton than --expect-triton")


class UsageError(ValueError):
    """A bad argument, found before the run."""


MAX_JOBS_PER_CORE = 4  # each job is a compile server holding Triton in memory: more is a typo, not a speed-up


def _count(text: str, most: int | None = None) -> int:
    """A whole number from 1 to ``most`` (a 400-digit one is a typo)."""
    try:
        value = int(text) if len(text) <= 12 else None
    except ValueError:
        value = None
    if value is None or value < 1 or (most is not None and value > most):
        upto = f" to {most}" if most is not None else ""
        raise argparse.ArgumentTypeError(f"expected a whole number from 1{upto}, got {text[:40]!r}")
    return value


def _jobs(text: str) -> int:
    return _count(text, MAX_JOBS_PER_CORE * (os.cpu_count() or 1))


def _version(text: str) -> str:
    try:
        Version(text)
    except InvalidVersion:  # refused before the run, not after it
        raise argparse.ArgumentTypeError(f"not a Triton version: {text!r} (e.g. 3.9.0)") from None
    return text


def _parser() -> argparse.ArgumentParser:
    p = Parser(prog="nsa-sel smoke", description=__doc__.split("\n\n")[0], epilog=EPILOG)
    p.add_argument("--arch", default=",".join(map(str, DEFAULT_ARCHS)),
                   help="compute capabilities, comma separated (default 80,89,90; 100 and 120 on request)")
    p.add_argument("--json", metavar="PATH", help="write the report as JSON (schema 2)")
    p.add_argument("--jobs", type=_jobs, default=None, help="parallel compiles (default: the usable cores)")
    p.add_argument("--timeout", type=seconds, default=120.0,
                   help="seconds per compile (and per spec-module import) before 'timeout'")
    p.add_argument("--specs", action="append", metavar="MODULE:ATTR",
                   help="compile these specs instead of the package registry (module:ATTR or file.py:ATTR; "
                        "repeatable; 'builtin' means the package registry); imported in a child, under --timeout")
    p.add_argument("--canaries", action="store_true", help="also run the canaries (nsa_triton_sel.compat.canaries)")
    p.add_argument("--python", help="run the children under this interpreter (another venv's Triton)")
    p.add_argument("--expect-triton", metavar="VERSION", type=_version,
                   help="the Triton release this run is for (a lane's): canaries are judged for it, and "
                        "children importing another one fail the run (exit 4)")
    p.add_argument("--keep", metavar="DIR", help="keep each compile's request, stderr and cache under DIR")
    p.add_argument("--no-progress", action="store_true", help="no progress output (same as --progress off)")
    p.add_argument("--progress", choices=("auto", "bar", "lines", "off"), default="auto",
                   help="auto (default): a bar on a terminal, else a plain line every --progress-every compiles")
    p.add_argument("--progress-every", type=_count, default=None, metavar="N",
                   help="compiles between two progress lines (default 20)")
    return p


def check_paths(args) -> None:
    """--python, --keep, --json and --specs files, checked before the run (a bad --json would lose the run's
    result; a file that is not an interpreter would end the run in an OSError)."""
    if args.python is not None:
        check_interpreter(args.python, min(args.timeout, 60.0))
    if args.keep is not None:  # created only once every check passed (main): a refused run writes nothing
        keep = Path(args.keep)
        if not args.keep:
            raise UsageError("--keep '': expected a directory path")
        if keep.exists() or keep.is_symlink():
            if not keep.is_dir():
                raise UsageError(f"--keep {args.keep}: exists and is not a directory")
            if not os.access(keep, os.W_OK):
                raise UsageError(f"--keep {args.keep}: not writable")
        else:
            ancestor = next(a for a in keep.absolute().parents if a.exists() or a.is_symlink())
            if not ancestor.is_dir() or not os.access(ancestor, os.W_OK | os.X_OK):
                raise UsageError(f"--keep {args.keep}: cannot create the directory ({ancestor} is not a writable "
                                 "directory)")
    if args.json is not None:
        try:
            check_output(args.json, "--json")
        except FileProblem as exc:
            raise UsageError(str(exc)) from None
    for ref in args.specs or ():
        _check_spec_file(ref)


def check_interpreter(python: str, timeout: float) -> None:
    """``--python``: an executable regular file that runs as Python 3.10 or newer (the children run this package)."""
    where = f"--python {python}"
    try:
        st = os.stat(python) if python else None
    except OSError as exc:
        raise UsageError(f"{where}: {exc.strerror.lower()}") from None
    if st is None or not stat.S_ISREG(st.st_mode) or not os.access(python, os.X_OK):
        raise UsageError(f"{where}: not an executable interpreter (expected the path of a python executable)")
    try:
        res = subprocess.run([python, "-c", "import sys; print('PY', *sys.version_info[:2])"], capture_output=True,
                             text=True, errors="replace", timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise UsageError(f"{where}: did not answer `-c print(version)` in {timeout:g} s: not a Python interpreter?") \
            from None
    except OSError as exc:  # "Exec format error": a binary for another machine, or no interpreter line
        raise UsageError(f"{where}: cannot run it ({exc.strerror}): not a Python interpreter") from None
    words = (res.stdout.strip().splitlines() or [""])[-1].split()
    if res.returncode != 0 or len(words) != 3 or words[0] != "PY":
        raise UsageError(f"{where}: not a Python interpreter (`-c print(version)` gave exit status {res.returncode})")
    if (int(words[1]), int(words[2])) < (3, 10):
        raise UsageError(f"{where}: Python {words[1]}.{words[2]}; the children need Python 3.10 or newer")


def _check_spec_file(ref: str) -> None:
    """A ``--specs`` reference is ``module[:ATTR]`` or ``path/file.py[:ATTR]`` (ATTR defaults to SPECS, as
    :func:`..registry.compile_spec.load_specs` reads it), and a path names a regular file (a FIFO there would hang the child
    until --timeout): checked here, before a child is started for it."""
    if ref == "builtin":
        return
    target, _, attr = (ref if ":" in ref else ref + ":SPECS").rpartition(":")
    if not target or not attr:
        raise UsageError(f"--specs {ref!r}: expected module:ATTR or path/file.py:ATTR (ATTR defaults to SPECS)")
    if not (target.endswith(".py") or os.sep in target):
        return  # a module name (or a folder of that name): the child resolves it, a module first
    try:
        st = os.stat(target)
    except OSError as exc:
        raise UsageError(f"--specs {ref}: {target}: {exc.strerror.lower()}") from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"--specs {ref}: {target} is not a regular file")


def load_specs_in_child(ref: str, python: str, timeout: float) -> tuple[list[CompileSpec], str]:
    """The specs of a user's module, imported in a child under ``timeout`` (it may hang or crash), and where the
    child found them (``module <file>`` or ``file <path>``)."""
    with tempfile.TemporaryDirectory(prefix="nsa-smoke-specs-") as tmp:
        out = Path(tmp) / "specs.json"
        rc, seconds = run_module("nsa_triton_sel.compat.registry.compile_spec", [ref, str(out)], Path(tmp), timeout,
                                 python)
        if rc is None:
            raise UsageError(f"--specs {ref}: importing it did not finish in {timeout:g} s (does the module hang "
                             "at import? raise --timeout if it is only slow)")
        if not out.exists():
            tail = stderr_tail(Path(tmp) / "stderr.txt", 3).replace("\n", " | ")
            raise UsageError(f"--specs {ref}: the child loading it died (exit status {rc}): {tail}")
        doc = json.loads(out.read_text())
    if "error" in doc:
        raise UsageError(f"--specs {ref}: {doc['error']}")
    try:
        specs = [spec_from_dict(raw, f"{ref}[{i}]") for i, raw in enumerate(doc["specs"])]
    except (TypeError, ValueError) as exc:
        raise UsageError(f"--specs {ref}: {exc}") from None
    return specs, doc.get("source", "?")


def collect_specs(args) -> list[CompileSpec]:
    from ..registry.specs import SPECS  # noqa: PLC0415 - the registry, only when asked for

    specs, found = [], []
    for ref in args.specs or ["builtin"]:
        if ref == "builtin":
            specs += list(SPECS)
        else:
            loaded, source = load_specs_in_child(ref, args.python or sys.executable, args.timeout)
            specs += loaded
            found.append(f"--specs {ref}: {len(loaded)} spec(s) from the {source}")
    if args.canaries:
        from ..canaries import SPECS as CANARIES  # noqa: PLC0415

        specs += CANARIES
    try:
        check_unique(specs)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not specs:  # a run of nothing would report success
        raise UsageError(f"--specs {' '.join(args.specs or [])}: no compile specs to run (an empty list)")
    for line in found:  # which module or file each reference named (a module comes before a folder)
        print(line, file=sys.stderr)
    return specs


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        archs = parse_archs(args.arch)
        check_paths(args)
        specs = collect_specs(args)
        if args.keep:
            Path(args.keep).mkdir(parents=True, exist_ok=True)
    except ValueError as e:
        return fail("smoke", e, EXIT_USAGE)
    except OSError as e:
        return fail("smoke", f"--keep {args.keep}: cannot create the directory ({e.strerror})", EXIT_USAGE)
    if "TRITON_DEFAULT_FP_FUSION" not in os.environ:
        print(f"note: TRITON_DEFAULT_FP_FUSION is unset; the children use {FP_FUSION_DEFAULT} (Triton 3.9 warns "
              "that its default becomes 'disabled' in 3.10) and the report records it", file=sys.stderr)
    from .render import render  # noqa: PLC0415

    report = run_smoke(specs, archs=archs, jobs=args.jobs, timeout=args.timeout, progress="off" if args.no_progress else args.progress,
                       python=args.python, keep=args.keep, expect_triton=args.expect_triton,
                       progress_every=args.progress_every)
    render(report)
    if args.json:
        try:  # atomically: a full disk leaves the old report (or none), never a 0-byte one
            atomic_write_text(args.json, report.to_json())
        except (OSError, ValueError) as exc:
            return fail("smoke", f"--json {args.json}: cannot write the report "
                        f"({getattr(exc, 'strerror', None) or exc})", EXIT_USAGE)
    return report.exit_code
