"""Property-based fuzz of ``selection_attention`` against the float64 oracle.

Hypothesis draws tiny problems (B, S, G <= 2-3, h <= 3, T <= 70: one key tile and a bit), the
three dtypes, ranges or block indices (with or without positions), valid and invalid span values,
``validate`` on or off, inf/NaN planted in q, k or v, and a backend.  Every call must end in one of:

- a ``TypeError``/``ValueError`` when the values are invalid and ``validate=True`` (a clear error:
  it names the argument and the offending index);
- an output (and, where it asks, gradients) finite exactly where the float64 oracle's are, and
  within the dtype's tolerance of it there.

Invalid values with ``validate=False`` are drawn for every backend: every path reads a span clamped
into ``[0, T]`` (saturating: no int32 wrap-around, no negative indexing; ``contract.clamp_ranges``, the
kernels' ``_clamp_spans``), in the forward and the backward, and the fuzz checks that each then computes
the oracle of the clamped spans: never an uncontrolled exception, never a silent difference between
backends.  Options of the wrong type or value (``block_size=8.0`` or ``True``, ``scale=True`` or ``1e38``,
``validate="no"``, ``return_lse="yes"``, an unknown backend) must raise, on a fresh call and after a
remembered one alike (:func:`test_fuzz_options`).

Seeded (``derandomize``: the same examples every run, no example database), ``CPU_EXAMPLES`` +
``KERNEL_EXAMPLES`` >= 500 inputs per run; the kernels run under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from nsa_triton_sel import reference, selection_attention  # noqa: E402

INTERP = os.environ.get("TRITON_INTERPRET") == "1"
CPU_EXAMPLES = int(os.environ.get("FUZZ_CPU", 400))
KERNEL_EXAMPLES = int(os.environ.get("FUZZ_KERNEL", 150))
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# Forward tolerance relative to max |v| of the row's keys, gradients relative to the gradient's norm
# (bf16 under the interpreter rounds by truncation: twice the GPU's error).
TOL = {torch.float16: 4e-3, torch.bfloat16: 4e-2, torch.float32: 1e-4}
GRAD_TOL = {torch.float16: 2e-2, torch.bfloat16: 1.5e-1, torch.float32: 1e-3}


@dataclass
class Case:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    kwargs: dict  # ranges= or block_indices= / block_size= / positions=
    spans: list  # per (b, s, g): the [start, end) spans the oracle reads (after the kernels' clamp)
    valid: bool
    validate: bool
    backend: str
    grad: bool

    def __repr__(self):
        shape = f"q{list(self.q.shape)} k{list(self.k.shape)} v{list(self.v.shape)} {self.q.dtype}"
        args = {n: (x.tolist() if isinstance(x, torch.Tensor) else x) for n, x in self.kwargs.items()}
        return f"Case({shape}, {args}, valid={self.valid}, validate={self.validate}, {self.backend}, grad={self.grad})"


def _clamp(start: int, end: int, T: int) -> tuple[int, int]:
    """Every path's reading of a span (``contract.clamp_ranges``, the kernels' ``_clamp_spans``): clamped
    into [0, T] with end >= start, saturating (a value past the int32 range does not wrap)."""
    s = min(max(start, 0), T)
    return s, min(max(end, s), T)


@st.composite
def span_rows(draw, B, S, G, T, n, bad: bool):
    """Ranges ``[B, S, G, n, 2]`` as nested lists; ``bad``: some values break the contract."""
    rows = []
    for _ in range(B * S * G):
        cuts = sorted(draw(st.lists(st.integers(0, T), min_size=2 * n, max_size=2 * n)))
        spans = [[cuts[2 * i], cuts[2 * i + 1]] for i in range(n)]  # disjoint, sorted
        spans = draw(st.permutations(spans)) if n else spans
        rows.append(spans)
    if bad and n:
        i, j = draw(st.integers(0, len(rows) - 1)), draw(st.integers(0, n - 1))
        kind = draw(st.sampled_from(["neg", "past", "reversed", "overlap", "huge", "all", "far_neg"]))
        s, e = rows[i][j]
        rows[i][j] = {"neg": [-draw(st.integers(1, 9)), e], "past": [s, T + draw(st.integers(1, 9))],
                      "reversed": [e + 1, s], "overlap": [0, T + 1] if n == 1 else [0, T],
                      "huge": [2**31 + draw(st.integers(0, 9)), 2**33], "all": [0, 2**62],
                      "far_neg": [-(2**62), draw(st.integers(0, T))]}[kind]
        if kind == "overlap" and n > 1:
            rows[i][(j + 1) % n] = [0, max(T, 1)]
    return rows


def _contract_ok(rows, T) -> bool:
    for spans in rows:
        live = sorted((s, e) for s, e in spans if e > s)
        if any(s < 0 or s > e or e > T for s, e in spans):
            return False
        if any(a[1] > b[0] for a, b in zip(live, live[1:])):
            return False
    return True


@st.composite
def block_rows(draw, B, S, G, T, n, bs, bad: bool):
    """Block indices as nested lists and the oracle's spans; ``bad``: an out-of-range or repeated index."""
    n_blk = -(-T // bs)
    rows = []
    for _ in range(B * S * G):
        picks = draw(st.lists(st.integers(-1, max(n_blk - 1, -1)), min_size=n, max_size=n))
        seen, row = set(), []
        for p in picks:  # distinct blocks, the rest -1
            row.append(p if p >= 0 and p not in seen else -1)
            seen.add(p)
        rows.append(row)
    if bad and n:
        i = draw(st.integers(0, len(rows) - 1))
        rows[i][0] = draw(st.sampled_from([-2, n_blk, n_blk + 5]))
    return rows


def _block_spans(rows, positions, B, S, G, T, bs):
    out = []
    for r, row in enumerate(rows):
        b, s = r // (S * G), (r // G) % S
        pos = s if positions is None else positions[b if len(positions) > 1 else 0][s]
        limit = min(pos, T - 1) + 1
        spans = []
        for i in row:
            start = min(i, T) * min(bs, max(T, 1))
            end = min(start + min(bs, max(T, 1)), limit)
            spans.append([start, end] if i >= 0 and end > start else [0, 0])
        out.append(spans)
    return out


def _values(draw, shape, dtype, scale):
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    return (torch.randn(shape, generator=gen) * scale).to(dtype)


@st.composite
def cases(draw, backends):
    backend = draw(st.sampled_from(backends))
    kernel = backend in ("triton", "auto")
    dtype = draw(st.sampled_from(DTYPES[:2] if backend == "triton" else DTYPES))
    B, S, G, h = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.integers(1, 3))
    Dk, Dv = draw(st.sampled_from([16, 32])), draw(st.sampled_from([8, 16]))
    T = draw(st.integers(0, 70 if kernel else 40))
    n = draw(st.integers(0, 3))
    bad = draw(st.booleans()) and draw(st.booleans())  # a quarter of the cases
    validate = not bad or draw(st.booleans())
    scale = draw(st.sampled_from([0.5, 1.0, 3.0]))
    q, k, v = (_values(draw, shp, dtype, scale) for shp in ((B, S, G, h, Dk), (B, G, T, Dk), (B, G, T, Dv)))
    poison = draw(st.sampled_from([None, None, None, "q", "k", "v"]))
    x = {"q": q, "k": k, "v": v}.get(poison)
    if x is not None and x.numel():
        x.view(-1)[draw(st.integers(0, x.numel() - 1))] = draw(st.sampled_from([math.inf, -math.inf, math.nan]))
    if draw(st.booleans()) or T == 0:
        rows = draw(span_rows(B, S, G, T, n, bad))
        valid = _contract_ok(rows, T)
        kwargs = {"ranges": torch.tensor(rows, dtype=torch.int64).reshape(B, S, G, n, 2)}
        spans = [[list(_clamp(s, e, T)) for s, e in row] for row in rows]
    else:
        bs = draw(st.sampled_from([1, 4, 16, 64]))
        rows = draw(block_rows(B, S, G, T, n, bs, bad))
        positions = None
        if draw(st.booleans()):
            far = draw(st.sampled_from([3, 3, 2**62]))  # a position past the keys (up to 2^62) is clamped
            positions = [[draw(st.integers(0, T + far)) for _ in range(S)] for _ in range(draw(st.sampled_from([1, B])))]
        n_blk = -(-T // bs)
        valid = all(-1 <= i < n_blk for row in rows for i in row)
        kwargs = {"block_indices": torch.tensor(rows, dtype=torch.int64).reshape(B, S, G, n), "block_size": bs}
        if positions is not None:
            kwargs["positions"] = torch.tensor(positions)
        spans = _block_spans(rows, positions, B, S, G, T, bs)
    grad = draw(st.booleans())
    return Case(q, k, v, kwargs, spans, valid, validate, backend, grad)


def _oracle_ranges(case: Case) -> torch.Tensor:
    B, S, G = case.q.shape[:3]
    n = max((len(r) for r in case.spans), default=0)
    return torch.tensor(case.spans, dtype=torch.int64).reshape(B, S, G, n, 2)


def _close(got, want, tol, what, case):
    """Finite exactly where the oracle is finite, and close there (relative to the largest reference value)."""
    got, want = got.detach().double(), want.detach().double()
    fin = torch.isfinite(want)
    assert torch.isfinite(got[fin]).all(), f"{what}: non-finite where the oracle is finite: {case}"
    if fin.any():
        err = (got[fin] - want[fin]).abs().max().item()
        ref = max(want[fin].abs().max().item(), 1.0)
        assert err <= tol * ref, f"{what}: max error {err:.3e} > {tol:.1e} x {ref:.3e}: {case}"


def check(case: Case):
    xs = [x.clone().requires_grad_(case.grad) for x in (case.q, case.k, case.v)]
    call = lambda: selection_attention(*xs, **case.kwargs, backend=case.backend, validate=case.validate)  # noqa: E731
    if not case.valid and case.validate:
        with pytest.raises(ValueError, match=r"ranges\[b=|block_indices\[b=|positions\["):
            call()
        return
    out = call()
    assert out.shape == (*case.q.shape[:4], case.v.shape[-1]) and out.dtype == case.v.dtype
    r = _oracle_ranges(case)
    ys = [x.detach().double().requires_grad_(case.grad) for x in (case.q, case.k, case.v)]
    want = reference.oracle(*ys, r, validate=False)
    _close(out, want, TOL[case.q.dtype] * 2, "out", case)
    if not case.grad:
        return
    go = torch.randn(out.shape, generator=torch.Generator().manual_seed(7))
    out.backward(go.to(out.dtype))
    want.backward(go.double())
    for name, x, y in zip("qkv", xs, ys):
        _close(x.grad, y.grad, GRAD_TOL[case.q.dtype] * 2, f"d{name}", case)


# No shrinking: a failure prints its (already tiny) case at once instead of minutes of shrinking on 2 cores.
FUZZ = dict(derandomize=True, database=None, deadline=None, print_blob=True, phases=[Phase.explicit, Phase.generate],
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


@settings(max_examples=CPU_EXAMPLES, **FUZZ)
@given(cases(["oracle", "sdpa", "reference"]))
def test_fuzz_torch_paths(case):
    check(case)


@pytest.mark.slow
@pytest.mark.interp
@pytest.mark.skipif(not INTERP, reason="the kernels under TRITON_INTERPRET=1 (a CUDA device is present)")
@settings(max_examples=KERNEL_EXAMPLES, **FUZZ)
@given(case=cases(["triton", "auto"]))
def test_fuzz_kernels(case, every_row_through_triton):
    check(case)


BAD_OPTIONS = {
    "block_size": [8.0, True, False, 0, -4, "64", None, torch.tensor(64), [64], 2.5],
    "scale": [True, "0.5", float("nan"), float("inf"), 1e38, -1e7, torch.tensor(0.5), [0.5], complex(1, 0)],
    "validate": ["no", "yes", 0, 1, None, 1.0, torch.tensor(True)],
    "return_lse": ["yes", "no", 0, 1, None, torch.tensor(True)],
    "backend": ["cuda", "", None, 3, "Triton", "sdpa "],
}


@settings(max_examples=120, **FUZZ)
@given(name=st.sampled_from(sorted(BAD_OPTIONS)), data=st.data(), warm=st.booleans(), blocks=st.booleans())
def test_fuzz_options(name, data, warm, blocks):
    """A bad option raises TypeError/ValueError naming it, whether or not the same signature ran before."""
    value = data.draw(st.sampled_from(BAD_OPTIONS[name]))
    if name == "block_size" and not blocks:
        value = 8  # (with ranges any block_size is an error: covered by the contract tests)
    q = torch.randn(2, 1, 2, 3, 16).half()
    k, v = torch.randn(2, 2, 40, 16).half(), torch.randn(2, 2, 40, 16).half()
    kw = dict(block_indices=torch.tensor([0, -1]).expand(2, 1, 2, 2), block_size=16) if blocks else \
        dict(ranges=torch.tensor([[0, 5], [9, 12]]).expand(2, 1, 2, 2, 2))
    kw.update(validate=False, backend="sdpa")
    if warm:
        for _ in range(2):
            selection_attention(q, k, v, **kw)
    if name == "block_size" and not blocks:
        with pytest.raises(ValueError, match="block_size"):
            selection_attention(q, k, v, **{**kw, name: value})
        return
    with pytest.raises((TypeError, ValueError), match=name):
        selection_attention(q, k, v, **{**kw, name: value})
