"""The snapshot engine against the 16 real snapshot pickles in ../shared/data/snapshots.

Every number is checked against an independent computation: a plain Python loop over the raw unpickled dict
(the way PyTorch's MemoryViz replays a trace), never against hard-coded values.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from nbdebug.core.memory import MemorySnapshot, load_snapshot
from nbdebug.core.memory._unpickle import SafeUnpickler
from nbdebug.errors import SnapshotError
from tests.conftest import REPO, SNAPSHOTS

FILES = sorted(p.relative_to(SNAPSHOTS).as_posix() for p in SNAPSHOTS.rglob("*.p*")) if SNAPSHOTS.is_dir() else []


def _raw(path: Path):
    with open(path, "rb") as fh:
        return SafeUnpickler(fh).load()


def _reference(raw, device: int):
    """Peak/final allocated bytes by a plain loop (MemoryViz's rules), independent of the numpy engine."""
    if isinstance(raw, list):
        raw = {"segments": raw, "device_traces": []}
    traces = raw.get("device_traces") or []
    trace = traces[device] if device < len(traces) else []
    live: dict[int, int] = {}
    preexisting = 0
    for e in trace:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
        elif e["action"] == "free_completed":
            if e["addr"] in live:
                del live[e["addr"]]
            else:
                preexisting += e["size"]
    for seg in raw["segments"]:
        if seg.get("device", 0) != device:
            continue
        addr = seg["address"]
        for b in seg["blocks"]:
            baddr = b.get("address", addr)
            addr = baddr + b["size"]
            if b["state"] in ("active_allocated", "active_pending_free") and baddr not in live:
                preexisting += b["size"]
    current = peak = preexisting
    seen: dict[int, int] = {}
    for e in trace:
        if e["action"] == "alloc":
            seen[e["addr"]] = e["size"]
            current += e["size"]
        elif e["action"] == "free_completed":
            seen.pop(e["addr"], None)
            current -= e["size"]
        peak = max(peak, current)
    reserved = sum(s["total_size"] for s in raw["segments"] if s.get("device", 0) == device)
    return {"peak": peak, "final": current, "events": sum(len(t) for t in traces), "reserved_end": reserved,
            "segments": len(raw["segments"])}


def test_all_sixteen_real_files_are_present(snapshots_dir):
    assert len(FILES) == 16, FILES


@pytest.mark.parametrize("name", FILES)
def test_real_snapshot_matches_reference(snapshots_dir, name):
    path = snapshots_dir / name
    snap = load_snapshot(path)
    raw = _raw(path)
    summary = snap.summary()
    ref = _reference(raw, summary.device)
    assert summary.events == ref["events"]
    assert summary.segments == ref["segments"]
    assert summary.peak_allocated_bytes == ref["peak"]
    assert summary.final_allocated_bytes == ref["final"]
    assert summary.peak_reserved_bytes >= ref["reserved_end"] > 0
    # the peak is when the timeline is highest, and what was alive then adds up to it
    tl = snap.timeline()
    assert int(tl.allocated.max()) == ref["peak"]
    peak = snap.peak()
    assert peak.bytes == ref["peak"]
    assert sum(s.bytes for s in peak.by_site) == ref["peak"]
    # every device of the file works
    for d in snap.devices:
        assert snap.summary(d).peak_allocated_bytes == _reference(raw, d)["peak"]
    json.dumps(summary.to_dict())


@pytest.mark.parametrize("name", FILES)
def test_fragmentation_matches_segments(snapshots_dir, name):
    raw = _raw(snapshots_dir / name)
    segs = raw if isinstance(raw, list) else raw["segments"]
    snap = load_snapshot(snapshots_dir / name)
    for d in snap.devices:
        fr = snap.fragmentation(d)
        mine = [s for s in segs if s.get("device", 0) == d]
        assert fr.reserved_bytes == sum(s["total_size"] for s in mine)
        assert fr.allocated_bytes == sum(b["size"] for s in mine for b in s["blocks"] if b["state"] != "inactive")
        largest = max((b["size"] for s in mine for b in s["blocks"] if b["state"] == "inactive"), default=0)
        assert fr.largest_free_block == largest


def test_time_axis_is_real_time_when_recorded(snapshots_dir):
    with_time = load_snapshot(snapshots_dir / "torch2.5-2.7_cs336_silmont_forward_fp32_128.pickle")
    tl = with_time.timeline()
    assert tl.x_unit == "us" and (tl.x[1:] >= 1.6e15).all()
    raw = _raw(snapshots_dir / "torch2.5-2.7_cs336_silmont_forward_fp32_128.pickle")
    s = with_time.summary()
    assert s.peak_time_us == raw["device_traces"][0][s.peak_event_index]["time_us"]
    without = load_snapshot(snapshots_dir / "no-license/torch2.1_select_n_snapshot.pickle")
    assert without.timeline().x_unit == "event"
    assert without.summary().peak_time_us is None


def test_memory_alive_before_trace_is_counted(snapshots_dir):
    # 2.3-2.4 "state only": one free_completed entry, 16 GB of blocks alive that the trace never saw
    snap = load_snapshot(snapshots_dir / "torch2.3-2.4_sketchkv2_my_snapshot.pickle")
    raw = _raw(snapshots_dir / "torch2.3-2.4_sketchkv2_my_snapshot.pickle")
    active = sum(b["size"] for s in raw["segments"] for b in s["blocks"] if b["state"] == "active_allocated")
    entry = raw["device_traces"][0][0]
    assert snap.timeline().allocated[0] == active + entry["size"]
    assert snap.summary().final_allocated_bytes == active


def test_oom_request_against_largest_free_block(snapshots_dir):
    path = snapshots_dir / "no-license/torch2.8-2.9_expandable_oom_multigpu_memory_snapshot.pickle"
    raw = _raw(path)
    oom = next((d, e) for d, t in enumerate(raw["device_traces"]) for e in t if e["action"] == "oom")
    snap = load_snapshot(path)
    assert snap.devices == (0, 1, 2)
    fr = snap.fragmentation(oom[0])
    (row,) = fr.ooms
    assert row.requested_bytes == oom[1]["size"] and row.device_free_bytes == oom[1]["device_free"]
    assert row.requested_bytes > row.largest_free_block
    assert snap.summary().ooms[0]["requested_bytes"] == oom[1]["size"]


def test_sites_skip_torch_internals_and_cpp_and_handle_windows_paths(snapshots_dir):
    win = load_snapshot(snapshots_dir / "torch2.10plus_cs336_magma27_memory_snapshot.pickle")
    sites = win.top_sites(20).sites
    named = [s for s in sites if s.filename]
    assert named and all("\\torch\\" not in s.filename and "/torch/" not in s.filename for s in named)
    assert any("\\" in s.filename for s in named)  # Windows path kept whole
    assert all("/" in s.site or "<" in s.site for s in sites)  # shown as short posix-style path
    cpp = load_snapshot(snapshots_dir / "no-license/torch2.5-2.7_cs336_annotations_cppframes_memory_ctx128_forward.pickle")
    assert not any(s.site.startswith("torch::") or s.filename == "??" for s in cpp.top_sites(30).sites)


def test_legacy_history_blocks_get_addresses_and_stacks(snapshots_dir):
    snap = load_snapshot(snapshots_dir / "torch2.0_history_flexgen_oom_snapshot.pickle")
    raw = _raw(snapshots_dir / "torch2.0_history_flexgen_oom_snapshot.pickle")
    first = raw["segments"][0]
    m = snap.model
    assert m.block_address[0] == first["address"]
    assert m.block_address[1] == first["address"] + first["blocks"][0]["size"]
    assert any("flexgen" in s.filename for s in snap.top_sites().sites)


def test_annotations_and_never_freed(snapshots_dir):
    snap = load_snapshot(snapshots_dir / "torch2.8-2.9_decomfl_memory.pickle")
    raw = _raw(snapshots_dir / "torch2.8-2.9_decomfl_memory.pickle")
    ann = snap.annotations()
    assert [(r.name, r.stage) for r in ann.rows] == [(a["name"], a["stage"]) for a in raw["external_annotations"]]
    assert len(ann.to_pandas()) == len(raw["external_annotations"])
    trace = raw["device_traces"][0]
    t0, t1 = trace[0]["time_us"], trace[len(trace) // 2]["time_us"]
    freed = {e["addr"] for e in trace if e["action"] == "free_completed"}
    nf = snap.never_freed(t0, t1)
    # reference: allocs in the window whose address was never freed afterwards
    last_free = {e["addr"]: i for i, e in enumerate(trace) if e["action"] == "free_completed"}
    expected = 0
    for i, e in enumerate(trace):
        if e["action"] == "alloc" and t0 <= e["time_us"] <= t1:
            expected += 0 if last_free.get(e["addr"], -1) > i else e["size"]
    assert nf.bytes == expected
    assert freed  # sanity: the file has frees
    assert sum(s.bytes for s in nf.by_site) == nf.bytes


def test_diff_by_site(snapshots_dir):
    a = load_snapshot(snapshots_dir / "torch2.5plus_octree-nca_my_snapshot_a.pickle")
    b = load_snapshot(snapshots_dir / "torch2.5plus_octree-nca_my_snapshot_b.pickle")
    d = a.diff(b)
    assert d.after_bytes - d.before_bytes == sum(r.delta_bytes for r in d.rows)
    assert d.before_bytes == a.fragmentation().allocated_bytes
    assert len(d.to_pandas()) == len(d.rows)


def test_results_have_pandas_and_text(snapshots_dir):
    snap = load_snapshot(snapshots_dir / "torch2.5-2.7_cs336_silmont_forward_fp32_128.pickle")
    events = snap.to_pandas()
    assert len(events) == snap.events and set(events["action"].unique()) >= {"alloc", "free_completed"}
    assert len(snap.timeline().to_pandas()) == snap.events + 1
    assert len(snap.top_sites(5).to_pandas()) == 5
    assert "peak allocated" in str(snap)
    assert repr(snap).startswith("<MemorySnapshot")
    assert isinstance(load_snapshot(_raw(snapshots_dir / "torch2.5plus_octree-nca_my_snapshot_a.pickle")),
                      MemorySnapshot)


# --- refusing bad input ---------------------------------------------------------------------------------------


class _Shell:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_malicious_pickle_is_refused_and_does_not_run(tmp_path):
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pickle"
    evil.write_bytes(pickle.dumps({"segments": [], "device_traces": [[_Shell(str(marker))]]}, protocol=4))
    # the payload is real: a plain pickle.load would run the command
    with pytest.raises(SnapshotError, match="refused") as info:
        load_snapshot(evil)
    assert "os" in str(info.value) or "posix" in str(info.value)
    assert not marker.exists()
    probe = tmp_path / "probe.pickle"
    probe_marker = tmp_path / "probe-ran"
    probe.write_bytes(pickle.dumps(_Shell(str(probe_marker))))
    pickle.loads(probe.read_bytes())
    assert probe_marker.exists()  # proves the payload would have run


def test_persistent_ids_are_refused(tmp_path):
    import io

    class P(pickle.Pickler):
        def persistent_id(self, obj):
            return "x" if obj == "secret" else None

    buf = io.BytesIO()
    P(buf).dump({"segments": ["secret"]})
    with pytest.raises(SnapshotError, match="persistent"):
        load_snapshot(buf.getvalue())


@pytest.mark.parametrize("content, expected", [
    (b"", "empty"),
    (b'{"segments": [', "not valid JSON"),
    (b'{"weights": [1, 2]}', "not a memory snapshot"),
    (b"PK\x03\x04zipzip", "zip"),
    (b"hello world", "does not start like a pickle"),
])
def test_not_a_pickle(tmp_path, content, expected):
    p = tmp_path / "x.pickle"
    p.write_bytes(content)
    with pytest.raises(SnapshotError, match=expected):
        load_snapshot(p)


def test_truncated(snapshots_dir, tmp_path):
    data = (snapshots_dir / "torch2.5plus_octree-nca_my_snapshot_a.pickle").read_bytes()
    p = tmp_path / "cut.pickle"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(SnapshotError, match="truncated|not a readable"):
        load_snapshot(p)


@pytest.mark.parametrize("obj", [{"a": 1}, 42, "text", [1, 2], {"segments": [{"blocks": 3}]},
                                 {"device_traces": [[{"action": "alloc", "addr": "x", "size": 1}]]}])
def test_not_a_snapshot(obj):
    with pytest.raises(SnapshotError):
        load_snapshot(pickle.dumps(obj))


def test_json_snapshot(snapshots_dir, tmp_path):
    raw = _raw(snapshots_dir / "torch2.5plus_octree-nca_my_snapshot_a.pickle")
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(raw))
    assert load_snapshot(path).summary().peak_allocated_bytes == load_snapshot(raw).summary().peak_allocated_bytes


def test_protocol_5_and_missing_file(snapshots_dir, tmp_path):
    raw = _raw(snapshots_dir / "torch2.5plus_octree-nca_my_snapshot_a.pickle")
    p5 = tmp_path / "p5.pickle"
    p5.write_bytes(pickle.dumps(raw, protocol=5))
    assert load_snapshot(p5).summary() .peak_allocated_bytes == load_snapshot(raw).summary().peak_allocated_bytes
    with pytest.raises(SnapshotError, match="cannot read"):
        load_snapshot(tmp_path / "nope.pickle")


def test_device_that_does_not_exist(snapshots_dir):
    snap = load_snapshot(snapshots_dir / "torch2.5plus_octree-nca_my_snapshot_a.pickle")
    with pytest.raises(SnapshotError, match="no device 7"):
        snap.summary(7)


# --- the command line -----------------------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "nbdebug", "snapshot", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_cli_json_contract(snapshots_dir, tmp_path):
    path = snapshots_dir / "no-license/torch2.8-2.9_expandable_oom_multigpu_memory_snapshot.pickle"
    out = tmp_path / "viewer.html"
    r = _cli(str(path), "--json", "--device", "2", "--html", str(out))
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    for key in ("devices", "events", "peak_allocated_bytes", "peak_time_us", "final_allocated_bytes",
                "peak_reserved_bytes", "segments", "top_sites", "ooms"):
        assert key in data
    ref = _reference(_raw(path), 2)
    assert data["devices"] == [0, 1, 2] and data["device"] == 2
    assert data["peak_allocated_bytes"] == ref["peak"] and data["events"] == ref["events"]
    assert set(data["top_sites"][0]) == {"site", "bytes", "count"}
    assert len(data["ooms"]) == 1
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>") and "device 2" in html and "https://" not in html


def test_cli_text_and_errors(snapshots_dir, tmp_path):
    r = _cli(str(snapshots_dir / "torch2.5-2.7_cs336_silmont_forward_fp32_128.pickle"))
    assert r.returncode == 0 and "peak allocated" in r.stdout
    bad = tmp_path / "bad.pickle"
    bad.write_bytes(b"nonsense")
    r = _cli(str(bad))
    assert r.returncode == 1 and "bad.pickle" in r.stderr and "expected" in r.stderr


@pytest.mark.parametrize("name", ["torch2.5plus_octree-nca_my_snapshot_b.pickle",
                                  "no-license/torch2.1_select_n_snapshot.pickle"])
def test_replayed_free_space_matches_series_and_final_state(snapshots_dir, name):
    from nbdebug.core.memory._replay import free_space_at

    snap = load_snapshot(snapshots_dir / name)
    st = snap.state()
    end, fr = free_space_at(snap, st.device, st.n - 1), snap.fragmentation()
    assert (end.reserved_bytes, end.free_bytes, end.largest_free_block) == (
        fr.reserved_bytes, fr.free_bytes, fr.largest_free_block)
    for p in (0, st.n // 3, st.n // 2):
        space = free_space_at(snap, st.device, p)
        assert space.reserved_bytes == st.reserved[p]
        assert space.free_bytes <= st.reserved[p] - st.allocated[p] + 512 * len(space.ranges)


def _frames_of(raw_frames) -> list[tuple[str, int, str]]:
    return [(f.get("filename", ""), f.get("line", 0), f.get("name", "")) for f in raw_frames or []]


@pytest.mark.parametrize("name", FILES)
def test_every_entry_keeps_its_own_stack(snapshots_dir, name):
    """The stack id of each alloc entry leads back to exactly the frames that entry recorded (interning, grouping
    by identity and the sharing of frame lists must never swap two stacks)."""
    path = snapshots_dir / name
    raw = _raw(path)
    traces = [] if isinstance(raw, list) else raw.get("device_traces") or []
    model = load_snapshot(path).model
    offset = 0
    for trace in traces:
        for i, e in enumerate(trace[:3000]):
            if e["action"] != "alloc":
                continue
            sid = int(model.stack[offset + i])
            got = [model.frames[f] for f in model.stacks[sid]] if sid >= 0 else []
            assert got == _frames_of(e.get("frames")), (name, offset + i)
        offset += len(trace)


def test_stacks_stay_with_their_entries_whether_lists_are_shared_or_not():
    frames = [[{"filename": f"/u/m{k}.py", "line": k + 1, "name": f"f{k}"}] for k in range(5)]
    for n in (40, 5000):  # interned one by one, and grouped with numpy
        own = [{"action": "alloc", "addr": i, "size": 8, "frames": list(frames[(i * 3) % 5])} for i in range(n)]
        shared = [{"action": "alloc", "addr": i, "size": 8, "frames": frames[(i * 3) % 5]} for i in range(n)]
        _check_stacks(own)
        _check_stacks(shared)


def _check_stacks(trace) -> None:
    m = load_snapshot({"segments": [], "device_traces": [trace]}).model
    for i, e in enumerate(trace):
        assert [m.frames[f] for f in m.stacks[int(m.stack[i])]] == _frames_of(e["frames"])
