"""A fake nox session for the lane tests: what the lanes' session bodies use of one, ``session.run`` answered by
handlers keyed by the code it runs."""

from __future__ import annotations

from types import SimpleNamespace

from nsa_triton_sel.compat.lanes import checks


class SessionError(Exception):
    pass


class SessionSkip(Exception):
    pass


class FakeSession:
    """What run_lane uses of a nox session; ``handlers`` answer session.run by the code it runs."""

    def __init__(self, name, tmp_path, handlers, backend="none", posargs=()):
        self.name, self.posargs, self.env, self.venv_backend = name, list(posargs), {}, backend
        self.python, self.cache_dir = "3.11", tmp_path / "cache"
        self.virtualenv = SimpleNamespace(location=str(tmp_path / "venv"))
        self.handlers, self.logs, self.installs = handlers, [], []

    def run(self, *args, env=None, **kwargs):
        code = args[2] if args[:2] == ("python", "-c") else None
        for key, handler in self.handlers.items():
            if code == key or (code == checks.RC_WRAP and key in args):
                return handler(args, env or {})
        raise AssertionError(f"unexpected session.run{args}")

    def install(self, *args):
        self.installs.append(args)

    def log(self, msg):
        self.logs.append(msg)

    warn = log

    def error(self, msg):
        raise SessionError(msg)

    def skip(self, msg):
        raise SessionSkip(msg)
