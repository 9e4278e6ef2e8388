"""The smoke's progress: plain lines with counts and elapsed time where there is no terminal,
counted over the same (spec, arch) pairs as the verdict table's title and summary."""

from __future__ import annotations

import io

import pytest

from nsa_triton_sel.compat.smoke import render
from nsa_triton_sel.compat.smoke.report import SmokeReport, SmokeResult


def test_lines_mode_prints_every_n_and_the_last_with_counts_and_elapsed():
    out = io.StringIO()
    with render.Progress("lines", None, total=5, every=2, stream=out) as bar:
        bar.probe("probe sm_80: ok")
        for verdict in ("ok", "ok", "skipped", "crash", "ok"):
            bar.advance("x", verdict)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("smoke: 5 compiles to decide") and lines[1] == "smoke: probe sm_80: ok"
    assert [ln.split(" (")[0] for ln in lines[2:]] == ["smoke: 2/5 compiles", "smoke: 4/5 compiles",
                                                       "smoke: 5/5 compiles"]
    assert "(1 crash, 2 ok, 1 skipped)" in lines[3] and "s elapsed" in lines[3] and "s left" in lines[3]
    assert "left" not in lines[4]


def test_auto_mode_is_lines_without_a_terminal_and_bad_modes_are_refused(monkeypatch):
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert render.progress_mode(True) == "lines" and render.progress_mode(False) == "off"
    with pytest.raises(ValueError, match="accepted auto, bar, lines, off"):
        render.progress_mode("sometimes")


def test_off_mode_prints_nothing():
    out = io.StringIO()
    with render.Progress("off", None, total=2, every=1, stream=out) as bar:
        bar.advance("x", "ok")
    assert out.getvalue() == ""


def _result(spec, arch, canary=False):
    return SmokeResult(spec=spec, kernel="k", arch=arch, verdict="ok", message="", canary=canary)


def test_one_count_for_title_and_summary():
    report = SmokeReport(triton="3.1.0", archs=[80, 90], jobs=2, env={}, started="", expected_triton=None,
                         results=[_result("a", 80), _result("a", 90), _result("c", 80, canary=True)],
                         skipped=[{"spec": "b", "arch": 90, "why": "w"}], static={})
    assert render.counts(report) == {"pairs": 4, "variants": 2, "canaries": 1, "skipped": 1}
    assert render.count_line(report) == "4 compiles: 2 variant + 1 canary compiled, 1 skipped"


def test_the_cli_refuses_a_bad_progress_interval(capsys):
    from nsa_triton_sel.compat import smoke

    with pytest.raises(SystemExit) as exc:
        smoke.main(["--arch", "80", "--progress-every", "0"])
    assert exc.value.code == 2
    assert "argument --progress-every: expected a whole number from 1, got '0'" in capsys.readouterr().err


def test_canaries_count_as_expected_or_unexpected_not_as_failures():
    from nsa_triton_sel.compat.smoke import run

    ok = _result("a", 80)
    ok.verdict = "compile_error"
    assert run._tally(ok) == "compile_error"
    canary = _result("c", 80, canary=True)
    canary.verdict, canary.as_expected = "crash", True
    assert run._tally(canary) == "canary as expected"
    canary.as_expected = False
    assert run._tally(canary) == "canary UNEXPECTED"


def test_the_estimate_counts_only_the_compiles_still_to_run(monkeypatch):
    """Pairs decided at once (skipped) take no compile time, so they must not speed up the estimate: counted
    as compiles, 48 of them made a 3.9 run at 40/420 say 'about 106 s left' with ~610 s to go.  The progress
    lines name the archs."""
    clock = [0.0]
    monkeypatch.setattr(render.time, "monotonic", lambda: clock[0])
    out = io.StringIO()
    with render.Progress("lines", None, total=12, every=4, stream=out, archs=[80, 90]) as bar:
        for _ in range(4):  # decided at once, before any compile
            bar.advance("x", "skipped", compiled=False)
        bar.compiling(8)
        for _ in range(4):
            clock[0] += 10.0  # ten seconds per compile
            bar.advance("x", "ok")
        clock[0] += 10.0
        for _ in range(4):
            bar.advance("x", "ok")
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("smoke sm_80, sm_90: 12 compiles to decide")
    assert lines[1] == "smoke sm_80, sm_90: 4/12 compiles (4 skipped), 0 s elapsed, no estimate before the first compile"
    # 4 compiles in 40 s, 4 to go: 40 s (the old estimate, 40 s / 8 pairs x 4, said 20 s)
    assert lines[2] == "smoke sm_80, sm_90: 8/12 compiles (4 ok, 4 skipped), 40 s elapsed, about 40 s left"
    assert lines[3] == "smoke sm_80, sm_90: 12/12 compiles (8 ok, 4 skipped), 50 s elapsed"
