"""The memory viewer in a real headless Chromium: as an offline file (network off) and inside JupyterLab."""

from __future__ import annotations

import pytest

from nbdebug.core.memory import load_snapshot
from nbdebug.core.memory._bands import compute_bands
from tests.browser.conftest import run_notebook, shot

pytestmark = pytest.mark.browser

FILE = "torch2.10plus_cs336_wedsonlin_medium_512_training.pickle"


def _check_viewer(page, root: str, bands: int) -> None:
    page.wait_for_selector(f"{root} svg.chart polygon.band", timeout=60_000)
    assert page.locator(f"{root} svg.chart polygon.band").count() == bands
    assert page.locator(f"{root} svg.chart").is_visible()
    assert page.locator(f"{root} .nbd-mem-static").count() == 0  # the live script replaced the static outline
    # the peak is selected on load: the alive tables are filled and the sites table is visible
    assert page.locator(f"{root} table.alive-blocks tbody tr").count() > 0
    assert "(the peak)" in page.locator(f"{root} .moment-summary").inner_text()
    assert page.locator(f"{root} h4:has-text('Top allocation sites') + table tbody tr").count() > 0
    assert page.locator(f"{root} svg.segments rect").count() > 0
    # choose another moment: near the start of the chart
    box = page.locator(f"{root} svg.chart").bounding_box()
    page.mouse.click(box["x"] + box["width"] * 0.12, box["y"] + box["height"] * 0.5)
    summary = page.locator(f"{root} .moment-summary").inner_text()
    assert "(the peak)" not in summary and "allocated" in summary
    assert page.locator(f"{root} svg.chart line.moment").count() == 1
    # clicking a block shows its stack
    page.locator(f"{root} table.alive-blocks tbody tr").first.click()
    assert "allocated at" in page.locator(f"{root} pre.stack").inner_text()
    # narrow the time range with the slider
    before = page.locator(f"{root} .range-label").inner_text()
    page.locator(f"{root} input.lo").evaluate("(el) => { el.value = String(Math.floor(el.max / 2));"
                                              " el.dispatchEvent(new Event('input')); }")
    assert page.locator(f"{root} .range-label").inner_text() != before
    page.locator(f"{root} button.reset").click()
    page.locator(f"{root} button.peak").click()
    assert page.locator(f"{root} .range-label").inner_text() == before
    # zoomed to a window that leaves the peak out, "go to peak" moves the window so the peak shows
    peak_at, n = page.locator(root).first.evaluate(
        "el => { const d = JSON.parse(el.querySelector('script.nbd-mem-data').textContent);"
        " return [d.peak_point, d.x.length]; }")
    lo, hi = (peak_at + 5, min(n - 1, peak_at + 15)) if peak_at + 15 < n else (max(0, peak_at - 15), peak_at - 5)
    page.locator(f"{root} input.lo").evaluate(f"(el) => {{ el.value = '{lo}'; el.dispatchEvent(new Event('input')); }}")
    page.locator(f"{root} input.hi").evaluate(f"(el) => {{ el.value = '{hi}'; el.dispatchEvent(new Event('input')); }}")
    page.locator(f"{root} button.peak").click()
    assert "(the peak)" in page.locator(f"{root} .moment-summary").inner_text()
    assert page.locator(f"{root} svg.chart line.moment").count() == 1  # the marked moment is inside the window
    # a cut list says how much it left out
    listed = int(page.locator(f"{root} .moment-summary").inner_text().split(" blocks listed")[0].split("; ")[-1])
    if listed > 60:
        assert f"+{listed - 60} more blocks" in page.locator(f"{root} table.alive-blocks tr.more").inner_text()
    page.locator(f"{root} button.reset").click()  # leave the whole trace in view (for the screenshots)
    page.locator(f"{root} button.peak").click()


def test_offline_html_file(page, snapshots_dir, tmp_path):
    from nbdebug.core.memory._window import WindowModel

    snap = load_snapshot(snapshots_dir / FILE)
    out = tmp_path / "viewer.html"
    snap.to_html(out)
    requests: list[str] = []
    page.context.set_offline(True)
    page.on("request", lambda r: requests.append(r.url))
    page.goto(out.as_uri())
    _check_viewer(page, ".nbd-mem", len(compute_bands(snap).names))
    assert all(u.startswith(("file:", "data:")) for u in requests), requests
    # the file holds every event: zooming in ends at single events, offline, with the exact bytes of each
    exactness = page.locator(".nbd-mem .exactness")
    assert "this file holds every event" in exactness.inner_text()
    page.locator(".nbd-mem button.peak").click()
    for _ in range(8):
        if exactness.inner_text().startswith("exact: every one"):
            break
        page.locator(".nbd-mem button.zoom-in").click()
    assert exactness.inner_text().startswith("exact: every one"), exactness.inner_text()
    box = page.locator(".nbd-mem svg.chart").bounding_box()
    st = snap.state()
    for frac in (0.3, 0.7):
        page.mouse.click(box["x"] + box["width"] * frac, box["y"] + box["height"] * 0.5)
        event, allocated = page.locator(".nbd-mem .moment-summary").evaluate(
            "el => [+el.querySelector('.event').textContent, +el.querySelector('.allocated').dataset.bytes]")
        assert allocated == int(st.allocated[event])
        # every block is in the file: the list is complete, nothing is said to be left out
        summary = page.locator(".nbd-mem .moment-summary").inner_text()
        assert "not in this file" not in summary
        listed = int(summary.split(" blocks listed")[0].split("; ")[-1])
        assert listed == WindowModel(snap).alive_page(event, 0, 1)["count"]
    page.locator(".nbd-mem button.reset").click()  # the whole trace again, for the screenshot
    page.locator(".nbd-mem button.peak").click()
    page.locator(".nbd-mem").screenshot(path=shot("memory_viewer.png"))


def test_viewer_inside_jupyterlab(lab, page, snapshots_dir):
    cells = ["import nbdebug\n"
             f"snap = nbdebug.load_snapshot(r'{snapshots_dir / FILE}')\n"
             "snap"]
    run_notebook(lab, page, cells, "memory_viewer.ipynb")
    root = ".jp-OutputArea-output .nbd-mem"
    _check_viewer(page, root, len(compute_bands(load_snapshot(snapshots_dir / FILE)).names))
    # trusted and live: the themed inline charts show, their stand-in images and the no-script note do not
    assert page.locator(f"{root} .nbd-pic-live svg").first.is_visible()
    assert page.locator(f"{root} img.nbd-pic-img").count() > 0
    assert not any(i.is_visible() for i in page.locator(f"{root} img.nbd-pic-img").all())
    assert page.locator(f"{root} .nbd-mem-note").count() == 0
    page.locator(f"{root} svg.chart").scroll_into_view_if_needed()
    page.screenshot(path=shot("memory_viewer_lab.png"))


def test_device_selector_for_several_devices(page, snapshots_dir, tmp_path):
    snap = load_snapshot(snapshots_dir / "no-license/torch2.8-2.9_expandable_oom_multigpu_memory_snapshot.pickle")
    out = tmp_path / "devices.html"
    snap.to_html(out)
    page.context.set_offline(True)
    page.goto(out.as_uri())
    panels = page.locator(".nbd-mem-multi > .nbd-mem")
    assert panels.count() == len(snap.devices) == 3
    first = page.locator('.nbd-mem[data-device="1"]')  # the device of the OOM comes first
    assert first.is_visible() and "OOM: requested" in first.inner_text()
    assert not page.locator('.nbd-mem[data-device="2"]').is_visible()
    page.select_option("select.nbd-device", "2")
    assert page.locator('.nbd-mem[data-device="2"]').is_visible() and not first.is_visible()
    _check_viewer(page, '.nbd-mem[data-device="2"]', len(compute_bands(snap, 2).names))


def _luminance(rgb: str) -> float:
    r, g, b = (int(v) for v in rgb[rgb.index("(") + 1:rgb.index(")")].split(",")[:3])
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_exported_file_follows_the_colour_scheme(page, snapshots_dir, tmp_path, scheme):
    out = tmp_path / "viewer.html"
    load_snapshot(snapshots_dir / FILE).to_html(out)
    page.emulate_media(color_scheme=scheme)
    page.goto(out.as_uri())
    panel = page.locator(".nbd-mem")
    background = _luminance(panel.evaluate("el => getComputedStyle(el).backgroundColor"))
    text = _luminance(panel.evaluate("el => getComputedStyle(el).color"))
    axis = _luminance(page.locator(".nbd-mem svg.chart text").first.evaluate("el => getComputedStyle(el).fill"))
    if scheme == "dark":
        assert background < 0.2 and text > 0.7 and axis > 0.7
    else:
        assert background > 0.9 and text < 0.3 and axis < 0.3


def test_live_viewer_is_exact_at_every_zoom(lab, page, snapshots_dir):
    """snap.view() in a kernel: zooming in ends at single events, a click lists every block alive, a page at a time."""
    cells = ["import nbdebug\n"
             f"snap = nbdebug.load_snapshot(r'{snapshots_dir / FILE}')\n"
             "snap.view()"]
    run_notebook(lab, page, cells, "memory_live.ipynb")
    _check_live(page, snapshots_dir)
    page.locator(".nbdmem-widget svg.chart").scroll_into_view_if_needed()
    page.screenshot(path=shot("memory_viewer_live.png"))


def _check_live(page, snapshots_dir):
    """The live widget (the HTML output beside it steps aside) answers every zoom and moment from the kernel."""
    from nbdebug.core.memory._window import WindowModel

    root = ".nbdmem-widget .nbd-mem[data-live]"
    page.wait_for_selector(f"{root} svg.chart polygon.band", timeout=60_000)
    exactness = page.locator(f"{root} .exactness")
    page.wait_for_function("(sel) => /events in view/.test(document.querySelector(sel).textContent)",
                           arg=f"{root} .exactness", timeout=30_000)
    assert "columns" in exactness.inner_text()  # the whole trace: more events than columns
    # the peak is chosen on load and listed completely
    summary = page.locator(f"{root} .moment-summary")
    page.wait_for_function("(sel) => /all of them listed/.test(document.querySelector(sel).textContent)",
                           arg=f"{root} .moment-summary", timeout=30_000)
    assert "(the peak)" in summary.inner_text()
    # zoom in around the peak until every event is a point
    for _ in range(8):
        if exactness.inner_text().startswith("exact: every one"):
            break
        before = page.locator(f"{root} .range-label").inner_text()
        page.locator(f"{root} button.zoom-in").click()
        page.wait_for_function(
            "([sel, before]) => document.querySelector(sel + ' .range-label').textContent !== before"
            " && !/asking/.test(document.querySelector(sel + ' .exactness').textContent)",
            arg=[root, before], timeout=30_000)
    assert exactness.inner_text().startswith("exact: every one"), exactness.inner_text()
    shown = int(page.locator(f"{root} .range-label").inner_text().split("(")[1].split(" events)")[0])
    assert 2 <= shown <= 1000
    # a click: every block alive after that event, with the same count and bytes as the model in Python
    box = page.locator(f"{root} svg.chart").bounding_box()
    page.mouse.click(box["x"] + box["width"] * 0.4, box["y"] + box["height"] * 0.5)
    page.wait_for_function("(sel) => /all of them listed/.test(document.querySelector(sel).textContent)"
                           " && !/the peak/.test(document.querySelector(sel).textContent)",
                           arg=f"{root} .moment-summary", timeout=30_000)
    page.wait_for_timeout(500)  # answers to earlier requests are dropped by the page; read one settled state
    event, text = page.locator(f"{root} .moment-summary").evaluate(
        "el => [el.querySelector('.event').textContent, el.innerText]")
    expected = WindowModel(load_snapshot(snapshots_dir / FILE)).alive_page(int(event), 0, 50)
    assert f"{expected['count']} blocks alive" in text and expected["bytes"] == expected["allocated"]
    rows = page.locator(f"{root} table.alive-blocks tbody tr.blk")
    assert rows.count() == min(50, expected["count"])
    if expected["count"] > 50:
        page.locator(f"{root} .pager .next").click()
        page.wait_for_function("(sel) => /blocks 51/.test(document.querySelector(sel).textContent)",
                               arg=f"{root} .pager .page-label", timeout=30_000)
    rows.first.click()
    assert "allocated at" in page.locator(f"{root} pre.stack").inner_text()
    # one viewer on screen: the HTML output of the same cell is hidden while its widget is there, and no panel
    # asks to re-run the cell
    visible = [p for p in page.locator(".nbd-mem[data-live]").all() if p.is_visible()]
    assert len(visible) == 1
    assert page.locator(f"{root} .rerun").count() == 0


def test_live_viewer_reopened_without_its_kernel_still_works(lab, page, snapshots_dir):
    """Saved and reopened (trusted, no widget state): the viewer works from the file's own events, and no
    "Error displaying widget: model not found" is left in place of the kernel link."""
    cells = ["import nbdebug\n"
             f"snap = nbdebug.load_snapshot(r'{snapshots_dir / FILE}')\n"
             "snap.view()"]
    run_notebook(lab, page, cells, "memory_live_reopen.ipynb")
    page.wait_for_function("(sel) => /events in view/.test(document.querySelector(sel).textContent)",
                           arg=".nbdmem-widget .nbd-mem[data-live] .exactness", timeout=30_000)
    root = ".jp-OutputArea-output .nbd-mem[data-live]"
    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_timeout(1500)
    page.evaluate("() => window.jupyterapp.commands.execute('kernelmenu:shutdown')")
    page.goto(f"{lab.url}/lab/tree/memory_live_reopen.ipynb?reset&token={lab.token}", wait_until="domcontentloaded")
    page.wait_for_selector(f"{root} svg.chart polygon.band", timeout=60_000)
    page.wait_for_function("(sel) => /the peak/.test(document.querySelector(sel).textContent)",
                           arg=f"{root} .moment-summary", timeout=30_000)
    page.wait_for_timeout(4000)  # past the widget manager's own wait for the model
    # the saved output says what it is and how to get the live view back, and never waits for a kernel
    assert "re-run the cell for the live view" in page.locator(f"{root} .rerun").inner_text()
    assert "asking the kernel" not in page.locator(f"{root} .exactness").inner_text()
    assert page.locator(f"{root} table.alive-blocks tbody tr").count() > 0
    # what is on screen (innerText of an element that is not rendered is its whole text: filter on boxes)
    outputs = str(page.evaluate("() => [...document.querySelectorAll('.jp-OutputArea-output')]"
                                ".filter(o => o.getClientRects().length).map(o => o.innerText)"))
    assert "Error displaying widget" not in outputs and "model not found" not in outputs
    assert "VBox(" not in outputs and "Text(value" not in outputs
    exactness = page.locator(f"{root} .exactness")
    assert "this file holds every event" in exactness.inner_text()
    for _ in range(8):
        if exactness.inner_text().startswith("exact: every one"):
            break
        page.locator(f"{root} button.zoom-in").click()
    assert exactness.inner_text().startswith("exact: every one"), exactness.inner_text()


def test_live_viewer_with_several_devices_answers_each_device(lab, page, snapshots_dir):
    from nbdebug.core.memory._window import WindowModel

    path = snapshots_dir / "no-license/torch2.8-2.9_expandable_oom_multigpu_memory_snapshot.pickle"
    cells = ["import nbdebug\n"
             f"snap = nbdebug.load_snapshot(r'{path}')\n"
             "snap.view()"]
    run_notebook(lab, page, cells, "memory_live_devices.ipynb")
    page.wait_for_selector(".nbdmem-widget select.nbd-device", timeout=60_000)
    page.select_option(".nbdmem-widget select.nbd-device", "2")
    root = '.nbdmem-widget .nbd-mem[data-device="2"]'
    page.wait_for_function("(sel) => /all of them listed/.test(document.querySelector(sel).textContent)",
                           arg=f"{root} .moment-summary", timeout=30_000)
    box = page.locator(f"{root} svg.chart").bounding_box()
    page.mouse.click(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5)
    page.wait_for_timeout(1500)
    event, text = page.locator(f"{root} .moment-summary").evaluate(
        "el => [el.querySelector('.event').textContent, el.innerText]")
    expected = WindowModel(load_snapshot(path), 2).alive_page(int(event), 0, 50)
    assert f"{expected['count']} blocks alive" in text, text
    assert not page.locator('.nbdmem-widget .nbd-mem[data-device="1"]').is_visible()


def test_offline_file_lists_every_block_past_the_json_limit(page, tmp_path):
    """More blocks than the JSON list holds: the file packs them all and a click still lists every live block."""
    import pickle

    from nbdebug.core.memory._window import WindowModel
    from nbdebug.render.memory.viewer import MAX_INTERVALS

    frames = [{"filename": "/home/u/train.py", "line": 7, "name": "step"}]
    trace = [{"action": "alloc", "addr": 0x7F0000000000 + i * 4096, "size": 512 * (1 + i % 7), "stream": 0,
              "time_us": 1_000_000 + i, "frames": frames} for i in range(MAX_INTERVALS + 500)]
    trace += [{"action": a, "addr": 0x7F0000000000 + i * 4096, "size": 512 * (1 + i % 7), "stream": 0,
               "time_us": 2_000_000 + i, "frames": frames}
              for i in range(0, MAX_INTERVALS, 3) for a in ("free_requested", "free_completed")]
    src = tmp_path / "many.pickle"
    src.write_bytes(pickle.dumps({"segments": [], "device_traces": [trace]}))
    snap = load_snapshot(src)
    out = tmp_path / "many.html"
    snap.to_html(out)
    page.context.set_offline(True)
    page.goto(out.as_uri())
    page.wait_for_function("() => /the peak/.test(document.querySelector('.nbd-mem .moment-summary').textContent)",
                           timeout=30_000)
    box = page.locator(".nbd-mem svg.chart").bounding_box()
    page.mouse.click(box["x"] + box["width"] * 0.85, box["y"] + box["height"] * 0.5)
    event, text = page.locator(".nbd-mem .moment-summary").evaluate(
        "el => [+el.querySelector('.event').textContent, el.innerText]")
    expected = WindowModel(snap).alive_page(event, 0, 1)
    assert "not in this file" not in text and f"{expected['count']} blocks listed" in text, text
