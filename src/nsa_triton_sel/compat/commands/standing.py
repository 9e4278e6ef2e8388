"""Where the installed torch + Triton pair stands in the matrix, for ``nsa-sel doctor``.

Three answers, each with its source: whether ``constraints/known-good.txt`` admits the installed
Triton (and if not, the reason written beside it); whether the installed torch is the one that
release is paired with (a CUDA build of a torch whose wheel pins it); and what the evidence is,
read from ``constraints/ledger.jsonl``: which machines ran which checks on that release (CPU only:
AOT compiles and the interpreter; or which GPUs), and whether this machine's GPU is among them.

Needs the project's constraints directory (found as :mod:`..core.project` says); without one it says
so instead of guessing.  Standard library and ``packaging`` only at import, like the toolkit.
"""

from __future__ import annotations

import re
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from ..core import lane_table, project

CHECK_ORDER = ("compile", "backward", "parity", "contract", "bench")
STALE = " (stale: other kernel sources)"
CONTRACT_STALE = " [contract stale: another runtime]"
COMPILER_FIELD, RUNTIME_FIELD = "compiler_hash", "runtime_hash"  # nsa_triton_sel.provenance.FIELDS


def known_good(path: Path, triton: Version) -> tuple[str, str]:
    """``(status, why)`` from known-good.txt: "known-good", "excluded" (with the file's reason) or
    "not listed" (a release the table does not test).  An unreadable file (a FIFO, a directory, not UTF-8)
    is a :class:`..core.atomic.FileProblem` naming it."""
    from ..core.atomic import read_text  # noqa: PLC0415 - non-blocking: a FIFO here must not hang doctor

    lines = read_text(path).splitlines()
    spec_line = next((ln.strip() for ln in reversed(lines) if ln.strip().startswith("triton")), None)
    if spec_line is None:
        return "unknown", f"{path} has no 'triton...' line"
    try:
        spec = SpecifierSet(spec_line[len("triton"):])
    except InvalidSpecifier:
        return "unknown", f"{path}: cannot parse {spec_line[:200]!r}"
    entry = next((ln for ln in lines if re.match(rf"#\s+(admitted|excluded)\s+{re.escape(str(triton))}\s", ln)), None)
    if triton in spec:
        return "known-good", f"admitted by {path.name} ({spec_line})"
    if entry and "excluded" in entry:
        return "excluded", entry.split(":", 1)[1].strip() if ":" in entry else entry.lstrip("# ")
    return "not listed", (f"{path.name} does not admit it ({spec_line}) and the table has no lane for it; "
                          f"`nsa-sel check-upgrade {triton}` decides it")


def pairing(table: lane_table.Table, triton: Version, torch: str | None, cuda: str | None) -> str:
    rel = table.for_version(str(triton))
    if rel is None:
        return "unknown: no lane tests this Triton release"
    want = " or ".join(rel.torch) or "(no torch pins it yet)"
    if rel.torch_is_paired(torch, cuda):
        return f"paired: torch {torch} pins triton {triton}"
    if torch and not cuda:
        return f"off-pair: torch {torch} is a CPU build (no Triton pin); triton {triton} pairs with CUDA torch {want}"
    return f"off-pair: torch {torch or '(none)'}; triton {triton} pairs with torch {want}"


def evidence(records: list[dict], triton: Version, kernel_hash: str | None = None,
             runtime_hash: str | None = None) -> dict[str, str]:
    """Per machine ("cpu" or a GPU name): the checks run on this release, their verdict counts, the torch.

    With ``kernel_hash`` (the installed package's compiler-facing hash), GPU records about other
    compiler-facing sources, or unknown ones, are stale (the ledger's rule): a GPU with current records
    is listed by those alone (its stale ones are history); a GPU with stale records only is listed apart,
    as ``"<GPU> (stale: ...)"``, so no GPU is ever both.  With ``runtime_hash``, a GPU contract record of
    another runtime is marked ``[contract stale]``."""
    current_gpus = {r.get("machine") for r in records
                    if _version(r.get("triton")) == triton and (r.get("machine") or "cpu") != "cpu"
                    and not (kernel_hash and r.get(COMPILER_FIELD) != kernel_hash)}
    by_machine: dict[str, dict[tuple[str, str], dict[str, int]]] = {}
    torches: dict[str, set] = {}
    for r in records:
        if _version(r.get("triton")) != triton or r.get("check") not in CHECK_ORDER:
            continue
        machine = r.get("machine") or r.get("gpu") or "cpu"
        if kernel_hash and machine != "cpu" and r.get(COMPILER_FIELD) != kernel_hash:
            if machine in current_gpus:
                continue  # history: this GPU has evidence about the current sources
            machine += STALE
        check = r["check"]
        if check == "contract" and runtime_hash and r.get(RUNTIME_FIELD) != runtime_hash:
            check += CONTRACT_STALE
        counts = by_machine.setdefault(machine, {}).setdefault((check, r.get("mode") or "?"), {})
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
        torches.setdefault(machine, set()).add(f"{r.get('torch')}{'' if r.get('torch_paired') else ' off-pair'}")
    out = {}
    for machine, checks in sorted(by_machine.items(), key=lambda kv: kv[0] != "cpu"):
        parts = [f"{check} ({mode}) " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
                 for (check, mode), counts in sorted(checks.items(), key=lambda kv: _order(kv[0][0]))]
        out[machine] = "; ".join(parts) + f"; torch {', '.join(sorted(torches[machine]))}"
    return out


def _order(check: str) -> int:
    return CHECK_ORDER.index(check.removesuffix(CONTRACT_STALE))


def _version(text) -> Version | None:
    try:
        return Version(str(text))
    except InvalidVersion:
        return None


def summary(per_machine: dict[str, str], gpu_name: str | None) -> str:
    """One sentence: what ran this release (CPU only, or CPU and which GPUs), then, each once, the GPUs
    whose evidence is stale only, the GPUs whose contract record ran another runtime, and whether this
    GPU is among those with current evidence."""
    if not per_machine:
        return "none: the ledger has no record of this release"
    gpus = [m for m in per_machine if m != "cpu" and not m.endswith(STALE)]
    stale = [m.removesuffix(STALE) for m in per_machine if m.endswith(STALE)]
    if gpus:
        text = f"{'CPU and ' if 'cpu' in per_machine else ''}GPU: {', '.join(gpus)}"
    elif "cpu" in per_machine:
        text = "CPU only (AOT compiles for the table's archs, interpreter parity); no GPU has run these kernels"
    else:
        text = "no current evidence"
    if stale:
        text += f"; stale only, about other kernel sources (not counted): {', '.join(stale)}"
    contract_old = [m for m in gpus if CONTRACT_STALE in per_machine[m]]
    if contract_old:
        text += (f"; GPU contract record of another runtime (stale; GPU use stands, re-run `pytest -m contract`): "
                 f"{', '.join(contract_old)}")
    no_contract = [m for m in gpus if not re.search(r"(^|; )contract\b", per_machine[m])]
    if no_contract:
        text += f"; no GPU contract run: {', '.join(no_contract)}"
    if gpu_name:
        text += f"; this GPU ({gpu_name}) " + ("is among them" if gpu_name in gpus else "has not run them")
    return text


def standing(fp: dict, constraints: str | None = None) -> dict:
    """The doctor's ``known_good`` section for the fingerprint ``fp`` (installed triton, torch, CUDA, GPU)."""
    triton = _version(fp.get("triton"))
    if triton is None:
        return {"status": "unknown", "why": "no Triton installed"}
    try:
        cdir = project.constraints_dir(constraints)
    except project.ProjectNotFound as exc:
        return {"status": "unknown", "why": f"{exc}"}
    kg = cdir / "known-good.txt"
    status, why = known_good(kg, triton) if kg.exists() or kg.is_symlink() else (
        "unknown", f"no known-good.txt in {cdir}")
    out = {"status": f"{status}: triton {triton}", "why": why,
           "pair": pairing(lane_table.load_table(cdir / "lanes.toml"), triton, fp.get("torch"), fp.get("cuda_runtime"))}
    ledger_path = cdir / "ledger.jsonl"
    if not ledger_path.exists():
        out["evidence"] = f"unknown: no {ledger_path}"
        return out
    from ..ledger import load_ledger  # noqa: PLC0415 - the ledger only when there is one to read

    per_machine = evidence(load_ledger(ledger_path), triton, fp.get(COMPILER_FIELD), fp.get(RUNTIME_FIELD))
    out["evidence"] = summary(per_machine, fp.get("gpu_name"))
    out.update({f"on {machine}": text for machine, text in per_machine.items()})
    return out
