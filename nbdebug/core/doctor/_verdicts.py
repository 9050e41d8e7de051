"""Verdicts on what an experiment measured, for ``_experiments``: whether a regression offset still costs the
training, and fixes less the learning rate once a lower one was tried in vain."""

from __future__ import annotations

import math
from typing import Any

from nbdebug.core._findings import Finding, Fix

__all__ = ["offset_still_costs", "without_lr"]


def without_lr(fixes: tuple[Fix, ...]) -> tuple[Fix, ...]:
    """Fixes less the learning rate's, once a lower learning rate was tried on a copy and did not help; a fix that
    names it beside another remedy keeps the other ("lower the learning rate; use LeakyReLU/GELU")."""
    out = []
    for x in fixes:
        if "learning rate" not in x.title:
            out.append(x)
        elif ";" in x.title:
            rest = "; ".join(p.strip() for p in x.title.split(";") if "learning rate" not in p)
            out.append(Fix(rest, x.code))
    return tuple(out)


def offset_still_costs(f: Finding, e: Any) -> bool:
    """The regression offset matters to the training when, trained for the same steps, the copy started at the
    targets' mean ends well below the user's setup: the user's loss at the last step is still at least twice the
    copy's (noise layers move a loss by less), the offset not yet paid off."""
    if not (e.restores and math.isfinite(e.after)):
        return False
    before = e.before if math.isfinite(e.before) else math.inf
    return before >= 2 * e.after
