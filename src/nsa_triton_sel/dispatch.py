"""The dispatcher: ``selection_attention`` picks the Triton kernels or the packed-SDPA path.

Order of decisions (each one is logged under ``NSA_DEBUG_SHAPES=1``):

1. ``backend`` argument: ``"triton"``, ``"sdpa"``, ``"reference"`` (packed SDPA in
   float32, what ``NSA_FORCE_PARITY=1`` selects) or ``"oracle"`` (float64, slow) are taken
   as asked; ``"auto"`` goes on.
2. ``NSA_FORCE_PARITY=1`` -> reference; ``NSA_USE_TRITON_SEL=0`` -> packed SDPA.
3. Inputs that require grad -> packed SDPA (the kernels are forward-only; SDPA is
   differentiable).
4. No Triton for these inputs (no CUDA device and no interpreter, fp32, head dim > 256,
   or a kernel that already failed for this (device, dtype, Dk, Dv, h)) -> packed SDPA.
5. ``sel_triton_min_L`` (``NSA_SEL_TRITON_MIN_L``, else ``data/thresholds.json`` for this
   GPU and Triton): ``None`` keeps Triton off; otherwise rows with fewer selected keys go
   to packed SDPA and the rest to Triton.

A Triton failure is reported once with its reason, remembered for that configuration
and answered by the packed-SDPA path.
"""

from __future__ import annotations

import logging
import math
import os
import time
import warnings
from dataclasses import dataclass
from functools import lru_cache

import torch

from . import config, reference
from .contract import block_indices_to_ranges, check_qkv, check_ranges

log = logging.getLogger("nsa_triton_sel")

BACKENDS = ("auto", "triton", "sdpa", "reference", "oracle")


def warn_if_known_bad() -> str | None:
    """Warn (once, at import) when the installed Triton is in a known-bad window for this GPU."""
    from .known_bad import check_installed

    reason = check_installed()
    if reason:
        warnings.warn(f"nsa_triton_sel: the installed Triton is known-bad here: {reason} "
                      f"(see src/nsa_triton_sel/data/known_bad.toml and constraints/known-good.txt)", RuntimeWarning, stacklevel=2)
    return reason


warn_if_known_bad()
_FAILED: dict[tuple, str] = {}  # (device, dtype, Dk, Dv, h) -> reason of the first kernel failure


@dataclass(frozen=True)
class Decision:
    path: str  # "triton", "sdpa", "reference" or "oracle"
    reason: str
    min_L: int | None = None  # rows below it go to SDPA (Triton path only)
    decode: bool = False  # split-L flash-decoding kernel
    per_head: bool = False  # NSA_SEL_TRITON_GROUP=0
    tokens: int | None = None  # tokens per program: None = decide from the ranges, 1 = single-token kernel


def _triton_version() -> str | None:
    try:
        import triton
    except Exception:  # noqa: BLE001 - any import failure means "no Triton"
        return None
    return triton.__version__


@lru_cache(maxsize=16)
def _gpu_identity(device: torch.device) -> tuple[str, str]:
    if device.type != "cuda":
        return "cpu", "cpu"
    major, minor = torch.cuda.get_device_capability(device)
    return torch.cuda.get_device_name(device), f"{major}.{minor}"


def _failure_key(q, v) -> tuple:
    return (str(q.device), q.dtype, q.shape[-1], v.shape[-1], q.shape[3])


def _triton_blocker(q, k, v) -> str | None:
    """Why the Triton kernels cannot take these inputs, or None."""
    if _triton_version() is None:
        return "triton is not importable"
    if q.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        return f"tensors are on {q.device} (Triton needs CUDA, or TRITON_INTERPRET=1)"
    if q.dtype not in (torch.float16, torch.bfloat16):
        return f"dtype {q.dtype} (the kernels take float16 and bfloat16)"
    if max(q.shape[-1], v.shape[-1]) > 256:
        return f"head dims Dk={q.shape[-1]}, Dv={v.shape[-1]} (the kernels take up to 256)"
    failed = _FAILED.get(_failure_key(q, v))
    if failed:
        return f"the kernel failed earlier for this configuration: {failed}"
    return None


def _min_L(q, flags: config.Flags) -> tuple[int | None, str]:
    if flags.min_L_override is not None:
        return flags.min_L_override, "NSA_SEL_TRITON_MIN_L"
    gpu, cc = _gpu_identity(q.device)
    path = config.thresholds_path()
    return config.lookup_min_L(gpu, cc, _triton_version() or "", path), f"{path.name} ({gpu}, cc {cc})"


def _use_decode(q, per_head: bool) -> bool:
    """One query position and too few (row, head-chunk) programs to fill the GPU."""
    B, S, G, h, _ = q.shape
    if S != 1:
        return False
    from .kernels.launch import sm_count, max_rows
    from .kernels.meta import head_block

    programs = B * G * math.ceil(h / head_block(h, per_head, max_rows(q.device)))
    return programs < sm_count(q.device)


def decide(q, k, v, *, backend: str = "auto", flags: config.Flags | None = None) -> Decision:
    """The path ``selection_attention`` takes for these inputs, and why."""
    flags = flags or config.read_flags()
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}; accepted: {', '.join(BACKENDS)}")
    if backend in ("sdpa", "reference", "oracle"):
        return Decision(backend, f"backend={backend!r}")
    explicit = backend == "triton"
    if not explicit:
        if flags.force_parity:
            return Decision("reference", "NSA_FORCE_PARITY=1")
        if flags.use_triton is False:
            return Decision("sdpa", "NSA_USE_TRITON_SEL=0")
        if torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v)):
            return Decision("sdpa", "inputs require grad: the differentiable packed-SDPA path")
    blocker = _triton_blocker(q, k, v)
    if blocker:
        if explicit:
            raise ValueError(f"backend='triton' cannot run these inputs: {blocker}")
        return Decision("sdpa", blocker)
    per_head = not flags.group
    decode = _use_decode(q, per_head)
    tokens = _tokens(q, flags, per_head, decode)
    if explicit:
        return Decision("triton", "backend='triton'", 0, decode, per_head, tokens)
    min_L, source = _min_L(q, flags)
    if min_L is None:
        return Decision("sdpa", f"sel_triton_min_L is off in {source}")
    return Decision("triton", f"sel_triton_min_L={min_L} from {source}", min_L, decode, per_head, tokens)


def _tokens(q, flags: config.Flags, per_head: bool, decode: bool) -> int | None:
    """Tokens per program: 1, a forced count, or None ("look at the ranges")."""
    from .kernels.meta import tokens_per_program

    if per_head or decode:
        return 1
    if flags.tokens is not None:
        return flags.tokens
    tok = tokens_per_program(q.shape[3])
    return None if tok > 1 and q.shape[1] >= 2 * tok else 1


def _neighbours_share(ranges) -> bool:
    """Do most neighbouring tokens select the same span starts?  (One host sync.)

    Real NSA selections do (a block stays selected for many consecutive tokens); random
    ones don't, and for them the single-token kernel is faster.
    """
    same = (ranges[:, 1:, ..., 0] == ranges[:, :-1, ..., 0]).all(-1)
    return bool(same.float().mean() >= 0.5)


def _run_triton(q, k, v, ranges, scale, return_lse, d: Decision):
    from .kernels import launch  # imported late: keeps `import nsa_triton_sel` light

    if d.decode:
        return launch.sel_attn_decode(q, k, v, ranges, scale=scale, return_lse=True, per_head=d.per_head)
    tokens = d.tokens
    if tokens is None:
        from .kernels.meta import tokens_per_program

        tokens = tokens_per_program(q.shape[3]) if _neighbours_share(ranges) else 1
    if tokens > 1:
        return launch.sel_attn_tokens(q, k, v, ranges, scale=scale, return_lse=True, tokens=tokens)
    return launch.sel_attn_ranges(q, k, v, ranges, scale=scale, return_lse=True, per_head=d.per_head)


def _triton_with_threshold(q, k, v, ranges, scale, d: Decision):
    """Rows with at least ``min_L`` keys through Triton, the others through packed SDPA."""
    if d.min_L is None or d.min_L <= 1:  # every non-empty row qualifies: no split, no sync
        return _run_triton(q, k, v, ranges, scale, True, d)
    lens = (ranges[..., 1].to(torch.int64) - ranges[..., 0].to(torch.int64)).clamp_min(0).sum(-1)
    small = lens < d.min_L  # [B, S, G]
    idx = small.reshape(-1).nonzero()[:, 0]  # one host sync
    if idx.numel() == 0:
        return _run_triton(q, k, v, ranges, scale, True, d)
    # The kernel sees the small rows as empty (cheap); only those rows go through
    # packed SDPA (e.g. the first tokens of a sequence), and are written back in place.
    zero = torch.zeros((), dtype=ranges.dtype, device=ranges.device)
    out, lse = _run_triton(q, k, v, torch.where(small[..., None, None], zero, ranges), scale, True, d)
    # No sync from here on: the small rows have fewer than min_L keys, so packed SDPA is
    # told that bound, and its small ops are enqueued while the kernel runs.
    out_s, lse_s = reference.packed_sdpa(q, k, v, ranges, scale=scale, return_lse=True, validate=False,
                                         rows=idx, max_len=d.min_L - 1)
    B, S, G, h, Dv = out.shape
    out.view(B * S * G, h, Dv)[idx] = out_s.to(out.dtype)
    lse.view(B * S * G, h)[idx] = lse_s
    return out, lse


def _reference(q, k, v, ranges, scale, return_lse):
    out, lse = reference.packed_sdpa(q.float(), k.float(), v.float(), ranges, scale=scale,
                                     return_lse=True, validate=False)
    return out.to(v.dtype), lse


def _oracle(q, k, v, ranges, scale, return_lse):
    out, lse = reference.oracle(q, k, v, ranges, scale=scale, return_lse=True, validate=False)
    return out.to(device=q.device, dtype=v.dtype), lse.to(device=q.device, dtype=torch.float32)


def _sdpa(q, k, v, ranges, scale, return_lse):
    return reference.packed_sdpa(q, k, v, ranges, scale=scale, return_lse=True, validate=False)


_PATHS = {"sdpa": _sdpa, "reference": _reference, "oracle": _oracle}


def _compute(q, k, v, ranges, scale, d: Decision):
    if d.path != "triton":
        return _PATHS[d.path](q, k, v, ranges, scale, True), d
    try:
        return _triton_with_threshold(q, k, v, ranges, scale, d), d
    except Exception as exc:  # noqa: BLE001 - any kernel failure falls back, once per config
        key = _failure_key(q, v)
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        _FAILED[key] = reason
        warnings.warn(
            f"nsa_triton_sel: the Triton selection kernel failed for device={key[0]}, dtype={key[1]}, "
            f"Dk={key[2]}, Dv={key[3]}, h={key[4]} ({reason}); using the packed-SDPA path for this "
            f"configuration from now on",
            RuntimeWarning,
            stacklevel=4,
        )
        fallback = Decision("sdpa", f"Triton failed: {reason}")
        return _sdpa(q, k, v, ranges, scale, True), fallback


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def selection_attention(
    q, k, v, ranges=None, *,
    block_indices=None, block_size=None, positions=None,
    scale=None, backend="auto", return_lse=False, validate=True,
):
    """NSA selection attention.

    ``q [B, S, G, h, Dk]``, ``k [B, G, T, Dk]``, ``v [B, G, T, Dv]`` and either ``ranges
    [B, S, G, n, 2]`` (``[start, end)`` spans, ``start == end`` is padding) or
    ``block_indices [B, S, G, n]`` with ``block_size`` (``-1`` = none; ``positions`` are the
    query positions, default ``arange(S)``, used for the causal clamp).  Returns ``out
    [B, S, G, h, Dv]`` in v's dtype and, with ``return_lse``, the natural-log LSE
    ``[B, S, G, h]`` in float32 (``-inf`` and zero output for a row with no key).
    """
    flags = config.read_flags()
    dims = check_qkv(q, k, v, allow_fp32=True)
    if (ranges is None) == (block_indices is None):
        raise ValueError("pass exactly one of ranges [B, S, G, n, 2] or block_indices [B, S, G, n] (with block_size)")
    if ranges is None:
        if block_size is None:
            raise ValueError("block_indices needs block_size (the number of keys per block)")
        if not isinstance(block_indices, torch.Tensor) or block_indices.device != q.device:
            where = getattr(block_indices, "device", type(block_indices).__name__)
            raise ValueError(f"block_indices must be a tensor on q's device {q.device}, got {where}")
        if block_indices.dim() == 4 and tuple(block_indices.shape[:3]) != (dims.B, dims.S, dims.G):
            raise ValueError(
                f"block_indices has shape {list(block_indices.shape)}; expected [B, S, G, n] = "
                f"[{dims.B}, {dims.S}, {dims.G}, n] to match q"
            )
        ranges = block_indices_to_ranges(block_indices, block_size, dims.T, positions, validate=validate)
        check_ranges(ranges, dims, q.device, validate=False)  # valid by construction
    else:
        check_ranges(ranges, dims, q.device, validate=validate)
    d = decide(q, k, v, backend=backend, flags=flags)
    if flags.debug_shapes:
        log.info("selection_attention q=%s%s k=%s%s v=%s%s ranges=%s %s -> %s (%s)",
                 list(q.shape), q.stride(), list(k.shape), k.stride(), list(v.shape), v.stride(),
                 list(ranges.shape), q.dtype, d.path, d.reason)
    t0 = time.perf_counter() if flags.debug_timing else 0.0
    (out, lse), d = _compute(q, k, v, ranges, scale, d)
    if flags.debug_timing:
        _sync(q.device)
        log.info("selection_attention path=%s%s time=%.3f ms", d.path, " (decode)" if d.decode else "",
                 (time.perf_counter() - t0) * 1e3)
    if flags.debug_compare:
        ref = reference.packed_sdpa(q, k, v, ranges, scale=scale, validate=False)
        err = (out.float() - ref.float()).abs()
        log.info("selection_attention compare path=%s vs packed-sdpa: max_abs=%.3e mean_abs=%.3e",
                 d.path, err.max().item() if err.numel() else 0.0, err.mean().item() if err.numel() else 0.0)
    return (out, lse) if return_lse else out
