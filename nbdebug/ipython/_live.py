"""The live GradMonitor panel: what ``GradMonitor(model, live=True)`` shows in a notebook.

The panel is an IPython display handle, not a widget: it is shown once with ``display(..., display_id=True)`` and
updated in place (``handle.update``) between optimizer steps, at most ``refresh_hz`` times a second (the core
monitor throttles its listeners).  The last update, when the monitor detaches, is the static final panel, which
is what a saved notebook keeps: no widget model is needed to show it after reopening.

There is one ``GradMonitor`` (``nbdebug.core.training.grads``); importing this module registers ``LivePanel`` as
its live view (``GradMonitor.set_live_view``), the hook through which core reaches the display layer without
importing it.  It is imported with ``nbdebug.GradMonitor``, by ``%%gradmonitor`` (not by ``%load_ext``, which
stays light) and by
``nbdebug.integrations``; torch and numpy only through the core monitor's methods.
"""

from __future__ import annotations

import sys
from typing import Any

from nbdebug.core.training.grads import GradMonitor

__all__ = ["LivePanel", "register"]


class LivePanel:
    """A display that a ``GradMonitor`` updates in place while it records (a listener of the monitor).

    Outside IPython nothing is displayed (a script has nowhere to update in place); the monitor records as usual.
    If rendering ever fails, the panel says so once and stops updating: training goes on untouched.
    """

    def __init__(self, monitor: GradMonitor) -> None:
        self.monitor = monitor
        self.updates = 0
        self.handle: Any = None
        self.failed: str | None = None
        from IPython import get_ipython

        if get_ipython() is not None:
            from IPython.display import display

            self.handle = self._guarded(lambda: display(self.bundle(running=True), raw=True, display_id=True))
        monitor.add_listener(self.update)

    def bundle(self, *, running: bool) -> dict[str, str]:
        """The panel as a mime bundle: a one-line text and the compact HTML panel."""
        from nbdebug.render.training import live_html

        h = self.monitor.history
        state = "training" if running else "done"  # done: the history's own panel, the one the notebook keeps
        text = f"<GradMonitor {state}: {h.steps_seen} optimizer steps, {len(h.findings)} findings>"
        return {"text/plain": text, "text/html": live_html(h, running=running)}

    def update(self, monitor: GradMonitor) -> None:
        """Listener: redraw the panel in place ("done" once the monitor has detached)."""
        if self.handle is None or self.failed is not None:
            return
        self._guarded(lambda: self.handle.update(self.bundle(running=monitor.attached), raw=True))
        if self.failed is None:
            self.updates += 1

    def retire(self) -> None:
        """Empty the live display: the caller shows the history's own panel instead (``%%gradmonitor`` returns
        it), so the cell keeps one panel, not the live one and the history with the same charts."""
        if self.handle is not None and self.failed is None:
            # nothing where HTML renders (JupyterLab, GitHub, nbviewer); a line of words where only text does
            self._guarded(lambda: self.handle.update(_RETIRED, raw=True))

    def _guarded(self, fn: Any) -> Any:
        try:
            return fn()
        except Exception as e:  # a display problem must never stop the user's training loop
            self.failed = f"{type(e).__name__}: {e}"
            print(f"nbdebug: the live GradMonitor panel stopped ({self.failed}); recording goes on",
                  file=sys.stderr)
            return None

    def __repr__(self) -> str:
        return f"<LivePanel: {self.updates} updates{', failed' if self.failed else ''}>"


def register() -> None:
    """Make ``LivePanel`` the view ``GradMonitor(..., live=True)`` shows (done when this module is imported)."""
    GradMonitor.set_live_view(LivePanel)


register()


_RETIRED = {"text/html": "", "text/plain": "(GradMonitor's live panel ended: the run's panel follows)"}
