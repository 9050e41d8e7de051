"""Verdicts on what an experiment measured, for ``_experiments``: whether a regression offset still costs the
training, fixes less the learning rate once a lower one was tried in vain, and what a growing gradient norm is
once a lower learning rate was tried on it."""

from __future__ import annotations

import math
from typing import Any

from nbdebug.core._findings import Finding, Fix, Severity
from nbdebug.core.knowledge import finding

__all__ = ["growth_tried", "offset_still_costs", "without_lr"]


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


def growth_tried(f: Finding, e: Any, stuck: bool) -> Finding:
    """Gradients that exploded, once a lower learning rate (``e``, the experiment) was tried on a copy: where it
    learns the batch better, its measured fix comes first; where it does not, the lower learning rate is not the
    fix and the growth is not shown to be the cause.  It stays as what was observed, without the lr's fixes: a
    warning when the batch is not learned (something else holds it back), an info when it is (gradients grow while
    a model memorises a batch it cannot fit the easy way, e.g. labels that do not follow from the inputs)."""
    said = f"{f.message}. Tried on a copy: {e.said()}"
    evidence = {**dict(f.evidence), **e.evidence()}
    if e.restores:
        return finding(f.kind, said, f.where, severity=f.severity, evidence=evidence,
                       fixes=(Fix(f"lower the learning rate ({e.change}, measured on a copy)", e.code), *f.fixes))
    worse = math.isfinite(e.after) and math.isfinite(e.before) and e.after > e.before
    verdict = (f"{said}, {'worse' if worse else 'no better'} than yours, so the learning rate is not shown to be why "
               "the gradients grew" + ("" if stuck else "; the batch was learned all the same, so the growth costs "
                                       "this training nothing measurable"))
    return finding(f.kind, verdict, f.where, severity=Severity.WARNING if stuck else Severity.INFO,
                   fixes=without_lr(f.fixes), evidence=evidence)
