"""``nsa-sel doctor``'s known-good section: the installed pair's status and its evidence."""

from __future__ import annotations

import json

from packaging.version import Version

from nsa_triton_sel.compat.commands import cli, doctor, standing
from nsa_triton_sel.compat.core import lane_table, project

TABLE = lane_table.load_table(project.constraints_dir() / "lanes.toml")
KNOWN_GOOD = """# GENERATED
# admitted  3.1.0   (lane 3.1; torch 2.5.1 / 2.5.0)
# excluded  3.2.0   (lane 3.2; torch 2.6.0): parity: 3 fail
triton>=3.1.0,<=3.1.0
"""


def _rec(check, mode, verdict, machine="cpu", triton="3.1.0", torch="2.13.0+cpu", paired=False):
    return {"triton": triton, "check": check, "mode": mode, "verdict": verdict, "machine": machine,
            "torch": torch, "torch_paired": paired}


def test_known_good_admitted_excluded_and_unlisted(tmp_path):
    path = tmp_path / "known-good.txt"
    path.write_text(KNOWN_GOOD)
    assert standing.known_good(path, Version("3.1.0"))[0] == "known-good"
    assert standing.known_good(path, Version("3.2.0")) == ("excluded", "parity: 3 fail")
    status, why = standing.known_good(path, Version("3.10.0"))
    assert status == "not listed" and "nsa-sel check-upgrade 3.10.0" in why


def test_evidence_names_cpu_only_or_the_gpus_and_whether_this_gpu_ran_it():
    cpu = [_rec("compile", "aot", "pass"), _rec("compile", "aot", "pass"), _rec("parity", "interp", "pass"),
           _rec("parity", "interp", "pass", triton="3.2.0"), _rec("compile-static", "aot", "pass")]
    per = standing.evidence(cpu, Version("3.1.0"))
    assert per == {"cpu": "compile (aot) 2 pass; parity (interp) 1 pass; torch 2.13.0+cpu off-pair"}
    assert standing.summary(per, None).startswith("CPU only")
    gpu = cpu + [_rec("parity", "gpu", "pass", machine="NVIDIA H100", torch="2.5.1+cu124", paired=True),
                 _rec("contract", "gpu", "pass", machine="NVIDIA H100", torch="2.5.1+cu124", paired=True)]
    per = standing.evidence(gpu, Version("3.1.0"))
    assert per["NVIDIA H100"] == "parity (gpu) 1 pass; contract (gpu) 1 pass; torch 2.5.1+cu124"
    assert standing.summary(per, "NVIDIA H100") == "CPU and GPU: NVIDIA H100; this GPU (NVIDIA H100) is among them"
    assert standing.summary(per, "NVIDIA A100").endswith("this GPU (NVIDIA A100) has not run them")
    assert standing.summary({}, None).startswith("none")
    no_contract = standing.evidence(gpu[:-1], Version("3.1.0"))
    assert "; no GPU contract run: NVIDIA H100;" in standing.summary(no_contract, "NVIDIA H100")


def _h(rec, compiler, runtime="r1"):
    return dict(rec, compiler_hash=compiler, runtime_hash=runtime)


def test_gpu_evidence_about_other_kernel_sources_is_stale():
    old = _h(_rec("parity", "gpu", "pass", machine="NVIDIA H100"), "old")
    new = _h(_rec("parity", "gpu", "pass", machine="NVIDIA H100"), "new")
    only_old = standing.evidence([old], Version("3.1.0"), kernel_hash="new")
    assert set(only_old) == {"NVIDIA H100" + standing.STALE}
    assert standing.summary(only_old, None) == ("no current evidence; stale only, about other kernel sources "
                                                "(not counted): NVIDIA H100")


def test_a_gpu_with_current_and_stale_records_is_named_once_as_current():
    """A GPU with both current and stale records is named once, as current: never stale and current in one
    sentence."""
    recs = [_h(_rec("compile", "aot", "pass", machine="NVIDIA H100"), "old"),
            _h(_rec("parity", "gpu", "pass", machine="NVIDIA H100"), "new"),
            _h(_rec("contract", "gpu", "pass", machine="NVIDIA H100"), "new"), _rec("parity", "interp", "pass")]
    per = standing.evidence(recs, Version("3.1.0"), kernel_hash="new", runtime_hash="r1")
    assert set(per) == {"cpu", "NVIDIA H100"} and "compile" not in per["NVIDIA H100"]  # the stale one is history
    text = standing.summary(per, "NVIDIA H100")
    assert text == "CPU and GPU: NVIDIA H100; this GPU (NVIDIA H100) is among them"
    assert text.count("H100") == 2 and "stale" not in text


def test_a_contract_record_of_another_runtime_is_flagged_not_withdrawn():
    recs = [_h(_rec("parity", "gpu", "pass", machine="NVIDIA H100"), "new", "r1"),
            _h(_rec("contract", "gpu", "pass", machine="NVIDIA H100"), "new", "r1")]
    per = standing.evidence(recs, Version("3.1.0"), kernel_hash="new", runtime_hash="r2")
    assert per["NVIDIA H100"].startswith("parity (gpu) 1 pass; contract" + standing.CONTRACT_STALE + " (gpu) 1 pass")
    text = standing.summary(per, None)
    assert text.startswith("GPU: NVIDIA H100; GPU contract record of another runtime (stale")
    assert "no GPU contract run" not in text


def test_pairing_needs_a_cuda_build_of_a_torch_that_pins_the_release():
    v = Version("3.1.0")
    assert standing.pairing(TABLE, v, "2.5.1+cu124", "12.4").startswith("paired")
    assert standing.pairing(TABLE, v, "2.13.0+cpu", None).startswith("off-pair: torch 2.13.0+cpu is a CPU build")
    assert standing.pairing(TABLE, v, "2.6.0", "12.4").startswith("off-pair: torch 2.6.0; triton 3.1.0 pairs with")


def test_outside_the_project_it_says_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(project.ENV_CONSTRAINTS, raising=False)
    out = standing.standing({"triton": "3.1.0"})
    assert out["status"] == "unknown" and "no constraints/lanes.toml" in out["why"]


def test_doctor_reports_the_installed_pair(capsys):
    assert cli.main(["doctor", "--no-interp", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    kg = doc["known_good"]
    import triton

    assert kg["status"].endswith(f"triton {triton.__version__}") and kg["pair"] and kg["evidence"]
    if kg["status"].startswith("known-good"):  # admitted: the committed ledger holds its evidence
        assert any(key.startswith("on ") for key in kg)
    assert doctor._doctor_report(probe=False)["known_good"]["why"]
