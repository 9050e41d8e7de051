"""The offline memory viewer: one self-contained HTML fragment/file (inline CSS, SVG and JS; no CDN, no fetch).

It stays responsive for a trace of millions of events because the browser never sees the events: Python sends a
downsampled envelope of the stacked timeline (each time slice keeps its highest point, with exact bytes per band),
the largest allocations as lifetime intervals (for "what was alive at this moment"), and exact tables.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import numpy as np

from nbdebug.core.memory._snapshot import MemorySnapshot
from nbdebug.render._html import esc, fmt_bytes, table
from nbdebug.render._registry import renders
from nbdebug.render.memory_plot import PALETTE

__all__ = ["viewer_html", "viewer_document", "viewer_data"]

MAX_INTERVALS = 20_000
MAX_STACK_FRAMES = 24


def viewer_data(snap: Any, device: int | None = None, *, top: int = 8, buckets: int = 1200) -> dict[str, Any]:
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
    if size.size > MAX_INTERVALS:
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
    return {
        "source": snap.source, "device": st.device, "devices": list(snap.devices), "x_unit": bands.x_unit,
        "events": st.n, "x": bands.x.tolist(), "index": bands.index.tolist(), "total": bands.total.tolist(),
        "floor": bands.floor.tolist(), "names": list(bands.names), "values": bands.values.tolist(),
        "colors": [PALETTE[i % len(PALETTE)] for i in range(len(bands.names) - 1)] + ["#c8c8c8"],
        "iv_start": start.tolist(), "iv_end": end.tolist(), "iv_size": size.tolist(),
        "iv_stack": stack_index.tolist(), "iv_t": [None if np.isnan(v) else float(v) for v in t_start.tolist()],
        "stack_site": sites_out, "sites": list(site_ids), "stacks": stacks_out, "frames": list(frame_ids),
        "intervals_total": int(st.n and np.count_nonzero(m.action[lo:lo + st.n] == ALLOC)) + int(f.size + b.size),
        "markers": markers[:2000],
        "peak_point": int(np.argmax(bands.total)) if bands.total.size else 0,
        "peak_bytes": summary.peak_allocated_bytes,
    }


_CSS = """
.nbd-mem{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;font-size:13px;color:#1f2328;
 border:1px solid #d0d7de;border-left:4px solid #0969da;border-radius:6px;padding:8px 12px;max-width:1200px;
 background:#fff}
.nbd-mem h3{margin:2px 0 6px 0;font-size:15px}.nbd-mem h4{margin:10px 0 4px 0;font-size:13px}
.nbd-mem table{border-collapse:collapse;margin:4px 0}
.nbd-mem.nbd-mem td,.nbd-mem.nbd-mem th{border-bottom:1px solid #eaeef2;padding:2px 8px;text-align:left;vertical-align:top}
.nbd-mem.nbd-mem th{background:#f6f8fa;font-weight:600}.nbd-mem.nbd-mem td.num{text-align:right;font-variant-numeric:tabular-nums}
.nbd-mem .chart{width:100%;height:320px;border:1px solid #eaeef2;cursor:crosshair;display:block}
.nbd-mem .legend span{display:inline-block;margin:2px 10px 2px 0;font-size:12px}
.nbd-mem .legend i{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
.nbd-mem .controls{margin:6px 0;display:flex;gap:10px;align-items:center;flex-wrap:wrap}
.nbd-mem .controls input[type=range]{width:260px}
.nbd-mem pre{background:#f6f8fa;padding:6px 8px;border-radius:4px;white-space:pre-wrap;font-size:12px;margin:4px 0}
.nbd-mem .muted{color:#656d76}.nbd-mem tr.blk{cursor:pointer}.nbd-mem tr.blk:hover{background:#ddf4ff}
.nbd-mem .scroll{max-height:340px;overflow:auto}
.nbd-mem .cols{display:flex;gap:18px;flex-wrap:wrap}.nbd-mem .cols>div{flex:1 1 480px;min-width:0}
"""

_JS = r"""
(function(){
const root = document.getElementById(ROOT_ID);
if (!root || root.dataset.ready) return;
root.dataset.ready = '1';
const D = JSON.parse(root.querySelector('script.nbd-mem-data').textContent);
const svg = root.querySelector('svg.chart');
const W = 1000, H = 320, L = 78, R = 12, T = 10, B = 34;
svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
svg.setAttribute('preserveAspectRatio', 'none');
const N = D.x.length;
let lo = 0, hi = Math.max(N - 1, 0), sel = -1;
const q = s => root.querySelector(s);
function fmt(b){ const u=['B','KiB','MiB','GiB','TiB']; let v=Math.abs(b), i=0;
  while (v >= 1024 && i < 4){ v /= 1024; i++; } return (b<0?'-':'') + (i ? v.toFixed(2) : v.toFixed(0)) + ' ' + u[i]; }
function esc(s){ return String(s).replace(/[&<>"']/g, c => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;',"'":'&#39;'}[c])); }
function when(j){ if (D.x_unit === 'us') return ((D.x[j] - D.x[0]) / 1e6).toFixed(4) + ' s';
  return D.index[j] < 0 ? 'before the first event' : 'event ' + D.index[j]; }
function draw(){
  if (!N){ svg.innerHTML = '<text x="20" y="40">no trace events: the snapshot holds the final state only</text>'; return; }
  const x0 = D.x[lo], x1 = D.x[hi];
  let ymax = 1; for (let i = lo; i <= hi; i++) ymax = Math.max(ymax, D.total[i]);
  const sx = v => L + (W - L - R) * (x1 === x0 ? 0.5 : (v - x0) / (x1 - x0));
  const sy = v => H - B - (H - B - T) * (v / ymax);
  const parts = [];
  let base = new Float64Array(hi - lo + 1);
  for (let k = 0; k < D.names.length; k++){
    const top = new Float64Array(hi - lo + 1), up = [], dn = [];
    for (let j = 0; j <= hi - lo; j++){
      top[j] = base[j] + D.values[k][lo + j];
      const xa = sx(D.x[lo + j]), xb = sx(D.x[Math.min(lo + j + 1, hi)]);
      up.push(xa.toFixed(1) + ',' + sy(top[j]).toFixed(1), xb.toFixed(1) + ',' + sy(top[j]).toFixed(1));
      dn.push(xb.toFixed(1) + ',' + sy(base[j]).toFixed(1), xa.toFixed(1) + ',' + sy(base[j]).toFixed(1));
    }
    parts.push('<polygon class="band" data-band="' + k + '" fill="' + D.colors[k] + '" points="' + up.join(' ') + ' ' +
               dn.reverse().join(' ') + '"><title>' + esc(D.names[k]) + '</title></polygon>');
    base = top;
  }
  const fl = [];
  for (let j = lo; j <= hi; j++) fl.push(sx(D.x[j]).toFixed(1) + ',' + sy(D.floor[j]).toFixed(1));
  parts.push('<polyline fill="none" stroke="#333" stroke-dasharray="2,2" stroke-width="0.7" points="' + fl.join(' ') +
             '"><title>lowest allocated within each time slice</title></polyline>');
  for (let t = 0; t <= 4; t++){
    const v = ymax * t / 4, y = sy(v);
    parts.push('<line x1="' + L + '" x2="' + (W - R) + '" y1="' + y + '" y2="' + y + '" stroke="#eee"/>' +
               '<text x="' + (L - 6) + '" y="' + (y + 4) + '" text-anchor="end" font-size="11">' + fmt(v) + '</text>');
    const xv = lo + Math.round((hi - lo) * t / 4);
    parts.push('<text x="' + sx(D.x[xv]) + '" y="' + (H - 12) + '" text-anchor="middle" font-size="11">' + esc(when(xv)) + '</text>');
  }
  for (const [t, name] of D.markers){ if (t < x0 || t > x1) continue;
    parts.push('<line class="marker" x1="' + sx(t) + '" x2="' + sx(t) + '" y1="' + T + '" y2="' + (H - B) +
               '" stroke="#8250df" stroke-width="0.6"><title>' + esc(name) + '</title></line>'); }
  if (sel >= lo && sel <= hi){ const xs = sx(D.x[sel]);
    parts.push('<line class="moment" x1="' + xs + '" x2="' + xs + '" y1="' + T + '" y2="' + (H - B) + '" stroke="#cf222e" stroke-width="1.5"/>'); }
  svg.innerHTML = parts.join('');
  q('.range-label').textContent = when(lo) + ' \u2192 ' + when(hi) + '  (' + (hi - lo + 1) + ' of ' + N + ' points)';
}
function legend(){
  q('.legend').innerHTML = D.names.map((n, k) => '<span><i style="background:' + D.colors[k] + '"></i>' + esc(n) + '</span>').join('');
}
function select(j){
  sel = j; draw();
  const p = D.index[j];
  const alive = [];
  for (let i = 0; i < D.iv_size.length; i++) if (D.iv_start[i] <= p && p < D.iv_end[i]) alive.push(i);
  alive.sort((a, b) => D.iv_size[b] - D.iv_size[a]);
  let listed = 0; const bySite = new Map();
  for (const i of alive){ listed += D.iv_size[i]; const s = D.stack_site[D.iv_stack[i]];
    const e = bySite.get(s) || [0, 0]; e[0] += D.iv_size[i]; e[1] += 1; bySite.set(s, e); }
  const total = D.total[j];
  q('.moment-summary').innerHTML = '<b>' + esc(when(j)) + '</b>: ' + fmt(total) + ' allocated' +
    (j === D.peak_point ? ' (the peak)' : '') + '; ' + alive.length + ' blocks listed (' + fmt(listed) + ')' +
    (total > listed ? '; ' + fmt(total - listed) + ' in smaller blocks not embedded' : '');
  const sites = [...bySite.entries()].sort((a, b) => b[1][0] - a[1][0]).slice(0, 15);
  q('table.alive-sites tbody').innerHTML = sites.map(([s, e]) => '<tr><td>' + esc(D.sites[s]) + '</td><td class="num">' +
    fmt(e[0]) + '</td><td class="num">' + e[1] + '</td></tr>').join('');
  q('table.alive-blocks tbody').innerHTML = alive.slice(0, 60).map(i => '<tr class="blk" data-i="' + i + '"><td class="num">' +
    fmt(D.iv_size[i]) + '</td><td>' + esc(D.sites[D.stack_site[D.iv_stack[i]]]) + '</td><td>' +
    (D.iv_start[i] < 0 ? 'before the trace' : (D.x_unit === 'us' && D.iv_t[i] !== null ?
      ((D.iv_t[i] - D.x[0]) / 1e6).toFixed(4) + ' s' : 'event ' + D.iv_start[i])) + '</td></tr>').join('');
  if (alive.length) showStack(alive[0]); else q('pre.stack').textContent = '';
}
function showStack(i){
  const frames = D.stacks[D.iv_stack[i]].map(f => D.frames[f]);
  q('pre.stack').textContent = fmt(D.iv_size[i]) + ' allocated at\n  ' + (frames.length ? frames.join('\n  ') : '(no stack recorded)');
}
q('table.alive-blocks').addEventListener('click', e => { const tr = e.target.closest('tr.blk'); if (tr) showStack(+tr.dataset.i); });
svg.addEventListener('click', e => {
  if (!N) return;
  const r = svg.getBoundingClientRect(), vx = (e.clientX - r.left) / r.width * W;
  const x0 = D.x[lo], x1 = D.x[hi], v = x0 + (vx - L) / (W - L - R) * (x1 - x0);
  let a = lo, b = hi;
  while (b - a > 1){ const m = (a + b) >> 1; if (D.x[m] <= v) a = m; else b = m; }
  select(Math.abs(D.x[b] - v) < Math.abs(D.x[a] - v) ? b : a);
});
const rlo = q('input.lo'), rhi = q('input.hi');
rlo.max = rhi.max = String(Math.max(N - 1, 0)); rlo.value = '0'; rhi.value = String(Math.max(N - 1, 0));
function onRange(){ let a = +rlo.value, b = +rhi.value; if (a > b) [a, b] = [b, a]; if (b === a) b = Math.min(a + 1, N - 1);
  lo = a; hi = b; draw(); }
rlo.addEventListener('input', onRange); rhi.addEventListener('input', onRange);
q('button.reset').addEventListener('click', () => { rlo.value = '0'; rhi.value = String(N - 1); onRange(); });
q('button.peak').addEventListener('click', () => select(D.peak_point));
legend(); draw();
if (N) select(D.peak_point);
})();
"""


def _segments_svg(frag: Any, limit: int = 60) -> str:
    rows = frag.segments[:limit]
    if not rows:
        return '<p class="muted">no segments</p>'
    biggest = max(r.total_bytes for r in rows) or 1
    h, width = 14, 900
    parts = []
    for i, r in enumerate(rows):
        y = i * (h + 3)
        w = max(2.0, width * r.total_bytes / biggest)
        aw = w * r.allocated_bytes / r.total_bytes if r.total_bytes else 0
        lw = w * r.largest_free_block / r.total_bytes if r.total_bytes else 0
        tip = esc(f"{hex(r.address)}: {fmt_bytes(r.total_bytes)} reserved, {fmt_bytes(r.allocated_bytes)} allocated, "
                  f"largest free block {fmt_bytes(r.largest_free_block)}, {r.blocks} blocks")
        parts.append(f'<g><title>{tip}</title><rect x="0" y="{y}" width="{w:.1f}" height="{h}" fill="#eaeef2"/>'
                     f'<rect x="0" y="{y}" width="{aw:.1f}" height="{h}" fill="#0969da"/>'
                     f'<rect x="{w - lw:.1f}" y="{y + h - 3}" width="{lw:.1f}" height="3" fill="#1a7f37"/></g>')
    total_h = len(rows) * (h + 3)
    return (f'<svg class="segments" width="100%" viewBox="0 0 {width} {total_h}" height="{min(total_h, 400)}" '
            f'preserveAspectRatio="xMinYMin meet">{"".join(parts)}</svg>'
            '<div class="muted">each bar is a segment (width: its size): blue = allocated, grey = free, green = the '
            'largest free block</div>')


MAX_DEVICES = 8


@renders(MemorySnapshot, "html")
def viewer_html(snap: Any, device: int | None = None) -> str:
    """The viewer as an HTML fragment (a notebook output); scripts are inline, nothing is fetched.

    With several devices and no ``device``, one panel per device (the OOM's or the busiest first) and a selector.
    """
    devices = list(snap.devices)
    if device is not None or len(devices) <= 1:
        return _device_panel(snap, device)
    first = snap.default_device
    order = [first] + [d for d in devices if d != first][:MAX_DEVICES - 1]
    wrapper = "nbdmemsel-" + uuid.uuid4().hex[:10]
    options = "".join(f'<option value="{d}">device {d}</option>' for d in order)
    panels = "".join(_device_panel(snap, d, hidden=i > 0) for i, d in enumerate(order))
    script = ("(function(){const w=document.getElementById(" + json.dumps(wrapper) + ");"
              "const sel=w.querySelector('select.nbd-device');sel.addEventListener('change',()=>{"
              "for(const p of w.querySelectorAll(':scope > .nbd-mem')){"
              "p.style.display=p.dataset.device===sel.value?'':'none';}});})();")
    more = f" (first {MAX_DEVICES} shown)" if len(devices) > MAX_DEVICES else ""
    return (f'<div class="nbd-mem-multi" id="{wrapper}"><label style="font:13px system-ui,sans-serif">'
            f'{len(devices)} devices{more}: <select class="nbd-device" aria-label="device">{options}</select></label>'
            f"{panels}<script>{script}</script></div>")


def _device_panel(snap: Any, device: int | None, *, hidden: bool = False) -> str:
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
        head += (f'<div style="color:#cf222e">OOM: requested {fmt_bytes(o.requested_bytes)}, largest free block then '
                 f"{fmt_bytes(o.largest_free_block)}, reserved-but-free {fmt_bytes(o.cached_free_bytes)}</div>")
    controls = ('<div class="controls">range <input class="lo" type="range" min="0" step="1" aria-label="range start">'
                '<input class="hi" type="range" min="0" step="1" aria-label="range end">'
                '<button class="reset" type="button">reset</button><button class="peak" type="button">go to peak'
                '</button><span class="range-label muted"></span></div>')
    moment = ('<div class="cols"><div><h4>Alive at the selected moment, by site</h4><div class="moment-summary muted">'
              'click the chart to choose a moment</div><table class="alive-sites"><thead><tr><th>site</th><th>bytes'
              '</th><th>blocks</th></tr></thead><tbody></tbody></table></div><div><h4>Largest live blocks (click for '
              'the stack)</h4><div class="scroll"><table class="alive-blocks"><thead><tr><th>bytes</th><th>site</th>'
              '<th>allocated</th></tr></thead><tbody></tbody></table></div><pre class="stack"></pre></div></div>')
    sites = table(["site", "bytes", "allocations"], [(s.site, fmt_bytes(s.bytes), s.count) for s in summary.top_sites],
                  numeric=(1, 2))
    segs = table(["segment", "size", "allocated", "free", "largest free block", "blocks"],
                 [(hex(s.address), fmt_bytes(s.total_bytes), fmt_bytes(s.allocated_bytes), fmt_bytes(s.free_bytes),
                   fmt_bytes(s.largest_free_block), s.blocks) for s in frag.segments[:30]], numeric=(1, 2, 3, 4, 5))
    frag_line = (f"<div>reserved {fmt_bytes(frag.reserved_bytes)}, allocated {fmt_bytes(frag.allocated_bytes)}, "
                 f"reserved but free {fmt_bytes(frag.free_bytes)}, largest free block "
                 f"{fmt_bytes(frag.largest_free_block)} ({len(frag.segments)} segments, end of trace)</div>")
    style = ' style="display:none"' if hidden else ""
    return (f'<div class="nbd-mem" id="{root}" data-device="{data["device"]}"{style}><style>{_CSS}</style>{head}'
            f'{controls}'
            '<svg class="chart" role="img" aria-label="allocated memory over time, stacked by site"></svg>'
            f'<div class="legend"></div>{moment}<div class="cols"><div><h4>Top allocation sites</h4>{sites}</div>'
            f'<div><h4>Segments and fragmentation</h4>{frag_line}{_segments_svg(frag)}<div class="scroll">{segs}</div>'
            '</div></div>'
            f'<script type="application/json" class="nbd-mem-data">{payload}</script>'
            f'<script>{_JS.replace("ROOT_ID", json.dumps(root))}</script></div>')


def viewer_document(snap: Any, device: int | None = None) -> str:
    """The viewer as a complete, self-contained HTML file."""
    body = viewer_html(snap, device)
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
            f'content="width=device-width, initial-scale=1"><title>Memory: {esc(snap.source)}</title></head>'
            f'<body style="margin:16px">{body}</body></html>')
