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

__all__ = ["Frame", "is_user_frame", "pick_site", "format_frame", "short_path"]

# (filename, line, name)
Frame = tuple[str, int, str]

_NATIVE_SUFFIXES = (".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".cu", ".cuh", ".so", ".o", ".a")
# PyTorch's own Python files, in site-packages, a source checkout, or a Windows venv.
_INTERNAL = re.compile(r"(^|[/\\])(torch|torchvision|torchaudio|functorch|triton)[/\\]")
# stacks with no Python frame at all (C++ only): backward runs on autograd's own threads
BACKWARD_SITE: Frame = ("", 0, "<backward pass (autograd thread, no Python frame)>")
NATIVE_SITE: Frame = ("", 0, "<C++ only, no Python frame>")
# nbdebug's own frames (the magic running the cell, the tracer) are never a site
_NBDEBUG_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


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
                                    and not filename.startswith(_NBDEBUG_DIR))
    return known


# (filename, has a line) -> is_user_frame: the answer depends on nothing else
_USER_FILES: dict[tuple[str, bool], bool] = {}


def pick_site(stack: Sequence[Frame]) -> Frame | None:
    """The user frame nearest the allocation; else the first Python frame; else a C++-only marker; else None."""
    for frame in stack:
        if is_user_frame(frame):
            return frame
    for frame in stack:
        if _is_python(frame[0], frame[1]) and not frame[0].startswith(_NBDEBUG_DIR):
            return frame
    if not stack:
        return None
    if any("autograd::Engine" in name or "autograd::engine" in name for _, _, name in stack):
        return BACKWARD_SITE
    return NATIVE_SITE


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
    if cells and filename in cells:
        where = f"{cells[filename]}, line {line}" + (f" in {name}" if name and name != "<module>" else "")
        source = linecache.getline(filename, line).strip() if line > 0 else ""
        return f"{where}: {source[:80]}" if source else where
    if not _is_python(filename, line):
        return name or filename or "??"
    shown = short_path(filename) if short else filename
    return f"{shown}:{line} {name}" if line else f"{shown} {name}"
