"""The memory panels as a user sees them in JupyterLab: Light and Dark with a live kernel, and the same notebook
reopened untrusted; the screenshots go where ``shot()`` says (docs/ under ``make screenshots``)."""

from __future__ import annotations

import json
import re

import pytest

from tests.browser.conftest import run_notebook, shot
from tests.browser.test_themes import _set_theme

pytestmark = pytest.mark.browser

CELLS = [
    "%load_ext nbdebug\nimport nbdebug, torch\nimport nbdebug.examples\ntorch.manual_seed(0)\n"
    "model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))\n"
    "criterion = torch.nn.MSELoss()\nopt = torch.optim.Adam(model.parameters())\n"
    "batches = [(torch.randn(256, 64), torch.randn(256, 1)) for _ in range(5)]",
    "%%memtrace --device cpu\npredictions = [model(xb) for xb, _ in batches]",
    "%%memtrace --device cpu\nlosses = []\nfor xb, yb in batches:\n    opt.zero_grad()\n"
    "    loss = criterion(model(xb), yb)\n    loss.backward()\n    opt.step()\n    losses.append(loss)",
    "snap = nbdebug.load_snapshot(nbdebug.examples.path('snapshots/transformer_step.pickle'))\nsnap.view()",
]

# what a person should never read in a panel
RAW = re.compile(r"\w+_bytes=\d|ipykernel_\d+|<listcomp>|Error displaying widget|asking the kernel")


def _visible_text(page) -> str:
    return str(page.evaluate("() => [...document.querySelectorAll('.jp-OutputArea-output')]"
                             ".filter(o => o.getClientRects().length).map(o => o.innerText).join('\\n')"))


@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_memory_panels_live_in_light_and_dark(lab, page, theme):
    tag = theme.split()[-1].lower()
    run_notebook(lab, page, CELLS, f"memory_looks_{tag}.ipynb", timeout_s=300)
    _set_theme(page, theme)
    root = ".nbdmem-widget .nbd-mem"
    page.wait_for_function("(sel) => /the peak/.test(document.querySelector(sel).textContent)",
                           arg=f"{root} .moment-summary", timeout=60_000)
    text = _visible_text(page)
    assert not RAW.search(text), RAW.search(text)
    assert "in a list comprehension" in text and "predictions = [model(xb).detach()" in text
    assert "activations of each step" in text and text.count("activations of each step") == 1  # the listcomp only
    # one viewer on screen, the live one, stacked by the model's own lines (not one flat area)
    assert sum(p.is_visible() for p in page.locator(".nbd-mem").all()) == 1
    assert page.locator(f"{root} svg.chart polygon.band").count() >= 5
    panel = page.locator(".jp-OutputArea-output details.nbdebug", has_text="memtrace").first
    panel.scroll_into_view_if_needed()
    panel.screenshot(path=shot(f"memtrace_comprehension_{tag}.png"))
    page.locator(f"{root} svg.chart").scroll_into_view_if_needed()
    page.screenshot(path=shot(f"memory_viewer_live_{tag}.png"))


def test_memory_panels_reopened_untrusted(lab, page):
    import nbformat

    run_notebook(lab, page, CELLS, "memory_looks_saved.ipynb", timeout_s=300)
    page.wait_for_function("(sel) => /the peak/.test(document.querySelector(sel).textContent)",
                           arg=".nbdmem-widget .nbd-mem .moment-summary", timeout=60_000)
    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_timeout(1500)
    page.evaluate("() => window.jupyterapp.commands.execute('kernelmenu:shutdown')")
    # a copy the server never signed: it opens untrusted (from git, from a colleague)
    nb = nbformat.read(lab.root / "memory_looks_saved.ipynb", as_version=4)
    nb.metadata["copied"] = True
    nbformat.write(nb, lab.root / "memory_looks_untrusted.ipynb")
    page.goto(f"{lab.url}/lab/tree/memory_looks_untrusted.ipynb?reset&token={lab.token}",
              wait_until="domcontentloaded")
    page.wait_for_function("() => document.querySelectorAll('.jp-OutputArea-output img').length >= 3",
                           timeout=60_000)
    page.wait_for_timeout(4000)  # past the widget manager's own wait for the models
    for theme in ("JupyterLab Light", "JupyterLab Dark"):
        _set_theme(page, theme)
        trusted = page.evaluate("() => [...window.jupyterapp.shell.widgets('main')].find(w => w.context &&"
                                " w.context.path === 'memory_looks_untrusted.ipynb').content.widgets"
                                ".map(c => c.model.trusted)")
        assert trusted and not any(trusted)
        text = _visible_text(page)
        assert not RAW.search(text), RAW.search(text)
        viewer = page.locator(".jp-OutputArea-output .nbd-mem").first
        assert viewer.locator("img").first.is_visible()
        assert "re-run the cell" in viewer.inner_text()
        viewer.evaluate("el => el.scrollIntoView({block: 'start'})")
        page.wait_for_timeout(300)
        page.screenshot(path=shot(f"memory_viewer_untrusted_{theme.split()[-1].lower()}.png"))
    saved = json.loads((lab.root / "memory_looks_untrusted.ipynb").read_text())
    assert saved["cells"][-1]["outputs"], "the viewer's output is saved with the notebook"
