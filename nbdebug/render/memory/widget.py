"""The live memory viewer: the same viewer, with the kernel answering it (``snap.view()``; needs anywidget).

``snap.view()`` shows two outputs of one cell:

- the viewer as plain HTML (as ``snap`` shows it), which is what a saved notebook keeps: reopened, it works from
  the events it holds and says that the cell must be re-run for the live view; where no script runs it is the
  static picture;
- a widget (anywidget: an ES module in a package file, ``static/viewer_widget.js``) that draws the same viewer in
  its own element and asks the kernel through the standard widget channel: the browser sends each request with
  ``model.send``, the kernel answers with ``send`` (a custom message).  While the widget is on screen the HTML
  output steps aside (a CSS rule of its own, by token); no script looks for other outputs or for the notebook's page.

The kernel keeps the columnar model and answers each window at screen resolution (exact down to single events) and
each moment with every block alive, a page at a time.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from nbdebug.core.memory._window import WindowModel
from nbdebug.errors import require

__all__ = ["live_viewer", "answer", "LiveView", "widget_esm"]


def answer(models: dict[int, WindowModel], request: str | dict[str, Any]) -> dict[str, Any]:
    """The answer to one request of the viewer's script (a dict, or its JSON).

    A bad request gets ``{"error": ...}``, never an exception.
    """
    if isinstance(request, str):
        try:
            req = json.loads(request)
        except ValueError:
            return {"error": f"a request is JSON; got {request[:80]!r}"}
    else:
        req = request
    if not isinstance(req, dict):
        return {"error": f"a request is a JSON object; got {type(req).__name__}"}
    seq = req.get("seq")
    op = req.get("op")
    if op == "hello":  # the widget asks once whether a kernel answers at all
        return {"seq": seq, "op": op, "ok": True}
    try:
        model = models[int(req.get("device", next(iter(models))))]
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


def widget_esm() -> str:
    """The widget's ES module: the viewer's script (which declares ``nbdmemViewer``), then ``viewer_widget.js``."""
    from nbdebug.render._html import static

    return static("viewer.js") + "\n" + static("viewer_widget.js")


def _standin(html: str, token: str) -> str:
    """The HTML output of ``snap.view()``: the viewer, hidden while its live widget is on the page.

    The rule names nothing but this output and its widget (the same token): where both are in one document
    (JupyterLab, Notebook 7, VS Code) the live widget alone shows; reopened, the widget's model is gone and this
    output is the viewer.  The second rule hides what JupyterLab puts in place of a widget whose model is gone
    ("Error displaying widget: model not found", the one state in which JupyterLab and Notebook 7 give the output
    itself the class ``jupyter-widgets``) when it follows this output: a rule that matches nothing elsewhere.
    """
    t = json.dumps(token)
    style = (f"body:has(.nbdmem-widget[data-live={t}]) .nbdmem-standin[data-live={t}]{{display:none!important}}"
             f".jp-OutputArea-child:has(.nbdmem-standin[data-live={t}])+.jp-OutputArea-child:has("
             ">.jp-OutputArea-output.jupyter-widgets){display:none}")
    return f'<div class="nbdmem-standin" data-live="{token}"><style>{style}</style>{html}</div>'


_WIDGET_CLASS: list[type] = []


def _widget_class() -> type:
    """The anywidget class, made on first use (anywidget and traitlets are imported only then)."""
    if _WIDGET_CLASS:
        return _WIDGET_CLASS[0]
    anywidget = require("anywidget", "widgets", "the live memory viewer (snap.view())")
    import traitlets

    class MemoryViewerWidget(anywidget.AnyWidget):  # type: ignore[misc, name-defined]
        """The viewer, drawn by the widget's ES module and answered by this kernel."""

        _esm = traitlets.Unicode(widget_esm()).tag(sync=True)
        html = traitlets.Unicode("").tag(sync=True)
        token = traitlets.Unicode("").tag(sync=True)

        def __repr__(self) -> str:  # not the whole viewer's HTML, which is one of its traits
            return "<live memory viewer>"

        def _repr_mimebundle_(self, **kwargs: Any) -> Any:
            bundle = super()._repr_mimebundle_(**kwargs)  # (data, metadata) or data
            data = bundle[0] if isinstance(bundle, tuple) else bundle
            if isinstance(data, dict):
                # where widgets do not render (GitHub, nbviewer) one line says what was here; the viewer above works
                data["text/plain"] = "(the live memory viewer answers here while the kernel runs: re-run the cell)"
            return bundle

    _WIDGET_CLASS.append(MemoryViewerWidget)
    return MemoryViewerWidget


class LiveView:
    """What ``snap.view()`` returns: displayed, the viewer (HTML) and the live widget that draws it from this kernel."""

    def __init__(self, snap: Any, device: int | None = None) -> None:
        widget_class = _widget_class()
        from nbdebug.render.memory.viewer import viewer_html

        devices = [device] if device is not None else list(snap.devices) or [None]
        self.models: dict[int, WindowModel] = {}
        for d in devices:
            m = WindowModel(snap, d)
            self.models[int(m.device)] = m  # type: ignore[arg-type]
        self.token = uuid.uuid4().hex[:12]
        self.snap = snap
        self.html = viewer_html(snap, device, live=self.token)
        self.widget = widget_class(html=self.html, token=self.token)
        self.widget.on_msg(self._on_msg)

    def _on_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        self.widget.send(answer(self.models, content))

    def _repr_html_(self) -> str:
        return _standin(self.html, self.token)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display({"text/html": _standin(self.html, self.token), "text/plain": repr(self.snap)}, raw=True)
        display(self.widget)


def live_viewer(snap: Any, device: int | None = None) -> LiveView:
    """The viewer of ``snap`` with this kernel answering it (exact at every zoom)."""
    return LiveView(snap, device)
