"""Shared knowledge of training dynamics: findings, their kinds and fixes, thresholds, and loss-curve analysis.

Everything a check reports is a ``Finding`` whose ``kind`` is a row of ``KINDS``; the thresholds every check uses
are rows of ``THRESHOLDS``.  Both tables name their sources, and every row is exercised by a test.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from nbdebug.core._result import Result

__all__ = [
    "Severity",
    "Finding",
    "KindInfo",
    "KINDS",
    "THRESHOLDS",
    "make_finding",
    "analyze_loss",
    "chance_loss",
]


class Severity(str, Enum):
    """How bad a finding is."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True, repr=False)
class Finding(Result):
    """One problem found in a model or a training run.

    Attributes
    ----------
    kind : str
        A key of ``KINDS`` (``"cannot_overfit"``, ``"exploding_gradients"``, ...).
    severity : str
        ``"error"``, ``"warning"`` or ``"info"``.
    message : str
        What was seen, with the numbers.
    where : tuple of str
        Module or parameter names where the problem lives (empty when it has no place).
    fixes : tuple of str
        What to try, most likely first.
    """

    kind: str
    severity: str
    message: str
    where: tuple[str, ...] = ()
    fixes: tuple[str, ...] = ()

    def _summary_line(self) -> str:
        return f"{self.severity} {self.kind}: {self.message}"

    def __str__(self) -> str:
        where = f" [{', '.join(self.where[:6])}{', ...' if len(self.where) > 6 else ''}]" if self.where else ""
        fixes = "".join(f"\n    fix: {f}" for f in self.fixes)
        return f"{self.severity.upper():<7} {self.kind}{where}: {self.message}{fixes}"


@dataclass(frozen=True)
class KindInfo:
    """What a finding kind means, how bad it is by default, and how to fix it."""

    title: str
    severity: Severity
    fixes: tuple[str, ...]
    source: str


_KARPATHY = "Karpathy, 'A Recipe for Training Neural Networks' (2019)"
_SEEDS_TRAIN = "seeds/training-failures-troubleshooting.md"
_SEEDS_RECIPES = "seeds/debugging-recipes.md"
_SEEDS_ERRORS = "seeds/gpu-tpu-common-errors.md"

KINDS: dict[str, KindInfo] = {
    "label_out_of_range": KindInfo(
        "targets outside the output's class range",
        Severity.ERROR,
        (
            "make the last layer's out_features equal to the number of classes",
            "remap labels to 0..C-1 (e.g. labels - labels.min(), or a label encoder)",
            "mark padding with the loss's ignore_index (-100 by default)",
        ),
        _SEEDS_ERRORS + " (device-side assert: t >= 0 && t < n_classes)",
    ),
    "probabilities_to_loss": KindInfo(
        "probabilities fed to a loss that expects logits",
        Severity.ERROR,
        (
            "remove the final Softmax/Sigmoid and feed raw logits to CrossEntropyLoss/BCEWithLogitsLoss",
            "or keep the probabilities and use NLLLoss on log_softmax / BCELoss on sigmoid outputs",
        ),
        _SEEDS_ERRORS + " ('CrossEntropyLoss expects raw logits, not probabilities!')",
    ),
    "initial_loss_off": KindInfo(
        "initial loss far from its expected value",
        Severity.WARNING,
        (
            "initialise the last layer's weights small (e.g. scale by 0.01) and its bias to 0 or the log class prior",
            "check for an output scale (temperature, a multiplier) applied to the logits",
        ),
        _KARPATHY + " ('verify loss @ init': -log(1/C) for C classes)",
    ),
    "no_gradient": KindInfo(
        "trainable parameters that get no gradient",
        Severity.ERROR,
        (
            "look for .detach(), .data, .item() or torch.no_grad() between these parameters and the loss",
            "remove unused modules or set requires_grad=False on them on purpose",
            "with DDP, unused parameters also need find_unused_parameters=True",
        ),
        _SEEDS_RECIPES + " (frozen layer you did not intend to freeze)",
    ),
    "nonfinite_forward": KindInfo(
        "NaN or Inf in the forward pass",
        Severity.ERROR,
        (
            "guard log/sqrt/division inputs (clamp to a positive lower bound, add an epsilon)",
            "normalise the inputs; check the data for NaN/Inf",
            "use bfloat16 instead of float16 or keep softmax/logsumexp in float32",
        ),
        _SEEDS_RECIPES + " (Recipe: Hunting NaN and Inf)",
    ),
    "nonfinite_gradient": KindInfo(
        "NaN or Inf in the gradients",
        Severity.ERROR,
        (
            "replay the step under torch.autograd.detect_anomaly() (nbdebug.nan_sentinel(model, replay=True))",
            "guard sqrt/pow/division at 0 (their gradients are infinite there)",
            "clip gradients: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
        ),
        _SEEDS_RECIPES + " (Step 3: anomaly detection for the backward pass)",
    ),
    "exploding_gradients": KindInfo(
        "gradient norms growing without bound",
        Severity.ERROR,
        (
            "lower the learning rate (by 10x) and add warmup",
            "clip gradients: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
            "add normalisation (LayerNorm/BatchNorm) and check the initialisation scale",
        ),
        _SEEDS_TRAIN + " (Loss Spikes & Gradient Explosion)",
    ),
    "vanishing_gradients": KindInfo(
        "gradient norms collapsing toward zero, layer by layer",
        Severity.WARNING,
        (
            "replace saturating activations (sigmoid/tanh) with ReLU/GELU",
            "use a variance-preserving init (kaiming/xavier) and residual connections",
            "add normalisation layers between blocks",
        ),
        _SEEDS_TRAIN + " (Non-Convergence: vanishing/exploding gradients)",
    ),
    "dead_activations": KindInfo(
        "ReLU units that never fire",
        Severity.WARNING,
        (
            "check the bias initialisation before the ReLU (a large negative bias kills units)",
            "lower the learning rate; use LeakyReLU/GELU",
            "normalise the inputs of the layer",
        ),
        _SEEDS_TRAIN + " (Representation Collapse: dead ReLUs)",
    ),
    "cannot_overfit": KindInfo(
        "the loss does not approach zero on one repeated batch",
        Severity.ERROR,
        (
            "look for a frozen layer, a detached tensor or a loss that does not match the output",
            "raise the learning rate for this tiny problem",
            "check the loss reduction (mean vs sum) against the gradient magnitude",
        ),
        _SEEDS_RECIPES + " (Exercise E.9.2: overfit a single batch); " + _KARPATHY,
    ),
    "ignores_input": KindInfo(
        "a zero-input baseline learns as well as the real input",
        Severity.ERROR,
        (
            "check that the forward pass uses its input (not a constant, a cached tensor or a detached copy)",
            "decode one batch and check that inputs and targets line up",
        ),
        _SEEDS_TRAIN + " (Zero-Input Baseline); " + _KARPATHY + " ('input-independent baseline')",
    ),
    "dataloader_bottleneck": KindInfo(
        "the training loop waits for data",
        Severity.WARNING,
        (
            "raise DataLoader num_workers and set pin_memory=True, persistent_workers=True",
            "move decoding/augmentation out of __getitem__ or cache preprocessed data",
            "pack many small files into a binary format (WebDataset, memory-mapped arrays)",
        ),
        _SEEDS_TRAIN + " (File System I/O Bottlenecks)",
    ),
    "not_reproducible": KindInfo(
        "two runs with the same seed diverge",
        Severity.WARNING,
        (
            "call nbdebug.set_reproducible(seed) before building the model and data",
            "seed every generator you create (numpy default_rng, torch.Generator, random.Random)",
            "torch.use_deterministic_algorithms(True) to find non-deterministic kernels",
        ),
        _SEEDS_RECIPES + " (Recipe: Reproducibility)",
    ),
    # found by GradMonitor on a running loop (not by the doctor)
    "gradient_spike": KindInfo(
        "a gradient norm far above its running mean",
        Severity.WARNING,
        (
            "clip gradients: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
            "look at the batch of that step (dirty data, an outlier)",
            "lower the learning rate or lengthen warmup",
        ),
        _SEEDS_TRAIN + " (Gradient Spike Score > 50 is critical)",
    ),
    "skipped_steps": KindInfo(
        "steps skipped by the AMP GradScaler (inf/NaN gradients)",
        Severity.INFO,
        (
            "a few skipped steps while the scale calibrates are normal",
            "many in a row: look for overflow (use bfloat16, lower the learning rate, clip after unscale_)",
        ),
        "torch.amp.GradScaler.step documentation",
    ),
    "loss_spike": KindInfo(
        "the loss jumps far above its recent level",
        Severity.WARNING,
        (
            "clip gradients and lower the learning rate",
            "look at the batch of that step",
        ),
        _SEEDS_TRAIN + " (Loss Spikes)",
    ),
    "loss_plateau": KindInfo(
        "the loss stopped moving",
        Severity.INFO,
        (
            "raise the learning rate or change the schedule",
            "overfit one batch to check that the model can learn at all",
        ),
        _SEEDS_TRAIN + " (Non-Convergence)",
    ),
    "chance_plateau": KindInfo(
        "the loss sits at chance level -log(1/C)",
        Severity.ERROR,
        (
            "overfit one batch (nbdebug.doctor) to check the model can learn at all",
            "train on zeroed inputs: if the loss is the same, the model ignores its input",
            "check that labels and inputs line up and that no input is silently dropped",
        ),
        _SEEDS_TRAIN + " (Non-Convergence / 'Fake Learning': Loss ~ -log(1/C))",
    ),
}

# name -> (value, what it means, source)
THRESHOLDS: dict[str, tuple[float, str, str]] = {
    "spike_score": (50.0, "gradient spike score (norm / running mean) above which a step is a spike", _SEEDS_TRAIN),
    "spike_ema": (0.9, "decay of the running mean of each gradient norm", "nbdebug choice"),
    "spike_warmup": (5.0, "steps a running mean needs before spike scores are reported", "nbdebug choice"),
    "explode_growth": (1e3, "growth of the global gradient norm (late / early median) that counts as exploding", _SEEDS_RECIPES),
    "vanish_ratio": (1e-4, "smallest/largest per-layer gradient norm ratio below which gradients vanish", _SEEDS_TRAIN),
    "vanish_abs": (1e-8, "global gradient norm below which the gradients have vanished", _SEEDS_TRAIN),
    "loss_spike_factor": (3.0, "loss above this many times its recent median counts as a spike", _SEEDS_TRAIN),
    "plateau_rel_change": (0.01, "relative change of the windowed loss below which it is a plateau", _SEEDS_TRAIN),
    "chance_tolerance": (0.1, "relative distance to -log(1/C) that counts as 'at chance level'", _SEEDS_TRAIN),
    "overfit_rel": (0.1, "final/initial loss ratio a model must beat on one repeated batch", _KARPATHY),
    "overfit_fail_rel": (0.5, "final/initial loss ratio above which a model cannot overfit one batch (error)", _KARPATHY),
    "overfit_abs": (0.05, "final loss below which overfitting one batch counts as done", _SEEDS_RECIPES),
    "init_loss_rel": (0.5, "relative distance of the initial loss from -log(1/C) that is 'far'", _KARPATHY),
    "dead_fraction": (0.5, "fraction of ReLU units silent on the whole batch that is reported", _SEEDS_TRAIN),
    "zero_input_margin": (0.5, "zero-input final loss must exceed this share of the initial loss gap", _SEEDS_TRAIN),
    "data_wait_fraction": (0.5, "share of step time spent waiting for the DataLoader that is a bottleneck", _SEEDS_TRAIN),
}


def threshold(name: str) -> float:
    """The value of a row of ``THRESHOLDS``."""
    return THRESHOLDS[name][0]


def make_finding(
    kind: str, message: str, where: Sequence[str] = (), *, severity: Severity | str | None = None
) -> Finding:
    """Build a ``Finding`` of ``kind``, with the table's default severity and fixes."""
    info = KINDS[kind]
    sev = Severity(severity) if severity is not None else info.severity
    return Finding(kind=kind, severity=sev.value, message=message, where=tuple(where), fixes=info.fixes)


def chance_loss(num_classes: int) -> float:
    """Cross-entropy of a uniform guess over ``num_classes`` classes: ``-log(1/C)``."""
    return math.log(num_classes)


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
            make_finding("loss_spike", f"the loss is non-finite from step {bad[0]} ({len(bad)} steps)", severity="error")
        )
    spikes: list[tuple[int, float, float]] = []
    factor = threshold("loss_spike_factor")
    for i in range(window, len(finite)):
        recent = [v for _, v in finite[i - window : i]]
        med = _median(recent)
        s, v = finite[i]
        if med > 0 and v > factor * med:
            spikes.append((s, v, med))
    if spikes:
        s, v, med = max(spikes, key=lambda t: t[1] / t[2])
        findings.append(
            make_finding(
                "loss_spike",
                f"{len(spikes)} loss spike(s); the largest at step {s}: {v:.4g} vs a recent median of {med:.4g}",
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
                        make_finding(
                            "chance_plateau",
                            f"the loss has stayed at {b:.4g} since step {first_s}, the chance level "
                            f"-log(1/{num_classes}) = {chance:.4g}: the model predicts nothing better than a guess",
                        )
                    )
                    return findings
            findings.append(make_finding("loss_plateau", f"the loss has stayed at {b:.4g} since step {first_s}"))
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
