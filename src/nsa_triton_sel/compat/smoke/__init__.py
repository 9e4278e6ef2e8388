"""``nsa-sel smoke``: the GPU-less compile smoke harness.

- :mod:`.report`: the result and report types (the ledger's input format);
- :mod:`.children`: the child processes (environment, isolation, timeouts, crash messages);
- :mod:`.run`: one run (probes, every spec x arch, canary expectations);
- :mod:`.render`: the progress bar and the verdict table (rich);
- :mod:`.cli`: the command line, every argument checked before the run.
"""

from .children import child_env, child_paths, crash_message, is_site_dir, run_child
from .cli import main
from .report import SmokeReport, SmokeResult
from .run import DEFAULT_ARCHS, make_result, parse_archs, run_smoke

__all__ = ["DEFAULT_ARCHS", "SmokeReport", "SmokeResult", "child_env", "child_paths", "crash_message",
           "is_site_dir", "main", "make_result", "parse_archs", "run_child", "run_smoke"]
