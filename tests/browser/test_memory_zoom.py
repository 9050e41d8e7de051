"""A zoomed window of the memory viewer, in a real headless Chromium: it starts at the level in use at its start
(known exactly: the bytes after the event before it), not at 0 B ramping up, and the range sliders follow it."""

from __future__ import annotations

import pickle

import pytest

from nbdebug.core.memory import load_snapshot

pytestmark = pytest.mark.browser

MIB = 1 << 20

# the height of the stacked bands (in the chart's own units, 0..320) in one column x of the chart: the highest point
# of any band's fill above the axis, scanning up from the axis
_HEIGHT = """([x]) => {
  const svg = document.querySelector('.nbd-mem svg.chart');
  const bands = [...svg.querySelectorAll('.band')];
  const pt = svg.createSVGPoint(); pt.x = x;
  let top = null;
  for (let y = 285.5; y > 10; y -= 1){ pt.y = y; if (bands.some(b => b.isPointInFill(pt))) top = y; }
  return top === null ? 0 : 286 - top;
}"""


def _steady_then_churn(path):
    """A trace that holds 96 MiB for most of its length while small blocks come and go above it (no times, so
    the chart's x is the event index)."""
    frames = [{"filename": "/home/u/train.py", "line": 12, "name": "step"}]
    trace = [{"action": "alloc", "addr": 0x7F0000000000 + i * MIB, "size": MIB, "stream": 0, "frames": frames}
             for i in range(96)]
    small = [{"filename": "/home/u/train.py", "line": 30, "name": "forward"}]
    for i in range(1500):
        addr = 0x7E0000000000 + (i % 7) * 65536
        trace.append({"action": "alloc", "addr": addr, "size": 65536, "stream": 0, "frames": small})
        trace += [{"action": a, "addr": addr, "size": 65536, "stream": 0, "frames": small}
                  for a in ("free_requested", "free_completed")]
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [trace]}))
    return load_snapshot(path)


def test_a_zoomed_window_starts_at_the_level_in_use_and_the_sliders_follow(page, tmp_path):
    snap = _steady_then_churn(tmp_path / "steady.pickle")
    out = tmp_path / "steady.html"
    snap.to_html(out)
    page.context.set_offline(True)
    page.goto(out.as_uri())
    page.wait_for_function("() => /the peak/.test(document.querySelector('.nbd-mem .moment-summary').textContent)",
                           timeout=30_000)
    lo, hi = page.locator(".nbd-mem input.lo"), page.locator(".nbd-mem input.hi")
    full = (int(lo.input_value()), int(hi.input_value()))
    exactness = page.locator(".nbd-mem .exactness")
    # choose a moment in the middle of the churn: the window narrows around it
    box = page.locator(".nbd-mem svg.chart").bounding_box()
    page.mouse.click(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5)
    for _ in range(8):
        if exactness.inner_text().startswith("exact: every one"):
            break
        page.locator(".nbd-mem button.zoom-in").click()
    assert exactness.inner_text().startswith("exact: every one"), exactness.inner_text()
    # the sliders show the window, not the whole trace
    now = (int(lo.input_value()), int(hi.input_value()))
    assert now != full and now[0] > full[0] and now[1] < full[1], (now, full)
    # the window's first column stands as high as the rest: 96 MiB and more are in use all along, so no column of
    # the chart, the first included, is lower than 96/97 of the highest one (a ramp from 0 B would be)
    heights = [page.evaluate(_HEIGHT, [x]) for x in (79.5, 81.5, 84.5, 90.5, 300.5, 600.5, 985.5)]
    assert min(heights) >= max(heights) * 0.95, heights
