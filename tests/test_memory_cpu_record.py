"""The CPU recording behind ``%%memtrace``: memory and Python calls only, the same sites as the full profiler, and
a conversion that survives what the profiler hands back."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from nbdebug.core.memory import load_snapshot, memtrace  # noqa: E402
from nbdebug.core.memory._cpu_record import (  # noqa: E402
    CpuRecording,
    model_of,
    snapshot_dict_of,
    walk_allocations,
)
from nbdebug.errors import NbdebugError  # noqa: E402


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))


def _work(net, opt, x, y):
    opt.zero_grad()
    out = net(x)
    loss = torch.nn.functional.mse_loss(out, y)
    loss.backward()
    opt.step()
    with torch.profiler.record_function("my_region"):
        kept = torch.empty(4096)
    return kept


def _stacked(a):
    """(size, frames) of every allocation and free, in order."""
    out = []
    for size, sid in zip(a.size.tolist(), a.stack.tolist()):
        out.append((size, tuple(a.frames[f] for f in a.stacks[sid]) if sid >= 0 else ()))
    return out


def _inside_work(a):
    """(size, frames up to _work) of the allocations made inside ``_work``."""
    out = []
    for size, frames in _stacked(a):
        names = [f[2] for f in frames]
        if size > 0 and "_work" in names:
            out.append((size, frames[:names.index("_work") + 1]))
    return out


def _tags(results):
    from torch._C._profiler import _EventType

    tags, names, todo = [], [], list(results.experimental_event_tree())
    while todo:
        node = todo.pop()
        tags.append(node.tag)
        if node.tag == _EventType.TorchOp:
            names.append(node.name)
        todo.extend(node.children)
    return tags, names


def test_same_allocations_and_stacks_as_the_full_profiler_without_per_op_events():
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    net, x, y = _net(), torch.randn(16, 32), torch.randn(16, 1)
    opt = torch.optim.Adam(net.parameters())
    _work(net, opt, x, y)  # optimizer state exists: both recordings see the same steady-state step

    rec = CpuRecording()
    rec.start()
    try:
        _work(net, opt, x, y)
    finally:
        rec.stop()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, with_stack=True) as prof:
        _work(net, opt, x, y)

    mine, full = walk_allocations(rec.results), walk_allocations(prof.profiler.kineto_results)
    in_work = [_inside_work(a) for a in (mine, full)]
    assert len(in_work[0]) >= 10 and in_work[0] == in_work[1]
    # the whole point: no event per ATen operator, only record_function scopes (the user's and the optimizer's)
    tags, names = _tags(rec.results)
    assert sorted(names) == ["Optimizer.step#Adam.step", "Optimizer.zero_grad#Adam.zero_grad", "my_region"]
    assert tags.count(_EventType.Allocation) == mine.size.size
    _, full_names = _tags(prof.profiler.kineto_results)
    assert any(n.startswith("aten::") for n in full_names)
    assert not torch._C._autograd._profiler_enabled()


def test_the_stack_runs_from_the_allocating_call_out_to_the_caller():
    def inner():
        return torch.zeros(10_000)  # the line the allocation is made at

    def outer():
        return inner()

    rec = CpuRecording()
    rec.start()
    try:
        t = outer()
    finally:
        rec.stop()
    a = walk_allocations(rec.results)
    (i,) = np.flatnonzero(a.size == t.untyped_storage().nbytes())
    frames = [a.frames[f] for f in a.stacks[a.stack[i]]]
    first = inspect.getsourcelines(inner)[1] + 1
    assert __file__.endswith(frames[0][0])  # the tracer shortens paths under sys.path
    assert frames[0][1:] == (first, "inner")
    assert frames[1][1:] == (first + 3, "outer")
    assert (frames[0][0], first + 8, "test_the_stack_runs_from_the_allocating_call_out_to_the_caller") in frames


class _Node:
    """A profiler node wrapped so that the tracer's occasional garbling (torch 2.13) can be replayed: a leaf whose
    name is not UTF-8 among every node's children."""

    def __init__(self, node, garble_leaf=False):
        self._node, self._garble_leaf = node, garble_leaf

    def __getattr__(self, name):
        return getattr(self._node, name)

    @property
    def children(self):
        kids = [_Node(k, self._garble_leaf) for k in self._node.children]
        if kids and self._garble_leaf:
            kids.insert(len(kids) // 2, _GarbledLeaf())
        return kids


class _GarbledLeaf:
    children: list = []

    @property
    def name(self):
        raise UnicodeDecodeError("utf-8", b"tty.py(0): \xd4\x0f", 11, 12, "invalid continuation byte")


class _Caller:
    line_number, function_name = 7, "forward"

    @property
    def file_name(self):
        raise UnicodeDecodeError("utf-8", b"@o\xa4\x1eX", 2, 3, "invalid start byte")


class _Results:
    def __init__(self, results, **kw):
        self._results, self._kw = results, kw

    def experimental_event_tree(self):
        return [_Node(r, **self._kw) for r in self._results.experimental_event_tree()]


def test_garbled_names_from_the_tracer_neither_fail_nor_lose_allocations():
    rec = CpuRecording()
    rec.start()
    try:
        kept = [torch.ones(1000) for _ in range(3)]
    finally:
        rec.stop()
    clean = walk_allocations(rec.results)
    leaves = walk_allocations(_Results(rec.results, garble_leaf=True))
    assert _stacked(leaves) == _stacked(clean) and (clean.size == 4000).sum() == 3
    del kept


def test_a_garbled_caller_keeps_its_frame_with_a_placeholder():
    from nbdebug.core.memory._cpu_record import _caller_frame

    assert _caller_frame(_Caller()) == ("<unreadable file name>", 7, "forward")


def test_the_saved_dict_loads_back_as_the_same_model():
    rec = CpuRecording()
    rec.start()
    try:
        a = torch.ones(250_000)
        b = torch.zeros(1000)
        del a
    finally:
        rec.stop()
    model = model_of(walk_allocations(rec.results))
    again = load_snapshot(snapshot_dict_of(model)).model
    for col in ("action", "address", "size", "time_us", "device"):
        assert np.array_equal(getattr(again, col), getattr(model, col)), col
    assert [[again.frames[f] for f in again.stacks[s]] if s >= 0 else None for s in again.stack.tolist()] == \
        [[model.frames[f] for f in model.stacks[s]] if s >= 0 else None for s in model.stack.tolist()]
    assert list(model.sites) and again.sites == model.sites
    del b


def test_inside_another_profile_it_refuses_and_leaves_that_profile_whole():
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with pytest.raises(NbdebugError, match="already recording"):
            with memtrace("cpu"):
                torch.ones(10)
        torch.ones(123_457)
    assert not torch._C._autograd._profiler_enabled()
    sizes = {e.nbytes() for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"}
    assert 123_457 * 4 in sizes  # the user's own profile kept recording after memtrace refused


def test_a_recording_that_never_started_has_nothing_to_stop():
    rec = CpuRecording()
    rec.stop()
    assert rec.results is None and not torch._C._autograd._profiler_enabled()


def test_the_report_from_the_allocations_equals_the_report_from_the_snapshot_model():
    """memtrace on CPU computes its report straight from the allocations and builds the snapshot model only when
    asked; both ways give the same numbers and sites."""
    from nbdebug.core.memory._model import site_columns
    from nbdebug.core.memory._snapshot import MemorySnapshot
    from nbdebug.core.memory._trace_result import build, build_cpu

    net, x, y = _net(), torch.randn(64, 32), torch.randn(64, 1)
    opt = torch.optim.Adam(net.parameters())
    _work(net, opt, x, y)
    rec = CpuRecording()
    rec.start()
    try:
        kept = [_work(net, opt, x, y) for _ in range(2)]
        temporary = torch.ones(50_000)
        del temporary
    finally:
        rec.stop()
    a = walk_allocations(rec.results)
    cols = site_columns(a.frames, a.stacks)
    lazy = MemorySnapshot(lambda: model_of(a, cols), source="lazy")
    lean = build_cpu(a, lazy, cols, 0.0)
    assert lazy._model is None  # the report did not need the model
    full = build(MemorySnapshot(model_of(a), source="full"), "cpu", 0.0)
    for name in ("peak_bytes", "retained_bytes", "delta_bytes", "events", "top_sites", "retained_sites"):
        assert getattr(lean, name) == getattr(full, name), name
    assert lean.retained_bytes >= 2 * 4096 * 4 and lean.peak_bytes >= lean.retained_bytes + 50_000 * 4
    # the peak is the largest rise above the lowest level before it: never below the timeline's highest point (the
    # start is such a level), above it when the block first freed memory from before it (the previous grads)
    assert max(lean.timeline) == max(full.timeline) <= lean.peak_bytes
    assert lazy.summary().final_allocated_bytes - lazy.state().initial_allocated == lean.delta_bytes
    del kept


def test_a_torch_profiler_recording_converts_to_a_snapshot_dict_that_loads():
    from torch.profiler import ProfilerActivity, profile

    from nbdebug.core.memory._trace_result import profile_to_snapshot_dict

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, with_stack=True) as prof:
        kept = torch.ones(300_000)
        torch.zeros(1000)
    keys: list[tuple[int, int]] = []
    raw = profile_to_snapshot_dict(prof, keys)
    snap = load_snapshot(raw)
    allocs = [e for e in raw["device_traces"][0] if e["action"] == "alloc"]
    assert len(keys) == len(allocs) >= 2 and [k[0] for k in keys] == [e["addr"] for e in allocs]
    assert kept.untyped_storage().nbytes() in {e["size"] for e in raw["device_traces"][0] if e["action"] == "alloc"}
    assert snap.summary().final_allocated_bytes - snap.state().initial_allocated >= 1_200_000
