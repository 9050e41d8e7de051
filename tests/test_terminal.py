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
