"""Every panel kind, in JupyterLab Light and Dark, readable: text/background contrast >= 4.5:1 (WCAG AA).

One notebook makes each kind of panel (error, OOM, memtrace, snapshot viewer, NaN sentinel, doctor, GradMonitor,
XLA, torch.compile, torchrun); the page is then checked in both themes from the computed styles of every element
inside a panel that shows text, and screenshots of both themes go to docs/.
"""

from __future__ import annotations

import pytest

from tests.browser.conftest import run_notebook, shot
from tests.conftest import REPO

pytestmark = pytest.mark.browser

XLA_REPORT = REPO / "tests" / "data" / "xla" / "era2024_issue8059.txt"

CELLS = [
    "%load_ext nbdebug\nimport nbdebug, torch\nfrom torch import nn\ntorch.manual_seed(0);",
    # OOM panel with the allocator's snapshot
    "from nbdebug.core.memory._oom import enrich_oom\n"
    "oom_snap = nbdebug.load_snapshot(nbdebug.examples.path('snapshots/flexgen_oom.pickle'))\n"
    "exc = torch.cuda.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total "
    "capacity; 13.01 GiB already allocated; 1.28 GiB free; 13.30 GiB reserved in total by PyTorch)')\n"
    "enrich_oom(exc, nbdebug.explain(exc), oom_snap)",
    # %%memtrace on CPU
    # (the last line allocates through an operator: no call, so no recorded line)
    "%%memtrace --device cpu\nnet = nn.Linear(64, 64)\nkept = [net(torch.randn(32, 64)) for _ in range(3)]\n"
    "gram = kept[0] @ kept[0].T",
    # %%memtrace around a model's first training steps: what training keeps is a remark, not the leak warning
    "%%memtrace --device cpu\nnet3 = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))\n"
    "adam = torch.optim.Adam(net3.parameters())\nfor _ in range(2):\n    adam.zero_grad()\n"
    "    nn.functional.cross_entropy(net3(torch.randn(64, 512)), torch.randint(0, 10, (64,))).backward()\n"
    "    adam.step()",
    # snapshot viewer
    "nbdebug.load_snapshot(nbdebug.examples.path('snapshots/forward_fp32_128.pickle'))",
    # NaN sentinel: the error panel with its section, as the post-run hook would show it (only the last cell
    # may raise: JupyterLab stops "run all" at the first error)
    "from nbdebug.ipython._explainer import diagnose_exception\nfrom nbdebug.ipython._extension import get_state\n"
    "m = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))\n"
    "try:\n    with nbdebug.nan_sentinel(m):\n        m(torch.full((2, 4), float('nan'))).sum().backward()\n"
    "except nbdebug.NonFiniteError as e:\n    display(diagnose_exception(get_state(get_ipython()), e))",
    # doctor
    "clf = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3), nn.Softmax(dim=1))\n"
    "x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))\n"
    "nbdebug.doctor(clf, (x, y), nn.CrossEntropyLoss(), torch.optim.SGD(clf.parameters(), lr=0.1), steps=30)",
    # GradMonitor
    "net2 = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))\n"
    "opt = torch.optim.SGD(net2.parameters(), lr=0.1)\n"
    "with nbdebug.GradMonitor(net2, num_classes=3, live=False) as mon:\n"
    "    for _ in range(20):\n"
    "        loss = nn.functional.cross_entropy(net2(x), y); opt.zero_grad(); loss.backward()\n"
    "        mon.log_loss(loss); opt.step()\n"
    "mon.history",
    # torch_xla diagnosis from a saved report
    f"nbdebug.xla.diagnose(open({str(XLA_REPORT)!r}).read())",
    # torch.compile check
    "def f(a):\n    if a.sum().item() > 0:\n        return a * 2\n    return a - 1\n"
    "nbdebug.compile_check(f, torch.randn(4))",
    # torchrun with a failing rank
    "%%torchrun -n 2 --timeout 60\nimport torch, torch.distributed as dist\n"
    "if dist.get_rank() == 1:\n    raise ValueError('rank one is broken')\ndist.barrier()",
    # the error panel under a real traceback (last: it stops "run all")
    "model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(16, 2))\nmodel(torch.randn(8, 10))",
]

# every element inside a panel that holds text: its colour against the background painted behind it
CONTRAST_JS = r"""
() => {
  const parse = (c) => {
    const m = c && c.match(/rgba?\(([^)]+)\)/);
    if (!m) return null;
    const p = m[1].split(/[ ,\/]+/).filter(Boolean).map(parseFloat);
    return {r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1};
  };
  const over = (top, base) => ({r: top.r * top.a + base.r * (1 - top.a), g: top.g * top.a + base.g * (1 - top.a),
                                b: top.b * top.a + base.b * (1 - top.a), a: 1});
  const background = (el) => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c && c.a > 0) { layers.push(c); if (c.a >= 1) break; }
    }
    let base = {r: 255, g: 255, b: 255, a: 1};
    for (let i = layers.length - 1; i >= 0; i--) base = over(layers[i], base);
    return base;
  };
  const lum = (c) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b);
  };
  const ratio = (a, b) => { const x = lum(a), y = lum(b); return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05); };
  document.querySelectorAll('.nbdebug details, .nbdebug').forEach(d => { if (d.tagName === 'DETAILS') d.open = true; });
  const panels = [...document.querySelectorAll('.nbdebug, .nbd-viewer, [class*="nbd-"]')].filter(p => !p.closest('.nbdebug') || p.classList.contains('nbdebug'));
  const results = [];
  const seen = new Set();
  for (const panel of panels) {
    for (const el of [panel, ...panel.querySelectorAll('*')]) {
      if (seen.has(el)) continue;
      seen.add(el);
      const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
      if (!own || !el.getClientRects().length) continue;
      const cs = getComputedStyle(el);
      if (cs.visibility === 'hidden' || cs.display === 'none' || parseFloat(cs.opacity) === 0) continue;
      const isSvg = el instanceof SVGElement;
      const fg0 = parse(isSvg ? cs.fill : cs.color);
      if (!fg0) continue;
      const bg = background(isSvg ? el.closest('svg').parentElement : el);
      const fg = over(fg0, bg);
      results.push({text: el.textContent.trim().slice(0, 60), tag: el.tagName, cls: String(el.className && el.className.baseVal !== undefined ? el.className.baseVal : el.className),
                    ratio: ratio(fg, bg), fg: cs.color, bg: `rgb(${Math.round(bg.r)},${Math.round(bg.g)},${Math.round(bg.b)})`});
    }
  }
  return results;
}
"""

MEMTRACE_SPARK_JS = r"""
() => {
  const panel = [...document.querySelectorAll('.jp-OutputArea-output details.nbdebug')]
    .find(d => d.querySelector('summary').textContent.startsWith('memtrace'));
  const svg = panel && panel.querySelector('.nbd-pic-live svg');
  const line = svg && svg.querySelector('polyline');
  if (!line) return null;
  const s = svg.getBoundingClientRect(), l = line.getBoundingClientRect();
  return {w: s.width, h: s.height, line_w: l.width, line_h: l.height, points: line.points.numberOfItems,
          inside: l.left >= s.left - 1 && l.right <= s.right + 1 && l.top >= s.top - 1 && l.bottom <= s.bottom + 1,
          stroke: getComputedStyle(line).stroke};
}
"""

# every block of fix code in a findings table: its white-space and word breaking (a line is never wrapped, nor
# broken inside a word), and its width as a share of its table's
CODE_JS = r"""
() => [...document.querySelectorAll('.jp-OutputArea-output table.nbd-findings pre')].map(p => {
  const cs = getComputedStyle(p);
  return {text: p.innerText.slice(0, 50), space: cs.whiteSpace, wrapped: cs.wordBreak === 'break-all',
          share: p.getBoundingClientRect().width / p.closest('table').getBoundingClientRect().width};
})
"""

KINDS = {  # selector that must be present for each panel kind
    "error": "details.nbd-diagnosis",
    "viewer": ".nbdebug",
}


def _set_theme(page, theme: str) -> None:
    page.evaluate("(t) => window.jupyterapp.commands.execute('apputils:change-theme', {theme: t})", theme)
    page.wait_for_function(
        "(t) => document.body.dataset.jpThemeName === t", arg=theme, timeout=30_000
    )
    page.wait_for_timeout(1500)  # the theme's stylesheet is applied after the attribute changes


@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_every_panel_is_readable(lab, page, theme):
    run_notebook(lab, page, CELLS, f"themes_{theme.split()[-1].lower()}.ipynb", timeout_s=300)
    _set_theme(page, theme)
    panels = page.locator(".jp-OutputArea-output .nbdebug")
    assert panels.count() >= len(CELLS) - 2, f"only {panels.count()} panels rendered"
    # trusted: every chart is the themed inline SVG; its stand-in image (for sanitised renderers) stays hidden
    assert page.locator(".jp-OutputArea-output .nbd-pic-live svg").count() >= 4
    assert page.locator(".jp-OutputArea-output img.nbd-pic-img").count() >= 4
    assert not any(i.is_visible() for i in page.locator(".jp-OutputArea-output img.nbd-pic-img").all())
    # the memtrace sites, in a real kernel: the operator's allocation is the cell's, never nbdebug's or IPython's
    memtrace = page.locator("details.nbdebug", has_text="memtrace").first.inner_text()
    assert "an operator such as @" in memtrace and "line 2" in memtrace, memtrace
    for internal in ("_cell.py", "run_body", "nbdebug/", "interactiveshell", "ipykernel"):
        assert internal not in memtrace, (internal, memtrace)
    # a cell that builds a model and takes training steps: the panel is no warning, and says why
    training = page.locator("details.nbdebug", has_text="training_state").first
    assert "warning" not in (training.get_attribute("class") or ""), training.get_attribute("class")
    said = training.inner_text()
    for part in ("not a leak", "optimizer state", "gradients", "parameters", "zero_grad", "kept as"):
        assert part in said, (part, said)
    assert "loss.item()" not in said and "no_grad" not in said, said
    # the %%memtrace sparkline: drawn inside its chart, across it, rising with the kept outputs
    spark = page.evaluate(MEMTRACE_SPARK_JS)
    assert spark and spark["inside"], spark
    assert spark["line_w"] > 0.9 * spark["w"] and spark["line_h"] > 0.5 * spark["h"], spark
    assert spark["points"] >= 4 and spark["stroke"] not in ("none", ""), spark
    # issue 26, item 11: fix code keeps each line whole (never "capture_scalar_outputs = Tr|ue"), on a row as wide
    # as the findings table's message and kind columns together, not squeezed into a column of its own
    code = page.evaluate(CODE_JS)
    assert code, "no fix code in the panels"
    bad = [c for c in code if c["space"] != "pre" or c["wrapped"] or c["share"] < 0.5]
    assert not bad, bad[:5]
    found = page.evaluate(CONTRAST_JS)
    assert len(found) > 100, f"too few text elements checked: {len(found)}"
    low = [r for r in found if r["ratio"] < 4.5]
    name = theme.split()[-1].lower()
    # the doctor's panel and the error panel, as a user scrolls to them
    page.locator("details.nbdebug", has_text="doctor").first.scroll_into_view_if_needed()
    page.wait_for_timeout(300)
    page.screenshot(path=shot(f"theme_{name}.png"), full_page=False)
    page.locator("details.nbdebug", has_text="memtrace").first.screenshot(path=shot(f"memtrace_{name}.png"))
    page.locator("details.nbdebug", has_text="torchrun: ").first.screenshot(path=shot(f"torchrun_{name}.png"))
    size = page.viewport_size
    page.set_viewport_size({"width": size["width"], "height": 1600})  # the whole panel, above the status bar
    training.screenshot(path=shot(f"memtrace_training_{name}.png"))
    page.set_viewport_size(size)
    page.locator("details.nbd-diagnosis").last.scroll_into_view_if_needed()
    page.wait_for_timeout(300)
    page.screenshot(path=shot(f"theme_{name}_error.png"), full_page=False)
    report = "\n".join(f"{r['ratio']:.2f} {r['tag']}.{r['cls']} {r['fg']} on {r['bg']}: {r['text']!r}" for r in low[:40])
    assert not low, f"{len(low)} of {len(found)} text elements below 4.5:1 in {theme}:\n{report}"
