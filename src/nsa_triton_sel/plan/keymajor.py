"""The key-major forward: when it runs, and its launch configuration.

The token-major kernels read each row's selected K/V tiles for the ``h`` heads of one group, so a tile load
serves ``h`` rows: with small groups (plain MHA, Llama-style 4-8 heads per KV head) the forward is bound by
the reads of the same tiles, program after program.  The key-major forward turns the loop around (as FSA
does): one program per chunk of a key tile's readers loads the tile once and computes the partial softmax of
every (token, head) pair that selected it, ``ROWS`` pairs per MMA; a second kernel merges each row's partials
by LSE, in a fixed order.  Its reader list is the backward's (``kernels/readers.py``), built on the device
with no host read.  Kernels: ``kernels/forward.py`` (``sel_fwd_keymajor_kernel``,
``sel_fwd_keymajor_merge_kernel``), and where the device's Triton has Gluon's warp specialisation (sm_90, Triton
>= 3.6) the partial kernel ``kernels/keymajor_ws.py`` (``sel_fwd_keymajor_ws_kernel``: the same results, its q
gathers in warps of their own; :func:`takes_ws`) and the backward's kernel ``kernels/keymajor_bwd_gluon.py``
(``sel_bwd_keymajor_gluon_kernel``: the same gradients, its asynchronous work ordered by hand;
:func:`takes_gluon_backward`).

The cost: a workspace of one partial result per (row, key tile, head), written once and read once, and the
reader list's sort.  The partials are the path's main traffic (at 32K with 32 query heads, 4.3 GB of gathered q
against 8.7 GB of float32 partial outputs each way), so they are stored in :data:`PARTIAL_DTYPE`, float16, each
divided by a power of two kept beside it as a float32 scale.  The power comes from a bound known before the
result is computed, not from the result's largest value (a row reduction every step): the key tile's largest
value for an output (a convex combination of the tile's value rows), a bound from the tile's largest k and v
and the row's ``|dO|_1`` and delta for a dq.  A result then lies within float16's range whatever the data's, and
float16's 11 bits keep the error against the float64 oracle where float32 partials had it (bfloat16's 8 bits
raise the forward's); what each width costs and saves is measured in
``bench/results/2026-11-28-h200-triton3.6-keymajor-partials/``.  Where the workspace of the whole call would pass
:data:`WORKSPACE_BYTES`, the launcher runs it in passes over slices of the KV heads (``groups_per_pass``), each
with its own reader list.
:func:`key_major` says where the path runs: where it can (the group fits a step, the reader list has a bound from
the shapes: block indices or a span length, unbounded ranges would make the workspace grow with T) and the
planner's path table (``data/paths.json``, :func:`path_verdict`) measured it faster on this GPU for the
call's group size, sequence length and kind of selection, for a forward alone or a training step.

Pure Python (no torch, no triton).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

from .. import caches

from .backward import CHUNK_PROGRAMS_PER_SM, chunk_size, entries_per_row, reader_keys_constexprs
from .tiles import MIN_DOT, _Constexprs, check_sizes, next_pow2, split_head_dim

MAX_H = 8  # the largest group the planner may run key-major (the compile registry covers every padded h up to it)
MIN_ROWS = 4096  # fewer (token, group) rows: not measured (the reader list's sort and the merge weigh more there)
# A measured cell prefers the key-major path where it was at least this much faster (3 %: the spread of repeated
# runs of one configuration on one GPU); on a GPU the table has not measured, where it was faster by
# DEFAULT_MARGIN on every GPU the table has.
MEASURED_MARGIN = 0.97
DEFAULT_MARGIN = 0.8
ALWAYS, UNSHARED, NEVER = "always", "unshared", "never"  # key_major's verdicts
# The partial results' element type (a torch dtype's name), its bytes, and the bytes of a partial row's scale (float32).
PARTIAL_DTYPE = "float16"
PARTIAL_BYTES = 2
PARTIAL_SCALE_BYTES = 4
WORKSPACE_BYTES = 4 << 30  # the partial results' bytes per pass (H100, 32K: h = 1 in 3 passes 14.4 ms, one pass 13.9; h = 4 needs 1 GiB a KV head)
ROWS = 64  # (entry, head) pairs per MMA step (the dot's M), capped by the device's row cap
PROGRAMS_PER_SM = 8  # chunks: about this many programs per SM (as the dk/dv kernel's)
# The forward kernel's pipeline: 3 stages stage the gathered q one step ahead (4 compile to the same pipeline);
# 5 stage it two steps ahead, in 108 KB of shared memory at Dk = Dv = 128, which two programs of an SM can hold
# only where a program may use DEEP_SHARED bytes (sm_90, sm_100).  H200, 32K, h = 8: forward 6.15 ms on 5 stages,
# 6.33 on 3 (bench/results/2026-11-28-h200-triton3.6-keymajor-pipelining/).
FWD_STAGES = 3
FWD_STAGES_DEEP = 5
DEEP_SHARED = 200 << 10
# The merges: (row, head) pairs per program and warps.  Each row keeps two partials in flight (the next one's
# loads go out before this one's arithmetic), and 32 pairs a program leave room for four programs an SM.
MERGE_PAIRS = 32
MERGE_WARPS = 4
# The key-major backward kernel (dk, dv and the partial dq from one walk): pairs per step, warps, stages.  H200,
# 32K, whole backward: h = 1 17.1 ms (8 warps, 2 stages: 20.6; 64 pairs, 8 warps: 22.4), h = 4 14.6 ms (17.3,
# 19.3); against 17.7 and 14.8 with a dq kernel of its own (bench/probes/keymajor_backward.py --tune).
BWD_ROWS = 32
BWD_WARPS = 4
BWD_STAGES = 1
DELTA_ROWS = 64  # (token, group, head) rows per program of the key-major dq's delta pass
# The warp-specialised Gluon partial kernel (``kernels/keymajor_ws.py``; where the device's Triton has it,
# ``device.gluon_ws``): q slots in shared memory, registers a thread of its MMA partition (the launch's cap), warps
# of its gather partition.  H200, 32K, h = 8: the whole forward 0.86x the Triton partial kernel's time; 4 slots
# or 2 MMA partitions were no faster (bench/results/2026-11-29-h200-triton3.6-keymajor-ceiling/).
WS_SLOTS = 3
WS_REGISTERS = 128
WS_WARPS = 4
# The key-major backward's Gluon kernel (``kernels/keymajor_bwd_gluon.py``, where ``device.gluon_ws``): q and dO
# slots in shared memory (the gathers run SLOTS - 1 steps ahead), 32-pair steps, one warpgroup.  H200, 32K, the
# whole backward against the Triton kernel's: h = 1 0.84x, h = 4 0.74x, h = 8 0.79x; 3 slots, the partial dq's MMA
# in flight across the next softmax, int32 row offsets or a whole-tile fast path were no faster
# (bench/results/2026-11-30-h200-triton3.6-keymajor-bwd-gluon/).
BWD_GLUON_SLOTS = 4
BWD_GLUON_WARPS = 4


@dataclass(frozen=True)
class KeyMajorMeta(_Constexprs):
    """Constexprs and launch options of the key-major forward (and its merge), for one call's shapes."""

    BLOCK_N: int  # keys per tile: the reader list's tile
    ROWS: int  # (entry, head) pairs per step: the dot's M
    HP: int  # a power of two >= h: ROWS // HP whole entries per step
    DK1: int
    DK2: int
    BLOCK_DV: int
    BLOCK_S: int  # spans per row, padded to a power of two (the merge and the reader keys read them)
    DOT_F32: bool
    HAS_LSE: bool
    num_warps: int
    num_stages: int
    per_row: int  # the reader list's entries (partials) per row: a bound from the shapes
    chunk: int  # entries per program
    groups_per_pass: int  # KV heads per pass (the workspace of one pass stays under WORKSPACE_BYTES)
    bwd_rows: int = BWD_ROWS  # the key-major backward kernel's (entry, head) pairs per step and launch
    bwd_warps: int = BWD_WARPS
    bwd_stages: int = BWD_STAGES
    ws: bool = False  # the partial results come from the warp-specialised Gluon kernel (:func:`takes_ws`)
    bwd_gluon: bool = False  # the backward's common walk runs in the Gluon kernel (:func:`takes_gluon_backward`)

    def kernel_constexprs(self) -> dict:
        return {"BLOCK_N": self.BLOCK_N, "ROWS": self.ROWS, "HP": self.HP, "DK1": self.DK1, "DK2": self.DK2,
                "BLOCK_DV": self.BLOCK_DV, "DOT_F32": self.DOT_F32}

    def ws_constexprs(self) -> dict:
        """The warp-specialised kernel's constexprs (its launch: ``WS_WARPS`` warps, ``maxnreg=WS_REGISTERS``)."""
        return {"BLOCK_N": self.BLOCK_N, "ROWS": self.ROWS, "D": self.BLOCK_DV, "HP": self.HP, "SLOTS": WS_SLOTS,
                "REGISTERS": WS_REGISTERS}

    def bwd_constexprs(self) -> dict:
        return {"BLOCK_N": self.BLOCK_N, "ROWS": self.bwd_rows, "HP": self.HP, "DK1": self.DK1, "DK2": self.DK2,
                "BLOCK_DV": self.BLOCK_DV, "DOT_F32": self.DOT_F32}

    def bwd_gluon_constexprs(self) -> dict:
        """The backward's Gluon kernel's constexprs (its launch: ``BWD_GLUON_WARPS`` warps)."""
        return {"BLOCK_N": self.BLOCK_N, "ROWS": self.bwd_rows, "D": self.BLOCK_DV, "HP": self.HP,
                "SLOTS": BWD_GLUON_SLOTS}

    def merge_constexprs(self) -> dict:
        return {"BLOCK_N": self.BLOCK_N, "PAIRS": max(MERGE_PAIRS, self.HP), "HP": self.HP, "BLOCK_S": self.BLOCK_S,
                "BLOCK_DV": self.BLOCK_DV, "HAS_LSE": self.HAS_LSE}

    def dq_merge_constexprs(self, Dk: int) -> dict:
        return {"BLOCK_N": self.BLOCK_N, "PAIRS": max(MERGE_PAIRS, self.HP), "HP": self.HP, "BLOCK_S": self.BLOCK_S,
                "BLOCK_DK": max(MIN_DOT, next_pow2(Dk))}

    def delta_constexprs(self, load_delta: bool = False) -> dict:
        return {"ROWS": DELTA_ROWS, "DK1": self.DK1, "DK2": self.DK2, "BLOCK_DV": self.BLOCK_DV,
                "LOAD_DELTA": load_delta}

    def reader_keys_constexprs(self) -> dict:
        return reader_keys_constexprs(self.BLOCK_N, self.BLOCK_S, self.per_row)

    def bwd_chunk(self, entries: int, sm_count: int) -> int:
        """Entries per program of the key-major backward kernel over ``entries`` reader entries (a pass's): about
        the dk/dv kernel's programs per SM, whole steps."""
        return chunk_size(entries, CHUNK_PROGRAMS_PER_SM * sm_count, self.bwd_rows, self.HP)

    def merge_rows_per_program(self) -> int:
        return max(MERGE_PAIRS, self.HP) // self.HP


def forward_stages(shared: int | None, wide: bool) -> int:
    """The key-major forward kernel's stages on a device whose programs may use ``shared`` bytes of shared memory
    (None: unknown), for head dims ``wide`` or not (Dk + Dv past 256, whose deeper pipeline is not measured)."""
    return FWD_STAGES_DEEP if shared is not None and shared >= DEEP_SHARED and not wide else FWD_STAGES


def takes_ws(*, gluon_ws: bool, Dk: int, Dv: int, block_n: int, rows: int, dot_f32: bool) -> bool:
    """Whether the warp-specialised Gluon kernel computes the partial results: the device's Triton has it
    (``gluon_ws``: ``device.gluon_ws``, and a bf16 call) and the configuration is the one it is written for
    (Dk = Dv = 128, 64-key tiles, 64-pair steps, bf16 MMAs)."""
    return bool(gluon_ws) and (Dk, Dv, block_n, rows) == (128, 128, 64, 64) and not dot_f32


def takes_gluon_backward(*, gluon: bool, Dk: int, Dv: int, block_n: int, rows: int, dot_f32: bool) -> bool:
    """Whether the backward's Gluon kernel walks the chunks of the key-major backward: the device's Triton has it
    (``gluon``: ``device.gluon_ws``, and a bf16 call) and the configuration is the one it is written for (Dk = Dv
    = 128, 64-key tiles, 32-pair steps, bf16 MMAs)."""
    return bool(gluon) and (Dk, Dv, block_n, rows) == (128, 128, 64, 32) and not dot_f32


def workspace_bytes(rows: int, per_row: int, h: int, Dk: int, Dv: int) -> int:
    """Bytes of one KV head's partial results over ``rows`` tokens: per (row, tile, head) the forward's ``Dv``
    values, their scale and a float32 LSE, or the backward's partial dq (``Dk`` values and their scale), whichever
    is larger.  The two directions run the same passes, so the backward reads the forward's reader lists (one per
    pass)."""
    one = max(Dv * PARTIAL_BYTES + PARTIAL_SCALE_BYTES + 4, Dk * PARTIAL_BYTES + PARTIAL_SCALE_BYTES)
    return rows * per_row * h * one


def kv_heads_per_pass(one: int, G: int) -> int:
    """KV heads per pass when one KV head's workspace is ``one`` bytes: the workspace of a pass stays under
    :data:`WORKSPACE_BYTES`; 0 where not even one KV head's fits."""
    if one > WORKSPACE_BYTES:
        return 0
    passes = max(-(-one * G // WORKSPACE_BYTES), 1)
    return min(-(-G // passes), G)


# "key" or "token": a path forced by :func:`forced` (benchmarks and probes time both); empty: the planner decides
_FORCED: list[str] = []


@contextlib.contextmanager
def forced(path: str):
    """Within the block, the planner takes the key-major path wherever it can (``"key"``: any ``h`` and row
    count) or never (``"token"``); plans are forgotten on entry and exit."""
    if path not in ("key", "token"):
        raise ValueError(f"path={path!r}; accepted: 'key', 'token'")
    _FORCED.append(path)
    caches.clear()
    try:
        yield
    finally:
        _FORCED.pop()
        caches.clear()


def key_major(*, B: int, S: int, G: int, h: int, Dk: int, Dv: int, T: int, n: int, span_len: int, aligned: bool,
              dev, grad: bool, entries: tuple = ()) -> str:
    """Where the planner takes the key-major path for ``q [B, S, G, h, Dk]`` with ``n`` spans of at most
    ``span_len`` keys (> 0: the reader list needs a bound) over ``T`` keys on ``dev`` (a ``Device``), for a call
    autograd records (``grad``: a training step) or not: :data:`ALWAYS`, :data:`UNSHARED` (only where
    neighbouring tokens do not share their spans, which the caller measures per call) or :data:`NEVER`.

    It can where the kernels take the group (``h <= MAX_H``), the workspace of one KV head fits, the device's
    row cap allows full :data:`ROWS`-pair steps (Triton 3.0/3.1 on sm_90 give 32-pair steps, which those
    releases cannot compile) and no known-bad window avoids the path (``dev.avoided``: "keymajor" where the
    Triton crashes compiling it).  It does where ``entries`` (the path table's, ``config.load_path_entries``)
    measured it faster (:func:`path_verdict`) and there are at least :data:`MIN_ROWS` (token, group) rows.
    Decode, per-head programs and traced launches stay token-major: the caller checks those."""
    if span_len <= 0 or "keymajor" in dev.avoided or h > MAX_H or next_pow2(h) > min(ROWS, dev.max_rows):
        return NEVER
    if not _FORCED and B * S * G < MIN_ROWS:
        return NEVER
    meta = keymajor_meta(h=h, Dk=Dk, Dv=Dv, n_spans=n, T=T, span_len=span_len, aligned=aligned, B=B, S=S, G=G,
                         sm_count=dev.sm_count, max_rows=dev.max_rows)
    if meta.groups_per_pass == 0 or meta.ROWS != ROWS:
        return NEVER
    if _FORCED:
        return ALWAYS if _FORCED[-1] == "key" else NEVER
    return path_verdict(entries, dev.name, h=h, T=T, grad=grad)


def path_verdict(entries: tuple, gpu: str, *, h: int, T: int, grad: bool) -> str:
    """The path table's verdict for group size ``h`` and ``T`` keys on the GPU named ``gpu`` (see
    :func:`key_major`): the key-major path for random selections (neighbouring tokens sharing few spans) and
    for local ones (sharing most: there the token-major kernels take several tokens per program).

    The cells of this GPU's entries decide, each needing the key-major path :data:`MEASURED_MARGIN` faster; a GPU
    no entry measured takes it only where every entry measured it :data:`DEFAULT_MARGIN` faster (and with no
    entry at all, never).  Forward + backward times decide for a training step (``grad``), forward times
    otherwise.  An unmeasured ``(h, T)`` reads the measured group sizes around ``h`` (both must prefer
    key-major; outside the measured range the nearest) at the measured ``T`` nearest on a log scale."""
    own = [e for e in entries if e["gpu"] == gpu]
    tables, margin = (own, MEASURED_MARGIN) if own else (list(entries), DEFAULT_MARGIN)
    if not tables:
        return NEVER
    col = "train" if grad else "fwd"
    by_sel = {sel: all(_prefers(e["cells"], sel, h, T, col, margin) for e in tables) for sel in ("random", "local")}
    if by_sel["random"]:
        return ALWAYS if by_sel["local"] else UNSHARED
    return NEVER


def _prefers(cells: list, sel: str, h: int, T: int, col: str, margin: float) -> bool:
    cells = [c for c in cells if c["sel"] == sel]
    if not cells:
        return False
    hs = sorted({c["h"] for c in cells})
    around = {max((x for x in hs if x <= h), default=hs[0]), min((x for x in hs if x >= h), default=hs[-1])}
    for hh in around:
        row = [c for c in cells if c["h"] == hh]
        best = min(abs(math.log2(c["T"] / T)) for c in row)
        for c in row:
            if abs(math.log2(c["T"] / T)) > best:
                continue
            key, token = c[f"{col}_key"], c[f"{col}_token"]
            if key is None or key > margin * token:
                return False
    return True


def keymajor_meta(*, h: int, Dk: int, Dv: int, n_spans: int, T: int, span_len: int, aligned: bool, B: int, S: int,
                  G: int, sm_count: int, has_lse: bool = True, dot_f32: bool = False, max_rows: int = 64,
                  block_n: int | None = None, pairs: int | None = None, num_warps: int | None = None,
                  num_stages: int | None = None, chunk: int | None = None,
                  groups_per_pass: int | None = None, shared: int | None = None,
                  gluon_ws: bool = False, gluon_bwd: bool = False) -> KeyMajorMeta:
    """The key-major forward's configuration for ``q [B, S, G, h, Dk]`` with ``n_spans`` spans of at most
    ``span_len`` keys (0: unbounded; ``aligned``: block indices) over ``T`` keys; ``ValueError`` outside its
    range (more heads than pairs per step, tile sizes that are not powers of two).  ``groups_per_pass`` 0 means
    that not even one KV head's workspace fits :data:`WORKSPACE_BYTES` (the planner then runs token-major).
    ``shared``: the bytes of shared memory a program may use on the device (``device.shared_limit``; None:
    unknown), which decides the forward kernel's stages (:data:`FWD_STAGES_DEEP` where it holds them).
    ``gluon_ws``: the device's Triton has the warp-specialised partial kernel and the call is bf16
    (:func:`takes_ws` decides); ``gluon_bwd``: likewise the backward's Gluon kernel (:func:`takes_gluon_backward`
    decides)."""
    check_sizes(h, Dk, Dv, "the key-major forward")
    dk1, dk2 = split_head_dim(Dk)
    block_dv = max(MIN_DOT, next_pow2(Dv))
    wide = dk1 + dk2 + block_dv > 256  # Dk = 192 or 256: smaller key tiles keep the scores in registers
    bn = min(block_n or (32 if wide else 64), max_rows)
    rows_per_step = min(pairs or ROWS, max(max_rows, MIN_DOT))
    hp = next_pow2(h)
    for name, x in (("block_n", bn), ("pairs", rows_per_step)):
        if x < MIN_DOT or x & (x - 1):
            raise ValueError(f"{name}={x}: need a power of two >= {MIN_DOT}")
    if hp > rows_per_step:
        raise ValueError(f"h={h}: the key-major forward takes at most {rows_per_step} heads per group")
    if chunk is not None and chunk < 1:
        raise ValueError(f"chunk={chunk}: need a positive number of entries per program")
    per_row = entries_per_row(max(n_spans, 1), T, bn, span_len, aligned)
    if groups_per_pass is None:
        groups_per_pass = kv_heads_per_pass(workspace_bytes(B * S, per_row, h, Dk, Dv), G)
    elif not 1 <= groups_per_pass:
        raise ValueError(f"groups_per_pass={groups_per_pass}: need at least 1")
    gpp = min(groups_per_pass, G) if groups_per_pass else 0
    return KeyMajorMeta(
        BLOCK_N=bn, ROWS=rows_per_step, HP=hp, DK1=dk1, DK2=dk2, BLOCK_DV=block_dv,
        BLOCK_S=max(2, next_pow2(n_spans)), DOT_F32=bool(dot_f32), HAS_LSE=bool(has_lse),
        num_warps=num_warps or 4, num_stages=num_stages or forward_stages(shared, wide), per_row=per_row,
        chunk=chunk or chunk_size(max(B * S * max(gpp, 1) * per_row, 1), PROGRAMS_PER_SM * sm_count,
                                  rows_per_step, hp),
        groups_per_pass=gpp,
        ws=takes_ws(gluon_ws=gluon_ws, Dk=Dk, Dv=Dv, block_n=bn, rows=rows_per_step, dot_f32=dot_f32),
        bwd_gluon=takes_gluon_backward(gluon=gluon_bwd, Dk=Dk, Dv=Dv, block_n=bn, rows=BWD_ROWS, dot_f32=dot_f32),
    )
