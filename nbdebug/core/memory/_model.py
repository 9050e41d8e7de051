"""The columnar model of a snapshot: numpy arrays per event, interned frames and stacks, parsed segments.

Every format in the wild is accepted: torch 2.0 (blocks with ``history`` and no ``address``), 2.1+ (``address``,
``frames``, expandable segments with ``segment_map``/``segment_unmap``), ``time_us`` (2.2+), ``allocator_settings``,
``external_annotations``, ``compile_context``, ``user_metadata``, ``oom`` entries (``device_free`` instead of
``addr``), several devices, entries without frames, profile snapshots (``category``), and the bare list of segments
returned by ``torch.cuda.memory_snapshot()``.  Unknown keys and actions are ignored.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter
from typing import Any

import numpy as np

from nbdebug.core.memory._sites import Frame, pick_site
from nbdebug.errors import SnapshotError

__all__ = ["ACTIONS", "Model", "Segment", "OomEvent", "Annotation", "build_model"]

ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map",
           "segment_unmap", "oom", "snapshot", "other")
ALLOC, FREE_REQUESTED, FREE_COMPLETED, SEGMENT_ALLOC, SEGMENT_FREE, SEGMENT_MAP, SEGMENT_UNMAP, OOM, SNAPSHOT, OTHER = (
    range(10))


class _Codes(dict):  # type: ignore[type-arg]
    def __missing__(self, key: Any) -> int:
        return OTHER


_CODE: dict[Any, int] = _Codes({name: i for i, name in enumerate(ACTIONS)})
_CODE["free"] = FREE_COMPLETED  # pre-2.0 traces
BLOCK_STATES = ("inactive", "active_allocated", "active_pending_free")
_BLOCK_CODE = {s: i for i, s in enumerate(BLOCK_STATES)}
_BLOCK_CODE["active_awaiting_free"] = 2  # the name in the _snapshot docstring
# events whose stack is kept (a free's stack is not needed: its bytes belong to its alloc's site)
_STACKED = (ALLOC, SEGMENT_ALLOC, SEGMENT_MAP, OOM)
_FRAME_KEYS = itemgetter("filename", "line", "name")


@dataclass(frozen=True)
class Segment:
    """One reserved range (a cudaMalloc, or an expandable segment's address range)."""

    device: int
    address: int
    total_size: int
    stream: int
    segment_type: str
    pool_id: tuple[int, int]
    is_expandable: bool
    stack: int
    allocated_bytes: int  # sum of active_allocated + active_pending_free blocks
    largest_free_block: int
    blocks: int


@dataclass(frozen=True)
class OomEvent:
    """An ``oom`` trace entry: the failing request and what CUDA said was free."""

    device: int
    event_index: int
    requested_bytes: int
    device_free_bytes: int | None
    time_us: float | None
    stack: int


@dataclass(frozen=True)
class Annotation:
    """A marker from ``external_annotations`` (``record_function`` regions)."""

    name: str
    stage: str
    device: int
    time_us: float | None


@dataclass
class Model:
    """Columns over all events of all devices (device blocks are contiguous; see ``device_range``)."""

    time_us: np.ndarray  # float64, NaN where absent
    action: np.ndarray  # int8 codes into ACTIONS
    address: np.ndarray  # int64
    size: np.ndarray  # int64
    stream: np.ndarray  # int64
    device: np.ndarray  # int16
    stack: np.ndarray  # int32 id into stacks, -1 when not recorded
    category: np.ndarray  # int8 id into categories, -1 when unknown
    categories: tuple[str, ...]
    device_range: dict[int, tuple[int, int]]
    frames: list[Frame]
    stacks: list[tuple[int, ...]]  # frame ids, innermost first
    stack_site: np.ndarray  # int32 site id per stack
    sites: list[Frame | None]
    # blocks of the final segment state
    block_segment: np.ndarray
    block_address: np.ndarray
    block_size: np.ndarray
    block_requested: np.ndarray
    block_state: np.ndarray  # int8 codes into BLOCK_STATES
    block_stack: np.ndarray
    segments: list[Segment]
    ooms: list[OomEvent]
    annotations: list[Annotation]
    allocator_settings: dict[str, Any] = field(default_factory=dict)
    format_notes: tuple[str, ...] = ()


class _Interner:
    def __init__(self) -> None:
        self.frame_ids: dict[Frame, int] = {}
        self.frames: list[Frame] = []
        self.stack_ids: dict[Any, int] = {}
        self.stacks: list[tuple[int, ...]] = []

    def stack_ids_of(self, frames_lists: Any) -> np.ndarray:
        """Stack ids of many entries, without a Python-level loop over the entries.

        Dumps share frame dicts between entries (the pickle memo), so entries are grouped by (length, identity of
        the first frame, sum of the frames' identities) with numpy, each group is checked with an exact ``==`` against its first member
        (identical elements compare at C speed), and only one stack per group is interned by value.  Identities are
        valid only while the unpickled data is alive, i.e. during the build.
        """
        lists = list(frames_lists)
        n = len(lists)
        out = np.full(n, -1, dtype=np.int32)
        try:
            lens = np.fromiter(map(len, lists), dtype=np.int64, count=n)
        except TypeError:  # None or a non-sequence somewhere: the careful path
            for i, frames in enumerate(lists):
                out[i] = self.stack(frames)
            return out
        full = np.flatnonzero(lens > 0)
        if not full.size:
            return out
        sub = [lists[i] for i in full.tolist()] if full.size != n else lists
        try:
            first = np.fromiter(map(id, map(itemgetter(0), sub)), dtype=np.int64, count=len(sub))
            # the sum of the frames' identities separates different stacks (all at C speed: no lambda)
            last = np.fromiter(map(sum, map(map, repeat(id), sub)), dtype=np.int64, count=len(sub))
        except (KeyError, TypeError):  # dicts or other odd containers instead of lists
            for i, frames in zip(full.tolist(), sub):
                out[i] = self.stack(frames)
            return out
        k0 = lens[full]
        order = np.lexsort((last, first, k0))
        k0, k1, k2 = k0[order], first[order], last[order]
        new_group = np.ones(order.size, dtype=bool)
        new_group[1:] = (k0[1:] != k0[:-1]) | (k1[1:] != k1[:-1]) | (k2[1:] != k2[:-1])
        rep_index = order[new_group]
        inverse = np.empty(order.size, dtype=np.int64)
        inverse[order] = np.cumsum(new_group) - 1
        reps = [sub[i] for i in rep_index.tolist()]
        same = np.fromiter(map(operator.eq, sub, map(reps.__getitem__, inverse.tolist())), dtype=bool,
                           count=len(sub))
        rep_sid = np.array([self.stack(r) for r in reps], dtype=np.int32)
        ids = rep_sid[inverse]
        for j in np.flatnonzero(~same).tolist():  # same shape, different frames: rare
            ids[j] = self.stack(sub[j])
        out[full] = ids
        return out

    def _frame(self, f: Any) -> Frame:
        if isinstance(f, dict):
            line = f.get("line", 0)
            return (str(f.get("filename", "")), int(line) if isinstance(line, (int, float)) else 0, str(f.get("name", "")))
        return ("", 0, str(f))

    def stack(self, frames: Any) -> int:
        if not frames:
            return -1
        if not isinstance(frames, list):
            raise TypeError(f"frames should be a list, found {type(frames).__name__}")
        try:
            key: Any = tuple(map(_FRAME_KEYS, frames))
            sid = self.stack_ids.get(key)
        except (KeyError, TypeError):  # odd frames: normalize them one by one
            key = tuple(self._frame(f) for f in frames)
            sid = self.stack_ids.get(key)
        if sid is not None:
            return sid
        ids = []
        for raw in key:
            frame = raw if (isinstance(raw, tuple) and isinstance(raw[0], str) and isinstance(raw[1], int)
                            and isinstance(raw[2], str)) else self._frame(dict(zip(("filename", "line", "name"), raw)))
            fid = self.frame_ids.get(frame)
            if fid is None:
                fid = self.frame_ids[frame] = len(self.frames)
                self.frames.append(frame)
            ids.append(fid)
        sid = self.stack_ids[key] = len(self.stacks)
        self.stacks.append(tuple(ids))
        return sid


def _column(trace: list[Any], key: str, default: Any, dtype: Any) -> np.ndarray:
    """``np.array([e.get(key, default) for e in trace])``, at C speed when every entry has the key."""
    try:
        try:
            return np.fromiter(map(itemgetter(key), trace), dtype=dtype, count=len(trace))
        except (KeyError, TypeError):  # a missing key, or None (e.g. time_us absent on some entries)
            return np.array([e.get(key, default) for e in trace], dtype=dtype)
    except (TypeError, ValueError, OverflowError) as err:
        raise SnapshotError(f"trace {key!r}: expected numbers ({err})") from err


def _int_array(values: list[Any], what: str) -> np.ndarray:
    try:
        return np.array(values, dtype=np.int64) if values else np.zeros(0, np.int64)
    except (TypeError, ValueError, OverflowError) as e:
        raise SnapshotError(f"{what}: expected integers ({e})") from e


def _blocks_of(seg: dict[str, Any], seg_index: int, interner: _Interner, out: dict[str, list[Any]]) -> tuple[int, int]:
    address = int(seg.get("address") or 0)
    cursor = address
    allocated = largest_free = 0
    blocks = seg.get("blocks") or []
    if not isinstance(blocks, list):
        raise TypeError("segment 'blocks' should be a list")
    for b in blocks:
        size = int(b["size"])
        state = _BLOCK_CODE.get(b.get("state"), 0)
        baddr = b.get("address")
        baddr = cursor if baddr is None else int(baddr)
        cursor = baddr + size
        frames = b.get("frames")
        requested = b.get("requested_size")
        history = b.get("history")
        if not frames and history:  # torch 2.0: newest allocation first
            first = history[0]
            frames = first.get("frames")
            if requested is None:
                requested = first.get("real_size")
        out["segment"].append(seg_index)
        out["address"].append(baddr)
        out["size"].append(size)
        out["requested"].append(int(size if requested is None else requested))
        out["state"].append(state)
        out["stack"].append(interner.stack(frames) if state else -1)
        if state:
            allocated += size
        else:
            largest_free = max(largest_free, size)
    return allocated, largest_free


def build_model(raw: Any, source: str) -> Model:
    """Turn an unpickled snapshot (dict or bare list of segments) into the columnar model."""
    notes: list[str] = []
    if isinstance(raw, list):
        raw = {"segments": raw, "device_traces": []}
        notes.append("bare list of segments (torch.cuda.memory_snapshot()): no trace, final state only")
    if not isinstance(raw, dict) or not ("segments" in raw or "device_traces" in raw):
        found = f"a dict with keys {sorted(map(str, raw))[:8]}" if isinstance(raw, dict) else f"a {type(raw).__name__}"
        raise SnapshotError(f"{source} holds {found}, not a memory snapshot; expected a dict with 'segments' and "
                            "'device_traces' (torch.cuda.memory._snapshot()) or a list of segments")
    try:
        return _build(raw, source, notes)
    except SnapshotError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, OverflowError, IndexError) as e:
        raise SnapshotError(f"{source} is not a well-formed memory snapshot ({type(e).__name__}: {e}); expected "
                            "the structure written by torch.cuda.memory._dump_snapshot") from e


def _build(raw: dict[str, Any], source: str, notes: list[str]) -> Model:
    interner = _Interner()
    traces = raw.get("device_traces") or []
    segments_raw = raw.get("segments") or []
    if not isinstance(traces, list) or not isinstance(segments_raw, list):
        raise TypeError("'device_traces' and 'segments' should be lists")
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("t", "a", "addr", "size", "stream", "dev", "stack", "cat")}
    categories: dict[str, int] = {}
    device_range: dict[int, tuple[int, int]] = {}
    ooms: list[OomEvent] = []
    offset = 0
    for device, trace in enumerate(traces):
        if not isinstance(trace, list):
            raise TypeError(f"device_traces[{device}] should be a list of entries")
        n = len(trace)
        device_range[device] = (offset, offset + n)
        if not n:
            continue
        act = np.fromiter(map(_CODE.__getitem__, map(itemgetter("action"), trace)), dtype=np.int8, count=n)
        cols["a"].append(act)
        cols["addr"].append(_column(trace, "addr", 0, np.int64))
        cols["size"].append(_column(trace, "size", 0, np.int64))
        cols["stream"].append(_column(trace, "stream", 0, np.int64))
        cols["t"].append(_column(trace, "time_us", None, np.float64))
        cols["dev"].append(np.full(n, device, dtype=np.int16))
        stack = np.full(n, -1, dtype=np.int32)
        keep = np.flatnonzero(np.isin(act, _STACKED))
        entries = list(map(trace.__getitem__, keep.tolist()))
        try:
            frames_lists: Any = map(itemgetter("frames"), entries)
            stack[keep] = interner.stack_ids_of(frames_lists)
        except KeyError:  # entries recorded without context have no 'frames'
            stack[keep] = interner.stack_ids_of([e.get("frames") for e in entries])
        cols["stack"].append(stack)
        cat = np.full(n, -1, dtype=np.int8)
        if any("category" in e for e in trace[:64]):
            for i, e in enumerate(trace):
                c = e.get("category")
                if c is not None:
                    cat[i] = categories.setdefault(str(c), len(categories))
        cols["cat"].append(cat)
        for i in np.flatnonzero(act == OOM).tolist():
            e = trace[i]
            free = e.get("device_free")
            t = e.get("time_us")
            ooms.append(OomEvent(device, offset + i, int(e.get("size", 0)), None if free is None else int(free),
                                 None if t is None else float(t), int(stack[i])))
        offset += n

    def cat_cols(key: str, dtype: Any) -> np.ndarray:
        return np.concatenate(cols[key]).astype(dtype, copy=False) if cols[key] else np.zeros(0, dtype)

    out: dict[str, list[Any]] = {k: [] for k in ("segment", "address", "size", "requested", "state", "stack")}
    segments: list[Segment] = []
    for i, seg in enumerate(segments_raw):
        allocated, largest_free = _blocks_of(seg, i, interner, out)
        pool = seg.get("segment_pool_id") or (0, 0)
        segments.append(Segment(
            device=int(seg.get("device", 0) or 0), address=int(seg.get("address") or 0),
            total_size=int(seg.get("total_size", 0)), stream=int(seg.get("stream", 0) or 0),
            segment_type=str(seg.get("segment_type", "")), pool_id=(int(pool[0]), int(pool[1])),
            is_expandable=bool(seg.get("is_expandable", False)), stack=interner.stack(seg.get("frames")),
            allocated_bytes=allocated, largest_free_block=largest_free, blocks=len(seg.get("blocks") or []),
        ))
    for dev in sorted({s.device for s in segments} - set(device_range)):
        device_range[dev] = (offset, offset)

    annotations = []
    for a in raw.get("external_annotations") or []:
        if isinstance(a, dict):
            t = a.get("time_us")
            annotations.append(Annotation(str(a.get("name", "")), str(a.get("stage", "")), int(a.get("device", 0) or 0),
                                          float(t) if isinstance(t, (int, float)) else None))
    settings = raw.get("allocator_settings")
    sites: list[Frame | None] = []
    site_ids: dict[Frame | None, int] = {}
    stack_site = np.empty(len(interner.stacks), dtype=np.int32)
    for sid, ids in enumerate(interner.stacks):
        site = pick_site([interner.frames[f] for f in ids])
        stack_site[sid] = site_ids.setdefault(site, len(site_ids))
        if stack_site[sid] == len(sites):
            sites.append(site)
    if not any(t.size for t in cols["t"]) or all(np.isnan(t).all() for t in cols["t"]):
        if offset:
            notes.append("no time_us in the trace (before torch 2.2): the x-axis is the event index")
    return Model(
        time_us=cat_cols("t", np.float64), action=cat_cols("a", np.int8), address=cat_cols("addr", np.int64),
        size=cat_cols("size", np.int64), stream=cat_cols("stream", np.int64), device=cat_cols("dev", np.int16),
        stack=cat_cols("stack", np.int32), category=cat_cols("cat", np.int8), categories=tuple(categories),
        device_range=device_range, frames=interner.frames, stacks=interner.stacks, stack_site=stack_site,
        sites=sites,
        block_segment=_int_array(out["segment"], "block"), block_address=_int_array(out["address"], "block address"),
        block_size=_int_array(out["size"], "block size"), block_requested=_int_array(out["requested"], "block size"),
        block_state=np.array(out["state"], dtype=np.int8), block_stack=np.array(out["stack"], dtype=np.int32),
        segments=segments, ooms=ooms, annotations=annotations,
        allocator_settings=dict(settings) if isinstance(settings, dict) else {}, format_notes=tuple(notes),
    )
