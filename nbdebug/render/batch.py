"""Render a ``BatchReport``: the text report, the HTML panel, and the image grid as a picture.

The panel follows the theme through the panels' own ``--nbd-*`` variables (JupyterLab's ``--jp-*`` underneath).
Token rows are marked with elements a sanitiser keeps (``<mark>`` for label tokens that train, ``<code>`` for
special tokens, ``<i>`` for padding), so a reopened, untrusted notebook still tells them apart; the image grid is
a PNG ``<img>`` (and the bundle's ``image/png``), which every renderer shows.
"""

from __future__ import annotations

import base64
from typing import Any

from nbdebug.core.data import BatchReport, TokenRow
from nbdebug.render._html import esc, kv_table, panel, table
from nbdebug.render._registry import renders
from nbdebug.render.findings import findings_html, findings_text, panel_kind

__all__ = ["batch_text", "batch_html", "batch_png", "plot_batch"]

_STYLE = (
    "<style>.nbd-batch .nbd-toks{font-family:var(--jp-code-font-family,monospace);font-size:12px;line-height:1.9;"
    "margin:2px 0 6px 0;word-break:break-all}"
    ".nbd-batch .nbd-toks span,.nbd-batch .nbd-toks mark,.nbd-batch .nbd-toks code,.nbd-batch .nbd-toks i{"
    "padding:0 2px;border-radius:3px;margin-right:2px}"
    ".nbd-batch .nbd-toks mark{background:var(--nbd-bg3);color:var(--nbd-fg);font-weight:600;"
    "box-shadow:inset 0 -2px 0 var(--nbd-warn)}"
    ".nbd-batch .nbd-toks code{background:transparent;color:var(--nbd-fg);font-weight:600;"
    "border:1px dashed var(--nbd-border)}"
    ".nbd-batch .nbd-toks i{color:var(--nbd-fg2);background:var(--nbd-bg2)}"
    ".nbd-batch .nbd-toks span{color:var(--nbd-fg2)}"
    ".nbd-batch img.nbd-grid{max-width:100%;border:1px solid var(--nbd-border);background:#fff}</style>"
)
_MAX_COLUMNS = 40


def _f(x: float) -> str:
    return f"{x:.4g}"


def _row_text(r: TokenRow) -> str:
    marks = {"trained": "[{}]", "masked": "{}", "pad": "<{}>", "special": "{}", "input": "{}", "gap": " {} "}
    flags = [f for f, on in (("BOS", r.bos), ("EOS", r.eos), ("CUT", r.cut)) if on]
    head = f"  row {r.index}: {r.length} tokens, {r.pad} pad, {r.trained} trained" + (f" [{' '.join(flags)}]"
                                                                                        if flags else "")
    body = " ".join(marks[s].format(t) for t, s in r.tokens)
    return head + "\n    " + (body if len(body) <= 600 else body[:597] + "...")


@renders(BatchReport, "text")
def batch_text(r: BatchReport) -> str:
    """The plain-text report: headline numbers, findings, decoded rows or per-channel/column statistics."""
    lines = [f"Batch inspector: {r.modality} batch from {r.source}, {r.rows} rows"]
    lines += [f"  {k}: {v}" for k, v in r.stats]
    lines.append(findings_text(r.findings, empty="no problems found"))
    if r.token_rows:
        lines.append("rows ([label tokens that train], <padding>):")
        lines += [_row_text(t) for t in r.token_rows]
    if r.channels:
        lines.append("per channel:" if r.modality == "image" else "per column:")
        for c in r.channels[:_MAX_COLUMNS]:
            lines.append(f"  {c.name:<24} mean {_f(c.mean):>10} std {_f(c.std):>10} range {_f(c.min)} .. {_f(c.max)}"
                         + (f"  NaN/Inf {c.nan}" if c.nan else ""))
        if len(r.channels) > _MAX_COLUMNS:
            lines.append(f"  ... {len(r.channels) - _MAX_COLUMNS} more")
    if r.label_counts:
        lines.append("labels: " + ", ".join(f"{k}: {v}" for k, v in r.label_counts[:30]))
    return "\n".join(lines)


def _tokens_html(r: TokenRow) -> str:
    parts = []
    for text, state in r.tokens:
        t = esc(text)
        if state == "trained":
            parts.append(f"<mark>{t}</mark>")
        elif state == "special":
            parts.append(f"<code>{t}</code>")
        elif state == "pad":
            parts.append(f"<i>{t}</i>")
        elif state == "gap":
            parts.append(f"<b> {t} </b>")
        else:
            parts.append(f"<span>{t}</span>")
    flags = " ".join(f for f, on in (("BOS", r.bos), ("EOS", r.eos), ("cut", r.cut)) if on)
    head = (f'<div class="nbd-muted">row {r.index}: {r.length} tokens, {r.pad} padding, {r.trained} label tokens '
            f"trained{' · ' + esc(flags) if flags else ''}</div>")
    return head + f'<div class="nbd-toks">{" ".join(parts)}</div>'


def _png_img(r: BatchReport) -> str:
    png = batch_png(r)
    if not png:
        return ""
    data = base64.b64encode(png).decode("ascii")
    return (f'<img class="nbd-grid" alt="the batch\'s images, de-normalized, with their labels" '
            f'src="data:image/png;base64,{data}">')


@renders(BatchReport, "html")
def batch_html(r: BatchReport) -> str:
    """The panel: findings with their fixes, headline numbers, then rows, pictures or column statistics."""
    problems = sum(f.severity != "info" for f in r.findings)
    title = f"Batch inspector: {r.modality}, {r.rows} rows, {problems} problem(s)"
    body = _STYLE + "<h4>findings</h4>" + findings_html(r.findings, empty="no problems found")
    body += "<h4>at a glance</h4>" + kv_table([("given", r.source), *r.stats])
    if r.token_rows:
        legend = ('<div class="nbd-toks"><mark>label token that trains</mark> <span>masked (-100) or no label'
                  "</span> <code>special token</code> <i>padding</i></div>")
        body += f"<h4>first {len(r.token_rows)} rows, decoded</h4>" + legend
        body += "".join(_tokens_html(t) for t in r.token_rows)
    if r.grid is not None:
        body += "<h4>the images, de-normalized</h4>" + _png_img(r)
    if r.channels:
        head = ("channel" if r.modality == "image" else "column", "mean", "std", "min", "max", "NaN/Inf")
        rows = [(c.name, _f(c.mean), _f(c.std), _f(c.min), _f(c.max), c.nan) for c in r.channels[:_MAX_COLUMNS]]
        body += f"<h4>per {head[0]}</h4>" + table(head, rows, numeric=(1, 2, 3, 4, 5))
    if r.label_counts:
        body += "<h4>labels</h4>" + table(("label", "examples"), r.label_counts[:30], numeric=(1,))
    return panel(title, body, kind=panel_kind(r.findings), css_class="nbd-batch")


@renders(BatchReport, "png")
def batch_png(r: BatchReport) -> bytes | None:
    """The image grid as PNG bytes (None for text and tables)."""
    if r.grid is None or not len(r.grid):
        return None
    import io

    fig = plot_batch(r)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=72, bbox_inches="tight", facecolor="white")
    return buf.getvalue()


@renders(BatchReport, "figure")
def plot_batch(r: BatchReport, ax: Any = None) -> Any:
    """The images, de-normalized, in a grid with their labels (a ``Figure``; ``ax``: the first image only)."""
    from nbdebug.errors import require

    require("matplotlib", "plot", "BatchReport.plot()")
    from matplotlib.figure import Figure

    if r.grid is None or not len(r.grid):
        raise TypeError(f"a {r.modality} batch has no images to plot")
    k = len(r.grid)
    cols = min(8, k)
    rows = -(-k // cols)
    if ax is not None:
        fig, axes = ax.figure, [ax]
    else:
        fig = Figure(figsize=(1.3 * cols, 1.45 * rows), layout="constrained")
        axes = list(fig.subplots(rows, cols, squeeze=False).ravel())
    for i, a in enumerate(axes):
        a.set_axis_off()
        if i >= k:
            continue
        img = r.grid[i]
        if img.shape[-1] == 1:
            a.imshow(img[..., 0], cmap="gray", vmin=0, vmax=255, interpolation="nearest")
        else:
            a.imshow(img, interpolation="nearest")
        if i < len(r.grid_labels):
            a.set_title(r.grid_labels[i], fontsize=9)
    return fig
