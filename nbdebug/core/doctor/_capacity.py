"""A model too small for its batch: the output is an affine function of the input (no non-linearity between the
inputs and the output), measured on a copy: the output at the midpoint of two samples' inputs is the midpoint of
their outputs.  Such a model draws one linear boundary, so a batch that is not linearly separable is never fitted,
whatever the learning rate; nothing is frozen or detached and the loss matches, so that advice would mislead.

Only looked at when the batch is not learned, no experiment restored learning and nothing else explains it.
"""

from __future__ import annotations

from typing import Any

from nbdebug.core._findings import Fix
from nbdebug.core.doctor._inputs import logits_of, sample_count
from nbdebug.core.doctor._session import Session
from nbdebug.core.knowledge import entry, finding

__all__ = ["linear_model", "plain_advice"]

_AFFINE_REL = 1e-4  # departure from the midpoint rule, relative to the outputs' spread, that is float rounding
# findings that already say why the batch is not learned: the model's size is not the question then
_EXPLAINED = ("frozen_parameters", "no_gradient", "ignores_input", "probabilities_to_loss", "activation_on_logits",
              "loss_broadcast", "optimizer_coverage", "eval_mode", "zero_init", "labels_unrelated")


def affine_departure(s: Session, standardise: bool = False) -> float | None:
    """How far a copy of the model (dropout off) is from affine in its input on this batch (``standardise``: on the
    batch brought to mean 0, std 1); None when the input is not one floating tensor with the samples first."""
    import torch

    x = s.loss.inputs
    n = sample_count(s.loss.targets)
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() < 2 or n != x.shape[0] or n < 2:
        return None
    if standardise:
        x = (x - x.mean()) / x.std().clamp_min(1e-12)
    work, _ = s.fresh()
    work.eval()
    g = torch.Generator(device="cpu").manual_seed(0)
    other = x[torch.randperm(n, generator=g).to(x.device)]
    try:  # in float64: outputs dominated by a bias would break the rule by float32 rounding alone
        work.double()
        with torch.no_grad():
            outs = [logits_of(s.loss.forward(work, v.double())) for v in (x, other, (x + other) / 2)]
    except (RuntimeError, TypeError):  # a layer without float64 kernels: the model's own precision
        work.to(x.dtype)
        with torch.no_grad():
            outs = [logits_of(s.loss.forward(work, v)) for v in (x, other, (x + other) / 2)]
    if any(not isinstance(o, torch.Tensor) for o in outs):
        return None
    a, b, mid = (o.double() for o in outs)
    spread = float((a - a.mean(0, keepdim=True)).norm())
    if not spread > 0:
        return None
    return float((mid - (a + b) / 2).norm()) / spread


def linear_model(s: Session) -> None:
    """A ``model_too_small`` finding, first, when an affine model does not learn the batch; the unlearned batch
    follows from it."""
    at = next((i for i, f in enumerate(s.findings) if f.kind == "cannot_overfit" and f.severity != "info"), None)
    if at is None or s.explained or s.unstable or any(e.restores for e in s.experiments) or s.has(*_EXPLAINED):
        return
    rel = affine_departure(s)
    if rel is None:
        s.check("the output against the input", "not measured: the input is not one tensor of floats")
        return
    if rel > _AFFINE_REL:
        s.check("the output against the input", f"not affine (the midpoint rule is off by {rel:.2g} of the spread)")
        return
    unit = affine_departure(s, standardise=True)
    if unit is not None and unit > _AFFINE_REL:
        _linear_range(s, at, rel, unit)
        return
    s.check("the output against the input", f"affine: the output at the midpoint of two inputs is the midpoint of "
            f"their outputs (to {rel:.1g} of the spread)")
    cause = finding("model_too_small", "the model's output is an affine function of its input (measured on a copy: "
                    "the output at the midpoint of two samples' inputs is the midpoint of their outputs): it has no "
                    "non-linearity between its inputs and its output, so it fits only a linear boundary, and the "
                    "training did not fit this batch with one; nothing is frozen and every parameter gets a gradient "
                    "(not tried on a copy: a hidden layer changes the model)", ("model",),
                    evidence={"affine_departure": rel})
    _first(s, at, cause)


def _linear_range(s: Session, at: int, rel: float, unit: float) -> None:
    """Affine at the batch's own input scale, not with the inputs standardised: the model has non-linearities, and
    inputs so small keep them in their linear range (tanh near 0).  The standardised inputs are tried on a copy:
    where they learn the batch better, the input scale is the cause; where not, nothing is claimed."""
    from nbdebug.core.doctor import _experiments as experiments

    said = (f"affine at this input scale (the midpoint rule holds to {rel:.1g} of the spread), not with the inputs "
            f"standardised (off by {unit:.2g}): the non-linearities work in their linear range")
    code = s.input_fixes("unnormalised_inputs")[-1].code
    ex = experiments.trial(s, "unnormalised_inputs", "the inputs standardised to mean 0, std 1",
                           experiments.standardised, code)
    if ex is None or not ex.restores:
        s.check("the output against the input", said + ("" if ex is None else f"; standardised inputs did not learn "
                                                         f"the batch better ({ex.start:.4g} -> {ex.after:.4g})"))
        return
    s.check("the output against the input", said)
    lo, hi, _, std = s.input_stats or (0.0, 0.0, 0.0, 0.0)
    cause = finding("unnormalised_inputs", f"the inputs span only {lo:.3g}..{hi:.3g} (std {std:.3g}): at that scale "
                    f"the model's output is an affine function of its input (measured on a copy: {said}), so it fits "
                    f"only a linear boundary. Tried on a copy: {ex.said()}", ("inputs",), severity="error",
                    fixes=tuple(reversed(s.input_fixes("unnormalised_inputs"))),
                    evidence={"affine_departure": rel, "standardised_departure": unit, **ex.evidence()})
    _first(s, at, cause)


def _first(s: Session, at: int, cause: Any) -> None:
    """``cause`` goes first, and the unlearned batch at ``at`` says that it follows from it."""
    stuck = s.findings[at]
    how = entry("consequence_of_another")
    s.findings[at] = finding(stuck.kind, how.summary.format(message=stuck.message, cause_title=cause.title.lower()),
                             stuck.where, severity="warning",
                             fixes=(Fix(f"fix that first: {cause.fix}", cause.fixes[0].code),), evidence=dict(stuck.evidence))
    s.findings.insert(0, cause)
    s.explained = True


_REGRESSION_LOSSES = ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss")


def _labels(t: Any) -> bool:
    """Targets that are labels: every value 0 or 1 (one-hot rows, binary labels), not values to regress."""
    import torch

    return isinstance(t, torch.Tensor) and t.numel() > 0 and bool(((t == 0) | (t == 1)).all())


def plain_advice(s: Session) -> None:
    """An unlearned batch keeps 'look for a frozen layer, a detached tensor' only where that can be so: with nothing
    frozen and a gradient at every parameter the advice names what was measured instead (a regression loss on
    class probabilities: cross-entropy on the logits)."""
    at = next((i for i, f in enumerate(s.findings) if f.kind == "cannot_overfit" and f.severity != "info"), None)
    if at is None:
        return
    f = s.findings[at]
    generic = entry("cannot_overfit").fixes[0]
    if generic not in f.fixes:
        return
    frozen = any(not p.requires_grad and p.is_floating_point() for p in s.user_model.parameters())
    flows = dict(s.checks).get("every parameter gets a gradient") == "yes"
    if frozen or not flows:
        return
    if f.fixes[0] != generic:  # a measured fix comes first: the generic suspects go
        s.findings[at] = finding(f.kind, f.message, f.where, severity=f.severity,
                                 fixes=tuple(x for x in f.fixes if x != generic), evidence=dict(f.evidence))
        return
    call = s.loss_in
    source = type(getattr(getattr(call, "input", None), "grad_fn", None)).__name__
    if call is not None and call.name in _REGRESSION_LOSSES and source.startswith(("Softmax", "Sigmoid")) \
            and _labels(call.target):
        first = Fix(f"use cross-entropy on the logits, not {call.name} on the {source[:-len('Backward0')].lower()} "
                    "probabilities: a regression loss on probabilities gives gradients that vanish as the output "
                    "saturates", "loss = nn.CrossEntropyLoss()(logits, y)  # y: class indices")
    else:
        first = Fix("check that the loss matches the output and that the model can represent the batch (nothing is "
                    "frozen and every parameter gets a gradient)")
    s.findings[at] = finding(f.kind, f.message, f.where, severity=f.severity,
                             fixes=(first,) + tuple(x for x in f.fixes if x != generic), evidence=dict(f.evidence))
