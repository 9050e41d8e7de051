"""The columnar model of a snapshot: numpy arrays per event, interned frames and stacks, parsed segments.

Every format in the wild is accepted: torch 2.0 (blocks with ``history`` and no ``address``), 2.1+ (``address``,
``frames``, expandable segments with ``segment_map``/``segment_unmap``), ``time_us`` (2.2+), ``allocator_settings``,
``external_annotations``, ``compile_context``, ``user_metadata``, ``oom`` entries (``device_free`` instead of
``addr``), several devices, entries without frames, profile snapshots (``category``), and the bare list of segments
returned by ``torch.cuda.memory_snapshot()``.  Unknown keys and actions are ignored.

What is read is checked against the format, never turned into a string or hashed whole (a value shared through
the pickle memo can stand for 2**n copies of itself): frames are dicts with a str filename and name and an int
line, integers fit their columns, a time that is not a time is treated as absent, and a list of blocks or a trace
referenced twice is refused instead of being read once per reference.  Every such problem is a ``SnapshotError``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter
from typing import Any

import numpy as np

from nbdebug.core.memory._sites import Frame, frame_kind, pick_site
from nbdebug.errors import SnapshotError

__all__ = ["ACTIONS", "Model", "Segment", "OomEvent", "Annotation", "build_model", "site_columns", "clip_text"]

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


class _Bad(ValueError):
    """A field that is not what the format says; ``build_model`` reports it with the file's name."""


_SMALL = 4096  # up to this many entries, stacks are interned one entry at a time
_MAX_TEXT = 4096  # longest filename or function name kept (C++ template names run to a few KB)
_MAX_TIME_US = 2.5e17  # about the year 9900: any later (or inf/NaN) is not a time


def clip_text(value: str) -> str:
    """A file or function name as the model keeps it: at most ``_MAX_TEXT`` characters, then "..."."""
    return value if len(value) <= _MAX_TEXT else value[:_MAX_TEXT] + "..."


def _text(value: Any, what: str) -> str:
    if type(value) is not str:
        if value is None:
            return ""
        raise _Bad(f"a frame's {what} is a {type(value).__name__}; expected a string (frames are dicts with "
                   "'filename', 'line' and 'name')")
    return clip_text(value)


def _frame_of(f: Any) -> Frame:
    """One frame, validated as the format says: a dict with a str filename, an int line and a str name."""
    if type(f) is not dict:
        raise _Bad(f"a frame is a {type(f).__name__}; expected a dict with 'filename', 'line' and 'name'")
    line = f.get("line", 0)
    if type(line) is not int:
        if type(line) is float and line == line and abs(line) < 2**31:
            line = int(line)
        elif line is None:
            line = 0
        else:
            raise _Bad(f"a frame's line is a {type(line).__name__}; expected an integer")
    if not -(2**31) <= line < 2**31:
        raise _Bad(f"a frame's line is {line if line.bit_length() < 64 else 'a huge number'}; expected a "
                   "line number")
    return (_text(f.get("filename", ""), "filename"), line, _text(f.get("name", ""), "name"))


class _Interner:
    def __init__(self) -> None:
        self.frame_ids: dict[Frame, int] = {}
        self.frames: list[Frame] = []
        self.stack_ids: dict[tuple[int, ...], int] = {}
        self.stacks: list[tuple[int, ...]] = []
        # id of a frames list -> its stack id; valid while the unpickled data is alive (during the build), so a
        # list the pickle memo shares between entries or segments is read once, not once per reference
        self.by_list: dict[int, int] = {}
        self.by_dict: dict[int, int] = {}  # id of a frame dict -> frame id (the memo shares frame dicts too)
        self._keep: list[Any] = []  # the lists and dicts above, so that their ids stay theirs

    def stack_ids_of(self, frames_lists: Any) -> np.ndarray:
        """Stack ids of many entries, without a Python-level loop over the entries.

        Dumps share frame lists and frame dicts between entries through the pickle memo.  Entries are grouped by
        the identity of their list, then the distinct lists by the identities of their frames (length, first
        frame, 64-bit hash of all) with numpy, and only one stack per group is read frame by frame.  The work is linear in
        the distinct lists and their frames, i.e. in the file's size, and no frame is ever compared or hashed by
        value (which could walk a structure shared through the memo exponentially).
        """
        lists = list(frames_lists)
        n = len(lists)
        out = np.full(n, -1, dtype=np.int32)
        if not n:
            return out
        if n <= _SMALL:  # a short recording (%%memtrace of one step): the grouping costs more than it saves
            out[:] = [self.stack(frames) for frames in lists]
            return out
        list_id = np.fromiter(map(id, lists), dtype=np.int64, count=n)
        uniq_ids, first_of, back = np.unique(list_id, return_index=True, return_inverse=True)
        if uniq_ids.size == n:  # every entry has its own list (the usual case): keep the entries' order
            uniq, back = lists, np.arange(n)
        else:
            uniq = [lists[i] for i in first_of.tolist()]
        del lists, list_id, uniq_ids, first_of
        if set(map(type, uniq)) != {list}:  # None, or something that is not a list: one by one
            ids = np.array([self.stack(frames) for frames in uniq], dtype=np.int32)
        else:
            ids = self._group_lists(uniq)
        out[:] = ids[back]
        return out

    def _group_lists(self, uniq: list[list[Any]]) -> np.ndarray:
        m = len(uniq)
        ids = np.full(m, -1, dtype=np.int32)
        lens = np.fromiter(map(len, uniq), dtype=np.int64, count=m)
        full = np.flatnonzero(lens > 0)
        if not full.size:
            return ids
        sub = [uniq[i] for i in full.tolist()] if full.size != m else uniq
        k0 = lens[full]
        k1 = np.fromiter(map(id, map(itemgetter(0), sub)), dtype=np.int64, count=len(sub))
        # the hash of the tuple of the frames' identities, in one streaming pass at C speed: lists of live objects
        # with the same length, first frame and 64-bit hash of the sequence hold the same frames unless two
        # sequences of addresses collide in the hash (an exact check would keep every frame's id in memory)
        k2 = np.fromiter(map(hash, map(tuple, map(map, repeat(id), sub))), dtype=np.int64, count=len(sub))
        order = np.lexsort((k2, k1, k0))
        k0, k1, k2 = k0[order], k1[order], k2[order]
        new_group = np.ones(order.size, dtype=bool)
        new_group[1:] = (k0[1:] != k0[:-1]) | (k1[1:] != k1[:-1]) | (k2[1:] != k2[:-1])
        group = np.empty(order.size, dtype=np.int64)
        group[order] = np.cumsum(new_group) - 1
        rep_sid = np.array([self.stack(sub[r]) for r in order[new_group].tolist()], dtype=np.int32)
        ids[full] = rep_sid[group]
        return ids

    def stack(self, frames: Any) -> int:
        if not frames:
            return -1
        if type(frames) is not list:
            raise _Bad(f"an entry's frames are a {type(frames).__name__}; expected a list of frame dicts")
        known = self.by_list.get(id(frames))
        if known is not None:
            return known
        key = tuple(map(self._frame_id, frames))
        sid = self.stack_ids.get(key)
        if sid is None:
            sid = self.stack_ids[key] = len(self.stacks)
            self.stacks.append(key)
        self.by_list[id(frames)] = sid
        self._keep.append(frames)
        return sid

    def _frame_id(self, f: Any) -> int:
        fid = self.by_dict.get(id(f))
        if fid is not None:
            return fid
        frame = _frame_of(f)
        fid = self.frame_ids.get(frame)
        if fid is None:
            fid = self.frame_ids[frame] = len(self.frames)
            self.frames.append(frame)
        self.by_dict[id(f)] = fid
        self._keep.append(f)
        return fid


_NUMBER_TYPES = frozenset((int, float, bool, type(None)))
_SCALARS = _NUMBER_TYPES | {str}


def _column(trace: list[Any], key: str, default: Any, dtype: Any) -> np.ndarray:
    """``np.array([e.get(key, default) for e in trace])``, at C speed when every entry has the key."""
    try:
        try:
            return np.fromiter(map(itemgetter(key), trace), dtype=dtype, count=len(trace))
        except (KeyError, TypeError):  # a missing key, or None (e.g. time_us absent on some entries)
            values = [e.get(key, default) for e in trace]
            odd = set(map(type, values)) - _NUMBER_TYPES
            if odd:  # never handed to numpy: it would walk a nested list whole
                raise _Bad(f"trace {key!r} holds a {sorted(t.__name__ for t in odd)[0]}; expected numbers") from None
            return np.array(values, dtype=dtype)
    except (TypeError, ValueError, OverflowError) as err:
        if isinstance(err, _Bad):
            raise
        raise SnapshotError(f"trace {key!r}: expected numbers ({err})") from err


def _int_array(values: list[Any], what: str) -> np.ndarray:
    try:
        return np.array(values, dtype=np.int64) if values else np.zeros(0, np.int64)
    except (TypeError, ValueError, OverflowError) as e:
        raise SnapshotError(f"{what}: expected integers ({e})") from e


def _int(value: Any, what: str, lo: int = 0, hi: int = 2**63 - 1) -> int:
    """An integer field in range (numbers land in int64 columns), else ``_Bad`` saying what was found."""
    if type(value) is not int:
        if type(value) is float and value.is_integer():
            value = int(value)
        elif type(value) is bool:
            value = int(value)
        else:
            raise _Bad(f"{what} is a {type(value).__name__}; expected an integer")
    if not lo <= value <= hi:
        shown = f"{value:,}" if value.bit_length() <= 128 else f"a {value.bit_length()}-bit number"
        raise _Bad(f"{what} is {shown}; expected an integer from {lo:,} to {hi:,}")
    return value


def _name(value: Any, default: str = "") -> str:
    """A string field (segment type, annotation name); anything else is not stringified, only named."""
    if type(value) is str:
        return clip_text(value)
    return default if value is None else f"<{type(value).__name__}>"


def _time(value: Any) -> float | None:
    """A time in microseconds, or None when absent or not a usable time (inf, NaN, beyond the year 9900)."""
    if type(value) in (int, float) and abs(value) <= _MAX_TIME_US:
        return float(value)
    return None


_MAX_DEVICE = 2**15 - 1  # device indexes are an int16 column


def _blocks_of(seg: dict[str, Any], seg_index: int, interner: _Interner, out: dict[str, list[Any]],
               blocks: list[Any]) -> tuple[int, int]:
    address = _int(seg.get("address") or 0, f"segment {seg_index}'s address")
    cursor = address
    allocated = largest_free = 0
    for b in blocks:
        if type(b) is not dict:
            raise _Bad(f"a block of segment {seg_index} is a {type(b).__name__}; expected a dict")
        size = _int(b["size"], f"a block size in segment {seg_index}")
        state = b.get("state")
        state = _BLOCK_CODE.get(state, 0) if type(state) is str else 0
        baddr = b.get("address")
        baddr = cursor if baddr is None else _int(baddr, f"a block address in segment {seg_index}")
        cursor = baddr + size
        frames = b.get("frames")
        requested = b.get("requested_size")
        history = b.get("history")
        if not frames and history and type(history) is list:  # torch 2.0: newest allocation first
            first = history[0]
            if type(first) is not dict:
                raise _Bad(f"a block history entry of segment {seg_index} is a {type(first).__name__}; expected a dict")
            frames = first.get("frames")
            if requested is None:
                requested = first.get("real_size")
        out["segment"].append(seg_index)
        out["address"].append(baddr)
        out["size"].append(size)
        out["requested"].append(size if requested is None else _int(requested, "a block's requested size"))
        out["state"].append(state)
        out["stack"].append(interner.stack(frames) if state else -1)
        if state:
            allocated += size
        else:
            largest_free = max(largest_free, size)
    return allocated, largest_free


def site_columns(frames: list[Frame], stacks: list[tuple[int, ...]]) -> tuple[np.ndarray, list[Frame | None]]:
    """The site of each stack (``pick_site``) as ids into a list of distinct sites; each frame is classified once,
    not once per stack it appears in."""
    kind = [frame_kind(f) for f in frames]
    sites: list[Frame | None] = []
    site_ids: dict[Frame | None, int] = {}
    stack_site = np.empty(len(stacks), dtype=np.int32)
    for sid, ids in enumerate(stacks):
        site = None
        for f in ids:  # the common case: a user frame with a line before anything else decides
            if kind[f]:
                site = frames[f] if kind[f] == 1 else None
                break
        if site is None:
            site = pick_site([frames[f] for f in ids])
        stack_site[sid] = site_ids.setdefault(site, len(site_ids))
        if stack_site[sid] == len(sites):
            sites.append(site)
    return stack_site, sites


def build_model(raw: Any, source: str) -> Model:
    """Turn an unpickled snapshot (dict or bare list of segments) into the columnar model."""
    notes: list[str] = []
    if isinstance(raw, list):
        raw = {"segments": raw, "device_traces": []}
        notes.append("bare list of segments (torch.cuda.memory_snapshot()): no trace, final state only")
    if not isinstance(raw, dict) or not ("segments" in raw or "device_traces" in raw):
        keys = sorted(k if len(k) <= 40 else k[:40] + "..." for k in raw if type(k) is str) if isinstance(raw, dict) else []
        found = f"a dict with keys {keys[:8]}" if isinstance(raw, dict) else f"a {type(raw).__name__}"
        raise SnapshotError(f"{source} holds {found}, not a memory snapshot; expected a dict with 'segments' and "
                            "'device_traces' (torch.cuda.memory._snapshot()) or a list of segments")
    try:
        return _build(raw, source, notes)
    except SnapshotError:
        raise
    except _Bad as e:
        raise SnapshotError(f"{source} is not a well-formed memory snapshot: {e}") from e
    except RecursionError as e:
        raise SnapshotError(f"{source} is not a well-formed memory snapshot: it nests deeper than Python can "
                            "follow; expected the structure written by torch.cuda.memory._dump_snapshot") from e
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
    seen_traces: dict[int, int] = {}
    bad_times = 0
    if len(traces) > _MAX_DEVICE + 1:
        raise _Bad(f"'device_traces' has {len(traces):,} devices; expected at most {_MAX_DEVICE + 1:,}")
    for device, trace in enumerate(traces):
        if not isinstance(trace, list):
            raise TypeError(f"device_traces[{device}] should be a list of entries")
        n = len(trace)
        device_range[device] = (offset, offset + n)
        if not n:
            continue
        if id(trace) in seen_traces:  # one list referenced twice through the pickle memo
            raise _Bad(f"device_traces[{seen_traces[id(trace)]}] and [{device}] are one shared list of {n:,} "
                       "entries; torch writes each device's trace separately, and reading it once per reference "
                       "would multiply the work")
        seen_traces[id(trace)] = device
        actions = list(map(itemgetter("action"), trace))
        if set(map(type, actions)) - {str}:  # only strings are hashed: a nested tuple would be hashed whole
            actions = [a if type(a) is str else "other" for a in actions]
        act = np.fromiter(map(_CODE.__getitem__, actions), dtype=np.int8, count=n)
        del actions
        cols["a"].append(act)
        cols["addr"].append(_column(trace, "addr", 0, np.int64))
        cols["size"].append(_column(trace, "size", 0, np.int64))
        cols["stream"].append(_column(trace, "stream", 0, np.int64))
        t = _column(trace, "time_us", None, np.float64)
        unusable = ~(np.abs(t) <= _MAX_TIME_US) & ~np.isnan(t)  # inf, or beyond any date
        if unusable.any():
            bad_times += int(unusable.sum())
            t[unusable] = np.nan
        cols["t"].append(t)
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
                if type(c) is str and (c in categories or len(categories) < 127):  # an int8 column
                    cat[i] = categories.setdefault(c, len(categories))
        cols["cat"].append(cat)
        for i in np.flatnonzero(act == OOM).tolist():
            e = trace[i]
            free = e.get("device_free")
            ooms.append(OomEvent(device, offset + i, _int(e.get("size", 0), "an oom entry's size"),
                                 None if free is None else _int(free, "an oom entry's device_free"),
                                 _time(e.get("time_us")), int(stack[i])))
        offset += n

    def cat_cols(key: str, dtype: Any) -> np.ndarray:
        return np.concatenate(cols[key]).astype(dtype, copy=False) if cols[key] else np.zeros(0, dtype)

    out: dict[str, list[Any]] = {k: [] for k in ("segment", "address", "size", "requested", "state", "stack")}
    segments: list[Segment] = []
    seen_blocks: dict[int, int] = {}
    for i, seg in enumerate(segments_raw):
        if type(seg) is not dict:
            raise _Bad(f"segment {i} is a {type(seg).__name__}; expected a dict")
        blocks = seg.get("blocks") or []
        if type(blocks) is not list:
            raise _Bad(f"segment {i}'s 'blocks' is a {type(blocks).__name__}; expected a list")
        if blocks:
            j = seen_blocks.setdefault(id(blocks), i)
            if j != i:  # the pickle memo lets one list stand for many; expanding it per reference is quadratic
                raise _Bad(f"segments {j} and {i} share one list of {len(blocks):,} blocks (a reference through "
                           "the pickle memo); torch writes each segment's own blocks, so the file was refused rather "
                           "than read once per segment")
        allocated, largest_free = _blocks_of(seg, i, interner, out, blocks)
        pool = seg.get("segment_pool_id") or (0, 0)
        if type(pool) not in (list, tuple) or len(pool) != 2:
            raise _Bad(f"segment {i}'s segment_pool_id is a {type(pool).__name__}; expected a pair of integers")
        segments.append(Segment(
            device=_int(seg.get("device", 0) or 0, f"segment {i}'s device", 0, _MAX_DEVICE),
            address=_int(seg.get("address") or 0, f"segment {i}'s address"),
            total_size=_int(seg.get("total_size", 0), f"segment {i}'s total_size"),
            stream=_int(seg.get("stream", 0) or 0, f"segment {i}'s stream", -(2**63)),
            segment_type=_name(seg.get("segment_type", "")),
            pool_id=(_int(pool[0], "a pool id", -(2**63)), _int(pool[1], "a pool id", -(2**63))),
            is_expandable=seg.get("is_expandable", False) is True, stack=interner.stack(seg.get("frames")),
            allocated_bytes=allocated, largest_free_block=largest_free, blocks=len(blocks),
        ))
    for dev in sorted({s.device for s in segments} - set(device_range)):
        device_range[dev] = (offset, offset)

    annotations = []
    marks = raw.get("external_annotations") or []
    for a in marks if type(marks) is list else []:
        if isinstance(a, dict):
            annotations.append(Annotation(_name(a.get("name", "")), _name(a.get("stage", "")),
                                          _int(a.get("device", 0) or 0, "an annotation's device", 0, _MAX_DEVICE),
                                          _time(a.get("time_us"))))
    settings = raw.get("allocator_settings")
    stack_site, sites = site_columns(interner.frames, interner.stacks)
    if bad_times:
        notes.append(f"{bad_times:,} trace entries have a time_us that is not a time (inf, NaN or beyond any date): "
                     "their device's x-axis is the event index")
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
        allocator_settings={k: v for k, v in settings.items() if type(k) is str and type(v) in _SCALARS}
        if type(settings) is dict else {}, format_notes=tuple(notes),
    )
