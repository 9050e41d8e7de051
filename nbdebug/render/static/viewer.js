// nbdebug memory viewer: draws one device's panel from the JSON in its script element of class nbd-mem-data.
// Package data, inlined into the notebook output and the exported HTML (nothing is fetched): the inline script
// declares nbdmemViewer and calls it on its panel (or on the multi-device wrapper, whose select switches the visible
// panel).  Colours: CSS classes from viewer.css (theme variables); only the bands' colours come from the data.
// Live mode (snap.view() in a kernel): the widget's ES module (viewer_widget.js) puts the same panel in its own
// element and calls nbdmemViewer with a link, {ask(req) -> Promise of the answer, ready() -> Promise of true when
// the kernel answers}, carried by the standard widget channel (model.send / msg:custom); the kernel keeps the whole
// trace and answers each window at screen resolution (exact down to single events) and each moment with every
// live block.  A link whose kernel does not answer (a notebook reopened with its widget state saved) falls back to
// the events the panel holds and says that the cell must be re-run for the live view.
function nbdmemViewer(root, link){
if (!root || root.dataset.ready) return;
root.dataset.ready = '1';
for (const el of root.querySelectorAll(':scope > .nbd-live')) el.hidden = false;
if (root.classList.contains('nbd-mem-multi')){
  const pick = root.querySelector('select.nbd-device');
  const show = () => { for (const p of root.querySelectorAll(':scope > .nbd-mem')) p.style.display = p.dataset.device === pick.value ? '' : 'none'; };
  pick.addEventListener('change', show);
  show();
  return;
}
for (const hint of root.querySelectorAll(':scope > .nbd-mem-static')) hint.remove();
const D = JSON.parse(root.querySelector('script.nbd-mem-data').textContent);
const svg = root.querySelector('svg.chart');
const W = 1000, H = 320, L = 78, R = 12, T = 10, B = 34;
svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
svg.setAttribute('preserveAspectRatio', 'none');
const N = D.x.length;
const q = s => root.querySelector(s);
// V: what is drawn (the file's envelope cut to the window, or the kernel's answer for it); sel: index into V
let aliveToken = 0, windowToken = 0;
let V = D, vlo = 0, vhi = Math.max(N - 1, 0), sel = -1, page = 0, lastAlive = null;
function fmt(b){ const u=['B','KiB','MiB','GiB','TiB']; let v=Math.abs(b), i=0;
  while (v >= 1024 && i < 4){ v /= 1024; i++; } return (b<0?'-':'') + (i ? v.toFixed(2) : v.toFixed(0)) + ' ' + u[i]; }
function esc(s){ return String(s).replace(/[&<>"']/g, c => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;',"'":'&#39;'}[c])); }
function whenX(x, idx){ if (D.x_unit === 'us') return ((x - D.x[0]) / 1e6).toFixed(D.x.length && (V.x[V.x.length-1] - V.x[0]) < 1e4 ? 6 : 4) + ' s';
  return idx < 0 ? 'before the first event' : 'event ' + idx; }
function when(j){ return whenX(V.x[j], V.index[j]); }
// -- the kernel, when there is one ------------------------------------------------------------------------------
const token = root.dataset.live || '';
let linked = !!link;  // false once the link's kernel did not answer
function ask(req){
  if (!linked) return null;
  req.device = D.device;
  return link.ask(req);
}
const live = () => linked;
function rerunNote(text){
  let n = q('.rerun');
  if (!n){ n = document.createElement('div'); n.className = 'rerun muted'; q('.controls').before(n); }
  n.textContent = text;
}
// -- the file's own events (stand-alone): any window rebuilt exactly from the nearest overview point ----------
let F = null;  // {n, x, delta, band} once decoded
async function unpack(b64, Type){
  const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
  return new Type(await new Response(stream).arrayBuffer());
}
async function loadFine(){
  if (!D.fine || typeof DecompressionStream === 'undefined') return;
  const delta = await unpack(D.fine.delta, Float64Array), band = await unpack(D.fine.band, Uint8Array);
  let x;
  if (D.fine.dx){ const dx = await unpack(D.fine.dx, Float64Array); x = new Float64Array(dx.length);
    let t = D.fine.x0; for (let i = 0; i < dx.length; i++){ t += dx[i]; x[i] = t; } }
  else { x = new Float64Array(delta.length); for (let i = 0; i < x.length; i++) x[i] = i; }
  F = {n: delta.length, x, delta, band};
}
async function loadIntervals(){
  // every block of the trace, packed (when the file holds them all): "alive at this moment" is then complete
  const p = D.iv_packed; if (!p || typeof DecompressionStream === 'undefined') return;
  const start = await unpack(p.start, Int32Array), end = await unpack(p.end, Int32Array);
  const size = await unpack(p.size, Float64Array), stack = await unpack(p.stack, Int32Array);
  const t = p.t ? await unpack(p.t, Float64Array) : null;
  D.iv_t = t ? Array.from(t, v => v < 0 ? null : v) : new Array(size.length).fill(null);
  D.iv_start = start; D.iv_end = end; D.iv_size = size; D.iv_stack = stack;
}
function fineWindow(x0, x1, width){
  // events with x0 <= x <= x1 (and the one before, so the first step starts at the right height)
  let a = 0, b = F.n;
  { let lo = 0, hi = F.n; while (lo < hi){ const m = (lo + hi) >> 1; if (F.x[m] < x0) lo = m + 1; else hi = m; } a = lo - 1; }
  { let lo = 0, hi = F.n; while (lo < hi){ const m = (lo + hi) >> 1; if (F.x[m] <= x1) lo = m + 1; else hi = m; } b = lo; }
  a = Math.max(a, -1); if (b - a < 2) b = Math.min(F.n, a + 2);
  const count = b - a;
  if (count > 400000) return null;  // a wide window: the overview is as good at screen resolution
  // start from the last overview point at or before event a
  // (or from the bytes before the first event, when no overview point comes that early)
  let k = -1; while (k + 1 < N && D.index[k + 1] <= a) k++;
  const K = D.names.length, vals = new Float64Array(K);
  for (let j = 0; j < K; j++) vals[j] = k < 0 ? D.fine.initial[j] : D.values[j][k];
  let tot = 0; for (let j = 0; j < K; j++) tot += vals[j];
  for (let e = (k < 0 ? -1 : D.index[k]) + 1; e <= a; e++){ vals[F.band[e]] += F.delta[e]; tot += F.delta[e]; }
  const out = {x: [], index: [], total: [], floor: [], values: [], exact: count <= width, events: count, x0, x1};
  for (let j = 0; j < K; j++) out.values.push([]);
  const xa = a < 0 ? D.fine.x0 : F.x[a], xb = F.x[b - 1], span = Math.max(xb - xa, 1e-9);
  let col = -1, best = -1, low = Infinity;
  const emit = (e, x) => { out.x.push(x); out.index.push(e); out.total.push(tot); for (let j = 0; j < K; j++) out.values[j].push(vals[j]); };
  for (let e = a; e < b; e++){
    if (e > a){ vals[F.band[e]] += F.delta[e]; tot += F.delta[e]; }  // (the state is already after event a)
    const x = e < 0 ? D.fine.x0 : F.x[e];
    if (out.exact){ emit(e, x); out.floor.push(tot); continue; }
    const c = Math.min(width - 1, Math.floor((x - xa) / span * width));
    if (c !== col){ col = c; best = -1; low = Infinity; out.floor.push(tot); emit(e, x); best = tot; }
    const last = out.x.length - 1;
    if (tot < low){ low = tot; out.floor[last] = low; }
    if (tot > best){ best = tot; out.x[last] = x; out.index[last] = e; out.total[last] = tot;
      for (let j = 0; j < K; j++) out.values[j][last] = vals[j]; }
  }
  return out;
}
// -- drawing ------------------------------------------------------------------------------------------------------
function draw(){
  if (!N){ svg.innerHTML = '<text x="20" y="40">no trace events: the snapshot holds the final state only</text>'; return; }
  const n = V.x.length, lo = V === D ? vlo : 0, hi = V === D ? vhi : n - 1;
  const x0 = V.x[lo], x1 = V.x[hi];
  let ymax = 1; for (let i = lo; i <= hi; i++) ymax = Math.max(ymax, V.total[i]);
  const sx = v => L + (W - L - R) * (x1 === x0 ? 0.5 : (v - x0) / (x1 - x0));
  const sy = v => H - B - (H - B - T) * (v / ymax);
  const parts = [];
  for (let t = 0; t <= 4; t++){  // the grid first: under the bands, so it never crosses them
    const v = ymax * t / 4, y = sy(v);
    parts.push('<line class="grid" x1="' + L + '" x2="' + (W - R) + '" y1="' + y + '" y2="' + y + '"/>' +
               '<text x="' + (L - 6) + '" y="' + (y + 4) + '" text-anchor="end" font-size="11">' + fmt(v) + '</text>');
    // times (or event numbers) evenly along the axis: the points of a window need not be
    const xv = x0 + (x1 - x0) * t / 4;
    parts.push('<text x="' + sx(xv) + '" y="' + (H - 12) + '" text-anchor="' + (t === 4 ? 'end' : t ? 'middle' : 'start') +
               '" font-size="11">' + esc(whenX(xv, Math.round(xv))) + '</text>');
  }
  let base = new Float64Array(hi - lo + 1);
  for (let k = 0; k < D.names.length; k++){
    const top = new Float64Array(hi - lo + 1), up = [], dn = [];
    for (let j = 0; j <= hi - lo; j++){
      top[j] = base[j] + V.values[k][lo + j];
      // a step: flat until the next point (no diagonal between two points: that would read as a gradual change)
      const xa = sx(V.x[lo + j]), xb = sx(V.x[Math.min(lo + j + 1, hi)]);
      // the top edge left to right, the bottom edge (the band below) right to left: each step is a rectangle,
      // the first one at the level in use at the window's start
      up.push(xa.toFixed(1) + ',' + sy(top[j]).toFixed(1), xb.toFixed(1) + ',' + sy(top[j]).toFixed(1));
      dn.push(xa.toFixed(1) + ',' + sy(base[j]).toFixed(1), xb.toFixed(1) + ',' + sy(base[j]).toFixed(1));
    }
    parts.push('<polygon class="band" data-band="' + k + '" fill="' + D.colors[k] + '" points="' + up.join(' ') + ' ' +
               dn.reverse().join(' ') + '"><title>' + esc(D.names[k]) + '</title></polygon>');
    base = top;
  }
  const fl = [];
  for (let j = lo; j <= hi; j++){ const y = sy(V.floor[j]).toFixed(1);
    fl.push(sx(V.x[j]).toFixed(1) + ',' + y, sx(V.x[Math.min(j + 1, hi)]).toFixed(1) + ',' + y); }
  parts.push('<polyline class="floor" points="' + fl.join(' ') +
             '"><title>lowest allocated within each column</title></polyline>');
  for (const [t, name] of D.markers){ if (t < x0 || t > x1) continue;
    parts.push('<line class="marker" x1="' + sx(t) + '" x2="' + sx(t) + '" y1="' + T + '" y2="' + (H - B) +
               '"><title>' + esc(name) + '</title></line>'); }
  if (sel >= lo && sel <= hi){ const xs = sx(V.x[sel]);
    parts.push('<line class="moment" x1="' + xs + '" x2="' + xs + '" y1="' + T + '" y2="' + (H - B) + '"/>'); }
  svg.innerHTML = parts.join('');
  q('.range-label').textContent = when(lo) + ' \u2192 ' + when(hi) + '  (' + (hi - lo + 1) +
    (V === D ? ' of ' + N + ' points)' : (V.exact ? ' events)' : ' columns)'));
  q('.exactness').textContent = exactness(lo, hi);
}
function exactness(lo, hi){
  if (V !== D && !live()){
    return V.exact ? 'exact: every one of the ' + V.events + ' events in view, rebuilt from the events this file holds'
      : V.events + ' events in view, ' + V.x.length + ' columns, each drawn at its highest event (the dotted line its lowest): zoom in for single events';
  }
  if (V !== D){
    return V.exact ? 'exact: every one of the ' + V.events + ' events in view, drawn as steps'
      : V.events + ' events in view, ' + V.x.length + ' columns: each column is drawn at its highest event (exact bytes per site), the dotted line is its lowest; zoom in for single events';
  }
  const per = (D.events + 1) / Math.max(N, 1);
  if (per <= 1) return 'exact: every event of the trace is a point';
  const k = Math.ceil(per);
  if (F) return 'each point is the highest of about ' + k + ' events (the dotted line their lowest); zoom in: this file holds every event';
  return 'each point is the highest of about ' + k + ' events (the dotted line their lowest): this file is exact to ' +
    k + ' events' + (hi - lo < 60 ? '; for single events open it in a kernel with snap.view()' : '');
}
function legend(){
  q('.legend').innerHTML = D.names.map((n, k) => '<span><i style="background:' + D.colors[k] + '"></i>' + esc(n) + '</span>').join('');
}
// -- the window ------------------------------------------------------------------------------------------------
function near(arr, v){ let a = 0, b = arr.length - 1; if (b < 0) return -1;
  while (b - a > 1){ const m = (a + b) >> 1; if (arr[m] <= v) a = m; else b = m; }
  return Math.abs(arr[b] - v) < Math.abs(arr[a] - v) ? b : a; }
function setWindow(x0, x1, focusX){
  // the file's points inside the window (at least two)
  let a = 0, b = N - 1;
  while (a < N - 1 && D.x[a] < x0) a++;  // first point at or after x0 ...
  while (b > 0 && D.x[b] > x1) b--;      // ... and last at or before x1
  if (b - a < 1){ a = Math.max(0, Math.min(near(D.x, x0), N - 2)); b = Math.min(N - 1, a + 1); }
  vlo = a; vhi = b;
  rlo.value = String(a); rhi.value = String(b);  // the sliders follow the window (a zoom, "go to peak")
  V = D; sel = focusX === undefined ? -1 : near(D.x, focusX); draw();
  const pending = live() ? ask({op: 'window', x0: x0, x1: x1, width: W - L - R}) : null;
  if (!pending){
    // the overview while it has a point per column or more; the file's events once it gets coarser than that
    const fw = F && vhi - vlo + 1 < W - L - R ? fineWindow(x0, x1, W - L - R) : null;
    if (fw){ V = fw; sel = focusX === undefined ? -1 : near(V.x, focusX); draw(); }
    return Promise.resolve();
  }
  q('.exactness').textContent = 'asking the kernel for the exact window\u2026';
  const my = ++windowToken;
  return pending.then(a => {
    if (my !== windowToken) return;  // the window moved again meanwhile
    if (a.error){ q('.exactness').textContent = 'the kernel could not answer: ' + a.error; return; }
    V = a; sel = focusX === undefined ? -1 : near(V.x, focusX); draw();
  });
}
function fullWindow(){ return setWindow(D.x[0], D.x[N - 1]); }
// -- one moment ------------------------------------------------------------------------------------------------
function select(j){
  sel = j; draw(); page = 0;
  if (live()) return showLive(V.index[j], 0);
  return showFile(j);
}
function isPeak(j){ return V.index[j] === D.index[D.peak_point]; }
function showLive(event, offset){
  const j = sel, my = ++aliveToken;
  const p = ask({op: 'alive', event: event, offset: offset, limit: 50});
  return p.then(a => {
    if (my !== aliveToken) return;  // a later click already asked: this answer is stale
    if (a.error){ q('.moment-summary').textContent = 'the kernel could not answer: ' + a.error; return; }
    lastAlive = a;
    q('.moment-summary').innerHTML = '<b>' + esc(when(j)) + '</b> (after event <span class="event">' + a.event +
      '</span>): ' + fmt(a.allocated) + ' allocated' +
      (isPeak(j) ? ' (the peak)' : '') + '; ' + a.count + ' blocks alive (' + fmt(a.bytes) + '), all of them listed' +
      ' (blocks ' + (a.count ? a.offset + 1 : 0) + '\u2013' + (a.offset + a.rows.length) + ' of ' + a.count + ')';
    // every live block, by site (not only this page's)
    q('table.alive-sites tbody').innerHTML = a.sites.map(([s, b, c]) => '<tr' + (s === null ? ' class="more"' : '') +
      '><td>' + esc(s === null ? '+' + a.more_sites + ' more sites' : s) + '</td><td class="num">' + fmt(b) +
      '</td><td class="num">' + c + '</td></tr>').join('');
    q('table.alive-blocks tbody').innerHTML = a.rows.map((r, i) => '<tr class="blk" data-i="' + i + '"><td class="num">' +
      fmt(r.bytes) + '</td><td>' + esc(r.site) + '</td><td>' + esc(r.since) + '</td></tr>').join('');
    const pager = q('.pager');
    pager.hidden = a.count <= a.rows.length;
    pager.querySelector('.prev').disabled = a.offset <= 0;
    pager.querySelector('.next').disabled = a.offset + a.rows.length >= a.count;
    pager.querySelector('.page-label').textContent = 'blocks ' + (a.offset + 1) + '\u2013' + (a.offset + a.rows.length) + ' of ' + a.count;
    if (a.rows.length) showStack(0); else q('pre.stack').textContent = '';
  });
}
function showFile(j){
  const p = V.index[j];
  const alive = [];
  for (let i = 0; i < D.iv_size.length; i++) if (D.iv_start[i] <= p && p < D.iv_end[i]) alive.push(i);
  alive.sort((a, b) => D.iv_size[b] - D.iv_size[a]);
  let listed = 0; const bySite = new Map();
  for (const i of alive){ listed += D.iv_size[i]; const s = D.stack_site[D.iv_stack[i]];
    const e = bySite.get(s) || [0, 0]; e[0] += D.iv_size[i]; e[1] += 1; bySite.set(s, e); }
  const total = V.total[j];
  // how many blocks were alive in all (file or not): counted in Python for each point of the file
  const k = near(D.x, V.x[j]), count = D.index[k] === p ? D.alive_count[k] : null;
  const left = count === null ? null : count - alive.length;
  q('.moment-summary').innerHTML = '<b>' + esc(when(j)) + '</b>' + (p >= 0 ? ' (after event <span class="event">' + p +
    '</span>)' : '') + ': <span class="allocated" data-bytes="' + total + '">' + fmt(total) + '</span> allocated' +
    (isPeak(j) ? ' (the peak)' : '') + '; ' + alive.length + ' blocks listed (' + fmt(listed) + ')' +
    (total > listed || left ? '; not in this file: ' + (left === null ? '' : left + ' smaller blocks, ') + fmt(total - listed) +
      ' (it keeps the ' + D.iv_size.length + ' largest of the trace\u2019s ' + D.intervals_total + ' blocks; snap.view() in a kernel lists every one)' : '');
  const allSites = [...bySite.entries()].sort((a, b) => b[1][0] - a[1][0]);
  const sites = allSites.slice(0, 15), moreSites = allSites.slice(15);
  q('table.alive-sites tbody').innerHTML = sites.map(([s, e]) => '<tr><td>' + esc(D.sites[s]) + '</td><td class="num">' +
    fmt(e[0]) + '</td><td class="num">' + e[1] + '</td></tr>').join('') + (moreSites.length ?
    '<tr class="more"><td>+' + moreSites.length + ' more sites</td><td class="num">' +
    fmt(moreSites.reduce((t, [, e]) => t + e[0], 0)) + '</td><td class="num">' +
    moreSites.reduce((t, [, e]) => t + e[1], 0) + '</td></tr>' : '');
  const moreBlocks = alive.slice(60);
  lastAlive = null;
  q('table.alive-blocks tbody').innerHTML = alive.slice(0, 60).map(i => '<tr class="blk" data-i="' + i + '"><td class="num">' +
    fmt(D.iv_size[i]) + '</td><td>' + esc(D.sites[D.stack_site[D.iv_stack[i]]]) + '</td><td>' +
    (D.iv_start[i] < 0 ? 'before the trace' : (D.x_unit === 'us' && D.iv_t[i] !== null ?
      ((D.iv_t[i] - D.x[0]) / 1e6).toFixed(4) + ' s' : 'event ' + D.iv_start[i])) + '</td></tr>').join('') +
    (moreBlocks.length ? '<tr class="more"><td class="num">' + fmt(moreBlocks.reduce((t, i) => t + D.iv_size[i], 0)) +
      '</td><td>+' + moreBlocks.length + ' more blocks</td><td></td></tr>' : '');
  q('.pager').hidden = true;
  if (alive.length) showStack(alive[0]); else q('pre.stack').textContent = '';
  return Promise.resolve();
}
function showStack(i){
  if (lastAlive){ const r = lastAlive.rows[i];
    q('pre.stack').textContent = fmt(r.bytes) + ' allocated at\n  ' + (r.stack.length ? r.stack.join('\n  ') : '(no stack recorded)');
    return; }
  const frames = D.stacks[D.iv_stack[i]].map(f => D.frames[f]);
  q('pre.stack').textContent = fmt(D.iv_size[i]) + ' allocated at\n  ' + (frames.length ? frames.join('\n  ') : '(no stack recorded)');
}
// -- controls --------------------------------------------------------------------------------------------------
q('table.alive-blocks').addEventListener('click', e => { const tr = e.target.closest('tr.blk'); if (tr) showStack(+tr.dataset.i); });
q('.pager .prev').addEventListener('click', () => { if (lastAlive) showLive(lastAlive.event, Math.max(0, lastAlive.offset - 50)); });
q('.pager .next').addEventListener('click', () => { if (lastAlive) showLive(lastAlive.event, lastAlive.offset + 50); });
svg.addEventListener('click', e => {
  if (!N) return;
  const r = svg.getBoundingClientRect(), vx = (e.clientX - r.left) / r.width * W;
  const n = V.x.length, lo = V === D ? vlo : 0, hi = V === D ? vhi : n - 1;
  const x0 = V.x[lo], x1 = V.x[hi], v = x0 + (vx - L) / (W - L - R) * (x1 - x0);
  let a = lo, b = hi;
  while (b - a > 1){ const m = (a + b) >> 1; if (V.x[m] <= v) a = m; else b = m; }
  select(Math.abs(V.x[b] - v) < Math.abs(V.x[a] - v) ? b : a);
});
const rlo = q('input.lo'), rhi = q('input.hi');
rlo.max = rhi.max = String(Math.max(N - 1, 0)); rlo.value = '0'; rhi.value = String(Math.max(N - 1, 0));
function onRange(){ let a = +rlo.value, b = +rhi.value; if (a > b) [a, b] = [b, a]; if (b === a) b = Math.min(a + 1, N - 1);
  return setWindow(D.x[a], D.x[b]); }
rlo.addEventListener('input', onRange); rhi.addEventListener('input', onRange);
function span(){ return V === D ? [D.x[vlo], D.x[vhi]] : [V.x0, V.x1]; }
function zoom(f){
  // narrow (or widen) the window around the chosen moment (or the middle), keeping that moment chosen
  const [a, b] = span(), keep = sel >= 0 ? V.x[sel] : undefined, c = keep === undefined ? (a + b) / 2 : keep;
  const w = Math.min(Math.max((b - a) * f, 1e-6), D.x[N - 1] - D.x[0]);
  const lo = Math.max(D.x[0], Math.min(c - w / 2, D.x[N - 1] - w));
  return setWindow(lo, lo + w, keep).then(() => { if (keep !== undefined && sel >= 0) return select(sel); });
}
q('button.zoom-in').addEventListener('click', () => zoom(1 / 8));
q('button.zoom-out').addEventListener('click', () => zoom(8));
q('button.reset').addEventListener('click', () => { rlo.value = '0'; rhi.value = String(N - 1); onRange(); });
function goPeak(){
  const px = D.x[D.peak_point];
  const [a, b] = span();
  const move = px < a || px > b ? (() => {  // the peak is outside the window: move the window (same width) to it
    const w = b - a, lo = Math.max(D.x[0], Math.min(px - w / 2, D.x[N - 1] - w));
    const i = near(D.x, lo), k = near(D.x, lo + w); rlo.value = String(i); rhi.value = String(k);
    return setWindow(lo, lo + w, px); })() : Promise.resolve();
  return move.then(() => {
    let j = -1; for (let i = 0; i < V.x.length; i++) if (V.index[i] === D.index[D.peak_point]){ j = i; break; }
    return select(j >= 0 ? j : near(V.x, px));
  });
}
q('button.peak').addEventListener('click', goPeak);
legend(); draw();
const linkUp = link ? link.ready() : Promise.resolve(false);
linkUp.then(ok => {
  linked = !!ok;
  if (token && !linked) rerunNote((link ? 'No kernel answers this viewer' : 'This is the saved output of snap.view()') +
    ': re-run the cell for the live view (the kernel answers every window exactly and lists every block alive); ' +
    'until then the chart uses the events this output holds.');
  // a kernel that was busy (the next cell running) answers later: the panel turns live then
  if (link && !linked) link.onLate(() => { linked = true; const n = q('.rerun'); if (n) n.remove();
    fullWindow().then(() => { if (N) return goPeak(); }); });
})
  .then(() => live() ? fullWindow() : loadFine().catch(() => { F = null; }).then(() => loadIntervals().catch(() => {})))
  .then(() => { if (N) return goPeak(); });
}
