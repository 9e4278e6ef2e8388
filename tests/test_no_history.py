"""Comments and docstrings explain the code in its own terms, never by the history of the work.

Every ``.py`` file under ``src/``, ``tests/`` and ``bench/`` (``bench/results/`` excepted) and the noxfile is
scanned for references to this project's own tracker entries (a number after the word, with or without
``#`` or ``-``, or glued to it as in a notes file's name).  Upstream references written as ``owner/repo#N``
(``triton-lang/triton#1234``) name where a fact comes from and are allowed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The word is built from pieces so that this file does not match its own scan.
_WORD = "iss" + "ue"
HISTORY = re.compile(rf"\b{_WORD}s?[ -]?#?\d+|\b{_WORD}\d", re.IGNORECASE)
UPSTREAM = re.compile(r"[\w.-]+/[\w.-]+#\d+")

# A measured figure (a time or a rate) in a docstring goes stale with the next change; figures live in
# bench/results/ and the README, generated from results.
FIGURE = re.compile(r"\b\d+(?:\.\d+)?\s?(?:us|µs|ms|GB/s|TB/s|TFLOP/s)\b")


def _scanned() -> list[Path]:
    files = [ROOT / "noxfile.py"]
    for top in ("src", "tests", "bench"):
        files += sorted(p for p in (ROOT / top).rglob("*.py") if (ROOT / "bench" / "results") not in p.parents)
    return files


def _line_hits(line: str) -> list[str]:
    """The tracker references of one line, less those inside an upstream ``owner/repo#N``."""
    upstream = [m.span() for m in UPSTREAM.finditer(line)]
    return [m.group() for m in HISTORY.finditer(line) if not any(a <= m.start() < b for a, b in upstream)]


def _hits(path: Path) -> list[str]:
    rel = path.relative_to(ROOT).as_posix()
    return [f"{rel}:{n}: {line.strip()}"
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if _line_hits(line)]


def test_the_pattern_catches_tracker_references_and_spares_upstream_ones():
    w = _WORD
    for text in (f"({w} 21)", f"{w.title()} 21's hash", f"{w}s 16-18", f"{w} 39 item 3", f"{w} #39",
                 f"{w}7-notes.md", f"the {w}-16 fuzz"):
        assert _line_hits(text), text
    for text in (f"{w}s", f"opens an {w}", "nox session", f"gh {w} create", "triton-lang/triton#1234",
                 f"pytorch/pytorch#99 (an upstream {w})", f"see owner/{w}2#5"):
        assert not _line_hits(text), text
    assert _line_hits(f"triton-lang/triton#1234, and {w} 7 here") == [f"{w} 7"]


def test_no_comment_or_docstring_explains_code_by_the_history_of_the_work():
    files = _scanned()
    assert ROOT / "noxfile.py" in files and Path(__file__).resolve() in files and len(files) > 50
    hits = [h for p in files for h in _hits(p)]
    assert not hits, "references to this project's tracker; say why in the code's own terms:\n" + "\n".join(hits)


def _docstrings(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                yield getattr(node, "name", "<module>"), doc


def test_the_figure_pattern_catches_times_and_rates():
    for text in ("costs 51 us", "1.73 ms against", "8.7 TB/s", "816 µs", "at 1.26 TB/s"):
        assert FIGURE.search(text), text
    for text in ("T = 32K", "16 blocks of 64", "3 stages", "units: ms", "sm_90"):
        assert not FIGURE.search(text), text


def test_no_docstring_quotes_a_measured_figure():
    hits = [f"{p.relative_to(ROOT).as_posix()} ({name}): {line.strip()}"
            for p in _scanned() for name, doc in _docstrings(p)
            for line in doc.splitlines() if FIGURE.search(line)]
    assert not hits, "measured figures in docstrings (they belong in bench/results/):\n" + "\n".join(hits)
