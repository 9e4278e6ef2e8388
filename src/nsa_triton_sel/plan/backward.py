"""The backward's launch plan: tiles, warps, stages, chunks and the multi-token dq kernel.

Pure Python (no torch, no triton), like :mod:`.tiles`: the launcher (``kernels/launch.py``), the
compile-smoke registry (``compat/registry/variants.py``) and the tests read the same numbers from here.
:func:`backward_meta` is the one entry: ``plan.plan_call`` asks it for the operator's plan (with the
multi-token dq kernel where the forward took the multi-token kernel), ``kernels/direct.py`` with overrides.

The defaults for h = 16, Dk = Dv <= 128 are the best of the backward's launch sweep
(``bench/train/train_sweep.py``) on the H100 (Triton 3.6, bf16, canonical NSA shape, T = 8K and 32K;
``bench/results/2026-11-23-h100-triton3.6-fwd-bwd-tables-host-cost/train_sweep8k.log``,
``bench/results/2026-11-26-h100-triton3.6-train-ab-kernels-7ac47c92/sweep32k.log``): dq 16-key tiles,
1 warp, 3 stages (against 32 keys / 2 warps, the reasoned default below); dk/dv 64-key tiles, 32
(entry, head) pairs per step, 4 warps, 3 stages (against 16 or 64 pairs, 8 warps, or 2 and 4 stages;
``bench/probes/dkdv_variants.py``, ``bench/results/2026-11-26-h100-triton3.6-dkdv-walk/variants.log``);
multi-token dq 64-key tiles (against 32).  Wider head dims keep the reasoned choices below:

- dq kernel: the forward's program shape (one program per token and group, the h heads as
  M), so the forward's measured best for h = 16, D = 128 on the H100 (1 warp, 32-key tiles,
  3 stages: plan/tiles.py) is the starting point.  The dq loop holds more (the dq
  accumulator, q and dO as MMA operands, 3 dots per tile): with 1 warp it sits at 255
  registers and spills 128-200 bytes on sm_90 with Triton 3.0 and 3.9 (AOT compile with the
  launch's specialisations); 2 warps take 168-230 registers, no spill, at the same number of
  programs per SM (shared memory allows 5), so 2 warps is the default and 1 is in the sweep.
- dk/dv kernel: M = BLOCK_N keys, N = ROWS (entry, head) pairs.  Its accumulators are
  ``BLOCK_N x (Dk + Dv)`` fp32 (64 KiB at 64 x 256), held by the program for its whole
  loop: at 4 warps the program sits at 255 registers (two programs per SM on the H100), so
  nothing but its own pipelining hides a step's load latency.  The walk is shaped for that
  (``kernels/backward.py``): a step's entries are loaded during the step before, so with 3 stages
  the pipeliner has the gathered q/dO rows of the next step in flight while a step computes, and
  a pair's entry and head are a shift and a mask of the walk position (``KV_HP``).  Those stages hold a
  step's gathered rows each, so a program's shared memory bounds them: where the arch's does not hold them
  (Dk = Dv = 256 on a 99-KiB part), a shallower pipeline or half the pairs a step (``KV_STEPS``); where the
  third stage would leave an SM one program (Dk + Dv of 448 or 512 on sm_90/100/103), two stages
  (``KV_PROGRAMS_PER_SM``).
- multi-token dq kernel (``dq_tokens``, for selections that neighbouring tokens share, as the
  forward's multi-token kernel): M = 4 tokens x 16 heads = 64 rows carry a 64 x 128 fp32 dq
  accumulator plus q and dO operands, so 32-key tiles and 4 warps (253-255 registers, 0-8
  bytes of spill on sm_80/sm_90 with Triton 3.6; 64-key tiles spill 96-136 bytes).
- chunks: a tile read by more than ``chunk`` entries is split; by default ``chunk`` is sized
  so the launch has about ``CHUNK_PROGRAMS_PER_SM`` programs per SM, and the longest
  program is then a small fraction of the whole (NSA's block 0 is read by every token: at
  T = 8K one unsplit program would do 64x the average tile's work).
"""

from __future__ import annotations

from dataclasses import dataclass

from .tiles import MIN_DOT, check_sizes, next_pow2, split_head_dim

CHUNK_PROGRAMS_PER_SM = 8
CHUNK_MIN = 64
CHUNK_MAX = 8192
REDUCE_WARPS = 4
READER_BLOCK = 1024  # sorted reader keys decoded per program (sel_bwd_reader_entries_kernel)
READER_KEYS_WARPS = 1
READER_ENTRIES_WARPS = 4
MAX_BLOCK_N = 128  # entry bounds are packed as lo | hi << 16 (any BLOCK_N < 2^15 would do)
# delta = rowsum(dO * O): "output" reads the stored output, like FlashAttention; "fp32" recomputes O in
# fp32 first (one more forward pass): the stored bf16 output's rounding, times dO, is of the size of
# dP - delta when one key takes all the weight (a saturated softmax): dq/dk errors of 5-25 % in bf16
# there, 0.3 % with "fp32".
DELTA = "output"
DELTA_MODES = ("output", "fp32")


@dataclass(frozen=True)
class BackwardMeta:
    """Constexprs and launch options of the three backward kernels for one call."""

    BLOCK_H: int      # dq: heads per program (M), >= 16
    DQ_BLOCK_N: int   # dq: keys per tile
    DK1: int
    DK2: int
    BLOCK_DV: int
    BLOCK_S: int      # dq: spans per row, padded to a power of two
    DOT_F32: bool
    dq_warps: int
    dq_stages: int
    KV_BLOCK_N: int   # dk/dv: keys per tile (M); also the CSR's tile size
    ROWS: int         # dk/dv: (entry, head) pairs per MMA step (N)
    kv_warps: int
    kv_stages: int
    chunk: int | None  # entries per dk/dv program; None: entries / (programs_per_sm x SMs)
    programs_per_sm: int = CHUNK_PROGRAMS_PER_SM
    delta: str = "output"  # how delta = rowsum(dO * O) is had: "output" (the dq kernel computes it from the
    # stored output) or "fp32" (its own kernel from an fp32 recomputation of O, the dq kernel loads it)
    TOK: int = 0      # > 0: the multi-token dq kernel, TOK tokens x HP padded heads per program
    HP: int = 16
    TOK_BLOCK_N: int = 64
    tok_warps: int = 4
    tok_stages: int = 2

    def dq_constexprs(self) -> dict:
        return {"BLOCK_H": self.BLOCK_H, "BLOCK_N": self.DQ_BLOCK_N, "DK1": self.DK1, "DK2": self.DK2,
                "BLOCK_DV": self.BLOCK_DV, "BLOCK_S": self.BLOCK_S, "LOAD_DELTA": self.delta == "fp32",
                "DOT_F32": self.DOT_F32}

    def dq_tok_constexprs(self) -> dict:
        return {"TOK": self.TOK, "HP": self.HP, "BLOCK_N": self.TOK_BLOCK_N, "DK1": self.DK1, "DK2": self.DK2,
                "BLOCK_DV": self.BLOCK_DV, "BLOCK_S": self.BLOCK_S, "LOAD_DELTA": self.delta == "fp32",
                "DOT_F32": self.DOT_F32}

    @property
    def KV_HP(self) -> int:
        """The dk/dv walk's positions per entry: the padded head count where a step holds whole entries, else 0
        (a flat ``entry * h + head`` walk, for h > ROWS)."""
        return self.HP if self.HP <= self.ROWS else 0

    def chunk_for(self, entries: int, h: int, sm_count: int) -> int:
        """Entries per dk/dv program once the reader list's size is known: ``chunk``, or about
        ``programs_per_sm`` programs per SM (:func:`chunk_size`)."""
        return self.chunk or chunk_size(entries, self.programs_per_sm * sm_count, self.ROWS, self.KV_HP or h)

    def reader_keys_constexprs(self, per_row: int) -> dict:
        return reader_keys_constexprs(self.KV_BLOCK_N, self.BLOCK_S, per_row)

    def dkdv_constexprs(self) -> dict:
        return {"BLOCK_N": self.KV_BLOCK_N, "ROWS": self.ROWS, "HP": self.KV_HP, "DK1": self.DK1, "DK2": self.DK2,
                "BLOCK_DV": self.BLOCK_DV, "DOT_F32": self.DOT_F32}

    def reduce_constexprs(self) -> dict:
        return {"BLOCK_N": self.KV_BLOCK_N, "DK1": self.DK1, "DK2": self.DK2, "BLOCK_DV": self.BLOCK_DV}


def reader_keys_constexprs(block_n: int, block_s: int, per_row: int) -> dict:
    """The reader-key kernel's: one program per row, its spans as one vector (``BLOCK_S``), its ``per_row``
    entry slots at most 64 at a time; a row's work is small (launched with ``READER_KEYS_WARPS``)."""
    block_e = 1 << max(per_row - 1, 0).bit_length()  # the next power of two
    return {"BLOCK_N": block_n, "BLOCK_S": block_s, "BLOCK_E": min(64, max(MIN_DOT, block_e))}


def _dq_launch(block_h: int, dk: int, block_dv: int) -> tuple[int, int, int]:
    """(BLOCK_N, warps, stages) of the dq kernel."""
    if dk + block_dv > 256:  # Dk = 192 or 256, Dv = 256: wider rows, fewer keys per tile
        return 32, (4 if block_h >= 64 else 2), 2
    if block_h >= 64:
        return 32, 4, 2
    if block_h <= 16:
        return 16, 1, 3  # measured best at h = 16, D = 128 (see the module docstring)
    return 32, 2, 3


def dkdv_shared_bytes(block_n: int, rows: int, dk: int, block_dv: int, stages: int) -> int:
    """The dk/dv kernel's operand buffers in shared memory: the program's K and V tile (``block_n`` keys, loaded
    once) and, per pipeline stage, one step's gathered q and dO rows (``rows`` pairs), 2-byte elements.  The
    compiled kernel holds 2.5-4.5 KiB more (layout conversions) on every arch up to 99 KiB (Triton 3.9, every
    backward head dim: ``bench/results/2026-11-29-cpu-triton3.9-all-arch-sweep/``), hence :data:`KV_SHARED_SLACK`."""
    return (stages * rows + block_n) * (dk + block_dv) * 2


KV_SHARED_SLACK = 8 << 10
# (ROWS, stages) of the dk/dv kernel, best first: the measured 32 pairs and 3 stages; where that does not fit the
# arch's shared memory (Dk = Dv = 256 on a 99-KiB part: 131 KiB), first a shallower pipeline, then half the pairs
# a step with the measured depth back.
KV_STEPS = ((32, 3), (32, 2), (16, 3), (16, 2), (16, 1))
# Programs of the dk/dv kernel an SM should hold at once: at 4 warps a program sits at 255 registers, so the
# register file holds two; a pipeline stage that leaves shared memory for one costs more than it hides (H200,
# Triton 3.6, Dk + Dv of 448 and 512 on 32-key tiles: 32 pairs x 2 stages 3-15 % faster on the whole backward
# than x 3; where x 3 leaves room for two, x 3 stays 1-2 % ahead:
# ``bench/results/2026-11-29-h200-triton3.0-3.9-dkdv-two-programs/``).
KV_PROGRAMS_PER_SM = 2


def _kv_launch(dk: int, block_dv: int, max_rows: int) -> tuple[int, int]:
    """(BLOCK_N, warps) of the dk/dv kernel: 8 warps once the two accumulators pass 64 x 128 fp32 values (64
    registers per thread for them alone at 4 warps); 4 warps measured best at D = 128 (module docstring)."""
    wide = dk + block_dv > 256
    bn = min(32 if wide else 64, max_rows)
    return bn, 8 if bn * (dk + block_dv) > 64 * 256 else 4


def _kv_steps(block_n: int, dk: int, block_dv: int, shared: int | None, rows: int | None,
              stages: int | None) -> tuple[int, int]:
    """(ROWS, stages) of the dk/dv kernel where a program may use ``shared`` bytes (None: unknown, no bound).

    The :data:`KV_STEPS` entries (a given ``rows`` or ``stages`` in place of each one's own) whose buffers fit;
    of those with the first one's pairs a step and a pipeline (two stages or more), the deepest that leaves room
    for :data:`KV_PROGRAMS_PER_SM` programs (an SM holds 1 KiB more than a program may use, and each program
    reserves 1 KiB of it: within :data:`KV_SHARED_SLACK`), else the first that fits; the first entry if none
    fits or ``shared`` is unknown."""
    steps = list(dict.fromkeys((rows or r, stages or s) for r, s in KV_STEPS))
    if shared is None:
        return steps[0]

    def need(step: tuple[int, int]) -> int:
        return dkdv_shared_bytes(block_n, step[0], dk, block_dv, step[1]) + KV_SHARED_SLACK

    fits = [step for step in steps if need(step) <= shared]
    if not fits:
        return steps[0]
    return next((step for step in fits
                 if step[0] == fits[0][0] and step[1] > 1 and KV_PROGRAMS_PER_SM * need(step) <= shared), fits[0])


def backward_meta(
    *,
    h: int,
    Dk: int,
    Dv: int,
    n_spans: int = 1,
    dot_f32: bool = False,
    max_rows: int = 64,
    dq_block_n: int | None = None,
    dq_warps: int | None = None,
    dq_stages: int | None = None,
    kv_block_n: int | None = None,
    rows: int | None = None,
    kv_warps: int | None = None,
    kv_stages: int | None = None,
    chunk: int | None = None,
    programs_per_sm: int | None = None,
    delta: str | None = None,
    dq_tokens: int | None = None,
    tok_block_n: int | None = None,
    tok_warps: int | None = None,
    tok_stages: int | None = None,
    shared: int | None = None,
) -> BackwardMeta:
    """The backward's launch configuration for these sizes; ``ValueError`` outside the supported range.

    ``max_rows`` caps the M dimension of every dot (``device.row_cap``: 32 on Triton 3.0 +
    Hopper), i.e. the dq kernel's head block and the dk/dv kernel's key tile.  ``shared``: the bytes of shared
    memory a program may use on the device (``device.shared_limit``; None: unknown, no bound), which sizes the
    dk/dv kernel's step (:func:`_kv_steps`).
    """
    check_sizes(h, Dk, Dv, "the backward kernels")
    dk1, dk2 = split_head_dim(Dk)
    block_dv = max(MIN_DOT, next_pow2(Dv))
    block_h = min(max_rows, max(MIN_DOT, next_pow2(h)))
    bn, dw, ds = _dq_launch(block_h, dk1 + dk2, block_dv)
    kbn, kw = _kv_launch(dk1 + dk2, block_dv, max_rows)
    kbn = min(kv_block_n or kbn, max_rows)
    kr, ks = _kv_steps(kbn, dk1 + dk2, block_dv, shared, rows, kv_stages)
    for name, x in (("rows", kr), ("kv_block_n", kbn), ("dq_block_n", dq_block_n or bn)):
        if x < MIN_DOT or x & (x - 1):
            raise ValueError(f"{name}={x}: need a power of two >= {MIN_DOT}")
    if kbn > MAX_BLOCK_N:
        raise ValueError(f"kv_block_n={kbn}: at most {MAX_BLOCK_N}")
    if chunk is not None and chunk < 1:
        raise ValueError(f"chunk={chunk}: need a positive number of entries per program")
    if delta not in (None,) + DELTA_MODES:
        raise ValueError(f"delta={delta!r}; accepted: {', '.join(map(repr, DELTA_MODES))}")
    if programs_per_sm is not None and programs_per_sm < 1:
        raise ValueError(f"programs_per_sm={programs_per_sm}: need at least 1")
    hp = next_pow2(h)
    tok = dq_tokens or 0
    if tok and (tok < 2 or tok & (tok - 1) or tok * hp < MIN_DOT or tok * hp > max(max_rows, MIN_DOT)):
        raise ValueError(f"dq_tokens={tok} with h={h}: need a power of two >= 2 with 16 <= tokens * "
                         f"next_pow2(h) <= {max_rows}")
    return BackwardMeta(
        TOK=tok, HP=hp, TOK_BLOCK_N=tok_block_n or (32 if dk1 + dk2 + block_dv > 256 else 64), tok_warps=tok_warps or 4, tok_stages=tok_stages or 2,
        BLOCK_H=block_h, DQ_BLOCK_N=dq_block_n or bn, DK1=dk1, DK2=dk2, BLOCK_DV=block_dv,
        BLOCK_S=max(2, next_pow2(n_spans)), DOT_F32=bool(dot_f32),
        dq_warps=dq_warps or dw, dq_stages=dq_stages or ds,
        KV_BLOCK_N=kbn, ROWS=kr, kv_warps=kv_warps or kw, kv_stages=ks, chunk=chunk,
        programs_per_sm=programs_per_sm or CHUNK_PROGRAMS_PER_SM, delta=delta or DELTA,
    )


def dq_tokens_per_program(h: int, max_rows: int = 64) -> int:
    """Tokens per program of the multi-token dq kernel (as the forward's: M = tokens x padded
    heads = 64, or ``max_rows``); 0 where h is too large for two tokens to share a program."""
    tok = min(64, max_rows) // next_pow2(h)
    return tok if tok >= 2 else 0


def chunk_size(entries: int, programs: int, rows_per_step: int, width: int) -> int:
    """Entries per dk/dv program: about ``entries / programs``, within [CHUNK_MIN, CHUNK_MAX],
    rounded up so a chunk is a whole number of ``rows_per_step`` steps when an entry's ``width``
    walk positions (``KV_HP``, or h) divide it."""
    c = -(-max(entries, 1) // max(programs, 1))
    c = min(CHUNK_MAX, max(CHUNK_MIN, c))
    step = max(1, rows_per_step // width) if rows_per_step % width == 0 else 1
    return -(-c // step) * step


def entries_per_row(n: int, T: int, block_n: int, span_len: int, aligned: bool) -> int:
    """How many reader entries (key tile, span) one row can add, for ``n`` spans of at most ``span_len`` keys
    (0: unbounded) over ``T`` keys in tiles of ``block_n``.

    A span of ``L`` keys touches at most ``cdiv(L, block_n) + 1`` tiles, exactly ``L / block_n`` when it
    starts on a tile boundary and ``block_n`` divides ``L`` (block indices, ``aligned``), one when ``L``
    divides ``block_n`` and it starts on a multiple of ``L``.  Without a length (ranges), the row's spans
    are disjoint (the contract), so together they touch at most ``tiles + n`` tiles.
    """
    nt = -(-max(T, 1) // block_n)
    if span_len <= 0:
        return max(1, min(n * nt, nt + n))
    L = min(span_len, max(T, 1))
    if aligned and L % block_n == 0:
        per_span = L // block_n
    elif aligned and block_n % L == 0:
        per_span = 1
    else:
        per_span = -(-L // block_n) + 1
    return max(1, n * min(per_span, nt))
