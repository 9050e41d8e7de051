"""A real terminal IPython: the diagnosis is plain text printed under the traceback."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO

SESSION = """\
%load_ext nbdebug
import torch
torch.randn(4, 10) @ torch.randn(20, 5)
print("still alive")
exit
"""


def test_terminal_ipython_shows_text_diagnosis():
    env = dict(os.environ, PYTHONPATH=str(REPO), TERM="dumb")
    out = subprocess.run(
        [sys.executable, "-m", "IPython", "--simple-prompt", "--no-banner", "--colors=NoColor",
         "--HistoryManager.hist_file=:memory:"],
        input=SESSION, capture_output=True, text=True, env=env, cwd=REPO, timeout=180,
    )
    text = out.stdout + out.stderr
    assert "RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x10 and 20x5)" in text
    tb_at = text.index("mat1 and mat2 shapes cannot be multiplied")
    panel_at = text.index("nbdebug [shape_mismatch]")
    assert tb_at < panel_at
    assert "First step:" in text[panel_at:]
    assert "<details" not in text  # plain text in a terminal, no HTML
    assert "still alive" in text  # the session goes on


def _ipython(args, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), TERM="dumb")
    out = subprocess.run([sys.executable, "-m", "IPython", "--no-banner", "--colors=NoColor",
                          "--HistoryManager.hist_file=:memory:", *args],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180)
    return out.stdout + out.stderr


def test_a_script_run_by_ipython_gets_the_diagnosis_once(tmp_path):
    # IPython runs a .ipy file silently: no post_run_cell event, so the panel comes with the traceback itself
    script = tmp_path / "train.ipy"
    script.write_text("%load_ext nbdebug\nimport torch\ntorch.randn(4, 10) @ torch.randn(20, 5)\n")
    text = _ipython([str(script)], tmp_path)
    assert "mat1 and mat2 shapes cannot be multiplied" in text
    assert text.count("nbdebug [shape_mismatch]") == 1 and "First step:" in text


def test_ipython_c_gets_the_diagnosis_once(tmp_path):
    text = _ipython(["-c", "%load_ext nbdebug\nimport torch\ntorch.randn(4, 10) @ torch.randn(20, 5)"], tmp_path)
    assert text.count("nbdebug [shape_mismatch]") == 1 and "First step:" in text


def test_a_terminal_without_colours_gets_no_colour_codes_and_one_traceback(tmp_path):
    # issue 23: the folded traceback is not followed by the whole traceback again (%tb still prints it), and a
    # terminal with colours off gets no escape codes from nbdebug
    session = ("%load_ext nbdebug\nimport torch\n"
               "m = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.Linear(16, 2))\n"
               "m(torch.randn(8, 30))\n%tb\nexit\n")
    env = dict(os.environ, PYTHONPATH=str(REPO), TERM="dumb")
    out = subprocess.run([sys.executable, "-m", "IPython", "--simple-prompt", "--no-banner", "--colors=NoColor",
                          "--HistoryManager.hist_file=:memory:"],
                         input=session, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180)
    text = out.stdout + out.stderr
    assert "\x1b[" not in text
    assert "library frames folded" in text and "nbdebug [shape_mismatch]" in text
    panel = text[text.index("nbdebug [shape_mismatch]"):]
    tb_at = panel.index("%tb prints it")
    # the module frames appear once before the panel (folded) and once more only where %tb printed them
    assert "in Module._call_impl" not in panel[:tb_at]
    assert "in Module._call_impl" in panel[tb_at:]  # %tb, after the panel, prints the whole traceback
