"""The lanes: one Triton release each, in an environment of its own, its checks recorded as run files.

- :mod:`.nox_sessions`: what the noxfile's sessions do (options, installing the lane and its torch, the
  isolation check, the run file, the summary that ends the log; ``nox -s pin`` and ``constraints``);
- :mod:`.checks`: the checks a lane runs once its environment is ready (compile, parity, bench);
- :mod:`.pytest_plugin`: loaded by every pytest a lane runs, to report the versions it imported;
- :mod:`.bench_store`: the bench lanes' pytest-benchmark storage and check-upgrade's regression gate;
- :mod:`.team`: a compile lane over a user's spec module instead of this package's registry;
- :mod:`.gpu_lane`: the same checks for the Triton this environment imports, without nox (a GPU machine);
- :mod:`.gpu_refresh`: many releases through :mod:`.gpu_lane` at once on one GPU machine;
- :mod:`.jit_warm`: a GPU lane's captured launches compiled into its Triton cache before its tests.

The lanes table itself (``constraints/lanes.toml``) and this machine's cores and archs are
:mod:`..core`; the records the lanes write are :mod:`..ledger`'s; the spec format of the JIT warm-up's launch list is
:mod:`..registry`'s.  May import: core, registry, canaries, smoke, ledger.
"""
