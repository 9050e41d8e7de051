"""The allocator's address space at one past moment: which reserved ranges existed and where the free gaps were.

The snapshot's segments are the state at the end of the trace.  Undoing the segment events recorded after the
moment (``segment_alloc``/``segment_free``/``segment_map``/``segment_unmap``) gives the reserved ranges then; the
blocks alive then (known from the trace) are laid over them; what is left are the free blocks.  This is what an
OOM needs: the failing request against the largest free block at that moment, not at the end of the trace.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nbdebug.core.memory._model import SEGMENT_ALLOC, SEGMENT_FREE, SEGMENT_MAP, SEGMENT_UNMAP

__all__ = ["FreeSpace", "free_space_at"]

_ROUND = 512  # the caching allocator rounds every block up to 512 bytes


@dataclass(frozen=True)
class FreeSpace:
    """Reserved ranges and free gaps at one moment."""

    reserved_bytes: int
    free_bytes: int
    largest_free_block: int
    ranges: tuple[tuple[int, int, int], ...]  # (start, size, largest free gap inside)


def _subtract(ranges: list[list[int]], start: int, end: int) -> None:
    out = []
    for lo, hi, exp in ranges:
        if hi <= start or lo >= end:
            out.append([lo, hi, exp])
            continue
        if lo < start:
            out.append([lo, start, exp])
        if hi > end:
            out.append([end, hi, exp])
    ranges[:] = out


def free_space_at(snap: object, device: int, p: int) -> FreeSpace:
    """Free space on ``device`` right after local event ``p`` (-1: before the first event)."""
    m = snap.model  # type: ignore[attr-defined]
    st = snap.state(device)  # type: ignore[attr-defined]
    ranges = [[s.address, s.address + s.total_size, int(s.is_expandable)] for s in m.segments if s.device == device]
    lo = st.lo
    act = m.action[lo:lo + st.n]
    later = np.flatnonzero(np.isin(act[p + 1:], (SEGMENT_ALLOC, SEGMENT_FREE, SEGMENT_MAP, SEGMENT_UNMAP))) + p + 1
    for i in later[::-1].tolist():  # undo, newest first
        a, size, code = int(m.address[lo + i]), int(m.size[lo + i]), int(act[i])
        if code in (SEGMENT_ALLOC, SEGMENT_MAP):
            _subtract(ranges, a, a + size)
        else:
            ranges.append([a, a + size, int(code == SEGMENT_UNMAP)])
    ranges.sort()
    merged: list[list[int]] = []
    for r in ranges:  # pieces of one expandable segment are contiguous mappings: join them
        if merged and merged[-1][2] and r[2] and merged[-1][1] == r[0]:
            merged[-1][1] = r[1]
        else:
            merged.append(list(r))
    kind, idx, size, _ = snap._alive(st, p)  # type: ignore[attr-defined]
    addr = np.where(kind < 2, m.address[np.minimum(lo + idx, max(m.address.size - 1, 0))] if m.address.size else 0,
                    m.block_address[np.minimum(idx, max(m.block_address.size - 1, 0))] if m.block_address.size else 0)
    rounded = (size + _ROUND - 1) // _ROUND * _ROUND
    order = np.argsort(addr, kind="stable")
    starts, ends = addr[order], addr[order] + rounded[order]
    out = []
    total_free = largest = reserved = 0
    for r_lo, r_hi, _ in merged:
        reserved += r_hi - r_lo
        a = int(np.searchsorted(starts, r_lo, side="left"))
        b = int(np.searchsorted(starts, r_hi, side="left"))
        cursor, gap, free = r_lo, 0, 0
        for s, e in zip(starts[a:b].tolist(), ends[a:b].tolist()):
            if s > cursor:
                gap, free = max(gap, s - cursor), free + s - cursor
            cursor = max(cursor, min(e, r_hi))
        if r_hi > cursor:
            gap, free = max(gap, r_hi - cursor), free + r_hi - cursor
        out.append((r_lo, r_hi - r_lo, gap))
        total_free += free
        largest = max(largest, gap)
    return FreeSpace(reserved_bytes=reserved, free_bytes=total_free, largest_free_block=largest, ranges=tuple(out))
