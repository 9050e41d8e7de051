"""A real JupyterLab in a real headless Chromium: a notebook loads nbdebug, raises a real shape error, and the
diagnosis panel is visible under the untouched traceback."""

from __future__ import annotations

import pytest

from tests.browser.conftest import run_notebook, shot

pytestmark = pytest.mark.browser

CELLS = [
    "%load_ext nbdebug",
    "import torch\nfrom torch import nn\n"
    "model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(16, 2))\n"
    "model(torch.randn(8, 10))",
]


def test_shape_error_panel_in_jupyterlab(lab, page):
    run_notebook(lab, page, CELLS, "shape_error.ipynb")
    error_output = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    assert error_output.count() >= 1
    assert "mat1 and mat2 shapes cannot be multiplied" in error_output.first.inner_text()
    panel = page.locator("details.nbd-diagnosis")
    panel.first.wait_for(state="visible", timeout=30_000)
    text = panel.first.inner_text()
    assert "shape_mismatch" in text
    assert "First step" in text
    # sources are public pages the user can open, never internal notes
    assert "seed" not in text.lower() and ".md" not in text
    links = panel.first.locator("a[href^='https://']")
    assert links.count() >= 1
    # the panel comes after the traceback in the same cell's output area
    order = page.evaluate(
        """() => {
            const outs = [...document.querySelectorAll('.jp-OutputArea-output')];
            const tb = outs.findIndex(o => o.innerText.includes('mat1 and mat2'));
            const pn = outs.findIndex(o => o.querySelector('details.nbd-diagnosis'));
            return [tb, pn];
        }"""
    )
    assert 0 <= order[0] < order[1]
    # right after the cell runs, with its code at the top of the window, the panel's headline is on screen:
    # the traceback is short (library frames folded), not 1,400 px of nn.Module internals
    page.locator(".jp-CodeCell").nth(1).locator(".jp-InputArea").scroll_into_view_if_needed()
    page.evaluate("() => { const c = document.querySelectorAll('.jp-CodeCell')[1];"
                  " c.closest('.jp-WindowedPanel-outer, .jp-Notebook').scrollTop = c.offsetTop; }")
    page.wait_for_timeout(300)
    top = page.evaluate("() => document.querySelector('details.nbd-diagnosis').getBoundingClientRect().top")
    height = page.evaluate("() => window.innerHeight")
    assert top < height - 100, f"the panel starts at {top:.0f}px, below the {height}px window"
    tb = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").first.inner_text()
    assert tb.startswith("nbdebug ▸ [shape_mismatch]") and "library frames folded" in tb
    panel.first.scroll_into_view_if_needed()
    page.screenshot(path=shot("error_panel.png"), full_page=False)


WARNING_CELLS = [
    "%load_ext nbdebug",
    "import torch\nfrom torch import nn\n"
    "model, loss_fn = nn.Linear(4, 1), nn.MSELoss()\n"
    "for step in range(20):  # the warning inside a loop: one panel, not twenty\n"
    "    loss = loss_fn(model(torch.randn(16, 4)), torch.randn(16))\n"
    "loss.item()",
]


@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_warning_panel_is_compact_and_readable(lab, page, theme):
    from tests.browser.test_themes import CONTRAST_JS, _set_theme

    name = theme.split()[-1].lower()
    run_notebook(lab, page, WARNING_CELLS, f"warning_panel_{name}.ipynb")
    _set_theme(page, theme)
    stderr = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    assert "Using a target size (torch.Size([16]))" in stderr.first.inner_text()  # the warning itself, unchanged
    panel = page.locator("details.nbd-warning-panel")
    panel.first.wait_for(state="visible", timeout=30_000)
    assert panel.count() == 1
    text = panel.first.inner_text()
    assert "loss_broadcast" in text and "First step" in text and "[16, 16]" in text
    # compact: causes and fixes are one click away, the visible part is a few lines
    assert panel.first.locator("details").count() == 1
    assert not panel.first.locator("details").first.evaluate("d => d.open")
    height = panel.first.evaluate("p => p.getBoundingClientRect().height")
    assert height < 320, f"the compact panel is {height:.0f}px tall"
    found = [r for r in page.evaluate(CONTRAST_JS) if "warning" in r["cls"] or r["text"]]
    assert len(found) > 10, f"too few text elements checked: {len(found)}"
    low = [r for r in found if r["ratio"] < 4.5]
    panel.first.scroll_into_view_if_needed()
    page.screenshot(path=shot(f"warning_panel_{name}.png"), full_page=False)
    report = "\n".join(f"{r['ratio']:.2f} {r['tag']}.{r['cls']} {r['fg']} on {r['bg']}: {r['text']!r}" for r in low[:20])
    assert not low, f"{len(low)} of {len(found)} text elements below 4.5:1 in {theme}:\n{report}"


CONFLICT_CELLS = [
    "%load_ext nbdebug",
    # two libraries installed for real into a temporary site-packages: a trainer whose requirement the installed
    # core library does not meet, and a call into the core that fails with a message nobody lists
    "import importlib, pathlib, sys, tempfile\n"
    "site = pathlib.Path(tempfile.mkdtemp()) / 'lib' / 'site-packages'\n"
    "def dist(name, version, code, requires=()):\n"
    "    (site / name).mkdir(parents=True); (site / name / '__init__.py').write_text(code)\n"
    "    info = site / f'{name}-{version}.dist-info'; info.mkdir()\n"
    "    meta = ['Metadata-Version: 2.1', f'Name: {name}', f'Version: {version}']\n"
    "    (info / 'METADATA').write_text('\\n'.join(meta + [f'Requires-Dist: {r}' for r in requires]) + '\\n')\n"
    "dist('nbdcore', '1.4', 'def step(x, fused=False):\\n    raise RuntimeError(\"step() got an unusable state\")\\n')\n"
    "dist('nbdtrainer', '3.1', 'import nbdcore\\ndef train(x):\\n    return nbdcore.step(x, fused=True)\\n',\n"
    "     ('nbdcore>=2.0',))\n"
    "sys.path.insert(0, str(site)); importlib.invalidate_caches()",
    "import nbdtrainer\nnbdtrainer.train(1)",
]


@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_an_unknown_error_with_libraries_that_do_not_fit_shows_the_mismatch_first(lab, page, theme):
    from tests.browser.test_themes import CONTRAST_JS, _set_theme

    name = theme.split()[-1].lower()
    run_notebook(lab, page, CONFLICT_CELLS, f"library_conflict_{name}.ipynb")
    _set_theme(page, theme)
    stderr = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    assert "step() got an unusable state" in stderr.first.inner_text()  # the user's traceback, kept
    panel = page.locator("details.nbd-diagnosis")
    panel.first.wait_for(state="visible", timeout=30_000)
    text = panel.first.inner_text()
    first = text.index("First step")
    assert "nbdtrainer 3.1 requires nbdcore>=2.0; installed nbdcore is 1.4" in text[first:]
    assert "%pip install 'nbdcore>=2.0'" in text
    assert "names no cause" not in text  # a check found it: the panel does not say it has nothing
    found = [r for r in page.evaluate(CONTRAST_JS) if r["text"]]
    low = [r for r in found if r["ratio"] < 4.5 and "nbd" in r["cls"]]
    panel.first.scroll_into_view_if_needed()
    page.screenshot(path=shot(f"library_conflict_{name}.png"), full_page=False)
    assert not low, "\n".join(f"{r['ratio']:.2f} {r['cls']}: {r['text']!r}" for r in low[:10])


ARGPARSE_CELLS = [
    "%load_ext nbdebug",
    # a training script's parser pasted into a cell: in a notebook sys.argv is the kernel's own command line
    "import argparse\nparser = argparse.ArgumentParser()\nparser.add_argument('--lr', type=float, default=0.1)\n"
    "args = parser.parse_args()",
]


@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_argparse_reading_the_kernels_command_line_gets_a_panel(lab, page, theme):
    # IPython shows only "SystemExit: 2" and "To exit: use 'exit'": the panel says what happened and the fix
    from tests.browser.test_themes import CONTRAST_JS, _set_theme

    name = theme.split()[-1].lower()
    run_notebook(lab, page, ARGPARSE_CELLS, f"argparse_{name}.ipynb")
    _set_theme(page, theme)
    stderr = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    assert "unrecognized arguments: -f" in stderr.first.inner_text()  # argparse's own message, kept
    panel = page.locator("details.nbd-diagnosis")
    panel.first.wait_for(state="visible", timeout=30_000)
    text = panel.first.inner_text()
    assert "argparse_in_notebook" in text and "parse_args(" in text and "!python" in text
    assert text.index("First step") > 0
    found = [r for r in page.evaluate(CONTRAST_JS) if r["text"]]
    low = [r for r in found if r["ratio"] < 4.5 and "nbd" in r["cls"]]
    panel.first.scroll_into_view_if_needed()
    page.screenshot(path=shot(f"argparse_{name}.png"), full_page=False)
    assert not low, "\n".join(f"{r['ratio']:.2f} {r['cls']}: {r['text']!r}" for r in low[:10])
