"""Damaged-file fuzz of the ``nsa-sel`` command line: a table of cases, each a process of its own.

Every case copies a small, consistent project (a constraints directory made by a real ``nsa-sel pin``,
lane run files, a candidate's run files for ``check-upgrade --from-results``, a ``file://`` package
index for ``releases``), damages inputs (truncated, garbage, binary, not UTF-8, wrongly typed JSON or
TOML, NaN/Infinity, nesting deeper than a parser goes, huge numbers, a directory, FIFO, symlink loop,
dangling link or ``/dev/zero`` where a file belongs, an empty, missing, unreadable or sparse 300 MiB
file) or passes bad arguments, runs one ``nsa-sel`` command in a process of its own under a timeout,
and checks:

- it ends in time (no hang), with an exit status its command documents (:data:`EXIT_CODES`);
- no traceback (``--debug`` cases: a traceback is the point); exit 2 (bad input) is exactly one
  stderr line ``nsa-sel COMMAND: ...``;
- nothing is written outside the paths the command may write, and nothing at all on exit 2: the
  case's whole tree (its temporary and home directories included) is compared before and after.

The table's cases are forked from one process that imported the toolkit and torch once (a fresh
``python -m`` costs 3-8 s on a busy 2-core box, nearly all imports); the forked child runs
``cli.main`` with its own stdin/stdout/stderr, working directory, environment and process group, and
is killed with its group at the timeout.  The cases marked ``fresh`` run the real entry point, a new
interpreter, the same way.

``python -m tests.compat.commands.cli_fuzz [--all] [-k SUBSTR] [--list] [-v]`` runs the table
(:mod:`cli_fuzz_cases`) outside pytest and prints the failures and the time taken; the test suite
(``tests/compat/commands/test_cli_fuzz.py``) runs its :func:`sample`, or every case with ``NSA_SEL_CLI_FUZZ=all``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
# fake_index and cli_fuzz_cases beside this file, ledger_factory in tests/compat/support, also under
# `python -m tests.compat.commands.cli_fuzz`
for _where in (HERE.parent / "support", HERE):
    if str(_where) not in sys.path:
        sys.path.insert(0, str(_where))

TIMEOUT_S = float(os.environ.get("NSA_SEL_CLI_FUZZ_TIMEOUT", "60"))  # per case: most take < 0.3 s, a fresh one 3-12 s

# What a command that succeeds may change (relative to the case's root), besides the files its options name
# (OUTPUTS); exit 2 may change nothing.
MAY_WRITE = {"pin": ("constraints/",), "check-upgrade": ("constraints/",)}
OUTPUTS = ("--json", "--ledger", "--matrix", "--known-good", "--output")

from cli_fuzz_cases import CAND_VERSION, EXIT_CODES, RAW, Case, all_cases, sample  # noqa: E402


# ---------------------------------------------------------------------------------------------------
# The template project
# ---------------------------------------------------------------------------------------------------

def build_template(root: Path) -> Path:
    """A consistent project under ``root``: constraints/ (pinned), results/, cand/, index/, outside/."""
    import fake_index  # noqa: PLC0415
    import ledger_factory as F  # noqa: PLC0415
    from nsa_triton_sel.compat.core import lane_table  # noqa: PLC0415
    from nsa_triton_sel.compat import ledger  # noqa: PLC0415

    cdir = F.constraints_dir(root)
    first = root / "first"
    F.write_runs(first, F.mixed())
    with contextlib.redirect_stdout(io.StringIO()):
        assert ledger.main(["--constraints", str(cdir), "--results", str(first)]) == 0
    shutil.rmtree(first)
    later = "2026-11-23T00:00:00+00:00"
    F.write_runs(root / "results", F.recs("3.5", "parity", ["pass", "skip"], later)
                 + F.recs("3.1", "compile", ["pass", "fail"], later) + F.recs("3.9", "parity", ["pass"] * 3, later))
    cand = lane_table.Lane(label="3.10", triton=CAND_VERSION, torch=(), python=">=3.11", numpy=">=1.26", candidate=True)
    for check, kernels in (("compile", ["k0", "k1"]), ("parity", ["k0", "k1", "k2"])):
        base = ledger.base_record(cand, {**F.CPU_FP, "imported": {"triton": CAND_VERSION, "numpy": "1.26.4",
                                                                  "torch": "2.13.0+cpu"}, "date": later},
                                  check=check, mode="aot" if check == "compile" else "interp",
                                  session=f"{check}-candidate", run_id=f"{check}-candidate@{later}")
        part = [ledger.record(base, kernel=k, verdict="pass", message="") for k in kernels]
        ledger.write_run(ledger.run_file(root / "cand", f"{check}-candidate"), base=part[0], status="complete",
                         started=later, records=part)
    fake_index.write_index(root / "index", *fake_index.default_releases(F.TABLE))
    (root / "outside").mkdir()
    (root / "outside" / "keep.txt").write_text("a file no command may touch\n")
    for d in ("tmp", "home", "io"):
        (root / d).mkdir()
    return root


# ---------------------------------------------------------------------------------------------------
# Damage
# ---------------------------------------------------------------------------------------------------

def _replace(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _set(doc, where: tuple, value):
    """``doc`` with the item at ``where`` (keys / indices; ``"*"`` = every item) replaced by ``value``."""
    if not where:
        return value
    key, rest = where[0], where[1:]
    if not isinstance(doc, (dict, list)):
        return value
    if key == "*":
        if isinstance(doc, dict):
            return {k: _set(v, rest, value) for k, v in doc.items()}
        return [_set(v, rest, value) for v in doc]
    if isinstance(doc, list):
        doc = list(doc)
        doc[key] = _set(doc[key], rest, value)
        return doc
    return {**doc, key: _set(doc.get(key), rest, value)}


def json_text(doc) -> str:
    """``doc`` as JSON text; RAW values are spliced in as they are (through a placeholder)."""
    raws = {}

    def walk(x):
        if isinstance(x, tuple) and x and x[0] is RAW:
            key = f"@@RAW{len(raws)}@@"
            raws[key] = x[1]
            return key
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        return x

    text = json.dumps(walk(doc))
    for key, raw in raws.items():
        text = text.replace(json.dumps(key), raw)
    return text


def damage(root: Path, target: str, kind: str, *arg) -> None:
    """Damage ``root/target`` in the way ``kind`` names (see the module docstring)."""
    path = root / target
    original = path.read_bytes() if path.is_file() else b""
    if path.is_file() and not path.is_symlink():
        path.unlink()  # the case's files are hard links to the template's: never write through one
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncate":
        path.write_bytes(original[: len(original) // 2])
    elif kind == "cut-last-byte":
        path.write_bytes(original[:-1] if original.endswith(b"\n") else original[:-2])
    elif kind == "garbage":
        path.write_bytes(b"this is {not [what <it should> be\n\t=\n")
    elif kind == "binary":
        path.write_bytes(bytes(range(256)) * 8)
    elif kind == "latin1":
        path.write_bytes(original[: len(original) // 3] + "caf\xe9 \xff\xfe".encode("latin-1") + original[-20:])
    elif kind == "nul":
        path.write_bytes(original[:40] + b"\0\0\0" + original[40:])
    elif kind == "bom":
        path.write_bytes(b"\xef\xbb\xbf" + original)
    elif kind == "utf16":
        path.write_bytes(original.decode("utf-8").encode("utf-16"))
    elif kind == "directory":
        _replace(path)
        path.mkdir()
        (path / "inside").write_text("x")
    elif kind == "fifo":
        _replace(path)
        os.mkfifo(path)
    elif kind == "loop":
        _replace(path)
        path.symlink_to(path.name)
    elif kind == "dangling":
        _replace(path)
        path.symlink_to("no-such-file")
    elif kind == "devzero":
        _replace(path)
        path.symlink_to("/dev/zero")
    elif kind == "missing":
        _replace(path)
    elif kind == "noperm":
        path.write_bytes(original)
        path.chmod(0)
    elif kind == "sparse":  # 300 MiB of nothing: a reader must refuse it by its size
        with open(path, "wb") as f:
            f.truncate(300 << 20)
    elif kind == "append":  # text added at the end
        path.write_bytes(original + arg[0].encode("utf-8", "surrogatepass"))
    elif kind == "replace":  # one regex substitution in the text
        text = original.decode("utf-8")
        new = re.sub(arg[0], arg[1], text, count=1, flags=re.M)
        assert new != text, f"{target}: {arg[0]!r} matched nothing"
        path.write_text(new)
    elif kind == "json":  # a JSON document with the item at arg[0] set to arg[1]
        path.write_text(json_text(_set(json.loads(original), arg[0], arg[1])))
    elif kind == "jsonl":  # a JSON-lines file with line arg[0]'s field arg[1] set to arg[2]
        lines = original.decode("utf-8").splitlines()
        key = arg[1] if isinstance(arg[1], tuple) else (arg[1],)
        lines[arg[0]] = json_text(_set(json.loads(lines[arg[0]]), key, arg[2]))
        path.write_text("\n".join(lines) + "\n")
    elif kind == "jsonl-line":  # line arg[0] replaced by the text arg[1]
        lines = original.decode("utf-8").splitlines()
        lines[arg[0]] = arg[1]
        path.write_text("\n".join(lines) + "\n")
    else:
        raise ValueError(f"unknown damage {kind!r}")


# ---------------------------------------------------------------------------------------------------
# Running one case
# ---------------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    rc: int | None  # None: killed at the timeout
    out: str
    err: str
    seconds: float
    changed: list[str] = field(default_factory=list)


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root``: its type, permission bits and content (files), target (links)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            what = None
            if stat.S_ISREG(st.st_mode):
                if st.st_size > (64 << 20):  # the sparse file: its size says enough
                    what = st.st_size
                else:
                    try:
                        with open(p, "rb") as f:
                            what = hashlib.sha1(f.read()).hexdigest()
                    except OSError:
                        what = "unreadable"
            elif stat.S_ISLNK(st.st_mode):
                what = os.readlink(p)
            out[os.path.relpath(p, root)] = (stat.S_IFMT(st.st_mode), st.st_mode & 0o7777, what)
    return out


def _fill(text: str, root: Path) -> str:
    return text.replace("{index}", (root / "index").as_uri()).replace("{root}", str(root))


def _apply(root: Path, damages) -> None:
    for target, kind, *args in damages:
        if kind == "link":  # a symlink to args[0]
            (root / target).symlink_to(args[0])
        elif kind == "exec":  # an executable file with this content
            path = root / target
            _replace(path)
            path.write_text(args[0])
            path.chmod(0o755)
        else:
            damage(root, target, kind, *args)


def child_env(root: Path, extra=()) -> dict:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "PYTHONPATH", "TRITON_INTERPRET",
                                                           "VIRTUAL_ENV", "OMP_NUM_THREADS")}
    env.update(HOME=str(root / "home"), TMPDIR=str(root / "tmp"), OMP_NUM_THREADS="1", COLUMNS="200")
    env.update({k: _fill(v, root) for k, v in extra})
    return env


def _run_forked(argv: list[str], cwd: Path, env: dict, io_dir: Path, timeout: float) -> tuple[int | None, float]:
    """``cli.main(argv)`` in a forked child (stdout/stderr to files in ``io_dir``); (status, seconds)."""
    from nsa_triton_sel.compat.commands import cli  # noqa: PLC0415 - imported once, before the forks

    out_fd = os.open(io_dir / "stdout", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    err_fd = os.open(io_dir / "stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        rc = 1
        try:
            os.setpgid(0, 0)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out_fd, 1)
            os.dup2(err_fd, 2)
            sys.stdin = open(0, closefd=False)  # noqa: SIM115
            sys.stdout = open(1, "w", closefd=False, encoding="utf-8", errors="backslashreplace")  # noqa: SIM115
            sys.stderr = open(2, "w", closefd=False, encoding="utf-8", errors="backslashreplace")  # noqa: SIM115
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update(env)
            tempfile.tempdir = None  # the parent's cached one would outlive TMPDIR
            _guard()
            try:
                rc = cli.main(argv)
            except SystemExit as exc:  # what the interpreter does with it
                code = exc.code
                if code is None or isinstance(code, int):
                    rc = code or 0
                else:
                    print(code, file=sys.stderr)
                    rc = 1
            rc = rc if isinstance(rc, int) else 1
        except BaseException:  # noqa: BLE001 - an escaped exception: the interpreter's traceback, exit 1
            traceback.print_exc()
            rc = 1
        finally:
            with contextlib.suppress(BaseException):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(rc & 0xFF)
    os.close(out_fd)
    os.close(err_fd)
    deadline = t0 + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), time.monotonic() - t0
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None, time.monotonic() - t0
        time.sleep(0.005)


def _guard() -> None:
    """A case must never start a real smoke run or a candidate's lanes (minutes of compiles, and writes)."""
    from nsa_triton_sel.compat.commands import upgrade  # noqa: PLC0415
    from nsa_triton_sel.compat.smoke import cli as smoke_cli  # noqa: PLC0415

    def refuse(*args, **kwargs):
        print("cli_fuzz: this case got past the checks and started a real run", file=sys.stderr)
        os._exit(99)

    smoke_cli.run_smoke = refuse
    upgrade.run_candidate = refuse


def _run_fresh(argv: list[str], cwd: Path, env: dict, io_dir: Path, timeout: float) -> tuple[int | None, float]:
    t0 = time.monotonic()
    with open(io_dir / "stdout", "wb") as out, open(io_dir / "stderr", "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "nsa_triton_sel.compat.commands.cli", *argv], cwd=cwd, env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True)
        try:
            return proc.wait(timeout=timeout), time.monotonic() - t0
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return None, time.monotonic() - t0


def run_case(case: Case, template: Path, work: Path, timeout: float = TIMEOUT_S) -> Outcome:
    """Copy the template to ``work``, damage it, run the case; the outcome with what changed."""
    root = work / "root"
    if root.exists() or root.is_symlink():
        _force_rmtree(root)
    # Hard links: a copy costs a directory walk, not the files (damage() and the commands' atomic writes
    # replace a file, never write through it; main() checks that the template came through unchanged).
    shutil.copytree(template, root, symlinks=True, copy_function=os.link)
    _apply(root, case.damages)
    io_dir = work / "io"
    io_dir.mkdir(exist_ok=True)
    argv = [_fill(a, root) for a in case.argv]
    before = snapshot(root)
    run = _run_fresh if case.fresh else _run_forked
    rc, seconds = run(argv, root, child_env(root, case.env), io_dir, timeout)
    after = snapshot(root)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    read = lambda name: (io_dir / name).read_bytes().decode("utf-8", "backslashreplace")  # noqa: E731
    return Outcome(rc, read("stdout"), read("stderr"), seconds, changed)


def _force_rmtree(path: Path) -> None:
    for dirpath, dirnames, _ in os.walk(path):
        for d in dirnames:
            with contextlib.suppress(OSError):
                os.chmod(os.path.join(dirpath, d), 0o755, follow_symlinks=False)
    shutil.rmtree(path)


def problems(case: Case, got: Outcome) -> list[str]:
    """What is wrong with ``got`` (empty: the case passed)."""
    out = []
    if got.rc is None:
        return [f"hung: killed after {got.seconds:.0f} s"]
    allowed = case.rc if case.rc is not None else EXIT_CODES[case.command]
    if got.rc not in allowed:
        out.append(f"exit status {got.rc}, expected one of {sorted(allowed)}")
    has_tb = "Traceback (most recent call last)" in got.err + got.out
    if case.debug:
        if not has_tb:
            out.append("--debug showed no traceback")
    elif has_tb:
        out.append("a traceback")
    lines = [ln for ln in got.err.splitlines() if ln.strip()]
    if got.rc == 2 and not case.debug:
        prefix = f"nsa-sel {case.command}" if case.command else "nsa-sel"
        if len(lines) != 1:
            out.append(f"{len(lines)} lines on stderr, expected exactly one")
        elif not lines[0].startswith(prefix):
            out.append(f"the error line does not start with {prefix!r}")
    if case.err and not re.search(case.err, got.err):
        out.append(f"stderr does not match {case.err!r}")
    may = ()
    if got.rc in (0, 1):
        may = MAY_WRITE.get(case.command, ()) + tuple(v for k, v in zip(case.argv, case.argv[1:]) if k in OUTPUTS)
    bad = [p for p in got.changed if (not may or not p.startswith(may)) and not p.startswith(case.ignore or ("\0",))]
    if bad:
        out.append(f"wrote {', '.join(bad[:4])}{' ...' if len(bad) > 4 else ''} (exit {got.rc})")
    return out


def scratch_dir() -> Path:
    """A new directory for the cases: in /dev/shm where there is one (removing a case's files from memory is
    an order of magnitude faster than from the CI box's disk), else the system's temporary directory."""
    shm = Path("/dev/shm")
    where = shm if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) else None
    return Path(tempfile.mkdtemp(prefix="nsa-cli-fuzz-", dir=where))


def prepare() -> None:
    """Import what the commands import and compute the cached fingerprint once, before any fork."""
    from nsa_triton_sel.compat.commands import cli, doctor, releases, standing, team_matrix, upgrade  # noqa: F401, PLC0415
    from nsa_triton_sel.compat import ledger  # noqa: F401, PLC0415
    from nsa_triton_sel.compat.core import env  # noqa: F401, PLC0415
    from nsa_triton_sel.compat.smoke import cli as smoke_cli  # noqa: F401, PLC0415

    env.fingerprint()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.compat.commands.cli_fuzz", description=__doc__.split("\n\n")[0])
    p.add_argument("-k", help="only cases whose name contains this")
    p.add_argument("--list", action="store_true", help="list the cases")
    p.add_argument("--all", action="store_true", help="every case (default: the test suite's sample)")
    p.add_argument("-v", "--verbose", action="store_true", help="print every case's outcome")
    args = p.parse_args(argv)
    cases = [c for c in (all_cases() if args.all else sample()) if not args.k or args.k in c.name]
    if args.list:
        print("\n".join(c.name for c in cases))
        print(f"{len(cases)} cases")
        return 0
    t0 = time.monotonic()
    prepare()
    base = scratch_dir()
    failed, slow = 0, []
    try:
        template = build_template(base / "template")
        print(f"template built in {time.monotonic() - t0:.1f} s; {len(cases)} cases", flush=True)
        for case in cases:
            got = run_case(case, template, base / "work")
            bad = problems(case, got)
            slow.append((got.seconds, case.name))
            if bad or args.verbose:
                print(f"{'FAIL' if bad else 'ok  '} {case.name} [{got.rc}, {got.seconds:.2f} s] {'; '.join(bad)}")
                if bad:
                    print("     stderr: " + got.err.strip().replace("\n", "\n             ")[-1500:])
                failed += bool(bad)
    finally:
        _force_rmtree(base)
    slow.sort(reverse=True)
    print(f"{len(cases) - failed}/{len(cases)} passed in {time.monotonic() - t0:.1f} s; slowest: "
          + ", ".join(f"{n} {s:.1f} s" for s, n in slow[:5]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
