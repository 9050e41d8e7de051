"""Fuzzing the snapshot engine with mutated real snapshots: only ``SnapshotError`` may ever escape."""

from __future__ import annotations

import copy
import pickle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbdebug.core.memory import load_snapshot
from nbdebug.errors import SnapshotError
from nbdebug.render.memory_viewer import viewer_data
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
