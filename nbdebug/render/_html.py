"""Shared HTML building blocks: one small stylesheet and escaped helpers, so every panel looks alike.

Everything a user or a file supplied goes through ``esc``; panels work with no network and no script.
The stylesheet is package data (``static/nbdebug.css``), shared by notebook panels and exported HTML.
"""

from __future__ import annotations

import functools
import html
from collections.abc import Iterable, Sequence

from nbdebug._units import fmt_bytes, fmt_seconds

__all__ = ["CSS", "STYLE", "static", "esc", "panel", "table", "kv_table", "code_block", "fmt_bytes", "fmt_seconds"]


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


def table(header: Sequence[str], rows: Iterable[Sequence[object]], *, numeric: Sequence[int] = ()) -> str:
    """An escaped HTML table; columns listed in ``numeric`` are right-aligned."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="num">{esc(c)}</td>' if i in numeric else f"<td>{esc(c)}</td>" for i, c in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def kv_table(items: Iterable[tuple[object, object]]) -> str:
    """A two-column key/value table."""
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in items)
    return f"<table><tbody>{rows}</tbody></table>"


def code_block(code: str) -> str:
    """Escaped ``<pre><code>``."""
    return f"<pre><code>{esc(code)}</code></pre>"
