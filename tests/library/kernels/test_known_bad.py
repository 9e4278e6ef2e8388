"""Known-bad windows: parsing, version/arch/check matching with packaging, the runtime guard."""

from __future__ import annotations

import warnings

import pytest

from nsa_triton_sel import known_bad

TOML = """
schema = 1

[[window]]
id = "hopper-miscompile"
triton = ">=3.4,<3.7.1"
arch = [90]
checks = ["parity"]
reason = "wrong results on sm_90"

[[window]]
id = "everywhere"
triton = "==3.10.*"
reason = "does not compile at all"
"""


@pytest.fixture
def windows():
    return known_bad.parse(TOML)


def test_committed_file_parses():
    assert all(w.reason for w in known_bad.load())


@pytest.mark.parametrize(
    "version, arch, check, expected",
    [
        ("3.4.0", 90, "parity", ["hopper-miscompile"]),
        ("3.6.0", 90, None, ["hopper-miscompile"]),
        ("3.7.1", 90, "parity", []),  # the fixing release is outside the window
        ("3.7.0", 90, "parity", ["hopper-miscompile"]),
        ("3.5.1", 80, "parity", []),  # other arch
        ("3.5.1", None, "parity", []),  # arch unknown: an arch window cannot claim it
        ("3.5.1", 90, "compile", []),  # other check
        ("3.5.0rc1", 90, "parity", ["hopper-miscompile"]),  # pre-release inside the window counts
        ("3.4.0rc1", 90, "parity", []),  # PEP 440: 3.4.0rc1 < 3.4, outside ">=3.4"
        ("3.10.0", None, None, ["everywhere"]),
        ("3.10.2", 80, "bench", ["everywhere"]),
        ("3.1.0", None, None, []),  # "3.1.0" >= "3.10" as strings; packaging knows better
    ],
)
def test_matching(windows, version, arch, check, expected):
    assert [w.id for w in known_bad.matching(version, arch, check, windows)] == expected


def test_expected_failure_names_window_and_reason(windows):
    why = known_bad.expected_failure("3.5.1", 90, "parity", windows)
    assert "hopper-miscompile" in why and "wrong results" in why
    assert known_bad.expected_failure("3.9.0", 90, "parity", windows) is None


def test_only_all_arch_windows_exclude_from_known_good(windows):
    assert [w.id for w in known_bad.excluding_windows("3.10.0", windows)] == ["everywhere"]
    assert known_bad.excluding_windows("3.5.1", windows) == []


def test_missing_fields_and_bad_specifiers_fail_loudly():
    with pytest.raises(ValueError, match="lacks"):
        known_bad.parse('schema = 1\n[[window]]\nid = "x"\ntriton = ">=3.0"\n')
    with pytest.raises(Exception):
        known_bad.parse('schema = 1\n[[window]]\nid = "x"\ntriton = "3.0 or so"\nreason = "r"\n')
    with pytest.raises(ValueError, match="schema"):
        known_bad.parse("schema = 7\n")


def test_check_installed_reports_reason_for_installed_version(monkeypatch, windows):
    monkeypatch.setattr(known_bad, "_installed_triton", lambda: "3.10.1")
    reason = known_bad.check_installed(arch=None, windows=windows)
    assert reason.startswith("Triton 3.10.1 is known-bad") and "does not compile" in reason
    monkeypatch.setattr(known_bad, "_installed_triton", lambda: "3.6.0")
    assert known_bad.check_installed(arch=80, windows=windows) is None
    assert "wrong results on sm_90" in known_bad.check_installed(arch=90, windows=windows)


def test_check_installed_without_triton_is_none(monkeypatch, windows):
    monkeypatch.setattr(known_bad, "_installed_triton", lambda: None)
    assert known_bad.check_installed(windows=windows) is None


def test_warn_if_known_bad_emits_warning(monkeypatch, tmp_path):
    path = tmp_path / "kb.toml"
    path.write_text(TOML)
    monkeypatch.setenv("NSA_SEL_KNOWN_BAD", str(path))
    known_bad._cached.cache_clear()
    monkeypatch.setattr(known_bad, "_installed_triton", lambda: "3.10.0")
    try:
        with pytest.warns(known_bad.KnownBadTritonWarning, match="does not compile"):
            assert known_bad.warn_if_known_bad(arch=80)
    finally:
        known_bad._cached.cache_clear()


def test_guard_never_raises_on_garbage_version(monkeypatch, windows):
    monkeypatch.setattr(known_bad, "_installed_triton", lambda: "not-a-version")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert known_bad.check_installed(arch=90, windows=windows) is None


def test_touching_ignores_arch_and_check(windows):
    assert [w.id for w in known_bad.touching("3.5.1", windows)] == ["hopper-miscompile"]
    assert known_bad.touching("3.9.0", windows) == []


INTERP = """
schema = 1
[[window]]
id = "interp31"
triton = "<3.2"
checks = ["parity"]
modes = ["interp"]
reason = "3.1 interpreter passes plain ints"
"""


def test_interp_only_window_covers_interpreter_runs_only():
    (w,) = known_bad.parse(INTERP)
    assert w.interp_only and "(interp only)" in w.describe()
    assert known_bad.expected_failure("3.1.0", None, "parity", [w], mode="interp")
    assert known_bad.expected_failure("3.1.0", 90, "parity", [w], mode="gpu") is None
    assert known_bad.expected_failure("3.1.0", None, "parity", [w]) is None  # mode unknown
    assert known_bad.excluding_windows("3.1.0", [w]) == []  # never keeps a release out of known-good


def test_interp_only_window_guards_only_under_the_interpreter(monkeypatch):
    windows = known_bad.parse(INTERP)
    monkeypatch.setattr(known_bad, "_installed_triton", lambda: "3.1.0")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert known_bad.check_installed(arch=90, windows=windows) is None
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert "plain ints" in known_bad.check_installed(arch=None, windows=windows)


def test_unknown_mode_is_rejected():
    with pytest.raises(ValueError, match="unknown modes"):
        known_bad.parse(INTERP.replace('"interp"]', '"interpreter"]'))


PATH_TOML = """
schema = 1

[[window]]
id = "keymajor-crash"
triton = ">=3.0,<3.3"
arch = [80, 89]
checks = ["compile"]
paths = ["keymajor"]
reason = "the key-major kernel crashes the compiler"
"""


def test_a_path_window_steers_the_planner_and_claims_only_its_variants():
    w = known_bad.parse(PATH_TOML)
    assert known_bad.avoided_paths("3.2.0", 80, w) == {"keymajor"}
    assert known_bad.avoided_paths("3.3.0", 80, w) == set() and known_bad.avoided_paths("3.2.0", 90, w) == set()
    assert known_bad.avoided_paths("3.2.0", None, w) == set()  # the interpreter: no arch, nothing avoided
    assert known_bad.expected_failure("3.1.0", 89, "compile", w, variant="sel_fwd_keymajor/bf16/dk128-dv128/h1")
    assert known_bad.expected_failure("3.1.0", 89, "compile", w, variant="sel_fwd_keymajor_merge/bf16/h1")
    # another kernel's crash in the same window stays a failure
    assert known_bad.expected_failure("3.1.0", 89, "compile", w, variant="sel_fwd/ranges/bf16/dk128/h16") is None


def test_a_path_window_is_mitigated_so_the_guard_is_silent(monkeypatch):
    w = known_bad.parse(PATH_TOML)
    monkeypatch.setattr(known_bad, "_installed_triton", lambda: "3.2.0")
    assert known_bad.check_installed(arch=80, windows=w) is None


def test_an_unknown_path_is_rejected():
    with pytest.raises(ValueError, match="unknown paths"):
        known_bad.parse(PATH_TOML.replace('"keymajor"', '"keymajr"'))
