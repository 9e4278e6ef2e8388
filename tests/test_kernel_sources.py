"""Static rules on the kernel sources that GPU evidence depends on.

The GPU canary ``cumsum_spans`` fires on Triton 3.0 and 3.2 for sm_90 (tl.cumsum prefix sums broadcast into
span indexing give wrong keys); the note in ``compat/canaries/notes.toml`` says our kernels are not hit
because they compute prefix sums with triangular masked reductions.  This test is what keeps that true.
"""

from __future__ import annotations

import re

from nsa_triton_sel import provenance

CUMSUM = re.compile(r"\btl\s*\.\s*cumsum\s*\(")


def _code_lines(text: str) -> list[tuple[int, str]]:
    """(line number, code) without comments and docstring lines (which may name tl.cumsum to explain)."""
    out, in_doc = [], False
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        quotes = stripped.count('"""')
        if in_doc or stripped.startswith('"""'):
            in_doc = in_doc != (quotes % 2 == 1)
            continue
        out.append((n, line.split("#", 1)[0]))
    return out


def test_no_kernel_calls_tl_cumsum():
    calls = [f"{name}:{n}: {code.strip()}" for name, body in provenance.kernel_sources().items()
             for n, code in _code_lines(body.decode()) if CUMSUM.search(code)]
    assert not calls, "tl.cumsum miscompiles on Triton 3.0/3.2 for sm_90 (canaries/notes.toml); use the " \
                      f"triangular prefix sum of kernels/forward.py _cumsum instead: {calls}"


def test_the_rule_sees_a_call():
    """The rule can fail: a call in code is found, the same words in a comment or a docstring are not."""
    src = 'def f():\n    """uses tl.cumsum(x) in prose"""\n    y = tl.cumsum(x, 0)  # tl.cumsum(\n'
    assert [n for n, code in _code_lines(src) if CUMSUM.search(code)] == [3]
