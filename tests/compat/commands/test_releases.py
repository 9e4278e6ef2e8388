"""``nsa-sel releases`` against a fake index (a file:// tree and a local HTTP server; no network)."""

from __future__ import annotations

import functools
import http.server
import json
import os
import threading
import time
from pathlib import Path

import pytest

import fake_index
from nsa_triton_sel.compat.commands import cli, releases
from nsa_triton_sel.compat.core import lane_table, project

TABLE = lane_table.load_table(project.constraints_dir() / "lanes.toml")


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
    assert rc == 2 and "cannot read file://" in err and "nowhere/triton/json" in err  # 2, as documented (was 3)
    assert len(err.splitlines()) == 1


def test_a_fifo_in_a_file_index_is_an_error_at_once_not_a_hang(index, tmp_path, capsys):
    """A FIFO is refused at once: urllib's file:// handler opens it and waits for a writer, whatever --timeout
    says."""
    from urllib.parse import urlsplit

    fifo = Path(urlsplit(index).path) / "triton" / "json"
    fifo.unlink()
    os.mkfifo(fifo)
    t0 = time.monotonic()
    rc = cli.main(["releases", "--index-url", index, "--timeout", "30"])
    assert rc == 2 and time.monotonic() - t0 < 10
    assert "is a FIFO, not a regular file" in capsys.readouterr().err


@pytest.mark.parametrize("doc, needle", [
    ({"releases": ["3.9.0"]}, "`releases` must be an object"),
    ({"releases": {"3.9.0": {"filename": "x"}}}, "its files must be a list of objects"),
    ({"releases": {}, "info": []}, "`info` must be an object"),
    ([1, 2], "expected a JSON object"),
])
def test_an_index_document_of_the_wrong_shape_is_one_line(tmp_path, capsys, doc, needle):
    url = fake_index.write_index(tmp_path / "index", *fake_index.default_releases(TABLE))
    (tmp_path / "index" / "triton" / "json").write_text(json.dumps(doc))
    assert cli.main(["releases", "--index-url", url]) == 2
    err = capsys.readouterr().err
    assert needle in err and "triton/json" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("text", ['{"releases": {}, "x": NaN}', '{"releases": {}, "x": 1e400}', "[" * 10**5])
def test_an_index_document_that_is_not_strict_json_is_one_line(tmp_path, capsys, text):
    url = fake_index.write_index(tmp_path / "index", *fake_index.default_releases(TABLE))
    (tmp_path / "index" / "triton" / "json").write_text(text)
    assert cli.main(["releases", "--index-url", url]) == 2
    assert "cannot read" in capsys.readouterr().err


@pytest.mark.parametrize("timeout", ["inf", "nan", "-1", "0", "1e300", "x"])
def test_a_timeout_that_is_not_a_sane_number_is_a_usage_error(index, capsys, timeout):
    with pytest.raises(SystemExit) as exc:
        cli.main(["releases", "--index-url", index, "--timeout", timeout])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("nsa-sel releases: argument --timeout") and len(err.splitlines()) == 1


@pytest.mark.parametrize("url", ["ftp://example.invalid/pypi", "data:,{}", "file://otherhost/x", "relative/path"])
def test_an_index_url_of_another_kind_is_refused(capsys, url):
    assert cli.main(["releases", "--index-url", url]) == 2
    assert "expected an http://, https:// or local file:/// URL" in capsys.readouterr().err


def test_json_output_on_a_directory_is_refused_before_the_index_is_read(index, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(releases, "watch", lambda *a, **k: pytest.fail("the index must not be read"))
    out = tmp_path / "out"
    out.mkdir()
    assert cli.main(["releases", "--index-url", index, "--json", str(out)]) == 2
    assert "is a directory; expected a file path" in capsys.readouterr().err and list(out.iterdir()) == []


def test_a_slow_http_index_is_cut_off_at_the_timeout_for_the_whole_body(tmp_path):
    """A per-read socket timeout never ends a server that sends a byte every half second."""

    class Trickle(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(200)
            self.end_headers()
            try:
                for _ in range(40):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.5)
            except OSError:
                pass

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(releases.IndexError_, match="not read within --timeout 2 s"):
            releases.fetch_json(f"http://127.0.0.1:{server.server_port}/triton/json", timeout=2)
    finally:
        server.shutdown()
        server.server_close()
    assert time.monotonic() - t0 < 8


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
