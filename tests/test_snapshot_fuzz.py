"""Fuzzing the snapshot engine with mutated real snapshots: only ``SnapshotError`` may ever escape."""

from __future__ import annotations

import copy
import pickle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbdebug.core.memory import load_snapshot
from nbdebug.errors import SnapshotError
from nbdebug.render.memory.viewer import viewer_data
from tests.conftest import SNAPSHOTS
from tests.test_snapshot import _raw

SMALL = ["torch2.5plus_octree-nca_my_snapshot_a.pickle", "torch2.0_history_flexgen_1.3b_snapshot.pickle",
         "no-license/tiny_expandable_2gpu_notrace_dump_snapshot.pickle",
         "no-license/segments_list_only_memory_snapshot.pkl"]
SETTINGS = settings(max_examples=100, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

_cache: dict[str, tuple[bytes, object]] = {}


def _source(name: str) -> tuple[bytes, object]:
    if name not in _cache:
        path = SNAPSHOTS / name
        if not path.exists():
            pytest.skip(f"{path} is absent")
        _cache[name] = (path.read_bytes(), _raw(path))
    return _cache[name]


def _exercise(source) -> None:
    try:
        snap = load_snapshot(source)
        for d in snap.devices[:3]:
            snap.summary(d)
            snap.peak(d)
            snap.fragmentation(d)
            snap.never_freed(device=d)
            snap.timeline(d)
        snap.annotations()
        str(snap)
        viewer_data(snap, buckets=50)
    except SnapshotError:
        pass


@SETTINGS
@given(name=st.sampled_from(SMALL), data=st.data())
def test_byte_mutations(name, data):
    blob, _ = _source(name)
    blob = bytearray(blob)
    for _ in range(data.draw(st.integers(1, 6))):
        kind = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        pos = data.draw(st.integers(0, max(len(blob) - 1, 0)))
        if kind == "flip" and blob:
            blob[pos] = data.draw(st.integers(0, 255))
        elif kind == "cut":
            del blob[pos:pos + data.draw(st.integers(1, 64))]
        else:
            blob[pos:pos] = data.draw(st.binary(min_size=1, max_size=16))
    _exercise(bytes(blob))


_VALUES = st.one_of(st.none(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.text(max_size=5),
                    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
                    st.booleans(), st.binary(max_size=4), st.tuples(st.integers(), st.integers()))


def _containers(obj, path=()):
    yield path, obj
    if isinstance(obj, dict):
        for k, v in list(obj.items())[:40]:
            yield from _containers(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:25]):
            yield from _containers(v, path + (i,))


@SETTINGS
@given(name=st.sampled_from(SMALL), data=st.data())
def test_structure_mutations(name, data):
    _, raw = _source(name)
    raw = copy.deepcopy(raw)
    for _ in range(data.draw(st.integers(1, 4))):
        spots = [(p, o) for p, o in _containers(raw) if isinstance(o, (dict, list)) and o]
        if not spots:
            break
        path, container = data.draw(st.sampled_from(spots))
        keys = list(container) if isinstance(container, dict) else list(range(len(container)))
        key = data.draw(st.sampled_from(keys))
        action = data.draw(st.sampled_from(["replace", "delete"]))
        if action == "delete":
            del container[key]
        else:
            container[key] = data.draw(_VALUES)
    _exercise(pickle.dumps(raw, protocol=data.draw(st.sampled_from([2, 4, 5]))))


# --- opcode level (issue 12 "Bounded loading", issue 15 "Done when") ---------------------------------------------
# A real snapshot re-pickled with protocol 2 (PUT/GET memo) and protocol 4 (MEMOIZE), its FRAME opcodes dropped so
# that an edit anywhere keeps the stream well-formed, then edited at opcode boundaries: memo indexes, sharing (a
# value replaced by a reference to an earlier object, cycles included), lengths, frames, deep nesting and lists
# shared 2**depth times.  Every outcome must be a snapshot or a SnapshotError, in bounded time (the address-space
# guard and the opcode walk keep memory bounded; a regression there shows as a MemoryError or a timeout).
OPCODE_SOURCES = ["torch2.5plus_octree-nca_my_snapshot_a.pickle",
                  "no-license/tiny_expandable_2gpu_notrace_dump_snapshot.pickle"]
TIME_BOUND_S = 20.0  # per example; a load of these files takes milliseconds, a blow-up takes minutes
_ops_cache: dict[tuple[str, int], tuple[bytes, list[tuple[str, int, int, int]]]] = {}
_MEMO_OPS = ("BINPUT", "LONG_BINPUT", "BINGET", "LONG_BINGET", "PUT", "GET")
_ATOMS = ("BININT", "BININT1", "BININT2", "LONG1", "BINFLOAT", "NONE", "NEWTRUE", "NEWFALSE", "SHORT_BINUNICODE",
          "BINUNICODE")
_LENGTHS = {"SHORT_BINUNICODE": 1, "BINUNICODE": 4, "LONG1": 1, "SHORT_BINBYTES": 1, "BINBYTES": 4}


def _ops(name: str, protocol: int) -> tuple[bytes, list[tuple[str, int, int, int]]]:
    """The unframed pickle and its opcodes: (name, offset, end, memo count before it)."""
    import pickletools

    key = (name, protocol)
    if key not in _ops_cache:
        _, raw = _source(name)
        blob = pickle.dumps(raw, protocol=protocol)
        kept, ops, memo = bytearray(), [], 0
        parsed = list(pickletools.genops(blob))
        for i, (op, _arg, pos) in enumerate(parsed):
            end = parsed[i + 1][2] if i + 1 < len(parsed) else len(blob)
            if op.name == "FRAME":
                continue
            start = len(kept)
            kept += blob[pos:end]
            ops.append((op.name, start, len(kept), memo))
            memo += op.name in ("MEMOIZE", "BINPUT", "LONG_BINPUT", "PUT")
        _ops_cache[key] = (bytes(kept), ops)
    return _ops_cache[key]


def _get(index: int, protocol: int) -> bytes:
    return (b"h" + bytes([index]) if index < 256 else b"j" + index.to_bytes(4, "little"))


def _shared_dag(depth: int, memo: int) -> bytes:
    """x = 1; then ``depth`` times x = [x, x] (protocol 4, MEMOIZE numbering from ``memo``)."""
    out = bytearray(b"K\x01\x94")
    for level in range(depth):
        ref = _get(memo + level, 4)
        out += b"0]" + ref + b"a" + ref + b"a\x94"
    return bytes(out)


def _timed_exercise(blob: bytes) -> None:
    import time

    t0 = time.perf_counter()
    _exercise(blob)
    elapsed = time.perf_counter() - t0
    assert elapsed < TIME_BOUND_S, f"{elapsed:.1f} s for a {len(blob)}-byte pickle"


@SETTINGS
@given(name=st.sampled_from(OPCODE_SOURCES), protocol=st.sampled_from([2, 4]), data=st.data())
def test_opcode_mutations(name, protocol, data):
    blob, ops = _ops(name, protocol)
    out = bytearray(blob)
    edits = []  # (start, end, replacement), applied back to front so offsets stay valid
    for _ in range(data.draw(st.integers(1, 3))):
        kind = data.draw(st.sampled_from(["memo", "share", "length", "frame", "deep", "dag"]))
        if kind == "memo":
            cands = [o for o in ops if o[0] in _MEMO_OPS and o[0] not in ("PUT", "GET")]
            if not cands:
                continue
            opname, start, end, _ = data.draw(st.sampled_from(cands))
            index = data.draw(st.one_of(st.integers(0, 300), st.integers(0, 2**32 - 1)))
            code = {"BINPUT": b"r", "LONG_BINPUT": b"r", "BINGET": b"j", "LONG_BINGET": b"j"}[opname]
            edits.append((start, end, code + index.to_bytes(4, "little")))
        elif kind == "share":
            cands = [o for o in ops if o[0] in _ATOMS and o[3] > 0]
            if not cands:
                continue
            _, start, end, memo = data.draw(st.sampled_from(cands))
            edits.append((start, end, _get(data.draw(st.integers(0, memo - 1)), protocol)))
        elif kind == "length":
            cands = [o for o in ops if o[0] in _LENGTHS]
            if not cands:
                continue
            opname, start, end, _ = data.draw(st.sampled_from(cands))
            k = _LENGTHS[opname]
            length = data.draw(st.one_of(st.integers(0, 2 ** (8 * k) - 1), st.just(2 ** (8 * k) - 1)))
            edits.append((start + 1, start + 1 + k, length.to_bytes(k, "little")))
        elif kind == "frame":
            _, start, _, _ = data.draw(st.sampled_from(ops))
            length = data.draw(st.one_of(st.integers(0, 4096), st.integers(0, 2**64 - 1)))
            edits.append((start, start, b"\x95" + length.to_bytes(8, "little")))
        elif kind == "deep":
            cands = [o for o in ops if o[0] in _ATOMS]
            _, start, end, _ = data.draw(st.sampled_from(cands))
            depth = data.draw(st.integers(1, 3000))
            edits.append((start, end, b"]" * depth + b"a" * (depth - 1)))
        elif protocol == 4:  # dag: a value replaced by a list shared 2**depth times
            cands = [o for o in ops if o[0] in _ATOMS]
            _, start, end, memo = data.draw(st.sampled_from(cands))
            dag = _shared_dag(data.draw(st.integers(1, 40)), memo)
            edits.append((start, end, dag))
    edits.sort(key=lambda e: e[0], reverse=True)
    last = len(out) + 1
    for start, end, new in edits:
        if end > last:  # overlapping edits: keep the later one only
            continue
        out[start:end] = new
        last = start
    _timed_exercise(bytes(out))


_HOSTILE_VALUES = st.one_of(
    st.integers(-(2**70), 2**70), st.sampled_from([2**63, 2**64, -(2**63) - 1, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([float("inf"), float("nan"), 1e300]),
    st.text(max_size=5), st.just("x" * 100_000), st.binary(max_size=4), st.none(), st.booleans(),
    st.integers(1, 40).map(lambda d: ("dag", d)), st.integers(1, 2500).map(lambda d: ("deep", d)),
)


def _materialize(value):
    if isinstance(value, tuple) and len(value) == 2 and value[0] in ("dag", "deep"):
        x: object = "a"
        for _ in range(value[1]):
            x = [x, x] if value[0] == "dag" else [x]
        return x
    return value


@SETTINGS
@given(name=st.sampled_from(SMALL), data=st.data())
def test_field_mutations(name, data):
    """Known fields (sizes, devices, addresses, times, frames' parts) set to hostile values."""
    import sys

    _, raw = _source(name)
    raw = copy.deepcopy(raw)
    segs = raw if isinstance(raw, list) else raw.get("segments") or []
    traces = [] if isinstance(raw, list) else raw.get("device_traces") or []
    targets = []
    for seg in segs[:20]:
        targets += [(seg, k) for k in ("total_size", "device", "address", "stream", "segment_type", "frames",
                                       "segment_pool_id", "blocks")]
        for b in (seg.get("blocks") or [])[:10]:
            targets += [(b, k) for k in ("size", "address", "state", "requested_size", "frames")]
            for f in (b.get("frames") or [])[:3]:
                targets += [(f, k) for k in ("filename", "line", "name")]
    for trace in traces:
        for e in trace[:30]:
            targets += [(e, k) for k in ("action", "addr", "size", "time_us", "frames", "stream", "category")]
            for f in (e.get("frames") or [])[:3]:
                targets += [(f, k) for k in ("filename", "line", "name")]
    for _ in range(data.draw(st.integers(1, 4))):
        holder, key = data.draw(st.sampled_from(targets))
        holder[key] = _materialize(data.draw(_HOSTILE_VALUES))
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)  # to write 2,500-deep values; reading them runs at the normal limit
    try:
        blob = pickle.dumps(raw, protocol=data.draw(st.sampled_from([2, 4])))
    finally:
        sys.setrecursionlimit(old)
    _timed_exercise(blob)
