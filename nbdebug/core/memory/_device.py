"""Per-device derived columns: allocation lifetimes, memory alive before the trace, allocated/reserved series.

Allocated memory after event ``i`` is ``initial + cumsum(delta)[i]`` where ``delta`` is +size at ``alloc`` and -size
at ``free_completed`` (a block stays allocated until its free completes, as in PyTorch's own viewer).  Memory alive
before recording began comes from two places (MemoryViz does the same): a ``free_completed`` with no recorded
``alloc`` (allocated before the trace, or dropped from the ring buffer) and a block active at the end whose address
has no recorded, unfreed ``alloc``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nbdebug.core.memory._model import (
    ALLOC,
    FREE_COMPLETED,
    SEGMENT_ALLOC,
    SEGMENT_FREE,
    SEGMENT_MAP,
    SEGMENT_UNMAP,
    Model,
)

__all__ = ["DeviceState", "device_state", "pair_frees"]


@dataclass
class DeviceState:
    """Derived columns of one device; event indices are local (0 .. n-1)."""

    device: int
    n: int
    lo: int  # offset of this device's events in the model's columns
    x: np.ndarray  # time_us, or the event index when the trace has no times
    x_is_time: bool
    free_of: np.ndarray  # for an alloc: local index of its free_completed, -1 if never freed
    alloc_of: np.ndarray  # for a free_completed: local index of its alloc, -1 if allocated before the trace
    delta: np.ndarray  # allocated-bytes change at each event
    allocated: np.ndarray  # allocated bytes after each event
    reserved: np.ndarray  # reserved bytes after each event
    initial_allocated: int
    initial_reserved: int
    # blocks alive for the whole trace (active at the end, never seen in the trace): indices into model.block_*
    before_blocks: np.ndarray
    # free_completed events with no alloc: alive from before the trace until that event (local indices)
    before_frees: np.ndarray
    segments_reserved: int
    final_active_blocks: int  # bytes in active blocks of the final segment state


def pair_frees(is_alloc: np.ndarray, is_free: np.ndarray, addr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each alloc's free (the next free of the same address) and each free's alloc, as local indices (-1: none).

    Vectorized: the allocs and frees sorted by address, then by index, pair where an alloc is followed by a free.
    """
    n = addr.size
    free_of = np.full(n, -1, dtype=np.int64)
    alloc_of = np.full(n, -1, dtype=np.int64)
    ii = np.flatnonzero(is_alloc | is_free)
    if ii.size:
        si = ii[np.lexsort((ii, addr[ii]))]
        sa, salloc, sfree = addr[si], is_alloc[si], is_free[si]
        pair = np.zeros(si.size, dtype=bool)
        pair[:-1] = salloc[:-1] & sfree[1:] & (sa[:-1] == sa[1:])
        k = np.flatnonzero(pair)
        free_of[si[k]] = si[k + 1]
        alloc_of[si[k + 1]] = si[k]
    return free_of, alloc_of


def device_state(model: Model, device: int) -> DeviceState:
    """Compute the derived columns of ``device``."""
    lo, hi = model.device_range.get(device, (0, 0))
    n = hi - lo
    act = model.action[lo:hi]
    addr = model.address[lo:hi]
    size = model.size[lo:hi]
    t = model.time_us[lo:hi]
    x_is_time = bool(n) and not np.isnan(t).any()
    # the allocator converts TSC ticks to µs; keep the axis non-decreasing even if a clock stepped back
    x = np.maximum.accumulate(t) if x_is_time else np.arange(n, dtype=np.float64)

    is_alloc = act == ALLOC
    is_free = act == FREE_COMPLETED
    free_of, alloc_of = pair_frees(is_alloc, is_free, addr)
    delta = np.where(is_alloc, size, 0) - np.where(is_free, size, 0)
    before_frees = np.flatnonzero(is_free & (alloc_of < 0))

    seg_of_block = model.block_segment
    if seg_of_block.size:  # blocks of the final state still active that the trace never allocated
        seg_dev = np.array([s.device for s in model.segments], dtype=np.int64)
        active = (seg_dev[seg_of_block] == device) & (model.block_state > 0)
        alive_at_end = set(addr[np.flatnonzero(is_alloc & (free_of < 0))].tolist())
        active_idx = np.flatnonzero(active)
        before_blocks = np.array([b for b in active_idx.tolist() if int(model.block_address[b]) not in alive_at_end],
                                 dtype=np.int64)
    else:  # a trace without segments (a CPU recording, a trace-only dump)
        active_idx = before_blocks = np.zeros(0, dtype=np.int64)
    initial = int(size[before_frees].sum()) + int(model.block_size[before_blocks].sum()) if n or before_blocks.size \
        else 0
    allocated = initial + np.cumsum(delta)

    rdelta = (np.where((act == SEGMENT_ALLOC) | (act == SEGMENT_MAP), size, 0)
              - np.where((act == SEGMENT_FREE) | (act == SEGMENT_UNMAP), size, 0))
    seg_reserved = int(sum(s.total_size for s in model.segments if s.device == device))
    initial_reserved = max(0, seg_reserved - int(rdelta.sum()))
    reserved = initial_reserved + np.cumsum(rdelta)
    return DeviceState(
        device=device, n=n, lo=lo, x=x, x_is_time=x_is_time, free_of=free_of, alloc_of=alloc_of, delta=delta,
        allocated=allocated, reserved=reserved, initial_allocated=initial, initial_reserved=initial_reserved,
        before_blocks=before_blocks, before_frees=before_frees, segments_reserved=seg_reserved,
        final_active_blocks=int(model.block_size[active_idx].sum()),
    )
