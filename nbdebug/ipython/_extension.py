"""``%load_ext nbdebug`` / ``%unload_ext nbdebug``.

Each magics module below is light to import (no torch) and has ``register(state)``, which registers its magics,
features, event callbacks and diagnosis enrichers through ``state`` so that unloading can undo all of it.
"""

from __future__ import annotations

import importlib
from typing import Any

from nbdebug.ipython._state import ExtensionState

MAGIC_MODULES = (
    "nbdebug.ipython._sites",
    "nbdebug.ipython._magics_core",
    "nbdebug.ipython._memory",
    "nbdebug.ipython._training",
    "nbdebug.ipython._xla",
    "nbdebug.ipython._dist",
    "nbdebug.ipython._batch",
    "nbdebug.ipython._crash",
)

_STATES: dict[int, ExtensionState] = {}


def get_state(shell: Any) -> ExtensionState | None:
    """The extension state of ``shell``, or None when nbdebug is not loaded there."""
    return _STATES.get(id(shell))


def load(shell: Any) -> ExtensionState:
    existing = _STATES.get(id(shell))
    if existing is not None:
        return existing
    state = ExtensionState(shell=shell)
    _STATES[id(shell)] = state
    try:
        for name in MAGIC_MODULES:
            importlib.import_module(name).register(state)
    except BaseException:
        state.teardown()
        _STATES.pop(id(shell), None)
        raise
    return state


def unload(shell: Any) -> None:
    state = _STATES.pop(id(shell), None)
    if state is None:
        return
    problems = state.teardown()
    if problems:
        import warnings

        warnings.warn("nbdebug unload: " + "; ".join(problems), RuntimeWarning, stacklevel=2)
