"""known-good.txt: exactly the releases with evidence, a reason beside every exclusion."""

from __future__ import annotations

import pytest
from packaging.specifiers import SpecifierSet

import ledger_factory as F
from nsa_triton_sel import known_bad
from nsa_triton_sel.compat import ledger


@pytest.mark.parametrize(
    "admitted, excluded",
    [
        (["3.1.0", "3.5.1", "3.9.0"], ["3.3.1", "3.3.0", "3.5.0"]),
        (["3.9.0"], ["3.1.0", "3.3.1", "3.5.1"]),
        (["3.1.0", "3.3.1"], ["3.3.0", "3.5.1", "3.9.0", "3.10.0"]),
        ([], ["3.1.0", "3.9.0"]),
    ],
)
def test_known_good_specifier_admits_exactly_the_passing_versions(admitted, excluded):
    spec = SpecifierSet(ledger.known_good_specifier(admitted, excluded))
    for v in admitted:
        assert v in spec
    for v in excluded:
        assert v not in spec


def test_known_good_excludes_whole_failing_minor_including_future_patches():
    spec = ledger.known_good_specifier(["3.1.0", "3.5.1"], ["3.3.1"])
    assert "!=3.3.*" in spec and "3.3.2" not in SpecifierSet(spec)


def _render(recs, windows=()):
    verdicts = ledger.release_verdicts(F.TABLE, recs, list(windows))
    return ledger.render_known_good(F.TABLE, verdicts, list(windows), "constraints/ledger.jsonl", "0123456789abcdef")


def test_render_known_good_has_reasons_and_one_constraint_line():
    recs = F.mixed() + F.recs("3.5.0", "compile", ["pass"]) + F.recs("3.5.0", "parity", ["pass"])
    text = _render(recs)
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert len(lines) == 1 and lines[0].startswith("triton")
    spec = SpecifierSet(lines[0][len("triton"):])
    assert set(spec.filter(["3.1.0", "3.3.0", "3.3.1", "3.5.0", "3.5.1", "3.9.0"])) == {"3.1.0", "3.5.0", "3.5.1", "3.9.0"}
    assert ("# excluded  3.3.1   (lane 3.3; pairs with torch 2.7.1; tested with 2.13.0+cpu (CPU)): compile fail"
            in text)
    assert ("# excluded  3.3.0   (lane 3.3 patch; pairs with torch 2.7.0; tested with nothing yet): compile not run "
            "(no evidence in the ledger)") in text
    assert ("# admitted  3.5.0   (lane 3.5 patch; pairs with torch 2.9.0; tested with 2.13.0+cpu (CPU)); "
            "GPU: no GPU evidence (CPU only") in text
    assert "generation 0123456789abcdef" in text
    assert "not a tested lane release" not in text


def test_every_exclusion_names_its_reason():
    text = _render(F.mixed())
    for line in text.splitlines():
        if line.startswith("# excluded"):
            assert "): " in line and line.split("): ", 1)[1].strip(), line


def test_interp_only_window_is_a_note_not_an_exclusion():
    windows = known_bad.parse('schema = 1\n[[window]]\nid = "i"\ntriton = "<3.2"\nchecks = ["parity"]\n'
                              'modes = ["interp"]\nreason = "interp gap"\n')
    xml = ('<testsuite><testcase classname="t" name="a"><failure message="boom"/></testcase>'
           '<testcase classname="t" name="b"/></testsuite>')
    parity = ledger.records_from_junit(xml, F.base("3.1", "parity"), windows)
    assert [r["verdict"] for r in parity] == ["xfail", "pass"]
    recs = F.recs("3.1", "compile", ["pass"]) + parity
    ok, why = ledger.release_verdicts(F.TABLE, recs, windows)["3.1.0"]
    assert ok and why == []
    text = _render(recs, windows)
    assert "# note: [i]" in text and "interpreter defect" in text


def _gpu_recs(fp, version="3.9", contract=("pass",)):
    """GPU parity, gradients and (unless ``contract=()``) a GPU contract run of one release."""
    return (F.recs(version, "parity", ["pass", "pass"], mode="gpu", fp=fp)
            + [{**r, "check": "backward"} for r in F.recs(version, "parity", ["pass"], mode="gpu", fp=fp)]
            + [{**r, "check": "contract"} for r in F.recs(version, "parity", list(contract), mode="gpu", fp=fp)])


def test_gpu_use_needs_fresh_gpu_evidence_and_names_the_gpu_and_torch():
    gpu_fp = {**F.CPU_FP, "torch": "2.11.0+cu130", "cuda_runtime": "13.0", "gpu_name": "NVIDIA H100 80GB HBM3",
              "compiler_hash": "k" * 16, "runtime_hash": "r" * 16}
    recs = F.all_pass("3.5") + F.all_pass("3.9") + _gpu_recs(gpu_fp)

    def render(current, runtime="r" * 16):
        verdicts = ledger.release_verdicts(F.TABLE, recs, [], current=current, runtime=runtime)
        return ledger.render_known_good(F.TABLE, verdicts, [], "constraints/ledger.jsonl", "0" * 16, current=current)

    fresh = render("k" * 16)
    line = next(ln for ln in fresh.splitlines() if ln.startswith("# admitted  3.9.0"))
    assert "tested with 2.13.0+cpu (CPU) and 2.11.0+cu130 (H100, off-pair)" in line
    assert "GPU: admitted for GPU use on NVIDIA H100 80GB HBM3" in line and "contract" not in line
    assert "triton>=3.9.0,<=3.9.0  (on NVIDIA H100 80GB HBM3)" in fresh
    stale = render("n" * 16)  # the kernels changed since
    line = next(ln for ln in stale.splitlines() if ln.startswith("# admitted  3.9.0"))
    assert "stale evidence only (kernels kkkkkkkkkkkkkkkk, now nnnnnnnnnnnnnnnn)" in line
    assert "# GPU use: no release has GPU evidence about the current compiler-facing sources (nnnnnnnnnnnnnnnn)" in stale
    assert "3.5.1" in next(ln for ln in stale.splitlines() if not ln.startswith("#"))  # CPU admission unchanged
    runtime_edit = render("k" * 16, runtime="s" * 16)  # a host-side edit: GPU use stands, the contract is flagged
    line = next(ln for ln in runtime_edit.splitlines() if ln.startswith("# admitted  3.9.0"))
    assert "GPU: admitted for GPU use on NVIDIA H100 80GB HBM3" in line
    assert f"contract record stale (runtime {'r' * 16}, now {'s' * 16}" in line
    assert "triton>=3.9.0,<=3.9.0  (on NVIDIA H100 80GB HBM3)" in runtime_edit


def test_a_failing_gpu_bench_record_refuses_gpu_use():
    gpu_fp = {**F.CPU_FP, "torch": "2.11.0+cu130", "cuda_runtime": "13.0", "gpu_name": "H100",
              "compiler_hash": "k", "runtime_hash": "r"}
    gpu = _gpu_recs(gpu_fp) + F.recs("3.9", "bench", ["fail"], mode="gpu", fp=gpu_fp)
    v = ledger.release_verdicts(F.TABLE, F.all_pass("3.9") + gpu, [], current="k", runtime="r")["3.9.0"]
    assert v[0] and v.gpu.admitted == [] and "bench fail" in v.gpu.refused["H100"]


def test_gpu_use_needs_a_contract_run_and_only_a_current_one_can_refuse():
    gpu_fp = {**F.CPU_FP, "torch": "2.11.0+cu130", "cuda_runtime": "13.0", "gpu_name": "H100",
              "compiler_hash": "k", "runtime_hash": "r"}

    def gpu_of(recs, runtime="r"):
        return ledger.release_verdicts(F.TABLE, F.all_pass("3.9") + recs, [], current="k", runtime=runtime)["3.9.0"].gpu

    none = gpu_of(_gpu_recs(gpu_fp, contract=()))
    assert none.admitted == [] and "no GPU contract run" in none.refused["H100"]
    failing = _gpu_recs(gpu_fp, contract=("pass", "fail"))
    assert "contract fail" in gpu_of(failing).refused["H100"]
    old = gpu_of(failing, runtime="r2")  # that failure ran another runtime: flagged, it cannot refuse
    assert old.admitted == ["H100"] and old.contract_stale == {"H100": "r"}
    xfail = gpu_of(_gpu_recs(gpu_fp, contract=("pass", "xfail")))  # an off-pair compile case, recorded
    assert xfail.admitted == ["H100"] and not xfail.contract_stale


def test_a_cpu_lane_that_ran_its_pair_says_paired():
    paired_fp = {**F.CPU_FP, "torch": "2.15.0+cu132", "cuda_runtime": "13.2"}
    recs = F.recs("3.9", "compile", ["pass"]) + F.recs("3.9", "parity", ["pass"], mode="interp", fp=paired_fp)
    recs += [{**r, "check": "backward"} for r in F.recs("3.9", "parity", ["pass"], mode="interp", fp=paired_fp)]
    v = ledger.release_verdicts(F.TABLE, recs, [])["3.9.0"]
    assert v.tested == ["2.13.0+cpu (CPU)", "2.15.0+cu132 (CPU, paired)"]
