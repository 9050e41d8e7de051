"""OOM capture: the ``oom`` feature, its enricher fed a real OOM snapshot, and releasing a failed cell's tensors."""

from __future__ import annotations

import gc
import weakref

import pytest

from nbdebug._units import fmt_bytes
from nbdebug.core.memory import load_snapshot, release_failed_cell
from nbdebug.core.memory._oom import oom_findings, parse_oom_request
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
    assert parse_oom_request("Tried to allocate 512 bytes (GPU 1)") == (512, 1)
    assert parse_oom_request("Tried to allocate 1,024.00 MiB") == (1024**3, None)


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
    facts = dict(section.facts)
    # the failing request (rounded in the message: the snapshot's exact value wins) against the largest free block
    assert facts["failing request"] == fmt_bytes(parse_oom_request(text)[0])
    assert facts["largest free block"] == fmt_bytes(row.largest_free_block)
    assert row.largest_free_block < entry["size"]
    # what was alive, by site, as a table (data, not HTML)
    alive = snap.alive_at(index=row.event_index - 1, device=device)
    assert section.header == ("site", "bytes", "blocks")
    assert section.rows[0] == (alive.by_site[0].site, fmt_bytes(alive.by_site[0].bytes), alive.by_site[0].count)
    assert not hasattr(section, "html")
    # the verdict is a shared Finding of a memory entry; its fixes and the release fix come with the section
    (verdict,) = oom_findings(entry["size"], row.largest_free_block, row.cached_free_bytes, device=device)
    assert verdict.kind in ("memory_fragmentation", "memory_exhausted") and verdict.title in section.text
    assert any("release_failed_cell" in f.code for f in section.fixes)
    assert "sys.last_traceback" in section.notes[0]
    # laid out by the diagnosis renderer, in text and HTML, with no files the user does not have
    from nbdebug.render.diagnosis import section_html, section_text

    shown = section_text(section)
    assert f"Failing request: {fmt_bytes(parse_oom_request(text)[0])}" in shown  # facts labelled for a person
    assert alive.by_site[0].site in shown and "release_failed_cell" in shown
    html = section_html(section)
    # inline styles only for what untrusted outputs would lose (alignment), never a colour the theme cannot follow
    assert "<table" in html and "color:#" not in html and ".md" not in html


@pytest.mark.parametrize(("requested", "largest", "cached", "kind"), [
    (2 * 1024**3, 1024**3, 3 * 1024**3, "memory_fragmentation"),  # enough free in total, not in one block
    (2 * 1024**3, 1024**3, 1024**3 + 1, "memory_exhausted"),  # not enough free at all
    (1024**3, 2 * 1024**3, 3 * 1024**3, None),  # a free block could hold it: no verdict
    (None, 0, 0, None),  # request unknown
])
def test_oom_verdicts(requested, largest, cached, kind):
    found = oom_findings(requested, largest, cached, device=1)
    assert [f.kind for f in found] == ([kind] if kind else [])
    for f in found:
        assert f.severity == "error" and f.where == ("cuda:1",) and f.fixes
        assert f.evidence["requested_bytes"] == requested


def test_section_without_a_snapshot_still_says_how_to_release():
    from nbdebug.core.explain import Diagnosis
    from nbdebug.core.memory._oom import enrich_oom

    diagnosis = Diagnosis(kind="cuda_oom", title="CUDA out of memory", summary="")
    (section,) = enrich_oom(RuntimeError("CUDA out of memory."), diagnosis, None).sections
    assert "No snapshot" in section.text and "release_failed_cell" in section.fixes[0].code


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


def test_fragmentation_result_carries_the_oom_verdicts(snapshots_dir):
    snap = load_snapshot(snapshots_dir / OOM_FILE)
    frag = snap.fragmentation(1)
    assert frag.ooms
    expected = [f.kind for o in frag.ooms
                for f in oom_findings(o.requested_bytes, o.largest_free_block, o.cached_free_bytes)]
    assert [f.kind for f in frag.findings] == expected and expected  # this OOM: the request beats every free block
    assert all(f.where == ("cuda:1",) for f in frag.findings)
    assert f'data-kind="{expected[0]}"' in frag._repr_html_() and expected[0] in str(frag)
    assert snap.fragmentation(0).findings == ()  # no OOM on device 0
