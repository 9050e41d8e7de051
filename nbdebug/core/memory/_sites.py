"""Which frame of a stack is "the site" of an allocation: the first frame of the user's own code.

A recorded stack runs from the allocator outwards: C++ frames (``??``, ``*.cpp``), then PyTorch's Python
internals (``torch/nn/modules/module.py``), then the user's code, then the interpreter's entry point.  The site is
the innermost frame that is Python and not PyTorch (nor nbdebug's own tracing code); paths written on Windows use
backslashes, so both separators are accepted.
"""

from __future__ import annotations

import linecache
import os
import re
from collections.abc import Mapping, Sequence

__all__ = ["Frame", "is_user_frame", "pick_site", "format_frame", "short_path", "OPERATOR_LINE", "frame_kind"]

# (filename, line, name)
Frame = tuple[str, int, str]

_NATIVE_SUFFIXES = (".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".cu", ".cuh", ".so", ".o", ".a")
# PyTorch's own Python files, in site-packages, a source checkout, or a Windows venv.
_INTERNAL = re.compile(r"(^|[/\\])(torch|torchvision|torchaudio|functorch|triton)[/\\]")
# stacks with no Python frame at all (C++ only): backward runs on autograd's own threads
BACKWARD_SITE: Frame = ("", 0, "<backward pass (autograd thread, no Python frame)>")
NATIVE_SITE: Frame = ("", 0, "<C++ only, no Python frame>")
# nbdebug's own frames (the magic running the cell, the tracer) are never a site; PyTorch's Python tracer writes
# paths under sys.path relative to it ("nbdebug/ipython/_cell.py" for an installed nbdebug)
_NBDEBUG_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
_NBDEBUG_RELATIVE = re.compile(r"nbdebug[/\\]")
# the machinery that runs a notebook cell (IPython, the kernel, its event loop): the user's memory is never
# allocated there, so it is a site only when nothing else is
_RUNNER = re.compile(r"(^|[/\\])(IPython|ipykernel|jupyter_client|traitlets|tornado|zmq|asyncio)[/\\]"
                     r"|(^|[/\\])(runpy|threading)\.py$")
# nbdebug's magics, which run the cell's body: what lies outside them is the notebook running the magic
_CELL_RUNNER = re.compile(r"nbdebug[/\\]ipython[/\\]")
_RUNNER_DIR = os.path.join(_NBDEBUG_DIR, "ipython") + os.sep
#: the line of a frame whose allocation came from an operator (``a @ b``, ``x[i]``): the profiler records the
#: lines of calls only, so the function is known and the line is not
OPERATOR_LINE = -1


def _is_python(filename: str, line: int) -> bool:
    if not filename or filename in ("??", "none", "unknown"):
        return False
    if filename.startswith("<") and filename.endswith(">"):  # <cell>, <ipython-input-...>, <string>
        return not filename.startswith("<frozen")
    if filename.lower().endswith(_NATIVE_SUFFIXES):
        return False
    return line > 0 or filename.endswith(".py")


def is_user_frame(frame: Frame) -> bool:
    """True for a Python frame outside PyTorch and outside nbdebug's tracing code."""
    filename, line, _ = frame
    key = (filename, line > 0)
    known = _USER_FILES.get(key)
    if known is None:
        if len(_USER_FILES) >= 65_536:  # the same few hundred files come back in every recording of a session
            _USER_FILES.clear()
        known = _USER_FILES[key] = (_is_python(filename, line) and not _INTERNAL.search(filename)
                                    and not _is_own(filename) and not _RUNNER.search(filename))
    return known


def _is_own(filename: str) -> bool:
    return filename.startswith(_NBDEBUG_DIR) or _NBDEBUG_RELATIVE.match(filename) is not None


# (filename, has a line) -> is_user_frame: the answer depends on nothing else
_USER_FILES: dict[tuple[str, bool], bool] = {}


def pick_site(stack: Sequence[Frame]) -> Frame | None:
    """The user frame nearest the allocation that has a line, else the user frame an operator ran in; else the first
    Python frame of a library (PyTorch), then of the notebook's machinery; never nbdebug's own; else a C++-only
    marker; else None."""
    # frames past nbdebug's cell runner are the notebook running the magic (its own "%%memtrace" line), not the cell
    inner = list(stack)
    for i, frame in enumerate(inner):
        if _is_cell_runner(frame[0]):
            inner = inner[:i]
            break
    user = [f for f in inner if is_user_frame(f)]
    for frame in user:  # a line of the user's own (an operator's frame has none: the call into it does)
        if frame[1] != OPERATOR_LINE:
            return frame
    if user:  # only an operator's frame, e.g. `b = a @ a` in the cell itself
        return user[0]
    python = [f for f in stack if _is_python(f[0], f[1]) and not _is_own(f[0])]
    for frame in python:
        if not _RUNNER.search(frame[0]):
            return frame
    if python:
        return python[0]
    if not stack:
        return None
    if any("autograd::Engine" in name or "autograd::engine" in name for _, _, name in stack):
        return BACKWARD_SITE
    return NATIVE_SITE


def frame_kind(frame: Frame) -> int:
    """1 for a user frame with a line (a site), 2 for nbdebug's cell runner (no site lies past it), else 0."""
    if frame[1] != OPERATOR_LINE and is_user_frame(frame):
        return 1
    return 2 if _is_cell_runner(frame[0]) else 0


def _is_cell_runner(filename: str) -> bool:
    return _CELL_RUNNER.match(filename) is not None or filename.startswith(_RUNNER_DIR)


def short_path(filename: str, parts: int = 2) -> str:
    """The last ``parts`` components of a POSIX or Windows path."""
    pieces = re.split(r"[/\\]", filename)
    return "/".join(p for p in pieces[-parts:] if p) or filename


def format_frame(frame: Frame | None, *, short: bool = True, cells: Mapping[str, str] | None = None) -> str:
    """``model.py:54 forward`` (or the full path when ``short`` is false).

    ``cells`` maps the file names of notebook cells to the names the user knows them by (``In [12]``): such a
    frame reads ``In [12], line 10: out = model(xb)`` (with ``in forward`` when it is inside a function).
    """
    if frame is None:
        return "<no stack recorded>"
    filename, line, name = frame
    inside = f" in {name}" if name and name != "<module>" else ""
    if cells and filename in cells:
        if line == OPERATOR_LINE:
            return f"{cells[filename]}{inside}, {_OPERATOR}"
        where = f"{cells[filename]}, line {line}{inside}"
        source = linecache.getline(filename, line).strip() if line > 0 else ""
        return f"{where}: {source[:80]}" if source else where
    if not _is_python(filename, line):
        return name or filename or "??"
    shown = short_path(filename) if short else filename
    if line == OPERATOR_LINE:
        return f"{shown} {name}, {_OPERATOR}"
    return f"{shown}:{line} {name}" if line else f"{shown} {name}"


_OPERATOR = "an operator such as @, + or [] (its line is not recorded)"
