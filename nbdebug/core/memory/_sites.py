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
from functools import lru_cache

from nbdebug.core._cells import cell_names, cell_of
from nbdebug.core._own import OWN_RELATIVE

__all__ = ["Frame", "is_user_frame", "pick_site", "format_frame", "short_path", "OPERATOR_LINE", "frame_kind",
           "stack_role", "OTHER", "GRADIENTS", "OPTIMIZER_STATE", "PARAMETERS", "ROLE_NAMES"]

# (filename, line, name)
Frame = tuple[str, int, str]

_NATIVE_SUFFIXES = (".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".cu", ".cuh", ".so", ".o", ".a")
# PyTorch's own Python files, in site-packages, a source checkout, or a Windows venv.
_INTERNAL = re.compile(r"(^|[/\\])(torch|torchvision|torchaudio|functorch|triton)[/\\]")
# stacks with no Python frame at all (C++ only): backward runs on autograd's own threads
BACKWARD_SITE: Frame = ("", 0, "<backward pass (autograd thread, no Python frame)>")
NATIVE_SITE: Frame = ("", 0, "<C++ only, no Python frame>")
# nbdebug's own frames (the magic running the cell, the tracer) are never a site; PyTorch's Python tracer writes
# paths under sys.path relative to it ("nbdebug/ipython/_cell.py" for an installed nbdebug): see nbdebug.core._own
_NBDEBUG_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
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
    return _user_file(frame[0], frame[1] > 0)


# the answer depends on the file and on whether the frame has a line, nothing else; the same few hundred files come
# back in every recording of a session
@lru_cache(maxsize=65_536)
def _user_file(filename: str, has_line: bool) -> bool:
    return (_is_python(filename, 1 if has_line else 0) and not _INTERNAL.search(filename) and not _is_own(filename)
            and not _RUNNER.search(filename))


# What an allocation that outlives a training step is, from its stack: made by the backward pass (the gradients
# it accumulates into .grad, or returns from torch.autograd.grad), by an optimizer's step (its state: Adam's two
# buffers per parameter, SGD's momentum), by building a model or moving it (its parameters and buffers), or by
# anything else.
OTHER, GRADIENTS, OPTIMIZER_STATE, PARAMETERS = 0, 1, 2, 3
ROLE_NAMES = ("other", "gradients", "optimizer state", "parameters")
# the Python functions that run autograd's engine (torch >= 2.3 calls it from graph.py, earlier versions from
# autograd/__init__.py); with C++ frames recorded, the engine's own frames
_BACKWARD_FILE = re.compile(r"(^|[/\\])torch[/\\](autograd[/\\](graph|__init__)|_tensor)\.py$")
_BACKWARD_FUNCTIONS = frozenset({"_engine_run_backward", "backward", "grad", "run_backward"})
# optimizers: PyTorch's, and the packages people train with (Hugging Face's Adafactor, 8-bit optimizers, timm's)
_OPTIMIZER_FILE = re.compile(r"(^|[/\\])(torch[/\\](distributed[/\\])?optim[/\\]|transformers[/\\]optimization\.py$"
                             r"|bitsandbytes[/\\]optim[/\\]|timm[/\\]optim[/\\]|apex[/\\]optimizers[/\\])")

# a module's constructor and what moves or converts a model (model.to, .cuda, .half: Module._apply)
_MODULE_FILE = re.compile(r"(^|[/\\])torch[/\\]nn[/\\](modules[/\\]|parameter\.py$)")
_MODULE_FUNCTIONS = frozenset({"__init__", "reset_parameters", "_apply", "__new__"})
_OPTIMIZER_STEP = re.compile(r"(^|[/\\])torch[/\\]optim[/\\]optimizer\.py$")


def stack_role(stack: Sequence[Frame]) -> int:
    """``GRADIENTS``, ``OPTIMIZER_STATE``, ``PARAMETERS`` or ``OTHER`` for an allocation's stack (innermost frame
    first).

    The frames are read from the allocation outwards, up to the first frame of the user's own code: an allocation
    inside the backward pass, an optimizer's step or a module's constructor has that machinery nearer than any
    user frame, while whatever the user's code allocates (a forward pass inside a Lightning closure, run by
    ``optimizer.step``) stops at the user's frame and is ``OTHER``; unless that frame is the user's own
    optimizer, a ``torch.optim.Optimizer`` subclass whose ``step`` torch wraps.
    """
    for i, frame in enumerate(stack):
        verdict = _verdict(frame)
        if verdict == _PASS:
            continue
        if verdict != _USER:
            return verdict
        # the user's own optimizer (a torch.optim.Optimizer subclass): its file's frames, then the wrapper torch
        # puts around every step() (C++ frames of the interpreter may lie between)
        outer = next((f for f in stack[i + 1:] if f[0] != frame[0] and _is_python(f[0], f[1])), None)
        return OPTIMIZER_STATE if outer is not None and _OPTIMIZER_STEP.search(outer[0]) else OTHER
    return OTHER


_USER, _PASS = -1, -2


@lru_cache(maxsize=65_536)
def _verdict(frame: Frame) -> int:
    """What a frame says of the allocation's role on its own: a role, _USER (the user's code: stop there) or
    _PASS."""
    filename, _, name = frame
    if "autograd::engine" in name or "autograd::Engine" in name:
        return GRADIENTS
    if name in _BACKWARD_FUNCTIONS and _BACKWARD_FILE.search(filename):
        return GRADIENTS
    if _OPTIMIZER_FILE.search(filename):
        return OPTIMIZER_STATE
    if name in _MODULE_FUNCTIONS and _MODULE_FILE.search(filename):
        return PARAMETERS
    if filename and is_user_frame((filename, 1, name)):
        return _USER
    return _PASS


def _is_own(filename: str) -> bool:
    return filename.startswith(_NBDEBUG_DIR) or OWN_RELATIVE.match(filename) is not None


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
    scope = _SCOPES.get(name, name)
    inside = f" in {scope}" if name and name != "<module>" else ""
    cell = cells.get(filename) if cells else None
    if cell is None and cell_of(filename, {}) is not None:
        # a cell the given map does not know (a recording named before the cell was filed, a kernel run by
        # nbclient): the names known now, else "a notebook cell", never the kernel's temporary file
        cell = cell_names().get(filename) or cell_of(filename, {})
    if cell is not None:
        if line == OPERATOR_LINE:
            return f"{cell}{inside}, {_OPERATOR}"
        where = f"{cell}, line {line}{inside}"
        source = linecache.getline(filename, line).strip() if line > 0 else ""
        return f"{where}: {source[:80]}" if source else where
    if not _is_python(filename, line):
        return name or filename or "??"
    shown = short_path(filename) if short else filename
    named = f"in {scope}" if name in _SCOPES else name
    if line == OPERATOR_LINE:
        return f"{shown} {named}, {_OPERATOR}"
    return f"{shown}:{line} {named}" if line else f"{shown} {named}"


#: the code objects Python names in angle brackets, in the words a person uses for them
_SCOPES = {"<listcomp>": "a list comprehension", "<dictcomp>": "a dict comprehension",
           "<setcomp>": "a set comprehension", "<genexpr>": "a generator expression", "<lambda>": "a lambda"}


_OPERATOR = "an operator such as @, + or [] (its line is not recorded)"
