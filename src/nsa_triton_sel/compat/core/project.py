"""Where the project's matrix files live, found from the current directory, never from ``__file__``.

The toolkit ships inside the package, so it cannot assume a checkout around itself: an
installed wheel has no ``constraints/`` next to it.  The project is the directory that holds
``constraints/lanes.toml``, found in this order:

1. an explicit path (a command's ``--constraints`` option);
2. ``$NSA_SEL_CONSTRAINTS`` (the constraints directory itself);
3. the current directory or the nearest parent that contains ``constraints/lanes.toml``.

Nothing is guessed beyond that: a command that needs the table and finds none says so.
"""

from __future__ import annotations

import os
from pathlib import Path

TABLE_NAME = "lanes.toml"
ENV_CONSTRAINTS = "NSA_SEL_CONSTRAINTS"
ENV_RESULTS = "NSA_SEL_RESULTS"


class ProjectNotFound(FileNotFoundError):
    """No constraints directory: not inside the project and nothing names one."""


def constraints_dir(explicit: str | os.PathLike | None = None, start: str | os.PathLike | None = None) -> Path:
    """The constraints directory (see the module docstring for the search order)."""
    named = explicit or os.environ.get(ENV_CONSTRAINTS)
    if named:
        path = Path(named)
        if not (path / TABLE_NAME).is_file():
            how = "--constraints" if explicit else f"${ENV_CONSTRAINTS}"
            raise ProjectNotFound(f"{how} = {path}: no {TABLE_NAME} there")
        return path
    here = Path(start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "constraints" / TABLE_NAME).is_file():
            return d / "constraints"
    raise ProjectNotFound(
        f"no constraints/{TABLE_NAME} in {here} or any parent: run from the project checkout, "
        f"or set {ENV_CONSTRAINTS} (or pass --constraints) to the constraints directory")


def project_root(explicit: str | os.PathLike | None = None) -> Path:
    """The directory holding ``constraints/`` (and the noxfile)."""
    return constraints_dir(explicit).resolve().parent


def results_dir(explicit: str | os.PathLike | None = None) -> Path:
    """Where lane run files go: ``--results``, else ``$NSA_SEL_RESULTS``, else ``<project>/out/lanes``.

    The last one needs the project (found as above); outside it, say so rather than write
    results somewhere nobody will look.
    """
    named = explicit or os.environ.get(ENV_RESULTS)
    if named:
        return Path(named)
    try:
        return project_root() / "out" / "lanes"
    except ProjectNotFound as exc:
        raise ProjectNotFound(f"no results directory: pass --results DIR or set ${ENV_RESULTS} ({exc})") from None


def relative_to_project(path: str) -> str:
    """``/abs/checkout/tests/x.py`` -> ``tests/x.py`` inside the project (records compare across
    machines); any other path unchanged."""
    try:
        root = str(project_root()) + os.sep
    except ProjectNotFound:
        return path
    return path[len(root):] if path.startswith(root) else path
