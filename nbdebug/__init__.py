"""nbdebug: a Jupyter-native debugging toolkit for PyTorch training.

``%load_ext nbdebug`` imports only this module and the IPython glue; every heavy dependency (torch, pandas,
matplotlib, ipywidgets, torch_xla) is imported inside the function that needs it.  The public names below are
resolved lazily through ``__getattr__`` so that ``import nbdebug`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> "module:attribute" (or "module" for a public submodule)
_LAZY: dict[str, str] = {
    # errors (issue 2)
    "explain": "nbdebug.core.explain:explain",
    "Diagnosis": "nbdebug.core.explain:Diagnosis",
    "NbdebugError": "nbdebug.errors:NbdebugError",
    "show_dead_kernels": "nbdebug.ipython._crash:show_dead_kernels",
    # shared shapes: every check's findings, and the tutorials' example data
    "Finding": "nbdebug.core._findings:Finding",
    "Severity": "nbdebug.core._findings:Severity",
    "Fix": "nbdebug.core._findings:Fix",
    "examples": "nbdebug.examples",
    # memory (issue 3)
    "load_snapshot": "nbdebug.core.memory:load_snapshot",
    "MemorySnapshot": "nbdebug.core.memory:MemorySnapshot",
    "memtrace": "nbdebug.core.memory:memtrace",
    "MemTrace": "nbdebug.core.memory:MemTrace",
    "GradHistory": "nbdebug.core.training._gradhistory:GradHistory",
    # training dynamics (issue 4)
    "GradMonitor": "nbdebug.core.training.grads:GradMonitor",
    "nan_sentinel": "nbdebug.core.training.nan:nan_sentinel",
    "NanReport": "nbdebug.core.training.nan:NanReport",
    "NonFiniteError": "nbdebug.errors:NonFiniteError",
    "doctor": "nbdebug.core.doctor:doctor",
    "DoctorReport": "nbdebug.core.doctor:DoctorReport",
    "set_reproducible": "nbdebug.core.doctor:set_reproducible",
    "check_reproducible": "nbdebug.core.doctor:check_reproducible",
    # compilation (issue 5)
    "compile_check": "nbdebug.core.compile:compile_check",
    "CompileReport": "nbdebug.core.compile:CompileReport",
    "capture_compile": "nbdebug.core.compile:capture_compile",
    "xla": "nbdebug.xla",
    # distributed (issue 6)
    "dist": "nbdebug.dist",
    # the batch inspector (issue 28)
    "inspect_batch": "nbdebug.core.data:inspect_batch",
    "compare_splits": "nbdebug.core.data:compare_splits",
    "BatchReport": "nbdebug.core.data:BatchReport",
    # will it fit? (issue 27)
    "predict_memory": "nbdebug.core.memory:predict_memory",
    "MemoryPrediction": "nbdebug.core.memory:MemoryPrediction",
}

# public name -> the display module imported with it: it registers its view with the core class
# (GradMonitor's live panel; core never imports the display layer)
_DISPLAY: dict[str, str] = {"GradMonitor": "nbdebug.ipython._live"}

__all__ = ["__version__", "load_ipython_extension", "unload_ipython_extension", *_LAZY]


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'nbdebug' has no attribute {name!r}")
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    value = getattr(module, attr) if attr else module
    if name in _DISPLAY:
        importlib.import_module(_DISPLAY[name])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    # public names only: not the helpers this module imports for itself (importlib, Any, annotations)
    return sorted(__all__)


def load_ipython_extension(ipython: Any) -> None:
    """Register nbdebug's magics and error explainer (``%load_ext nbdebug``)."""
    from nbdebug.ipython._extension import load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """Remove every magic, hook and callback that loading added (``%unload_ext nbdebug``)."""
    from nbdebug.ipython._extension import unload

    unload(ipython)
