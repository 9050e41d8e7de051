"""matplotlib figures and a tiny inline SVG for the memory results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nbdebug._units import fmt_bytes
from nbdebug.core.memory._snapshot import MemorySnapshot
from nbdebug.render._html import esc, picture
from nbdebug.render._registry import renders

__all__ = ["plot_snapshot", "svg_sparkline", "svg_stacked", "svg_two_timelines", "svg_diverging", "PALETTE"]

PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac", "#86bcb6", "#d37295")


def svg_sparkline(values: Sequence[int], width: int = 260, height: int = 48) -> str:
    """A small SVG polyline of ``values`` (no script, no network), as a picture that shows in any renderer."""
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    if v.size < 2:
        return ""
    hi = max(float(v.max()), 1.0)
    lo = min(float(v.min()), 0.0)
    # coordinates in tenths of a pixel (the viewBox is ten times the size), written as integers: one C-level join
    # instead of a formatted string per point
    xs = np.rint((np.arange(v.size) * ((width - 2) / (v.size - 1)) + 1) * 10)
    ys = np.rint((height - 1 - (v - lo) / (hi - lo) * (height - 2)) * 10)
    pts = " ".join(map(str, np.column_stack((xs, ys)).astype(np.int64).ravel().tolist()))
    peak = fmt_bytes(int(hi))
    svg = (f'<svg width="{width}" height="{height}" '
           f'viewBox="0 0 {width * 10} {height * 10}" role="img" aria-label="allocated memory over time">'
           f'<title>{esc("peak " + peak)}</title>'
           '<polyline fill="none" style="stroke:var(--nbd-brand,var(--jp-brand-color1,#0969da))" stroke-width="15" '
           f'points="{pts}"/></svg>')
    return picture(svg, f"allocated memory over time, peak {peak}")


@renders(MemorySnapshot, "figure")
def plot_snapshot(snap: MemorySnapshot, ax: Any = None, *, device: int | None = None, top: int = 8) -> Any:
    """Stacked allocated memory by top sites (+ other), reserved memory as a line; returns the Figure."""
    from matplotlib.figure import Figure

    from nbdebug.core.memory._bands import compute_bands

    bands = compute_bands(snap, device, top=top, buckets=1500)
    if ax is None:
        fig = Figure(figsize=(10, 4.5), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    x = bands.x
    if bands.x_unit == "us" and x.size:
        x = (x - x[0]) / 1e6
        ax.set_xlabel("seconds since the first event")
    else:
        ax.set_xlabel("event index")
    scale, unit = 1024**3, "GiB"
    if bands.total.size and bands.total.max() < 1024**3:
        scale, unit = 1024**2, "MiB"
    colors = [PALETTE[i % len(PALETTE)] for i in range(len(bands.names) - 1)] + ["#c8c8c8"]
    ax.stackplot(x, bands.values / scale, labels=[n[:60] for n in bands.names], colors=colors, step="post")
    st = snap.state(bands.device)
    tl_reserved = st.reserved if st.n else None
    if tl_reserved is not None and tl_reserved.size and tl_reserved.max() > 0:
        idx = bands.index.clip(0)
        ax.step(x, st.reserved[idx] / scale, where="post", color="black", lw=0.8, ls="--", label="reserved")
    ax.set_ylabel(f"allocated ({unit})")
    ax.set_title(f"{snap.source}: device {bands.device}")
    ax.legend(loc="upper left", fontsize=7, framealpha=0.8)
    return fig


def svg_stacked(x: Sequence[float], values: Sequence[Sequence[int]], colors: Sequence[str], *, x_unit: str,
                index: Sequence[int], width: int = 1000, height: int = 300, columns: int = 400) -> str:
    """The stacked allocated-memory chart as static SVG (the viewer's picture where no script runs).

    At most ``columns`` columns: each keeps the point of highest total in its group, so no peak is lost; bands are
    drawn as steps (no interpolated diagonals between points).
    """
    n = len(x)
    if n == 0 or not values:
        return ""
    totals = [sum(v[j] for v in values) for j in range(n)]
    group = max(1, -(-n // columns))
    pick = [max(range(a, min(a + group, n)), key=totals.__getitem__) for a in range(0, n, group)]
    L, R, T, B = 78, 12, 10, 34
    ymax = max(max(totals[j] for j in pick), 1)
    x0, x1 = x[pick[0]], x[pick[-1]]
    span = (x1 - x0) or 1.0
    cols = len(pick)
    # each column spans from its point to the next one's (the last one to the right edge)
    W = width - L - R
    xs = [L + W * ((x[j] - x0) / span if x1 != x0 else k / cols) for k, j in enumerate(pick)] + [float(width - R)]

    def sy(v: float) -> int:
        return round(height - B - (height - B - T) * v / ymax)

    parts = []
    base = [0] * cols
    for k, series in enumerate(values):
        top = [base[c] + series[j] for c, j in enumerate(pick)]
        if not any(series[j] for j in pick):
            base = top
            continue
        d = [f"M{xs[0]:.0f},{sy(top[0])}"]
        for c in range(cols):
            d.append(f"V{sy(top[c])}H{xs[c + 1]:.0f}")
        d.append(f"V{sy(base[-1])}")
        for c in range(cols - 1, -1, -1):
            d.append(f"H{xs[c]:.0f}" + (f"V{sy(base[c - 1])}" if c else ""))
        parts.append(f'<path class="band" fill="{esc(colors[k % len(colors)])}" d="{"".join(d)}Z"/>')
        base = top
    grid = []  # drawn first, under the bands
    for t in range(5):
        v = ymax * t / 4
        y = sy(v)
        grid.append(f'<line x1="{L}" x2="{width - R}" y1="{y}" y2="{y}" style="stroke:var(--nbd-mem-border2,#d0d7de)" stroke-width="0.6"/>'
                    f'<text x="{L - 6}" y="{y + 4}" text-anchor="end" font-size="11">{esc(fmt_bytes(int(v)))}</text>')
        # evenly along the axis (the points need not be: a quiet stretch has few)
        xv = x0 + (x1 - x0) * t / 4
        if x_unit == "us":
            label = f"{(xv - x0) / 1e6:.3f} s"
        else:
            label = "start" if round(xv) < 0 else f"event {round(xv)}"
        anchor = "end" if t == 4 else "start" if t == 0 else "middle"
        grid.append(f'<text x="{L + W * t / 4:.0f}" y="{height - 12}" text-anchor="{anchor}" font-size="11">'
                    f'{esc(label)}</text>')
    return (f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'role="img" aria-label="allocated memory over time, stacked by site">{"".join(grid + parts)}</svg>')


def svg_two_timelines(before: tuple[str, Sequence[float], Sequence[int]], after: tuple[str, Sequence[float], Sequence[int]],
                      *, x_label: str, width: int = 900, height: int = 240) -> str:
    """Two allocated-memory curves (``(name, x, bytes)``, x from 0) on one axis, drawn as steps, peaks marked."""
    L, R, T, B = 78, 12, 26, 30
    xs = [v for _, x, _ in (before, after) for v in x]
    ys = [v for _, _, y in (before, after) for v in y]
    if not xs:
        return ""
    xmax, ymax = max(max(xs), 1e-9), max(max(ys), 1)

    def px(v: float) -> float:
        return L + (width - L - R) * v / xmax

    def py(v: float) -> float:
        return height - B - (height - B - T) * v / ymax

    parts = []
    for t in range(5):
        v = ymax * t / 4
        parts.append(f'<line x1="{L}" x2="{width - R}" y1="{py(v):.0f}" y2="{py(v):.0f}" '
                     f'style="stroke:var(--nbd-border2,#eaeef2)"/><text x="{L - 6}" y="{py(v) + 4:.0f}" '
                     f'text-anchor="end" font-size="11">{esc(fmt_bytes(int(v)))}</text>')
    parts.append(f'<text x="{L}" y="{height - 8}" font-size="11">0</text><text x="{width - R}" y="{height - 8}" '
                 f'font-size="11" text-anchor="end">{esc(x_label)} {xmax:.4g}</text>')
    for k, ((name, x, y), color, dash) in enumerate(((before, "#8c959f", "5 3"), (after, "#0969da", ""))):
        if not len(x):
            continue
        d = [f"M{px(x[0]):.1f},{py(y[0]):.1f}"]
        for i in range(1, len(x)):
            d.append(f"H{px(x[i]):.1f}V{py(y[i]):.1f}")
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(f'<path class="diff-{"before" if k == 0 else "after"}" fill="none" style="stroke:{color}" '
                     f'stroke-width="1.6"{extra} d="{"".join(d)}"/>')
        top = max(range(len(y)), key=y.__getitem__)
        parts.append(f'<circle cx="{px(x[top]):.1f}" cy="{py(y[top]):.1f}" r="3" style="fill:{color}"/>')
        parts.append(f'<text x="{L + 8 + k * (width - L) // 2}" y="14" font-size="11" style="fill:{color}">'
                     f'{"before" if k == 0 else "after"}: {esc(name[:48])}, peak {esc(fmt_bytes(int(y[top])))}</text>')
    return (f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="allocated memory of both snapshots on one time axis">{"".join(parts)}</svg>')


def svg_diverging(rows: Sequence[tuple[str, int]], *, title: str, width: int = 900) -> str:
    """Horizontal bars of a signed change per label: growth to the right (orange), shrinkage to the left (blue)."""
    rows = [r for r in rows if r[1]][:15]
    if not rows:
        return ""
    h, pad_t, label_w = 18, 20, 330
    height = pad_t + h * len(rows) + 6
    mid = label_w + (width - label_w) // 2
    span = max(abs(v) for _, v in rows)
    half = (width - label_w) / 2 - 70
    parts = [f'<text x="0" y="13" font-size="11">{esc(title)}</text>',
             f'<line x1="{mid}" x2="{mid}" y1="{pad_t - 2}" y2="{height - 4}" style="stroke:var(--nbd-border,#d0d7de)"/>']
    for i, (label, v) in enumerate(rows):
        y = pad_t + i * h
        w = max(1.0, half * abs(v) / span)
        x = mid if v > 0 else mid - w
        color = "#d1600a" if v > 0 else "#0969da"
        short = label if len(label) <= 52 else "..." + label[-49:]
        sign = "+" if v > 0 else "-"
        tx, anchor = (mid + w + 4, "start") if v > 0 else (mid - w - 4, "end")
        parts.append(f'<text x="{label_w - 8}" y="{y + 12}" font-size="11" text-anchor="end">{esc(short)}</text>'
                     f'<rect x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="{h - 6}" style="fill:{color}"/>'
                     f'<text x="{tx:.1f}" y="{y + 12}" font-size="11" text-anchor="{anchor}">'
                     f'{sign}{esc(fmt_bytes(abs(v)))}</text>')
    return (f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="{esc(title)}">{"".join(parts)}</svg>')
