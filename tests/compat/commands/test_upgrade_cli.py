"""``nsa-sel check-upgrade``: arguments checked before the long run, one-line errors.

No test touches the network or runs a lane: the package index and the candidate run are faked.
"""

from __future__ import annotations

import io
import json

import pytest

import ledger_factory as F
from nsa_triton_sel.compat import ledger
from nsa_triton_sel.compat.commands import releases, upgrade
from test_upgrade import BASE, CAND, _good, _recs


@pytest.fixture
def no_run(monkeypatch):
    """A candidate run must not start: the checks come first."""
    def refuse(*args, **kwargs):
        raise AssertionError("the candidate lane was run although the arguments were refused")
    monkeypatch.setattr(upgrade, "run_candidate", refuse)


@pytest.fixture
def cand_results(tmp_path):
    """A constraints directory (the test table) with a pinned ledger, and a SAFE-looking candidate run."""
    cdir, results = F.constraints_dir(tmp_path), tmp_path / "cand"
    F.write_runs(tmp_path / "r", F.all_pass("3.9"))
    assert ledger.main(["--constraints", str(cdir), "--results", str(tmp_path / "r")]) == 0
    recs = _good(CAND)
    for check in ("compile", "parity"):
        rs = [r for r in recs if r["check"] == check]
        ledger.write_run(ledger.run_file(results, f"{check}-candidate"), base=rs[0], status="complete",
                         started=rs[0]["date"], records=rs)
    return cdir, results


def _main(cdir, *args):
    return upgrade.main([*args, "--constraints", str(cdir)])


def _one_line(capsys, *needles):
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    for n in needles:
        assert n in err, err


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-0.5", "0"])
def test_max_slowdown_must_be_a_finite_positive_number(cand_results, capsys, value):
    cdir, results = cand_results
    with pytest.raises(SystemExit) as exc:
        _main(cdir, "3.10.0", "--from-results", str(results), f"--max-slowdown={value}")
    assert exc.value.code == 2
    _one_line(capsys, "--max-slowdown", "finite positive fraction (0.10 = 10%), got")


def test_a_nan_gate_would_have_passed_a_5x_slowdown():
    """Why: the gate compares new > old * (1 + nan), which is never true."""
    cand = _good(CAND) + _recs(CAND, "bench", [("b1", "pass", None, {"median_s": 5e-3})])
    base = _good(BASE) + _recs(BASE, "bench", [("b1", "pass", None, {"median_s": 1e-3})])
    assert upgrade.judge("3.10.0", cand, "3.9.0", base, windows=[], max_slowdown=0.1).blocked
    assert upgrade._slowdown("0.1") == 0.1


def test_from_results_must_be_a_directory(cand_results, tmp_path, capsys, no_run):
    cdir, _ = cand_results
    assert _main(cdir, "3.10.0", "--from-results", str(tmp_path / "nonexistent")) == 2
    _one_line(capsys, "--from-results", "no such directory")


def test_outside_the_checkout_is_a_clean_error_before_the_run(cand_results, tmp_path_factory, monkeypatch, capsys,
                                                             no_run):
    cdir, _ = cand_results  # a constraints directory without a noxfile beside it, and the cwd outside any project
    monkeypatch.chdir(tmp_path_factory.mktemp("outside"))
    monkeypatch.delenv("NSA_SEL_CONSTRAINTS", raising=False)
    assert _main(cdir, "3.9.0") == 2
    _one_line(capsys, "nsa-sel check-upgrade: ", "constraints/lanes.toml")


@pytest.mark.parametrize("broken", ["table", "ledger", "results"])
def test_broken_inputs_are_one_line_errors(cand_results, capsys, broken):
    cdir, results = cand_results
    if broken == "table":
        (cdir / "lanes.toml").write_text("schema = 1\n[[lane]]\nlabel = 3\n")
    elif broken == "ledger":
        with open(cdir / "ledger.jsonl", "a") as f:
            f.write("{not json\n")
    else:
        (results / "compile-candidate.json").write_bytes(b"\x00\xff")
    assert _main(cdir, "3.10.0", "--from-results", str(results)) == 2
    _one_line(capsys, {"table": "lanes.toml", "ledger": "ledger.jsonl", "results": "compile-candidate.json"}[broken])


def test_a_release_not_on_the_index_is_refused_before_the_run(cand_results, monkeypatch, capsys, no_run):
    from packaging.version import Version

    cdir, _ = cand_results
    monkeypatch.setattr(upgrade, "index_versions", lambda: {Version("3.9.0"), Version("3.5.1")}, raising=False)
    assert _main(cdir, "3.10.0") == 2
    _one_line(capsys, "triton 3.10.0: no such release on the package index", "newest there: 3.9.0")


def test_a_release_below_the_table_is_refused_before_the_run(cand_results, monkeypatch, capsys, no_run):
    cdir, _ = cand_results
    monkeypatch.setattr(upgrade, "index_versions", lambda: None, raising=False)
    assert _main(cdir, "2.3.1") == 2
    _one_line(capsys, "older than the table's oldest release 3.1.0")


def test_an_unreachable_index_is_said_and_the_check_goes_on(cand_results, monkeypatch, capsys):
    cdir, results = cand_results
    monkeypatch.setattr(upgrade, "index_versions", lambda: None)
    ran = []

    def fake_run(version, out, root, gpu):  # the lane run writes the candidate's run files into `out`
        ran.append(version)
        for p in results.iterdir():
            (out / p.name).write_bytes(p.read_bytes())
        return 0

    monkeypatch.setattr(upgrade, "run_candidate", fake_run)
    monkeypatch.setattr(upgrade.project, "project_root", lambda explicit=None: cdir.parent)
    assert _main(cdir, "3.10.0") == 0 and ran == ["3.10.0"]
    _one_line(capsys, "could not ask the package index")


def test_index_versions_reads_a_simple_index_page(monkeypatch):
    page = ('<a href="https://x/triton-3.5.1-cp311-cp311-manylinux_2_27_x86_64.whl#sha256=1">'
            'triton-3.5.1-cp311-cp311-manylinux_2_27_x86_64.whl</a>\n'
            '<a href="/p/triton-3.6.0-cp312-cp312-manylinux_2_28_x86_64.whl">triton-3.6.0-cp312-...</a>\n'
            '<a href="/p/triton-2.0.0.post1-cp310-cp310-manylinux.whl">x</a>')
    monkeypatch.setattr(releases.urllib.request, "urlopen", lambda req, timeout: io.BytesIO(page.encode()))
    got = {str(v) for v in upgrade.index_versions()}
    assert got == {"3.5.1", "3.6.0", "2.0.0.post1"}

    def offline(req, timeout):
        raise OSError("no network")

    monkeypatch.setattr(releases.urllib.request, "urlopen", offline)
    assert upgrade.index_versions() is None


def test_ptx_size_noise_does_not_bury_register_and_spill_notes():
    cand, base = _good(CAND), _good(BASE)
    for i, r in enumerate(base):
        if r["check"] == "compile":
            r["metrics"] = {"ptx_bytes": 1000, "registers": 100, "spills": 0 if i else 8, "cubin_bytes": 500}
    for i, r in enumerate(cand):
        if r["check"] == "compile":
            r["metrics"] = {"ptx_bytes": 2000, "registers": 100 if i else 180, "spills": 0 if i else 64,
                            "cubin_bytes": 500}
    notes = upgrade.judge("3.10.0", cand, "3.9.0", base, windows=[]).notes
    assert notes[0].endswith("spills 8 -> 64") and notes[1].endswith("registers 100 -> 180")
    ptx = [n for n in notes if "ptx_bytes" in n]
    assert len(ptx) == 1 and "2 variant(s)" in ptx[0] and "absolute source paths" in ptx[0]


def test_a_3_9_ledger_record_counts_for_the_baseline(cand_results, capsys):
    """A ledger record spelled ``3.9`` is read as the table's 3.9.0 (not silently another release)."""
    cdir, results = cand_results
    path = cdir / "ledger.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({**r, "triton": "3.9"}) + "\n" for r in rows))
    assert _main(cdir, "3.10.0", "--from-results", str(results)) == 0
    assert "vs known-good 3.9.0" in capsys.readouterr().out
