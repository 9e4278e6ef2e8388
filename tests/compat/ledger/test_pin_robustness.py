"""``nsa-sel pin`` under hostile or broken files.

Every failure must be one clear line naming the file and exit status 2, with nothing written:
never a traceback, a hang, a file renamed outside the constraints directory, or a verdict ignored.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import ledger_factory as F
from nsa_triton_sel.compat.core import atomic
from nsa_triton_sel.compat import ledger


def _paths(cdir: Path) -> tuple[Path, Path, Path]:
    return cdir / "ledger.jsonl", cdir / "MATRIX.md", cdir / "known-good.txt"


def _pin(cdir, *results, extra=()):
    return ledger.main(["--constraints", str(cdir), *[f"--results={r}" for r in results], *extra])


@pytest.fixture
def pinned(tmp_path):
    """A constraints directory with one real pin done (3.1 and 3.9 pass), and its results directory."""
    cdir, results = F.constraints_dir(tmp_path), tmp_path / "results"
    F.write_runs(results, F.all_pass("3.1") + F.all_pass("3.9"))
    assert _pin(cdir, results) == 0
    return cdir, results


def _snapshot(cdir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(cdir.iterdir()) if p.is_file() and p.suffix != ".lock"}


def _one_line_error(capsys, *needles) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("nsa-sel pin: "), err
    for n in needles:
        assert n in err, err
    return err


# ---------------------------------------------------------------- item 1: the commit journal


def test_a_journal_naming_a_file_outside_the_directory_renames_nothing(pinned, tmp_path, capsys):
    cdir, results = pinned
    victim, payload = tmp_path / "victim", tmp_path / "payload"
    victim.write_text("precious")
    payload.write_text("attacker's text")
    atomic.journal_path(cdir / "ledger.jsonl").write_text(
        json.dumps({"kind": "nsa-sel-commit", "files": [[str(victim), str(payload)]]}))
    before = _snapshot(cdir)
    assert _pin(cdir, results) == 2
    _one_line_error(capsys, str(victim), "not one of the files it may replace")
    assert victim.read_text() == "precious" and payload.read_text() == "attacker's text"
    assert _snapshot(cdir) == before


def test_a_journal_whose_temporary_lies_elsewhere_renames_nothing(pinned, tmp_path, capsys):
    cdir, results = pinned
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("someone's file")
    atomic.journal_path(cdir / "ledger.jsonl").write_text(json.dumps(
        {"kind": "nsa-sel-commit", "files": [[str(cdir / "known-good.txt"), str(elsewhere)]]}))
    assert _pin(cdir, results) == 2
    _one_line_error(capsys, "is not a temporary of")
    assert elsewhere.read_text() == "someone's file"


@pytest.mark.parametrize("text", ["garbage", '{"kind": "nsa-sel-commit", "files": [[1, 2]]}', "[]", "\xff\xfe"])
def test_a_garbage_journal_is_a_clear_error(pinned, capsys, text):
    cdir, results = pinned
    atomic.journal_path(cdir / "ledger.jsonl").write_text(text, encoding="latin-1")
    assert _pin(cdir, results) == 2
    _one_line_error(capsys, "not a commit journal")


def test_recovery_still_finishes_its_own_interrupted_commit(pinned):
    """The refusals above must not stop the roll-forward of a real journal (written by commit)."""
    cdir, _ = pinned
    paths = _paths(cdir)
    staged = {p: atomic._stage(atomic.write_target(p), f"new {p.name}\n") for p in paths}
    journal = atomic.journal_path(paths[0])
    journal.write_text(json.dumps({"kind": "nsa-sel-commit", "files": [[str(p), str(t)] for p, t in staged.items()]}))
    assert "finished an interrupted commit" in atomic.recover(journal, list(paths))
    assert [p.read_text() for p in paths] == [f"new {p.name}\n" for p in paths] and not journal.exists()


# ---------------------------------------------------------------- item 2: a wrong --ledger


def test_a_ledger_in_a_missing_directory_is_refused_and_nothing_is_created(pinned, tmp_path, capsys):
    cdir, results = pinned
    before = _snapshot(cdir)
    wrong = tmp_path / "missing" / "dir" / "ledger.jsonl"
    assert _pin(cdir, results, extra=["--ledger", str(wrong)]) == 2
    _one_line_error(capsys, "does not exist")
    assert not (tmp_path / "missing").exists() and _snapshot(cdir) == before


@pytest.mark.parametrize("empty_file", [False, True])
def test_a_missing_or_empty_ledger_does_not_overwrite_known_good(pinned, tmp_path, capsys, empty_file):
    cdir, _ = pinned
    other = tmp_path / "r2"
    F.write_runs(other, F.recs("3.5", "compile", ["pass"]))
    wrong = cdir / "typo.jsonl"
    if empty_file:
        wrong.write_text("")
    before = _snapshot(cdir)
    assert _pin(cdir, other, extra=["--ledger", str(wrong)]) == 2
    _one_line_error(capsys, "was rendered from a ledger with records", "--reset")
    assert _snapshot(cdir) == before
    assert _pin(cdir, other, extra=["--ledger", str(wrong), "--reset"]) == 0  # said explicitly: a new ledger


# ---------------------------------------------------------------- item 3: releases spelled otherwise


def test_a_record_for_3_9_counts_as_3_9_0(pinned, tmp_path):
    cdir, _ = pinned
    later = tmp_path / "later"
    recs = F.recs("3.9", "parity", ["fail"], "2026-11-23T00:00:00+00:00")
    for r in recs:
        r["triton"] = r["triton_imported"] = "3.9"  # valid PEP 440, the table says 3.9.0
    F.write_runs(later, recs)
    assert _pin(cdir, later) == 0
    kg = _paths(cdir)[2].read_text()
    assert "# excluded  3.9.0" in kg and "parity fail" in kg
    assert {r["triton"] for r in ledger.load_ledger(_paths(cdir)[0])} == {"3.1.0", "3.9.0"}


def test_a_record_for_a_release_not_in_the_table_is_refused(pinned, tmp_path, capsys):
    cdir, _ = pinned
    later = tmp_path / "later"
    recs = F.recs("3.9", "parity", ["fail"], "2026-11-23T00:00:00+00:00")
    for r in recs:
        r["triton"] = r["triton_imported"] = "3.10.0"
    F.write_runs(later, recs)
    before = _snapshot(cdir)
    assert _pin(cdir, later) == 2
    _one_line_error(capsys, "'3.10.0'", "not a release of the table", "check-upgrade 3.10.0 --admit")
    assert _snapshot(cdir) == before


# ---------------------------------------------------------------- item 5: odd files and links


def test_an_unreadable_results_directory_is_an_error(pinned, monkeypatch, capsys):
    cdir, results = pinned
    before = _snapshot(cdir)
    real_scandir, real_listdir = os.scandir, os.listdir

    def deny(fn):
        def wrapped(path="."):
            if Path(path) == results:
                raise PermissionError(errno.EACCES, "Permission denied", str(path))
            return fn(path)
        return wrapped

    monkeypatch.setattr(os, "scandir", deny(real_scandir))  # what glob() uses (and then stays silent)
    monkeypatch.setattr(os, "listdir", deny(real_listdir))
    assert _pin(cdir, results) == 2
    _one_line_error(capsys, str(results), "Permission denied")
    assert _snapshot(cdir) == before


def test_a_fifo_named_json_is_an_error_not_a_hang(pinned, capsys):
    cdir, results = pinned
    os.mkfifo(results / "parity-9.9.json")
    rc = []
    t = threading.Thread(target=lambda: rc.append(_pin(cdir, results)), daemon=True)
    t.start()
    t.join(timeout=20)
    assert rc == [2], "pin hung on a FIFO"
    _one_line_error(capsys, "is a FIFO, not a regular file")


def test_a_link_to_dev_zero_is_an_error_not_an_endless_read(pinned):
    cdir, results = pinned
    (results / "zero.json").symlink_to("/dev/zero")
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)); "
            "from nsa_triton_sel.compat import ledger; sys.exit(ledger.main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", code, "--constraints", str(cdir), "--results", str(results)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "is a character device, not a regular file" in proc.stderr, proc.stderr[-500:]


def test_symlinked_files_stay_symlinks_and_their_targets_are_updated(pinned, tmp_path):
    cdir, results = pinned
    real = tmp_path / "real"
    real.mkdir()
    for p in _paths(cdir):
        (real / p.name).write_bytes(p.read_bytes())
        p.unlink()
        p.symlink_to(real / p.name)
    later = tmp_path / "later"
    F.write_runs(later, F.recs("3.5", "compile", ["pass"]))
    assert _pin(cdir, later) == 0
    assert all(p.is_symlink() for p in _paths(cdir))
    assert any(r["triton"] == "3.5.1" for r in ledger.load_ledger(real / "ledger.jsonl"))
    assert ledger.verify(*_paths(cdir)) == [] and ledger.verify(*(real / p.name for p in _paths(cdir))) == []
    assert not list(real.glob(".*.tmp")) and not list(cdir.glob(".*.tmp"))


# ---------------------------------------------------------------- item 6: clean errors, not tracebacks

_NESTED = "[" * 100_000 + "]" * 100_000
_BIG_INT = "1" * 5000


@pytest.mark.parametrize("text, needle", [
    (b"\x00\xff\xfe binary \x80", "not UTF-8 text"),
    (_NESTED.encode(), "nested deeper than the JSON parser goes"),
    (f'{{"kind": "lane-run", "n": {_BIG_INT}}}'.encode(), "not a lane run file"),
])
def test_a_bad_results_file_is_one_line(pinned, capsys, text, needle):
    cdir, results = pinned
    (results / "bad.json").write_bytes(text)
    before = _snapshot(cdir)
    assert _pin(cdir, results) == 2
    _one_line_error(capsys, str(results / "bad.json"), needle)
    assert _snapshot(cdir) == before


@pytest.mark.parametrize("line", [b"\xff\xfe\x00", _NESTED.encode(), f'{{"n": {_BIG_INT}}}'.encode()])
def test_a_bad_ledger_is_one_line(pinned, capsys, line):
    cdir, results = pinned
    path = _paths(cdir)[0]
    path.write_bytes(path.read_bytes() + line + b"\n")
    assert _pin(cdir, results) == 2
    _one_line_error(capsys, str(path))


@pytest.mark.parametrize("field, value", [("message", 5), ("date", 5), ("date", "yesterday"), ("lane", 3.1),
                                          ("kernel", ["k"]), ("machine", 7), ("metrics", "fast"),
                                          ("metrics", {"seconds": {"deep": 1}}), ("metrics", {"median_s": "slow"}),
                                          ("arch", "90")])
def test_a_field_of_the_wrong_type_is_refused(pinned, tmp_path, capsys, field, value):
    cdir, _ = pinned
    later = tmp_path / "later"
    recs = F.recs("3.5", "compile", ["fail"])
    recs[0][field] = value
    F.write_runs(later, recs)
    before = _snapshot(cdir)
    assert _pin(cdir, later) == 2
    _one_line_error(capsys, f"`{field}`" if field != "metrics" or isinstance(value, str) else "metric")
    assert _snapshot(cdir) == before


@pytest.mark.parametrize("which", ["ledger.jsonl", "known-good.txt", "MATRIX.md"])
def test_a_directory_in_place_of_a_file_is_one_line_and_nothing_is_written(pinned, tmp_path, capsys, which):
    cdir, results = pinned
    (cdir / which).unlink()
    (cdir / which).mkdir()
    later = tmp_path / "later"
    F.write_runs(later, F.recs("3.5", "compile", ["pass"]))
    before = _snapshot(cdir)
    assert _pin(cdir, later) == 2
    _one_line_error(capsys, which, "is a directory")
    assert _snapshot(cdir) == before and not atomic.journal_path(cdir / "ledger.jsonl").exists()


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EROFS])
def test_a_full_disk_or_read_only_filesystem_is_one_line_and_nothing_changes(pinned, tmp_path, monkeypatch,
                                                                              capsys, err):
    cdir, _ = pinned
    later = tmp_path / "later"
    F.write_runs(later, F.recs("3.5", "compile", ["pass"]))
    before = _snapshot(cdir)
    calls = []

    def failing_mkstemp(*args, dir=None, **kw):
        calls.append(dir)
        if len(calls) == 2:  # the second staged file: the first is already written beside its target
            raise OSError(err, os.strerror(err), str(dir))
        return real_mkstemp(*args, dir=dir, **kw)

    real_mkstemp = atomic.tempfile.mkstemp
    monkeypatch.setattr(atomic.tempfile, "mkstemp", failing_mkstemp)
    assert _pin(cdir, later) == 2
    _one_line_error(capsys, os.strerror(err), "nothing written")
    assert _snapshot(cdir) == before and not list(cdir.glob(".*.tmp"))


def test_a_lane_patch_that_is_not_a_table_is_one_line(pinned, capsys):
    cdir, results = pinned
    toml = cdir / "lanes.toml"
    toml.write_text(toml.read_text().replace('[[lane]]\nlabel = "3.9"', '[[lane]]\npatch = "x"\nlabel = "3.9"'))
    assert _pin(cdir, results) == 2
    _one_line_error(capsys, "`patch` must be [[lane.patch]] tables")


def test_a_binary_lanes_toml_is_one_line(pinned, capsys):
    cdir, results = pinned
    (cdir / "lanes.toml").write_bytes(b"\x00\xff\xfe")
    assert _pin(cdir, results) == 2
    _one_line_error(capsys, "lanes.toml", "not UTF-8 text")


@pytest.mark.parametrize("which", ["ledger.jsonl", "known-good.txt"])
def test_an_unreadable_ledger_or_known_good_is_one_line(pinned, monkeypatch, capsys, which):
    """Tests run as root, where chmod 000 does not stop a read: the open() is refused instead."""
    cdir, results = pinned
    real_open, denied = os.open, str(cdir / which)

    def deny(path, flags, *args, **kwargs):
        if str(path) == denied:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", deny)
    rc = _pin(cdir, results, extra=["--check"] if which == "known-good.txt" else [])
    assert rc == 2
    _one_line_error(capsys, which, "unreadable (Permission denied)")
