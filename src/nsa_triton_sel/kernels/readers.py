"""The backward's reader list: the selection inverted per key tile, built on the device with no host read.

For every ``block_n``-key tile of every ``(b, g)``, the (row, span) entries that read it, with the keys
``[lo, hi)`` of the tile each one reads, stable-sorted so that within a tile they follow (token, span
slot): the order, and with it every sum the dk/dv kernel makes, is fixed (bit-reproducible gradients).
Each tile's entries are cut into chunks of at most ``chunk`` entries, one dk/dv program each, longest
first, so the hot tiles' chunks do not trail at the end of the launch.

No size is read back to the host: the arrays are sized by a bound from the shapes (``capacity``:
``plan.Plan.entries_per_row`` times the rows), entries past the real count are padding that sorts last
and that no chunk refers to.  So a training step can be captured in a CUDA graph, and an eager step does
not stall the host.  The count is clamped to the capacity, so even spans that break the contract
(overlapping, with ``validate=False``) cannot make a kernel read past the arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


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


def reader_list(ranges: torch.Tensor, T: int, block_n: int, *, capacity: int, chunk: int) -> ReaderList:
    """Invert ``ranges [B, S, G, n, 2]`` (clamped into ``[0, T]``) into the readers of each ``block_n``-key tile.

    ``capacity`` bounds the number of (tile, span) entries (a proof from the shapes, ``plan.entries_per_row``);
    ``chunk`` the entries per dk/dv program.  Device ops only; at least one span (``B * S * G * n > 0``)."""
    B, S, G, n, _ = ranges.shape
    dev = ranges.device
    nt = -(-T // block_n)
    n_tiles = B * G * nt
    r = ranges.to(torch.int64)
    start, end = r[..., 0].reshape(-1), r[..., 1].reshape(-1)  # per span, in (b, s, g, slot) order
    count = torch.where(end > start, torch.div(end - 1, block_n, rounding_mode="floor")
                        - torch.div(start, block_n, rounding_mode="floor") + 1, torch.zeros_like(start))
    t_lo = torch.div(start, block_n, rounding_mode="floor")
    bg = (torch.arange(B, device=dev).view(B, 1, 1, 1) * G + torch.arange(G, device=dev).view(1, 1, G, 1))
    base = (bg * nt).expand(B, S, G, n).reshape(-1)  # global id of tile 0 of the span's (b, g)

    # Entry p of the capacity belongs to the span whose cumulative count first exceeds p.
    cum = torch.cumsum(count, 0)
    p = torch.arange(capacity, device=dev)
    span = torch.searchsorted(cum, p, right=True).clamp_max(count.numel() - 1)
    live = p < cum[-1:]
    tile = t_lo[span] + (p - (cum - count)[span])
    key = torch.where(live, base[span] + tile, torch.full_like(p, n_tiles))
    key = key.to(torch.int32) if n_tiles < 2**31 - 1 else key
    order = torch.sort(key, stable=True).indices  # padding (key n_tiles) sorts last
    span, tile = span[order], tile[order]
    tok = torch.div(span, G * n, rounding_mode="floor") % S
    k0 = tile * block_n
    lo = (start[span] - k0).clamp(0, block_n)
    hi = (end[span] - k0).clamp(0, block_n)
    entries = torch.stack([tok, lo | (hi << 16)], dim=-1).to(torch.int32)

    # Entries per tile (a difference array over the spans' tile ranges), clamped to the capacity.
    diff = torch.zeros(n_tiles + 1, dtype=torch.int64, device=dev)
    live_s = count > 0
    spill = torch.full_like(base, n_tiles)
    diff.index_add_(0, torch.where(live_s, base + t_lo, spill), live_s.to(torch.int64))
    diff.index_add_(0, torch.where(live_s, base + t_lo + count, spill), -live_s.to(torch.int64))
    per_tile = diff.cumsum(0)[:n_tiles]
    offsets = torch.zeros(n_tiles + 1, dtype=torch.int64, device=dev)
    torch.cumsum(per_tile, 0, out=offsets[1:])
    offsets = offsets.clamp_max(capacity)
    per_tile = offsets[1:] - offsets[:-1]
    chunks, tile_slots, slots = _chunk_table(per_tile, offsets, capacity, chunk)
    return ReaderList(entries, chunks, tile_slots, slots, nt, chunk)


def _chunk_table(per_tile, offsets, capacity: int, chunk: int):
    """One row ``(tile, e0, e1, slot)`` per dk/dv program, padded to a bound known on the host.

    Every tile gets at least one program (a tile nobody reads still stores zeros).  A tile with several
    chunks gets consecutive workspace slots.  With at most ``capacity`` entries, the programs number at
    most ``tiles + capacity // chunk`` and the slots at most ``2 * capacity // chunk`` (a split tile has
    more than ``chunk`` entries), so nothing here waits for the GPU.
    """
    dev = per_tile.device
    n_tiles = per_tile.numel()
    n_ch = torch.div(per_tile + chunk - 1, chunk, rounding_mode="floor").clamp_min(1)
    ch_end = torch.cumsum(n_ch, 0)
    bound = n_tiles + capacity // chunk
    p = torch.arange(bound, device=dev)
    tile = torch.searchsorted(ch_end, p, right=True)
    valid = tile < n_tiles
    tile_c = tile.clamp_max(n_tiles - 1)
    j = p - (ch_end - n_ch)[tile_c]
    e0 = offsets[tile_c] + j * chunk
    e1 = torch.minimum(e0 + chunk, offsets[tile_c + 1])
    split = n_ch > 1
    slots_per_tile = torch.where(split, n_ch, torch.zeros_like(n_ch))
    first_slot = torch.cumsum(slots_per_tile, 0) - slots_per_tile
    slot = torch.where(split[tile_c] & valid, first_slot[tile_c] + j, torch.full_like(j, -1))
    chunks = torch.stack([torch.where(valid, tile_c, torch.full_like(tile_c, -1)),
                          e0, torch.where(valid, e1, e0), slot], dim=-1)
    # Longest first (stable: equal chunks keep tile order, so neighbouring tiles run together).
    size = chunks[:, 2] - chunks[:, 1]
    chunks = chunks[torch.sort(-size, stable=True).indices].contiguous()
    tile_slots = torch.stack([first_slot, slots_per_tile], dim=-1).contiguous()
    return chunks, tile_slots, 2 * capacity // chunk
