"""The GradMonitor live panel and the doctor panel render in a real JupyterLab (headless Chromium).

The live panel is a display updated in place (no widget): one panel in the output, ending as the static picture.
"""

from __future__ import annotations

import pytest

from tests.browser.conftest import run_notebook, shot

pytestmark = pytest.mark.browser

SETUP = """
%load_ext nbdebug
import torch, torch.nn as nn, torch.nn.functional as F
import nbdebug
g = torch.Generator().manual_seed(0)
X, Y = torch.randn(512, 16, generator=g), torch.randint(0, 4, (512,), generator=g)
def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
"""

MONITOR = """
model = mlp()
opt = torch.optim.SGD(model.parameters(), lr=0.5)
with nbdebug.GradMonitor(model, num_classes=4, live=True, refresh_hz=2) as mon:
    for step in range(150):
        idx = torch.randint(0, 512, (32,), generator=g)
        x = X[idx] * (200 if step == 120 else 1)
        loss = F.cross_entropy(model(x), Y[idx])
        opt.zero_grad(); loss.backward(); mon.log_loss(loss); opt.step()
print("steps recorded:", len(mon.history.steps))
"""

DOCTOR = """
class SoftmaxHead(nn.Module):
    def __init__(self):
        super().__init__(); self.net = mlp(); self.out = nn.Softmax(dim=1)
    def forward(self, x): return self.out(self.net(x))
nbdebug.doctor(SoftmaxHead(), (X[:16], Y[:16]), nn.CrossEntropyLoss(), steps=100)
"""


def test_monitor_and_doctor_panels_render(lab, page):
    run_notebook(lab, page, [SETUP, MONITOR, DOCTOR], "training_panels.ipynb", timeout_s=240)
    live = page.locator(".nbd-gradmonitor-live").first
    live.wait_for(state="visible", timeout=30_000)
    text = live.inner_text()
    assert "done" in text and "150" in text  # the display was updated in place after the first render (0 steps)
    assert page.locator(".nbd-gradmonitor-live").count() == 1  # updated in place, not appended
    outputs = str(page.locator(".jp-OutputArea-output").all_inner_texts())
    assert "Error displaying widget" not in outputs and "model not found" not in outputs
    assert live.locator("svg.nbd-chart").count() >= 2  # global norm, loss (+ gradient flow bars)
    doctor = page.locator(".nbd-doctor").first
    doctor.wait_for(state="visible", timeout=30_000)
    assert doctor.locator('tr.nbd-finding[data-kind="probabilities_to_loss"]').count() == 1
    assert doctor.locator("svg.nbd-chart").count() >= 2  # overfit curve, gradient flow
    assert "steps recorded: 150" in page.locator(".jp-OutputArea-output").all_inner_texts().__str__()
    live.screenshot(path=shot("training_monitor.png"))
    doctor.screenshot(path=shot("training_doctor.png"))


def test_live_panel_survives_save_and_reopen(lab, page):
    # the classic failure of a widget: "Error displaying widget: model not found" once the notebook is reopened
    run_notebook(lab, page, [SETUP, MONITOR], "training_reopen.ipynb", timeout_s=240)
    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_timeout(1500)
    page.goto(f"{lab.url}/lab/tree/training_reopen.ipynb?reset&token={lab.token}", wait_until="domcontentloaded")
    live = page.locator(".nbd-gradmonitor-live").first
    live.wait_for(state="visible", timeout=60_000)
    text = live.inner_text()
    assert "done" in text and "150" in text, text[:300]
    outputs = str(page.locator(".jp-OutputArea-output").all_inner_texts())
    assert "Error displaying widget" not in outputs and "model not found" not in outputs
    assert "HTML(value=" not in outputs
