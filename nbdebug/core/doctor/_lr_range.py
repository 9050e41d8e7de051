"""The learning rates people train with, per optimizer family, and whether the user's lr is one of them."""

from __future__ import annotations

import math

from nbdebug.core.doctor._session import Session
from nbdebug.core.knowledge import threshold

__all__ = ["typical_lr", "usual_lr_that_moves"]

_TYPICAL_LR = {"SGD": 0.05, "ASGD": 0.05, "Adagrad": 0.01, "Rprop": 0.01, "LBFGS": 1.0}
_ADAPTIVE_LR = 1e-3


def typical_lr(s: Session) -> float:
    import torch

    opt = s.user_opt
    name = type(opt).__name__ if isinstance(opt, torch.optim.Optimizer) else "Adam"
    return _TYPICAL_LR.get(name, _ADAPTIVE_LR)


def usual_lr_that_moves(s: Session) -> bool:
    """The user's lr is in the range its optimizer family trains and fine-tunes with, and the loss moved at it
    (more than ``overfit_still_rel``).  An adaptive optimizer's range goes down to a hundredth of its typical lr
    (AdamW at 2e-5 for a fine-tune); plain SGD's to a tenth, counted on its effective lr ``lr / (1 - momentum)``
    (SGD at 1e-3 with momentum 0.9 fine-tunes; without momentum it takes fifty times as many steps)."""
    import torch

    init = s.initial_loss if s.initial_loss is not None else s.losses[0]
    final = min(s.losses[-max(1, len(s.losses) // 10):])
    moved = (init - final) / abs(init) if init and math.isfinite(final) else 0.0
    if s.lr_used is None:
        return False
    opt = s.user_opt
    group = opt.param_groups[0] if isinstance(opt, torch.optim.Optimizer) and opt.param_groups else {}
    momentum = group.get("momentum") if "momentum" in group else None
    if isinstance(momentum, (int, float)) and type(opt).__name__ in ("SGD", "ASGD"):
        lowest = typical_lr(s) / 10
        lr = s.lr_used / (1 - min(float(momentum), 0.99))
    else:
        lowest, lr = typical_lr(s) / 100, s.lr_used
    return lr >= lowest and moved >= threshold("overfit_still_rel")
