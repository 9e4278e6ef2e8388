"""The backward's reader list: the selection inverted per key tile, built on the device with no host read.

For every ``block_n``-key tile of every ``(b, g)``, the (row, span) entries that read it, with the keys
``[lo, hi)`` of the tile each one reads, ordered within a tile by (token, span slot): the order, and with it
every sum the dk/dv kernel makes, is fixed (bit-reproducible gradients).  Each tile's entries are cut into
chunks of at most ``chunk`` entries, one dk/dv program each, longest first, so the hot tiles' chunks do not
trail at the end of the launch.

Three steps: ``sel_bwd_reader_keys_kernel`` writes each row's entries as integer sort keys (tile, token; int32
where they fit) and their span slots, one stable sort puts them in order (a row's entries of one tile were
written in slot order, so ties keep it), and ``sel_bwd_reader_entries_kernel`` decodes them into the dk/dv
kernel's entries; the tile boundaries are a ``searchsorted`` of the sorted keys.

No size is read back to the host: each row gets ``per_row`` slots (``plan.entries_per_row``, a bound from
the shapes), and the slots a row does not use hold a padding key that sorts last and that no chunk refers
to.  So a training step can be captured in a CUDA graph, and an eager step does not stall the host.  A row
is cut at its ``per_row`` slots, so even spans that break the contract (overlapping, with ``validate=False``)
cannot make a kernel read past the arrays.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ..plan.backward import READER_BLOCK, READER_ENTRIES_WARPS, READER_KEYS_WARPS, BackwardMeta
from ..plan.keymajor import KeyMajorMeta
from . import backward as bwd_kernels, bind


INT32_KEYS_BELOW = 2**31 - 1  # the padding key (the largest) must be below it for int32 keys


@dataclass
class ReaderList:
    """The readers of every key tile, in launch form (see ``sel_bwd_dkdv_kernel``).

    ``entries [E, 2]`` int32 ``(token, lo | hi << 16)`` grouped by tile (tile-major, then token, then span
    slot), ``E`` the capacity; ``chunks [P, 4]`` int64 ``(tile, e0, e1, slot)`` one row per dk/dv program
    (``tile = -1``: padding); ``tile_slots [tiles, 2]`` int64 ``(first slot, count)`` for the reduction;
    ``slots`` workspace slots to allocate.
    """

    entries: torch.Tensor
    chunks: torch.Tensor
    tile_slots: torch.Tensor
    slots: int
    n_tiles: int  # key tiles per (b, g)
    chunk: int
    origin: torch.Tensor | None = None  # [E] int64: each entry's slot before the sort (the key-major kernels')
    offsets: torch.Tensor | None = None  # [tiles + 1] int64: where each tile's entries start (the key-major lists)

    def with_chunk(self, chunk: int) -> ReaderList:
        """The same list cut into ``chunk`` entries per program (a key-major list: the forward's, for the
        backward's kernel; only the chunk table is new)."""
        if chunk == self.chunk:
            return self
        chunks, tile_slots, n_slots = _chunk_table(self.offsets, self.entries.shape[0], chunk)
        return dataclasses.replace(self, chunks=chunks, tile_slots=tile_slots, slots=n_slots, chunk=chunk)


def reader_list(ranges: torch.Tensor, T: int, meta: BackwardMeta, *, per_row: int, chunk: int) -> ReaderList:
    """Invert ``ranges [B, S, G, n, 2]`` (clamped into ``[0, T]``) into the readers of each ``meta.KV_BLOCK_N``-key
    tile (``meta.BLOCK_S`` must hold the n spans).

    ``per_row`` bounds the (tile, span) entries of one row (a proof from the shapes, ``plan.entries_per_row``);
    ``chunk`` the entries per dk/dv program.  Device work only; at least one span (``B * S * G * n > 0``)."""
    return _build(ranges, T, meta.KV_BLOCK_N, meta.reader_keys_constexprs(per_row), per_row, chunk, origin=False)


def keymajor_reader_list(ranges: torch.Tensor, T: int, meta: KeyMajorMeta, chunk: int | None = None) -> ReaderList:
    """The reader list of the key-major kernels (``meta``'s tile and bound; ``chunk`` entries per program, the
    forward's ``meta.chunk`` by default), with each entry's ``origin``: its slot ``row * per_row + k`` before the
    sort, where the forward stores its partial result and the backward its partial dq."""
    return _build(ranges, T, meta.BLOCK_N, meta.reader_keys_constexprs(), meta.per_row, chunk or meta.chunk,
                  origin=True)


def _build(ranges, T: int, block_n: int, keys_constexprs: dict, per_row: int, chunk: int, *, origin: bool):
    B, S, G, n, _ = ranges.shape
    dev = ranges.device
    rows = B * S * G
    capacity = rows * per_row
    nt = -(-T // block_n)
    n_tiles = B * G * nt
    # int32 keys where the largest (the padding key) fits: the radix sort makes half the passes of int64's
    key_dtype = torch.int32 if n_tiles * S < INT32_KEYS_BELOW else torch.int64
    keys = torch.empty(capacity, dtype=key_dtype, device=dev)
    slots = torch.empty(capacity, dtype=torch.int32, device=dev)
    _launch(bwd_kernels.sel_bwd_reader_keys_kernel, (rows,),
            dict(SPANS=ranges, KEYS=keys, SLOTS=slots, S=S, G=G, n=n, T=T, NT=nt, n_tiles=n_tiles, per_row=per_row,
                 sr=ranges.stride()),
            num_warps=READER_KEYS_WARPS, num_stages=1, **keys_constexprs)
    # Stable: a (tile, token) key repeats for a row's spans in one tile, written in slot order, which the sort
    # keeps; so the order is the same on every run (the padding's order is never read).
    keys, where_from = torch.sort(keys, stable=True)
    entries = torch.empty((capacity, 2), dtype=torch.int32, device=dev)
    _launch(bwd_kernels.sel_bwd_reader_entries_kernel, (-(-capacity // READER_BLOCK),),
            dict(SPANS=ranges, KEYS=keys, ORDER=where_from, SLOTS=slots, ENTRIES=entries, n_entries=capacity, S=S,
                 G=G, n=n, T=T, NT=nt, n_tiles=n_tiles, sr=ranges.stride()),
            BLOCK_N=block_n, BLOCK=READER_BLOCK, num_warps=READER_ENTRIES_WARPS, num_stages=1)
    # Tile t's entries start at the first key of tile t (padding keys, tile n_tiles, mark the end).
    offsets = torch.searchsorted(keys, torch.arange(n_tiles + 1, device=dev, dtype=key_dtype).mul_(S))
    chunks, tile_slots, n_slots = _chunk_table(offsets, capacity, chunk)
    if not origin:
        return ReaderList(entries, chunks, tile_slots, n_slots, nt, chunk)
    return ReaderList(entries, chunks, tile_slots, n_slots, nt, chunk, where_from, offsets)


def _launch(fn, grid, named: dict, **options) -> None:
    """``fn[grid]`` through its bound launcher (``bind.py``: no per-call binding of the arguments, which costs a
    training call more host time than the list's GPU work at short T), the options as the launch's plan.  Not
    through ``launch._go``: no recorded (decode) call builds a reader list."""
    b = bind.bound(fn)
    b(tuple(sorted(options.items())), grid, b.pack(**named), options.copy)


def _chunk_table(offsets, capacity: int, chunk: int):
    """One row ``(tile, e0, e1, slot)`` per dk/dv program, padded to a bound known on the host.

    Every tile gets at least one program (a tile nobody reads still stores zeros).  A tile with several
    chunks gets consecutive workspace slots.  With at most ``capacity`` entries, the programs number at
    most ``tiles + capacity // chunk``.  A split tile of ``e > chunk`` entries takes ``ceil(e / chunk) <= (e - 1)
    // chunk + 1`` slots, so the slots number at most ``capacity // chunk`` plus the split tiles, of which there
    are at most ``min(tiles, capacity // chunk)``: nothing here waits for the GPU.  (Against ``2 * capacity //
    chunk`` this bound is smaller where tiles are fewer than chunks, as at short T, where the workspace is
    the backward's largest temporary.)
    """
    per_tile = offsets.diff()
    dev = per_tile.device
    n_tiles = per_tile.numel()
    # A launch per torch op: each costs the host about as much as the op's GPU work, so the table is built in few.
    n_ch = torch.div(per_tile + (chunk - 1), chunk, rounding_mode="floor").clamp_min_(1)
    ch_end = torch.cumsum(n_ch, 0)
    bound = n_tiles + capacity // chunk
    p = torch.arange(bound, device=dev)
    tile = torch.searchsorted(ch_end, p, right=True)
    valid = tile < n_tiles
    tile_c = tile.clamp_max_(n_tiles - 1)
    slots_per_tile = n_ch * (n_ch > 1)  # a tile of one chunk writes dk/dv itself: no slot
    first_slot = torch.cumsum(slots_per_tile, 0).sub_(slots_per_tile)
    # what each program needs of its tile, gathered in one index: chunk start, entries [o0, o1), slots
    cs, o0, o1, fs, spt = torch.stack([ch_end - n_ch, offsets[:-1], offsets[1:], first_slot, slots_per_tile])[:, tile_c]
    j = p - cs
    e0 = torch.add(o0, j, alpha=chunk)
    e1 = torch.where(valid, torch.minimum(e0 + chunk, o1), e0)
    slot = torch.where(valid & (spt > 0), fs + j, -1)
    chunks = torch.stack([torch.where(valid, tile_c, -1), e0, e1, slot], dim=-1)
    # Longest first (stable: equal chunks keep tile order, so neighbouring tiles run together).
    chunks = chunks[torch.sort(e1 - e0, descending=True, stable=True).indices]
    tile_slots = torch.stack([first_slot, slots_per_tile], dim=-1)
    return chunks, tile_slots, capacity // chunk + min(n_tiles, capacity // chunk)
