"""The verdict vocabulary of the toolkit, in one place.

Three families, each a closed set that every reader and writer checks against:

- a *compile* verdict: what one ahead-of-time compile in a child process gave (``nsa-sel smoke``);
- a *record* verdict: one row of the ledger (a compile, a test case, a benchmark);
- an *upgrade* verdict: what ``nsa-sel check-upgrade`` says about a candidate release.

Compile verdicts map onto record verdicts with :data:`FROM_COMPILE`.
"""

from __future__ import annotations

# -- one compile (nsa-sel smoke) -------------------------------------------------------------
OK = "ok"                         # PTX and cubin produced
COMPILE_ERROR = "compile_error"   # the compiler raised
CRASH = "crash"                   # the child died (signal or exit code): e.g. a C++ assertion abort
TIMEOUT = "timeout"               # the child ran past --timeout and was killed
UNSUPPORTED = "unsupported"       # the installed Triton lacks the target or an API the kernel uses
COMPILE_VERDICTS = (OK, COMPILE_ERROR, CRASH, TIMEOUT, UNSUPPORTED)
# How rich shows them in the smoke table.
COMPILE_STYLE = {OK: "green", COMPILE_ERROR: "red", CRASH: "bold red", TIMEOUT: "yellow", UNSUPPORTED: "magenta"}

# -- one ledger record --------------------------------------------------------------------------
PASS, FAIL, ERROR, INTERRUPTED, SKIP, XFAIL = "pass", "fail", "error", "interrupted", "skip", "xfail"
VERDICTS = (PASS, FAIL, ERROR, CRASH, TIMEOUT, INTERRUPTED, SKIP, XFAIL, UNSUPPORTED)
BAD = frozenset({FAIL, ERROR, CRASH, TIMEOUT, INTERRUPTED})
# Worst first: the kind a cell of the matrix is named after when several are bad.
BAD_ORDER = (INTERRUPTED, CRASH, TIMEOUT, ERROR, FAIL)
NEUTRAL = (XFAIL, SKIP, UNSUPPORTED)
FROM_COMPILE = {OK: PASS, COMPILE_ERROR: FAIL, CRASH: CRASH, TIMEOUT: TIMEOUT, UNSUPPORTED: UNSUPPORTED}

# The checks a record belongs to; a lanes table may require only the first four.  "backward" holds the
# backward kernels' evidence (their compiles and the gradient-parity tests), so the matrix shows the
# training path in a column of its own and known-good can require it.
# "contract" holds the user contract on a GPU (every entry point in every mode: tests/test_contract_gpu*.py,
# marker `contract`); its records are judged against the runtime hash, the others against the compiler-facing one.
CHECKS = ("compile", "parity", "bench", "backward", "contract", "compile-canary", "compile-static", "gpu-canary")
REQUIRABLE = ("compile", "parity", "bench", "backward")
BACKWARD_SPEC_PREFIX = "sel_bwd"            # compile specs of kernels/backward.py
BACKWARD_TEST_MODULE_PREFIX = "test_backward"  # the gradient-parity test modules
CONTRACT_TEST_MODULE_PREFIX = "test_contract_gpu"  # the GPU contract suite (tests/test_contract_gpu*.py)


def backward_check(check: str, name: str) -> str:
    """The column a record belongs to: ``"backward"`` for a compile spec of the backward kernels or a
    gradient-parity test case, ``"contract"`` for a test case of the GPU contract suite, else ``check``.

    ``name`` is a compile spec's name (``sel_bwd_dq/fp16/...``) or a test case's
    ``classname::name`` (``tests.library.kernels.test_backward_interp::test_...``; only the module's own
    name counts, so a record classifies alike whatever folder its test module is in).
    """
    if check == "compile" and name.startswith(BACKWARD_SPEC_PREFIX):
        return "backward"
    module = name.partition("::")[0].rpartition(".")[2]
    if check == "parity" and module.startswith(BACKWARD_TEST_MODULE_PREFIX):
        return "backward"
    if check in ("parity", "contract") and module.startswith(CONTRACT_TEST_MODULE_PREFIX):
        return "contract"
    return check

# -- check-upgrade ------------------------------------------------------------------------------
SAFE = "safe"                # every required check passed; nothing regressed
BLOCKED = "blocked"          # a required check failed on the candidate (evidence named)
ENVIRONMENT = "environment"  # the candidate's environment could not be built or trusted: no verdict
UPGRADE_VERDICTS = (SAFE, BLOCKED, ENVIRONMENT)


def check_record_verdict(verdict: str) -> str:
    """``verdict`` if it is a record verdict; a ValueError listing the accepted ones otherwise."""
    if verdict not in VERDICTS:
        raise ValueError(f"unknown verdict {verdict!r}; accepted: {', '.join(VERDICTS)}")
    return verdict
