"""The usage example of docs/api.md runs as written on a CPU (a reader without a GPU can try it), at smaller sizes.

The first ``python`` block under its ``## Use`` is executed with only its sizes line replaced
(``S = 128``, ``T = 1024``, fewer heads): through ``backend="auto"`` (the packed-SDPA path on a CPU) and
``backend="oracle"`` (float64), which must agree.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

README = Path(__file__).resolve().parents[1] / "docs" / "api.md"  # the README points there
SIZES = "B, S, G, h, D, T = 1, 4096, 4, 16, 128, 4096"
CALL = "return_lse=True)"


def usage_block() -> str:
    text = README.read_text()
    section = text[text.index("\n## Use\n"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def run(code: str) -> dict:
    scope: dict = {}
    exec(compile(code, str(README), "exec"), scope)  # noqa: S102 - the docs' own example
    return scope


def test_readme_example_runs_on_a_cpu(monkeypatch):
    from nsa_triton_sel import config

    monkeypatch.setenv("NSA_USE_TRITON_SEL", "0")  # the conftest's interpreter would otherwise take auto's route
    config.refresh()
    code = usage_block()
    assert SIZES in code and code.count(CALL) == 1, "docs/api.md's usage example changed: update this test"
    assert '"cuda" if torch.cuda.is_available() else "cpu"' in code
    small = code.replace(SIZES, "B, S, G, h, D, T = 1, 128, 1, 2, 16, 1024")
    torch.manual_seed(0)
    auto = run(small)
    torch.manual_seed(0)
    oracle = run(small.replace(CALL, 'return_lse=True, backend="oracle")'))
    out, lse = auto["out"], auto["lse"]
    assert out.shape == (1, 128, 1, 2, 16) and out.dtype == torch.bfloat16 and out.device.type == "cpu"
    assert torch.equal(auto["block_indices"], oracle["block_indices"])
    assert torch.allclose(out.double(), oracle["out"].double(), atol=2e-2)
    assert torch.allclose(lse.double(), oracle["lse"].double(), atol=1e-3)


@pytest.mark.parametrize("backend", ["oracle", "sdpa"])
def test_float64_inputs_through_the_example_call(backend):
    from nsa_triton_sel import reference, selection_attention

    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(*s, generator=g, dtype=torch.float64) for s in ((1, 4, 1, 2, 8), (1, 1, 8, 8), (1, 1, 8, 8)))
    bi = torch.tensor([[[[0, -1]], [[0, 1]], [[1, 0]], [[-1, 1]]]])
    out = selection_attention(q, k, v, block_indices=bi, block_size=4, positions=torch.tensor([3, 4, 5, 7]),
                              backend=backend)
    assert out.dtype == torch.float64
    ranges = torch.tensor([[[[[0, 4], [0, 0]]], [[[0, 4], [4, 5]]], [[[4, 6], [0, 4]]], [[[0, 0], [4, 8]]]]])
    assert torch.allclose(out, reference.oracle(q, k, v, ranges), atol=1e-12)
