"""OOM capture: the ``oom`` feature, its enricher fed a real OOM snapshot, and releasing a failed cell's tensors."""

from __future__ import annotations

import gc
import weakref

import pytest

from nbdebug.core.memory import load_snapshot, release_failed_cell
from nbdebug.core.memory._oom import parse_oom_request
from tests.test_snapshot import _raw

OOM_FILE = "no-license/torch2.8-2.9_expandable_oom_multigpu_memory_snapshot.pickle"


def _oom_message(raw) -> tuple[str, dict, int]:
    device, entry = next((d, e) for d, t in enumerate(raw["device_traces"]) for e in t if e["action"] == "oom")
    gib = entry["size"] / 1024**3
    free = entry["device_free"] / 1024**2
    text = (f"CUDA out of memory. Tried to allocate {gib:.2f} GiB. GPU {device} has a total capacity of 79.25 GiB "
            f"of which {free:.2f} MiB is free. Including non-PyTorch memory, this process has 79.15 GiB memory in "
            "use. Of the allocated memory 78.29 GiB is allocated by PyTorch, and 130.00 MiB is reserved by PyTorch "
            "but unallocated.")
    return text, entry, device


def test_parse_request_from_real_message_shapes():
    assert parse_oom_request("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.35 GiB total capacity; "
                             "76.28 GiB already allocated; 1.45 GiB free; 77.50 GiB reserved in total by PyTorch)"
                             ) == (2 * 1024**3, 0)
    assert parse_oom_request("CUDA out of memory. Tried to allocate 20.00 MiB. GPU 3 has a total capacity") == (
        20 * 1024**2, 3)
    assert parse_oom_request("something else") == (None, None)


def test_enricher_adds_the_snapshot_section(ip, snapshots_dir):
    torch = pytest.importorskip("torch")
    from nbdebug.ipython._explainer import diagnose_exception
    from nbdebug.ipython._extension import get_state

    raw = _raw(snapshots_dir / OOM_FILE)
    text, entry, device = _oom_message(raw)
    state = get_state(ip)
    ip.run_line_magic("nbdebug", "oom on")
    try:
        assert state.features["oom"].on
        state.oom_capture.snapshot = load_snapshot(snapshots_dir / OOM_FILE)
        exc = torch.OutOfMemoryError(text)
        diagnosis = diagnose_exception(state, exc)
    finally:
        ip.run_line_magic("nbdebug", "oom off")
    (section,) = [s for s in diagnosis.sections if "OOM" in s.title]
    snap = load_snapshot(snapshots_dir / OOM_FILE)
    row = snap.fragmentation(device).ooms[0]
    from nbdebug.render._html import fmt_bytes

    # the failing request (rounded in the message: the snapshot's exact value wins) against the largest free block
    assert f"failing request: {fmt_bytes(parse_oom_request(text)[0])}" in section.text
    assert f"largest free block: {fmt_bytes(row.largest_free_block)}" in section.text
    assert row.largest_free_block < entry["size"]
    alive = snap.alive_at(index=row.event_index - 1, device=device)
    assert alive.by_site[0].site in section.text
    assert "release_failed_cell" in section.text and "sys.last_traceback" in section.text
    assert "<table>" in section.html


def test_enricher_leaves_other_errors_and_off_feature_alone(ip, snapshots_dir):
    from nbdebug.ipython._explainer import diagnose_exception
    from nbdebug.ipython._extension import get_state

    state = get_state(ip)
    state.oom_capture.snapshot = load_snapshot(snapshots_dir / OOM_FILE)
    oom = RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert not any("OOM" in s.title for s in diagnose_exception(state, oom).sections)  # feature off
    ip.run_line_magic("nbdebug", "oom on")
    try:
        assert not diagnose_exception(state, ValueError("shapes")).sections
        assert any("OOM" in s.title for s in diagnose_exception(state, oom).sections)
    finally:
        ip.run_line_magic("nbdebug", "oom off")


def test_release_failed_cell_frees_the_tensors(ip):
    torch = pytest.importorskip("torch")
    cell = ("import torch, weakref\n"
            "def step():\n"
            "    activations = torch.ones(1_000_000)\n"
            "    refs.append(weakref.ref(activations))\n"
            "    raise RuntimeError('CUDA out of memory. Tried to allocate 2.00 GiB')\n"
            "refs = []\n"
            "kept_global = torch.zeros(3)\n"
            "step()\n")
    from IPython.utils.capture import capture_output

    with capture_output():
        ip.run_cell(cell)
    ref = ip.user_ns["refs"][0]
    gc.collect()
    assert ref() is not None  # the stored traceback keeps the failed cell's tensor alive
    assert release_failed_cell(ip) is None  # no CUDA here: nothing to report in bytes
    assert ref() is None
    # the user's namespace (the failed cell's module frame) is untouched
    assert ip.user_ns["kept_global"].shape == (3,) and ip.user_ns["refs"] == [ref]
    assert isinstance(torch.ones(1), torch.Tensor)


def test_feature_switch_and_unload(ip):
    from nbdebug.ipython._extension import get_state

    state = get_state(ip)
    ip.run_line_magic("nbdebug", "oom on")
    assert state.features["oom"].on
    ip.run_line_magic("nbdebug", "oom off")
    assert not state.features["oom"].on
    assert state.oom_capture.enrich in state.enrichers
    status = ip.run_line_magic("nbdebug", "")
    assert "oom" in str(status)
    assert weakref.ref(state)
