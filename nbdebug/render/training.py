"""Render training-dynamics results (gradient histories, the live GradMonitor panel, doctor reports).

Text and HTML (inline SVG: no script, no network, colours from the theme's CSS variables).  Findings go through
the one findings renderer (``render/findings.py``).  The matplotlib pictures behind the results' ``.plot()``
are registered as their ``"figure"`` renderers (built on ``Figure``, never pyplot).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from nbdebug.core.doctor._report import DoctorReport
from nbdebug.core.doctor._repro import ReproReport
from nbdebug.core.training._gradhistory import GradHistory
from nbdebug.core.training.nan import NanReport, ReplayResult
from nbdebug.render._html import esc, kv_table, panel, picture, table
from nbdebug.render._registry import renders
from nbdebug.render.findings import findings_html, findings_text, panel_kind

__all__ = [
    "svg_line",
    "svg_bars",
    "grad_history_text",
    "grad_history_html",
    "plot_grad_history",
    "live_html",
    "doctor_text",
    "doctor_html",
    "plot_doctor",
    "repro_text",
    "repro_html",
]

def _fmt(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "nan"
    return f"{x:.4g}"


# -- inline SVG (no script, no network: panels render anywhere) ----------------------------------------------
def svg_line(
    xs: Sequence[float],
    series: Sequence[tuple[str, Sequence[float], str]],
    *,
    width: int = 520,
    height: int = 140,
    log: bool = False,
    title: str = "",
    hline: tuple[float, str] | None = None,
    max_points: int = 600,
) -> str:
    """A small line chart: ``series`` is ``(label, ys, color)``; non-finite points are drawn as red ticks."""
    pad_l, pad_r, pad_t, pad_b = 60, 8, 16, 18
    if len(xs) > max_points:  # keep the SVG small: every k-th point, plus every non-finite one
        k = -(-len(xs) // max_points)
        keep = [i for i in range(len(xs)) if i % k == 0 or i == len(xs) - 1
                or any(ys[i] is not None and not math.isfinite(ys[i]) for _, ys, _ in series)]
        xs = [xs[i] for i in keep]
        series = [(label, [ys[i] for i in keep], color) for label, ys, color in series]
    pts_all = [y for _, ys, _ in series for y in ys if y is not None and math.isfinite(y) and (not log or y > 0)]
    if hline is not None and (not log or hline[0] > 0):
        pts_all.append(hline[0])
    if not xs or not pts_all:
        return f'<div class="nbd-muted">{esc(title)}: nothing recorded yet</div>'

    def tr(y: float) -> float:
        return math.log10(y) if log else y

    lo, hi = min(tr(y) for y in pts_all), max(tr(y) for y in pts_all)
    if hi - lo < 1e-12:
        lo, hi = lo - 1, hi + 1
    x0, x1 = min(xs), max(xs)
    if x1 == x0:
        x1 = x0 + 1
    W, H = width - pad_l - pad_r, height - pad_t - pad_b

    def px(x: float) -> float:
        return pad_l + (x - x0) / (x1 - x0) * W

    def py(y: float) -> float:
        return pad_t + (1 - (tr(y) - lo) / (hi - lo)) * H

    parts = [
        f'<svg class="nbd-chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}">',
        f'<rect x="{pad_l}" y="{pad_t}" width="{W}" height="{H}" style="fill:var(--nbd-bg,#fff);stroke:var(--nbd-border,#d0d7de)"/>',
        f'<text x="{pad_l}" y="11" font-size="11">{esc(title)}</text>',
    ]
    for val in (lo, hi):
        # the values themselves (0.43, 1.8), never rounded to a power of ten that reads the same at both ends
        label = f"{10 ** val:.3g}" if log else f"{val:.3g}"
        parts.append(f'<text x="{pad_l - 4}" y="{py(10**val if log else val) + 4:.1f}" font-size="10" '
                     f'text-anchor="end" class="nbd-muted">{esc(label)}</text>')
    parts.append(f'<text x="{pad_l}" y="{height - 4}" font-size="10" class="nbd-muted">{_fmt(x0)}</text>')
    parts.append(f'<text x="{width - pad_r}" y="{height - 4}" font-size="10" text-anchor="end" '
                 f'class="nbd-muted">step {_fmt(x1)}</text>')
    # the legend sits on the title line, above the plot area, so no label is drawn over a curve
    legend_x = pad_l + 6 * len(title) + 14
    if hline is not None and (not log or hline[0] > 0):
        y = py(hline[0])
        parts.append(f'<line x1="{pad_l}" x2="{pad_l + W}" y1="{y:.1f}" y2="{y:.1f}" stroke="#bf8700" '
                     f'stroke-dasharray="4 3"/>')
        parts.append(f'<text x="{legend_x}" y="11" font-size="10" fill="#9a6700">- - {esc(hline[1])}</text>')
        legend_x += 14 + 6 * len(hline[1])
    for label, ys, color in series:
        seg: list[str] = []
        for x, y in zip(xs, ys):
            if y is None or not math.isfinite(y) or (log and y <= 0):
                if y is not None and not math.isfinite(y):
                    parts.append(f'<line x1="{px(x):.1f}" x2="{px(x):.1f}" y1="{pad_t}" y2="{pad_t + 6}" '
                                 'stroke="#cf222e" stroke-width="2"/>')
                continue
            seg.append(f"{px(x):.1f},{py(y):.1f}")
        if len(seg) == 1:
            seg.append(seg[0])
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{" ".join(seg)}"/>')
        if len(series) > 1 or label != title:
            parts.append(f'<text x="{legend_x}" y="11" font-size="10" fill="{color}">&#8212; {esc(label)}</text>')
            legend_x += 20 + 6 * len(label)
    parts.append("</svg>")
    return picture("".join(parts), title or "chart")


def svg_bars(labels: Sequence[str], values: Sequence[float], *, title: str = "", width: int = 520) -> str:
    """Horizontal bars on a log10 scale (gradient flow per layer); zero or non-finite values are marked."""
    row_h, pad_l, pad_t = 14, 170, 16
    shown = list(zip(labels, values))[:40]
    if not shown:
        return ""
    pos = [v for _, v in shown if v > 0 and math.isfinite(v)]
    lo = math.floor(math.log10(min(pos))) if pos else -8
    hi = math.ceil(math.log10(max(pos))) if pos else 0
    if hi <= lo:
        hi = lo + 1
    W = width - pad_l - 60
    height = pad_t + row_h * len(shown) + 6
    parts = [
        f'<svg class="nbd-chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}">',
        f'<text x="0" y="11" font-size="11">{esc(title)} (log scale, 1e{lo} .. 1e{hi})</text>',
    ]
    for i, (label, v) in enumerate(shown):
        y = pad_t + i * row_h
        short = label if len(label) <= 28 else "..." + label[-25:]
        parts.append(f'<text x="{pad_l - 4}" y="{y + 10}" font-size="10" text-anchor="end">'
                     f"{esc(short)}</text>")
        if v > 0 and math.isfinite(v):
            w = max(1.0, (math.log10(v) - lo) / (hi - lo) * W)
            parts.append(f'<rect x="{pad_l}" y="{y + 2}" width="{w:.1f}" height="{row_h - 4}" fill="#0969da"/>')
            parts.append(f'<text x="{pad_l + w + 3:.1f}" y="{y + 10}" font-size="10" class="nbd-muted">{_fmt(v)}</text>')
        else:
            mark = "no gradient" if v == 0 else "NaN/Inf"
            parts.append(f'<text x="{pad_l}" y="{y + 10}" font-size="10" fill="#cf222e">{mark}</text>')
    parts.append("</svg>")
    return picture("".join(parts), f"{title} (log scale)")


# -- gradient history --------------------------------------------------------------------------------------
def _chance(h: GradHistory) -> tuple[float, str] | None:
    if h.num_classes and h.num_classes > 1:
        return (math.log(h.num_classes), f"chance -log(1/{h.num_classes})")
    return None


@renders(GradHistory, "text")
def grad_history_text(h: GradHistory) -> str:
    """Plain-text summary of a GradHistory."""
    lines = [f"GradMonitor: {len(h.steps)} recorded steps of {h.steps_seen} seen, {len(h.names)} parameters, "
             f"{len(h.modules)} modules"]
    if len(h.steps):
        g = h.global_norms
        lines.append(f"global grad norm: first {_fmt(g[0])}, last {_fmt(g[-1])}, max {_fmt(max(g))}")
        last = h.module_norms[-1]
        order = sorted(range(len(h.modules)), key=lambda i: -last[i] if math.isfinite(last[i]) else -math.inf)
        lines.append("last step, per module:")
        lines += [f"  {h.modules[i]:<40} {_fmt(last[i])}" for i in order[:12]]
    if h.losses:
        lines.append(f"loss: first {_fmt(h.losses[0])}, last {_fmt(h.losses[-1])}")
    lines.append("findings:")
    lines.append("  " + findings_text(h.findings).replace("\n", "\n  "))
    return "\n".join(lines)


def _history_body(h: GradHistory, *, compact: bool = False) -> str:
    xs = list(h.steps)
    body = svg_line(xs, [("global grad norm", [float(v) for v in h.global_norms], "#0969da")], log=True,
                    title="global gradient norm")
    if h.losses:
        body += svg_line(list(h.loss_steps), [("loss", list(h.losses), "#8250df")], title="loss", hline=_chance(h))
    if len(h.steps):
        last = [float(v) for v in h.module_norms[-1]]
        body += svg_bars(h.module_labels(), last, title=f"gradient norm per module at step {h.steps[-1]}")
    if not compact:
        body += "<h4>findings</h4>" + findings_html(h.findings)
        if h.spikes:
            top = sorted(h.spikes, key=lambda s: -s.score)[:10]
            body += "<h4>largest spikes</h4>" + table(
                ("step", "parameter", "norm", "score"), [(s.step, s.name, _fmt(s.norm), f"{s.score:.0f}x") for s in top],
                numeric=(0, 2, 3),
            )
    return body


@renders(GradHistory, "html")
def grad_history_html(h: GradHistory) -> str:
    """HTML panel: global norm, loss with chance level, gradient flow per module, findings."""
    kind = panel_kind(h.findings)
    title = f"GradMonitor: {len(h.steps)} steps, {len(h.names)} parameters, {len(h.findings)} findings"
    return panel(title, _history_body(h), kind=kind, css_class="nbd-gradmonitor")


def live_html(h: GradHistory, *, running: bool = True) -> str:
    """The live panel's content: compact and cheap while training.

    Once done, it is the history's own panel: the one picture the notebook keeps, not a "(live)" one beside it.
    """
    if not running:
        return panel(f"GradMonitor done: {h.steps_seen} optimizer steps, {len(h.steps)} recorded, "
                     f"{len(h.findings)} findings", _history_body(h), kind=panel_kind(h.findings),
                     css_class="nbd-gradmonitor nbd-gradmonitor-live")
    state = "training..."
    headline = kv_table([
        ("state", state),
        ("optimizer steps seen", h.steps_seen),
        ("steps recorded", len(h.steps)),
        ("last global norm", _fmt(float(h.global_norms[-1])) if len(h.steps) else "-"),
        ("last loss", _fmt(h.losses[-1]) if h.losses else "-"),
    ])
    flags = "".join(f'<div class="sev-{esc(f.severity.value)}">{esc(f.kind)}: {esc(f.message)}</div>'
                    for f in h.findings[:6])
    return panel("GradMonitor: training...", headline + flags + _history_body(h, compact=True),
                 kind="info", css_class="nbd-gradmonitor-live")


# -- doctor ------------------------------------------------------------------------------------------------
@renders(DoctorReport, "text")
def doctor_text(r: DoctorReport) -> str:
    """Plain-text doctor report."""
    head = (f"Training doctor: {r.task} model, {r.steps} steps on one batch; "
            f"{sum(f.severity == 'error' for f in r.findings)} error(s), "
            f"{sum(f.severity == 'warning' for f in r.findings)} warning(s)")
    lines = [head]
    if r.losses:
        lines.append(f"overfit one batch: loss {_fmt(r.losses[0])} -> {_fmt(r.losses[-1])}"
                     + (f"; zero-input baseline -> {_fmt(r.baseline_losses[-1])}" if r.baseline_losses else ""))
    lines.append(findings_text(r.findings))
    if r.experiments:
        lines.append("experiments (each fix tried on a copy, best first):")
        lines += [f"  {'restores learning' if e.restores else 'no better':<17} {e.said()}" for e in r.experiments]
    for name, value in r.checks:
        lines.append(f"  checked: {name}: {value}")
    return "\n".join(lines)


@renders(DoctorReport, "html")
def doctor_html(r: DoctorReport) -> str:
    """HTML panel: findings, the overfit curve (with the zero-input baseline), gradient flow per layer."""
    n_err = sum(f.severity == "error" for f in r.findings)
    n_warn = sum(f.severity == "warning" for f in r.findings)
    kind = panel_kind(r.findings)
    title = f"Training doctor: {n_err} error(s), {n_warn} warning(s) ({r.task}, {r.steps} steps on one batch)"
    body = "<h4>findings</h4>" + findings_html(r.findings)
    if r.experiments:
        body += "<h4>experiments: each suspected cause, its fix tried on a copy</h4>" + table(
            ("suspected cause", "tried", "steps", "your setup", "with the fix", "verdict"),
            [(e.cause.replace("_", " "), e.change, e.steps, f"{_fmt(e.start)} -> {_fmt(e.before)}",
              f"{_fmt(e.start)} -> {_fmt(e.after)}",
              ("fits the batch" if e.fitted else "learns") if e.restores else "no better") for e in r.experiments],
            numeric=(2,))
    if r.losses:
        series = [("real input", list(r.losses), "#0969da")]
        if r.baseline_losses:
            series.append(("zero input", list(r.baseline_losses), "#bf8700"))
        hline = (r.chance_loss, "chance") if r.chance_loss else None
        body += "<h4>overfit one batch</h4>" + svg_line(list(range(len(r.losses))), series, title="loss", hline=hline)
    if r.grad_flow:
        body += "<h4>gradient flow per layer (first step)</h4>" + svg_bars(
            [n for n, _ in r.grad_flow], [v for _, v in r.grad_flow], title="RMS gradient per layer")
    body += "<h4>checks</h4>" + kv_table(r.checks)
    return panel(title, body, kind=kind, css_class="nbd-doctor")


@renders(ReproReport, "text")
def repro_text(r: ReproReport) -> str:
    """Plain-text reproducibility check."""
    if r.reproducible:
        return f"reproducible: {r.steps_compared} steps identical across {r.runs} runs (seed {r.seed})"
    return (f"NOT reproducible (seed {r.seed}): runs first differ at step {r.first_divergent_step}: "
            f"{r.value_a!r} vs {r.value_b!r}")


@renders(ReproReport, "html")
def repro_html(r: ReproReport) -> str:
    """HTML panel of a reproducibility check."""
    kind = "ok" if r.reproducible else "warning"
    return panel(repro_text(r), kv_table([("seed", r.seed), ("steps compared", r.steps_compared),
                                          ("first divergent step", r.first_divergent_step)]), kind=kind)

@renders(GradHistory, "figure")
def plot_grad_history(h: GradHistory, ax: Any = None) -> Any:
    """Global norm and loss over steps (top) and a per-module heatmap of log10 norms (bottom), as a ``Figure``."""
    import numpy as np

    from nbdebug.errors import require

    require("matplotlib", "plot", "GradHistory.plot()")
    from matplotlib.figure import Figure

    if ax is not None:
        fig = ax.figure
        axes = [ax]
    else:
        fig = Figure(figsize=(9, 6), layout="constrained")
        axes = list(fig.subplots(2, 1, height_ratios=[1, 1.4], sharex=True))
    top = axes[0]
    steps = np.asarray(h.steps)
    g = np.asarray(h.global_norms, dtype=float)
    top.semilogy(steps, np.where(g > 0, g, np.nan), color="#0969da", label="global grad norm")
    bad = ~np.isfinite(g)
    if bad.any():
        for s in steps[bad]:
            top.axvline(s, color="#cf222e", alpha=0.4)
    for sp in h.spikes:
        if sp.name == "(global)":
            top.plot(sp.step, sp.norm, "v", color="#cf222e")
    if h.clip_norm is not None:
        top.axhline(h.clip_norm, color="#57606a", ls=":", lw=1, label=f"clipped at {h.clip_norm:g}")
    top.set_ylabel("grad norm")
    handles, labels = top.get_legend_handles_labels()
    if h.losses:
        lax = top.twinx()
        lax.plot(h.loss_steps, h.losses, color="#8250df", alpha=0.8, label="loss")
        if h.num_classes and h.num_classes > 1:
            lax.axhline(math.log(h.num_classes), color="#bf8700", ls="--", lw=1, label="chance -log(1/C)")
        lax.set_ylabel("loss")
        more = lax.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    top.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.08 if h.losses else 1.0, 1.0), fontsize=8,
               frameon=False)
    top.set_title("gradient norms (global) and loss")
    if len(axes) > 1 and len(steps):
        hm = axes[1]
        m = np.asarray(h.module_norms, dtype=float).T  # (modules, steps)
        with np.errstate(divide="ignore", invalid="ignore"):
            img = np.log10(np.where(m > 0, m, np.nan))
        extent = (steps[0] - 0.5, steps[-1] + 0.5, len(h.modules) - 0.5, -0.5)
        im = hm.imshow(img, aspect="auto", interpolation="nearest", cmap="viridis", extent=extent)
        hm.set_yticks(range(len(h.modules)))
        hm.set_yticklabels(h.module_labels(), fontsize=7)
        hm.set_title("gradient norm per module (rows: the module and its parameters)", fontsize=9)
        hm.set_xlabel("step")
        fig.colorbar(im, ax=hm, label="log10 grad norm")
    return fig

@renders(DoctorReport, "figure")
def plot_doctor(r: DoctorReport, ax: Any = None) -> Any:
    """Overfit curve (and zero-input baseline) and gradient flow per layer, as a ``Figure``."""
    from nbdebug.errors import require

    require("matplotlib", "plot", "DoctorReport.plot()")
    from matplotlib.figure import Figure

    if ax is not None:
        fig, axes = ax.figure, [ax]
    else:
        fig = Figure(figsize=(10, 4), layout="constrained")
        axes = list(fig.subplots(1, 2))
    a = axes[0]
    a.plot(r.losses, label="real input")
    if r.baseline_losses:
        a.plot(r.baseline_losses, label="zero input")
    if r.chance_loss:
        a.axhline(r.chance_loss, ls="--", color="#bf8700", lw=1, label="chance")
    a.set_xlabel("step")
    a.set_ylabel("loss")
    a.set_title("overfit one batch")
    a.legend()
    if len(axes) > 1 and r.grad_flow:
        b = axes[1]
        names = [n for n, _ in r.grad_flow]
        vals = [max(v, 1e-30) for _, v in r.grad_flow]
        b.barh(range(len(names)), vals, log=True)
        b.set_yticks(range(len(names)))
        b.set_yticklabels(names, fontsize=7)
        b.invert_yaxis()
        b.set_title("gradient flow (RMS gradient per layer)")
    return fig


@renders(ReplayResult, "text")
def replay_text(r: ReplayResult) -> str:
    """What the replay of the failing step found, in one line."""
    return r.describe()


@renders(ReplayResult, "html")
def replay_html(r: ReplayResult) -> str:
    """The replay's finding as a small panel."""
    rows = [(k, v) for k, v in (("op", r.op), ("source", r.source), ("detect_anomaly", r.anomaly)) if v]
    body = kv_table(rows) if rows else f'<div class="nbd-muted">{esc(r.describe())}</div>'
    return panel("NaN/Inf replay", body, kind="error" if r.op else "info")


# -- NaN/Inf sentinel ----------------------------------------------------------------------------------------
@renders(NanReport, "text")
def nan_report_text(r: NanReport) -> str:
    """The sentinel's one line, then its finding (the module, step, phase and what to do) when it found one."""
    head = f"NaN/Inf sentinel: {r._summary_line()}"
    return head if r.error is None else f"{head}\n{findings_text(r.findings)}"


@renders(NanReport, "html")
def nan_report_html(r: NanReport) -> str:
    """A small panel: what was checked, and the finding when there is one."""
    body = kv_table([("steps checked", r.steps), ("modules watched", r.modules),
                     ("gradients checked", "yes" if r.backward else "no")])
    if r.error is not None:
        body = findings_html(r.findings) + body
    return panel(f"NaN/Inf sentinel: {r._summary_line()}", body, kind=panel_kind(r.findings))

