"""Rendering of the memory results: text, HTML (escaped), the viewer's data (bounded, exact), matplotlib figures."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from nbdebug.core.memory import load_snapshot
from nbdebug.render._html import fmt_bytes
from nbdebug.render.memory_viewer import MAX_INTERVALS, viewer_data, viewer_document, viewer_html

FILES = ["torch2.10plus_cs336_wedsonlin_medium_512_training.pickle", "torch2.0_history_flexgen_oom_snapshot.pickle",
         "no-license/segments_list_only_memory_snapshot.pkl",
         "no-license/torch2.8-2.9_expandable_oom_multigpu_memory_snapshot.pickle"]


@pytest.mark.parametrize("name", FILES)
def test_viewer_data_is_bounded_and_exact(snapshots_dir, name):
    snap = load_snapshot(snapshots_dir / name)
    data = viewer_data(snap, buckets=300)
    summary = snap.summary()
    assert len(data["x"]) <= 301 and len(data["iv_size"]) <= MAX_INTERVALS
    assert len(data["floor"]) == len(data["x"]) == len(data["total"]) == len(data["index"])
    assert all(f <= t for f, t in zip(data["floor"], data["total"]))
    values = np.array(data["values"])
    # the bands add up to the exact allocated bytes at every point, and the highest point is the peak
    assert (values.sum(axis=0) == np.array(data["total"])).all()
    assert max(data["total"]) == summary.peak_allocated_bytes
    assert data["total"][data["peak_point"]] == summary.peak_allocated_bytes
    # every listed interval alive at the peak adds up to no more than the peak
    p = data["index"][data["peak_point"]]
    alive = sum(s for a, b, s in zip(data["iv_start"], data["iv_end"], data["iv_size"]) if a <= p < b)
    assert alive <= summary.peak_allocated_bytes
    if len(data["iv_size"]) < MAX_INTERVALS:
        assert alive == summary.peak_allocated_bytes
    json.dumps(data, allow_nan=False)


def test_viewer_html_is_self_contained(snapshots_dir):
    doc = viewer_document(load_snapshot(snapshots_dir / FILES[0]))
    assert doc.startswith("<!DOCTYPE html>")
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=|https?://|@import", doc)


def test_hostile_names_are_escaped():
    evil = "</script><script>alert(1)</script>"
    raw = {"segments": [], "device_traces": [[
        {"action": "alloc", "addr": 1, "size": 4096, "stream": 0,
         "frames": [{"filename": f"/x/{evil}.py", "line": 3, "name": evil}]}]]}
    snap = load_snapshot(raw, name=f"<b>{evil}</b>")
    html = viewer_html(snap)
    assert html.count("<script") == 2  # the data block and the viewer's own script
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)" in html  # escaped, shown as text
    for result in (snap.summary(), snap.peak(), snap.fragmentation()):
        rendered = result._repr_html_()
        assert "<script>alert" not in rendered


def test_text_reports(snapshots_dir):
    snap = load_snapshot(snapshots_dir / FILES[3])
    s = snap.summary()
    text = str(s)
    assert fmt_bytes(s.peak_allocated_bytes) in text and "OOM on device 1" in text
    assert s.top_sites[0].site in text
    assert "reserved but free" in str(snap)
    frag = snap.fragmentation(1)
    assert "OOM: requested" in str(frag)
    assert fmt_bytes(snap.peak().bytes) in str(snap.peak())
    assert "never freed" in str(snap.never_freed())
    other = load_snapshot(snapshots_dir / FILES[0])
    assert "->" in str(other.diff(other))


def test_plot_returns_a_figure(snapshots_dir):
    from matplotlib.figure import Figure

    snap = load_snapshot(snapshots_dir / FILES[0])
    fig = snap.plot()
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert ax.get_ylabel().startswith("allocated") and len(ax.collections) >= 2
    fig2 = Figure()
    ax2 = fig2.add_subplot()
    assert snap.plot(ax=ax2) is fig2
    assert isinstance(load_snapshot(snapshots_dir / FILES[2]).plot(), Figure)  # no trace: final state only


def test_notebook_display_is_the_viewer(shell, snapshots_dir):
    snap = load_snapshot(snapshots_dir / FILES[1])
    data, _ = shell.display_formatter.format(snap)
    assert 'class="nbd-mem"' in data["text/html"] and "peak allocated" in data["text/plain"]


def _results(snapshots_dir):
    snap = load_snapshot(snapshots_dir / FILES[3])
    other = load_snapshot(snapshots_dir / FILES[0])
    return [snap.summary(), snap.timeline(), snap.peak(), snap.top_sites(5), snap.fragmentation(1),
            snap.never_freed(), snap.annotations(), other.annotations(), other.diff(snap), snap]


def test_every_result_has_its_own_html_renderer_that_follows_the_theme(snapshots_dir):
    from nbdebug.render import renderer, to_html

    for result in _results(snapshots_dir):
        name = type(result).__name__
        assert renderer(result, "html") is not None, name
        assert renderer(result, "text") is not None, name
        html = to_html(result)
        assert f"<summary>{name}</summary>" not in html  # not the generic text-in-a-<pre> panel
        # no hard-coded text colours: panels take theirs from the theme variables
        assert not re.search(r'style="[^"]*(?<![-\w])color\s*:\s*#', html), name
        assert not re.search(r'(?:fill|stroke)="#', html), name
        assert ".md" not in html and "shared/notes" not in html


def test_result_html_shows_the_numbers(snapshots_dir):
    snap = load_snapshot(snapshots_dir / FILES[3])
    tl = snap.timeline()
    html = tl._repr_html_()
    assert fmt_bytes(int(tl.allocated.max())) in html and "<svg" in html
    sites = snap.top_sites(3)
    html = sites._repr_html_()
    assert all(s.site.replace("<", "&lt;").replace(">", "&gt;") in html for s in sites.sites)
    never = snap.never_freed()
    assert fmt_bytes(never.bytes) in never._repr_html_()
    other = load_snapshot(snapshots_dir / FILES[0])
    diff = other.diff(snap)
    assert fmt_bytes(diff.rows[0].before_bytes) in diff._repr_html_()
    assert "OOM: requested" in snap.fragmentation(1)._repr_html_()


def test_snapshot_repr_is_one_cheap_line(snapshots_dir, monkeypatch):
    snap = load_snapshot(snapshots_dir / FILES[0])

    def expensive(*args, **kwargs):
        raise AssertionError("repr must not replay the trace")

    monkeypatch.setattr(snap, "summary", expensive)
    monkeypatch.setattr(snap, "state", expensive)
    line = repr(snap)
    assert "\n" not in line and line.startswith("<MemorySnapshot") and f"{snap.events} events" in line


def test_viewer_assets_are_package_files_and_theme_aware(snapshots_dir):
    from importlib.resources import files

    from nbdebug.render.memory_viewer import viewer_css, viewer_js

    static = files("nbdebug.render").joinpath("static")
    assert static.joinpath("viewer.js").read_text(encoding="utf-8") == viewer_js()
    assert static.joinpath("viewer.css").read_text(encoding="utf-8") == viewer_css()
    assert "var(--jp-" in viewer_css()
    html = viewer_html(load_snapshot(snapshots_dir / FILES[1]))
    doc = viewer_document(load_snapshot(snapshots_dir / FILES[1]))
    for out in (html, doc):
        assert viewer_css() in out and viewer_js().split("ROOT_ID")[0] in out
    # colours in the drawn chart come from CSS classes, not literals in the markup the script writes
    assert not re.search(r"(?:stroke|fill)=\"#", viewer_js())


def test_viewer_without_scripts_shows_a_static_outline_and_how_to_get_the_viewer(snapshots_dir):
    from nbdebug.render.memory_viewer import viewer_js

    html = viewer_html(load_snapshot(snapshots_dir / FILES[0]))
    static = html[html.index('<div class="nbd-mem-static">'):html.index('<svg class="chart"')]
    assert "<polyline" in static and "trusted notebook" in static and "to_html" in static
    assert ".nbd-mem-static" in viewer_js()  # the live viewer removes the outline
