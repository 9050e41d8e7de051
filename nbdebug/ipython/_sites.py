"""Names notebook cells as the user knows them (``In [12]``) for every site nbdebug shows (``core._cells``)."""

from __future__ import annotations

from typing import Any

from nbdebug.ipython._state import ExtensionState

__all__ = ["cell_names", "register"]


def cell_names(shell: Any) -> dict[str, str]:
    """The file names IPython compiled cells under -> ``In [N]`` (as the prompt and tracebacks name them)."""
    compiled = getattr(getattr(shell, "compile", None), "_filename_map", None) or {}
    # IPython counts the running cell before running it, so a body compiled under shell.execution_count is filed
    # under the next number: name it after the cell that is running (the one the prompt shows)
    running = getattr(getattr(shell, "displayhook", None), "exec_result", None)
    current = getattr(running, "execution_count", None)
    names = {}
    for name, count in list(compiled.items()):
        if isinstance(count, int):
            if isinstance(current, int) and count > current:
                count = current
            names[str(name)] = f"In [{count}]"
    return names


def register(state: ExtensionState) -> None:
    """Let core name cell sites through this shell's compiler; unloading takes the provider back."""
    from nbdebug.core._cells import set_provider

    def provider() -> dict[str, str]:
        return cell_names(state.shell)

    set_provider(provider)
    state.on_unload(lambda: set_provider(None, remove=provider))
