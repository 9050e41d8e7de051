"""Weights that turn non-finite in the run because the model trains in half precision: float16 holds nothing
above 65504 and rounds an optimizer's small terms (Adam's eps of 1e-8, its second moment of a small gradient) to
0, so one step can divide by 0.  The suspect is tested as every other one is: the same steps on a float32 copy; a
run that stays finite there puts the fault on the precision, and what diverged with it follows from it."""

from __future__ import annotations

from typing import Any

from nbdebug.core.doctor._session import Session, fixes_for

__all__ = ["half_precision", "CHECK"]

CHECK = "the run in float32 on a copy (weights kept in half precision turn non-finite)"
_HALF_EPS = 1e-4  # float16 and bfloat16 round at 1e-3 and 8e-3; float32 at 1e-7


def _to_float32(obj: Any) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.float() if obj.is_floating_point() else obj
    if isinstance(obj, dict):
        return {k: _to_float32(v) for k, v in obj.items()}
    if isinstance(obj, (tuple, list)):
        return type(obj)(_to_float32(v) for v in obj)
    return obj


def half_dtype(model: Any) -> Any:
    """The half-precision dtype most of the model's floating weights are kept in; None when they are not."""
    import torch

    dtypes = [p.dtype for p in model.parameters() if p.is_floating_point()]
    half = [d for d in dtypes if torch.finfo(d).eps > _HALF_EPS]
    return max(set(half), key=half.count) if half and len(half) * 2 > len(dtypes) else None


def half_precision(s: Session, step: int) -> bool:
    """The run's loss turned non-finite at ``step`` with the weights in half precision: train a float32 copy for the
    same steps and a few more; True (and the finding, first) when it stays finite there."""
    import math

    import torch

    from nbdebug.core.doctor._train_checks import one_step

    dtype = half_dtype(s.user_model)
    if dtype is None:
        return False
    work, opt = s.fresh()
    work.float()  # the same Parameter objects, converted in place: the optimizer still holds them
    inputs = _to_float32(s.loss.inputs)
    steps = max(step + 1, 10)
    torch.manual_seed(s.options.seed)
    losses = []
    for _ in range(steps):
        loss = one_step(s, work, opt, inputs)
        losses.append(float(loss.detach().float()))
        if not math.isfinite(losses[-1]):
            break
    if not all(map(math.isfinite, losses)):
        s.check(CHECK, f"non-finite at step {len(losses) - 1} in float32 too: not the precision")
        return False
    name = str(dtype).replace("torch.", "")
    s.add("nonfinite_forward", f"the weights are kept in {name} and the run's loss turns non-finite at step {step}; "
          f"tried on a copy: in float32 the same run stays finite ({losses[0]:.4g} -> {losses[-1]:.4g} in "
          f"{len(losses)} steps). {name} rounds an optimizer's small terms (Adam's eps=1e-8, the second moment of a "
          "small gradient) to 0 and overflows above 65504, so one step can divide by 0",
          ("the model's dtype",), fixes=fixes_for("nonfinite_half_precision"),
          evidence={"step": step, "dtype": name, "float32_loss_before": losses[0], "float32_loss_after": losses[-1],
                    "restores": True})
    s.check(CHECK, f"finite in float32 ({losses[0]:.4g} -> {losses[-1]:.4g} in {len(losses)} steps)")
    return True
