"""The live memory viewer: the same viewer, with the kernel answering it (``snap.view()``; needs ipywidgets).

The viewer's script cannot reach the kernel by itself, so the panel is shown inside a widget box with two hidden
standard widgets: a text box the script writes a request into (JSON), and an HTML widget the kernel writes the
answer into.  No widget code of our own runs in the browser, so nothing beyond ``ipywidgets`` is needed.  The
kernel keeps the columnar model and answers each window at screen resolution (exact down to single events) and
each moment with every block alive, a page at a time.  Without ipywidgets, ``snap`` shows the stand-alone viewer.
"""

from __future__ import annotations

import html
import json
from typing import Any

from nbdebug.core.memory._window import WindowModel
from nbdebug.errors import require

__all__ = ["live_viewer", "answer"]


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


def live_viewer(snap: Any, device: int | None = None) -> Any:
    """A widget showing the viewer of ``snap`` with the kernel answering it (exact at every zoom)."""
    widgets = require("ipywidgets", "widgets", "the live memory viewer (snap.view())")

    from nbdebug.render.memory_viewer import viewer_html

    devices = [device] if device is not None else list(snap.devices) or [None]
    models = {}
    for d in devices:
        m = WindowModel(snap, d)
        models[int(m.device)] = m  # type: ignore[arg-type]
    page = viewer_html(snap, device)  # where widgets do not render: the stand-alone viewer
    out = widgets.Output()
    out.outputs = ({"output_type": "display_data",
                    "data": {"text/html": viewer_html(snap, device, live=True), "text/plain": repr(snap)},
                    "metadata": {}},)
    hide = widgets.Layout(display="none")
    request = widgets.Text(value="", layout=hide, continuous_update=True)
    request.add_class("nbdmem-req")
    response = widgets.HTML(value="", layout=hide)
    response.add_class("nbdmem-resp")

    def on_request(change: dict[str, Any]) -> None:
        if change.get("new"):
            response.value = f"<code>{html.escape(json.dumps(answer(models, change['new'])))}</code>"

    request.observe(on_request, names="value")

    class LiveMemoryViewer(widgets.VBox):  # type: ignore[misc, name-defined]
        """The viewer in a box; shown as its stand-alone HTML where widgets do not render (untrusted, GitHub)."""

        def _repr_mimebundle_(self, **kwargs: Any) -> Any:
            bundle = super()._repr_mimebundle_(**kwargs)
            bundle["text/html"] = page
            return bundle

    box = LiveMemoryViewer([out, request, response])
    box.add_class("nbdmem-live")
    box.models = models
    return box
