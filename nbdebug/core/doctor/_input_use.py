"""Whether a model's output depends on its input, measured directly: the output on the real inputs against the
output on zeroed inputs, on the model as given and on a trained copy.  A loss that a zero input also reaches is only
a suspicion (a model that learns slowly, a loss with a floor: label smoothing, MSE on probabilities); a model
ignores its input only when its output does not move with it."""

from __future__ import annotations

import math
from typing import Any

from nbdebug.core.doctor._inputs import logits_of, tensor_leaves
from nbdebug.core.doctor._session import Session
from nbdebug.core.knowledge import threshold

_UNCHANGED = 1e-6  # relative change of the output that is float rounding, not a dependence


def _output(s: Session, model: Any, inputs: Any) -> Any:
    import torch

    out = s.loss.forward(model, inputs)
    if out is None:  # a LightningModule trained through training_step only: its loss is what it outputs
        return s.loss.loss(model, inputs)[1].detach().float().reshape(-1)
    lg = logits_of(out)
    return None if not isinstance(lg, torch.Tensor) else lg.detach().float().reshape(-1)


def output_change(s: Session, model: Any, train: bool = False) -> float | None:
    """How far the output on zeroed inputs is from the output on the real inputs, relative to the output's size
    (in eval mode, dropout off, unless ``train``; the same seed for both forwards; the model's mode and the global
    RNG restored); None when it cannot be measured, or when the output on the real inputs is all zeros (a model
    whose head starts at zero, or whose normalisation in eval mode at init zeroes the features: no evidence)."""
    import torch

    was = model.training
    try:
        model.train(train)
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)  # a forward that samples draws the same numbers for both inputs
            real = _output(s, model, s.loss.inputs)
            torch.manual_seed(0)
            zero = _output(s, model, s.loss.zeroed_inputs())
    except Exception:  # a model that cannot take zeros: no measurement
        return None
    finally:
        model.train(was)
    if real is None or zero is None or real.shape != zero.shape or not bool(torch.isfinite(real).all()):
        return None
    size = float(real.norm())
    change = float((real - zero).norm())
    if size == 0:
        return math.inf if change > 0 else None
    return change / size


def unchanged_by_zeroing(s: Session) -> bool:
    """A finding when zeroing the inputs leaves the output of the model as given unchanged although the inputs
    are not zero (a forward on a constant, or on a tensor cached from another batch, detached)."""
    import torch

    leaves = [t for t in tensor_leaves(s.loss.model_inputs()) if isinstance(t, torch.Tensor)]
    if not leaves or not any(bool(t.any()) for t in leaves) or s.out_of_time("output with the inputs zeroed", 2):
        return False
    given = s.fresh()[0]
    # in eval mode and in train mode (batch statistics, the same dropout masks for both forwards): a forward that
    # does not use its input is unchanged in both; a model whose eval output at init is degenerate is not
    changes = [output_change(s, given), output_change(s, given, train=True)]
    measured = [c for c in changes if c is not None]
    if not measured or max(measured) > _UNCHANGED:
        return False
    change = max(measured)
    fading = next((f for f in s.findings if f.kind == "vanishing_gradients" and "activation_scale" in f.evidence), None)
    if fading is not None:  # the signal fades layer by layer: the input is used, and lost on the way
        s.add("ignores_input", f"with every input zeroed the output is unchanged (by {change:.2g} of its size, "
              "measured on a copy): the signal fades with depth (the finding above) before it reaches the output",
              ("inputs",), fixes=fading.fixes, evidence={"output_change": change})
    else:
        s.add("ignores_input", "with every input zeroed the output is unchanged (measured on a copy, dropout off): "
              "the forward pass does not depend on its input (a constant, or a tensor cached and detached, stands "
              "in for it)", ("inputs",), evidence={"output_change": change})
    s.check("output depends on the input", "no: the output is the same with the inputs zeroed")
    return True


def output_uses_input(s: Session, trained: Any) -> bool:
    """True when the output moves with the input on the model as given or on ``trained`` (a copy after training);
    the check line says what was measured."""
    given, _ = s.fresh()
    changes = [output_change(s, given), output_change(s, trained)]
    measured = [c for c in changes if c is not None]
    if not measured:
        return False
    floor = threshold("input_use_rel")
    said = ", ".join(f"{c:.2g}" for c in measured)
    if max(measured) > floor:
        s.check("output against the input", f"zeroing the inputs changes the output by {said} of its size "
                "(as given, trained): the model uses its input; the zero-input loss is no verdict")
        return True
    s.check("output against the input", f"zeroing the inputs changes the output by {said} of its size")
    return False
