"""``load_snapshot`` and ``MemorySnapshot``: a memory snapshot as columns, and every analysis of it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from nbdebug._files import write_file
from nbdebug.core._result import Result, display_registry
from nbdebug.core.memory._device import DeviceState, device_state
from nbdebug.core.memory._model import ACTIONS, ALLOC, Model, build_model
from nbdebug.core.memory._results import (
    AliveBlock,
    AnnotationRow,
    Annotations,
    Fragmentation,
    MemoryPeak,
    MemoryTimeline,
    NeverFreed,
    OomRow,
    SegmentRow,
    SiteBytes,
    SnapshotDiff,
    SnapshotSummary,
    TopSites,
    diff_rows,
)
from nbdebug.core.memory._sites import Frame, format_frame
from nbdebug.core.memory._unpickle import no_gc, read_pickle
from nbdebug.errors import SnapshotError

__all__ = ["load_snapshot", "MemorySnapshot", "group_by_site"]

_NO_STACK = "<no stack recorded>"
BEFORE_TRACE = "<allocated before the trace began>"  # freed during the trace; only the free's stack is known
_BEFORE = -2  # stack id standing for BEFORE_TRACE


def load_snapshot(source: Any, *, name: str | None = None) -> MemorySnapshot:
    """Load a CUDA memory snapshot safely.

    Parameters
    ----------
    source : str, os.PathLike, bytes, dict or list
        A file written by ``torch.cuda.memory._dump_snapshot`` (any torch version, any pickle protocol), its bytes,
        the dict returned by ``torch.cuda.memory._snapshot()``, or the list returned by
        ``torch.cuda.memory_snapshot()``.
    name : str, optional
        Label used in reports (defaults to the file name).

    Returns
    -------
    MemorySnapshot

    Raises
    ------
    SnapshotError
        Not a pickle, truncated, not a snapshot, or unsafe (the pickle asks for code; nothing is run).
    """
    if isinstance(source, MemorySnapshot):
        return source
    if not isinstance(source, (dict, list, str, os.PathLike, bytes, bytearray, memoryview)):
        raise SnapshotError(f"load_snapshot got a {type(source).__name__}; expected a path, bytes, or the dict of "
                            "torch.cuda.memory._snapshot()")
    # one pause of the garbage collector over reading, building and freeing the raw data: resuming it between
    # them would make its next collection walk every object just unpickled
    with no_gc():
        if isinstance(source, (dict, list)):
            label = name or "the given snapshot object"
            raw = source
        else:
            label = name or (repr(os.fspath(source)) if isinstance(source, (str, os.PathLike)) else "the given bytes")
            raw = read_pickle(source, label=label)
        model = build_model(raw, label)
        del raw
    if name is None and isinstance(source, (str, os.PathLike)):
        label = os.path.basename(os.fspath(source))
    return MemorySnapshot(model, source=name or label)


def group_by_site(stack_site: np.ndarray, sites: list[Frame | None], stacks: np.ndarray, sizes: np.ndarray,
                  limit: int | None = None, *, cells: Mapping[str, str] | None = None) -> tuple[SiteBytes, ...]:
    """Bytes and blocks by allocation site, largest first: ``stacks`` are stack ids (-1: no stack, ``_BEFORE``:
    alive before the trace), ``stack_site`` and ``sites`` map them to sites (see ``site_columns``)."""
    if not stacks.size:
        return ()
    site = np.where(stacks >= 0, stack_site[np.maximum(stacks, 0)] if stack_site.size else -1,
                    np.maximum(stacks, _BEFORE))
    # site ids are small integers from _BEFORE up: counted by bincount (np.unique sorts, several times slower)
    shifted = site.astype(np.int64) - _BEFORE
    count = np.bincount(shifted)
    present = np.flatnonzero(count)
    keys = present + _BEFORE
    total = np.bincount(shifted, weights=sizes.astype(np.float64))[present]
    count = count[present]
    order = np.lexsort((keys, -total))
    rows = []
    for k in order[:limit] if limit else order:
        sid = int(keys[k])
        frame = sites[sid] if sid >= 0 else None
        rows.append(SiteBytes(site=format_frame(frame, cells=cells) if sid != _BEFORE else BEFORE_TRACE,
                              bytes=int(round(total[k])), count=int(count[k]), filename=frame[0] if frame else "",
                              line=frame[1] if frame else 0, function=frame[2] if frame else ""))
    return tuple(rows)


class MemorySnapshot(Result):
    """A memory snapshot: columns of trace events, interned stacks, and the final segment state.

    Analyses return result objects with ``to_pandas()``: :meth:`summary`, :meth:`timeline`, :meth:`peak`,
    :meth:`top_sites`, :meth:`fragmentation`, :meth:`never_freed`, :meth:`alive_at`, :meth:`annotations`,
    :meth:`diff`.  ``to_html(path)`` writes a self-contained offline viewer; ``plot()`` draws the timeline.
    """

    def __init__(self, model: Model | Callable[[], Model], *, source: str = "") -> None:
        # a model, or what builds it on first use (a %%memtrace report needs only its own few numbers)
        self._model: Model | None = None if callable(model) else model
        self._make_model = model if callable(model) else None
        self.source = source
        self._states: dict[int, DeviceState] = {}
        self._default: int | None = None
        # notebook cells' file names -> the names the user knows (``In [12]``), for site labels
        self.cells: dict[str, str] = {}

    @property
    def model(self) -> Model:
        """The columnar model (columns per event, interned frames and stacks, segments)."""
        if self._model is None:
            assert self._make_model is not None
            self._model, self._make_model = self._make_model(), None
        return self._model

    # --- basics -----------------------------------------------------------------------------------------------
    @property
    def devices(self) -> tuple[int, ...]:
        """Devices with trace entries or segments."""
        m = self.model
        have = {d for d, (lo, hi) in m.device_range.items() if hi > lo} | {s.device for s in m.segments}
        return tuple(sorted(have))

    @property
    def default_device(self) -> int:
        """The device of the last OOM, else the device with the longest trace (then the most reserved memory)."""
        m = self.model
        if self._default is not None:
            return self._default
        if not self.devices:
            return 0
        if m.ooms:
            return m.ooms[-1].device
        return max(self.devices, key=lambda d: (m.device_range.get(d, (0, 0))[1] - m.device_range.get(d, (0, 0))[0],
                                                sum(s.total_size for s in m.segments if s.device == d), -d))

    @property
    def events(self) -> int:
        """Number of trace entries (all devices)."""
        return int(self.model.action.size)

    def _device(self, device: int | None) -> int:
        if device is None:
            return self.default_device
        if device not in self.devices and device not in self.model.device_range:
            raise SnapshotError(f"{self.source} has no device {device}; its devices are {list(self.devices)}")
        return int(device)

    def state(self, device: int | None = None) -> DeviceState:
        """Derived columns of one device (cached)."""
        d = self._device(device)
        st = self._states.get(d)
        if st is None:
            st = self._states[d] = device_state(self.model, d)
        return st

    def site_label(self, stack: int) -> str:
        """``file.py:LINE function`` of the first user frame of a stack id."""
        if stack < 0:
            return BEFORE_TRACE if stack == _BEFORE else _NO_STACK
        return format_frame(self.model.sites[int(self.model.stack_site[stack])], cells=self.cells)

    def stack_text(self, stack: int, limit: int = 40) -> tuple[str, ...]:
        """The frames of a stack id, innermost first (C++ frames without a file are dropped)."""
        if stack < 0:
            return ()
        frames = [self.model.frames[f] for f in self.model.stacks[stack]]
        shown = [format_frame(f, short=False, cells=self.cells) for f in frames if f[0] not in ("??", "") or f[1]]
        return tuple(shown[:limit])

    def _category(self, global_index: int) -> str:
        c = int(self.model.category[global_index]) if self.model.category.size else -1
        return self.model.categories[c] if c >= 0 else ""

    # --- grouping helpers -----------------------------------------------------------------------------------
    def _group(self, stacks: np.ndarray, sizes: np.ndarray, limit: int | None = None) -> tuple[SiteBytes, ...]:
        return group_by_site(self.model.stack_site, self.model.sites, stacks, sizes, limit, cells=self.cells)

    def _alive(self, st: DeviceState, p: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Live memory after local event ``p`` (-1: before the first event): (kind, index, size, stack).

        kind 0: allocated in the trace (index = local event); 1: freed later but allocated before the trace
        (index = local event of the free); 2: block alive through the whole trace (index = block index).
        """
        m, lo = self.model, st.lo
        act = m.action[lo:lo + st.n]
        upto = slice(0, p + 1)
        a = np.flatnonzero((act[upto] == ALLOC) & ((st.free_of[upto] < 0) | (st.free_of[upto] > p)))
        f = st.before_frees[st.before_frees > p]
        b = st.before_blocks
        kind = np.concatenate([np.zeros(a.size, np.int8), np.ones(f.size, np.int8), np.full(b.size, 2, np.int8)])
        index = np.concatenate([a, f, b]).astype(np.int64)
        size = np.concatenate([m.size[lo + a], m.size[lo + f], m.block_size[b]]).astype(np.int64)
        stack = np.concatenate([m.stack[lo + a], np.full(f.size, _BEFORE), m.block_stack[b]]).astype(np.int64)
        return kind, index, size, stack

    def _locate(self, st: DeviceState, at: float | None, index: int | None) -> int:
        if index is not None:
            return int(min(max(index, -1), st.n - 1))
        if at is None:
            return st.n - 1
        return int(np.searchsorted(st.x, at, side="right")) - 1

    # --- analyses ---------------------------------------------------------------------------------------------
    def timeline(self, device: int | None = None) -> MemoryTimeline:
        """Allocated and reserved bytes over time (event index when the trace has no ``time_us``)."""
        st = self.state(device)
        x0 = st.x[0] if st.n else 0.0
        return MemoryTimeline(
            device=st.device, x_unit="us" if st.x_is_time else "event",
            x=np.concatenate([[x0 if st.x_is_time else -1.0], st.x]),
            allocated=np.concatenate([[st.initial_allocated], st.allocated]).astype(np.int64),
            reserved=np.concatenate([[st.initial_reserved], st.reserved]).astype(np.int64),
        )

    def alive_at(self, at: float | None = None, *, index: int | None = None, device: int | None = None,
                 limit: int = 50) -> MemoryPeak:
        """What was alive at time ``at`` (µs, or event index without times) or after event ``index``."""
        st = self.state(device)
        p = self._locate(st, at, index)
        kind, idx, size, stack = self._alive(st, p)
        total = int(st.allocated[p]) if p >= 0 else st.initial_allocated
        by_cat: dict[str, int] = {}
        if self.model.categories:
            for k, i, s in zip(kind.tolist(), idx.tolist(), size.tolist()):
                name = self._category(st.lo + i) if k < 2 else "unknown"
                by_cat[name or "unknown"] = by_cat.get(name or "unknown", 0) + s
        top = np.argsort(-size, kind="stable")[:limit]
        m = self.model
        blocks = []
        for j in top.tolist():
            k, i = int(kind[j]), int(idx[j])
            address = int(m.address[st.lo + i]) if k < 2 else int(m.block_address[i])
            blocks.append(AliveBlock(address=address, bytes=int(size[j]), site=self.site_label(int(stack[j])),
                                     category=self._category(st.lo + i) if k == 0 else "",
                                     since="trace" if k == 0 else "before trace",
                                     stack=self.stack_text(int(stack[j]))))
        return MemoryPeak(device=st.device, bytes=total, event_index=p,
                          time_us=float(st.x[max(p, 0)]) if st.x_is_time and st.n else None,
                          by_site=self._group(stack, size), by_category=tuple(sorted(by_cat.items(),
                                                                                       key=lambda kv: -kv[1])),
                          blocks=tuple(blocks))

    def peak(self, device: int | None = None) -> MemoryPeak:
        """The moment of highest allocated memory, and what was alive then (by site, by category, largest blocks)."""
        st = self.state(device)
        p = int(np.argmax(st.allocated)) if st.n else -1
        if p >= 0 and st.allocated[p] <= st.initial_allocated:
            p = -1
        return self.alive_at(index=p, device=st.device)

    def top_sites(self, n: int = 10, device: int | None = None) -> TopSites:
        """Allocation sites by bytes allocated during the trace, plus blocks alive before it began."""
        st = self.state(device)
        m, lo = self.model, st.lo
        allocs = np.flatnonzero(m.action[lo:lo + st.n] == ALLOC)
        stacks = np.concatenate([m.stack[lo + allocs], np.full(st.before_frees.size, _BEFORE),
                                 m.block_stack[st.before_blocks]])
        sizes = np.concatenate([m.size[lo + allocs], m.size[lo + st.before_frees], m.block_size[st.before_blocks]])
        return TopSites(device=st.device, sites=self._group(stacks.astype(np.int64), sizes, n))

    def fragmentation(self, device: int | None = None) -> Fragmentation:
        """Reserved minus allocated, the largest free block per segment, and each OOM's request against it."""
        d = self._device(device)
        m = self.model
        rows = []
        # bytes each segment's listed blocks cover: less than its size when the snapshot lists only some blocks
        listed = np.bincount(m.block_segment, weights=m.block_size, minlength=len(m.segments))
        for i, s in sorted(((i, s) for i, s in enumerate(m.segments) if s.device == d), key=lambda t: -t[1].total_size):
            rows.append(SegmentRow(address=s.address, total_bytes=s.total_size, allocated_bytes=s.allocated_bytes,
                                   free_bytes=s.total_size - s.allocated_bytes,
                                   largest_free_block=s.largest_free_block, blocks=s.blocks,
                                   segment_type=s.segment_type, expandable=s.is_expandable,
                                   pool="default" if s.pool_id == (0, 0) else f"private {s.pool_id}",
                                   unlisted_bytes=max(0, s.total_size - int(listed[i]))))
        reserved = sum(r.total_bytes for r in rows)
        allocated = sum(r.allocated_bytes for r in rows)
        largest = max((r.largest_free_block for r in rows), default=0)
        from nbdebug.core.memory._replay import free_space_at

        oom_rows = []
        for o in m.ooms:
            if o.device != d:
                continue
            local = o.event_index - m.device_range[o.device][0]
            space = free_space_at(self, d, local - 1)  # the allocator's state when the request failed
            oom_rows.append(OomRow(event_index=local, requested_bytes=o.requested_bytes,
                                   device_free_bytes=o.device_free_bytes, largest_free_block=space.largest_free_block,
                                   cached_free_bytes=space.free_bytes, time_us=o.time_us,
                                   site=self.site_label(o.stack)))
        ooms = tuple(oom_rows)
        return Fragmentation(device=d, reserved_bytes=reserved, allocated_bytes=allocated,
                             free_bytes=reserved - allocated, largest_free_block=largest, segments=tuple(rows),
                             ooms=ooms, unlisted_bytes=sum(r.unlisted_bytes for r in rows))

    def never_freed(self, start: float | None = None, end: float | None = None, *,
                    device: int | None = None) -> NeverFreed:
        """Allocations made between ``start`` and ``end`` (µs, or event index) that were never freed in the trace."""
        st = self.state(device)
        m, lo = self.model, st.lo
        x = st.x
        lo_x = x[0] if start is None and st.n else (start if start is not None else 0.0)
        hi_x = x[-1] if end is None and st.n else (end if end is not None else 0.0)
        sel = np.flatnonzero((m.action[lo:lo + st.n] == ALLOC) & (st.free_of < 0) & (x >= lo_x) & (x <= hi_x))
        sizes = m.size[lo + sel]
        return NeverFreed(device=st.device, start=float(lo_x), end=float(hi_x),
                          x_unit="us" if st.x_is_time else "event", bytes=int(sizes.sum()), count=int(sel.size),
                          by_site=self._group(m.stack[lo + sel].astype(np.int64), sizes))

    def annotations(self) -> Annotations:
        """``external_annotations`` markers, each with the first event at or after it."""
        rows = []
        for a in self.model.annotations:
            idx = -1
            if a.time_us is not None and a.device in self.model.device_range:
                st = self.state(a.device) if a.device in self.devices else None
                if st is not None and st.x_is_time and st.n:
                    idx = int(np.searchsorted(st.x, a.time_us, side="left"))
            rows.append(AnnotationRow(a.name, a.stage, a.device, a.time_us, idx))
        return Annotations(rows=tuple(rows))

    def final_blocks_by_site(self, device: int | None = None) -> tuple[SiteBytes, ...]:
        """Active blocks of the final segment state, grouped by site."""
        d = self._device(device)
        m = self.model
        seg_dev = np.array([s.device for s in m.segments], dtype=np.int64)
        if not m.block_size.size:
            return ()
        sel = np.flatnonzero((seg_dev[m.block_segment] == d) & (m.block_state > 0))
        return self._group(m.block_stack[sel].astype(np.int64), m.block_size[sel])

    def diff(self, other: MemorySnapshot | Any, device: int | None = None) -> SnapshotDiff:
        """Compare the memory alive at the end of this snapshot (before) and ``other`` (after), by site."""
        other = load_snapshot(other)
        a, b = self.final_blocks_by_site(device), other.final_blocks_by_site(device)
        return SnapshotDiff(before=self.source, after=other.source, before_bytes=sum(r.bytes for r in a),
                            after_bytes=sum(r.bytes for r in b), rows=diff_rows(a, b), _before=self, _after=other,
                            _device=device)

    def summary(self, device: int | None = None, *, top: int = 10) -> SnapshotSummary:
        """The headline numbers (the JSON contract of ``python -m nbdebug snapshot --json``)."""
        st = self.state(device)
        m = self.model
        if st.n:
            p = int(np.argmax(st.allocated))
            peak = int(st.allocated[p])
            if peak <= st.initial_allocated:
                peak, p = st.initial_allocated, -1
            final = int(st.allocated[-1])
            peak_reserved = max(st.initial_reserved, int(st.reserved.max()))
        else:
            peak, p, final = st.initial_allocated, -1, st.initial_allocated
            peak_reserved = st.initial_reserved
        ooms = tuple({"device": o.device, "requested_bytes": o.requested_bytes, "device_free_bytes": o.device_free_bytes,
                      "time_us": o.time_us, "event_index": o.event_index - m.device_range[o.device][0]}
                     for o in m.ooms)
        return SnapshotSummary(
            source=self.source, devices=self.devices, device=st.device, events=self.events,
            peak_allocated_bytes=peak,
            peak_time_us=float(st.x[max(p, 0)]) if st.x_is_time and st.n else None, peak_event_index=p,
            final_allocated_bytes=final, peak_reserved_bytes=peak_reserved, segments=len(m.segments),
            top_sites=self.top_sites(top, st.device).sites, ooms=ooms, x_unit="us" if st.x_is_time else "event",
            notes=m.format_notes,
        )

    # --- data and display -------------------------------------------------------------------------------------
    def _summary_line(self) -> str:
        # one cheap line: only counts already in the model (the summary replays the whole trace)
        return (f"{self.source}, {self.events} events, {len(self.model.segments)} segments, "
                f"devices {list(self.devices)}")

    def to_dict(self) -> dict[str, Any]:
        """The summary of the default device as a JSON-ready dict."""
        return self.summary().to_dict()

    def to_pandas(self) -> Any:
        """One row per trace event: time_us, action, address, size, stream, device, site, category."""
        import pandas as pd

        m = self.model
        sites = [self.site_label(int(s)) for s in range(len(m.stacks))] + [_NO_STACK]
        site_col = pd.Categorical.from_codes(np.where(m.stack >= 0, m.stack, len(m.stacks)), categories=sites,
                                             validate=False) if len(set(sites)) == len(sites) else [
            sites[s] for s in m.stack.tolist()]
        cats = list(m.categories) + [""]
        return pd.DataFrame({
            "time_us": m.time_us,
            "action": pd.Categorical.from_codes(m.action.astype(np.int64), categories=list(ACTIONS)),
            "address": m.address, "size": m.size, "stream": m.stream, "device": m.device, "site": site_col,
            "category": [cats[c] for c in m.category.tolist()] if m.categories else "",
        })

    def to_html(self, path: str | os.PathLike[str] | None = None, *, device: int | None = None) -> str:
        """Write (and return) the self-contained offline viewer: one HTML file, no network, no CDN."""
        # display lives in nbdebug.render, reached through the registry (core never imports render)
        doc = display_registry().memory.viewer.viewer_document(self, device=device)
        if path is not None:  # a temporary name renamed into place: a symlink at ``path`` is replaced, not followed
            write_file(path, doc)
        return doc

    def view(self, device: int | None = None) -> Any:
        """The live viewer in a notebook (needs anywidget: ``pip install nbdebug[widgets]``).

        The kernel answers each zoom exactly, down to single events, and each moment with every block alive,
        through the notebook's widget channel.  Without a kernel, ``to_html`` or the plain display.
        """
        return display_registry().memory.widget.live_viewer(self, device)

    def plot(self, ax: Any = None, *, device: int | None = None, top: int = 8) -> Any:
        """Stacked allocated-memory timeline by top sites (a matplotlib ``Figure``)."""
        return self._figure(ax=ax, device=device, top=top)

    def site_series(self, sites: Iterable[int], device: int | None = None) -> dict[int, np.ndarray]:
        """Allocated bytes after each event, per site id (-1: alive before the trace), for stacked plots."""
        st = self.state(device)
        m, lo = self.model, st.lo
        stacks = m.stack[lo:lo + st.n]
        ev_site = np.where(stacks >= 0, m.stack_site[np.maximum(stacks, 0)] if m.stack_site.size else -1, -1)
        # a free takes its bytes off the site of its alloc
        free_site = np.where(st.alloc_of >= 0, ev_site[np.maximum(st.alloc_of, 0)], -2)
        owner = np.where(m.action[lo:lo + st.n] == ALLOC, ev_site, free_site)
        out = {}
        for s in sites:
            out[s] = np.cumsum(np.where(owner == s, st.delta, 0))
        return out
