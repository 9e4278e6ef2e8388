"""A pytest plugin the lanes load (``-p nsa_triton_sel.compat.pytest_plugin``): it reports what
the pytest process imported.

At the end of the session it writes ``{"triton": ..., "numpy": ..., "torch": ...}`` (the
versions in ``sys.modules``, None for a package never imported) and where each came from to
the file named by ``$NSA_SEL_IMPORTED_JSON``.  The lane puts these versions on every record of
the run, so a test process that imported another Triton than the lane's cannot pass for it.
"""

from __future__ import annotations

import json
import os

from .env import imported_origins, imported_versions

ENV = "NSA_SEL_IMPORTED_JSON"


def pytest_sessionfinish(session, exitstatus):  # noqa: ARG001 - pytest's hook signature
    path = os.environ.get(ENV)
    if path:
        with open(path, "w") as f:
            json.dump({"imported": imported_versions(), "origins": imported_origins()}, f)
