"""A loss that turns non-finite only once the model is confident: the overfit run stops as soon as the batch is
fitted, but the user's training goes on, and a loss written as the log of a probability (binary cross-entropy
from its formula on ``sigmoid`` outputs) reaches ``log(0)`` when the probabilities round to exactly 0 or 1 in
float32; ``0 * -inf`` is NaN.  So the fitted copy keeps training for the steps the run was given: a loss that
turns non-finite while the model's outputs are still finite is made in the loss code, and the op and line that
made it are found by running that loss again under a mode that notes the first non-finite op.
"""

from __future__ import annotations

import math
from typing import Any

from nbdebug.core.doctor._inputs import logits_of, step_optimizer
from nbdebug.core.doctor._session import Session, fixes_for

__all__ = ["keep_training", "in_the_run", "CHECK"]

CHECK = "training on after the batch is fitted (a loss that turns non-finite once the model is confident)"


def keep_training(s: Session, work: Any, opt: Any) -> None:
    import time

    import torch

    from nbdebug.core.doctor._nonfinite_site import loss_site

    done = len(s.losses)
    left = s.options.steps - done
    if not s.losses or left <= 0 or not all(math.isfinite(v) for v in s.losses) or s.cut_by_budget \
            or min(s.losses[-5:]) > s.fit_target():
        s.check(CHECK, "skipped: the overfit run did not stop early on a fitted batch")
        return
    end = s.deadline(0.3)
    if end is not None:
        # a model confident enough to reach log(0) gets there within a few times the steps it took to fit; on a big
        # model the steps left would otherwise spend most of the budget on a healthy run (ResNet-18: 17 of 21 s)
        end = min(end, time.perf_counter() + max(2.0, 4.0 * done * s.step_time))
    for i in range(left):
        if end is not None and time.perf_counter() > end:
            s.check(CHECK, f"finite for {i} more steps (stopped by the time budget)")
            return
        opt.zero_grad(set_to_none=True)
        out, loss = s.loss.loss(work, s.loss.inputs)
        if not bool(torch.isfinite(loss.detach()).all()):
            y = logits_of(out)
            if isinstance(y, torch.Tensor) and y.is_floating_point() and not bool(torch.isfinite(y).all()):
                s.check(CHECK, f"non-finite at step {done + i} in the model's own output")
                return
            op, site = loss_site(s, work)
            _found(s, done + i, float(min(s.losses)), op, site)
            return
        loss.backward()

        def closure() -> Any:
            opt.zero_grad(set_to_none=True)
            _, again = s.loss.loss(work, s.loss.inputs)
            again.backward()
            return again

        step_optimizer(opt, closure)
    s.check(CHECK, f"finite for {left} more steps")


def in_the_run(s: Session) -> None:
    """The overfit run's loss turned non-finite at step k: a fresh copy is trained again for k steps and its loss at
    step k made once more; finite model outputs with a non-finite loss put the fault in the loss code (the log of
    a probability), which comes first, and what diverged with it follows from it."""
    import torch

    from nbdebug.core.doctor._nonfinite_site import loss_site
    from nbdebug.core.doctor._train_checks import one_step

    k = next(i for i, v in enumerate(s.losses) if not math.isfinite(v))
    work, opt = s.fresh()
    torch.manual_seed(s.options.seed)
    for _ in range(k):
        one_step(s, work, opt, s.loss.inputs)
    with torch.no_grad():
        out, loss = s.loss.loss(work, s.loss.inputs)
    y = logits_of(out)
    if not bool(torch.isfinite(loss).all()) and _half_precision(s, k):
        return
    if bool(torch.isfinite(loss).all()) or not isinstance(y, torch.Tensor) or not bool(torch.isfinite(y).all()):
        s.check(CHECK, f"the loss turned non-finite at step {k}; the copy trained again has "
                + ("a finite loss there" if bool(torch.isfinite(loss).all()) else "non-finite outputs there"))
        return
    op, site = loss_site(s, work)
    top = float(y.detach().abs().max()) if y.numel() else 0.0
    if not _made_by_loss_code(op) or top >= _SANE:
        # outputs that grew huge (an lr too high) overflow in any loss (their square in MSE): the divergence is
        # the cause, found by the other checks, not the loss code
        s.check(CHECK, f"the loss turned non-finite at step {k} from finite outputs (largest |output| {top:.3g}"
                + (f", made by {op}" if op else "") + "): "
                + ("outputs that diverged, not the loss code" if top >= _SANE else "not an op that is unsafe on "
                   "sane inputs (log, division, square root), so not put on the loss code"))
        return
    before = list(s.findings)
    _found(s, k, min([v for v in s.losses if math.isfinite(v)] or [math.nan]), op, site, fitted=False)
    _first(s, before)


def _half_precision(s: Session, k: int) -> bool:
    """Weights kept in half precision, tried in float32 on a copy: the cause, first, when that run stays finite."""
    from nbdebug.core.doctor._precision import half_precision

    before = list(s.findings)
    if not half_precision(s, k):
        return False
    _first(s, before)
    return True


def _first(s: Session, before: list[Any]) -> None:
    """The finding just added first; the loud ones found before it follow from it (its first fix theirs)."""
    from nbdebug.core.knowledge import entry, finding

    cause = s.findings.pop()
    how = entry("consequence_of_another")
    restored = {e.cause for e in s.experiments if e.restores}
    s.findings = [cause] + [finding(f.kind, how.summary.format(message=f.message, cause_title=cause.title.lower()),
                                    f.where, severity="warning" if f.severity == "error" else f.severity,
                                    fixes=(cause.fixes[0],) if cause.fixes else f.fixes, evidence=dict(f.evidence))
                            if f.severity != "info" and f.kind not in restored and not f.evidence.get("restores")
                            else f for f in before]
    s.explained = True


# ops that turn sane finite inputs non-finite: a log of 0, a division by 0, a square root of a negative, a negative
# power of 0 (the loss code's own faults); anything else needs inputs that diverged first
_UNSAFE = ("log", "div", "truediv", "true_divide", "rtruediv", "reciprocal", "sqrt", "rsqrt", "pow", "rpow", "xlogy")
_SANE = 1e6  # outputs larger than this come from a divergence, not from the loss code


def _made_by_loss_code(op: str | None) -> bool:
    name = (op or "").rsplit(".", 1)[-1].strip("_")
    return any(name == u or (u == "log" and name.startswith("log")) for u in _UNSAFE)


def _found(s: Session, step: int, best: float, op: str | None, site: str | None, fitted: bool = True) -> None:
    made = f"; made by {op}" + (f" at {site}" if site else "") if op else ""
    log = op is not None and op.rsplit(".", 1)[-1].lstrip("_").startswith("log")
    s.add("nonfinite_forward", ("trained on after the batch was fitted " if fitted else "in the run on one batch ")
          + f"(lowest loss {best:.3g}), the loss turns "
          f"non-finite at step {step} while the model's outputs are finite: it is made in the loss code{made}"
          + (": a log of a probability reaches log(0) once the model is confident (a sigmoid or softmax rounds to "
             "exactly 0 or 1 in float32)" if log else ""),
          ("the loss code", *((site,) if site else ())),
          fixes=fixes_for("nonfinite_loss_code") if log else None,
          evidence={"step": step, **{k: v for k, v in (("op", op), ("line", site)) if v}})
    s.check(CHECK, f"non-finite at step {step}, in the loss code")
