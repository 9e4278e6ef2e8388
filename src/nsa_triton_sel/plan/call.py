"""The plan of one operator call, forward and backward: :func:`plan_call`, asked once per call.

A :class:`Plan` holds every launch decision of a call: the forward kernel and its configuration
(``forward.selection``: single-token, split-L decode or multi-token; ``forward.keymajor`` for small groups,
``keymajor.py``; tiles, warps, stages, grid), the
backward's (``backward.backward_meta``: the dq kernel, single- or multi-token as the forward, the dk/dv
and reduce kernels), and the bound of the backward's reader list.  The autograd function carries it from
the forward to the backward, so the backward asks nothing again.

Plans are remembered per signature (shapes, dtype, device, options): a repeated call (a decode step, the
next training step) costs a dict lookup here, plus, where neighbouring tokens may share their spans, the
sharing measurement of ``share.py`` (no host sync).  This cache is what used to be the decode step's
"express lane": the plan and, in ``kernels/launch.py``, its prepared launch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import caches
from ..config import load_path_entries
from ..device import Device, device_of, shared_limit
from . import tiles as M
from .backward import BackwardMeta, backward_meta, dq_tokens_per_program, entries_per_row
from . import keymajor as KM
from .forward import Launch, keymajor, selection, use_decode
from .keymajor import key_major
from .tokens import choose_tokens, shared, static_tokens


@dataclass(frozen=True, eq=False)
class Plan:
    """Every launch decision of one call (identity-hashed: plans are interned per signature)."""

    forward: Launch
    backward: BackwardMeta
    tokens: int  # tokens per program of the forward (1: single-token or decode)
    rows_as_batch: bool  # a packed batch's few rows launched as a batch of one query each (split-L decode)
    reader_per_row: int  # the backward's reader list: at most this many entries per row (entries_per_row)
    reader_chunk: int  # entries per dk/dv program (per key-major backward program)
    delta_forward: Launch | None = None  # backward delta="fp32": the forward that recomputes O in fp32
    # the key-major backward (with a key-major forward, on its reader list: dk, dv and partial dq from one kernel):
    # KV heads per pass; 0: the token-major dq and one reader list of the whole call for dk/dv
    dq_groups_per_pass: int = 0

    @property
    def backward_reads_forward_readers(self) -> bool:
        """The key-major backward runs the forward's passes, so it takes the forward's reader lists instead of
        building them again (the operator carries them from the forward to the backward)."""
        return self.dq_groups_per_pass > 0


@dataclass
class _Signature:
    """What a signature's shapes decide, and its plans by (tokens per program, key-major) (built on first use)."""

    dev: Device
    tokens: int  # > 0: fixed; 0: ``candidate`` if neighbouring tokens share their spans, else 1
    candidate: int
    key: str  # the key-major path: KM.ALWAYS, KM.NEVER or KM.UNSHARED (where neighbours do not share spans)
    args: tuple  # plan_call's arguments for building a plan
    plans: dict = field(default_factory=dict)


_SIGNATURES: dict = caches.register("plans", {})


def plan_call(q, k, v, spans, positions, *, per_head: bool, tokens: int, span_len: int, packed: bool,
              traced: bool = False, grad: bool = False) -> Plan:
    """The plan of one operator call: ``q [B, S, G, h, Dk]``, ``k/v [B, G, T, D]``, ``spans`` ranges or block
    indices.  ``tokens``: ``NSA_SEL_TRITON_TOKENS`` (1 or N) or 0 (decide); ``span_len``: most keys per span
    (0: unbounded); ``packed``: k/v shared by all rows of a packed batch; ``traced``: the triton_op path
    under ``torch.compile``, which cannot measure the spans (one token per program unless forced); ``grad``:
    autograd records the call (the path table's training times choose the path, else its forward times)."""
    key = (q.shape, k.shape[2], v.shape[3], spans.shape, q.dtype, q.device, positions is not None, per_head, tokens,
           span_len, packed, traced, grad)
    sig = _SIGNATURES.get(key)
    if sig is None:
        sig = _SIGNATURES[key] = _signature(q, k, v, spans, positions, per_head, tokens, span_len, packed, traced,
                                            grad)
    if sig.key == KM.ALWAYS:
        by_key, tok = True, 1
    elif sig.key == KM.UNSHARED:
        by_key = not shared(spans)
        tok = 1 if by_key else sig.tokens or sig.candidate
    else:
        by_key, tok = False, sig.tokens or choose_tokens(spans, sig.candidate)
    plan = sig.plans.get((tok, by_key))
    if plan is None:
        plan = sig.plans[(tok, by_key)] = _build(sig, tok, by_key)
    return plan


def _signature(q, k, v, spans, positions, per_head, tokens, span_len, packed, traced, grad) -> _Signature:
    dev = device_of(q.device)
    B, S, G, h, Dk = q.shape
    blocks = spans.dim() == 4
    rows_as_batch = packed and B == 1 and S > 1 and not blocks and use_decode(S, 1, G, h, per_head, dev)
    decode = rows_as_batch or use_decode(B, S, G, h, per_head, dev)
    dot_f32 = dev.interpreter and str(q.dtype) == "torch.bfloat16"
    T, Dv, n = k.shape[2], v.shape[3], spans.shape[3]
    # Small groups: the key-major path, where its workspace is bounded (it is not traceable by Inductor) and the
    # path table measured it faster
    by_key = KM.NEVER
    if not (per_head or decode or traced or tokens > 1) and span_len > 0:
        by_key = key_major(B=B, S=S, G=G, h=h, Dk=Dk, Dv=Dv, T=T, n=n, span_len=span_len,
                           aligned=blocks and not packed, dev=dev, grad=grad, entries=load_path_entries())
    tok, candidate = static_tokens(tokens, h, S, dev,
                                   single=per_head or decode or by_key == KM.ALWAYS or (traced and tokens == 0))
    args = (tuple(q.shape), T, Dv, n, blocks, positions is not None, per_head, span_len, packed, rows_as_batch,
            decode, dot_f32, str(q.dtype) == "torch.bfloat16")
    return _Signature(dev, tok, candidate, by_key, args)


def _build(sig: _Signature, tok: int, by_key: bool) -> Plan:
    ((B, S, G, h, Dk), T, Dv, n, blocks, has_pos, per_head, span_len, packed, rows_as_batch, decode,
     dot_f32, bf16) = sig.args
    dev = sig.dev
    if rows_as_batch:
        B, S = S, 1
    mode = M.MODE_BLOCKS if blocks and tok == 1 else M.MODE_RANGES
    if by_key:
        fwd = keymajor(B, S, G, h, Dk, Dv, T, n, dev=dev, span_len=span_len, aligned=blocks and not packed,
                       has_lse=True, dot_f32=dot_f32, bf16=bf16)
    else:
        fwd = selection(B, S, G, h, Dk, Dv, T, n, dev=dev, span_mode=mode, has_pos=has_pos and mode == M.MODE_BLOCKS,
                        has_lse=True, per_head=per_head, tokens=tok, decode=decode, dot_f32=dot_f32)
    bwd = backward_meta(h=h, Dk=Dk, Dv=Dv, n_spans=max(n, 1), dot_f32=dot_f32, max_rows=dev.max_rows,
                        dq_tokens=(dq_tokens_per_program(h, dev.max_rows) or None) if tok > 1 else None,
                        shared=shared_limit(dev.arch))
    B0, S0 = sig.args[0][:2]  # the backward runs on the call's own shape
    per_row = entries_per_row(n, T, bwd.KV_BLOCK_N, span_len, aligned=blocks and not packed)
    delta_forward = None
    if bwd.delta == "fp32":
        delta_forward = selection(B0, S0, G, h, Dk, Dv, T, n, dev=dev, has_lse=False, per_head=per_head, decode=False,
                                  dot_f32=dot_f32)
    # Small groups: the backward key-major too, in the forward's passes over KV heads (the workspace bound counts
    # the dq partials too), on the forward's reader lists (so only where its tile is the dk/dv kernel's)
    dq_gpp = 0
    if by_key and fwd.meta.BLOCK_N == bwd.KV_BLOCK_N and fwd.meta.per_row == per_row:
        dq_gpp = fwd.meta.groups_per_pass
    if dq_gpp:  # the key-major backward kernel's chunks over one pass's entries
        chunk = fwd.meta.bwd_chunk(B0 * S0 * dq_gpp * per_row, dev.sm_count)
    else:
        chunk = bwd.chunk_for(B0 * S0 * G * per_row, h, dev.sm_count)
    return Plan(fwd, bwd, tok, rows_as_batch, per_row, chunk, delta_forward, dq_gpp)
