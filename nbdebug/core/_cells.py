"""Where a line of the user's code is, named as the user knows it: ``In [12], line 3: loss = model(x)``.

A notebook kernel compiles each cell under a temporary file name (``/tmp/ipykernel_30528/4054287943.py``) that
the user never sees; the prompt and IPython's tracebacks call the same cell ``In [12]``.  Every site nbdebug shows
(memory sites, the NaN replay, compile graph breaks, warnings, the explainer's frame) goes through ``site_label``
so that all of them read alike, in JupyterLab, nbclient / papermill, VS Code's kernel and terminal IPython.

core does not import IPython: the IPython layer registers a provider of the current map (file name -> ``In [N]``)
when the extension loads (``set_provider``).  Without one, a file that has the shape of a kernel's temporary cell
file still reads ``a notebook cell, line L``, never its temporary name.
"""

from __future__ import annotations

import linecache
import re
from collections.abc import Callable, Mapping

__all__ = ["set_provider", "cell_names", "cell_of", "is_cell_file", "site_label"]

_Provider = Callable[[], Mapping[str, str]]
_providers: list[_Provider] = []

# ipykernel's temporary cell files (``ipykernel_<pid>/<hash>.py``), IPython's ``<ipython-input-12-...>`` (older
# terminals and kernels) and VS Code's ``<cell-id>`` style names
_CELL_FILE = re.compile(r"(?:ipykernel_\d+[/\\]\d+\.py$|^<ipython-input-\d+-[0-9a-f]+>$)")
_INPUT_NUMBER = re.compile(r"^<ipython-input-(\d+)-")


def set_provider(provider: _Provider | None, *, remove: _Provider | None = None) -> None:
    """Register (or, with ``remove``, take back) the function that returns the current file name -> ``In [N]`` map."""
    if remove is not None and remove in _providers:
        _providers.remove(remove)
    if provider is not None and provider not in _providers:
        _providers.append(provider)


def cell_names() -> dict[str, str]:
    """Every cell file name known now -> the name the user knows (``In [12]``); empty outside a notebook."""
    names: dict[str, str] = {}
    for provider in list(_providers):
        try:
            names.update(provider())
        except Exception:  # noqa: BLE001 - naming a site must never break the report it is part of
            continue
    return names


def is_cell_file(filename: str) -> bool:
    """Whether ``filename`` is the code of a notebook cell or an interactive input (known or by its shape)."""
    # the shape first: it needs no map, which each provider rebuilds from the shell's compiler on every call
    return bool(_CELL_FILE.search(filename or "")) or filename in cell_names()


def cell_of(filename: str, names: Mapping[str, str] | None = None) -> str | None:
    """``In [12]`` for a cell's file name; ``a notebook cell`` for one whose number is not known; None otherwise."""
    known = cell_names() if names is None else names
    if filename in known:
        return known[filename]
    number = _INPUT_NUMBER.match(filename or "")
    if number:
        return f"In [{number.group(1)}]"
    if _CELL_FILE.search(filename or ""):
        return "a notebook cell"
    return None


def site_label(filename: str, line: int | None, *, code: bool = True, names: Mapping[str, str] | None = None,
               width: int = 80) -> str:
    """``In [12], line 3: loss = model(x)`` for a cell; ``train.py:40`` (last two path parts) for a file.

    ``code`` adds the line's text where it can be read (cells always keep theirs in ``linecache``).
    """
    cell = cell_of(filename, names)
    text = linecache.getline(filename, line).strip() if code and line and line > 0 else ""
    if cell is not None:
        where = f"{cell}, line {line}" if line else cell
    else:
        pieces = [p for p in re.split(r"[/\\]", filename or "") if p]
        shown = "/".join(pieces[-2:]) or filename or "??"
        where = f"{shown}:{line}" if line else shown
    return f"{where}: {text[:width]}" if text else where
