"""Every tutorial in notebooks/, as a reader sees it: run live in a real JupyterLab, in Light and in Dark, then
reopened untrusted (written back by another process, as a notebook from git or a colleague is) in both.

This is what `make screenshots` runs (with ``NBDEBUG_SCREENSHOTS=1``): one picture of the whole notebook per mode,
``<notebook>_{light,dark,untrusted_light,untrusted_dark}.png`` under ``out/tutorials/`` (ignored by git; too large
for the repository; ``NBDEBUG_SHOTS_DIR`` puts them elsewhere).  It runs every tutorial once more, so the plain test
run, which executes each of them already (tests/test_notebooks.py), leaves it out (the ``screenshots`` marker is
deselected unless ``-m`` asks for it).  Every notebook in notebooks/ is taken, by glob, whatever its number.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.browser.conftest import open_notebook as _open
from tests.conftest import REPO

# deselected by default (pyproject's addopts); `make screenshots` selects it with `-m browser`
pytestmark = [pytest.mark.browser, pytest.mark.screenshots]

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
THEMES = ("JupyterLab Light", "JupyterLab Dark")
TALLEST = 15000  # px: one picture up to this height, then a picture per part


def _folder() -> Path:
    chosen = os.environ.get("NBDEBUG_SHOTS_DIR")
    folder = Path(chosen) if chosen else REPO / "out" / "tutorials"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _whole_notebook(page, path: str) -> list[str]:
    """Screenshots of the whole notebook: the window made as tall as the notebook (in parts past TALLEST px)."""
    page.set_viewport_size({"width": 1280, "height": 1000})
    page.wait_for_timeout(300)
    scroller = ("(window.__nbdPanel.content.node.querySelector('.jp-WindowedPanel-outer') "
                "|| window.__nbdPanel.content.node)")
    height = page.evaluate(f"() => {{ const s = {scroller}; return s.scrollHeight; }}")
    chrome = page.evaluate(f"() => window.innerHeight - ({scroller}).clientHeight")
    files = []
    tall = min(height + chrome + 40, TALLEST)
    page.set_viewport_size({"width": 1280, "height": int(tall)})
    page.wait_for_timeout(800)
    seen = max(1, int(tall - chrome - 40))
    for part, top in enumerate(range(0, max(1, height), seen)):
        page.evaluate(f"(top) => {{ ({scroller}).scrollTop = top; }}", top)
        page.wait_for_timeout(300)
        name = path if part == 0 else path.replace(".png", f"_{part + 1}.png")
        page.screenshot(path=name)
        files.append(name)
    page.set_viewport_size({"width": 1280, "height": 1000})
    return files


def _set_theme(page, theme: str) -> None:
    from tests.browser.test_themes import _set_theme as set_theme

    set_theme(page, theme)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_tutorial_live_and_reopened_untrusted(lab, page, path: Path):
    import nbformat

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nbformat.write(nb, lab.root / path.name)
    code_cells = sum(c.cell_type == "code" for c in nb.cells)
    tag = path.stem
    folder = _folder()

    # live: run every cell ("raises-exception" cells do not stop the run), as a user does
    _open(lab, page, path.name, "!!(w.sessionContext.session && w.sessionContext.session.kernel "
                                "&& w.sessionContext.session.kernel.status === 'idle')")
    page.evaluate("() => { window.jupyterapp.shell.activateById(window.__nbdPanel.id);"
                  " return window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    page.wait_for_function(
        """(n) => {
            const w = window.__nbdPanel;
            const done = [...w.node.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]
                .filter(p => /\\[\\d+\\]/.test(p.textContent));
            const k = w.sessionContext.session && w.sessionContext.session.kernel;
            return done.length >= n && !!k && k.status === 'idle';
        }""",
        arg=code_cells, timeout=900_000)
    page.wait_for_timeout(1500)  # live panels redraw once more after the last message
    shots = []
    for theme in THEMES:
        _set_theme(page, theme)
        shots += _whole_notebook(page, str(folder / f"{tag}_{theme.split()[-1].lower()}.png"))
    # the nbdebug panels a reader sees name no kernel temporary file
    text = " ".join(page.locator(".jp-OutputArea-output .nbdebug").all_inner_texts())
    assert "ipykernel_" not in text and "ipython-input" not in text, text[:400]

    # save, then write it back from this process with one more metadata field: its outputs are no longer signed
    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_function("() => !window.__nbdPanel.context.model.dirty", timeout=60_000)
    page.evaluate("() => window.__nbdPanel.sessionContext.shutdown()")
    saved = json.loads((lab.root / path.name).read_text())
    saved["metadata"]["reopened_by"] = "tests/browser/test_tutorials.py"
    reopened = f"{tag}_reopened.ipynb"
    (lab.root / reopened).write_text(json.dumps(saved))
    _open(lab, page, reopened, "w.content.widgets.length > 0")
    page.wait_for_timeout(1500)
    trusted = page.evaluate("() => window.__nbdPanel.content.widgets.map(c => c.model.trusted)")
    assert not any(trusted), "the reopened notebook should be untrusted"
    assert page.locator(".jp-OutputArea-output script").count() == 0
    for theme in THEMES:
        _set_theme(page, theme)
        shots += _whole_notebook(page, str(folder / f"{tag}_untrusted_{theme.split()[-1].lower()}.png"))
    # a panel never shows as its own markup
    shown = " ".join(page.locator(".jp-OutputArea-output").all_inner_texts())
    assert "<details" not in shown and "&lt;" not in shown
    assert all(Path(s).stat().st_size > 10_000 for s in shots), shots
