"""Records that predate ``kernel_hash`` get the hash of the kernel sources at their (clean) commit."""

from __future__ import annotations

import subprocess

import ledger_factory as F
from nsa_triton_sel import provenance
from nsa_triton_sel.compat.ledger import backfill


def _repo(tmp_path):
    kdir = tmp_path / "src" / "nsa_triton_sel" / "kernels"
    kdir.mkdir(parents=True)
    (kdir / "forward.py").write_text("x = 1\n")
    (kdir / "notes.txt").write_text("not a source\n")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "k"], check=True)
    sha = subprocess.run(git[:3] + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    return sha, kdir


def test_clean_commits_get_their_hash_dirty_or_missing_ones_stay_unknown(tmp_path):
    sha, kdir = _repo(tmp_path)
    base = F.recs("3.9", "compile", ["pass"])[0]
    recs = [{**base, "git_commit": sha}, {**base, "git_commit": sha + "-dirty"}, {**base, "git_commit": None},
            {**base, "git_commit": "f" * 40}, {**base, "kernel_hash": "kept"}]
    out, counts = backfill.backfill(recs, tmp_path)
    assert out[0]["kernel_hash"] == provenance.hash_sources({"forward.py": b"x = 1\n"})
    assert out[0]["kernel_hash"] == provenance.kernel_source_hash(kdir)  # same rule as a checkout
    assert out[0]["kernel_hash_from"] == f"git {sha}"
    assert [r["kernel_hash"] for r in out[1:4]] == [None, None, None]
    assert "uncommitted" in out[1]["kernel_hash_from"] and "no commit" in out[2]["kernel_hash_from"]
    assert out[4] == recs[4]
    assert sum(counts.values()) == 4


def test_hash_ignores_line_endings_and_changes_with_any_source():
    a = provenance.hash_sources({"forward.py": b"x = 1\n", "meta.py": b"y\n"})
    assert a == provenance.hash_sources({"meta.py": b"y\r\n", "forward.py": b"x = 1\r\n"})
    assert a != provenance.hash_sources({"forward.py": b"x = 2\n", "meta.py": b"y\n"})
    assert len(a) == 16
