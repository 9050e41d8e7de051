"""Shared HTML building blocks: one small stylesheet and escaped helpers, so every panel looks alike.

Everything a user or a file supplied goes through ``esc``; panels work with no network and no script.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence

__all__ = ["STYLE", "esc", "panel", "table", "kv_table", "code_block", "fmt_bytes", "fmt_seconds"]

STYLE = """<style>
.nbdebug{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;font-size:13px;line-height:1.4;
 border:1px solid #d0d7de;border-left:4px solid #0969da;border-radius:6px;margin:6px 0;padding:0;
 background:#fff;color:#1f2328;max-width:1100px}
.nbdebug.error{border-left-color:#cf222e}.nbdebug.warning{border-left-color:#bf8700}
.nbdebug.ok{border-left-color:#1a7f37}
.nbdebug>summary{cursor:pointer;padding:6px 10px;font-weight:600;list-style-position:inside}
.nbdebug .nbd-body{padding:2px 12px 10px 12px}
.nbdebug h4{margin:8px 0 4px 0;font-size:13px}
.nbdebug table{border-collapse:collapse;margin:4px 0}
.nbdebug table td,.nbdebug table th{border-bottom:1px solid #eaeef2;padding:2px 8px;text-align:left!important;
 vertical-align:top}
.nbdebug th{font-weight:600;background:#f6f8fa}
.nbdebug table td.num{text-align:right!important;font-variant-numeric:tabular-nums}
.nbdebug pre{background:#f6f8fa;padding:6px 8px;border-radius:4px;margin:2px 0 6px 0;overflow-x:auto;
 white-space:pre-wrap}
.nbdebug code{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px}
.nbdebug .nbd-first{background:#ddf4ff;border-radius:4px;padding:4px 8px;margin:6px 0}
.nbdebug .nbd-muted{color:#656d76}
.nbdebug .sev-error{color:#cf222e;font-weight:600}.nbdebug .sev-warning{color:#9a6700;font-weight:600}
.nbdebug .sev-info{color:#0969da}
</style>"""


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


def fmt_bytes(n: float | int | None) -> str:
    """Human-readable bytes with 1024-based units (``1.50 GiB``)."""
    if n is None:
        return "?"
    sign = "-" if n < 0 else ""
    value = float(abs(n))
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{sign}{value:.0f} {unit}" if unit == "B" else f"{sign}{value:.2f} {unit}"
        value /= 1024
    return f"{sign}{value:.2f} TiB"  # pragma: no cover


def fmt_seconds(s: float | None) -> str:
    """Human-readable duration (``12.3 ms``, ``1.50 s``)."""
    if s is None:
        return "?"
    if abs(s) < 1e-3:
        return f"{s * 1e6:.1f} us"
    if abs(s) < 1:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"
