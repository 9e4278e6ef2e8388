"""The smoke harness's output: progress while it runs (a bar on a terminal, plain lines elsewhere), then
the verdict table and messages.

``rich`` is imported only here, and only when something is printed.
"""

from __future__ import annotations

import sys
import time

from ..core.verdicts import COMPILE_STYLE, OK
from .report import SmokeReport, SmokeResult


PROGRESS_MODES = ("auto", "bar", "lines", "off")
PROGRESS_EVERY = 20  # compiles between two progress lines (without a terminal)


def progress_mode(progress) -> str:
    """``True`` is "auto", ``False`` "off"; "auto" is a bar on a terminal, lines elsewhere (CI, nox logs)."""
    mode = {True: "auto", False: "off", None: "auto"}.get(progress, progress)
    if mode not in PROGRESS_MODES:
        raise ValueError(f"progress {progress!r}: accepted {', '.join(PROGRESS_MODES)}")
    if mode == "auto":
        return "bar" if sys.stderr.isatty() else "lines"
    return mode


class Progress:
    """Progress over the run's (spec, arch) pairs, on stderr: a rich bar on a terminal, else one plain
    line every ``every`` pairs and at the end (counts, verdicts so far, elapsed, an estimate of the rest).
    ``advance(text, verdict, compiled)`` after each pair is decided (compiled, or at once: skipped, or an
    unsupported arch); the arch probes are not counted.  ``archs`` name the run's archs in every line.

    The estimate counts only the compiles still to run, at the pace of those done so far
    (:meth:`compiling` says how many there are): the pairs decided at once (a 3.9 run skips 8 per
    arch before its first compile) would otherwise make the rest look nearly done."""

    def __init__(self, mode, console, total, every: int = PROGRESS_EVERY, stream=None, archs=()):
        self.mode, self.console, self.total = progress_mode(mode), console, total
        self.every, self.stream = max(1, int(every)), stream
        self.what = f"smoke {', '.join(f'sm_{a}' for a in archs)}" if archs else "smoke"
        self._p = self._task = None
        self.done, self.tally, self.t0 = 0, {}, time.monotonic()
        self.compiled, self.to_compile, self.t_compiles = 0, None, None

    def __enter__(self):
        self.t0 = time.monotonic()
        if self.mode == "bar":
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._p = Progress(TextColumn(self.what), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                               TextColumn("{task.description}"),
                               console=self.console or Console(stderr=True), transient=False)
            self._p.__enter__()
            self._task = self._p.add_task("", total=self.total)
        elif self.mode == "lines":
            self._line(f"{self.what}: {self.total} compiles to decide ((spec, arch) pairs); a line every {self.every}")
        return self

    def probe(self, text: str) -> None:
        """An arch probe finished (not one of the counted pairs)."""
        if self._p is not None:
            self._p.update(self._task, description=text)
        elif self.mode == "lines":
            self._line(f"{self.what}: {text}")

    def compiling(self, n: int) -> None:
        """The pairs decided at once are counted; ``n`` compiles start now (the estimate's clock)."""
        self.to_compile, self.t_compiles = n, time.monotonic()

    def advance(self, text: str, verdict: str = "", compiled: bool = True) -> None:
        self.done += 1
        self.compiled += bool(compiled)
        if verdict:
            self.tally[verdict] = self.tally.get(verdict, 0) + 1
        if self._p is not None:
            self._p.update(self._task, advance=1, description=text)
        elif self.mode == "lines" and (self.done % self.every == 0 or self.done == self.total):
            self._line(self.status())

    def left_s(self) -> float | None:
        """Seconds until the last compile, at the pace of the compiles so far (None: no estimate yet)."""
        if not self.compiled:
            return None
        # Without compiling(): every pair not decided at once is a compile, timed from the start.
        start = self.t0 if self.t_compiles is None else self.t_compiles
        todo = self.total - (self.done - self.compiled) if self.to_compile is None else self.to_compile
        return (time.monotonic() - start) / self.compiled * max(0, todo - self.compiled)

    def status(self) -> str:
        elapsed = time.monotonic() - self.t0
        verdicts = ", ".join(f"{n} {v}" for v, n in sorted(self.tally.items()))
        left = ""
        if 0 < self.done < self.total:
            est = self.left_s()
            left = ", no estimate before the first compile" if est is None else f", about {est:.0f} s left"
        return (f"{self.what}: {self.done}/{self.total} compiles ({verdicts or 'none yet'}), {elapsed:.0f} s "
                f"elapsed{left}")

    def _line(self, text: str) -> None:
        stream = self.stream or sys.stderr
        print(text, file=stream, flush=True)

    def __exit__(self, *exc):
        if self._p is not None:
            self._p.__exit__(*exc)


def _cell(r: SmokeResult) -> str:
    style = COMPILE_STYLE.get(r.verdict, "white")
    text = f"[{style}]{r.verdict}[/]"
    m = r.metrics
    if r.verdict == OK and m:
        bits = [f"{r.seconds:.1f}s"]
        if m.get("registers") is not None:
            bits.append(f"r{m['registers']}")
        if m.get("spills"):
            bits.append(f"spill{m['spills']}")
        if m.get("shared") is not None:
            bits.append(f"{m['shared'] // 1024}K")
        text += " " + " ".join(bits)
    return text


def render(report: SmokeReport, console=None) -> None:
    """Print the verdict table (one row per spec, one column per arch) and the messages."""
    from rich.console import Console
    from rich.table import Table

    if console is None:
        console = Console()
        if not console.is_terminal:  # CI logs: do not squeeze the table into 80 columns
            console = Console(width=170)
    table = Table(title=f"nsa-sel smoke - triton {_triton_title(report)}, {count_line(report)}, "
                        f"{report.wall_s:.0f} s wall, --jobs {report.jobs}")
    table.add_column("spec", no_wrap=True)
    for a in report.archs:
        table.add_column(f"sm_{a}", no_wrap=True)
    any_canary = any(r.canary for r in report.results)
    if any_canary:
        table.add_column("expected (canaries)")
    rows: dict[str, dict] = {}
    for r in report.results:
        rows.setdefault(r.spec, {})[r.arch] = r
    skipped = {(s["spec"], s["arch"]) for s in report.skipped}
    for s in report.skipped:
        rows.setdefault(s["spec"], {})
    for spec, by_arch in rows.items():
        first = next(iter(by_arch.values()), None)
        cells = [_cell(by_arch[a]) if a in by_arch else "[dim]skipped[/]" if (spec, a) in skipped else ""
                 for a in report.archs]
        if any_canary:
            cells.append(_expect_cell(list(by_arch.values())) if first is not None and first.canary else "")
        table.add_row(spec, *cells)
    console.print(table)
    _print_messages(report, console)
    _print_static(report, console)
    _print_summary(report, console)
    _print_wrong_triton(report, console)


def _triton_title(report: SmokeReport) -> str:
    """The Triton the children imported; loud when it is not the one the run was started for."""
    got = " + ".join(report.imported_tritons) or report.triton
    if report.wrong_triton:
        return f"{got} [bold red](EXPECTED {report.expected_triton}: not isolated)[/]"
    return got


def _print_wrong_triton(report: SmokeReport, console) -> None:
    if report.wrong_triton:
        console.print(f"[bold red]ERROR[/]: the compile children imported triton {', '.join(report.wrong_triton)}, "
                      f"not {report.expected_triton}: every verdict above is about another Triton. Check the "
                      "environment (PYTHONPATH, .pth files) of the interpreter given to the children.",
                      highlight=False, soft_wrap=True)


def _expect_cell(results) -> str:
    exp = results[0].expected
    if exp is None:
        return "(no expectation for this version)"
    good = all(r.as_expected for r in results)
    return f"{'/'.join(exp)} " + ("[green]as expected[/]" if good else "[bold red]UNEXPECTED[/]")


def _print_messages(report, console) -> None:
    """Each distinct failure message once, with the specs and archs that hit it."""
    groups: dict[tuple, dict] = {}
    for r in report.results:
        if r.verdict != OK:
            groups.setdefault((r.verdict, r.message), {}).setdefault(r.spec, []).append(str(r.arch))
    for (verdict, message), where in groups.items():
        places = "; ".join(f"{spec} sm_{','.join(archs)}" for spec, archs in where.items())
        console.print(f"  [bold]{verdict}[/]: {message}\n      in {places}", highlight=False, soft_wrap=True)


def _print_static(report, console) -> None:
    for kernel, info in sorted(report.static.items()):
        if info.get("findings"):
            flag = "" if info.get("installed_ok", True) else " [bold red](outside the installed version)[/]"
            console.print(f"  static: {kernel.rpartition('/')[2]} needs triton {info['needs'] or 'any'}{flag}: "
                          + "; ".join(sorted({f["api"] for f in info["findings"]})), highlight=False, soft_wrap=True)


def counts(report) -> dict:
    """The one count of a smoke run, used by every line that reports it: (spec, arch) pairs, of which
    compiled (variants and canaries) and skipped (never launched on this Triton/arch)."""
    variants = sum(not r.canary for r in report.results)
    canaries = len(report.results) - variants
    skipped = len(report.skipped)
    return {"pairs": variants + canaries + skipped, "variants": variants, "canaries": canaries, "skipped": skipped}


def count_line(report) -> str:
    c = counts(report)
    return (f"{c['pairs']} compiles: {c['variants']} variant + {c['canaries']} canary compiled, "
            f"{c['skipped']} skipped")


def _print_summary(report, console) -> None:
    n_ok = sum(r.verdict == OK for r in report.results if not r.canary)
    n = sum(not r.canary for r in report.results)
    if report.skipped:
        console.print(f"  skipped (never launched there): {len(report.skipped)} compiles, e.g. "
                      f"{report.skipped[0]['spec']} sm_{report.skipped[0]['arch']}: {report.skipped[0]['why']}",
                      highlight=False, soft_wrap=True)
    console.print(f"{count_line(report)}; variants ok: {n_ok}/{n}; canaries unexpected: {len(report.canary_mismatches)}; "
                  f"TRITON_DEFAULT_FP_FUSION={report.env.get('TRITON_DEFAULT_FP_FUSION')}; "
                  f"wall {report.wall_s:.1f} s", highlight=False)
