"""The toolkit's note files (``schema = 1`` and a list of ``[[note]]`` tables): the GPU canaries' notes and the
speed notes read through :func:`entries`, so that both say the same about a bad file: which note, which field,
what is accepted."""

from __future__ import annotations

from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from ..._toml import loads


def entries(path: Path, fields: tuple[str, ...]) -> list[tuple[str, dict]]:
    """``(where, note)`` for each ``[[note]]`` of ``path``, each with exactly ``fields``, every one non-empty."""
    data = loads(Path(path).read_text())
    if data.get("schema") != 1:
        raise ValueError(f"{path}: schema {data.get('schema')!r} is not supported (expected 1)")
    out = []
    for i, raw in enumerate(data.get("note", [])):
        where = f"{path}: note {i + 1}"
        missing = [f for f in fields if not raw.get(f)]
        if missing or set(raw) - set(fields):
            raise ValueError(f"{where}: needs exactly the fields {', '.join(fields)} (missing {missing}, "
                             f"unknown {sorted(set(raw) - set(fields))})")
        out.append((where, raw))
    return out


def triton_specifier(where: str, text: str) -> SpecifierSet:
    """The note's ``triton`` field as a PEP 440 specifier set."""
    try:
        return SpecifierSet(text)
    except InvalidSpecifier as exc:
        raise ValueError(f"{where}: triton {text!r} is not a PEP 440 specifier ({exc})") from None
