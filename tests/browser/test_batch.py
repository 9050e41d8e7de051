"""The batch inspector's panels in a real JupyterLab: Light, Dark, and a notebook reopened untrusted.

Trusted: every text inside the panels reads at 4.5:1 or better (the contrast check of ``test_themes``), label
tokens that train are marked, the image grid is a decoded picture.  Untrusted (no <style>, no script): the marks
that tell trained from masked tokens survive as elements, and the grid is still a picture.
"""

from __future__ import annotations

import pytest

from tests.browser.conftest import run_notebook, shot

pytestmark = pytest.mark.browser

SETUP = (
    "%load_ext nbdebug\nimport sys, numpy as np, torch, nbdebug\nsys.path.insert(0, {repo!r})\n"
    "from tests.data.batch import planted\n"
    "def case(name):\n    return nbdebug.inspect_batch(**planted.CASES[name][1]())"
)
NAMES = ["loss_on_prompt", "labels_padded_with_pad_id", "raw_pixels", "channel_order_bgr", "unscaled_features",
         "split_overlap"]


def _cells() -> list[str]:
    from tests.conftest import REPO

    return [SETUP.format(repo=str(REPO))] + [f"case({n!r})" for n in NAMES]


def _check_grid(page) -> None:
    pics = page.evaluate("""() => [...document.querySelectorAll('.jp-OutputArea-output img')]
        .filter(i => i.src.startsWith('data:image/png')).map(i => ({ok: i.complete && i.naturalWidth > 0,
        w: i.getBoundingClientRect().width, h: i.getBoundingClientRect().height}))""")
    assert len(pics) >= 2 and all(p["ok"] and p["w"] > 100 and p["h"] > 40 for p in pics), pics


@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_batch_panels_read_well(lab, page, theme):
    from tests.browser.test_themes import CONTRAST_JS, _set_theme

    name = theme.split()[-1].lower()
    run_notebook(lab, page, _cells(), f"batch_{name}.ipynb", timeout_s=300)
    _set_theme(page, theme)
    panels = page.locator(".jp-OutputArea-output details.nbd-batch")
    assert panels.count() == len(NAMES), panels.count()
    assert page.locator(".jp-OutputArea-output .nbd-toks mark").count() > 10
    assert "loss_on_prompt" in panels.first.inner_text() and "<|im_start|>" in panels.first.inner_text()
    _check_grid(page)
    found = page.evaluate(CONTRAST_JS)
    assert len(found) > 100, len(found)
    low = [r for r in found if r["ratio"] < 4.5]
    panels.first.scroll_into_view_if_needed()
    page.screenshot(path=shot(f"batch_text_{name}.png"))
    page.locator(".jp-OutputArea-output details.nbd-batch").nth(2).scroll_into_view_if_needed()
    page.screenshot(path=shot(f"batch_images_{name}.png"))
    report = "\n".join(f"{r['ratio']:.2f} {r['tag']}.{r['cls']} {r['fg']} on {r['bg']}: {r['text']!r}" for r in low[:30])
    assert not low, f"{len(low)} of {len(found)} text elements below 4.5:1 in {theme}:\n{report}"


@pytest.fixture(scope="module")
def untrusted_batch(lab, shell):
    import nbformat

    import nbdebug
    from tests.data.batch import planted

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for i, n in enumerate(NAMES):
        data, _ = shell.display_formatter.format(nbdebug.inspect_batch(**planted.CASES[n][1]()))
        cell = nbformat.v4.new_code_cell(f"case({n!r})", execution_count=i + 1)
        cell.outputs = [nbformat.v4.new_output("execute_result", data=data, execution_count=i + 1)]
        nb.cells.append(cell)
    nbformat.write(nb, lab.root / "batch_untrusted.ipynb")  # unsigned: JupyterLab will not trust it
    return "batch_untrusted.ipynb"


@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_reopened_untrusted_batch_panels(lab, page, untrusted_batch, theme):
    from tests.browser.test_themes import _set_theme
    from tests.browser.test_untrusted import _open

    _open(lab, page, untrusted_batch)
    _set_theme(page, theme)
    trusted = page.evaluate("() => window.__nbdPanel.content.widgets.map(c => c.model.trusted)")
    assert trusted and not any(trusted)
    out = ".jp-OutputArea-output"
    assert page.locator(f"{out} style").count() == 0  # sanitised: the panel's own stylesheet is gone
    marks = page.locator(f"{out} mark")
    assert marks.count() > 10 and marks.first.is_visible()
    text = " ".join(page.locator(out).all_inner_texts())
    for kind in ("loss_on_prompt", "labels_padded_with_pad_id", "raw_pixels", "unscaled_features", "split_overlap"):
        assert kind in text, kind
    _check_grid(page)
    name = theme.split()[-1].lower()
    page.locator(out).first.scroll_into_view_if_needed()
    page.screenshot(path=shot(f"batch_untrusted_text_{name}.png"))
    page.locator(f"{out} img").first.scroll_into_view_if_needed()
    page.screenshot(path=shot(f"batch_untrusted_images_{name}.png"))
