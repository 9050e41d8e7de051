"""The CUDA code paths, driven through a stand-in for ``torch.cuda.memory`` that returns real snapshots.

There is no GPU here; these tests check the calls nbdebug makes to PyTorch's documented recording API (history on
with the right settings, snapshot, history off in ``finally``, the OOM feature's settings restored after a
``%%memtrace``) and that what comes back is analysed like any snapshot.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from nbdebug.core.memory import load_snapshot, memtrace  # noqa: E402
from tests.test_snapshot import _raw  # noqa: E402

TRACE_FILE = "torch2.5-2.7_cs336_silmont_forward_fp32_128.pickle"
OOM_FILE = "no-license/torch2.8-2.9_expandable_oom_multigpu_memory_snapshot.pickle"


class FakeCudaMemory:
    def __init__(self, snapshot):
        self.snapshot = snapshot
        self.calls: list[tuple] = []
        self.observers: list = []

    def _record_memory_history(self, enabled="all", context="all", stacks="all", max_entries=None, **kw):
        self.calls.append(("record", enabled, context, stacks, max_entries))

    def _snapshot(self, *a, **kw):
        self.calls.append(("snapshot",))
        return self.snapshot

    def attach(self, fn):
        self.observers.append(fn)


@pytest.fixture()
def fake_cuda(monkeypatch, snapshots_dir):
    fake = FakeCudaMemory(_raw(snapshots_dir / TRACE_FILE))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "memory", fake)
    monkeypatch.setattr(torch._C, "_cuda_attach_out_of_memory_observer", fake.attach, raising=False)
    from nbdebug.core.memory._trace import cuda_recording

    monkeypatch.setitem(cuda_recording, "keep_on", None)
    return fake


def test_memtrace_records_snapshots_and_stops(fake_cuda, snapshots_dir):
    with memtrace(max_entries=5000) as rec:
        pass
    assert fake_cuda.calls == [("record", "all", "all", "python", 5000), ("snapshot",), ("record", None, "all", "all",
                                                                                               None)]
    r = rec.result
    snap = load_snapshot(snapshots_dir / TRACE_FILE)
    st = snap.state()
    assert r.device_kind == "cuda:0"
    assert r.peak_bytes == int(st.allocated.max()) - st.initial_allocated
    assert r.delta_bytes == int(st.allocated[-1]) - st.initial_allocated
    live: dict[int, int] = {}
    for e in _raw(snapshots_dir / TRACE_FILE)["device_traces"][0]:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
        elif e["action"] == "free_completed":
            live.pop(e["addr"], None)
    assert r.retained_bytes == sum(live.values())
    assert r.top_sites and sum(s.bytes for s in r.top_sites) == r.peak_bytes


def test_memtrace_stops_recording_when_the_block_raises(fake_cuda):
    with pytest.raises(KeyboardInterrupt):
        with memtrace(stacks=False):
            raise KeyboardInterrupt
    assert fake_cuda.calls[0] == ("record", "all", None, "python", 1_000_000)
    assert fake_cuda.calls[-1][:2] == ("record", None)


def test_oom_feature_keeps_history_and_memtrace_restores_it(ip, fake_cuda, snapshots_dir):
    from nbdebug.ipython._explainer import diagnose_exception
    from nbdebug.ipython._extension import get_state
    from nbdebug.ipython._memory import OomCapture, _on_oom

    monkey_attached = OomCapture._observer_attached
    OomCapture._observer_attached = False
    state = get_state(ip)
    try:
        ip.run_line_magic("nbdebug", "oom on")
        on = fake_cuda.calls[-1]
        assert on[:2] == ("record", "all") and fake_cuda.observers == [_on_oom]
        # a %%memtrace cell in between: fresh history for the cell, then the OOM feature's settings again
        fake_cuda.calls.clear()
        ip.run_cell_magic("memtrace", "", "x = 1")
        assert fake_cuda.calls[0][:2] == ("record", None) and fake_cuda.calls[-1] == on
        # the allocator reports an OOM: the observer keeps the snapshot, the explainer shows it
        fake_cuda.snapshot = _raw(snapshots_dir / OOM_FILE)
        _on_oom(1, 5308694528, 0, 95682560)
        exc = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.94 GiB. GPU 1 has a total capacity of "
                                     "79.25 GiB of which 91.25 MiB is free.")
        diagnosis = diagnose_exception(state, exc)
        (section,) = [s for s in diagnosis.sections if "OOM" in s.title]
        facts = dict(section.facts)
        assert facts["failing request"] == "4.94 GiB" and "largest free block" in facts
        assert section.rows and "memory_exhausted" not in section.text  # titles, not slugs, are shown
        fake_cuda.calls.clear()
        ip.run_line_magic("nbdebug", "oom off")
        assert fake_cuda.calls == [("record", None, "all", "all", None)]
    finally:
        OomCapture._observer_attached = monkey_attached
