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
        _show_figures_as_pictures(state)
    except BaseException:
        state.teardown()
        _STATES.pop(id(shell), None)
        raise
    return state


def _show_figures_as_pictures(state: ExtensionState) -> None:
    """A matplotlib Figure built without pyplot shows as a picture, not ``<Figure size 500x300 with 1 Axes>``.

    Registered by name (matplotlib is not imported) and only when nothing shows Figures yet (``%matplotlib
    inline`` does); unloading takes it off again.
    """
    png = state.shell.display_formatter.formatters.get("image/png")
    if png is None:
        return
    try:
        png.lookup_by_type("matplotlib.figure.Figure")
        return
    except KeyError:
        pass

    def printer(fig: Any) -> Any:
        return importlib.import_module("nbdebug.render._registry")._any_figure_png(fig)

    # it already shows nbdebug's own figures through figure_png: a later .plot() keeps it (and unload finds it)
    printer._nbdebug = True  # type: ignore[attr-defined]
    png.for_type_by_name("matplotlib.figure", "Figure", printer)

    def remove() -> None:
        try:
            if png.lookup_by_type("matplotlib.figure.Figure") is printer:
                png.pop("matplotlib.figure.Figure")
        except KeyError:
            pass

    state.on_unload(remove)


def unload(shell: Any) -> None:
    state = _STATES.pop(id(shell), None)
    if state is None:
        return
    problems = state.teardown()
    if problems:
        import warnings

        warnings.warn("nbdebug unload: " + "; ".join(problems), RuntimeWarning, stacklevel=2)
