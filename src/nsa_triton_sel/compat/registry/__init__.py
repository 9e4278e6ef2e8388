"""What the compile smoke compiles: the spec format and the registries written in it.

- :mod:`.compile_spec`: :class:`~.compile_spec.CompileSpec` (one ``@triton.jit`` kernel specialisation),
  the rule that types its runtime arguments, and loading a spec module (this package's or a team's);
- :mod:`.variants`: the variants of this package's kernels, derived by sweeping the launch planner;
- :mod:`.specs`: this package's registry, built from them (with :mod:`.variants`, the compiler-facing
  files of :mod:`nsa_triton_sel.provenance`);
- :mod:`.capture`: ``nsa-sel capture``, a command's Triton launches written as a spec module.

Imports neither torch nor triton.  May import: core.
"""
