"""The live memory viewer: the same viewer, with the kernel answering it (``snap.view()``; needs ipywidgets).

The viewer's script cannot reach the kernel by itself, so ``snap.view()`` shows two outputs: the viewer (plain
HTML, as ``snap`` shows it) and, under it, a widget of two hidden standard widgets: a text box the script writes a
request into (JSON) and an HTML widget the kernel writes the answer into.  No widget code of our own runs in the
browser, so nothing beyond ``ipywidgets`` is needed.  The kernel keeps the columnar model and answers each window
at screen resolution (exact down to single events) and each moment with every block alive, a page at a time.

Reopened later, the viewer is still there (it is HTML, with every event of the trace in it); the widget, whose
kernel is gone, has nothing to show and the viewer hides JupyterLab's "model not found" in its place.
"""

from __future__ import annotations

import html
import json
import uuid
from typing import Any

from nbdebug.core.memory._window import WindowModel
from nbdebug.errors import require

__all__ = ["live_viewer", "answer", "LiveView"]


def answer(models: dict[int, WindowModel], request: str) -> dict[str, Any]:
    """The answer to one request of the viewer's script; a bad request gets ``{"error": ...}``, never an exception."""
    try:
        req = json.loads(request)
    except ValueError:
        return {"error": f"a request is JSON; got {request[:80]!r}"}
    if not isinstance(req, dict):
        return {"error": f"a request is a JSON object; got {type(req).__name__}"}
    seq = req.get("seq")
    try:
        model = models[int(req.get("device", next(iter(models))))]
        op = req.get("op")
        if op == "window":
            out = model.envelope(float(req["x0"]), float(req["x1"]), int(req.get("width", 1000)))
        elif op == "alive":
            out = model.alive_page(int(req["event"]), int(req.get("offset", 0)), int(req.get("limit", 50)))
        else:
            return {"seq": seq, "error": f"unknown request {op!r}; expected 'window' or 'alive'"}
    except Exception as e:  # the kernel must keep running whatever the browser sends
        return {"seq": seq, "error": f"{type(e).__name__}: {e}"}
    out["seq"] = seq
    out["op"] = op
    return out


class LiveView:
    """What ``snap.view()`` returns: displayed, the viewer and its (hidden) link to this kernel."""

    def __init__(self, snap: Any, device: int | None = None) -> None:
        widgets = require("ipywidgets", "widgets", "the live memory viewer (snap.view())")
        from nbdebug.render.memory.viewer import viewer_html

        devices = [device] if device is not None else list(snap.devices) or [None]
        self.models: dict[int, WindowModel] = {}
        for d in devices:
            m = WindowModel(snap, d)
            self.models[int(m.device)] = m  # type: ignore[arg-type]
        self.token = uuid.uuid4().hex[:12]
        self.snap = snap
        self.html = viewer_html(snap, device, live=self.token)
        hide = widgets.Layout(display="none")
        self.request = widgets.Text(value="", layout=hide, continuous_update=True)
        self.request.add_class(f"nbdmem-req-{self.token}")
        self.response = widgets.HTML(value="", layout=hide)
        self.response.add_class(f"nbdmem-resp-{self.token}")
        self.request.observe(self._on_request, names="value")

        class Link(widgets.VBox):  # type: ignore[misc, name-defined]
            """Shows nothing where widgets do not render (no "VBox(children=...)" text)."""

            def _repr_mimebundle_(self, **kwargs: Any) -> Any:
                bundle = super()._repr_mimebundle_(**kwargs)
                bundle["text/plain"] = ""
                return bundle

        self.link = Link([self.request, self.response], layout=hide)

    def _on_request(self, change: dict[str, Any]) -> None:
        if change.get("new"):
            self.response.value = f"<code>{html.escape(json.dumps(answer(self.models, change['new'])))}</code>"

    def _repr_html_(self) -> str:
        return self.html

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display({"text/html": self.html, "text/plain": repr(self.snap)}, raw=True)
        display(self.link)


def live_viewer(snap: Any, device: int | None = None) -> LiveView:
    """The viewer of ``snap`` with this kernel answering it (exact at every zoom)."""
    return LiveView(snap, device)
