"""Evidence per arch: what the ledger knows about each compile target, release by release.

The matrix's compile cell sums every arch; a user on one GPU needs that arch's own answer, and
needs to hear which kind of evidence it is.  For most archs it is *compile-only*: the kernels
compiled ahead of time on a CPU box (PTX and cubin produced), never ran on that GPU.  Only an arch
with ``gpu``-mode records (parity, bench) has run evidence.  Rendered into ``MATRIX.md`` and
``known-good.txt`` by ``nsa-sel pin``, and read by ``nsa-sel doctor`` for the local GPU.
"""

from __future__ import annotations

from collections import defaultdict

from ..core.verdicts import BAD, PASS, UNSUPPORTED, XFAIL
from .cells import cell, first_line

COMPILE_CHECKS = ("compile", "backward")  # the kernel variants of this package (not canaries)
# What one release is on one arch, from its compile records there.
OK_, KNOWN_BAD, FAILING, NOT_RUN = "compiles", "known-bad", "failing", "not run"
NO_EVIDENCE = "no evidence yet"


def arch_of(rec: dict) -> int | None:
    """The arch a record is about: its compile target, or the GPU it ran on (``"9.0"`` -> 90)."""
    if isinstance(rec.get("arch"), int):
        return rec["arch"]
    cc = rec.get("compute_capability")
    if isinstance(cc, str) and cc.replace(".", "", 1).isdigit() and "." in cc:
        major, minor = cc.split(".")
        return int(major) * 10 + int(minor)
    return None


def archs_of(table, recs: list[dict]) -> list[int]:
    """The table's archs, then any other arch the ledger has records for."""
    seen = {a for r in recs if (a := arch_of(r)) is not None}
    return list(table.archs) + sorted(seen - set(table.archs))


def _compile_recs(recs: list[dict]) -> dict[tuple[str, int], list[dict]]:
    out: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for r in recs:
        if r.get("check") in COMPILE_CHECKS and r.get("mode") == "aot" and isinstance(r.get("arch"), int):
            out[(r["triton"], r["arch"])].append(r)
    return out


def state(recs: list[dict]) -> str:
    """One release on one arch: compiles / unsupported / known-bad / failing / not run."""
    verdicts = {r["verdict"] for r in recs}
    if not recs:
        return NOT_RUN
    if verdicts & BAD:
        return FAILING
    if XFAIL in verdicts:
        return KNOWN_BAD
    if PASS in verdicts:
        return OK_
    return UNSUPPORTED if UNSUPPORTED in verdicts else NOT_RUN  # skips only: nothing was compiled


def gpu_runs(recs: list[dict], arch: int) -> list[str]:
    """``"NVIDIA H100 80GB HBM3 (3.6.0)"`` per GPU that ran parity or bench records of ``arch``."""
    found: dict[str, set] = defaultdict(set)
    for r in recs:
        if r.get("mode") == "gpu" and r.get("check") in ("parity", "bench", "backward") and arch_of(r) == arch:
            found[r.get("gpu") or r.get("machine") or "a GPU"].add(r["triton"])
    return [f"{gpu} ({', '.join(sorted(v))})" for gpu, v in sorted(found.items())]


def evidence_kind(recs: list[dict], arch: int) -> str:
    runs = gpu_runs(recs, arch)
    if runs:
        return f"GPU runs on {'; '.join(runs)} + compile"
    compiled = any(r.get("arch") == arch and r.get("check") in COMPILE_CHECKS for r in recs)
    return "compile only (no GPU run)" if compiled else NO_EVIDENCE


def _releases(names: list[str], table) -> str:
    if len(names) == len(table.releases) > 1:
        return f"all {len(names)} releases ({names[0]} - {names[-1]})"
    return ", ".join(names)


def _cell(recs: list[dict]) -> str:
    s = state(recs)
    if s == UNSUPPORTED:
        return "unsupported"
    if s == KNOWN_BAD:
        return f"known-bad {sum(r['verdict'] == XFAIL for r in recs)}/{len(recs)}"
    return cell(recs)[1] if recs else "—"


def by_state(table, recs: list[dict], arch: int) -> dict[str, list[str]]:
    """``{state: [releases]}`` of one arch, in table order."""
    grouped = _compile_recs(recs)
    out: dict[str, list[str]] = defaultdict(list)
    for rel in table.releases:
        out[state(grouped.get((rel.triton, arch), []))].append(rel.triton)
    return out


def summary(table, recs: list[dict], arch: int) -> str:
    """One line: the kind of evidence, then which releases compile, are unsupported, known-bad..."""
    groups = by_state(table, recs, arch)
    parts = [f"{name} on {_releases(groups[key], table)}" for key, name in
             ((OK_, "every variant compiles"), (KNOWN_BAD, "known-bad"), (FAILING, "FAILING"),
              (UNSUPPORTED, "unsupported (the release's toolchain cannot target it)"), (NOT_RUN, "not run"))
             if groups.get(key)]
    return f"sm_{arch}: {evidence_kind(recs, arch)}: " + "; ".join(parts)


def matrix_section(table, recs: list[dict]) -> list[str]:
    """``MATRIX.md``'s "Evidence per arch": a release x arch table of the compile records, the kind of
    evidence per arch, and why a release is unsupported on an arch."""
    archs = archs_of(table, recs)
    grouped = _compile_recs(recs)
    head = ["Triton"] + [f"sm_{a}" for a in archs]
    lines = ["", "## Evidence per arch", "",
             "Compile cells count the package's kernel variants (forward and backward) compiled ahead of time "
             "for that arch on a CPU box: PTX and cubin produced, not a run on that GPU. `unsupported`: the "
             "release's bundled toolchain cannot target the arch (reason below); `known-bad`: a known-bad window "
             "names the failure.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for rel in table.releases:
        lines.append("| " + " | ".join([rel.triton] + [_cell(grouped.get((rel.triton, a), [])) for a in archs]) + " |")
    lines += ["", "What is known per arch:", ""] + [f"- {summary(table, recs, a)}" for a in archs]
    why = _unsupported_reasons(grouped)
    if why:
        lines += ["", "Why a release is unsupported on an arch:", ""] + why
    return lines


def _unsupported_reasons(grouped: dict) -> list[str]:
    out = []
    for (triton, arch), recs in sorted(grouped.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        if state(recs) == UNSUPPORTED:
            msg = next((r.get("message") for r in recs if r["verdict"] == UNSUPPORTED), "")
            out.append(f"- {triton} sm_{arch}: {first_line(msg)}")
    return out


def known_good_lines(table, recs: list[dict]) -> list[str]:
    """``known-good.txt`` comment lines: per arch, the kind of evidence and the releases that compile."""
    return ["# evidence per arch (known-good above is over every arch; check yours):"] + \
        [f"#   {summary(table, recs, a)}" for a in archs_of(table, recs)]


def doctor_answer(arch: int | None, recs: list[dict] | None, table=None) -> str:
    """What ``nsa-sel doctor`` says about this machine's GPU arch, in plain words."""
    if arch is None:
        return "no CUDA GPU here (give --arch 100 to ask about one)"
    if recs is None:
        return (f"sm_{arch}: no ledger found (run from the project checkout or set NSA_SEL_CONSTRAINTS); "
                "constraints/MATRIX.md 'Evidence per arch' says what is known per arch")
    line = summary(table, recs, arch) if table is not None else f"sm_{arch}: {evidence_kind(recs, arch)}"
    if gpu_runs(recs, arch):
        return line
    if evidence_kind(recs, arch) == NO_EVIDENCE:
        return f"{line}. NOTHING is known about sm_{arch}: no lane compiled for it and no GPU run"
    return (f"{line}. ONLY COMPILE EVIDENCE exists for sm_{arch}: the kernels were compiled for it on a CPU "
            "box but never ran on such a GPU here, so nothing is known about their results or speed on it; "
            "run the GPU lanes (nox -s parity-X bench-X on that GPU) before trusting it")
