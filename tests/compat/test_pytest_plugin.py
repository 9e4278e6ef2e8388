"""The lanes' pytest plugin reports what the pytest process imported."""

from __future__ import annotations

import json
import subprocess
import sys


def test_plugin_writes_the_imported_versions(tmp_path):
    (tmp_path / "test_x.py").write_text("import numpy\n\ndef test_x():\n    assert numpy.__version__\n")
    out = tmp_path / "imported.json"
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "nsa_triton_sel.compat.pytest_plugin",
                          "-p", "no:cacheprovider", str(tmp_path / "test_x.py")], cwd=tmp_path,
                         env={**__import__("os").environ, "NSA_SEL_IMPORTED_JSON": str(out)},
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(out.read_text())
    import numpy

    assert doc["imported"]["numpy"] == numpy.__version__
    assert set(doc["imported"]) == {"triton", "numpy", "torch"} and doc["origins"]["numpy"]
