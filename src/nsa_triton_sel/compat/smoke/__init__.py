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

import importlib

# The harness's names, each from the module that defines it, imported when first asked for: a compile child
# (``python -m nsa_triton_sel.compat.smoke.aot``, the compile server) and ``python -m
# nsa_triton_sel.compat.smoke.static_check`` load this package, never the harness around them.
_HOMES = {
    "child_env": "children", "child_paths": "children", "crash_message": "children", "is_site_dir": "children",
    "run_child": "children", "main": "cli", "SmokeReport": "report", "SmokeResult": "report",
    "DEFAULT_ARCHS": "run", "make_result": "run", "parse_archs": "run", "run_smoke": "run",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
