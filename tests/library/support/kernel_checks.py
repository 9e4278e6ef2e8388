"""Comparisons of kernel outputs with the float64 oracle, shared by the interpreter and GPU tests.

The kernels' accuracy bound: mean absolute error <= 1e-3, relative error
``||out - ref|| / ||ref||`` no worse than twice the packed-SDPA path's own error in the
same dtype (plus a floor for the case where SDPA happens to be nearly exact), no NaN,
and the LSE within 1e-3 where the row has keys, ``-inf`` exactly where it has none.
"""

from __future__ import annotations

import torch

from nsa_triton_sel import reference

# Errors of every check in the running test; conftest records their maxima as junit properties,
# which the ledger keeps as the parity record's metrics.
ERRORS: list[dict] = []


def rel_err(out, ref) -> float:
    ref = ref.double()
    return float((out.double().cpu() - ref.cpu()).norm() / ref.norm().clamp_min(1e-30))


def check_against_oracle(out, lse, q, k, v, ranges, *, scale=None, sdpa_out=None, what="", rel_factor=2.0):
    ref, ref_lse = reference.oracle(q, k, v, ranges, scale=scale, return_lse=True)
    out_c = out.detach().double().cpu()
    assert not torch.isnan(out_c).any(), f"{what}: NaN in the output"
    err = (out_c - ref).abs()
    mean_err = float(err.mean())
    assert mean_err <= 1e-3, f"{what}: mean abs error {mean_err:.3e} > 1e-3 (max {float(err.max()):.3e})"
    if sdpa_out is None:
        sdpa_out = reference.packed_sdpa(q, k, v, ranges, scale=scale)
    bound = max(rel_factor * rel_err(sdpa_out, ref), 2e-3 if q.dtype == torch.bfloat16 else 4e-4)
    r = rel_err(out_c, ref)
    ERRORS.append({"max_abs_err": float(err.max()) if err.numel() else 0.0, "mean_abs_err": mean_err,
                   "rel_err": r, "sdpa_rel_err": bound / rel_factor})
    assert r <= bound, f"{what}: relative error {r:.3e} > {bound:.3e} ({rel_factor}x packed SDPA's, with a floor)"
    if lse is not None:
        lse_c = lse.detach().double().cpu()
        empty = torch.isneginf(ref_lse)
        assert torch.equal(torch.isneginf(lse_c), empty), f"{what}: LSE is -inf on the wrong rows"
        assert not torch.isnan(lse_c).any(), f"{what}: NaN in the LSE"
        if (~empty).any():
            lerr = float((lse_c[~empty] - ref_lse[~empty]).abs().max())
            assert lerr <= 1e-3 * max(1.0, float(ref_lse[~empty].abs().max())), f"{what}: LSE error {lerr:.3e}"
        assert float(out_c[empty].abs().max()) == 0.0 if empty.any() else True, f"{what}: empty row not zero"
    return mean_err, r


def packed_as_5d(q, k, v):
    """Seed-style dense rows ``q [N, H, Dk]``, ``k/v [N, L, D]`` as the 5-D contract with one span [0, L)."""
    N, H, Dk = q.shape
    L = k.shape[1]
    ranges = torch.tensor([0, L], dtype=torch.int32, device=q.device).expand(N, 1, 1, 1, 2).contiguous()
    return q.reshape(N, 1, 1, H, Dk), k.reshape(N, 1, L, Dk), v.reshape(N, 1, L, v.shape[-1]), ranges


def varlen_as_5d(q, k_all, v_all, cu):
    """Varlen rows as the 5-D contract: B=1, S=N tokens, G=1, every row one span of the shared keys."""
    N, H, Dk = q.shape
    spans = torch.stack([cu[:-1], cu[1:]], dim=-1).to(torch.int32)
    return (q.reshape(1, N, 1, H, Dk), k_all.reshape(1, 1, -1, Dk),
            v_all.reshape(1, 1, -1, v_all.shape[-1]), spans.reshape(1, N, 1, 1, 2))


def fresh_seed() -> int:
    """A fresh seed for a test's random inputs, printed so that a failure reproduces."""
    seed = int(torch.randint(0, 2**31 - 1, ()).item())
    print(f"seed={seed}")
    return seed
