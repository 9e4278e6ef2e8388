"""Property-based fuzz of ``nsa-sel pin`` under bad files.

Each example starts from a consistent constraints directory (ledger, MATRIX.md, known-good.txt,
lanes.toml) plus a results directory, breaks one to three things (random bytes, truncation, a
field of a record set to any JSON value, an odd version spelling, a directory / FIFO / link to
``/dev/zero`` / dangling link in place of a file, deep nesting, a 5000-digit number, a forged
journal), runs the command, and checks:

- never a traceback or a hang: exit 0, or exit 2 with exactly one line ``nsa-sel pin: ...``;
- exit 2 changes nothing (the three files, lanes.toml, a file outside the directory);
- exit 0 leaves the three files one generation, every record naming a release of the table
  exactly as the table spells it, no release admitted that has a bad record of a required check,
  links still links, and no temporary or journal behind;
- no file outside the directory is ever renamed or written, whatever the journal says.

Seeded (``derandomize``) and bounded, so it is reproducible and quick (< 60 s on 2 cores).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import ledger_factory as F  # noqa: E402
from nsa_triton_sel.compat.core import atomic  # noqa: E402
from nsa_triton_sel.compat import ledger  # noqa: E402
from nsa_triton_sel.compat.core.verdicts import BAD  # noqa: E402

MAX_EXAMPLES = int(os.environ.get("NSA_SEL_FUZZ_EXAMPLES", "500"))
THREE = ("ledger.jsonl", "MATRIX.md", "known-good.txt")
FILES = (*THREE, "lanes.toml", "results/compile-3.1.json", "results/parity-3.1.json", "results/parity-3.5.json")
RECORD_FILES = ("ledger.jsonl", "results/compile-3.1.json", "results/parity-3.1.json", "results/parity-3.5.json")
FIELDS = ("schema", "lane", "triton", "check", "mode", "kernel", "verdict", "message", "metrics", "date", "machine",
          "arch", "run_id", "session", "triton_imported", "process", "candidate", "knobs", "extra_field")
VERSIONS = ("3.9", "3.9.0", "3.1", "3.1.0.0", "v3.1.0", "3.10.0", "3.5.1", "3.5.1+local", "2.3.1", "garbage", "",
            "3.01.0")


def _template() -> Path:
    """One consistent constraints directory and results directory, built once, copied per example."""
    root = Path(tempfile.mkdtemp(prefix="nsa-fuzz-template-"))
    cdir, first, results = F.constraints_dir(root), root / "first", root / "results"
    F.write_runs(first, F.all_pass("3.1") + F.all_pass("3.9"))
    with contextlib.redirect_stdout(io.StringIO()):
        assert ledger.main(["--constraints", str(cdir), "--results", str(first)]) == 0
    later = "2026-11-23T00:00:00+00:00"
    F.write_runs(results, F.recs("3.1", "compile", ["pass", "fail"], later) + F.recs("3.1", "parity", ["pass"], later)
                 + F.recs("3.5", "parity", ["pass", "skip"], later))
    shutil.rmtree(first)
    return root


@pytest.fixture(scope="module")
def template():
    root = _template()
    yield root
    shutil.rmtree(root, ignore_errors=True)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6)

mutation = st.one_of(
    st.tuples(st.just("bytes"), st.sampled_from(FILES), st.binary(max_size=64)),
    st.tuples(st.just("truncate"), st.sampled_from(FILES), st.floats(0, 1)),
    st.tuples(st.just("field"), st.sampled_from(RECORD_FILES), st.integers(0, 9), st.sampled_from(FIELDS), json_values),
    st.tuples(st.just("version"), st.sampled_from(RECORD_FILES), st.integers(0, 9),
              st.sampled_from(VERSIONS) | st.text(max_size=8)),
    st.tuples(st.just("doc"), st.sampled_from(RECORD_FILES[1:]), st.sampled_from(("kind", "status", "records", "base")),
              json_values),
    st.tuples(st.just("special"), st.sampled_from(FILES),
              st.sampled_from(("dir", "fifo", "devzero", "dangling", "link"))),
    st.tuples(st.just("huge"), st.sampled_from(RECORD_FILES), st.sampled_from(("deep", "bigint", "nan"))),
    st.tuples(st.just("journal"), st.sampled_from(("attack", "tmp-elsewhere", "garbage", "json")), json_values),
)


def _records_of(path: Path) -> tuple[list, callable]:
    """The records of a ledger or run file and a function writing them back (None: not parseable now)."""
    text = path.read_text()
    if path.name == "ledger.jsonl":
        rows = [json.loads(ln) for ln in text.splitlines() if ln.strip()]
        return rows, lambda rs: path.write_text("".join(json.dumps(r) + "\n" for r in rs))
    doc = json.loads(text)
    return doc["records"], lambda rs: path.write_text(json.dumps({**doc, "records": rs}))


def _apply(root: Path, m: tuple) -> None:
    cdir, outside = root / "constraints", root / "outside"
    kind = m[0]
    path = (root / m[1]) if kind not in ("journal",) and m[1].startswith("results/") else cdir / m[1] \
        if kind != "journal" else None
    if path is not None and not path.is_file():
        return  # an earlier mutation already replaced it
    if kind == "bytes":
        path.write_bytes(m[2])
    elif kind == "truncate":
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * m[2])])
    elif kind in ("field", "version"):
        try:
            recs, put = _records_of(path)
        except (ValueError, KeyError, TypeError, RecursionError):
            return
        if recs and isinstance(recs, list) and isinstance(recs[m[2] % len(recs)], dict):
            rec = recs[m[2] % len(recs)]
            if kind == "field":
                rec[m[3]] = m[4]
            else:
                rec["triton"] = rec["triton_imported"] = m[3]
            put(recs)
    elif kind == "doc":
        try:
            doc = json.loads(path.read_text())
        except (ValueError, RecursionError):
            return
        if not isinstance(doc, dict):
            return
        doc[m[2]] = m[3]
        path.write_text(json.dumps(doc))
    elif kind == "special":
        path.unlink()
        if m[2] == "dir":
            path.mkdir()
        elif m[2] == "fifo":
            os.mkfifo(path)
        elif m[2] == "devzero":
            path.symlink_to("/dev/zero")
        elif m[2] == "dangling":
            path.symlink_to(root / "nowhere" / "file")
        else:  # a link to a copy elsewhere (a symlinked ledger/MATRIX/known-good is legitimate)
            target = root / "linked" / path.name
            target.parent.mkdir(exist_ok=True)
            shutil.copy(root / "pristine" / m[1], target)
            path.symlink_to(target)
    elif kind == "huge":
        text = {"deep": "[" * 50_000 + "]" * 50_000, "bigint": '{"n": ' + "9" * 5000 + "}",
                "nan": None}[m[2]]
        if text is None:
            try:
                recs, put = _records_of(path)
            except (ValueError, KeyError, TypeError, RecursionError):
                return
            # an earlier mutation may have replaced the records with any JSON value
            if isinstance(recs, list) and recs and isinstance(recs[0], dict):
                recs[0]["metrics"] = {"median_s": float("nan"), "seconds": float("inf")}
                put(recs)
        elif path.name == "ledger.jsonl":
            # bytes: an earlier mutation may have left the ledger undecodable
            path.write_bytes(path.read_bytes() + text.encode() + b"\n")
        else:
            path.write_text(text)
    elif kind == "journal":
        journal = atomic.journal_path(cdir / "ledger.jsonl")
        if m[1] == "attack":
            doc = {"kind": "nsa-sel-commit", "files": [[str(outside / "victim"), str(outside / "payload")]]}
        elif m[1] == "tmp-elsewhere":
            doc = {"kind": "nsa-sel-commit", "files": [[str(cdir / "known-good.txt"), str(outside / "payload")]]}
        elif m[1] == "json":
            doc = m[2]
        else:
            journal.write_bytes(b"\x00garbage\xff")
            return
        journal.write_text(json.dumps(doc))


def _snap(path: Path):
    """What a path is, without ever opening a FIFO or a device."""
    if path.is_symlink():
        return ("link", os.readlink(path), path.read_bytes() if path.is_file() else None)
    if path.is_file():
        return ("file", path.read_bytes())
    return ("other", stat.S_IFMT(path.lstat().st_mode)) if path.exists() else ("missing",)


def _outside(root: Path) -> dict:
    return {p.name: p.read_bytes() for p in (root / "outside").iterdir()}


def _check_success(cdir: Path, before: dict) -> None:
    paths = [cdir / n for n in THREE]
    assert ledger.verify(*paths) == []
    table = F.TABLE
    names = {r.triton for r in table.releases}
    recs = ledger.load_ledger(paths[0])
    assert recs and all(r["triton"] in names for r in recs), {r["triton"] for r in recs} - names
    admitted = {ln.split()[2] for ln in paths[2].read_text().splitlines() if ln.startswith("# admitted ")}
    bad = {r["triton"] for r in recs if r["verdict"] in BAD and r["check"] in table.required}
    assert not admitted & bad, f"admitted despite a bad record: {admitted & bad}"
    for name in THREE:
        assert (before[name][0] == "link") == (cdir / name).is_symlink(), f"{name} lost or gained its link"
    assert not list(cdir.glob(".*.tmp")) and not atomic.journal_path(paths[0]).exists()


@settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(mutations=st.lists(mutation, min_size=1, max_size=3))
def test_pin_under_bad_files_is_right_or_says_why(template, mutations):
    with tempfile.TemporaryDirectory(prefix="nsa-fuzz-") as tmp:
        root = Path(tmp) / "w"
        shutil.copytree(template, root)
        shutil.copytree(template / "constraints", root / "pristine")
        shutil.copytree(template / "results", root / "pristine" / "results")
        (root / "outside").mkdir()
        (root / "outside" / "victim").write_text("precious")
        (root / "outside" / "payload").write_text("attacker's text")
        cdir = root / "constraints"
        for m in mutations:
            _apply(root, m)
        watched = (*THREE, "lanes.toml")
        before = {n: _snap(cdir / n) for n in watched}
        outside = _outside(root)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = ledger.main(["--constraints", str(cdir), "--results", str(root / "results")])
        err = err.getvalue()
        event(f"exit {rc}")
        assert _outside(root) == outside, "a file outside the constraints directory changed"
        assert rc in (0, 2), (rc, err)
        if rc == 2:
            assert err.startswith("nsa-sel pin: ") and err.count("\n") == 1, err
            assert {n: _snap(cdir / n) for n in watched} == before, f"a refused pin changed files: {err}"
        else:
            assert err == "", err
            _check_success(cdir, before)
