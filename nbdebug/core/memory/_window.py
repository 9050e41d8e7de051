"""Exact answers for one window of a trace, at screen resolution (what the live viewer asks a kernel for).

The stand-alone viewer draws a fixed envelope of the whole trace.  With a kernel, the viewer asks for the window in
view instead: ``envelope`` cuts the events inside ``[x0, x1]`` into at most ``width`` columns (each keeps its event
of highest allocated memory, with exact bytes per band, and its lowest total), so a window of a few hundred events
comes back event by event; ``alive_page`` lists every block alive after one event, largest first, a page at a time.
The columnar model stays in the kernel: one answer is a few thousand numbers whatever the trace's size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nbdebug.core.memory._bands import compute_bands, event_sites, peaks_per_slice
from nbdebug.errors import SnapshotError

__all__ = ["WindowModel"]

MAX_WIDTH = 4000
MAX_PAGE = 500


@dataclass
class WindowModel:
    """One device of a snapshot, ready to answer window and moment queries (cumulative band series cached)."""

    snap: Any
    device: int | None = None
    top: int = 8
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        st = self.snap.state(self.device)
        self.device = st.device
        self.st = st
        self.bands = compute_bands(self.snap, st.device, top=self.top, buckets=1200)
        n = st.n
        self.total = np.concatenate([[st.initial_allocated], st.allocated]).astype(np.int64)
        self.x = (np.concatenate([[st.x[0] if n else 0.0], st.x]) if st.x_is_time
                  else np.arange(-1, n, dtype=np.float64))

    @property
    def events(self) -> int:
        return int(self.st.n)

    def _series(self) -> np.ndarray:
        """Bytes of each band after every event, (bands, n + 1); built once, on the first window asked for."""
        s = self._cache.get("series")
        if s is None:
            owner, initial = event_sites(self.snap, self.st.device)
            delta = self.st.delta
            ids = self.bands.site_ids
            s = np.zeros((len(ids) + 1, self.st.n + 1), dtype=np.int64)
            for k, site in enumerate(ids):
                s[k, 0] = initial[site]
                np.cumsum(np.where(owner == site, delta, 0), out=s[k, 1:])
                s[k, 1:] += initial[site]
            s[-1] = self.total - s[:-1].sum(axis=0)
            self._cache["series"] = s
        return s

    def envelope(self, x0: float, x1: float, width: int = 1000) -> dict[str, Any]:
        """The events with ``x0 <= x <= x1`` in at most ``width`` columns (exact when they are fewer than that).

        One event before the window is kept too, so the first step starts at the right height.
        """
        if not (np.isfinite(x0) and np.isfinite(x1)) or x1 < x0:
            raise SnapshotError(f"a window runs from low to high; got {x0!r} .. {x1!r}")
        width = int(min(max(width, 2), MAX_WIDTH))
        x = self.x
        i0 = max(int(np.searchsorted(x, x0, side="left")) - 1, 0)
        i1 = int(np.searchsorted(x, x1, side="right"))
        i1 = max(i1, min(i0 + 2, x.size))
        count = i1 - i0
        total = self.total[i0:i1]
        if count <= width:
            pts = np.arange(i0, i1)
            floor = total.copy()
            exact = True
        else:
            local, floor = peaks_per_slice(x[i0:i1], total, width)
            pts = i0 + local
            exact = False
        values = self._series()[:, pts]
        return {"x": x[pts].tolist(), "index": (pts - 1).tolist(), "total": self.total[pts].tolist(),
                "floor": floor.tolist(), "values": values.tolist(), "exact": exact, "events": int(count),
                "x0": float(x0), "x1": float(x1)}

    def alive_page(self, event: int, offset: int = 0, limit: int = 50) -> dict[str, Any]:
        """Every block alive after local event ``event`` (-1: before the first), largest first: one page of them,
        with their sites and stacks, and the count and bytes of all of them."""
        event = int(min(max(event, -1), self.st.n - 1))
        limit = int(min(max(limit, 1), MAX_PAGE))
        offset = max(int(offset), 0)
        kind, idx, size, stack = self.snap._alive(self.st, event)
        order = np.lexsort((idx, kind, -size))
        rows = []
        x_time = self.st.x_is_time
        for j in order[offset:offset + limit].tolist():
            k, i = int(kind[j]), int(idx[j])
            since = (f"event {i}" if not x_time else f"{(self.st.x[i] - self.x[0]) / 1e6:.6f} s") if k == 0 \
                else "before the trace"
            rows.append({"bytes": int(size[j]), "site": self.snap.site_label(int(stack[j])), "since": since,
                         "stack": list(self.snap.stack_text(int(stack[j]), limit=24))})
        total = int(self.total[event + 1])
        groups = self.snap._group(stack, size)
        sites: list[list[Any]] = [[g.site, g.bytes, g.count] for g in groups[:15]]
        if len(groups) > 15:
            rest = groups[15:]
            sites.append([None, sum(g.bytes for g in rest), sum(g.count for g in rest)])
        return {"event": event, "count": int(size.size), "bytes": int(size.sum()), "allocated": total,
                "offset": offset, "rows": rows, "sites": sites, "more_sites": max(len(groups) - 15, 0)}
