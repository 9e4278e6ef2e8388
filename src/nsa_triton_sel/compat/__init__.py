"""The compatibility toolkit: compile smoke, lanes, verdict ledger, known-good pins, pre-upgrade check.

This wing runs the Triton matrix; the kernel library (``nsa_triton_sel`` outside this package)
never imports it.  Modules here import only the standard library and ``packaging`` at module
level, so the noxfile can load them before any lane exists.

One package per stage, each importing only the stages below it (its ``__init__`` says which;
``tests/test_layering.py`` holds them to it):

- :mod:`.core`: what every stage shares (the project's files, the lanes table, this machine, verdicts,
  atomic writes, the environment fingerprint, the command-line conventions);
- :mod:`.registry`: what the compile smoke compiles (the spec format, this package's registry, capture);
- :mod:`.canaries`: deliberately broken kernels the harness must classify, and GPU miscompile canaries;
- :mod:`.smoke`: ``nsa-sel smoke``, one ahead-of-time compile per spec and arch in child processes;
- :mod:`.ledger`: the records, the ledger file, MATRIX.md, known-good.txt and ``nsa-sel pin``;
- :mod:`.lanes`: each Triton release in an environment of its own (the nox sessions, the GPU lane);
- :mod:`.commands`: the ``nsa-sel`` router and the commands built on the rest (doctor, releases,
  check-upgrade, matrix).
"""
