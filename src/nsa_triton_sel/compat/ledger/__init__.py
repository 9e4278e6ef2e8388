"""The verdict ledger: lane records, run files, the ledger file, MATRIX.md, known-good.txt, pin.

- :mod:`.records`: what a record is, how one is built, the isolation check;
- :mod:`.reports`: records from the smoke report, pytest's junit XML, pytest-benchmark JSON;
- :mod:`.runfiles`: the run file each lane session leaves in the results directory;
- :mod:`.store`: the ledger file (strict reading, merge, generation digest);
- :mod:`.cells`: verdicts per release and check, admission to known-good;
- :mod:`.known_good`, :mod:`.matrix`: the two rendered files;
- :mod:`.pinning`: ``nsa-sel pin`` (lock, one commit for the three files, ``--check``, ``--reset``);
- :mod:`.archs`, :mod:`.evidence`, :mod:`.gpu_tables`: evidence per arch, which kernels and GPUs a record
  is about, the GPU tables of MATRIX.md (with the canaries' notes); :mod:`.backfill`: hashes for old records.

May import: core, canaries.
"""

from .cells import NOT_RUN, by_release_check, cell, first_line, reasons, release_verdicts
from .known_good import known_good_specifier, render_known_good
from .gpu_tables import gpu_evidence
from .matrix import render_matrix
from .pinning import PinError, main, pin, verify
from .records import (IMPORTED_FIELDS, SCHEMA, SPECS_FIELD, base_record, enforce_isolation, imported_fields, imported_versions, isolation_problem,
                      now_iso, off_pair_reason, problems, record)
from .reports import (attach_benchmarks, records_from_junit, records_from_smoke, tidy_message, unscoped_known_bad,
                      unscoped_warning)
from .runfiles import RunFileError, load_run_files, read_run_file, records_of_run, run_file, write_run
from .store import LedgerError, digest, dump_ledger, load_ledger, merge, run_key, sort_records

__all__ = [
    "IMPORTED_FIELDS", "NOT_RUN", "SCHEMA", "SPECS_FIELD", "LedgerError", "PinError", "RunFileError", "attach_benchmarks",
    "base_record", "by_release_check", "cell", "digest", "dump_ledger", "enforce_isolation", "first_line",
    "gpu_evidence", "imported_fields", "imported_versions", "isolation_problem", "known_good_specifier", "load_ledger", "load_run_files",
    "main", "merge", "now_iso", "off_pair_reason", "pin", "problems", "read_run_file", "reasons", "record",
    "records_from_junit", "records_from_smoke", "records_of_run", "release_verdicts", "render_known_good",
    "render_matrix", "run_file", "run_key", "sort_records", "tidy_message", "unscoped_known_bad", "unscoped_warning",
    "verify", "write_run",
]
