"""Every ``.plot()`` shows a picture in a notebook with nothing else typed (no ``%matplotlib inline``).

The notebook runs in a real kernel (nbclient) with the kernel's default matplotlib backend; each ``.plot()`` cell's
output must carry ``image/png``, and ``.plot()`` still returns a ``matplotlib.figure.Figure`` for scripts.
"""

from __future__ import annotations

import os

import pytest

from tests.conftest import REPO

CELLS = {
    "setup": "import nbdebug, torch\nfrom torch import nn\ntorch.manual_seed(0)",
    "snapshot": "snap = nbdebug.load_snapshot(nbdebug.examples.path('snapshots/forward_fp32_128.pickle'))\nsnap.plot()",
    "doctor": "clf = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))\n"
    "x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))\n"
    "report = nbdebug.doctor(clf, (x, y), nn.CrossEntropyLoss(), torch.optim.SGD(clf.parameters(), lr=0.1), steps=20)\n"
    "report.plot()",
    "monitor": "opt = torch.optim.SGD(clf.parameters(), lr=0.1)\n"
    "with nbdebug.GradMonitor(clf, live=False) as mon:\n"
    "    for _ in range(10):\n"
    "        loss = nn.functional.cross_entropy(clf(x), y); opt.zero_grad(); loss.backward()\n"
    "        mon.log_loss(loss); opt.step()\n"
    "mon.history.plot()",
    "type": "type(snap.plot()).__module__ + '.' + type(snap.plot()).__name__",
}


def test_every_plot_renders_inline(monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's own default, as a user has it
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in CELLS.values()]
    NotebookClient(nb, timeout=300, kernel_name="python3").execute()
    outputs = dict(zip(CELLS, (cell.outputs for cell in nb.cells)))
    for name in ("snapshot", "doctor", "monitor"):
        results = [o for o in outputs[name] if o.output_type in ("execute_result", "display_data")]
        assert results, f"{name}: .plot() showed nothing"
        assert any("image/png" in o.data for o in results), f"{name}: no picture, only {results[0].data.get('text/plain')!r}"
    shown = [o for o in outputs["type"] if o.output_type == "execute_result"][0].data["text/plain"]
    assert shown == "'matplotlib.figure.Figure'"


@pytest.mark.parametrize("mime", ["text/plain", "text/html"])
def test_mimebundle_honours_include_and_exclude(mime):
    import nbdebug

    d = nbdebug.explain("RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x10 and 20x5)")
    assert set(d._repr_mimebundle_(include={mime})) == {mime}
    assert mime not in d._repr_mimebundle_(exclude={mime})
