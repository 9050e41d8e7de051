"""What a ``GradMonitor`` recorded (``GradHistory``) and what it means (``grad_findings``).

``GradHistory`` is an immutable snapshot: the monitor records into its own mutable buffers and ``history`` builds
a new ``GradHistory`` from them (arrays copied and read-only), then its findings with ``dataclasses.replace``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from nbdebug.core._findings import Finding, HasFindings
from nbdebug.core._result import Result
from nbdebug.core.knowledge import finding, threshold
from nbdebug.core.training._dynamics import analyze_loss, depth_correlation

__all__ = ["GradSpike", "GradHistory", "grad_findings"]


@dataclass(frozen=True)
class GradSpike:
    """A gradient norm far above its running mean."""

    step: int
    name: str
    norm: float
    score: float


@dataclass(frozen=True, repr=False, eq=False)
class GradHistory(HasFindings, Result):
    """Everything a ``GradMonitor`` recorded, as of the moment ``GradMonitor.history`` was read (a snapshot).

    Attributes
    ----------
    steps : tuple of int
        Optimizer step index (from 0) of each recorded row.
    names : tuple of str
        Parameter names (columns of ``norms``).
    norms : numpy.ndarray
        ``(len(steps), len(names))`` gradient L2 norms (0 where a parameter had no gradient).
    global_norms : numpy.ndarray
        Global norm per recorded step (what ``clip_grad_norm_`` computes).
    modules : tuple of str
        Module names (columns of ``module_norms``).
    module_norms : numpy.ndarray
        ``(len(steps), len(modules))`` norms aggregated over each module's own parameters.
    loss_steps, losses : tuple
        Logged loss per step (mean over micro-batches).
    skipped_steps : tuple of int
        Steps the AMP GradScaler skipped because of inf/NaN gradients.
    spikes : tuple of GradSpike
        Norms whose spike score (norm / running mean) passed the threshold.
    nonfinite : tuple of (int, tuple of str)
        Steps with NaN/Inf gradients and the parameters that had them.
    no_grad : tuple of str
        Parameters that never got a gradient.
    findings : tuple of Finding
        Spikes, NaN/Inf, exploding/vanishing trends, loss spikes and plateaus; a warning when no optimizer step
        was recorded.
    spike_threshold : float
        The spike score the monitor used.
    num_classes : int or None
        Classes, for the chance level of the loss.
    steps_seen : int
        Optimizer steps the monitor saw (recorded or not, with ``every`` > 1).
    clip_norm : float or None
        The ``max_norm`` the loop clips to (the norms are read before clipping); None when not known.
    module_kinds : tuple of str
        The class name of each module in ``modules`` (``Linear``), to label rows of the charts.
    """

    steps: tuple[int, ...]
    names: tuple[str, ...]
    norms: Any
    global_norms: Any
    modules: tuple[str, ...]
    module_norms: Any
    loss_steps: tuple[int, ...] = ()
    losses: tuple[float, ...] = ()
    skipped_steps: tuple[int, ...] = ()
    spikes: tuple[GradSpike, ...] = ()
    nonfinite: tuple[tuple[int, tuple[str, ...]], ...] = ()
    no_grad: tuple[str, ...] = ()
    findings: tuple[Finding, ...] = ()
    spike_threshold: float = 50.0
    num_classes: int | None = None
    steps_seen: int = 0
    clip_norm: float | None = None
    module_kinds: tuple[str, ...] = ()

    def module_labels(self) -> tuple[str, ...]:
        """Each module as a person reads it: ``0 (Linear)``, ``encoder.fc (Linear)``; ``(root)`` stays."""
        kinds = self.module_kinds if len(self.module_kinds) == len(self.modules) else ("",) * len(self.modules)
        return tuple(f"{m} ({k})" if k else m for m, k in zip(self.modules, kinds))

    @property
    def clipped_steps(self) -> tuple[int, ...]:
        """Recorded steps whose global norm was above ``clip_norm`` (so the loop clipped it)."""
        if self.clip_norm is None:
            return ()
        return tuple(s for s, g in zip(self.steps, self.global_norms) if g > self.clip_norm)

    def _summary_line(self) -> str:
        last = f", last global norm {self.global_norms[-1]:.4g}" if len(self.steps) else ""
        return f"{len(self.steps)} steps, {len(self.names)} parameters{last}, {len(self.findings)} findings"

    def to_pandas(self) -> Any:
        """Tidy frame: one row per (step, parameter) with columns ``step``, ``name``, ``norm``."""
        return _tidy(self.steps, "name", self.names, self.norms)

    def modules_to_pandas(self) -> Any:
        """Tidy frame of per-module norms: ``step``, ``module``, ``norm``."""
        return _tidy(self.steps, "module", self.modules, self.module_norms)

    def plot(self, ax: Any = None) -> Any:
        """Global norm (and loss) over steps, and a per-module heatmap of log10 norms.

        Returns a ``matplotlib.figure.Figure`` (no pyplot state); given ``ax``, draws the norms on it only.
        """
        return self._figure(ax=ax)


def _trend_windows(values: Any) -> tuple[float, float]:
    import numpy as np

    n = len(values)
    k = max(1, min(10, n // 4))
    return float(np.median(values[:k])), float(np.median(values[-k:]))


def grad_findings(h: GradHistory) -> Iterator[Finding]:
    """Findings of a gradient history: NaN/Inf, spikes, exploding and vanishing trends, loss problems."""
    import numpy as np

    if not h.steps_seen:  # the first step is always recorded: nothing seen means nothing to analyse
        yield finding(
            "no_optimizer_steps",
            "no optimizer step of this model was seen: the loop rebuilt (rebound) the model after the monitor "
            "attached, or never called optimizer.step() on its parameters",
            evidence={"steps_seen": 0},
        )
    if h.nonfinite:
        s, names = h.nonfinite[0]
        where = names or ("(global)",)
        yield finding(
            "nonfinite_gradient",
            f"NaN/Inf gradients at {len(h.nonfinite)} recorded step(s), first at step {s} in {len(names)} parameter(s)",
            where,
        )
    if h.skipped_steps:
        yield finding(
            "skipped_steps",
            f"the GradScaler skipped {len(h.skipped_steps)} step(s) (first: {h.skipped_steps[0]})",
        )
    if h.spikes:
        worst = max(h.spikes, key=lambda sp: sp.score)
        names = tuple(dict.fromkeys(sp.name for sp in h.spikes))
        yield finding(
            "gradient_spike",
            f"{len(h.spikes)} spike(s) above {h.spike_threshold:g}x the running mean; worst: {worst.name} at step "
            f"{worst.step} ({worst.norm:.3g}, {worst.score:.0f}x)",
            names,
            evidence={"spikes": len(h.spikes), "worst_score": round(worst.score, 1), "threshold": h.spike_threshold},
        )
    accumulating = _accumulating(h)
    if accumulating is not None:
        yield accumulating
    if h.clip_norm is not None and len(h.steps):
        clipped = h.clipped_steps
        if clipped:
            yield finding("gradient_clipped", f"the global norm was above max_norm={h.clip_norm:g} on {len(clipped)} of "
                          f"{len(h.steps)} recorded steps (first at step {clipped[0]}, largest "
                          f"{float(np.nanmax(h.global_norms)):.4g}); the norms shown are before clipping",
                          evidence={"clipped_steps": len(clipped), "max_norm": h.clip_norm})
    if h.no_grad:
        yield finding("no_gradient", f"{len(h.no_grad)} parameter(s) never got a gradient", h.no_grad)
    g = np.asarray(h.global_norms, dtype=np.float64)
    g = g[np.isfinite(g)]
    if len(g) >= 8:
        early, late = _trend_windows(g)
        if early > 0 and late / early > threshold("explode_growth"):
            yield finding(
                "exploding_gradients",
                f"the global gradient norm grew {late / early:.3g}x (from {early:.3g} to {late:.3g})",
                evidence={"growth": float(f"{late / early:.3g}"), "threshold": threshold("explode_growth")},
            )
        if late < threshold("vanish_abs") or (early > 0 and late / early < 1 / threshold("explode_growth")):
            yield finding(
                "vanishing_gradients",
                f"the global gradient norm fell from {early:.3g} to {late:.3g}",
            )
    if len(h.steps):
        last = np.asarray(h.module_norms[-min(10, len(h.steps)) :], dtype=np.float64)
        masked = np.where(np.isfinite(last), last, np.nan)
        per = np.zeros(masked.shape[1])
        ok_cols = ~np.all(np.isnan(masked), axis=0)
        if ok_cols.any():
            per[ok_cols] = np.nanmedian(masked[:, ok_cols], axis=0)
        pos = per[per > 0]
        # a decay with depth, not a spread: tiny query/key gradients next to large ones are normal at init
        rho = depth_correlation([float(np.log(v)) for v in pos]) if len(pos) >= 3 else 0.0
        if len(pos) >= 3 and pos.min() / pos.max() < threshold("vanish_ratio") and \
                rho >= threshold("vanish_depth_correlation"):
            lo = int(np.argmin(np.where(per > 0, per, np.inf)))
            hi = int(np.argmax(per))
            yield finding(
                "vanishing_gradients",
                f"per-module gradient norms shrink toward the input, spanning {pos.max() / pos.min():.3g}x: "
                f"{h.modules[lo]} gets {per[lo]:.3g}, {h.modules[hi]} gets {per[hi]:.3g} (rank correlation of "
                f"gradient size with depth {rho:.2f})",
                (h.modules[lo],),
                evidence={"spread": float(pos.max() / pos.min()), "depth_correlation": round(rho, 3)},
            )
    if h.losses:
        yield from analyze_loss(h.loss_steps, h.losses, num_classes=h.num_classes)


def _accumulating(h: GradHistory) -> Finding | None:
    """A global norm that grows in proportion to the step count: each step adds its gradient to the last ones
    (``zero_grad()`` forgotten)."""
    import numpy as np

    g = np.asarray(h.global_norms, dtype=np.float64)
    steps = np.asarray(h.steps, dtype=np.float64)
    if len(g) < 10 or not np.isfinite(g).all() or g[0] <= 0:
        return None
    growth = g[-1] / g[0]
    corr = float(np.corrcoef(steps, g)[0, 1]) if np.std(g) > 0 else 0.0
    half = g[len(g) // 2]
    # linear in the step: from the middle to the end the norm about doubles (an exponential blow-up does far more)
    linear = half > 0 and 1.4 <= g[-1] / half <= 3.0
    if growth < threshold("accumulate_growth") or corr < threshold("accumulate_correlation") or not linear:
        return None
    return finding("grads_accumulate", f"the global gradient norm grows in step with the step count, from {g[0]:.3g} "
                   f"at step {h.steps[0]} to {g[-1]:.3g} at step {h.steps[-1]} ({growth:.3g}x, correlation with the "
                   f"step {corr:.2f}): each step adds its gradient to the previous ones, as when zero_grad() is "
                   "not called", evidence={"growth": float(f"{growth:.3g}"), "correlation": round(corr, 3)})


def _tidy(steps: tuple[int, ...], column: str, labels: tuple[str, ...], norms: Any) -> Any:
    """One row per (step, label): ``step``, ``column``, ``norm`` from a (steps, labels) array of norms."""
    import numpy as np
    import pandas as pd

    return pd.DataFrame({
        "step": np.repeat(np.asarray(steps, dtype=np.int64), len(labels)),
        column: np.tile(np.asarray(labels, dtype=object), len(steps)),
        "norm": np.asarray(norms, dtype=np.float64).reshape(-1),
    })
