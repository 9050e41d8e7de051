"""Shared HTML building blocks: one small stylesheet and escaped helpers, so every panel looks alike.

Everything a user or a file supplied goes through ``esc``; panels work with no network and no script.
The stylesheet is package data (``static/nbdebug.css``), shared by notebook panels and exported HTML.
"""

from __future__ import annotations

import base64
import functools
import html
import re
from collections.abc import Iterable, Sequence

from nbdebug._units import fmt_bytes, fmt_seconds

__all__ = ["CSS", "STYLE", "static", "esc", "panel", "table", "kv_table", "code_block", "picture", "svg_data_uri",
           "severity_badge", "SEVERITY_FILL", "INTERACTIVE_NOTE", "fmt_bytes", "fmt_seconds"]

#: shown where a renderer ran no script (untrusted notebook, GitHub, nbviewer); a live script removes it
INTERACTIVE_NOTE = "re-run the cell or trust the notebook for the interactive view"


@functools.cache
def static(name: str) -> str:
    """The text of the package file ``nbdebug/render/static/NAME`` (CSS, JS), read once."""
    from importlib.resources import files

    return files("nbdebug.render").joinpath(f"static/{name}").read_text(encoding="utf-8")


CSS = static("nbdebug.css")
STYLE = f"<style>{CSS}</style>"


def esc(value: object) -> str:
    """Escape any value for HTML text and attributes."""
    return html.escape(str(value), quote=True)


def panel(title: str, body_html: str, *, kind: str = "info", open_: bool = True, css_class: str = "") -> str:
    """A collapsible ``<details>`` panel; ``title`` is escaped, ``body_html`` is trusted markup."""
    cls = f"nbdebug {kind} {css_class}".strip()
    attr = " open" if open_ else ""
    return (
        f'{STYLE}<details class="{esc(cls)}"{attr}><summary>{esc(title)}</summary>'
        f'<div class="nbd-body">{body_html}</div></details>'
    )


# Where a notebook is untrusted (or on GitHub / nbviewer) the panel's stylesheet is gone but inline styles of a few
# properties survive the sanitiser (text-align, colour, background-colour, font-weight, white-space, overflow-x):
# what must hold there (left-aligned text, code on one line per line, the severity's colour) is said inline too.
_LEFT = ' style="text-align:left;vertical-align:top"'
_RIGHT = ' style="text-align:right;vertical-align:top"'
_PRE = ' style="white-space:pre;overflow-x:auto;text-align:left"'

#: a severity's badge fill, with white text: at least 4.5:1 against the white text, and distinct on a light and on
#: a dark page alike (one colour cannot be 4.5:1 as text on both white and JupyterLab Dark's #111)
SEVERITY_FILL = {"error": "#cf222e", "warning": "#7d4e00", "info": "#0969da", "ok": "#1a7f37"}


def severity_badge(severity: str) -> str:
    """``error`` / ``warning`` / ``info`` as a small filled badge whose colours are inline (they survive sanitising)."""
    fill = SEVERITY_FILL.get(severity, "#59636e")
    return (f'<span class="nbd-sev sev-badge-{esc(severity)}" style="background-color:{fill};color:white;'
            f'font-weight:600;white-space:nowrap;padding:0 6px;border-radius:8px">{esc(severity)}</span>')


def table(header: Sequence[str], rows: Iterable[Sequence[object]], *, numeric: Sequence[int] = ()) -> str:
    """An escaped HTML table; columns listed in ``numeric`` are right-aligned, the others left-aligned."""
    head = "".join(f"<th{_RIGHT if i in numeric else _LEFT}>{esc(h)}</th>" for i, h in enumerate(header))
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="num"{_RIGHT}>{esc(c)}</td>' if i in numeric else f"<td{_LEFT}>{esc(c)}</td>"
            for i, c in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def kv_table(items: Iterable[tuple[object, object]]) -> str:
    """A two-column key/value table."""
    rows = "".join(f"<tr><th{_LEFT}>{esc(k)}</th><td{_LEFT}>{esc(v)}</td></tr>" for k, v in items)
    return f"<table><tbody>{rows}</tbody></table>"


def code_block(code: str) -> str:
    """Escaped ``<pre><code>``: each line kept whole (scrolled sideways when long), never broken inside a word."""
    return f"<pre{_PRE}><code>{esc(code)}</code></pre>"


# -- pictures that survive any renderer ---------------------------------------------------------------------
# A notebook reopened from disk is untrusted: JupyterLab (and GitHub) sanitise its HTML, which drops <style>,
# <script> and inline <svg> (keeping the SVG's text, so a chart flattens into "loss0.85step 199..."), but keeps
# <img> with a data: URI and the ``hidden`` attribute.  So every chart is sent twice: the inline SVG, themed by
# the panel's CSS, inside a ``hidden`` element that only the panel's own stylesheet reveals, and the same SVG as a
# self-contained image (own background and colours) that the same stylesheet hides.  Trusted: the themed SVG;
# sanitised: the image; no stylesheet at all: the image.

# A picture does not know the page's theme, so it has no background of its own (no white box on a dark page): its
# text is dark with a white halo (paint-order: stroke first), readable on a light page as plain dark text and on a
# dark page inside its halo, the way map labels are drawn.
_IMAGE_STYLE = ("<style>text{fill:#1f2328;stroke:#ffffff;stroke-width:2.5px;stroke-linejoin:round;paint-order:stroke;"
                "font-family:system-ui,-apple-system,'Segoe UI',sans-serif}.nbd-muted{fill:#424a53}</style>")


_OWN_BACKGROUND = re.compile(r"var\(--(?:nbd-bg|nbd-mem-bg|jp-layout-color0)\b[^,()]*,\s*#[0-9a-fA-F]{3,8}\)")


def svg_data_uri(svg: str) -> str:
    """``svg`` as a stand-alone ``data:image/svg+xml;base64`` URI: a transparent background and text drawn to read
    on light and dark pages alike (an image sees none of the page's CSS; its ``var(--x, fallback)`` colours take
    their fallbacks)."""
    m = re.match(r"\s*<svg\b[^>]*>", svg)
    if m is None:
        raise ValueError("svg_data_uri expects markup starting with an <svg> element")
    opening = m.group(0)
    if "xmlns=" not in opening:  # an SVG image without its namespace is not drawn at all
        opening = opening.replace("<svg", '<svg xmlns="http://www.w3.org/2000/svg"', 1)
    w = re.search(r'\bwidth="([\d.]+)"', opening)
    h = re.search(r'\bheight="([\d.]+)"', opening)
    if "viewBox" not in opening and w and h:
        opening = opening.replace("<svg", f'<svg viewBox="0 0 {w.group(1)} {h.group(1)}"', 1)
    # a chart's own background (``var(--nbd-bg, #fff)``) would be a white box on a dark page: none in the image
    body = opening + _IMAGE_STYLE + _OWN_BACKGROUND.sub("none", svg[m.end():])
    return "data:image/svg+xml;base64," + base64.b64encode(body.encode("utf-8")).decode("ascii")


def picture(svg: str, alt: str, *, width: int | None = None, css_class: str = "") -> str:
    """An SVG chart that shows in every renderer: themed inline SVG where the panel's stylesheet runs, the same
    chart as an ``<img>`` where HTML is sanitised (untrusted notebooks, GitHub) or has no stylesheet."""
    if not svg:
        return ""
    if width is None:
        w = re.search(r'\bwidth="(\d+)"', svg[:400])
        width = int(w.group(1)) if w else None
    size = f' width="{width}"' if width else ""
    cls = f"nbd-pic {css_class}".strip()
    return (f'<span class="{esc(cls)}"><span class="nbd-pic-live" hidden="hidden">{svg}</span>'
            f'<img class="nbd-pic-img" alt="{esc(alt)}"{size} src="{svg_data_uri(svg)}"></span>')
