"""matplotlib figures and a tiny inline SVG for the memory results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nbdebug._units import fmt_bytes
from nbdebug.core.memory._snapshot import MemorySnapshot
from nbdebug.render._html import esc
from nbdebug.render._registry import renders

__all__ = ["plot_snapshot", "svg_sparkline", "PALETTE"]

PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac", "#86bcb6", "#d37295")


def svg_sparkline(values: Sequence[int], width: int = 260, height: int = 48) -> str:
    """A small inline SVG polyline of ``values`` (no script, no network)."""
    vals = list(values)
    if len(vals) < 2:
        return ""
    hi = max(max(vals), 1)
    lo = min(min(vals), 0)
    pts = " ".join(f"{i * (width - 2) / (len(vals) - 1) + 1:.1f},{height - 1 - (v - lo) / (hi - lo) * (height - 2):.1f}"
                   for i, v in enumerate(vals))
    return (f'<svg width="{width}" height="{height}" role="img" aria-label="allocated memory over the cell">'
            f'<title>{esc("peak " + fmt_bytes(hi))}</title>'
            f'<polyline fill="none" style="stroke:var(--nbd-brand,var(--jp-brand-color1,#0969da))" stroke-width="1.5" points="{pts}"/></svg>')


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
