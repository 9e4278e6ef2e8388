"""Records that predate ``compiler_hash`` / ``runtime_hash`` get the hashes of their (clean) commit."""

from __future__ import annotations

import subprocess

import ledger_factory as F
from nsa_triton_sel import provenance
from nsa_triton_sel.compat.ledger import backfill

FILES = {"kernels/forward.py": b"x = 1\n", "kernels/bind.py": b"bind = 1\n", "plan/tiles.py": b"TILE = 64\n",
         "api.py": b"api = 1\n", "data/known_bad.toml": b"schema = 1\n", "compat/commands/cli.py": b"toolkit = 1\n",
         "kernels/notes.txt": b"not a source\n"}


def _repo(tmp_path, files=FILES):
    pkg = tmp_path / "src" / "nsa_triton_sel"
    for name, body in files.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_bytes(body)
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "k"], check=True)
    sha = subprocess.run(git[:3] + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    return sha, pkg


def test_clean_commits_get_their_hashes_dirty_or_missing_ones_stay_unknown(tmp_path):
    sha, pkg = _repo(tmp_path)
    base = F.recs("3.9", "compile", ["pass"])[0]
    recs = [{**base, "git_commit": sha}, {**base, "git_commit": sha + "-dirty"}, {**base, "git_commit": None},
            {**base, "git_commit": "f" * 40}, {**base, "compiler_hash": "kept"}]
    out, counts = backfill.backfill(recs, tmp_path)
    assert out[0]["compiler_hash"] == provenance.hash_sources({"kernels/forward.py": b"x = 1\n",
                                                               "plan/tiles.py": b"TILE = 64\n"})
    assert out[0]["compiler_hash"] == provenance.compiler_hash(pkg)  # same rules as a checkout
    assert out[0]["runtime_hash"] == provenance.runtime_hash(pkg)
    assert out[0]["hashes_from"] == f"git {sha}"
    assert [r["compiler_hash"] for r in out[1:4]] == [None, None, None]
    assert "uncommitted" in out[1]["hashes_from"] and "no commit" in out[2]["hashes_from"]
    assert "not in this clone" in out[3]["hashes_from"]
    assert out[4] == recs[4]
    assert sum(counts.values()) == 4


def test_a_legacy_kernel_hash_that_the_commit_does_not_match_stays_unknown(tmp_path):
    """A run with uncommitted kernel edits named a clean commit (NSA_SEL_GIT_COMMIT on a copy): its
    older kernel_hash tells, and the record is not given that commit's hashes."""
    sha, _ = _repo(tmp_path)
    legacy = provenance.hash_sources({"forward.py": b"x = 1\n", "bind.py": b"bind = 1\n"})  # kernels/*.py by base name
    base = F.recs("3.9", "parity", ["pass"])[0]
    out, _ = backfill.backfill([{**base, "git_commit": sha, "kernel_hash": legacy},
                                {**base, "git_commit": sha, "kernel_hash": "0" * 16}], tmp_path)
    assert out[0]["compiler_hash"] and out[0]["hashes_from"] == f"git {sha}"
    assert out[1]["compiler_hash"] is None and "uncommitted kernel edits" in out[1]["hashes_from"]


def test_hash_ignores_line_endings_and_changes_with_any_source():
    a = provenance.hash_sources({"forward.py": b"x = 1\n", "meta.py": b"y\n"})
    assert a == provenance.hash_sources({"meta.py": b"y\r\n", "forward.py": b"x = 1\r\n"})
    assert a != provenance.hash_sources({"forward.py": b"x = 2\n", "meta.py": b"y\n"})
    assert len(a) == 16
