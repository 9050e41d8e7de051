"""``MemoryPrediction`` -> text, HTML (a stacked bar by kind and the table of fixes), a Figure and a PNG."""

from __future__ import annotations

from typing import Any

from nbdebug._units import fmt_bytes
from nbdebug.core.memory._predict_cell import PredictionCheck
from nbdebug.core.memory._predict_result import MemoryPrediction
from nbdebug.render._html import esc, kv_table, panel, picture, table
from nbdebug.render._registry import renders

__all__ = ["prediction_text", "prediction_html", "plot_prediction", "prediction_png", "svg_kinds", "KIND_COLORS",
           "check_text", "check_html"]

#: one colour per kind, readable on light and dark backgrounds
KIND_COLORS = {"parameters": "#4e79a7", "gradients": "#f28e2b", "optimizer state": "#e15759",
               "activations": "#76b7b2", "temporaries": "#bab0ac", "batch": "#59a14f", "CUDA context": "#9c755f",
               "allocator cache": "#d4a6c8"}
_FG = "fill:var(--jp-content-font-color1,#1f2328)"
_FG2 = "fill:var(--jp-content-font-color2,#59636e)"


def _parts(p: MemoryPrediction) -> list[tuple[str, int]]:
    """The bar's parts: the kinds at the peak, then (CUDA) the cached-but-free segments and the context."""
    parts = [(k.kind, k.bytes) for k in p.by_kind]
    if p.reserved_bytes > p.peak_bytes:
        parts.append(("allocator cache", p.reserved_bytes - p.peak_bytes))
    if p.context_bytes:
        parts.append(("CUDA context", p.context_bytes))
    return parts


def _headline(p: MemoryPrediction) -> str:
    where = ", ".join(x for x in (p.peak_phase, p.peak_module and f"in {p.peak_module}", p.peak_op and
                                  f"at {p.peak_op}") if x)
    line = f"Predicted peak of one training step on {p.device}: {fmt_bytes(p.peak_bytes)}"
    if p.device == "cuda":
        line += (f" allocated, {fmt_bytes(p.total_bytes)} on the device (reserved {fmt_bytes(p.reserved_bytes)} + "
                 f"context {fmt_bytes(p.context_bytes)})")
    if p.capacity_bytes is not None:
        line += f"; {'fits' if p.fits else 'does not fit'} {fmt_bytes(p.capacity_bytes)}"
    return line + (f" [{where}]" if where else "") + (" (partial: see the notes)" if p.partial else "")


def _fix_rows(p: MemoryPrediction) -> list[tuple[str, str, str, str]]:
    rows = []
    for f in p.fixes:
        fits = "" if f.fits is None else ("fits" if f.fits else "does not fit")
        rows.append((f.title, fmt_bytes(f.peak_bytes), fmt_bytes(f.saving_bytes), fits))
    return rows


@renders(MemoryPrediction, "text")
def prediction_text(p: MemoryPrediction) -> str:
    """The full plain-text report."""
    lines = [_headline(p), "", "at the peak, by kind:"]
    lines += [f"  {kind:<16} {fmt_bytes(b):>12}" for kind, b in _parts(p)]
    if p.activations_by_module:
        lines += ["", "activations kept for backward, by module:"]
        lines += [f"  {m.module[:48]:<48} {fmt_bytes(m.bytes):>12}" for m in p.activations_by_module[:8]]
    fixes = _fix_rows(p) if p._inputs is not None else []
    if fixes:
        lines += ["", "fixes, predicted (best first):"]
        lines += [f"  {t:<58} {peak:>12}  saves {save:>12}  {fits}".rstrip() for t, peak, save, fits in fixes]
    lines += ["", "settings: " + ", ".join(f"{k}={v}" for k, v in p.settings.items())]
    lines += [f"note: {n}" for n in p.notes]
    return "\n".join(lines)


def svg_kinds(parts: list[tuple[str, int]], *, capacity: int | None = None, width: int = 640) -> str:
    """A horizontal stacked bar of ``parts`` (kind, bytes) with a legend, and the capacity as a line."""
    total = sum(b for _, b in parts) or 1
    scale_to = max(total, capacity or 0)
    x0, bar_w, h = 10, width - 20, 22
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{64 + 16 * ((len(parts) + 2) // 3)}" '
           'role="img">']
    x = float(x0)
    for kind, b in parts:
        w = bar_w * b / scale_to
        color = KIND_COLORS.get(kind, "#888888")
        out.append(f'<rect x="{x:.1f}" y="8" width="{max(w, 0.5):.1f}" height="{h}" style="fill:{color}">'
                   f"<title>{esc(kind)}: {esc(fmt_bytes(b))}</title></rect>")
        x += w
    if capacity:
        cx = x0 + bar_w * capacity / scale_to
        out.append(f'<line x1="{cx:.1f}" y1="4" x2="{cx:.1f}" y2="{8 + h + 4}" stroke="#cf222e" stroke-width="2"/>'
                   f'<text x="{min(cx, width - 90):.1f}" y="{8 + h + 16}" font-size="11" style="{_FG2}">'
                   f"capacity {esc(fmt_bytes(capacity))}</text>")
    for i, (kind, b) in enumerate(parts):
        lx, ly = x0 + (i % 3) * (bar_w // 3), 8 + h + 32 + 16 * (i // 3)
        out.append(f'<rect x="{lx}" y="{ly - 9}" width="10" height="10" style="fill:{KIND_COLORS.get(kind, "#888")}"/>'
                   f'<text x="{lx + 14}" y="{ly}" font-size="11" style="{_FG}">{esc(kind)} {esc(fmt_bytes(b))}</text>')
    out.append("</svg>")
    return "".join(out)


@renders(MemoryPrediction, "html")
def prediction_html(p: MemoryPrediction) -> str:
    """The panel: the headline, the stacked bar by kind, the fixes with their predicted peaks, the notes."""
    parts = _parts(p)
    body = f"<p>{esc(_headline(p))}</p>"
    body += picture(svg_kinds(parts, capacity=p.capacity_bytes), "predicted peak by kind")
    body += "<h4>at the peak, by kind</h4>" + table(("kind", "bytes"), [(k, fmt_bytes(b)) for k, b in parts],
                                                   numeric=(1,))
    if p.activations_by_module:
        rows = [(m.module, fmt_bytes(m.bytes)) for m in p.activations_by_module[:8]]
        body += "<h4>activations kept for backward, by module</h4>" + table(("module", "bytes"), rows, numeric=(1,))
    fixes = _fix_rows(p) if p._inputs is not None else []
    if fixes:
        body += "<h4>fixes, predicted (best first)</h4>" + table(("fix", "predicted peak", "saving", ""), fixes,
                                                                 numeric=(1, 2))
    body += "<h4>settings</h4>" + kv_table(p.settings.items())
    if p.notes:
        body += "<h4>notes</h4><ul>" + "".join(f"<li>{esc(n)}</li>" for n in p.notes) + "</ul>"
    kind = "info" if p.fits is None else ("ok" if p.fits else "error")
    return panel(f"Will it fit? {fmt_bytes(p.total_bytes)} predicted", body, kind=kind, css_class="nbd-predict")


@renders(MemoryPrediction, "figure")
def plot_prediction(p: MemoryPrediction, ax: Any = None) -> Any:
    """A stacked bar of the peak by kind, with the capacity as a line (a ``Figure``)."""
    from nbdebug.errors import require

    require("matplotlib", "plot", "MemoryPrediction.plot()")
    from matplotlib.figure import Figure

    if ax is None:
        fig = Figure(figsize=(7, 1.9), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    left = 0.0
    gib = float(1 << 30)
    for kind, b in _parts(p):
        ax.barh([0], [b / gib], left=left, color=KIND_COLORS.get(kind, "#888888"), label=f"{kind} {fmt_bytes(b)}")
        left += b / gib
    if p.capacity_bytes:
        ax.axvline(p.capacity_bytes / gib, color="#cf222e", lw=2, label=f"capacity {fmt_bytes(p.capacity_bytes)}")
    ax.set_yticks([])
    ax.set_xlabel("GiB")
    ax.set_title(_headline(p)[:110], fontsize=9)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=3, fontsize=8, frameon=False)
    return fig


@renders(MemoryPrediction, "png")
def prediction_png(p: MemoryPrediction) -> bytes | None:
    """The stacked bar as PNG bytes (what a saved or untrusted notebook shows; None without matplotlib)."""
    import importlib.util
    import io

    if importlib.util.find_spec("matplotlib") is None:
        return None
    fig = plot_prediction(p)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=72, bbox_inches="tight", facecolor="white")
    return buf.getvalue()


def _check_rows(c: PredictionCheck) -> list[tuple[str, str, str]]:
    rows = [(k.kind, fmt_bytes(k.predicted_bytes), "" if k.measured_bytes is None else fmt_bytes(k.measured_bytes))
            for k in c.kinds]
    return rows + [("the cell's peak", fmt_bytes(c.predicted_bytes), fmt_bytes(c.measured_bytes))]


def _check_headline(c: PredictionCheck) -> str:
    return (f"Predicted {fmt_bytes(c.predicted_bytes)}, measured {fmt_bytes(c.measured_bytes)} "
            f"({c.error_pct:+.1f}%): the cell's peak above what was alive before it")


@renders(PredictionCheck, "text")
def check_text(c: PredictionCheck) -> str:
    """Predicted against measured, by kind."""
    lines = [_check_headline(c), "", f"  {'kind':<18} {'predicted':>12} {'measured':>12}"]
    lines += [f"  {k:<18} {p:>12} {m:>12}" for k, p, m in _check_rows(c)]
    if all(k.measured_bytes is None for k in c.kinds):
        lines.append("(measured by kind only on CPU, where the profiler labels memory)")
    lines += [f"note: {n}" for n in c.prediction.notes]
    return "\n".join(lines)


@renders(PredictionCheck, "html")
def check_html(c: PredictionCheck) -> str:
    """The panel: predicted against measured, by kind."""
    body = f"<p>{esc(_check_headline(c))}</p>"
    body += table(("kind", "predicted", "measured"), _check_rows(c), numeric=(1, 2))
    if c.prediction.notes:
        body += "<h4>notes</h4><ul>" + "".join(f"<li>{esc(n)}</li>" for n in c.prediction.notes) + "</ul>"
    return panel("memtrace --predict: predicted against measured", body, kind="info", css_class="nbd-predict")
