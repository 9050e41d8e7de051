"""What ``%%memtrace`` says, in the words and names a person knows: no leak warning where the graphs were freed,
fixes written with the cell's own names, sites named ``In [N], line L`` (also under nbclient) and comprehensions
named as such, no raw ``retained_bytes=...`` in the panels."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")

from IPython.utils.capture import capture_output  # noqa: E402

from nbdebug.core.memory import MemTrace  # noqa: E402

SETUP = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
criterion = torch.nn.MSELoss()
opt = torch.optim.Adam(model.parameters())
batches = [(torch.randn(256, 64), torch.randn(256, 1)) for _ in range(5)]
"""

AFTER_BACKWARD = """losses = []
for xb, yb in batches:
    opt.zero_grad()
    loss = criterion(model(xb), yb)
    loss.backward()
    opt.step()
    losses.append(loss)
"""

RAW = re.compile(r"\w+_bytes=\d|ipykernel_\d+|<listcomp>|&lt;listcomp&gt;|<genexpr>|&lt;genexpr&gt;")


def _trace(ip, cell: str) -> MemTrace:
    ip.run_cell(SETUP, store_history=True)
    with capture_output():
        ip.run_cell("%%memtrace --device cpu -o _r\n" + cell, store_history=True)
    result = ip.user_ns["_r"]
    assert isinstance(result, MemTrace)
    return result


def _shown(r: MemTrace) -> str:
    return str(r) + r._repr_html_()


def test_losses_kept_after_backward_are_no_leak_and_gradients_are_gradients(ip):
    """After backward() the graphs' saved tensors are freed: the kept losses hold a few bytes each, no warning that
    they keep the activations of each step; the gradients are named gradients, Adam's buffers optimizer state."""
    r = _trace(ip, AFTER_BACKWARD)
    assert r.retained_bytes > 0
    assert all(f.kind != "memory_retained" for f in r.findings), [f.message for f in r.findings]
    assert "activations of each step" not in _shown(r)
    kinds = {s.line: r.retained_kinds.get(s.site, "other") for s in r.retained_sites}
    assert kinds[5] == "gradients" and kinds[6] == "optimizer state", kinds  # loss.backward(), opt.step()


def test_the_same_loop_before_backward_is_still_the_classic_leak(ip):
    r = _trace(ip, AFTER_BACKWARD.replace("    loss.backward()\n    opt.step()\n", ""))
    (f,) = [f for f in r.findings if f.kind == "memory_retained"]
    assert "activations of each step" in f.message and f.fixes[0].code == "losses.append(loss.item())"


def test_a_list_comprehension_of_predictions_is_fixed_in_the_cells_own_names(ip):
    r = _trace(ip, "predictions = [model(xb) for xb, _ in batches]\n")
    (f,) = r.findings
    assert f.kind == "memory_retained" and "the list predictions" in f.message
    codes = [x.code for x in f.fixes]
    assert codes == ["with torch.no_grad():\n    predictions = [model(xb) for xb, _ in batches]",
                     "predictions = [model(xb).detach() for xb, _ in batches]"]
    for code in codes:  # only names the cell has
        assert "losses" not in code and "activations" not in code and "out = model(x)" not in code
    # the site is the cell, and the comprehension is named in words
    site = r.retained_sites[0].site
    assert site.startswith("In [") and "in a list comprehension" in site, site
    assert not RAW.search(_shown(r)), RAW.search(_shown(r))


def test_panels_state_bytes_in_words_and_keep_the_evidence_as_data(ip):
    r = _trace(ip, "predictions = [model(xb) for xb, _ in batches]\n")
    shown = _shown(r)
    assert "retained_bytes" not in shown and "delta_bytes" not in shown
    (f,) = r.findings
    assert f.evidence["retained_bytes"] == r.retained_bytes  # the data is still there
    assert r.to_dict()["retained_bytes"] == r.retained_bytes


def test_a_cell_file_is_never_named_by_its_temporary_name():
    from nbdebug.core import _cells
    from nbdebug.core.memory._sites import format_frame

    cell = "/tmp/ipykernel_30528/4054287943.py"
    assert format_frame((cell, 1, "<listcomp>")) == "a notebook cell, line 1 in a list comprehension"
    assert format_frame((cell, 3, "step"), cells={}) == "a notebook cell, line 3 in step"

    def provider():
        return {cell: "In [7]"}

    _cells.set_provider(provider)
    try:  # a recording whose own map missed the cell: the names known now
        assert format_frame((cell, 1, "<listcomp>"), cells={}) == "In [7], line 1 in a list comprehension"
    finally:
        _cells.set_provider(None, remove=provider)
    assert format_frame(("/home/u/model.py", 54, "<genexpr>")) == "u/model.py:54 in a generator expression"
    assert format_frame(("/home/u/model.py", 54, "forward")) == "u/model.py:54 forward"


def test_under_nbclient_the_sites_are_the_cells(tmp_path):
    """A notebook run by nbclient (papermill, CI): the report names In [N], never ipykernel_NNNN/NNNN.py."""
    import nbformat
    from nbclient import NotebookClient

    from tests.conftest import REPO

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%load_ext nbdebug\n" + SETUP),
                nbformat.v4.new_code_cell("%%memtrace --device cpu\npredictions = [model(xb) for xb, _ in batches]")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    import os

    env_path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = env_path
    try:
        NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
    out = "".join(str(o.get("data", {}).get("text/plain", "")) + str(o.get("data", {}).get("text/html", ""))
                  for o in nb.cells[1].outputs)
    assert "In [2], line 1" in out, out[:2000]
    assert not RAW.search(out), RAW.search(out)
