"""%%nanhunt in a real JupyterLab: a clean cell says what was checked; a failing cell shows one error panel.

What a user met before: a clean ``%%nanhunt`` cell showed nothing at all (was the sentinel even on?), and the
sentinel's own frames sat on top of the failing cell's traceback.
"""

from __future__ import annotations

import pytest

from tests.browser.conftest import run_notebook, shot

pytestmark = pytest.mark.browser

SETUP = """
%load_ext nbdebug
import torch, torch.nn as nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
def step(x):
    loss = model(x).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
"""
CLEAN = "%%nanhunt model\nfor _ in range(3):\n    step(torch.randn(4, 8))"
FAILING = "%%nanhunt model -o hunt\nstep(torch.randn(4, 8))\nstep(torch.log(-torch.ones(4, 8)))  # NaN input"


def _cell_outputs(page, index: int):
    return page.locator(".jp-CodeCell").nth(index).locator(".jp-OutputArea-output")


def test_nanhunt_says_what_it_checked_and_shows_one_panel_for_a_nan(lab, page):
    run_notebook(lab, page, [SETUP, CLEAN, FAILING], "nanhunt.ipynb", timeout_s=240)
    clean = _cell_outputs(page, 1)
    clean.first.wait_for(state="visible", timeout=30_000)
    text = clean.first.inner_text()
    assert "NaN/Inf sentinel: no NaN/Inf in 3 step(s)" in text and "steps checked" in text, text
    assert clean.first.locator("details.nbdebug.ok").count() == 1  # green-bordered: nothing is wrong
    failing = _cell_outputs(page, 2)
    failing.first.wait_for(state="visible", timeout=30_000)
    texts = failing.all_inner_texts()
    joined = "\n".join(texts)
    assert "NonFiniteError" in joined and "the model's input" in joined
    # the report carries the cell's error: one panel (the error's), not the sentinel's panel a second time
    assert sum("NaN/Inf sentinel:" in t for t in texts) == 0, texts
    assert page.locator(".jp-CodeCell").nth(2).locator("details.nbd-diagnosis").count() == 1
    # the user's line is where the traceback ends, not nbdebug's hooks
    traceback = next(t for t in texts if "NonFiniteError" in t)
    assert "step(torch.log(-torch.ones(4, 8)))" in traceback and "nbdebug/core" not in traceback
    page.locator(".jp-CodeCell").nth(1).scroll_into_view_if_needed()
    page.screenshot(path=shot("nanhunt.png"), full_page=False)
