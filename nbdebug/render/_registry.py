"""The display registry: result type -> text, HTML and static-picture renderers.

Renderers are pure functions of one result.  They are registered with ``@renders(ResultType, "text")`` (or
``"html"``, ``"png"``, ``"figure"``: a matplotlib Figure, with keyword options such as ``ax``) in the render
module of their capability; the lookup walks the result's MRO, so a
subclass shows like its base until it registers its own.  A result with no HTML renderer still gets a panel:
its text report in a ``<pre>``.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Collection
from typing import Any, TypeVar

__all__ = ["renders", "renderer", "to_text", "to_html", "to_png", "to_figure", "mimebundle", "figure_png",
           "KINDS"]

KINDS = ("text", "html", "png", "figure")
_REGISTRY: dict[str, dict[type, Callable[[Any], Any]]] = {kind: {} for kind in KINDS}

F = TypeVar("F", bound=Callable[..., Any])


def renders(cls: type, kind: str) -> Callable[[F], F]:
    """Register the decorated function as the ``kind`` renderer (``text``, ``html`` or ``png``) of ``cls``."""
    if kind not in KINDS:
        raise ValueError(f"unknown renderer kind {kind!r}; expected one of {', '.join(KINDS)}")

    def decorate(fn: F) -> F:
        _REGISTRY[kind][cls] = fn
        return fn

    return decorate


def renderer(obj: Any, kind: str) -> Callable[[Any], Any] | None:
    """The ``kind`` renderer registered for ``type(obj)`` or its nearest base, or None."""
    table = _REGISTRY[kind]
    for cls in type(obj).__mro__:
        fn = table.get(cls)
        if fn is not None:
            return fn
    return None


def to_text(obj: Any) -> str:
    """The full plain-text report of ``obj`` (its one-line ``repr`` when it has no text renderer)."""
    fn = renderer(obj, "text")
    return repr(obj) if fn is None else str(fn(obj))


def to_html(obj: Any) -> str:
    """The HTML panel of ``obj``: its own renderer, or its text report in a plain panel."""
    fn = renderer(obj, "html")
    if fn is not None:
        return str(fn(obj))
    from nbdebug.render._html import code_block, panel

    return panel(type(obj).__name__, code_block(to_text(obj)))


def to_png(obj: Any) -> bytes | None:
    """A static picture of ``obj`` as PNG bytes, when its type has one (None otherwise)."""
    fn = renderer(obj, "png")
    return None if fn is None else fn(obj)


def to_figure(obj: Any, **options: Any) -> Any:
    """A ``matplotlib.figure.Figure`` of ``obj`` (``options`` go to its figure renderer, e.g. ``ax=``).

    In IPython the Figure is made displayable as a picture first, so ``result.plot()`` shows a chart in a notebook
    with nothing else typed (no ``%matplotlib inline``), and scripts still get the Figure object.
    """
    fn = renderer(obj, "figure")
    if fn is None:
        raise TypeError(f"{type(obj).__name__} has no figure; results with a .plot() method have one")
    fig = fn(obj, **options)
    fig._nbdebug_figure = True  # shown through figure_png, whatever shows the user's own figures
    _make_figures_displayable()
    return fig


def _make_figures_displayable() -> None:
    import sys

    ipython_mod = sys.modules.get("IPython")
    shell = ipython_mod.get_ipython() if ipython_mod is not None else None
    if shell is None:
        return
    from matplotlib.figure import Figure

    png = shell.display_formatter.formatters.get("image/png")
    if png is None:
        return
    try:
        current = png.lookup_by_type(Figure)
    except KeyError:
        current = None
    if getattr(current, "_nbdebug", False):
        return
    # nbdebug's figures as pictures that read on light and dark pages; the user's own figures exactly as before
    # (``%matplotlib inline``'s printer, or ours where nothing showed Figures)

    def show(fig: Any) -> Any:
        if current is None or getattr(fig, "_nbdebug_figure", False):
            return figure_png(fig)
        return current(fig)

    show._nbdebug = True  # type: ignore[attr-defined]
    png.for_type(Figure, show)


def _any_figure_png(fig: Any) -> bytes:
    """Any Figure as PNG: nbdebug's own through ``figure_png``, the user's drawn as they styled it (the printer that
    ``%load_ext nbdebug`` registers by name, ``ipython/_extension.py``)."""
    if getattr(fig, "_nbdebug_figure", False):
        return figure_png(fig)
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight", dpi=96)
    return buf.getvalue()


_any_figure_png._nbdebug = True  # type: ignore[attr-defined]  # already tells nbdebug's figures apart


#: drawn to read on a light and on a dark page: axes and ticks in a mid grey, text dark inside a white halo
_AXIS_GREY = "#8c959f"


def figure_png(fig: Any, *, dpi: int = 96) -> bytes:
    """A matplotlib Figure as PNG bytes that read on a light and on a dark page alike: every static picture of a
    Figure goes through here (a notebook's image sees nothing of the page's theme).

    The background is transparent (no white box on JupyterLab Dark); text keeps its colour inside a white halo
    (``patheffects.withStroke``), as map labels are drawn; spines and ticks are a mid grey.  A copy of the figure
    is restyled, so the caller's Figure is left as it was.
    """
    import io
    import pickle

    from matplotlib import patheffects
    from matplotlib.lines import Line2D
    from matplotlib.text import Text

    try:
        fig = pickle.loads(pickle.dumps(fig))  # noqa: S301 - our own object, pickled a line above
    except Exception:  # noqa: BLE001 - an unpicklable artist: restyle nothing, still transparent
        restyle = False
    else:
        restyle = True
    if restyle:
        halo = patheffects.withStroke(linewidth=3, foreground="white")
        for text in fig.findobj(Text):
            if text.get_text():
                text.set_path_effects([*text.get_path_effects(), halo])
        for line in fig.findobj(Line2D):  # a black line ("reserved") would vanish on a dark page
            if _dark(line.get_color()):
                line.set_color(_AXIS_GREY)
        for ax in fig.axes:
            for spine in ax.spines.values():
                spine.set_edgecolor(_AXIS_GREY)
            ax.tick_params(which="both", color=_AXIS_GREY)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight", dpi=dpi, transparent=True)
    return buf.getvalue()


def _dark(color: Any) -> bool:
    from matplotlib.colors import to_rgb

    try:
        r, g, b = to_rgb(color)
    except ValueError:
        return False
    return 0.2126 * r + 0.7152 * g + 0.0722 * b < 0.2


def _wanted(mime: str, include: Collection[str] | None, exclude: Collection[str] | None) -> bool:
    return (not include or mime in include) and (not exclude or mime not in exclude)


def mimebundle(obj: Any, include: Collection[str] | None = None, exclude: Collection[str] | None = None) -> dict[str, Any]:
    """``text/plain``, ``text/html`` and (when the type has a picture) ``image/png``, as asked."""
    bundle: dict[str, Any] = {}
    if _wanted("text/plain", include, exclude):
        bundle["text/plain"] = to_text(obj)
    if _wanted("text/html", include, exclude):
        bundle["text/html"] = to_html(obj)
    if _wanted("image/png", include, exclude) and renderer(obj, "png") is not None:
        png = to_png(obj)
        if png:
            bundle["image/png"] = base64.b64encode(png).decode("ascii")
    return bundle
