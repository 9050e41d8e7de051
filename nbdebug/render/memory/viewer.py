"""The offline memory viewer: one self-contained HTML fragment/file (inline CSS, SVG and JS; no CDN, no fetch).

The script and the stylesheet are package data (``static/viewer.js``, ``static/viewer.css``), inlined into both the
notebook output and the exported file; colours follow JupyterLab's theme variables.

It stays responsive for a trace of millions of events: Python sends an overview envelope of the stacked timeline
(each time slice keeps its highest point, with exact bytes per band) as JSON, and packs every event (bytes, band,
time step) and every block (lifetime, size, stack) as gzip'd typed arrays that the script decodes; zooming in
rebuilds any window exactly from the nearest overview point, and "alive at this moment" lists every block.  Past
their size budgets the file keeps the overview and the largest blocks, and says so on screen.  Where no script
runs (an untrusted notebook, GitHub), a static picture of the chart and a note stand in for the interactive parts.
With a kernel, ``snap.view()`` (``render.memory.widget``) lets Python answer the same viewer.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import numpy as np

from nbdebug.core.memory._results import Fragmentation
from nbdebug.core.memory._snapshot import MemorySnapshot
from nbdebug.render._html import INTERACTIVE_NOTE, esc, fmt_bytes, picture, static, table
from nbdebug.render._registry import renders
from nbdebug.render.memory import unlisted_note
from nbdebug.render.memory.plot import PALETTE, svg_stacked

__all__ = ["viewer_html", "viewer_document", "viewer_data", "viewer_css", "viewer_js", "intervals"]

MAX_INTERVALS = 20_000
MAX_STACK_FRAMES = 24
#: the per-event columns the file embeds (gzip, base64) so that zooming sharpens down to single events offline;
#: above this many bytes (compressed) the file keeps only its overview and says how far that is exact
MAX_EVENT_BYTES = 16 << 20
#: every block of the trace (for a complete "alive at this moment") is embedded packed when it takes at most this
#: many bytes and has at most MAX_PACKED_STACKS distinct stacks; otherwise the MAX_INTERVALS largest, as JSON
MAX_INTERVAL_BYTES = 8 << 20
MAX_PACKED_STACKS = 20_000


def _packed(a: np.ndarray) -> str:
    import base64
    import zlib

    z = zlib.compressobj(6, zlib.DEFLATED, 31)  # gzip framing: the browser's DecompressionStream('gzip') reads it
    return base64.b64encode(z.compress(np.ascontiguousarray(a).tobytes()) + z.flush()).decode("ascii")


def event_columns(snap: MemorySnapshot, device: int | None, site_ids: tuple[int, ...]) -> dict[str, Any] | None:
    """Every event of one device, compact: bytes allocated (+) or freed (-), its band, and its x step.

    Little-endian float64 deltas (exact for integers below 2**53) and uint8 bands, gzip'd and base64'd; the script
    rebuilds any window from the nearest overview point.  None when they would pass ``MAX_EVENT_BYTES``.
    """
    from nbdebug.core.memory._bands import event_sites

    st = snap.state(device)
    if not st.n:
        return None
    owner, initial = event_sites(snap, st.device)
    band = np.full(owner.size, len(site_ids), dtype=np.uint8)  # "other" unless one of the top sites
    for k, site in enumerate(site_ids):
        band[owner == site] = k
    start = [int(initial[s]) for s in site_ids]
    out: dict[str, Any] = {"delta": _packed(st.delta.astype("<f8")), "band": _packed(band)}
    if st.x_is_time:
        out["dx"] = _packed(np.diff(np.concatenate([[st.x[0]], st.x])).astype("<f8"))
    size = sum(len(v) for v in out.values())
    if size > MAX_EVENT_BYTES:
        return None
    # where the steps start: x of the first event, and each band's bytes before it
    out["x0"] = float(st.x[0])
    out["initial"] = start + [int(st.initial_allocated) - sum(start)]
    return out


def viewer_data(snap: MemorySnapshot, device: int | None = None, *, top: int = 8, buckets: int = 1200) -> dict[str, Any]:
    """The JSON the viewer's script draws from (also useful for tests)."""
    from nbdebug.core.memory._bands import compute_bands
    from nbdebug.core.memory._model import ALLOC

    st = snap.state(device)
    m, lo = snap.model, st.lo
    bands = compute_bands(snap, st.device, top=top, buckets=buckets)
    a = np.flatnonzero(m.action[lo:lo + st.n] == ALLOC)
    f, b = st.before_frees, st.before_blocks
    start = np.concatenate([a, np.full(f.size + b.size, -1)]).astype(np.int64)
    end = np.concatenate([np.where(st.free_of[a] >= 0, st.free_of[a], st.n), f, np.full(b.size, st.n)]).astype(np.int64)
    size = np.concatenate([m.size[lo + a], m.size[lo + f], m.block_size[b]]).astype(np.int64)
    stack = np.concatenate([m.stack[lo + a], np.full(f.size, -2), m.block_stack[b]]).astype(np.int64)
    # blocks alive after each point's event, counted before the list is cut (the viewer says how many it leaves out)
    pts_index = bands.index.astype(np.int64)
    alive_count = (np.searchsorted(np.sort(start), pts_index, side="right")
                   - np.searchsorted(np.sort(end), pts_index, side="right"))
    packed: dict[str, Any] | None = None
    if size.size > MAX_INTERVALS and np.unique(stack).size <= MAX_PACKED_STACKS and st.n < 2**31:
        packed = {"start": _packed(start.astype("<i4")), "end": _packed(end.astype("<i4")),
                  "size": _packed(size.astype("<f8"))}
        if sum(len(v) for v in packed.values()) > MAX_INTERVAL_BYTES:
            packed = None
    if size.size > MAX_INTERVALS and packed is None:
        keep = np.sort(np.argpartition(-size, MAX_INTERVALS)[:MAX_INTERVALS])
        start, end, size, stack = start[keep], end[keep], size[keep], stack[keep]
    # interned stacks and frames for the intervals shipped
    stack_ids, stack_index = np.unique(stack, return_inverse=True)
    frame_ids: dict[str, int] = {}
    stacks_out, sites_out = [], []
    site_ids: dict[str, int] = {}
    for sid in stack_ids.tolist():
        frames = snap.stack_text(int(sid), limit=400)
        python = [fr for fr in frames if ".py" in fr or fr.startswith("<")] or list(frames)
        stacks_out.append([frame_ids.setdefault(fr, len(frame_ids)) for fr in python[:MAX_STACK_FRAMES]])
        label = snap.site_label(int(sid))
        sites_out.append(site_ids.setdefault(label, len(site_ids)))
    x_all = st.x
    t_start = (np.where(start >= 0, x_all[np.clip(start, 0, max(st.n - 1, 0))], np.nan) if st.n
               else np.full(start.size, np.nan))
    markers = []
    if st.x_is_time:
        for r in snap.annotations().rows:
            if r.device == st.device and r.time_us is not None:
                markers.append([r.time_us, f"{r.name} {r.stage}"])
    summary = snap.summary(st.device)
    if packed is not None:  # every block, packed: the script decodes them (and their start times) on load
        packed["stack"] = _packed(stack_index.astype("<i4"))
        if st.x_is_time:
            packed["t"] = _packed(np.where(np.isnan(t_start), -1.0, t_start).astype("<f8"))
        start = end = size = np.zeros(0, np.int64)
        stack_index = np.zeros(0, np.int64)
        t_start = np.zeros(0)
    return {
        "source": snap.source, "iv_packed": packed, "device": st.device, "devices": list(snap.devices), "x_unit": bands.x_unit,
        "events": st.n, "x": bands.x.tolist(), "index": bands.index.tolist(), "total": bands.total.tolist(),
        "floor": bands.floor.tolist(), "names": list(bands.names), "values": bands.values.tolist(),
        "colors": [PALETTE[i % len(PALETTE)] for i in range(len(bands.names) - 1)] + ["#c8c8c8"],
        "iv_start": start.tolist(), "iv_end": end.tolist(), "iv_size": size.tolist(),
        "iv_stack": stack_index.tolist(), "iv_t": [None if np.isnan(v) else float(v) for v in t_start.tolist()],
        "stack_site": sites_out, "sites": list(site_ids), "stacks": stacks_out, "frames": list(frame_ids),
        "intervals_total": int(st.n and np.count_nonzero(m.action[lo:lo + st.n] == ALLOC)) + int(f.size + b.size),
        "markers": markers[:2000], "alive_count": alive_count.tolist(),
        "fine": event_columns(snap, st.device, bands.site_ids) if st.n + 1 > bands.x.size else None,
        "peak_point": int(np.argmax(bands.total)) if bands.total.size else 0,
        "peak_bytes": summary.peak_allocated_bytes,
    }


def intervals(data: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, size, stack index) of the blocks a viewer's data holds, packed or not (for tests and tools)."""
    import base64
    import gzip

    p = data.get("iv_packed")
    if not p:
        return (np.asarray(data["iv_start"], np.int64), np.asarray(data["iv_end"], np.int64),
                np.asarray(data["iv_size"], np.int64), np.asarray(data["iv_stack"], np.int64))

    def un(key: str, dtype: str) -> np.ndarray:
        return np.frombuffer(gzip.decompress(base64.b64decode(p[key])), dtype)

    return (un("start", "<i4").astype(np.int64), un("end", "<i4").astype(np.int64), un("size", "<f8").astype(np.int64),
            un("stack", "<i4").astype(np.int64))


def viewer_css() -> str:
    """The viewer's stylesheet (package data ``static/viewer.css``)."""
    return static("viewer.css")


def viewer_js() -> str:
    """The viewer's script (package data ``static/viewer.js``): it declares ``nbdmemViewer(root, link)``."""
    return static("viewer.js")


def _script(root: str) -> str:
    # in a function of its own (each panel's script declares the viewer again); the id is JSON (a quoted string);
    # nothing in the file can close the script element
    return (f"<script>(function(){{{viewer_js()}\nnbdmemViewer(document.getElementById({json.dumps(root)}), null);"
            "})();</script>")


def _segments_svg(frag: Fragmentation, limit: int = 60) -> str:
    rows = frag.segments[:limit]
    if not rows:
        return '<p class="muted">no segments</p>'
    biggest = max(r.total_bytes for r in rows) or 1
    # many segments: thinner bars, so that the picture stays one screen high where no stylesheet bounds it
    h, gap, width = (14, 3, 900) if len(rows) <= 16 else (6, 1, 900)
    parts = []
    for i, r in enumerate(rows):
        y = i * (h + gap)
        w = max(2.0, width * r.total_bytes / biggest)
        # a non-zero part is at least a pixel wide: a few MiB allocated in a huge segment still shows
        aw = max(1.0, w * r.allocated_bytes / r.total_bytes) if r.total_bytes and r.allocated_bytes else 0.0
        uw = max(1.0, w * r.unlisted_bytes / r.total_bytes) if r.total_bytes and r.unlisted_bytes else 0.0
        lw = w * r.largest_free_block / r.total_bytes if r.total_bytes else 0
        tip = f"{hex(r.address)}: {fmt_bytes(r.total_bytes)} reserved, {fmt_bytes(r.allocated_bytes)} allocated, " \
              f"largest free block {fmt_bytes(r.largest_free_block)}, {r.blocks} blocks"
        if r.unlisted_bytes:
            tip += f", {fmt_bytes(r.unlisted_bytes)} in no listed block"
        parts.append(f'<g><title>{esc(tip)}</title>'
                     f'<rect class="seg" style="fill:var(--nbd-mem-bg3,#d0d7de)" x="0" y="{y}" width="{w:.1f}" '
                     f'height="{h}"/><rect class="seg-allocated" style="fill:var(--nbd-mem-brand,#0969da)" x="0" '
                     f'y="{y}" width="{aw:.1f}" height="{h}"/>'
                     + (f'<rect class="seg-unlisted" style="fill:var(--nbd-mem-fg2,#656d76)" x="{w - uw:.1f}" '
                        f'y="{y + h // 4}" width="{uw:.1f}" height="{h - 2 * (h // 4)}"/>' if uw else "")
                     + f'<rect class="seg-largest" style="fill:var(--nbd-mem-ok,#1a7f37)" x="{w - lw:.1f}" '
                     f'y="{y + h - h // 4 - 1}" width="{lw:.1f}" height="{h // 4 + 1}"/></g>')
    total_h = len(rows) * (h + gap)
    svg = (f'<svg class="segments" width="{width}" height="{total_h}" style="width:100%;height:auto" '
           f'viewBox="0 0 {width} {total_h}" preserveAspectRatio="xMinYMin meet">{"".join(parts)}</svg>')
    unlisted = ", dark grey stripe = bytes in no listed block" if any(r.unlisted_bytes for r in rows) else ""
    return (picture(svg, f"{len(rows)} segments: allocated and free bytes of each", css_class="nbd-segments")
            + '<div class="muted">each bar is a segment (width: its size): blue = allocated, grey = free, green = the '
            f'largest free block{unlisted}</div>')


MAX_DEVICES = 8


@renders(MemorySnapshot, "html")
def viewer_html(snap: MemorySnapshot, device: int | None = None, *, live: str = "") -> str:
    """The viewer as an HTML fragment (a notebook output); scripts are inline, nothing is fetched.

    With several devices and no ``device``, one panel per device (the OOM's or the busiest first) and a selector.
    ``live``: the token of the live link (``snap.view()``) through which the panel asks the kernel.
    """
    devices = list(snap.devices)
    if device is not None or len(devices) <= 1:
        return _device_panel(snap, device, live=live)
    first = snap.default_device
    order = [first] + [d for d in devices if d != first][:MAX_DEVICES - 1]
    wrapper = "nbdmemsel-" + uuid.uuid4().hex[:10]
    options = "".join(f'<option value="{d}">device {d}</option>' for d in order)
    panels = "".join(_device_panel(snap, d, hidden=i > 0, in_multi=True, live=live) for i, d in enumerate(order))
    more = f" (first {MAX_DEVICES} shown)" if len(devices) > MAX_DEVICES else ""
    return (f'<div class="nbd-mem-multi" id="{wrapper}"><style>{viewer_css()}</style><label class="nbd-live" hidden="hidden">'
            f'{len(devices)} devices{more}: <select class="nbd-device" aria-label="device">{options}</select></label>'
            f"{panels}{_script(wrapper)}</div>")


def _device_panel(snap: MemorySnapshot, device: int | None, *, hidden: bool = False, in_multi: bool = False,
                  live: str = "") -> str:
    """One device's viewer."""
    data = viewer_data(snap, device)
    summary = snap.summary(data["device"])
    frag = snap.fragmentation(data["device"])
    root = "nbdmem-" + uuid.uuid4().hex[:10]
    # no "<" at all inside the data block: nothing in it can end the script element or open a comment
    payload = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")
    head = (f"<h3>Memory: {esc(snap.source)} &mdash; device {data['device']}</h3>"
            f"<div>peak allocated <b>{fmt_bytes(summary.peak_allocated_bytes)}</b>, final "
            f"{fmt_bytes(summary.final_allocated_bytes)}, peak reserved {fmt_bytes(summary.peak_reserved_bytes)}, "
            f"{data['events']} events</div>")
    for o in frag.ooms:
        head += (f'<div class="oom">OOM: requested {fmt_bytes(o.requested_bytes)}, largest free block then '
                 f"{fmt_bytes(o.largest_free_block)}, reserved-but-free {fmt_bytes(o.cached_free_bytes)}</div>")
    controls = ('<div class="controls">range <input class="lo" type="range" min="0" step="1" aria-label="range start">'
                '<input class="hi" type="range" min="0" step="1" aria-label="range end">'
                '<button class="zoom-in" type="button" title="narrow the window 8 times around the chosen moment">'
                'zoom in</button><button class="zoom-out" type="button">zoom out</button>'
                '<button class="reset" type="button">reset</button><button class="peak" type="button">go to peak'
                '</button><span class="range-label muted"></span></div><div class="exactness muted"></div>')
    moment = ('<div class="cols"><div><h4>Alive at the selected moment, by site</h4><div class="moment-summary muted">'
              'click the chart to choose a moment</div><table class="alive-sites"><thead><tr><th>site</th><th>bytes'
              '</th><th>blocks</th></tr></thead><tbody></tbody></table></div><div><h4>Largest live blocks (click for '
              'the stack)</h4><div class="scroll"><table class="alive-blocks"><thead><tr><th>bytes</th><th>site</th>'
              '<th>allocated</th></tr></thead><tbody></tbody></table></div><div class="pager" hidden="hidden">'
              '<button class="prev" type="button">previous</button> <span class="page-label muted"></span> '
              '<button class="next" type="button">next</button></div><pre class="stack"></pre></div></div>')
    sites = table(["site", "bytes", "allocations"], [(s.site, fmt_bytes(s.bytes), s.count) for s in summary.top_sites],
                  numeric=(1, 2))
    segs = table(["segment", "size", "allocated", "free", "largest free block", "blocks"],
                 [(hex(s.address), fmt_bytes(s.total_bytes), fmt_bytes(s.allocated_bytes), fmt_bytes(s.free_bytes),
                   fmt_bytes(s.largest_free_block), s.blocks) for s in frag.segments[:30]], numeric=(1, 2, 3, 4, 5))
    largest = "largest listed free block" if frag.unlisted_bytes else "largest free block"
    frag_line = (f"<div>reserved {fmt_bytes(frag.reserved_bytes)}, allocated {fmt_bytes(frag.allocated_bytes)}, "
                 f"reserved but free {fmt_bytes(frag.free_bytes)}, {largest} "
                 f"{fmt_bytes(frag.largest_free_block)} ({len(frag.segments)} segments, end of trace)</div>")
    if frag.unlisted_bytes:
        frag_line += f'<div class="muted">{esc(unlisted_note(frag))}</div>'
    # other devices are hidden by the script (the selector shows one at a time); without it, all of them show
    style = ' data-later="1"' if hidden else ""
    css = "" if in_multi else f"<style>{viewer_css()}</style>"
    # the interactive parts are ``hidden`` until the script runs (sanitised output keeps the attribute and drops
    # the script): a renderer that runs no script shows the static picture and its note instead
    flag = f' data-live="{esc(live)}"' if live else ""
    return (f'<div class="nbd-mem" id="{root}" data-device="{data["device"]}"{flag}{style}>{css}{head}'
            f"{_static_picture(data)}"
            f'<div class="nbd-live" hidden="hidden">{controls}'
            '<svg class="chart" role="img" aria-label="allocated memory over time, stacked by site"></svg>'
            f'<div class="legend"></div>{moment}</div><div class="cols"><div><h4>Top allocation sites</h4>{sites}</div>'
            f'<div><h4>Segments and fragmentation</h4>{frag_line}{_segments_svg(frag)}<div class="scroll">{segs}</div>'
            '</div></div>'
            f'<script type="application/json" class="nbd-mem-data">{payload}</script>'
            f"{_script(root)}</div>")


def _static_picture(data: dict[str, Any]) -> str:
    """The viewer's picture where no script runs (a notebook reopened untrusted, GitHub, nbviewer).

    The stacked chart as an image, its legend, and how to get the interactive view; the script removes it.
    """
    svg = svg_stacked(data["x"], data["values"], data["colors"], x_unit=data["x_unit"], index=data["index"])
    if not svg:
        return ""
    # each swatch stays with its name (no line break between them)
    legend = "".join(f'<span style="white-space:nowrap"><span style="background-color:{esc(c)}">&nbsp;&nbsp;&nbsp;'
                     f'</span> {esc(n)}</span> &nbsp; ' for n, c in zip(data["names"], data["colors"]))
    return (f'<div class="nbd-mem-static">{picture(svg, "allocated memory over time, stacked by site")}'
            f'<div class="nbd-mem-legend">{legend}</div>'
            f'<div class="muted nbd-mem-note">Static picture: {esc(INTERACTIVE_NOTE)} (zoom, the blocks alive at '
            "any moment and their stacks), or write it to a file with snap.to_html('memory.html').</div></div>")


def viewer_document(snap: MemorySnapshot, device: int | None = None) -> str:
    """The viewer as a complete, self-contained HTML file."""
    body = viewer_html(snap, device)
    return ('<!DOCTYPE html><html lang="en" class="nbd-standalone"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            '<meta name="color-scheme" content="light dark">'
            f'<title>Memory: {esc(snap.source)}</title></head><body>{body}</body></html>')
