"""The extension's lifecycle: load, status, switches, unload removes everything, load again."""

from __future__ import annotations

import subprocess
import sys

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

from tests.conftest import REPO


def _event_callbacks(shell):
    return {ev: list(cbs) for ev, cbs in shell.events.callbacks.items()}


def test_load_unload_load_cycle(shell):
    before_events = _event_callbacks(shell)
    before_line = set(shell.magics_manager.magics["line"])
    before_cell = set(shell.magics_manager.magics["cell"])
    for _ in range(2):
        shell.run_line_magic("load_ext", "nbdebug")
        assert "nbdebug" in shell.magics_manager.magics["line"]
        assert "explain" in shell.magics_manager.magics["cell"]
        assert _event_callbacks(shell) != before_events
        shell.run_line_magic("unload_ext", "nbdebug")
        assert _event_callbacks(shell) == before_events
        assert set(shell.magics_manager.magics["line"]) == before_line
        assert set(shell.magics_manager.magics["cell"]) == before_cell


def test_unload_puts_back_a_magic_that_nbdebug_shadowed(shell):
    def other_explain(line, cell=None):
        return "the other extension's explain"

    shell.register_magic_function(other_explain, "line_cell", "explain")
    try:
        shell.run_line_magic("load_ext", "nbdebug")
        assert shell.magics_manager.magics["line"]["explain"] is not other_explain
        shell.run_line_magic("unload_ext", "nbdebug")
        assert shell.run_line_magic("explain", "") == "the other extension's explain"
        assert shell.run_cell_magic("explain", "", "x") == "the other extension's explain"
    finally:
        shell.magics_manager.magics["line"].pop("explain", None)
        shell.magics_manager.magics["cell"].pop("explain", None)


def test_status_and_switches(ip):
    status = ip.run_line_magic("nbdebug", "")
    assert status.version
    names = {name: on for name, on, _ in status.features}
    assert names["explain"] is True
    off = ip.run_line_magic("nbdebug", "explain off")
    assert dict((n, o) for n, o, _ in off.features)["explain"] is False
    on = ip.run_line_magic("nbdebug", "explain on")
    assert dict((n, o) for n, o, _ in on.features)["explain"] is True
    bundle, _ = ip.display_formatter.format(on)
    assert "text/html" in bundle and "explain" in bundle["text/plain"]


def test_bad_switch_is_a_usage_error(ip):
    with pytest.raises(UsageError, match="expected 'on' or 'off', got 'maybe'"):
        ip.run_line_magic("nbdebug", "oom maybe")
    with pytest.raises(UsageError, match="expected 'on', 'off' or 'all', got 'maybe'"):
        ip.run_line_magic("nbdebug", "explain maybe")
    with pytest.raises(UsageError, match="expected 'short' or 'full', got 'maybe'"):
        ip.run_line_magic("nbdebug", "traceback maybe")
    with pytest.raises(UsageError, match="unknown feature 'frobnicate'"):
        ip.run_line_magic("nbdebug", "frobnicate on")
    # through run_cell a UsageError is one line, no traceback
    with capture_output() as out:
        ip.run_cell("%nbdebug explain maybe")
    assert "UsageError" in out.stderr + out.stdout and "Traceback" not in out.stderr + out.stdout


def test_loading_imports_no_heavy_modules():
    code = (
        "import sys\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "ip = InteractiveShell.instance()\n"
        "before = set(sys.modules)\n"
        "ip.run_line_magic('load_ext', 'nbdebug')\n"
        "heavy = ['torch', 'pandas', 'matplotlib', 'ipywidgets', 'torch_xla', 'numpy']\n"
        "print(','.join(m for m in heavy if m in sys.modules and m not in before))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"loading nbdebug imported: {out.stdout.strip()}"


def test_magic_help_is_written_for_users(ip):
    for kind, name in (("line", "nbdebug"), ("line", "explain"), ("cell", "explain")):
        magic = ip.find_magic(name, kind)
        assert magic is not None and "Usage" in (magic.__doc__ or ""), name


def test_a_figure_built_without_pyplot_shows_as_a_picture_and_unloading_takes_that_back(shell):
    # issue 26 item 14: a saved notebook read on GitHub showed '<Figure size 500x300 with 1 Axes>' for such a figure
    from matplotlib.figure import Figure

    fig = Figure(figsize=(2, 1))
    fig.add_subplot().plot([0, 1], [1, 0])
    png = shell.display_formatter.formatters["image/png"]
    earlier = png.pop(Figure, None)  # the session's shell may show Figures already (an earlier .plot() did that)
    try:
        shell.run_line_magic("load_ext", "nbdebug")
        try:
            data, _ = shell.display_formatter.format(fig)
            assert data.get("image/png"), sorted(data)
            from nbdebug.render._registry import _make_figures_displayable

            _make_figures_displayable()  # what a result's .plot() does: it keeps the extension's printer
        finally:
            shell.run_line_magic("unload_ext", "nbdebug")
        with pytest.raises(KeyError):
            png.lookup_by_type(Figure)
    finally:
        if earlier is not None:
            png.for_type(Figure, earlier)
