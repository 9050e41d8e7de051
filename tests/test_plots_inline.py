"""Every ``.plot()`` shows a picture in a notebook with nothing else typed (no ``%matplotlib inline``).

The notebook runs in a real kernel (nbclient) with the kernel's default matplotlib backend; each ``.plot()`` cell's
output must carry ``image/png``, and ``.plot()`` still returns a ``matplotlib.figure.Figure`` for scripts.
"""

from __future__ import annotations

import base64
import io
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


PAGES = {"light": (255, 255, 255), "dark": (17, 17, 17)}  # JupyterLab Light's and Dark's output background


def _luminance(rgb):
    """WCAG relative luminance of RGB values (0-255; any array shape ending in 3)."""
    import numpy as np

    v = np.asarray(rgb, dtype=float) / 255
    v = np.where(v <= 0.03928, v / 12.92, ((v + 0.055) / 1.055) ** 2.4)
    return v @ np.array([0.2126, 0.7152, 0.0722])


def readable_on_light_and_dark(png: bytes, name: str) -> None:
    """The picture laid on JupyterLab Light's and Dark's page: no light box on the dark page (at most a fifth of
    the picture light: text halos, legend), and on each page dark text and its light halo stand out."""
    import numpy as np
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGBA")
    for page, colour in PAGES.items():
        laid = Image.alpha_composite(Image.new("RGBA", image.size, (*colour, 255)), image).convert("RGB")
        lum = _luminance(np.asarray(laid))
        if page == "dark":
            light = float((lum > 0.6).mean())
            assert light < 0.2, f"{name}: {light:.0%} of the picture is a light box on a dark page"
        dark_ink, light_ink = float((lum < 0.05).mean()), float((lum > 0.7).mean())  # text, and its halo
        assert dark_ink > 0.002 and light_ink > 0.002, f"{name} on a {page} page: no text that stands out"
        # the text against its halo: 4.5:1 at least (#1f2328 on white is 15:1)
        assert (lum.max() + 0.05) / (lum.min() + 0.05) >= 4.5, f"{name} on a {page} page: no contrast"


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
        # issue 26, item 10: a picture is no white box on a dark page, and its text reads on light and dark
        for o in results:
            if "image/png" in o.data:
                readable_on_light_and_dark(base64.b64decode(o.data["image/png"]), name)
    shown = [o for o in outputs["type"] if o.output_type == "execute_result"][0].data["text/plain"]
    assert shown == "'matplotlib.figure.Figure'"


@pytest.mark.parametrize("mime", ["text/plain", "text/html"])
def test_mimebundle_honours_include_and_exclude(mime):
    import nbdebug

    d = nbdebug.explain("RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x10 and 20x5)")
    assert set(d._repr_mimebundle_(include={mime})) == {mime}
    assert mime not in d._repr_mimebundle_(exclude={mime})
