"""Crash-safe writes: one file, several files as one commit (journal, roll forward), the lock."""

from __future__ import annotations

import os
import stat
import threading
import time

import pytest

from nsa_triton_sel.compat import atomic


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
