"""``nsa-sel smoke``: the GPU-less compile smoke harness, and the checks it runs on each spec.

- :mod:`.report`: the result and report types (the ledger's input format);
- :mod:`.children`: the child processes (environment, isolation, timeouts, crash messages);
- :mod:`.aot`: one ahead-of-time compile, inside a child (``python -m nsa_triton_sel.compat.smoke.aot``);
- :mod:`.forkserver`: the compile server, a child that imports Triton once and forks one process per compile;
- :mod:`.static_check`: the Triton API range a kernel source needs (AST; the ``compile-static`` check);
- :mod:`.run`: one run (probes, every spec x arch, canary expectations);
- :mod:`.render`: the progress bar and the verdict table (rich);
- :mod:`.cli`: the command line, every argument checked before the run.

What it compiles comes from :mod:`..registry` (and :mod:`..canaries`).  May import: core, registry, canaries.
"""

from .children import child_env, child_paths, crash_message, is_site_dir, run_child
from .cli import main
from .report import SmokeReport, SmokeResult
from .run import DEFAULT_ARCHS, make_result, parse_archs, run_smoke

__all__ = ["DEFAULT_ARCHS", "SmokeReport", "SmokeResult", "child_env", "child_paths", "crash_message",
           "is_site_dir", "main", "make_result", "parse_archs", "run_child", "run_smoke"]
