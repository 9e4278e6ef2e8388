"""Kernel arguments by name: the launcher names every argument, the kernel's signature orders them.

A Triton launch takes its runtime arguments positionally, about 50 of them for the selection kernels, most of
them strides.  :func:`packer` reads a kernel's signature once and returns a function that takes the runtime
arguments as keywords and returns them in the kernel's order, so a launcher can never shift an argument
by one.  Strides are grouped by tensor: the parameters ``sq_b, sq_s, sq_g, sq_h, sq_d`` (``s<tensor>_<dim>``)
are passed as one tuple ``sq=q.stride()``, checked for its length.  A missing, unknown or misshapen argument
raises ``TypeError`` or ``ValueError`` before anything launches.  Constexprs (``tl.constexpr`` parameters)
are not packed: they are launch keywords, which ``plan`` builds.

The packer is Python generated from the signature (``def pack(*, Q, K, ..., sq, ...)``): keyword binding
and tuple unpacking are done by the interpreter, about a microsecond per launch.
"""

from __future__ import annotations

import inspect
import re

from .. import caches

# A stride parameter: s<tensor>_<one-letter dim>.  Scalars such as ``seq_len`` do not match (dim is one letter).
_STRIDE = re.compile(r"^(s[a-z]+)_([a-z])$")
_PACKERS: dict = caches.register("argument_packers", {})


def _is_constexpr(annotation) -> bool:
    name = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    return name.rsplit(".", 1)[-1] == "constexpr"


def runtime_params(fn) -> list[str]:
    """The names of ``fn``'s runtime (non-constexpr) parameters, in order (``fn`` a ``@triton.jit`` kernel,
    interpreted or not)."""
    python_fn = getattr(fn, "fn", fn)
    return [name for name, p in inspect.signature(python_fn).parameters.items() if not _is_constexpr(p.annotation)]


def _layout(params: list[str]) -> tuple[list[str], list[str]]:
    """``(keywords, unpacking lines)``: each stride group is one keyword, unpacked into its parameters."""
    keywords, lines, groups = [], [], {}
    for name in params:
        m = _STRIDE.match(name)
        if m is None:
            keywords.append(name)
            continue
        group = m.group(1)
        if group not in groups:
            groups[group] = []
            keywords.append(group)
        elif groups[group][-1] != params[params.index(name) - 1]:
            raise ValueError(f"stride parameters of {group!r} are not consecutive in the kernel's signature")
        groups[group].append(name)
    for group, names in groups.items():
        lines.append(f"    {', '.join(names)}, = {group}")
    return keywords, lines


def packer(fn):
    """``pack(**named) -> tuple``: ``fn``'s runtime arguments in its order, from keywords (see the module
    docstring).  One per kernel, process-wide."""
    # Keyed by id: a kernel's own hash is Python code, slower than the lookup it serves; the entry keeps the
    # kernel, so its id is not reused while the entry lives.
    entry = _PACKERS.get(id(fn))
    if entry is not None and entry[0] is fn:
        return entry[1]
    params = runtime_params(fn)
    keywords, lines = _layout(params)
    name = getattr(getattr(fn, "fn", fn), "__name__", "kernel")
    source = "\n".join([f"def pack_{name}(*, {', '.join(keywords)}):", *lines,
                        f"    return ({', '.join(params)},)"])
    scope: dict = {}
    exec(compile(source, f"<arguments of {name}>", "exec"), scope)  # noqa: S102 - built from the signature
    pack = scope[f"pack_{name}"]
    _PACKERS[id(fn)] = (fn, pack)
    return pack
