"""The loss at init against what it should be: -log(1/C) for a classifier, log 2 for a binary one, the loss of
predicting the targets' mean for a regression; a loss far under chance is tried against re-initialised weights."""

from __future__ import annotations

import math
from typing import Any

from nbdebug.core._findings import Finding, Fix
from nbdebug.core.doctor._session import Session, fixes_for
from nbdebug.core.knowledge import finding, threshold
from nbdebug.core.training._dynamics import chance_loss

__all__ = ["initial_loss", "candidates"]


def initial_loss(s: Session) -> None:
    loss = s.initial_loss
    if loss is None:
        return
    expected: float | None = None
    if s.task == "classification" and s.num_classes and s.num_classes > 1 and s.cross_entropy():
        expected = chance_loss(s.num_classes)
        label = f"-log(1/{s.num_classes}) = {expected:.4g}"
    elif s.task == "binary" and s.loss.loss_name in ("BCEWithLogitsLoss", "binary_cross_entropy_with_logits"):
        expected = math.log(2)
        label = f"log(2) = {expected:.4g}"
    if expected is None:
        if not _regression_offset(s):
            s.check("loss at init", "no expected value for this loss")
        return
    low = loss < expected * (1 - threshold("init_loss_rel")) and loss >= 0 and not s.has(
        "probabilities_to_loss", "activation_on_logits", "fits_too_easily")
    fresh = _reinitialised_loss(s) if low else None
    if low and fresh is not None and fresh >= expected * (1 - threshold("init_loss_rel")):
        # what the model knows is in its weights: it is trained already (a pretrained model), nothing leaks
        s.check("loss at init", f"{loss:.4g}, far under {label}; with the weights re-initialised on a copy "
                f"{fresh:.4g}: the low loss is in the weights (the model is trained already), not in the batch alone")
        return
    if low:
        s.add("fits_too_easily", f"the loss at init is {loss:.4g}, far under {label}, before any training: an "
              "untrained model cannot know the targets, so they reach it another way (inside the inputs) or the "
              "loss is computed on the wrong tensor", ["inputs"], evidence={"initial": loss, "chance": expected})
    elif abs(loss - expected) / expected > threshold("init_loss_rel") and not s.has(
            "probabilities_to_loss", "activation_on_logits", "fits_too_easily"):
        if s.has("unnormalised_inputs"):
            lo, hi, _, _ = s.input_stats or (0.0, 0.0, 0.0, 0.0)
            s.add("initial_loss_off", f"the loss at init is {loss:.4g}, far from {label}: the inputs span "
                  f"{lo:.4g}..{hi:.4g}, so the logits are as large as the inputs (see unnormalised_inputs)",
                  ("inputs",), fixes=s.input_fixes("input_scale_downstream"))
        elif (large := _large_start(s, loss, expected, label)) is not None:
            s.findings.append(large)
        else:
            last = _last_layer(s)
            s.add("initial_loss_off", f"the loss at init is {loss:.4g}, far from {label}: the initial "
                  "outputs are confidently wrong (bad initialisation or output scale)",
                  (s.last_module(),), fixes=_named_head(s, fixes_for("initial_loss_off"), last),
                  evidence={"initial": loss, "expected": expected, "last_layer": last or ""})
    s.check("loss at init", f"{loss:.4g} vs expected {expected:.4g}")


_REGRESSION_LOSSES = {"MSELoss": "mse_loss", "L1Loss": "l1_loss", "SmoothL1Loss": "smooth_l1_loss",
                      "HuberLoss": "huber_loss"}


def _regression_offset(s: Session) -> bool:
    """A regression whose initial loss is far above the loss of predicting the targets' mean for every sample,
    while predicting 0 is as bad: the targets sit away from 0 and the output starts near 0 (Karpathy's 'init well',
    the hockey-stick curve).  Measured with the loss the model was given, on the outputs it gave."""
    import torch
    import torch.nn.functional as F

    c = s.loss_in
    fn = _REGRESSION_LOSSES.get(s.loss.loss_name, s.loss.loss_name if s.loss.loss_name in
                                _REGRESSION_LOSSES.values() else "")
    if (s.task != "regression" or not fn or c is None or not isinstance(c.input, torch.Tensor)
            or not isinstance(c.target, torch.Tensor) or not c.target.is_floating_point() or c.target.numel() < 2):
        return False
    loss = getattr(F, fn)
    pred, t = c.input.detach().float(), c.target.detach().float()
    mean = float(t.mean())
    try:
        with torch.no_grad():
            at_init = float(loss(pred, t))
            at_mean = float(loss(torch.full_like(pred, mean), t))
            at_zero = float(loss(torch.zeros_like(pred), t))
    except RuntimeError:  # shapes the loss refuses: the loss_shapes check says so
        return False
    ratio = threshold("init_loss_vs_mean")
    if not (at_init > ratio * at_mean and at_zero > ratio * at_mean):
        s.check("loss at init", f"{at_init:.4g}; predicting the targets' mean {mean:.4g} gives {at_mean:.4g}")
        return True
    last = next((n for n, m in reversed(list(s.user_model.named_modules()))
                 if isinstance(getattr(m, "bias", None), torch.Tensor)), None)
    path = f"{s.options.name}.{last}" if last else s.options.name
    tried = _with_bias_at(s, last, mean)
    said = "" if tried is None else (f". Tried on a copy: with {path}.bias at {mean:.4g} the loss at init is "
                                     f"{tried:.4g} instead of {at_init:.4g}")
    s.add("initial_loss_off", f"the loss at init is {at_init:.4g}, while predicting the targets' mean ({mean:.4g}) "
          f"for every sample gives {at_mean:.4g}: the targets sit around {mean:.4g} and the output starts near 0, "
          f"so the first steps only chase that offset{said}", (s.last_module(),),
          fixes=(Fix("initialise the output bias to the targets' mean (or standardise the targets)",
                     f"with torch.no_grad():\n    {path}.bias.fill_({mean:.4g})"),
                 Fix("standardise the targets (subtract their mean, divide by their std) and undo it on predictions",
                     "y = (y - y_mean) / y_std")),
          evidence={"initial": at_init, "mean_predictor": at_mean, "targets_mean": mean, "bias_at_mean": tried,
                    "bias_module": last or ""})
    s.check("loss at init", f"{at_init:.4g} vs {at_mean:.4g} predicting the targets' mean")
    return True


def _with_bias_at(s: Session, last: str | None, mean: float) -> float | None:
    """The loss at init of a copy whose last biased module's bias is set to the targets' mean; None when it cannot
    be measured (no such module, a loss that refuses the copy)."""
    import torch

    if last is None:
        return None
    try:
        work, _ = s.fresh()
        with torch.no_grad():
            work.get_submodule(last).bias.fill_(mean)
            _, loss = s.loss.loss(work, s.loss.inputs)
        value = float(loss.detach().float())
    except Exception:  # noqa: BLE001 - no experiment, the observation stands
        return None
    return value if math.isfinite(value) else None


def _reinitialised_loss(s: Session) -> float | None:
    """The loss on the batch of a copy whose modules are re-initialised (``reset_parameters``): a loss at init far
    under chance that returns to chance is the weights' knowledge (a trained model), one that stays low reaches the
    targets another way (the inputs, the wrong tensor).  None when it cannot be measured."""
    import torch

    try:
        work, _ = s.fresh()
        reset = [m for m in work.modules() if callable(getattr(m, "reset_parameters", None))]
        if not reset:
            return None
        with torch.no_grad():
            for m in reset:
                m.reset_parameters()
            _, loss = s.loss.loss(work, s.loss.inputs)
        value = float(loss.detach().float())
    except Exception:  # noqa: BLE001 - no experiment, the observation stands
        return None
    return value if math.isfinite(value) else None


def _large_start(s: Session, loss: float, expected: float, label: str) -> Finding | None:
    """A loss far from chance at init with layers that start far above PyTorch's default scale (an initializer
    range of 1 typed for 0.02): the finding names them when a copy with them re-initialised starts near chance."""
    from nbdebug.core.doctor._init_scale import large_start

    found = large_start(s)
    if found is None or abs(found[1] - expected) > threshold("init_loss_rel") * expected:
        return None
    layers, fresh = found
    names = ", ".join(n for n, _ in layers[:4]) + (f" and {len(layers) - 4} more" if len(layers) > 4 else "")
    return finding("initial_loss_off", f"the loss at init is {loss:.4g}, far from {label}: {len(layers)} layers "
                   f"start at {min(r for _, r in layers):.2g}x to {max(r for _, r in layers):.2g}x the scale of "
                   f"PyTorch's default init for their fan-in ({names}), so the logits start large. Tried on a copy: "
                   f"with them re-initialised the loss at init is {fresh:.4g}", (s.last_module(),),
                   fixes=_named_head(s, fixes_for("init_too_large"), _last_layer(s)),
                   evidence={"initial": loss, "expected": expected, "reinitialised": fresh,
                             "large_layers": len(layers)})


def _named_head(s: Session, fixes: tuple[Fix, ...], last: str | None) -> tuple[Fix, ...]:
    """The fixes with the code's placeholder output layer (``model.head``) named as the detected last layer."""
    if not last:
        return fixes
    path = s.options.name + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in last.split("."))  # model[2]
    return tuple(Fix(f.title, f.code.replace("model.head", path)) for f in fixes)


def _last_layer(s: Session) -> str | None:
    """The last module with a weight matrix and a bias: the output layer a small init would start near chance."""
    import torch

    return next((n for n, m in reversed(list(s.user_model.named_modules())) if n and isinstance(
        getattr(m, "bias", None), torch.Tensor) and isinstance(getattr(m, "weight", None), torch.Tensor)
        and m.weight.dim() >= 2), None)


def candidates(s: Session) -> list[tuple[str, str, Any, str]]:
    """The experiment behind a classifier's loss far from chance at init: its fix (the output layer's weight scaled
    by 0.01, its bias at 0) on a copy, trained as long as the user's run; a start that training pays off is an info
    (``_experiments._attach``), as the regression offset is."""
    f = next((f for f in s.findings if f.kind == "initial_loss_off" and f.evidence.get("last_layer")), None)
    if f is None:
        return []
    if float(f.evidence["initial"]) >= threshold("init_loss_gross") * float(f.evidence["expected"]):
        # a start grossly off (twice chance or more) is a broken init or output scale whatever training does: the
        # output brought to unit scale on a copy says which
        return _output_scaled(s)
    name = str(f.evidence["last_layer"])

    def make(s: Session) -> tuple[Any, Any, Any, Any]:
        import torch

        work, opt = s.fresh()
        with torch.no_grad():
            layer = work.get_submodule(name)
            layer.weight.mul_(0.01)
            layer.bias.zero_()
        return work, opt, None, s.loss.inputs

    return [("initial_loss_off", f"{s.options.name}.{name} started small (weight x 0.01, bias 0)", make,
             f"with torch.no_grad():\n    {s.options.name}.{name}.weight.mul_(0.01); "
             f"{s.options.name}.{name}.bias.zero_()")]


def _output_scaled(s: Session) -> list[tuple[str, str, Any, str]]:
    """The model's output divided on a copy by the power of ten that brings its RMS at init under 1 (an output
    multiplied up in the forward, a temperature the wrong way round), where that RMS is over 10."""
    import torch

    from nbdebug.core.doctor._inputs import logits_of

    work, _ = s.fresh()
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        y = logits_of(s.loss.forward(work, s.loss.inputs))
    if not isinstance(y, torch.Tensor) or not y.is_floating_point() or not bool(torch.isfinite(y).all()):
        return []
    rms = float(y.float().pow(2).mean().sqrt())
    if not rms > 10:
        return []
    k = 10.0 ** math.ceil(math.log10(rms))

    def make(s: Session) -> tuple[Any, Any, Any, Any]:
        w, opt = s.fresh()
        w.register_forward_hook(lambda _m, _i, out: out / k if isinstance(out, torch.Tensor) else out)
        return w, opt, None, s.loss.inputs

    name = s.options.name
    return [("initial_loss_off", f"the model's output divided by {k:g} (its RMS at init is {rms:.3g})", make,
             f"logits = {name}(x) / {k:g}  # or remove the factor that scales the output up in forward()")]
