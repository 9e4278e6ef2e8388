"""The two provenance hashes: what Triton compiles (stales compile/parity/bench evidence) and the rest of
the runtime (stales only the GPU contract record), so a host-side edit does not throw away kernel evidence.
The split is proved on a copy of this package."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import ledger_factory as F
import pytest

from nsa_triton_sel import provenance
from nsa_triton_sel.compat import ledger

PKG = Path(provenance.__file__).resolve().parent


@pytest.fixture
def pkg(tmp_path) -> Path:
    """A copy of this package (sources and data), to edit."""
    dest = tmp_path / "nsa_triton_sel"
    shutil.copytree(PKG, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def _evidence(hashes: dict) -> list[dict]:
    """A release's CPU and GPU evidence (compile, parity, gradients, contract, bench) run at ``hashes``."""
    fp = {**F.CPU_FP, "torch": "2.11.0+cu130", "cuda_runtime": "13.0", "gpu_name": "NVIDIA H100 80GB HBM3",
          "compute_capability": "9.0", **hashes}
    gpu = (F.recs("3.9", "compile", ["pass"], mode="aot", fp=fp) + F.recs("3.9", "parity", ["pass"], mode="gpu", fp=fp)
           + [{**r, "check": c} for c in ("backward", "contract", "bench")
              for r in F.recs("3.9", "parity", ["pass"], mode="gpu", fp=fp)])
    return F.all_pass("3.9") + gpu


def _judge(recs: list[dict], now: dict) -> tuple:
    """(GPU use of 3.9.0, its GPU records that count, the contract-stale flag) judged at hashes ``now``."""
    v = ledger.release_verdicts(F.TABLE, recs, [], current=now["compiler_hash"], runtime=now["runtime_hash"])["3.9.0"]
    counted, _ = ledger.evidence.fresh([r for r in recs if r.get("machine") != "cpu"], now["compiler_hash"])
    return v.gpu.admitted, len(counted), v.gpu.contract_stale


def test_a_whitespace_edit_in_bind_keeps_compile_evidence_and_stales_the_contract_record(pkg):
    before = provenance.hashes(pkg)
    recs = _evidence(before)
    assert _judge(recs, before) == (["NVIDIA H100 80GB HBM3"], 5, {})
    bind = pkg / "kernels" / "bind.py"
    bind.write_text(bind.read_text() + "\n\n")  # host-side launcher: no Triton source changes
    provenance._hashes.cache_clear()
    after = provenance.hashes(pkg)
    assert after["compiler_hash"] == before["compiler_hash"] and after["runtime_hash"] != before["runtime_hash"]
    admitted, counted, flagged = _judge(recs, after)
    assert admitted == ["NVIDIA H100 80GB HBM3"] and counted == 5  # compile, parity, gradients, bench stand
    assert flagged == {"NVIDIA H100 80GB HBM3": before["runtime_hash"]}  # ... and the contract record is stale


def test_a_changed_planner_tile_size_stales_compile_evidence(pkg):
    before = provenance.hashes(pkg)
    recs = _evidence(before)
    tiles = pkg / "plan" / "tiles.py"
    text = tiles.read_text()
    edited = re.sub(r"return 64, 4, 3", "return 128, 4, 3", text, count=1)
    assert edited != text, "plan/tiles.py no longer has the tile default this test edits; pick another constant"
    tiles.write_text(edited)
    provenance._hashes.cache_clear()
    after = provenance.hashes(pkg)
    assert after["compiler_hash"] != before["compiler_hash"] and after["runtime_hash"] == before["runtime_hash"]
    admitted, counted, _ = _judge(recs, after)
    assert admitted == [] and counted == 0  # every GPU record of the old planner is stale


@pytest.mark.parametrize("path, kind", [
    ("kernels/forward.py", "compiler"), ("kernels/backward.py", "compiler"), ("kernels/common.py", "compiler"),
    ("plan/tiles.py", "compiler"), ("plan/deeper/new.py", "compiler"),
    ("compat/registry/variants.py", "compiler"), ("compat/registry/specs.py", "compiler"),
    ("compat/registry/compile_spec.py", None), ("compat/registry/capture.py", None),
    ("kernels/bind.py", "runtime"), ("kernels/launch.py", "runtime"), ("arguments/route.py", "runtime"),
    ("api.py", "runtime"), ("op.py", "runtime"), ("data/known_bad.toml", "runtime"), ("data/thresholds.json", "runtime"),
    ("compat/commands/cli.py", None), ("compat/ledger/matrix.py", None), ("provenance.py", None), ("py.typed", None),
    ("kernels/__pycache__/x.py", None),
    ("data/notes.txt", None),
])
def test_the_rules_are_globs_over_the_package_tree(path, kind):
    assert provenance.kind_of(path) == kind


def test_every_triton_kernel_source_is_compiler_facing():
    """A module that defines a ``@triton.jit`` function (wherever the runtime layout moves it) must be in
    the compiler-facing hash, or a kernel edit would not stale the evidence about it."""
    jit = re.compile(r"^\s*@triton\.jit\b", re.M)
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG).as_posix()
        if rel.startswith("compat/") or "__pycache__" in rel:
            continue  # the toolkit's canaries are not our kernels
        if jit.search(path.read_text()):
            assert provenance.kind_of(rel) == "compiler", f"{rel} defines a @triton.jit kernel: add it to COMPILER_FACING"


def test_every_runtime_file_is_hashed_and_the_toolkit_is_not():
    files = provenance.package_files()
    registry = ("compat/registry/variants.py", "compat/registry/specs.py")
    assert {"kernels/forward.py", "plan/tiles.py", *registry, "kernels/bind.py", "data/known_bad.toml"} <= set(files)
    assert not any(n.startswith("compat/") and n not in registry for n in files)
    shipped = {p.relative_to(PKG).as_posix() for p in PKG.rglob("*.py") if "__pycache__" not in p.parts}
    assert {n for n in shipped if not n.startswith("compat/")} - {"provenance.py"} <= set(files)


def test_both_hashes_are_recorded_and_kernel_source_hash_is_the_compiler_facing_one():
    from nsa_triton_sel.compat.core import env

    fp = env.fingerprint()
    assert fp["compiler_hash"] == provenance.compiler_hash() == provenance.kernel_source_hash()
    assert fp["runtime_hash"] == provenance.runtime_hash() != fp["compiler_hash"]
    lane = F.TABLE.for_version("3.9.0")
    rec = ledger.base_record(lane, fp, check="parity", mode="gpu", session="parity-3.9", run_id="x")
    assert rec["compiler_hash"] == fp["compiler_hash"] and rec["runtime_hash"] == fp["runtime_hash"]
