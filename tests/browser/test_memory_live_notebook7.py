"""The live memory viewer (snap.view()) in Notebook 7 and, reopened with its widget state saved, in JupyterLab.

The live viewer is a widget that talks to its kernel through the widget model (anywidget): it must work wherever
widgets do, not only in the page JupyterLab builds.  A notebook reopened with its widget state saved shows the
widget with no kernel behind it: the viewer must not wait for one, but say that the cell must be re-run.
"""

from __future__ import annotations

import json

import nbformat
import pytest

from tests.browser.conftest import Lab, run_notebook, serve, shot

pytestmark = pytest.mark.browser

FILE = "torch2.10plus_cs336_wedsonlin_medium_512_training.pickle"


@pytest.fixture(scope="module")
def notebook7(tmp_path_factory):
    """Notebook 7 (``python -m notebook``) on 127.0.0.1, started and stopped like the lab fixture's JupyterLab."""
    with serve(tmp_path_factory, "notebook") as server:
        yield server


def _run_in_notebook7(nb7: Lab, page, cells: list[str], name: str) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, nb7.root / name)
    page.goto(f"{nb7.url}/notebooks/{name}?token={nb7.token}", wait_until="domcontentloaded")
    # Notebook 7 shows one notebook: the shell's current widget, once its kernel is idle
    ready = """() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
        const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
        return !!k && k.status === 'idle'; }"""
    page.wait_for_function(ready, timeout=90_000)
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_function(
        """(n) => { const w = window.jupyterapp.shell.currentWidget;
            const done = [...w.node.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].filter(
                p => /\\[\\d+\\]/.test(p.textContent));
            const k = w.sessionContext.session.kernel;
            return done.length >= n && k.status === 'idle'; }""",
        arg=len(cells), timeout=180_000)


def test_live_viewer_in_notebook7(notebook7, page, snapshots_dir):
    from tests.browser.test_memory_viewer import _check_live

    cells = ["import nbdebug\n"
             f"snap = nbdebug.load_snapshot(r'{snapshots_dir / FILE}')\n"
             "snap.view()"]
    _run_in_notebook7(notebook7, page, cells, "memory_live_nb7.ipynb")
    _check_live(page, snapshots_dir)
    page.locator(".nbdmem-widget svg.chart").scroll_into_view_if_needed()
    page.screenshot(path=shot("memory_viewer_live_notebook7.png"))


def test_reopened_with_widget_state_saved_says_to_rerun_and_never_waits(lab, page, snapshots_dir):
    """JupyterLab saving widget state: the reopened widget has a model and no kernel; the viewer says so."""
    settings = lab.root / ".settings" / "@jupyter-widgets" / "jupyterlab-manager"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "plugin.jupyterlab-settings").write_text(json.dumps({"saveState": True}))
    try:
        cells = ["import nbdebug\n"
                 f"snap = nbdebug.load_snapshot(r'{snapshots_dir / FILE}')\n"
                 "snap.view()"]
        run_notebook(lab, page, cells, "memory_live_state.ipynb")
        page.wait_for_function("(sel) => /events in view/.test(document.querySelector(sel).textContent)",
                               arg=".nbdmem-widget .nbd-mem[data-live] .exactness", timeout=30_000)
        page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
        page.wait_for_timeout(1500)
        saved = json.loads((lab.root / "memory_live_state.ipynb").read_text())
        assert "application/vnd.jupyter.widget-state+json" in saved["metadata"].get("widgets", {})
        page.evaluate("() => window.jupyterapp.commands.execute('kernelmenu:shutdown')")
        page.goto(f"{lab.url}/lab/tree/memory_live_state.ipynb?reset&token={lab.token}",
                  wait_until="domcontentloaded")
        # whichever output shows the viewer, it says how to get the live view back and fills its tables from the
        # events it holds, within the widget's wait for a kernel (8 s), never "asking the kernel" on and on
        page.wait_for_function(
            "() => [...document.querySelectorAll('.nbd-mem[data-live]')].some(p => p.getClientRects().length"
            " && /re-run the cell for the live view/.test(p.textContent) && /the peak/.test("
            "p.querySelector('.moment-summary').textContent))", timeout=30_000)
        shown = [p for p in page.locator(".nbd-mem[data-live]").all() if p.is_visible()]
        assert len(shown) == 1
        assert "asking the kernel" not in shown[0].locator(".exactness").inner_text()
        assert shown[0].locator("table.alive-blocks tbody tr").count() > 0
        outputs = str(page.evaluate("() => [...document.querySelectorAll('.jp-OutputArea-output')]"
                                    ".filter(o => o.getClientRects().length).map(o => o.innerText)"))
        assert "Error displaying widget" not in outputs
        shown[0].locator("svg.chart").scroll_into_view_if_needed()
        page.screenshot(path=shot("memory_viewer_reopened.png"))
    finally:
        (settings / "plugin.jupyterlab-settings").unlink()


def test_a_kernel_busy_with_the_next_cell_turns_the_viewer_live_when_it_answers(lab, page, snapshots_dir):
    """Run all: the widget asks the kernel while the next cell still runs; the viewer works from its own events,
    says no kernel answers yet, and turns live (exact windows from the kernel) once the kernel is free."""
    cells = ["import nbdebug, time\n"
             f"snap = nbdebug.load_snapshot(r'{snapshots_dir / FILE}')\n"
             "snap.view()",
             "time.sleep(15)"]
    run_notebook(lab, page, cells, "memory_live_busy.ipynb", timeout_s=240)  # returns once both cells ran
    root = ".nbdmem-widget .nbd-mem[data-live]"
    page.wait_for_function("(sel) => /events in view/.test(document.querySelector(sel).textContent)",
                           arg=f"{root} .exactness", timeout=30_000)
    assert page.locator(f"{root} .rerun").count() == 0  # the note went once the kernel answered
    page.wait_for_function("(sel) => /all of them listed/.test(document.querySelector(sel).textContent)",
                           arg=f"{root} .moment-summary", timeout=30_000)
