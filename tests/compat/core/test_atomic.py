"""Crash-safe writes: one file, several files as one commit (journal, roll forward), the lock."""

from __future__ import annotations

import os
import stat
import threading
import time

import pytest

from nsa_triton_sel.compat.core import atomic


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path):
    path = tmp_path / "sub" / "f.txt"
    atomic.atomic_write_text(path, "one")
    atomic.atomic_write_text(path, "two")
    assert path.read_text() == "two"
    assert os.listdir(path.parent) == ["f.txt"]


def test_atomic_write_keeps_the_mode(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("x")
    os.chmod(path, 0o640)
    atomic.atomic_write_text(path, "y")
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_atomic_write_failure_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "ledger.jsonl"
    atomic.atomic_write_text(path, '{"a": 1}\n')

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(atomic.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        atomic.atomic_write_text(path, '{"a": 2}\n{"trunc')
    assert path.read_text() == '{"a": 1}\n'
    assert os.listdir(tmp_path) == ["ledger.jsonl"]


def test_commit_replaces_every_file_and_removes_the_journal(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("old a")
    journal = atomic.journal_path(a)
    atomic.commit({a: "new a", b: "new b"}, journal)
    assert (a.read_text(), b.read_text()) == ("new a", "new b")
    assert sorted(os.listdir(tmp_path)) == ["a", "b"]


def test_recover_rolls_a_commit_forward_after_its_commit_point(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("old a")
    b.write_text("old b")
    journal = atomic.journal_path(a)
    real, calls = os.replace, []

    def die_after_first_rename(src, dst):
        calls.append(dst)
        if len(calls) == 3:  # journal, a: renamed; b: not yet
            raise KeyboardInterrupt
        return real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", die_after_first_rename)
    with pytest.raises(KeyboardInterrupt):
        atomic.commit({a: "new a", b: "new b"}, journal)
    monkeypatch.setattr(atomic.os, "replace", real)
    assert (a.read_text(), b.read_text()) == ("new a", "old b") and journal.exists()  # torn, but journaled
    assert "finished an interrupted commit" in atomic.recover(journal, [a, b])
    assert (a.read_text(), b.read_text()) == ("new a", "new b") and not journal.exists()
    assert atomic.recover(journal, [a, b]) is None


def test_recover_removes_temporaries_of_a_commit_killed_before_its_commit_point(tmp_path):
    a = tmp_path / "a"
    a.write_text("old")
    (tmp_path / ".a.xyz.tmp").write_text("half")
    assert "removed .a.xyz.tmp" in atomic.recover(atomic.journal_path(a), [a])
    assert os.listdir(tmp_path) == ["a"] and a.read_text() == "old"


def test_a_foreign_journal_is_not_guessed_at(tmp_path):
    a = tmp_path / "a"
    atomic.journal_path(a).write_text('{"something": "else"}')
    with pytest.raises(ValueError, match="not a commit journal"):
        atomic.recover(atomic.journal_path(a), [a])


def test_lock_excludes_a_second_holder(tmp_path):
    anchor = tmp_path / "ledger.jsonl"
    order = []

    def second():
        with atomic.locked(anchor):
            order.append("second")

    with atomic.locked(anchor):
        t = threading.Thread(target=second)
        t.start()
        time.sleep(0.3)
        order.append("first done")
    t.join(timeout=30)
    assert order == ["first done", "second"]
    with atomic.locked(anchor), pytest.raises(TimeoutError, match="is locked by another process"):
        with atomic.locked(anchor, timeout=0.1):
            pass


def test_the_lock_file_is_removed_on_release_even_after_an_error(tmp_path):
    """The lock file goes even when the locked work raises: a refused pin must not leave a stale .lock behind."""
    anchor = tmp_path / "ledger.jsonl"
    with pytest.raises(ValueError, match="refused"), atomic.locked(anchor):
        assert (tmp_path / ".ledger.jsonl.lock").exists()
        raise ValueError("refused")
    assert list(tmp_path.iterdir()) == []


def test_a_waiter_that_locked_a_removed_lock_file_starts_over(tmp_path, monkeypatch):
    """The half of the protocol that makes removing the file safe: a lock on a file that is no longer at the
    path does not count (its holder removed it), so two holders can never overlap."""
    anchor = tmp_path / "ledger.jsonl"
    lock = tmp_path / ".ledger.jsonl.lock"
    real_open, swapped = os.open, []

    def open_then_swap(path, flags, *args):
        fd = real_open(path, flags, *args)
        if str(path) == str(lock) and not swapped:  # another pin removes and re-creates it right after our open
            swapped.append(True)
            os.unlink(lock)
            os.close(real_open(lock, os.O_CREAT | os.O_WRONLY, 0o644))
        return fd

    monkeypatch.setattr(os, "open", open_then_swap)
    with atomic.locked(anchor):
        held = os.stat(lock)
    assert swapped and not lock.exists()
    assert held.st_nlink == 1  # the file it holds is the one at the path


@pytest.mark.parametrize("text, needle", [
    ('{"x": NaN}', "NaN is not JSON"), ('[Infinity]', "Infinity is not JSON"), ("[-Infinity]", "-Infinity is not JSON"),
    ('{"x": 1e400}', "out of range"), ("[" * 100000, "nested deeper"), ("9" * 5000, "not readable as JSON"),
    ('{"a": ', "not valid JSON"),
])
def test_strict_json_refuses_what_json_loads_takes_silently(text, needle):
    with pytest.raises(ValueError, match=needle):
        atomic.loads_json(text)
    assert atomic.loads_json('{"a": [1, 2.5e3, "x", null]}') == {"a": [1, 2500.0, "x", None]}


def test_strict_json_is_never_written_with_nan():
    with pytest.raises(ValueError):
        atomic.dumps_json({"x": float("nan")})


@pytest.mark.parametrize("make, needle", [
    (lambda p: p.mkdir(), "is a directory"),
    (lambda p: os.mkfifo(p), "is a FIFO"),
    (lambda p: p.symlink_to(p.name), "cannot be written"),
])
def test_check_output_refuses_what_is_not_a_file_path(tmp_path, make, needle):
    target = tmp_path / "out.json"
    make(target)
    with pytest.raises(atomic.FileProblem, match=needle):
        atomic.check_output(target, "--json")
    with pytest.raises(atomic.FileProblem, match="does not exist"):
        atomic.check_output(tmp_path / "no" / "out.json", "--json")
    assert atomic.check_output(tmp_path / "new.json", "--json") == tmp_path / "new.json"


def test_a_sparse_huge_file_is_refused_by_its_size_unread(tmp_path):
    big = tmp_path / "ledger.jsonl"
    with open(big, "wb") as f:
        f.truncate(atomic.READ_LIMIT + 1)
    with pytest.raises(atomic.FileProblem, match="larger than 256 MiB"):
        atomic.read_text(big)
