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


def affine_departure(s: Session) -> float | None:
    """How far a copy of the model (dropout off) is from affine in its input on this batch; None when the input is
    not one floating tensor with the samples first."""
    import torch

    x = s.loss.inputs
    n = sample_count(s.loss.targets)
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() < 2 or n != x.shape[0] or n < 2:
        return None
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
    s.check("the output against the input", f"affine: the output at the midpoint of two inputs is the midpoint of "
            f"their outputs (to {rel:.1g} of the spread)")
    cause = finding("model_too_small", "the model's output is an affine function of its input (measured on a copy: "
                    "the output at the midpoint of two samples' inputs is the midpoint of their outputs): it has no "
                    "non-linearity between its inputs and its output, so it fits only a linear boundary, and the "
                    "training did not fit this batch with one; nothing is frozen and every parameter gets a gradient "
                    "(not tried on a copy: a hidden layer changes the model)", ("model",),
                    evidence={"affine_departure": rel})
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
