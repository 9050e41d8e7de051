"""Rendering of the memory results: text, HTML (escaped), the viewer's data (bounded, exact), matplotlib figures."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from nbdebug.core.memory import load_snapshot
from nbdebug.render._html import fmt_bytes
from nbdebug.render.memory.viewer import MAX_INTERVALS, intervals, viewer_data, viewer_document, viewer_html

FILES = ["torch2.10plus_cs336_wedsonlin_medium_512_training.pickle", "torch2.0_history_flexgen_oom_snapshot.pickle",
         "no-license/segments_list_only_memory_snapshot.pkl",
         "no-license/torch2.8-2.9_expandable_oom_multigpu_memory_snapshot.pickle"]


@pytest.mark.parametrize("name", FILES)
def test_viewer_data_is_bounded_and_exact(snapshots_dir, name):
    snap = load_snapshot(snapshots_dir / name)
    data = viewer_data(snap, buckets=300)
    summary = snap.summary()
    assert len(data["x"]) <= 301 and len(data["iv_size"]) <= MAX_INTERVALS
    start, end, size, _ = intervals(data)
    total_blocks = data["intervals_total"]
    assert len(data["floor"]) == len(data["x"]) == len(data["total"]) == len(data["index"])
    assert all(f <= t for f, t in zip(data["floor"], data["total"]))
    values = np.array(data["values"])
    # the bands add up to the exact allocated bytes at every point, and the highest point is the peak
    assert (values.sum(axis=0) == np.array(data["total"])).all()
    assert max(data["total"]) == summary.peak_allocated_bytes
    assert data["total"][data["peak_point"]] == summary.peak_allocated_bytes
    # every listed interval alive at the peak adds up to no more than the peak
    p = data["index"][data["peak_point"]]
    alive = int(size[(start <= p) & (p < end)].sum())
    assert alive <= summary.peak_allocated_bytes
    if size.size == total_blocks:  # every block is in the file (packed past MAX_INTERVALS): complete
        assert alive == summary.peak_allocated_bytes
    else:
        assert size.size == MAX_INTERVALS
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
        # (a band of the stacked chart has its site's colour: data, the same in both themes)
        assert not re.search(r'(?:fill|stroke)="#', re.sub(r'<path class="band" fill="#\w+"', "", html)), name
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

    from nbdebug.render.memory.viewer import viewer_css, viewer_js

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


def _sanitised(html: str) -> tuple[str, list[str]]:
    """What a renderer that runs no script and drops <style>/<svg>/<script> shows (as JupyterLab does for an
    untrusted notebook): the visible text (nothing under a ``hidden`` element) and the images' sources."""
    from html.parser import HTMLParser

    class P(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=True)
            self.stack: list[tuple[str, bool]] = []
            self.text: list[str] = []
            self.images: list[str] = []

        def _hidden(self) -> bool:
            return any(h for _, h in self.stack)

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            drop = tag in ("script", "style")
            if tag == "img" and not self._hidden():
                self.images.append(a.get("src") or "")
            if tag not in ("img", "br", "input", "meta", "hr", "wbr"):
                self.stack.append((tag, "hidden" in a or drop))

        def handle_startendtag(self, tag, attrs):
            if tag == "img" and not self._hidden():
                self.images.append(dict(attrs).get("src") or "")

        def handle_endtag(self, tag):
            if tag not in [t for t, _ in self.stack]:
                return
            while self.stack:
                if self.stack.pop()[0] == tag:
                    break

        def handle_data(self, data):
            if not self._hidden():
                self.text.append(data)

    p = P()
    p.feed(html)
    return " ".join("".join(p.text).split()), p.images


def _svg_images(sources: list[str]) -> list[str]:
    import base64
    import xml.etree.ElementTree as ET

    out = []
    for src in sources:
        assert src.startswith("data:image/svg+xml;base64,"), src[:60]
        svg = base64.b64decode(src.split(",", 1)[1]).decode("utf-8")
        root = ET.fromstring(svg)  # well-formed XML: an image that does not parse is not drawn at all
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
        assert "var(--" not in svg.replace("var(--nbd", "").replace("var(--jp", "")
        out.append(svg)
    return out


def test_viewer_without_scripts_shows_a_static_picture_and_how_to_get_the_viewer(snapshots_dir):
    from nbdebug.render._html import INTERACTIVE_NOTE
    from nbdebug.render.memory.viewer import viewer_js

    snap = load_snapshot(snapshots_dir / FILES[0])
    html = viewer_html(snap)
    # JupyterLab's sanitiser drops attributes with an empty value: "hidden" must carry one to survive
    assert " hidden>" not in html and 'hidden="hidden"' in html
    text, images = _sanitised(html)
    assert INTERACTIVE_NOTE in text and "to_html" in text
    # the interactive parts (their controls and empty tables) are not shown without the script
    assert "go to peak" not in text and "click the chart" not in text
    # no SVG flattened into text: no tooltip text of the segments, no axis labels run together
    assert "largest free block 0x" not in text and "reserved, " not in text
    svgs = _svg_images(images)
    stacked = [s for s in svgs if "stacked by site" in s]
    assert len(stacked) == 1 and stacked[0].count("<path") >= 2
    assert any("segments" in s for s in svgs) or not snap.fragmentation().segments
    # the legend names the bands next to their colours
    from nbdebug.core.memory._bands import compute_bands

    for name in compute_bands(snap).names:
        assert name[:30] in text
    assert ".nbd-mem-static" in viewer_js() and ".nbd-live" in viewer_js()  # the live viewer swaps them


def test_static_chart_keeps_the_peak_and_draws_steps(snapshots_dir):
    from nbdebug.render.memory.plot import svg_stacked

    # 3 points: 0 B, 1 GiB, 0 B; a step chart never draws a diagonal between them
    svg = svg_stacked([0.0, 1.0, 2.0], [[0, 1 << 30, 0]], ["#123456"], x_unit="event", index=[-1, 0, 1],
                      columns=400)
    d = svg.split(' d="')[1].split('"')[0]
    assert "L" not in d and all(c in "MVHZ0123456789.,-" for c in d)
    assert "1.00 GiB" in svg
    # many points into few columns: the highest point survives
    values = [[(i % 97) * 1000 for i in range(10_000)]]
    values[0][5_003] = 10**9
    svg = svg_stacked([float(i) for i in range(10_000)], values, ["#123456"], x_unit="event",
                      index=list(range(-1, 9_999)), columns=50)
    assert "953.67 MiB" in svg  # the top grid line is the peak: 1e9 bytes
    assert svg.count("V") < 400


@pytest.mark.parametrize("kind", ["grad_history", "memtrace"])
def test_panel_charts_survive_sanitising(kind, snapshots_dir):
    """Doctor/GradMonitor/memtrace charts: the image remains and no chart's text is flattened into the panel."""
    from nbdebug.render._registry import to_html

    if kind == "grad_history":
        import torch
        from torch import nn

        from nbdebug.core.training.grads import GradMonitor

        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
        with GradMonitor(net, num_classes=3, live=False) as mon:
            for _ in range(5):
                loss = nn.functional.cross_entropy(net(x), y)
                opt.zero_grad()
                loss.backward()
                mon.log_loss(loss)
                opt.step()
        html = to_html(mon.history)
        flat = "global grad norm"
    else:
        from nbdebug.render.memory.plot import svg_sparkline

        html = svg_sparkline([0, 10, 5, 30, 2])
        flat = "peak 30 B"
    text, images = _sanitised(html)
    svgs = _svg_images(images)
    assert svgs and flat not in text
    assert any(flat in s for s in svgs)
    assert html.count("<svg") == len(svgs)  # every chart has its picture


def _one_segment_snapshot(tmp_path, blocks):
    import pickle

    seg = {"device": 0, "address": 0x7F0000000000, "total_size": 744 << 30, "allocated_size": 0, "active_size": 0,
           "requested_size": 0, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
           "is_expandable": True, "frames": [], "blocks": blocks}
    path = tmp_path / "one_segment.pickle"
    path.write_bytes(pickle.dumps({"segments": [seg], "device_traces": [[]], "allocator_settings": {}}))
    return load_snapshot(path)


def test_segments_whose_blocks_do_not_cover_them_are_explained_not_contradictory(tmp_path):
    """A segment of 744 GiB that lists only 0.28 GiB of active blocks: "reserved but free 743.72 GiB, largest
    free block 0 B" must say that the rest is in no listed block, and the bar must still show the allocated part."""
    from nbdebug.render import to_text

    active = 300 << 20
    snap = _one_segment_snapshot(tmp_path, [{"address": 0x7F0000000000, "size": active, "requested_size": active,
                                             "state": "active_allocated", "frames": []}])
    frag = snap.fragmentation(0)
    assert frag.reserved_bytes == 744 << 30 and frag.allocated_bytes == active
    assert frag.unlisted_bytes == (744 << 30) - active == frag.free_bytes
    assert frag.largest_free_block == 0 and frag.fragmentation == 0.0  # no listed free block: nothing to split
    text = to_text(frag)
    assert "largest listed free block 0 B" in text and "lie in no block the snapshot lists" in text
    html = viewer_html(snap)
    assert "largest listed free block 0 B" in html and "lie in no block the snapshot lists" in html
    widths = [float(w) for w in re.findall(r'class="seg-allocated"[^>]*width="([\d.]+)"', html)]
    assert widths and min(widths) >= 1.0  # 0.04% of the bar, still drawn
    assert 'class="seg-unlisted"' in html


def test_complete_snapshots_list_every_byte_of_their_segments(snapshots_dir):
    for name in FILES:
        snap = load_snapshot(snapshots_dir / name)
        for d in snap.devices:
            frag = snap.fragmentation(d)
            assert frag.unlisted_bytes == 0, (name, d)
            assert "no listed block" not in viewer_html(snap, d)


def test_window_model_is_exact_when_zoomed_and_agrees_with_the_overview(snapshots_dir):
    from nbdebug.core.memory._bands import compute_bands
    from nbdebug.core.memory._window import WindowModel

    snap = load_snapshot(snapshots_dir / FILES[0])
    w = WindowModel(snap)
    st = snap.state()
    # the whole trace at 1000 columns: more events than columns, so an envelope; its highest point is the peak
    whole = w.envelope(float(w.x[0]), float(w.x[-1]), 1000)
    assert not whole["exact"] and len(whole["x"]) <= 1000 and max(whole["total"]) == int(st.allocated.max())
    assert all(lo <= hi for lo, hi in zip(whole["floor"], whole["total"]))
    # bands add up to the total at every point, and match the overview's bands where both have a point
    values = np.array(whole["values"])
    assert (values.sum(axis=0) == np.array(whole["total"])).all()
    bands = compute_bands(snap)
    common = {int(i): j for j, i in enumerate(bands.index.tolist())}
    for j, i in enumerate(whole["index"]):
        if i in common:
            assert (values[:, j] == bands.values[:, common[i]]).all()
    # a window of 200 events: every event is a point, in order, with its exact allocated bytes
    a = st.n // 2
    win = w.envelope(float(w.x[a + 1]), float(w.x[a + 200]), 1000)
    assert win["exact"]
    assert win["index"] == list(range(win["index"][0], win["index"][0] + len(win["index"])))
    assert win["index"][0] <= a and win["index"][-1] >= a + 199
    assert win["total"] == [int(st.allocated[i]) if i >= 0 else st.initial_allocated for i in win["index"]]
    with pytest.raises(Exception, match="low to high"):
        w.envelope(5.0, 1.0)


def test_every_block_alive_is_listed_and_adds_up_to_the_allocated_bytes(snapshots_dir):
    from nbdebug.core.memory._window import WindowModel

    for name in FILES[:4]:
        snap = load_snapshot(snapshots_dir / name)
        w = WindowModel(snap)
        n = w.events
        for event in sorted({-1, 0, n // 3, n // 2, n - 1}):
            page = w.alive_page(event, 0, 10)
            assert page["bytes"] == page["allocated"], (name, event)  # complete: nothing left out
            assert sum(s[1] for s in page["sites"]) == page["bytes"]
            # paging walks every block once, largest first
            seen, offset = [], 0
            while offset < page["count"] and offset < 2000:
                rows = w.alive_page(event, offset, 500)["rows"]
                seen += [r["bytes"] for r in rows]
                offset += 500
            if page["count"] <= 2000:
                assert len(seen) == page["count"] and sum(seen) == page["bytes"]
                assert seen == sorted(seen, reverse=True)


def test_live_answers_never_raise():
    from nbdebug.render.memory.widget import answer

    snap = load_snapshot(__import__("nbdebug").examples.path("snapshots/forward_fp32_128.pickle"))
    from nbdebug.core.memory._window import WindowModel

    models = {0: WindowModel(snap, 0)}
    assert "error" in answer(models, "not json")
    assert "error" in answer(models, "[1, 2]")
    assert answer(models, '{"op": "drop tables", "seq": 4}') == {
        "seq": 4, "error": "unknown request 'drop tables'; expected 'window' or 'alive'"}
    assert "error" in answer(models, '{"op": "window", "x0": "a", "x1": 2, "seq": 1}')
    assert "error" in answer(models, '{"op": "alive", "event": 1, "device": 7, "seq": 1}')
    ok = answer(models, '{"op": "alive", "event": 10, "seq": 9}')
    assert ok["seq"] == 9 and ok["bytes"] == ok["allocated"]


def test_the_file_holds_every_event_compactly(snapshots_dir):
    """The per-event columns in the file rebuild the exact allocated bytes after every event."""
    import base64
    import gzip

    snap = load_snapshot(snapshots_dir / FILES[0])
    data = viewer_data(snap)
    st = snap.state()
    fine = data["fine"]
    delta = np.frombuffer(gzip.decompress(base64.b64decode(fine["delta"])), "<f8")
    band = np.frombuffer(gzip.decompress(base64.b64decode(fine["band"])), np.uint8)
    assert delta.size == band.size == st.n
    assert (st.initial_allocated + np.cumsum(delta) == st.allocated).all()
    assert fine["x0"] == st.x[0] and sum(fine["initial"]) == st.initial_allocated
    x = fine["x0"] + np.cumsum(np.frombuffer(gzip.decompress(base64.b64decode(fine["dx"])), "<f8"))
    assert np.abs(x - st.x).max() < 1e-3  # times rebuilt from their steps: within a nanosecond
    # each band's bytes at the overview's points come back from the deltas of its events
    values = np.array(data["values"])
    for k in range(len(data["names"]) - 1):
        series = fine["initial"][k] + np.concatenate([[0], np.cumsum(np.where(band == k, delta, 0))])
        assert (series[np.array(data["index"]) + 1] == values[k]).all()
    # compact: a small part of the file (the 1M-event benchmark trace's file is under 3 MiB in all)
    assert sum(len(fine[k]) for k in ("delta", "band", "dx")) < 8 * st.n


def test_diff_shows_what_grew_by_site_at_the_peak_and_at_the_end(snapshots_dir):
    a = load_snapshot(snapshots_dir / "torch2.5plus_octree-nca_my_snapshot_a.pickle")
    b = load_snapshot(snapshots_dir / "torch2.5plus_octree-nca_my_snapshot_b.pickle")
    d = a.diff(b)
    peak = d.peak_rows()
    assert sum(r.before_bytes for r in peak) == a.peak().bytes and sum(r.after_bytes for r in peak) == b.peak().bytes
    assert [abs(r.delta_bytes) for r in peak] == sorted((abs(r.delta_bytes) for r in peak), reverse=True)
    assert "_before" not in d.to_dict()  # the snapshots are not part of the data
    html = d._repr_html_()
    text, images = _sanitised(html)
    svgs = _svg_images(images)
    timelines = [s for s in svgs if "both snapshots on one time axis" in s]
    assert len(timelines) == 1
    assert fmt_bytes(a.peak().bytes) in timelines[0] and fmt_bytes(b.peak().bytes) in timelines[0]
    bars = [s for s in svgs if "change at the peak" in s]
    top = peak[0]
    assert bars and ("+" if top.delta_bytes > 0 else "-") + fmt_bytes(abs(top.delta_bytes)) in bars[0]
    assert "at the peak: what grew or shrank" in text and top.site in text


def test_several_devices_without_scripts_show_every_device(snapshots_dir):
    from nbdebug.render._html import INTERACTIVE_NOTE

    snap = load_snapshot(snapshots_dir / "no-license/torch2.8-2.9_expandable_oom_multigpu_memory_snapshot.pickle")
    html = viewer_html(snap)
    assert 'style="display:none"' not in html  # the script hides the other devices; a sanitised page shows them all
    text, images = _sanitised(html)
    for d in snap.devices:
        assert f"device {d}" in text
    assert text.count(INTERACTIVE_NOTE) == len(snap.devices) and "devices:" not in text  # no dead selector
    assert len([s for s in _svg_images(images) if "stacked by site" in s]) == len(snap.devices)


def test_a_trace_with_more_blocks_than_the_json_list_embeds_them_all_packed(tmp_path):
    """Past MAX_INTERVALS blocks the file packs every block (when small enough): alive-at stays complete."""
    import pickle

    frames = [{"filename": "/home/u/train.py", "line": 7, "name": "step"}]
    trace = []
    for i in range(MAX_INTERVALS + 500):  # allocations that stay alive, of mixed sizes
        trace.append({"action": "alloc", "addr": 0x7F0000000000 + i * 4096, "size": 512 * (1 + i % 7), "stream": 0,
                      "time_us": 1_000_000 + i, "frames": frames})
    path = tmp_path / "many.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [trace]}))
    snap = load_snapshot(path)
    data = viewer_data(snap)
    assert data["iv_packed"] and data["iv_size"] == []
    start, end, size, stack = intervals(data)
    assert size.size == data["intervals_total"] == MAX_INTERVALS + 500
    p = snap.state().n - 1
    assert int(size[(start <= p) & (p < end)].sum()) == int(snap.state().allocated[p])
    assert stack.max() < len(data["stacks"])


def test_the_file_stays_within_its_size_budget_per_event(tmp_path):
    """<= 20 MiB for 1M events, i.e. about 21 bytes an event, with every event and every block embedded."""
    import pickle
    import random

    rng = random.Random(0)
    stacks = [[{"filename": f"/home/u/proj/model_{i % 7}.py", "line": 10 + i, "name": f"layer{i}"},
               {"filename": "/home/u/proj/train.py", "line": 40 + i % 5, "name": "step"}] for i in range(300)]
    trace, live, t = [], [], 1_750_000_000_000_000
    n_events = 200_000
    while len(trace) < n_events:
        t += rng.randrange(1, 6)
        if live and (len(live) > 3000 or rng.random() < 0.5):
            addr, size, frames = live.pop(rng.randrange(len(live)))
            for action in ("free_requested", "free_completed"):
                trace.append({"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t, "frames": frames})
        else:
            addr, size = 0x7F0000000000 + len(trace) * 4096, rng.choice((512, 4096, 1 << 20, 3 << 20, 8 << 20))
            frames = rng.choice(stacks)
            live.append((addr, size, frames))
            trace.append({"action": "alloc", "addr": addr, "size": size, "stream": 0, "time_us": t, "frames": frames})
    path = tmp_path / "big.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [trace[:n_events]]}))
    snap = load_snapshot(path)
    data = viewer_data(snap)
    assert data["fine"] is not None and data["iv_packed"] is not None  # every event and every block are in it
    doc = viewer_document(snap)
    assert len(doc.encode()) <= n_events * (20 << 20) / 1_000_000, len(doc)


def test_the_tutorials_example_snapshot_has_stacks_so_its_chart_is_not_one_flat_area():
    """The snapshot shipped for the tutorial is stacked by the model's own lines at its peak, not one band of
    "<no stack recorded>"; it is small, and its source and licence are written down next to it."""
    import nbdebug.examples as ex
    from nbdebug.core.memory._bands import compute_bands

    path = ex.path("snapshots/transformer_step.pickle")
    assert path.stat().st_size < 1 << 20
    assert "transformer_step.pickle" in path.with_name("SOURCES.md").read_text() and "MIT" in (
        path.with_name("SOURCES.md").read_text())
    notebook = (ex.path("snapshots/SOURCES.md").parents[3] / "notebooks" / "02_memory.ipynb")
    if notebook.exists():  # a checkout: the tutorial opens this one
        assert "snapshots/transformer_step.pickle" in notebook.read_text()
    bands = compute_bands(load_snapshot(path))
    peak = int(np.argmax(bands.total))
    share = {name: bands.values[k][peak] / bands.total[peak] for k, name in enumerate(bands.names)}
    assert share.get("<no stack recorded>", 0) < 0.25, share
    assert sum(1 for name, v in share.items() if v >= 0.05 and not name.startswith("<")) >= 4, share


def test_the_live_viewer_is_a_standard_widget_and_names_its_extra_when_missing(monkeypatch):
    """snap.view(): an anywidget whose ES module is package data (the viewer's script and viewer_widget.js), whose
    requests are answered through the widget's own messages; without anywidget, one error naming the extra."""
    import sys

    import nbdebug.examples as ex
    from nbdebug.errors import MissingDependencyError
    from nbdebug.render._html import static
    from nbdebug.render.memory import widget

    snap = load_snapshot(ex.path("snapshots/transformer_step.pickle"))
    view = snap.view()
    esm = view.widget._esm
    assert static("viewer_widget.js") in esm and "export default" in esm and "model.send" in esm
    assert "querySelector('.nbdmem-req" not in esm and ".jp-Cell" not in esm  # no lookups in the page
    sent = []
    monkeypatch.setattr(view.widget, "send", sent.append)
    view._on_msg(view.widget, {"op": "hello", "seq": 1}, [])
    view._on_msg(view.widget, {"op": "window", "x0": 0, "x1": 1e18, "width": 100, "seq": 2}, [])
    assert sent[0] == {"seq": 1, "op": "hello", "ok": True}
    assert sent[1]["seq"] == 2 and sent[1]["events"] == snap.state().n + 1 and len(sent[1]["x"]) <= 100
    # where widgets do not render (GitHub, nbviewer) the widget is one line of words; the HTML before it is the viewer
    data = view.widget._repr_mimebundle_()[0]
    assert "live memory viewer" in data["text/plain"] and "application/vnd.jupyter.widget-view+json" in data
    assert f'data-live="{view.token}"' in view._repr_html_()
    monkeypatch.setattr(widget, "_WIDGET_CLASS", [])
    monkeypatch.setitem(sys.modules, "anywidget", None)
    with pytest.raises(MissingDependencyError, match=r"nbdebug\[widgets\]"):
        snap.view()
