"""Shared test set-up.

Without a CUDA device the Triton kernels run under the interpreter.  ``triton.jit``
reads ``TRITON_INTERPRET`` when a kernel is *decorated*, so it must be set before any
test module imports ``nsa_triton_sel.kernels``: that is why it is set here, at conftest
import time, and not in the test modules.
"""

import os
import zlib

import pytest
import torch

# One intra-op thread: the CI box has 2 cores shared by several jobs, and torch's
# OpenMP threads spin-wait when oversubscribed (measured: 512 small SDPA calls took
# 26 s with 2 threads under load, 0.5 s with 1).  Tests check results, not speed.
torch.set_num_threads(1)

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_configure(config):
    # Under pytest-xdist (-n), work stealing instead of its default "load": "load" hands each worker a run of
    # consecutive tests up front, and a worker given the slow ones still had minutes of them queued when the
    # other, out of tests, sat idle (900 s on two CPU workers, 240 s of them on one); an idle worker steals
    # half of the busiest one's queue.
    if getattr(config.option, "dist", "no") == "load":
        config.option.dist = "worksteal"


def pytest_collection_modifyitems(config, items):
    # The tests marked slow (15 s to 3 minutes each) first: they start at once and the short ones, queued
    # after them, are what an idle worker steals, so no slow test starts near the end of the run.
    items.sort(key=lambda item: "slow" not in item.keywords)  # stable: the collection order otherwise
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (none found: torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _fresh_config():
    """Flags, the thresholds file, devices and routes are read once per process (config.refresh):
    every test starts from, and leaves, a freshly read configuration."""
    from nsa_triton_sel import config

    config.refresh()
    yield
    config.refresh()


@pytest.fixture(autouse=True)
def _triton_variables_restored():
    """Each test leaves the ``TRITON_*`` environment as it found it.  torch.compile's Inductor points Triton at
    torch's own ``ptxas`` by setting ``TRITON_PTXAS_PATH`` in ``os.environ``, once per process; under a Triton that
    torch does not pin, that ``ptxas`` can be one the Triton cannot use, and every later test of the process would
    compile with it (a failure of one test case showing up in the unrelated cases after it)."""
    before = {k: v for k, v in os.environ.items() if k.startswith("TRITON_")}
    yield
    for k in [k for k in os.environ if k.startswith("TRITON_") and k not in before]:
        del os.environ[k]
    os.environ.update(before)


@pytest.fixture
def every_row_through_triton(monkeypatch):
    """The dispatcher with no flag set but NSA_SEL_TRITON_MIN_L=0, and no remembered kernel failure."""
    from nsa_triton_sel import config, failures

    monkeypatch.setenv("NSA_SEL_TRITON_MIN_L", "0")
    for name in ("NSA_USE_TRITON_SEL", "NSA_FORCE_PARITY", "NSA_SEL_TRITON_TOKENS", "NSA_SEL_TRITON_GROUP"):
        monkeypatch.delenv(name, raising=False)
    config.refresh()
    failures.FORWARD.clear()
    yield
    failures.FORWARD.clear()


@pytest.fixture
def seed(request) -> int:
    """A seed per test: stable across runs (derived from the test id), different between
    tests so they do not all draw the same data.  Also seeds torch's global generator.

    The id is taken as ``tests/<module file>::<test>``, without the folders between: a module moved
    to another folder keeps its data (test module names are unique under tests/)."""
    module, sep, test = request.node.nodeid.partition("::")
    value = zlib.crc32(f"tests/{module.rpartition('/')[2]}{sep}{test}".encode()) & 0x7FFFFFFF
    torch.manual_seed(value)
    return value


@pytest.fixture
def host_syncs(monkeypatch) -> list[str]:
    """Records every call of a Tensor method that copies values to the host (a device
    synchronisation on a GPU), so CPU tests can prove a path has no per-row syncs."""
    calls: list[str] = []
    for name in ("item", "tolist", "__int__", "__float__", "__bool__", "__index__", "numpy"):
        real = getattr(torch.Tensor, name)

        def spy(t, *args, _real=real, _name=name, **kwargs):
            calls.append(_name)
            return _real(t, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, spy)
    return calls


@pytest.fixture(autouse=True)
def _record_oracle_errors(record_property):
    """Put the largest oracle errors a test saw into the junit report (the ledger's metrics)."""
    import kernel_checks

    kernel_checks.ERRORS.clear()
    yield
    for key in ("max_abs_err", "mean_abs_err", "rel_err", "sdpa_rel_err"):
        values = [e[key] for e in kernel_checks.ERRORS]
        if values:
            record_property(key, f"{max(values):.3e}")
