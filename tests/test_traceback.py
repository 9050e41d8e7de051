"""Short tracebacks (on by default): the diagnosis first, the user's frames in full, library frames folded."""

from __future__ import annotations

import re
import sys

import pytest
from IPython.utils.capture import capture_output

from nbdebug.ipython._traceback import classify_entry, fold_library_frames

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
SETUP = "import torch\nfrom torch import nn\nmodel = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(16, 2))"
BUG = "model(torch.randn(8, 10))"


def _run(ip, code):
    with capture_output() as out:
        result = ip.run_cell(code, store_history=True)
    return result, ANSI.sub("", out.stdout + out.stderr), out.outputs


def test_a_shape_error_in_a_sequential_is_short_and_the_panel_has_the_full_traceback(ip):
    ip.run_cell(SETUP)
    result, text, outputs = _run(ip, BUG)
    assert isinstance(result.error_in_exec, RuntimeError)
    first = text.strip().splitlines()[0]
    assert first.startswith("nbdebug ▸ [shape_mismatch]"), first
    assert f"Cell In[{result.execution_count}], line 1" in text  # the user's frame, in full
    assert "library frames folded" in text
    assert "module.py:1789, in Module._call_impl" not in text  # folded
    assert "linear.py:134, in Linear.forward" in text  # the innermost frame stays
    assert text.rstrip().endswith("mat1 and mat2 shapes cannot be multiplied (8x32 and 16x2)")
    assert sys.last_value is result.error_in_exec  # %debug and %tb see the error
    panels = [o.data for o in outputs if "nbdebug" in o.data.get("text/plain", "")]
    assert len(panels) == 1
    # the notebook panel holds the full traceback one click away; the plain text (a terminal, where the
    # traceback is printed right above) says where to get it instead of printing it a second time (issue 23)
    assert "Full traceback" in panels[0]["text/html"] and "module.py" in panels[0]["text/html"]
    assert "module.py" not in panels[0]["text/plain"] and "%tb prints it" in panels[0]["text/plain"]


def test_full_mode_and_unknown_errors_keep_ipythons_traceback(ip):
    ip.run_cell(SETUP)
    ip.run_line_magic("nbdebug", "traceback full")
    try:
        _, text, _ = _run(ip, BUG)
        assert "folded" not in text and "nbdebug ▸" not in text
        assert "module.py:1789, in Module._call_impl" in text
    finally:
        ip.run_line_magic("nbdebug", "traceback short")
    # an error nbdebug does not recognise: IPython's own traceback, untouched
    _, text, _ = _run(ip, "import json\njson.loads('{')")
    assert "nbdebug ▸" not in text and "folded" not in text and "JSONDecodeError" in text


def test_unload_gives_the_exception_handler_back_and_respects_anothers(shell):
    assert shell.custom_exceptions == ()
    shell.run_line_magic("load_ext", "nbdebug")
    assert shell.custom_exceptions == (Exception,)
    shell.run_line_magic("unload_ext", "nbdebug")
    assert shell.custom_exceptions == ()

    def mine(self, etype, value, tb, tb_offset=None):
        return ["mine\n"]

    shell.set_custom_exc((ValueError,), mine)
    try:
        shell.run_line_magic("load_ext", "nbdebug")  # loads, and leaves the other handler in charge
        assert shell.custom_exceptions == (ValueError,)
        status = shell.run_line_magic("nbdebug", "")
        assert status.state("traceback") == "off"
        shell.run_line_magic("unload_ext", "nbdebug")
        assert shell.custom_exceptions == (ValueError,)
    finally:
        shell.set_custom_exc((), None)


def test_folding_keeps_user_frames_and_the_innermost_library_frame():
    site = "/usr/lib/python3/site-packages"
    stb = ["---\n", "ValueError   Traceback (most recent call last)\n", "Cell In[3], line 2\n----> 2 f()\n",
           f"File {site}/torch/a.py:10, in A.f(self)\n", f"File {site}/torch/b.py:20, in B.g(self)\n",
           "File /home/me/train.py:5, in step(x)\n", f"File {site}/torch/c.py:30, in C.h(self)\n",
           f"File {site}/torch/d.py:40, in D.k(self)\n", "ValueError: boom"]
    assert classify_entry(stb[2])[0] == "user" and classify_entry(stb[5])[0] == "user"
    assert classify_entry(stb[3]) == ("library", "torch/a.py:10 f")
    out = [ANSI.sub("", s) for s in fold_library_frames(stb, headline="HEAD\n")]
    assert out[0] == "HEAD\n" and out[-1] == "ValueError: boom" and out[-2] == stb[7]
    assert stb[2] in out and stb[5] in out and stb[3] not in out and stb[6] not in out
    assert sum("folded" in s for s in out) == 2


@pytest.mark.parametrize("word", ["short", "full"])
def test_status_names_the_mode(ip, word):
    status = ip.run_line_magic("nbdebug", f"traceback {word}")
    assert status.modes["traceback"] == word
    ip.run_line_magic("nbdebug", "traceback short")
