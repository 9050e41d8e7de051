"""Panels in a notebook reopened from disk, untrusted, in a real JupyterLab (Light and Dark).

The notebook is written with its outputs by another process (as one from git, a colleague or GitHub is), so
JupyterLab does not trust it: it runs no script and sanitises the HTML (no <style>, no inline <svg>).  Every chart
must still show as a picture, no chart may flatten into a run of its labels, and the memory viewer must say how to
get its interactive view.
"""

from __future__ import annotations

import base64
import re

import pytest

from nbdebug.render._html import INTERACTIVE_NOTE
from tests.browser.conftest import open_notebook, shot

pytestmark = pytest.mark.browser


def _outputs(shell) -> list[tuple[str, dict]]:
    """(source, mime bundle) of cells made in this process: doctor, GradMonitor history, snapshot viewer, timeline,
    a memtrace report."""
    import torch
    from torch import nn

    import nbdebug
    from nbdebug.core.training.grads import GradMonitor

    torch.manual_seed(0)
    clf = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3), nn.Softmax(dim=1))
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    report = nbdebug.doctor(clf, (x, y), nn.CrossEntropyLoss(), torch.optim.SGD(clf.parameters(), lr=0.1), steps=30)
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with GradMonitor(net, num_classes=3, live=False) as mon:
        for _ in range(20):
            loss = nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            mon.log_loss(loss)
            opt.step()
    snap = nbdebug.load_snapshot(nbdebug.examples.path("snapshots/forward_fp32_128.pickle"))
    with nbdebug.memtrace("cpu") as rec:
        kept = [net(torch.randn(64, 8)) for _ in range(4)]
    results = [("nbdebug.doctor(...)", report), ("mon.history", mon.history), ("snap", snap),
               ("snap.timeline()", snap.timeline()), ("rec.result", rec.result),
               ("mon.history.plot()", mon.history.plot())]
    del kept
    out = []
    for source, obj in results:
        data, _ = shell.display_formatter.format(obj)
        # a notebook file holds pictures as base64 text, as a kernel sends them
        data = {k: base64.b64encode(v).decode() if isinstance(v, bytes) else v for k, v in data.items()}
        out.append((source, data))
    return out


# each picture drawn on a canvas over the page's own background: the share of it that is light
LIGHT_SHARE_JS = r"""
(sel) => {
  const page = getComputedStyle(document.body).backgroundColor;
  return [...document.querySelectorAll(sel + ' img')].filter(i => i.complete && i.naturalWidth > 0).map(img => {
    const c = document.createElement('canvas');
    c.width = img.naturalWidth; c.height = img.naturalHeight;
    const g = c.getContext('2d');
    g.fillStyle = page; g.fillRect(0, 0, c.width, c.height); g.drawImage(img, 0, 0);
    const d = g.getImageData(0, 0, c.width, c.height).data;
    let light = 0;
    for (let i = 0; i < d.length; i += 4) {
      if ((0.2126 * d[i] + 0.7152 * d[i + 1] + 0.0722 * d[i + 2]) / 255 > 0.75) light++;
    }
    return {src: img.src.slice(0, 26), light: light / (d.length / 4), page};
  });
}
"""

# what the sanitised tables look like: alignment of text cells, of fix code, and the severity's colour
TABLES_JS = r"""
(sel) => {
  const outs = [...document.querySelectorAll(sel + ' table.nbd-findings')];
  const td = outs.flatMap(t => [...t.querySelectorAll('td')].filter(c => c.innerText.trim()))
    .map(c => getComputedStyle(c).textAlign);
  const pre = outs.flatMap(t => [...t.querySelectorAll('pre')]).map(p => {
    const cs = getComputedStyle(p);
    return {align: cs.textAlign, space: cs.whiteSpace};
  });
  const sev = outs.flatMap(t => [...t.querySelectorAll('tr.nbd-finding td:first-child > *')])
    .map(s => getComputedStyle(s).backgroundColor);
  return {td, pre, sev};
}
"""


def _svg_text(html: str) -> list[str]:
    """The text of each inline SVG chart, run together as a sanitiser that keeps text would show it."""
    runs = []
    for svg in re.findall(r"<svg\b.*?</svg>", html, flags=re.S):
        pieces = re.findall(r">([^<]+)<", svg)
        if len(pieces) >= 2:  # labels run together: the tell-tale of a flattened chart
            runs.append("".join(pieces))
    return runs


@pytest.fixture(scope="module")
def untrusted_notebook(lab, shell):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    flat: list[str] = []
    for i, (source, data) in enumerate(_outputs(shell)):
        cell = nbformat.v4.new_code_cell(source, execution_count=i + 1)
        cell.outputs = [nbformat.v4.new_output("execute_result", data=data, execution_count=i + 1)]
        nb.cells.append(cell)
        flat += _svg_text(data.get("text/html", ""))
    nbformat.write(nb, lab.root / "untrusted.ipynb")  # unsigned: JupyterLab will not trust it
    assert flat, "no chart in the outputs: nothing to check"
    return "untrusted.ipynb", flat


def _open(lab, page, name: str) -> None:
    open_notebook(lab, page, name, "w.node.querySelectorAll('.jp-OutputArea-output').length >= 4")
    page.wait_for_timeout(1000)


@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_reopened_untrusted_notebook_shows_every_chart(lab, page, untrusted_notebook, theme):
    from tests.browser.test_themes import _set_theme

    name, flat = untrusted_notebook
    _open(lab, page, name)
    _set_theme(page, theme)
    trusted = page.evaluate("() => window.__nbdPanel.content.widgets.map(c => c.model.trusted)")
    assert trusted and not any(trusted), "the notebook should open untrusted"
    out = ".jp-OutputArea-output"
    assert page.locator(f"{out} script").count() == 0 and page.locator(f"{out} svg").count() == 0  # sanitised
    # every chart is a decoded, visible picture
    images = page.evaluate(
        """(sel) => [...document.querySelectorAll(sel + ' img')].map(i => ({
            src: i.src.slice(0, 26), ok: i.complete && i.naturalWidth > 0,
            w: i.getBoundingClientRect().width, h: i.getBoundingClientRect().height}))""", out)
    charts = [i for i in images if i["src"] == "data:image/svg+xml;base64,"]
    assert len(charts) >= 6, images
    assert all(i["ok"] and i["w"] > 100 and i["h"] > 30 for i in charts), charts
    # the memtrace report's sparkline is one of them
    memtrace_pic = page.locator(f"{out} details.nbdebug", has_text="memtrace").locator("img.nbd-pic-img")
    assert memtrace_pic.count() == 1 and memtrace_pic.is_visible()
    # no chart flattened into text ("loss0.8511.390step 199chance..."), in any output
    text = " ".join(page.locator(out).all_inner_texts())
    squashed = " ".join(text.split())
    for run in flat:
        assert " ".join(run.split()) not in squashed, run
    # the viewer: its static chart and the note; not its controls, which do nothing without the script
    viewer = page.locator(f"{out} .nbd-mem")
    assert INTERACTIVE_NOTE in viewer.inner_text()
    assert viewer.locator("img").first.is_visible()
    assert not viewer.locator("button:has-text('go to peak')").is_visible()
    assert "click the chart" not in viewer.inner_text()
    # issue 26, item 10: no picture is a light box on a dark page (each is laid on the page's own background)
    light = page.evaluate(LIGHT_SHARE_JS, out)
    assert len(light) >= 7 and any(i["src"].startswith("data:image/png") for i in light), light
    if theme.endswith("Dark"):
        boxes = [i for i in light if i["light"] > 0.2]
        assert not boxes, boxes
    # untrusted tables: text left-aligned, fix code left-aligned on whole lines, the severity coloured
    cells = page.evaluate(TABLES_JS, out)
    assert cells["td"] and all(a in ("left", "start") for a in cells["td"]), cells["td"]
    assert cells["pre"] and all(p["align"] in ("left", "start") and p["space"] == "pre" for p in cells["pre"]), cells
    assert cells["sev"] and all(c not in ("rgba(0, 0, 0, 0)", "transparent") for c in cells["sev"]), cells["sev"]
    tag = theme.split()[-1].lower()
    page.evaluate("(sel) => document.querySelector(sel).scrollIntoView({block: 'start'})", f"{out} .nbd-mem")
    page.wait_for_timeout(300)
    page.screenshot(path=shot(f"untrusted_viewer_{tag}.png"))
    page.locator(f"{out} details.nbdebug", has_text="doctor").first.scroll_into_view_if_needed()
    page.screenshot(path=shot(f"untrusted_doctor_{tag}.png"))
