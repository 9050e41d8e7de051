"""Warnings that are bugs (issue 10): real warnings from real torch calls, in a real IPython shell.

With the extension loaded, a warning raised in a cell that signals a bug gets one compact panel (the same
``Diagnosis`` object the explainer builds), once per site, never for deprecations or unrelated warnings, and
the warning itself is still printed; ``%nbdebug warnings off`` stops the panels.  ``explain`` accepts the
captured ``warnings.WarningMessage`` or its printed text.
"""

from __future__ import annotations

import re
import sys
import warnings

import pytest
from IPython.utils.capture import capture_output

from nbdebug.core.explain import explain

torch = pytest.importorskip("torch")

# MSELoss with a (16, 1) prediction and a (16,) target: the classic silent broadcast.  "always" makes Python call
# showwarning on every iteration, so the loop really raises the warning five times.
BROADCAST_LOOP = """
import warnings, torch
warnings.simplefilter("always")
model = torch.nn.Linear(4, 1)
loss_fn = torch.nn.MSELoss()
for step in range(5):
    x, y = torch.randn(16, 4), torch.randn(16)
    loss = loss_fn(model(x), y)
"""


def _panels(out, slug=None):
    found = [o for o in out.outputs if "nbdebug warning" in o.data.get("text/plain", "")]
    return [o for o in found if slug is None or f"[{slug}]" in o.data["text/plain"]]


@pytest.fixture()
def printed():
    """Warnings printed to sys.stderr as Python's default does (pytest records them instead); set up before the
    extension loads, so nbdebug wraps it as it wraps the default in a real session."""
    with warnings.catch_warnings():
        def show(message, category, filename, lineno, file=None, line=None):
            sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

        warnings.showwarning = show
        yield


def test_loss_broadcast_in_a_loop_gets_one_compact_panel(printed, ip):
    with capture_output() as out:
        result = ip.run_cell(BROADCAST_LOOP)
    assert result.error_in_exec is None
    # the warning itself is printed as Python prints it, every time the filter lets it through
    assert out.stderr.count("Using a target size (torch.Size([16])) that is different to the input size") == 5
    (panel,) = _panels(out)
    text, html = panel.data["text/plain"], panel.data["text/html"]
    assert "[loss_broadcast]" in text and "nbd-warning-panel" in html and 'class="nbdebug warning' in html
    assert "[16, 16]" in text  # the broadcast shape the loss is really computed over
    assert "loss = loss_fn(model(x), y)" in text  # the user's own line, not only torch's loss.py
    # the same cell again: the site already had its panel
    with capture_output() as again:
        ip.run_cell(BROADCAST_LOOP)
    assert _panels(again) == []


def test_nonleaf_grad_scheduler_order_and_checkpoint(printed, ip):
    cells = {
        "nonleaf_grad_access": "import torch\nw = torch.randn(3, requires_grad=True) * 0.1\n"
                               "(w ** 2).sum().backward()\nprint(w.grad)\n",
        "scheduler_order": "import torch\nopt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)\n"
                           "sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)\nsched.step()\n",
        "checkpoint_no_grad": "import torch\nfrom torch.utils.checkpoint import checkpoint\nblock = torch.nn.Linear(3, 3)\n"
                              "out = checkpoint(block, torch.randn(2, 3), use_reentrant=True)\n",
    }
    for slug, cell in cells.items():
        with capture_output() as out:
            assert ip.run_cell("import warnings\nwarnings.simplefilter('always')\n" + cell).error_in_exec is None
        (panel,) = _panels(out, slug)
        # the cell's line that led to the warning, named as the user knows it (issue 26 item 6), never the
        # kernel's temporary file
        text = panel.data["text/plain"]
        assert re.search(r"Raised by In \[\d+\], line \d+: \S", text), text
        assert "<ipython-input" not in text and "ipykernel_" not in text


def test_ddp_grad_strides_is_explained_as_harmless_or_channels_last(printed, ip, tmp_path):
    cell = f"""
import warnings, torch, torch.distributed as dist
warnings.simplefilter("always")
dist.init_process_group("gloo", init_method="file://{tmp_path / 'store'}", rank=0, world_size=1)
try:
    net = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3), torch.nn.Conv2d(8, 4, 1))
    ddp = torch.nn.parallel.DistributedDataParallel(net)
    net.to(memory_format=torch.channels_last)  # after DDP was built: the classic cause
    ddp(torch.randn(2, 8, 6, 6).to(memory_format=torch.channels_last)).sum().backward()
finally:
    dist.destroy_process_group()
"""
    with capture_output() as out:
        assert ip.run_cell(cell).error_in_exec is None
    (panel,) = _panels(out, "ddp_grad_strides")
    assert "channels_last" in panel.data["text/plain"]


def test_noise_and_unrelated_warnings_get_no_panel(printed, ip):
    cell = ("import warnings\nwarnings.simplefilter('always')\n"
            "warnings.warn('Using a target size (torch.Size([3])) that is different to the input size "
            "(torch.Size([3, 1])) is deprecated', DeprecationWarning)\n"
            "warnings.warn('something unrelated happened', UserWarning)\n")
    with capture_output() as out:
        ip.run_cell(cell)
    assert "something unrelated happened" in out.stderr
    assert _panels(out) == []


def test_warnings_off_keeps_the_warning_and_drops_the_panel(printed, ip):
    ip.run_line_magic("nbdebug", "warnings off")
    try:
        with capture_output() as out:
            ip.run_cell(BROADCAST_LOOP.replace("Linear(4, 1)", "Linear(4, 1, bias=False)"))
        assert "Using a target size" in out.stderr
        assert _panels(out) == []
        status = ip.run_line_magic("nbdebug", "")
        assert ("warnings", False) in {(n, on) for n, on, _ in status.features}
    finally:
        ip.run_line_magic("nbdebug", "warnings on")


def test_unload_puts_showwarning_back(shell):
    before = warnings.showwarning
    shell.run_line_magic("load_ext", "nbdebug")
    assert warnings.showwarning is not before
    shell.run_line_magic("unload_ext", "nbdebug")
    assert warnings.showwarning is before


def test_explain_takes_a_captured_warning_or_its_text():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.nn.functional.l1_loss(torch.randn(8, 1), torch.randn(8))
    (record,) = [w for w in caught if "target size" in str(w.message)]
    d = explain(record)
    assert (d.kind, d.severity, d.exception_type) == ("loss_broadcast", "warning", "UserWarning")
    assert d.evidence["target_shape"] == [8] and d.evidence["input_shape"] == [8, 1]
    printed = warnings.formatwarning(record.message, record.category, record.filename, record.lineno, "")
    assert explain(printed).kind == "loss_broadcast"
    # a warning printed before the error that stopped the run is background: the error is the diagnosis
    after = printed + "Traceback (most recent call last):\n  File \"t.py\", line 3, in <module>\nKeyError: 'x'\n"
    assert explain(after).kind == "missing_key"
    after = printed + "Traceback (most recent call last):\n  File \"t.py\", line 3, in <module>\nZeroDivisionError: division by zero\n"
    # the warning is not blamed: the error is placed by its own frame, in the user's t.py (issue 23)
    assert explain(after).kind == "user_code_error"


def test_a_failing_explainer_never_breaks_the_cell(printed, ip, monkeypatch):
    import nbdebug.core.explain as fixes

    def broken(*a, **k):
        raise ValueError("planted failure")

    monkeypatch.setattr(fixes, "explain", broken)
    with capture_output() as out:
        result = ip.run_cell(BROADCAST_LOOP.replace("range(5)", "range(2)").replace("Linear(4, 1)", "Linear(4, 1, bias=False)"))
    assert result.error_in_exec is None  # the cell ran to the end
    assert "Using a target size" in out.stderr  # the warning itself was still shown
    assert "nbdebug: the warning could not be explained (ValueError: planted failure)" in out.stderr
    assert _panels(out) == []


def test_text_report_of_a_warning_says_so():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x = torch.randn(3, requires_grad=True) * 2
        x.grad  # noqa: B018 - reading .grad of a non-leaf is the bug being shown
    (record,) = caught
    text = str(explain(record))
    assert text.startswith("nbdebug warning [nonleaf_grad_access]") and "retain_grad" in text


# a message object (not a Warning) whose __str__ works once, for the printed warning, then raises KeyboardInterrupt
RAISING_STR = """
import warnings
warnings.simplefilter("always")
class Message:
    calls = 0
    limit = {limit}
    def __str__(self):
        Message.calls += 1
        if Message.calls > self.limit:
            raise KeyboardInterrupt
        return "Using a target size (torch.Size([3])) that is different to the input size (torch.Size([3, 1]))"
warnings.warn(Message(), UserWarning)
finished = True
"""


@pytest.mark.parametrize("limit", [1, 0])
def test_a_message_whose_str_raises_leaves_the_cell_as_without_nbdebug(printed, ip, limit):
    """Review 11: str(message) raising KeyboardInterrupt inside nbdebug's hook must not escape into the cell;
    when it already raises for the printed warning, the cell fails as it would without nbdebug."""
    cell = RAISING_STR.format(limit=limit)
    ip.run_line_magic("nbdebug", "warnings off")
    try:
        ip.user_ns.pop("finished", None)
        with capture_output():
            without = ip.run_cell(cell)
        finished_without = ip.user_ns.pop("finished", False)
    finally:
        ip.run_line_magic("nbdebug", "warnings on")
    with capture_output() as out:
        result = ip.run_cell(cell)
    assert type(result.error_in_exec) is type(without.error_in_exec)
    assert ip.user_ns.pop("finished", False) is finished_without
    if limit:  # the warning was printed, the cell ran to its end, and no panel came of a message nbdebug can't read
        assert result.error_in_exec is None and "Using a target size" in out.stderr and _panels(out) == []
    else:
        assert isinstance(result.error_in_exec, KeyboardInterrupt)


def test_a_warning_in_a_worker_thread_is_not_lost_while_another_is_explained(printed, ip, monkeypatch):
    """Review 11: the 'already explaining' guard is per thread: a warning raised in a worker thread while the main
    thread explains another one still gets its panel (shown when the cell ends)."""
    import threading

    import nbdebug.core.explain as fixes

    real = fixes.explain
    started = []

    def warn_in_a_worker():
        warnings.warn("Using a target size (torch.Size([5])) that is different to the input size "
                      "(torch.Size([5, 1])). This will likely lead to incorrect results due to broadcasting.", stacklevel=1)

    def explain_while_a_worker_warns(record, *args, **kwargs):
        if not started and threading.current_thread() is threading.main_thread():
            started.append(True)
            worker = threading.Thread(target=warn_in_a_worker)
            worker.start()
            worker.join()
        return real(record, *args, **kwargs)

    monkeypatch.setattr(fixes, "explain", explain_while_a_worker_warns)
    cell = ("import warnings\nwarnings.simplefilter('always')\n"
            "warnings.warn('Using a target size (torch.Size([7])) that is different to the input size "
            "(torch.Size([7, 1])). This will likely lead to incorrect results due to broadcasting.')\n")
    with capture_output() as out:
        assert ip.run_cell(cell).error_in_exec is None
    assert started
    panels = [p.data["text/plain"] for p in _panels(out, "loss_broadcast")]
    assert len(panels) == 2 and any("[5, 5]" in p for p in panels) and any("[7, 7]" in p for p in panels)
