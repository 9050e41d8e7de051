"""Training dynamics shared by the doctor, GradMonitor and the NaN sentinel: loss-curve analysis, chance level,
and statistics of a tensor that holds NaN/Inf.

What a check reports is a shared ``Finding`` (``nbdebug.core._findings``) whose ``kind`` is an entry of
``nbdebug.core.knowledge.training``; the numbers every check uses are that module's ``THRESHOLDS``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from nbdebug.core._findings import Finding
from nbdebug.core.knowledge import finding, threshold

__all__ = ["analyze_loss", "chance_loss", "depth_correlation", "describe_tensor"]


def chance_loss(num_classes: int) -> float:
    """Cross-entropy of a uniform guess over ``num_classes`` classes: ``-log(1/C)``."""
    return math.log(num_classes)


def depth_correlation(values: Sequence[float]) -> float:
    """Spearman correlation of ``values`` with their position: 1 when they grow steadily from first to last.

    Vanishing gradients are a decay with depth (small near the input, large near the output); a spread alone is
    not: at a standard init attention's query/key gradients are tiny next to large ones in every block.
    """
    n = len(values)
    if n < 3:
        return 0.0
    order = sorted(range(n), key=lambda i: values[i])
    ranks = [0.0] * n
    for r, i in enumerate(order):
        ranks[i] = float(r)
    mean = (n - 1) / 2
    cov = sum((i - mean) * (ranks[i] - mean) for i in range(n))
    var = sum((i - mean) ** 2 for i in range(n))
    return cov / var if var else 0.0


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    if n == 0:
        return math.nan
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def analyze_loss(
    steps: Sequence[int], losses: Sequence[float], *, num_classes: int | None = None, window: int = 20
) -> list[Finding]:
    """Find loss spikes, a plateau, and a plateau at chance level in a loss curve.

    Parameters
    ----------
    steps, losses : sequences
        The step index and loss value of each logged point.
    num_classes : int, optional
        For classification: the plateau at ``-log(1/C)`` is reported as ``chance_plateau``.
    window : int
        Points per window for the running median and the plateau test.
    """
    findings: list[Finding] = []
    finite = [(s, v) for s, v in zip(steps, losses) if math.isfinite(v)]
    bad = [s for s, v in zip(steps, losses) if not math.isfinite(v)]
    if bad:
        findings.append(
            finding("loss_spike", f"the loss is non-finite from step {bad[0]} ({len(bad)} steps)", severity="error")
        )
    spikes: list[tuple[int, float, float]] = []
    factor = threshold("loss_spike_factor")
    k = threshold("loss_spike_mad")
    over_max = threshold("loss_spike_over_max")
    for i in range(window, len(finite)):
        recent = [v for _, v in finite[i - window : i]]
        med = _median(recent)
        # the loss's own variability: minibatch noise at a low loss easily triples it, which is not a spike
        mad = 1.4826 * _median([abs(r - med) for r in recent])
        s, v = finite[i]
        # and far above anything in the window: at a low loss, one misclassified sample in a small batch makes
        # a heavy tail that the median and its deviation understate
        if med > 0 and v > factor * med and v > med + k * mad and \
                v > over_max * max(x for _, x in finite[max(0, i - 5 * window) : i]):
            spikes.append((s, v, med))
    if spikes:
        s, v, med = max(spikes, key=lambda t: t[1] / t[2])
        findings.append(
            finding(
                "loss_spike",
                f"{len(spikes)} loss spike(s); the largest at step {s}: {v:.4g} vs a recent median of {med:.4g} "
                f"(above {factor:g}x the median, {k:g} robust deviations of the loss's own noise and {over_max:g}x the "
                f"highest of the last {5 * window} values)",
            )
        )
    if len(finite) >= 2 * window:
        a = _median([v for _, v in finite[-2 * window : -window]])
        b = _median([v for _, v in finite[-window:]])
        scale = max(abs(a), 1e-12)
        if abs(a - b) / scale < threshold("plateau_rel_change"):
            first_s = finite[-2 * window][0]
            if num_classes and num_classes > 1:
                chance = chance_loss(num_classes)
                if abs(b - chance) / chance < threshold("chance_tolerance"):
                    findings.append(
                        finding(
                            "chance_plateau",
                            f"the loss has stayed at {b:.4g} since step {first_s}, the chance level "
                            f"-log(1/{num_classes}) = {chance:.4g}: the model predicts nothing better than a guess",
                        )
                    )
                    return findings
            findings.append(finding("loss_plateau", f"the loss has stayed at {b:.4g} since step {first_s}"))
    return findings


def describe_tensor(t: Any) -> dict[str, Any]:
    """Statistics of a tensor that may hold NaN/Inf: shape, dtype, counts and the finite range (host sync)."""
    import torch

    t = t.detach()
    stats: dict[str, Any] = {"shape": tuple(t.shape), "dtype": str(t.dtype).replace("torch.", "")}
    if not (t.is_floating_point() or t.is_complex()):
        return stats
    f = t.float() if t.is_floating_point() else t.abs().float()
    nan = int(torch.isnan(f).sum())
    posinf = int(torch.isposinf(f).sum())
    neginf = int(torch.isneginf(f).sum())
    finite = f[torch.isfinite(f)]
    stats.update(numel=t.numel(), nan=nan, posinf=posinf, neginf=neginf)
    if finite.numel():
        stats.update(finite_min=float(finite.min()), finite_max=float(finite.max()), finite_mean=float(finite.mean()))
    return stats
