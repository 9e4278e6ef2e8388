"""The ledger file (``constraints/ledger.jsonl``): read it strictly, merge runs into it, write it.

One JSON record per line, strict JSON in and out (NaN and Infinity are refused with the record's
line, never written).  For each :func:`run_key` (release, check, mode, machine) only the newest
run's records are kept, so a re-run lane never leaves stale rows behind.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
from pathlib import Path

from packaging.version import Version

from ..core.atomic import FileProblem, dumps_json, loads_json, read_text
from .records import migrate, problems


class LedgerError(ValueError):
    """A ledger line that is not a valid record; the message is ``file:line: what is wrong``."""


def load_ledger(path: Path) -> list[dict]:
    """Records of a JSON-Lines ledger; a missing file is an empty ledger, a bad line an error."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return []
    try:
        text = read_text(path)  # a directory, FIFO, device or binary file is an error, not a hang or a traceback
    except FileProblem as exc:
        raise LedgerError(str(exc)) from None
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = loads_json(line)  # NaN, Infinity, 1e400, a 5000-digit number, nesting past the parser: refused
        except ValueError as exc:
            raise LedgerError(f"{path}:{n}: not a ledger record: {exc}") from None
        rec = migrate(rec)
        bad = problems(rec)
        if bad:
            raise LedgerError(f"{path}:{n}: {'; '.join(bad)}")
        out.append(rec)
    return out


def run_key(rec: dict) -> tuple:
    """Records sharing this key describe the same question; only the newest run answers it."""
    return (rec.get("lane"), rec.get("triton"), rec.get("check"), rec.get("mode"), rec.get("machine") or "cpu")


def _when(rec: dict) -> _dt.datetime:
    try:
        when = _dt.datetime.fromisoformat(rec.get("date") or "")
    except ValueError:
        when = _dt.datetime.min
    return when if when.tzinfo else when.replace(tzinfo=_dt.timezone.utc)


def merge(ledger: list[dict], new: list[dict]) -> list[dict]:
    """Ledger + new records, keeping for each :func:`run_key` only the newest run's records.

    Runs are ordered by their date; on a tie the new records win, so re-pinning the same run
    files is idempotent.
    """
    newest: dict[tuple, tuple[_dt.datetime, int, str]] = {}
    for order, recs in ((0, ledger), (1, new)):
        for rec in recs:
            key, stamp = run_key(rec), (_when(rec), order, rec.get("run_id") or "")
            if key not in newest or stamp > newest[key]:
                newest[key] = stamp
    seen, out = set(), []
    for order, recs in ((1, new), (0, ledger)):
        for rec in recs:
            key = run_key(rec)
            when, win_order, win_run = newest[key]
            if (rec.get("run_id") or "") != win_run or order != win_order:
                continue
            ident = (key, rec.get("kernel"), rec.get("arch"))
            if ident not in seen:  # duplicate rows of one run (pinned twice) collapse
                seen.add(ident)
                out.append(rec)
    return sort_records(out)


def sort_records(recs: list[dict]) -> list[dict]:
    """Release, then session (one lane run), machine, check, mode, kernel, arch: the records of one run
    are contiguous and keep their order, so re-pinning one re-run lane changes only that lane's lines."""
    def key(r):
        return (Version(r.get("triton") or "0"), r.get("session") or "", r.get("machine") or "",
                r.get("check") or "", r.get("mode") or "", r.get("kernel") or "", r.get("arch") or 0)
    return sorted(recs, key=key)


def dump_ledger(recs: list[dict]) -> str:
    """The ledger's text; a record holding NaN or Infinity is a ValueError, never written (strict JSON)."""
    return "".join(dumps_json(r, sort_keys=True) + "\n" for r in recs)


def digest(ledger_text: str, kernel_hash: str | None = None) -> str:
    """The generation marker: MATRIX.md and known-good.txt name the ledger text they came from, and the
    sources they judged it against (default: this checkout's compiler-facing and runtime hashes,
    ``nsa_triton_sel.provenance.hashes``).

    Both are in it because both decide what the files say: after a kernel change the evidence is
    stale, after a runtime change the contract record, so ``nsa-sel pin --check`` fails until a pin
    re-renders the files.
    """
    if kernel_hash is None:
        from ...provenance import hashes  # noqa: PLC0415

        kernel_hash = " ".join(f"{k}={v}" for k, v in sorted(hashes().items()))
    return hashlib.sha256(ledger_text.encode() + b"\0kernels " + kernel_hash.encode()).hexdigest()[:16]
