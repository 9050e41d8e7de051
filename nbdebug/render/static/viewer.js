// nbdebug memory viewer: draws one device's panel from the JSON in its script element of class nbd-mem-data.
// Package data, inlined into the notebook output and the exported HTML (nothing is fetched). ROOT_ID is replaced
// by the id of the panel (or of the multi-device wrapper, whose select switches the visible panel).
// Colours: CSS classes from viewer.css (theme variables); only the bands' colours come from the data.
(function(rootId){
const root = document.getElementById(rootId);
if (!root || root.dataset.ready) return;
root.dataset.ready = '1';
for (const el of root.querySelectorAll(':scope > .nbd-live')) el.hidden = false;
if (root.classList.contains('nbd-mem-multi')){
  const pick = root.querySelector('select.nbd-device');
  pick.addEventListener('change', () => {
    for (const p of root.querySelectorAll(':scope > .nbd-mem')) p.style.display = p.dataset.device === pick.value ? '' : 'none';
  });
  return;
}
for (const hint of root.querySelectorAll(':scope > .nbd-mem-static')) hint.remove();
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
  parts.push('<polyline class="floor" points="' + fl.join(' ') +
             '"><title>lowest allocated within each time slice</title></polyline>');
  for (let t = 0; t <= 4; t++){
    const v = ymax * t / 4, y = sy(v);
    parts.push('<line class="grid" x1="' + L + '" x2="' + (W - R) + '" y1="' + y + '" y2="' + y + '"/>' +
               '<text x="' + (L - 6) + '" y="' + (y + 4) + '" text-anchor="end" font-size="11">' + fmt(v) + '</text>');
    const xv = lo + Math.round((hi - lo) * t / 4);
    parts.push('<text x="' + sx(D.x[xv]) + '" y="' + (H - 12) + '" text-anchor="middle" font-size="11">' + esc(when(xv)) + '</text>');
  }
  for (const [t, name] of D.markers){ if (t < x0 || t > x1) continue;
    parts.push('<line class="marker" x1="' + sx(t) + '" x2="' + sx(t) + '" y1="' + T + '" y2="' + (H - B) +
               '"><title>' + esc(name) + '</title></line>'); }
  if (sel >= lo && sel <= hi){ const xs = sx(D.x[sel]);
    parts.push('<line class="moment" x1="' + xs + '" x2="' + xs + '" y1="' + T + '" y2="' + (H - B) + '"/>'); }
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
  const allSites = [...bySite.entries()].sort((a, b) => b[1][0] - a[1][0]);
  const sites = allSites.slice(0, 15), moreSites = allSites.slice(15);
  q('table.alive-sites tbody').innerHTML = sites.map(([s, e]) => '<tr><td>' + esc(D.sites[s]) + '</td><td class="num">' +
    fmt(e[0]) + '</td><td class="num">' + e[1] + '</td></tr>').join('') + (moreSites.length ?
    '<tr class="more"><td>+' + moreSites.length + ' more sites</td><td class="num">' +
    fmt(moreSites.reduce((t, [, e]) => t + e[0], 0)) + '</td><td class="num">' +
    moreSites.reduce((t, [, e]) => t + e[1], 0) + '</td></tr>' : '');
  const moreBlocks = alive.slice(60);
  q('table.alive-blocks tbody').innerHTML = alive.slice(0, 60).map(i => '<tr class="blk" data-i="' + i + '"><td class="num">' +
    fmt(D.iv_size[i]) + '</td><td>' + esc(D.sites[D.stack_site[D.iv_stack[i]]]) + '</td><td>' +
    (D.iv_start[i] < 0 ? 'before the trace' : (D.x_unit === 'us' && D.iv_t[i] !== null ?
      ((D.iv_t[i] - D.x[0]) / 1e6).toFixed(4) + ' s' : 'event ' + D.iv_start[i])) + '</td></tr>').join('') +
    (moreBlocks.length ? '<tr class="more"><td class="num">' + fmt(moreBlocks.reduce((t, i) => t + D.iv_size[i], 0)) +
      '</td><td>+' + moreBlocks.length + ' more blocks</td><td></td></tr>' : '');
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
q('button.peak').addEventListener('click', () => {
  const p = D.peak_point;
  if (p < lo || p > hi){  // the peak is outside the zoomed range: move the range (same width) so it shows
    const w = hi - lo, a = Math.max(0, Math.min(p - (w >> 1), N - 1 - w));
    rlo.value = String(a); rhi.value = String(a + w); onRange();
  }
  select(p);
});
legend(); draw();
if (N) select(D.peak_point);
})(ROOT_ID);
