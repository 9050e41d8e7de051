"""Shapes of error texts that recur across the wild samples, each read by a mechanism and not by a message's words.

Every text here is written by hand (or is a real raise provoked in a child process): the samples' own texts stay out.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nbdebug.core.explain import explain
from nbdebug.core.explain._structure import owner_of, read

_ABORT_AFTER_IMPORT = '''Traceback (most recent call last):
  File "/home/ana/proj/prepare.py", line 5, in <module>
    import geodata.tiles
  File "/opt/conda/lib/python3.10/site-packages/geodata/tiles.py", line 12, in <module>
    WEB_MERCATOR = Projection.from_code(3857)
  File "projkit/_core.pyx", line 88, in projkit._core.Projection.from_code
projkit.errors.ProjError: database schema version 3 is newer than this build supports
double free or corruption (out)
Aborted (core dumped)
'''


@pytest.mark.parametrize(("path", "owner"), [("projkit/_core.pyx", "projkit"),
                                             ("graphlib2/_ffi/_cython/./function.pxi", "graphlib2"),
                                             ("mymod.pyx", "user"), ("/home/u/proj/fast.pyx", "user")])
def test_a_cython_frame_belongs_to_the_package_it_was_built_in(path: str, owner: str) -> None:
    assert owner_of(path) == owner


def test_a_native_abort_after_a_python_exception_is_the_exceptions_error() -> None:
    d = explain(_ABORT_AFTER_IMPORT)
    assert d.kind == "import_failed"  # the package failing while imported; the abort came at shutdown
    assert d.evidence["package"] == "projkit"
    # an exception with no frames before the abort says nothing of its own: not placed, and no crash blamed either
    assert explain("ValueError: bad header\nfree(): invalid pointer\nAborted (core dumped)").kind == "native_crash"


@pytest.mark.parametrize("text", [
    # the crash first, then whatever Python printed on its way down: still the crash
    "Segmentation fault (core dumped)\nTraceback (most recent call last):\n  File \"t.py\", line 1, in <module>\n"
    "    run()\nRuntimeError: worker exited",
    # faulthandler's stack is no exception that came first
    "Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f (most recent call first):\n"
    "  File \"/home/u/train.py\", line 40 in step\n",
    # an exception that reports the crash itself
    'Traceback (most recent call last):\n  File "t.py", line 3, in <module>\n    main()\n'
    "RuntimeError: child process aborted (core dumped)\nAborted (core dumped)",
])
def test_a_crash_not_preceded_by_an_exception_of_its_own_stays_a_native_crash(text: str) -> None:
    assert explain(text).kind == "native_crash"


_IGNORED = '''class Stream:
    def __del__(self):
        self.close()
    close = None
s = Stream()
del s
'''


def _ignored_text() -> str:
    """A real 'Exception ignored in' report: Python calling a ``__del__`` that fails."""
    done = subprocess.run([sys.executable, "-c", _IGNORED], capture_output=True, text=True, timeout=60)
    assert "Exception ignored in" in done.stderr and done.returncode == 0  # it stopped nothing
    return done.stderr


def test_an_exception_python_only_ignored_is_no_error_of_the_users_values() -> None:
    text = _ignored_text()
    assert "'NoneType' object is not callable" in text
    assert explain(text).kind == "unknown"


def test_an_error_after_an_ignored_exception_is_still_answered() -> None:
    text = _ignored_text() + ('Traceback (most recent call last):\n  File "/home/u/train.py", line 9, in <module>\n'
                              "    model(x)\nRuntimeError: mat1 and mat2 shapes cannot be multiplied (4x10 and 20x5)\n")
    assert explain(text).kind == "shape_mismatch"


def test_colabs_cell_frame_is_read_as_the_users() -> None:
    text = '''---------------------------------------------------------------------------
KeyError                                  Traceback (most recent call last)
/tmp/ipython-input-1234567.py in <cell line: 0>()
      1 cfg = {"lr": 0.1}
----> 2 print(cfg["batch_size"])

KeyError: 'batch_size'
'''
    s = read(text)
    assert [(f.owner, f.func) for f in s.frames] == [("user", "<cell line: 0>")]
    assert s.innermost is not None and s.innermost.source.startswith("print(cfg")


def test_an_ipython_8_frames_source_is_its_arrow_line() -> None:
    text = '''ValueError                                Traceback (most recent call last)
Cell In[4], line 3
      1 import numpy as np
      2 x = np.ones(3)
----> 3 raise ValueError("bad x")

ValueError: bad x
'''
    s = read(text)
    assert s.innermost is not None and s.innermost.source == 'raise ValueError("bad x")'


def test_a_folder_named_like_the_package_is_imported_from_no_file(tmp_path: Path) -> None:
    (tmp_path / "fancylib").mkdir()  # a checkout's folder without __init__.py, in the working directory
    done = subprocess.run([sys.executable, "-c", "from fancylib import Pipeline"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    assert "(unknown location)" in done.stderr
    d = explain(done.stderr)
    assert d.kind == "namespace_package"
    assert d.evidence["module"] == "fancylib" and "find_spec" in d.first_step
    # a name missing from a module Python found in a file is still a release that lacks it
    assert explain("ImportError: cannot import name 'Pipeline' from 'fancylib' "
                   "(/usr/lib/python3/site-packages/fancylib/__init__.py)").kind == "api_missing"


def _argparse_error(argv: list[str]) -> str:
    """A real argparse rejection: a script's parser given a command line written for another release."""
    source = ("import argparse\np = argparse.ArgumentParser(prog='finetune')\np.add_argument('--epochs', type=int)\n"
              "p.add_argument('--lora-rank', type=int)\np.parse_args()\n")
    done = subprocess.run([sys.executable, "-c", source, *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    return done.stderr


@pytest.mark.parametrize("argv", [["--epochs", "three"], ["--lora_r", "8"]])
def test_a_command_line_tool_rejecting_its_arguments_is_cli_usage(argv: list[str]) -> None:
    d = explain(_argparse_error(argv))
    assert d.kind == "cli_usage"
    assert d.evidence["prog"] == "finetune" and "--help" in d.first_step


def test_a_usage_error_before_a_traceback_gives_way_to_the_traceback() -> None:
    text = _argparse_error(["--lora_r", "8"]) + (
        'Traceback (most recent call last):\n  File "/home/u/run.py", line 9, in <module>\n    model(x)\n'
        "NameError: name 'x' is not defined\n")
    assert explain(text).kind not in ("cli_usage", "unknown")  # the traceback's own error, placed by its frame
    # a compiler's own "error: argument" is no command line a Python tool rejected
    assert explain("clang: error: argument to '-o' is missing (expected 1 value)").kind != "cli_usage"


def test_an_index_tensor_pair_that_does_not_broadcast_is_a_shape_error() -> None:
    import torch

    table = torch.zeros(6, 6)
    with pytest.raises(IndexError) as raised:
        table[torch.tensor([0, 1]), torch.tensor([0, 1, 2])]  # rows and columns of different lengths
    assert explain(raised.value).kind == "shape_mismatch"
    assert explain(f"IndexError: {raised.value}").kind == "shape_mismatch"


@pytest.mark.parametrize("message", ["batch1 dim 2 must match batch2 dim 1", "self dim 1 must match batch1 dim 1"])
def test_the_batched_products_operand_checks_are_shape_errors(message: str) -> None:
    assert explain(f"RuntimeError: {message}").kind == "shape_mismatch"


@pytest.mark.parametrize("notice", ["./train.sh: 行 4: 31337 段错误 (核心已转储) python train.py",
                                    "已放弃 (核心已转储)",
                                    "Speicherzugriffsfehler (Speicherabzug geschrieben)",
                                    "Ошибка сегментирования (стек памяти сброшен на диск)",
                                    "Violación de segmento (`core' generado)"])
def test_a_shells_crash_notice_in_the_users_language_is_a_native_crash(notice: str) -> None:
    text = "[F renderer.cpp:120] context creation failed\n" + notice + "\n"
    assert explain(text).kind == "native_crash"


def test_a_plain_exception_raised_by_the_users_own_check_is_read_as_its_exception(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("def check(cfg):\n    if 'epochs' not in cfg:\n        raise Exception('config needs epochs')\n\n"
                      "check({})\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    s = read(done.stderr)
    assert (s.exc_type, s.message, s.cut) == ("Exception", "config needs epochs", False)
    d = explain(done.stderr)
    assert d.kind == "user_code_error" and "train.py, line 3" in d.first_step


_COLAB_CUT = '''---------------------------------------------------------------------------
{cls}                                Traceback (most recent call last)
/tmp/ipython-input-2718281828.py in <cell line: 0>()
      1 import os
----> 2 from fastadapt import LoraModel
      3 model = LoraModel.from_base("tiny")

5 frames
/usr/local/lib/python3.11/dist-packages/{pkg}/patching.py in rewrite_trainer(source, name)
    410         lines = source.split("\\n")
--> 412         header = lines[first_def - 1]
    413         indent = len(header) - len(header.lstrip())
'''


def test_a_cut_colab_traceback_of_a_packages_own_import_is_that_import() -> None:
    d = explain(_COLAB_CUT.format(cls="IndexError", pkg="fastadapt"))
    assert d.kind == "import_failed"
    assert d.evidence["package"] == "fastadapt"


@pytest.mark.parametrize(("cls", "pkg"), [("RuntimeError", "fastadapt"),  # a device's or the OS's class: unknown
                                          ("IndexError", "otherlib")])  # another library's frames: which one failed?
def test_a_cut_colab_traceback_stays_unknown_without_its_packages_own_frames(cls: str, pkg: str) -> None:
    assert explain(_COLAB_CUT.format(cls=cls, pkg=pkg)).kind == "unknown"


def test_a_crash_long_after_a_logged_exception_is_still_the_crash() -> None:
    steps = "".join(f"step {i} loss 0.{i:02d}\n" for i in range(20))  # the run went on after the exception was logged
    text = _ABORT_AFTER_IMPORT.split("double free")[0] + steps + "Segmentation fault (core dumped)\n"
    assert explain(text).kind == "native_crash"


def test_an_error_before_an_ignored_exception_keeps_its_answer() -> None:
    error = ('Traceback (most recent call last):\n  File "/home/u/train.py", line 9, in <module>\n    out = model.head(x)\n'
             "AttributeError: 'NoneType' object has no attribute 'head'\n")
    assert explain(error + _ignored_text()).kind == explain(error).kind == "wrong_object_attribute"
