"""``nsa-sel releases`` against a fake index (a file:// tree and a local HTTP server; no network)."""

from __future__ import annotations

import functools
import http.server
import json
import threading

import pytest

import fake_index
from nsa_triton_sel.compat import cli, lanes, project, releases

TABLE = lanes.load_table(project.constraints_dir() / "lanes.toml")


@pytest.fixture
def index(tmp_path):
    return fake_index.write_index(tmp_path / "index", *fake_index.default_releases(TABLE))


def test_new_triton_and_torch_releases_are_found_and_get_their_commands(index):
    report = releases.watch(TABLE, index)
    assert [str(v) for v in report.new_tritons] == ["3.10.0"]
    assert [str(p.torch) for p in report.new_torch] == ["2.15.1", "2.16.0"]
    assert report.commands() == ["nsa-sel check-upgrade 3.10.0"]
    assert report.verdict().startswith("NEW: 1 Triton release(s) not in lanes.toml, 2 torch release(s)")


def test_yanked_pre_and_older_releases_are_ignored(index):
    report = releases.watch(TABLE, index)
    shown = {str(v) for v in report.tritons}
    assert {"3.6.1", "3.11.0rc1", "2.3.1"}.isdisjoint(shown) and "3.0.0" in shown
    assert "2.3.0" not in {str(p.torch) for p in report.pins}  # older than the table's oldest torch


def test_a_compatible_release_pin_admits_every_patch_release(index):
    pin = next(p for p in releases.watch(TABLE, index).pins if str(p.torch) == "2.14.1")
    assert pin.spec == "~=3.8.0" and [str(v) for v in pin.tritons] == ["3.8.0"] and pin.lane == "3.8"


def test_an_index_that_matches_the_table_is_up_to_date(tmp_path):
    tritons, torch = fake_index.default_releases(TABLE)
    for extra in ("3.10.0", "2.15.1", "2.16.0"):
        tritons.pop(extra, None)
        torch.pop(extra, None)
    url = fake_index.write_index(tmp_path / "index", tritons, torch)
    report = releases.watch(TABLE, url)
    assert report.verdict().startswith("UP TO DATE") and report.commands() == []


def test_the_command_prints_the_commands_and_writes_json(index, tmp_path, capsys):
    out = tmp_path / "releases.json"
    rc = cli.main(["releases", "--index-url", index, "--json", str(out), "--fail-on-new"])
    text = capsys.readouterr().out
    assert rc == 1
    assert "  3.10.0   NEW" in text and "  3.9.0    in lanes.toml (lane 3.9)" in text
    assert "  nsa-sel check-upgrade 3.10.0" in text
    assert 'add "2.15.1" to lane 3.9\'s torch list' in text
    doc = json.loads(out.read_text())
    assert doc["new_tritons"] == ["3.10.0"] and doc["commands"] == ["nsa-sel check-upgrade 3.10.0"]
    assert cli.main(["releases", "--index-url", index]) == 0  # without --fail-on-new: a report, not a failure


def test_an_unreadable_index_is_a_clear_error(tmp_path, capsys):
    rc = cli.main(["releases", "--index-url", (tmp_path / "nowhere").as_uri()])
    err = capsys.readouterr().err
    assert rc == 3 and "cannot read file://" in err and "nowhere/triton/json" in err


def test_the_same_over_http_from_a_local_server(tmp_path):
    fake_index.write_index(tmp_path / "index", *fake_index.default_releases(TABLE))
    handler = functools.partial(_QuietHandler, directory=str(tmp_path / "index"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        report = releases.watch(TABLE, f"http://127.0.0.1:{server.server_port}/", timeout=10)
    finally:
        server.shutdown()
        server.server_close()
    assert report.commands() == ["nsa-sel check-upgrade 3.10.0"]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep the test output clean
        pass


def test_a_toolkit_command_without_the_matrix_extra_says_what_to_install(monkeypatch, capsys):
    """`pip install .` is the library only: a toolkit command names the missing extra instead of a traceback."""
    import types

    def main(argv):
        raise ModuleNotFoundError("No module named 'rich'", name="rich")

    monkeypatch.setattr(cli.importlib, "import_module", lambda name: types.SimpleNamespace(main=main))
    assert cli.main(["smoke"]) == 2
    assert "pip install '.[matrix]'" in capsys.readouterr().err


def test_a_toolkit_command_checks_its_dependencies_before_running(monkeypatch, capsys):
    """The smoke used to compile every variant for minutes, then fail to import rich for its table."""
    real = cli.importlib.util.find_spec
    monkeypatch.setattr(cli.importlib.util, "find_spec", lambda name: None if name == "rich" else real(name))
    monkeypatch.setattr(cli.importlib, "import_module", lambda name: pytest.fail("the command must not start"))
    assert cli.main(["smoke", "--arch", "90"]) == 2
    assert "nsa-sel smoke: needs 'rich'" in capsys.readouterr().err
