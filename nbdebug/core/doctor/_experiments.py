"""The doctor's experiments: each suspected cause is tested by applying its fix to a fresh copy and measuring the
loss on the same batch, at the same step, against the user's own setup.

When the batch is not learned, a differential within the time budget: the fixes the setup checks suggest (an
optimizer over every trainable parameter, train mode, the loss on matching shapes, weight decay off, every
parameter trainable, standardised inputs) and the learning rate up and down.  When the run is unstable: the
learning rate down.  Findings at warning or above whose fix can be tried get their experiment too.

What an experiment changes is said in words (``lr=0.001 instead of 1e-08``); what it measured goes into the
finding's message and evidence (before and after).  A suspect whose fix does not move the result is not called
the cause; the experiments are ranked by measured effect, and a finding that follows from another says so.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nbdebug.core._findings import Finding, Fix, Severity
from nbdebug.core.doctor import _batch_axis, _depth_fixes, _init_loss, _init_scale
from nbdebug.core.doctor._inputs import set_lr
from nbdebug.core.doctor._loss_probe import LossCall, LossProbe
from nbdebug.core.doctor._lr_range import typical_lr, usual_lr_that_moves
from nbdebug.core.doctor._session import Session, replaced
from nbdebug.core.doctor._setup_checks import is_frozen_on_purpose
from nbdebug.core.doctor._train_checks import learned_said, overfit_said, train
from nbdebug.core.doctor._verdicts import growth_tried, offset_still_costs, without_lr
from nbdebug.core.knowledge import entry, finding, threshold

__all__ = ["Experiment", "run", "loss_at", "trial", "standardised"]

# what each optimizer family trains a small problem with, for "lr up" when the user's is far below
# findings that name a wiring fault outright: the batch cannot be learned whatever the learning rate
_WIRING = ("probabilities_to_loss", "activation_on_logits", "no_gradient", "loss_below_minimum", "ignores_input")
_MIN_STEPS = 10  # an experiment takes at least this many steps (fewer when the user's run took fewer)
# fixes that change what the loss measures: the user's curve says nothing of whether they fit the batch
_LOSS_REDEFINED = ("loss_below_minimum", "probabilities_to_loss", "loss_broadcast")


@dataclass(frozen=True)
class Experiment:
    """One fix tried on a copy: what was suspected, what was changed, and the loss it measured.

    ``before`` is the user's setup at the same step (``steps``) as ``after``; ``start`` the loss at step 0.
    """

    cause: str  # the knowledge slug of the suspected cause (a finding's kind, or lr_too_low / lr_too_high)
    change: str  # what was changed on the copy, in words
    steps: int
    start: float
    before: float
    after: float
    fitted: bool
    restores: bool
    code: str = ""  # the fix as code, where one line says it
    base_start: float | None = None  # the user's loss at step 0, where the fix changes what the loss is

    @property
    def effect(self) -> float:
        """How much lower the loss ended than with the user's setup, as a share of the loss at step 0."""
        if not (math.isfinite(self.after) and math.isfinite(self.start)):
            return -math.inf
        before = self.before if math.isfinite(self.before) else max(self.start, self.after) * 10
        return (before - self.after) / max(abs(self.start), 1e-12)

    def said(self) -> str:
        """``with lr=0.001 instead of 1e-08 the loss went 2.303 -> 0.041 in 60 steps (the batch is fitted); with
        yours 2.303 -> 2.291``."""
        fit = " (the batch is fitted)" if self.fitted else ""
        return (f"with {self.change} the loss went {self.start:.4g} -> {self.after:.4g} in {self.steps} steps{fit}; "
                f"as you have it, {self.user_start:.4g} -> {self.before:.4g}")

    @property
    def user_start(self) -> float:
        return self.start if self.base_start is None else self.base_start

    def evidence(self) -> dict[str, Any]:
        return {"tried": self.change, "before": f"{self.user_start:.4g} -> {self.before:.4g} in {self.steps} steps",
                "after": f"{self.start:.4g} -> {self.after:.4g} in {self.steps} steps"
                + (" (fitted)" if self.fitted else ""), "restores": self.restores}

    def row(self) -> dict[str, Any]:
        return {"cause": self.cause, "change": self.change, "steps": self.steps, "start": self.start,
                "before": self.before, "after": self.after, "fitted": self.fitted, "restores": self.restores}


def loss_at(curve: list[float], step: int) -> float:
    """The loss a curve reached by ``step`` (the lowest of its last tenth up to there: one noisy step is not
    the verdict)."""
    step = max(1, min(step, len(curve)))
    w = max(1, step // 10)
    window = [v for v in curve[step - w: step]]
    finite = [v for v in window if math.isfinite(v)]
    return min(finite) if len(finite) == len(window) else math.nan


# -- the candidates --------------------------------------------------------------------------------------------
Variant = Callable[[Session], tuple[Any, Any, Any, Any]]  # -> (work, opt, adapter or None, inputs)


def _fresh(s: Session) -> tuple[Any, Any, Any, Any]:
    work, opt = s.fresh()
    return work, opt, None, s.loss.inputs


def _with_lr(factor: float) -> Variant:
    def make(s: Session) -> tuple[Any, Any, Any, Any]:
        work, opt, a, x = _fresh(s)
        for g in opt.param_groups:
            g["lr"] = float(g["lr"]) * factor
        return work, opt, a, x

    return make


def _wd_off(s: Session) -> tuple[Any, Any, Any, Any]:
    work, opt, a, x = _fresh(s)
    for g in opt.param_groups:
        if "weight_decay" in g:
            g["weight_decay"] = 0.0
    return work, opt, a, x


def _train_mode(s: Session) -> tuple[Any, Any, Any, Any]:
    work, opt, a, x = _fresh(s)
    work.train()
    return work, opt, a, x


def _bias_at(name: str, value: float) -> Variant:
    def make(s: Session) -> tuple[Any, Any, Any, Any]:
        import torch

        work, opt, a, x = _fresh(s)
        with torch.no_grad():
            work.get_submodule(name).bias.fill_(value)
        return work, opt, a, x

    return make


def _optimizer_over_all(s: Session, work: Any) -> Any:
    """The user's optimizer class and first group's settings, over every trainable parameter of ``work``."""
    import torch

    from nbdebug.core.doctor._inputs import construct_optimizer

    params = [p for p in work.parameters() if p.requires_grad]
    t = s.user_opt if isinstance(s.user_opt, torch.optim.Optimizer) and s.user_opt.param_groups else None
    if t is None:
        return torch.optim.Adam(params, lr=s.lr_used or 3e-3)
    hp = {k: v for k, v in t.param_groups[0].items() if k != "params"}
    hp["lr"] = set_lr(t.param_groups[0]) if s.options.lr is None else s.options.lr
    return construct_optimizer(type(t), t.defaults, [{**hp, "params": params}])


def _full_optimizer(s: Session) -> tuple[Any, Any, Any, Any]:
    work, _, a, x = _fresh(s)
    return work, _optimizer_over_all(s, work), a, x


def _unfreeze(s: Session) -> tuple[Any, Any, Any, Any]:
    work, _, a, x = _fresh(s)
    for p in work.parameters():
        if p.is_floating_point():
            p.requires_grad_(True)
    return work, _optimizer_over_all(s, work), a, x


class _LossRewritten:
    """The user's way of making the loss (``loss_fn``, a model's own loss, ``training_step``), with what the torch
    loss is given changed by ``rewrite``: an experiment tries a fix of the loss's inputs without knowing where the
    user's code calls the loss."""

    def __init__(self, adapter: Any, rewrite: Any) -> None:
        self.adapter = adapter
        self.rewrite = rewrite

    def loss(self, work: Any, inputs: Any, targets: Any = None) -> tuple[Any, Any]:
        with LossProbe(rewrite=self.rewrite):
            return self.adapter.loss(work, inputs, targets)


def _rewriting(rewrite: Any) -> Variant:
    def make(s: Session) -> tuple[Any, Any, Any, Any]:
        work, opt, _, x = _fresh(s)
        return work, opt, _LossRewritten(s.loss, rewrite), x

    return make


def _to_target_shape(call: LossCall, x: Any) -> Any:
    """The loss's input reshaped to its target's shape ((N, 1) -> (N,)), when they hold as many values."""
    t = call.target
    if t is not None and x.numel() == t.numel() and tuple(x.shape) != tuple(t.shape):
        return x.reshape(t.shape)
    return x


def _as_logits(call: LossCall, x: Any) -> Any:
    """Probabilities turned back into what the loss expects: ``log p`` for a softmax (``log_softmax(log p)`` is
    ``log_softmax(z)``, so cross-entropy on it is cross-entropy on the logits: the Softmax removed), ``logit(p)``
    for a sigmoid, ``log p`` (or ``log_softmax`` of raw scores) for NLL."""
    import torch

    if call.name == "binary_cross_entropy_with_logits":
        return torch.logit(x, eps=1e-6)
    if call.name == "nll_loss" and not _rows_are_probabilities(call, x):
        return torch.log_softmax(x, dim=call.class_dim)
    return x.clamp_min(torch.finfo(x.dtype).tiny).log()


def _rows_are_probabilities(call: LossCall, x: Any) -> bool:
    xd = x.detach()
    return bool((xd >= 0).all()) and bool(((xd.sum(dim=call.class_dim) - 1).abs() < 1e-3).all())


def _standardised(s: Session) -> tuple[Any, Any, Any, Any]:
    work, opt, a, x = _fresh(s)
    x = _map_first_float(x, lambda t: (t - t.mean()) / t.std().clamp_min(1e-8))
    return work, opt, a, x


def _map_first_float(obj: Any, fn: Any, done: list[bool] | None = None) -> Any:
    import torch

    done = [False] if done is None else done
    if isinstance(obj, torch.Tensor):
        if not done[0] and obj.is_floating_point():
            done[0] = True
            return fn(obj)
        return obj
    if isinstance(obj, (tuple, list)):
        return type(obj)(_map_first_float(o, fn, done) for o in obj)
    if isinstance(obj, dict):
        return {k: _map_first_float(v, fn, done) for k, v in obj.items()}
    return obj


def _candidates(s: Session, stuck: bool, unstable: bool) -> list[tuple[str, str, Variant, str]]:
    """(cause, change in words, variant, fix code), the setup's suspects first, then the learning rate."""
    import torch

    out: list[tuple[str, str, Variant, str]] = []
    lr = s.lr_used
    if s.has("optimizer_coverage") and s.coverage_missing:
        out.append(("optimizer_coverage", "an optimizer over every trainable parameter", _full_optimizer,
                    entry("optimizer_coverage").fixes[0].code))
    out.extend(_batch_axis.candidates(s) + _init_scale.candidates(s) + _depth_fixes.candidates(s)
               + _init_loss.candidates(s))
    if s.has("eval_mode"):
        out.append(("eval_mode", "the model in train mode", _train_mode, "model.train()"))
    if s.broadcast is not None:
        out.append(("loss_broadcast", f"the loss on outputs reshaped to the targets' shape {s.broadcast[1]}",
                    _rewriting(_to_target_shape), "loss = loss_fn(out.squeeze(-1), y)  # or y.unsqueeze(-1)"))
    if s.has("probabilities_to_loss") and s.loss_in is not None:
        out.append(("probabilities_to_loss", "the probabilities turned back into logits before the loss (as "
                    "if the final Softmax/Sigmoid were removed)", _rewriting(_as_logits),
                    entry("probabilities_to_loss").fixes[0].code))
    if s.has("loss_below_minimum") and s.loss_in is not None and s.loss_in.name == "nll_loss":
        out.append(("loss_below_minimum", "log_softmax applied to the scores before NLLLoss",
                    _rewriting(_as_logits), entry("loss_below_minimum").fixes[0].code))
    frozen = [n for n, p in s.user_model.named_parameters() if not p.requires_grad and p.is_floating_point()]
    if frozen and (stuck or any(f.kind == "frozen_parameters" and f.severity != "info" for f in s.findings)) \
            and not all(is_frozen_on_purpose(s, n) for n in frozen):
        out.append(("frozen_parameters", "every parameter trainable", _unfreeze,
                    "for p in model.parameters(): p.requires_grad_(True)"))
    if s.has("unnormalised_inputs"):
        out.append(("unnormalised_inputs", "the inputs standardised to mean 0, std 1", _standardised,
                    s.input_fixes("input_scale_downstream")[0].code))
    offset = next((f for f in s.findings if f.kind == "initial_loss_off" and f.evidence.get("bias_module")), None)
    if offset is not None:  # the regression offset: judged by training, not by the loss at init alone
        name, mean = str(offset.evidence["bias_module"]), float(offset.evidence["targets_mean"])
        out.append(("initial_loss_off", f"{s.options.name}.{name}.bias at the targets' mean {mean:.4g}",
                    _bias_at(name, mean), f"with torch.no_grad():\n    {s.options.name}.{name}.bias.fill_({mean:.4g})"))
    opt = s.user_opt
    wd = opt.param_groups[0].get("weight_decay") if isinstance(opt, torch.optim.Optimizer) else None
    if (stuck or unstable) and isinstance(wd, (int, float)) and wd > 0:
        out.append(("weight_decay_high", f"weight_decay=0 instead of {wd:g}", _wd_off,
                    "for g in opt.param_groups: g['weight_decay'] = 0.0"))
    if lr is None or not lr > 0 or (s.coverage_missing and len(s.coverage_missing) == sum(
            1 for p in s.user_model.parameters() if p.requires_grad)):
        return out
    if s.has(*_WIRING):
        return out  # the wiring is wrong in a way no learning rate mends: that finding says what to fix
    typical = typical_lr(s)
    factors: list[float] = []
    if unstable or s.has("dead_activations"):
        factors = [typical / lr, 0.1] if lr > 3 * typical else [0.1, 0.01]
    elif stuck:
        if lr > 3 * typical:
            factors = [typical / lr, 0.1, 10.0]
        elif typical > 3 * lr:
            factors = [typical / lr, 10.0, 0.1]
        else:
            factors = [10.0, 0.1]
    for f in dict.fromkeys(factors):
        cause = "lr_too_high" if f < 1 else "lr_too_low"
        out.append((cause, f"lr={lr * f:.3g} instead of {lr:g}", _with_lr(f),
                    f"for g in opt.param_groups: g['lr'] = {lr * f:.3g}"))
    return out


# -- running them ----------------------------------------------------------------------------------------------
def _try(s: Session, cause: str, change: str, variant: Variant, code: str, steps: int,
         deadline: float | None, early_stop: bool = True) -> Experiment | None:
    init = s.initial_loss if s.initial_loss is not None else s.losses[0]
    target = s.fit_target()
    try:
        work, opt, adapter, inputs = variant(s)
        curve = train(s, work, opt, inputs, steps=steps, phase=f"experiment: {change}", early_stop=early_stop,
                      deadline=deadline, adapter=adapter, min_steps=_MIN_STEPS)
    except Exception as e:  # a fix that cannot run on this setup is not evidence either way
        s.check(f"experiment: {change}", f"could not run: {type(e).__name__}: {e}")
        return None
    if not curve:
        return None
    k = len(curve)
    after = loss_at(curve, k)
    before = loss_at(s.losses, k)
    start = curve[0] if math.isfinite(curve[0]) else init
    # a fix of what the loss is given changes the loss itself: fitted is judged from its own start, and the
    # user's own start is said beside it
    base = init if abs(start - init) > 0.05 * max(abs(init), 1e-12) else None
    if base is not None:
        target = s.fit_target(start)
    fitted = math.isfinite(after) and after <= target
    ref = before if math.isfinite(before) else math.inf
    # learning restored: the batch is fitted, or the loss ends well below the user's at the same step (by a share
    # of where it started, and of where the user's ended or a multiple of how far the user's fell: a run that
    # barely moves is restored by one that learns many times as much)
    user_gain = (init if base is None else base) - ref if math.isfinite(ref) else 0.0
    restores = math.isfinite(after) and (fitted or (
        ref - after >= 0.1 * abs(start) and (after <= (1 - threshold("restores_rel")) * ref
                                             or start - after >= threshold("restores_gain") * max(user_gain, 0.0))))
    if math.isfinite(before) and before <= s.fit_target() and cause not in _LOSS_REDEFINED:
        restores = False  # the user's own setup fits the batch by then: there is nothing to restore
    ex = Experiment(cause=cause, change=change, steps=k, start=start, before=before, after=after, fitted=fitted,
                    restores=bool(restores), code=code, base_start=base)
    s.check(f"experiment: {change}", ex.said())
    return ex


def trial(s: Session, cause: str, change: str, variant: Variant, code: str) -> Experiment | None:
    """One fix tried on a copy after the differential (a check that found its suspect later), trained as long as
    the user's run; listed with the other experiments."""
    ex = _try(s, cause, change, variant, code, len(s.losses), s.deadline(0.5))
    if ex is not None:
        s.experiments = [*s.experiments, ex]
    return ex


standardised = _standardised


def run(s: Session) -> None:
    """The differential (the batch is not learned, or the run is unstable) and the experiments behind the
    findings whose fix can be tried; then each finding says what was tried and what it changed."""
    if not s.losses:
        return
    overfit = next((f for f in s.findings if f.kind == "cannot_overfit"), None)
    # the batch is not learned: an error or a warning (an info says the run was only cut short or slow)
    stuck = overfit is not None and overfit.severity != "info" and not s.unstable
    unstable = bool(s.unstable) or s.has("exploding_gradients")
    cands = _candidates(s, stuck, unstable)
    if not cands:
        return
    n = len(s.losses)
    t_end = s.deadline(0.6)
    done: list[Experiment] = []
    for i, (cause, change, variant, code) in enumerate(cands):
        if cause.startswith("lr_") and any(e.cause.startswith("lr_") and (e.fitted or e.cause == cause and e.restores)
                                           for e in done):
            continue  # a learning rate that fits the batch (or restores learning that way) is the verdict
        left = None if t_end is None else t_end - time.perf_counter()
        if left is not None and left <= 0:
            s.check(f"experiment: {change}", "skipped: out of time")
            continue
        per = None if t_end is None or left is None else time.perf_counter() + left / (len(cands) - i)
        # a loss below its minimum ends the user's run at once (it looks fitted), and so does a run in which nothing
        # moves (its few still steps give no steady pace either): a fix gets the user's steps, as time allows
        most = s.options.steps if s.has("loss_below_minimum") or s.params_still is not None else n
        steps = most if per is None or s.step_time <= 0 or s.params_still is not None else max(
            min(most, _MIN_STEPS), min(most, int((per - time.perf_counter()) / s.step_time)))
        offset = cause == "initial_loss_off"  # an offset the user's run pays off later is judged at its end
        ex = _try(s, cause, change, variant, code, n if offset else steps, t_end if offset else per,
                  early_stop=not offset)
        if ex is not None:
            done.append(ex)
    s.experiments = sorted(done, key=lambda e: (not e.restores, not e.fitted, -e.effect))
    _attach(s)


def _attach(s: Session) -> None:
    """Each experimented finding says what was tried; the finding that failed to learn names the measured cause."""
    best = next((e for e in s.experiments if e.restores), None)
    by_cause: dict[str, Experiment] = {}
    for e in s.experiments:
        by_cause.setdefault(e.cause, e)
    for i, f in enumerate(s.findings):
        e = by_cause.get(f.kind)
        if e is None or f.kind == "cannot_overfit":
            continue
        if f.kind == "initial_loss_off" and not offset_still_costs(f, e):
            # the offset at init costs the training nothing measurable: the user's run learns as well without it
            why = ("your own run fits the batch by then too: training pays the offset off" if math.isfinite(e.before)
                   and e.before <= s.fit_target() else "it does not end at half your loss: the offset is not what "
                   "holds this training back")
            s.findings[i] = replaced(f, message=f"{f.message}. Tried on a copy, trained as long as your run: "
                                     f"{e.said()}; {why}", severity=Severity.INFO,
                                     evidence={**dict(f.evidence), **e.evidence()})
            s.not_causes.add(f.kind)
            continue
        if e.restores:
            msg = f"{f.message}. Tried on a copy: {e.said()}"
            if f.kind == "initial_loss_off":  # the measured start leads the finding's fixes
                s.findings[i] = replaced(f, message=msg, evidence={**dict(f.evidence), **e.evidence()}, fixes=(
                    Fix(f"bring the output scale to about 1 at init: {e.change} (measured on a copy)", e.code),
                    *f.fixes))
                continue
        else:
            msg = (f"{f.message}. Tried on a copy: {e.said()}, so this is not why the batch is not learned"
                   if s.has("cannot_overfit") else f"{f.message}. Tried on a copy: {e.said()}")
            s.not_causes.add(f.kind)
        s.findings[i] = replaced(f, message=msg, evidence={**dict(f.evidence), **e.evidence()})
    lower = by_cause.get("lr_too_high")
    for i, f in enumerate(s.findings):
        if f.kind == "dead_activations" and "learning rate is too high" in f.message and lower is not None:
            if lower.restores:
                msg = f"{f.message}. Tried on a copy: {lower.said()}"
            else:  # the lower learning rate did not help: the claim goes
                msg = f.message.split("; they fired at init")[0] + "; they fired at init, and the updates " \
                    f"silenced them (a lower learning rate did not learn the batch better: {lower.said()})"
            fixes = ((Fix(f"lower the learning rate ({lower.change}, measured on a copy)", lower.code), *f.fixes[1:])
                     if lower.restores else without_lr(entry("dead_activations").fixes))
            quiet = not lower.restores and not s.has("cannot_overfit")  # nothing to fix: the batch was learned
            if quiet:
                msg += "; the batch was learned all the same, so they cost this training nothing measurable"
            s.findings[i] = replaced(f, message=msg, evidence={**dict(f.evidence), **lower.evidence()}, fixes=fixes,
                                     severity=Severity.INFO if quiet else f.severity)
    for i, f in enumerate(s.findings):
        if f.kind == "exploding_gradients" and "lr_too_high" in by_cause:
            stuck = bool(s.unstable) or any(g.kind == "cannot_overfit" and g.severity != "info" for g in s.findings)
            s.findings[i] = growth_tried(f, by_cause["lr_too_high"], stuck)
            if not by_cause["lr_too_high"].restores:
                s.not_causes.add(f.kind)
    if best is not None:
        _symptoms_follow(s, best)
    idx = next((i for i, f in enumerate(s.findings) if f.kind == "cannot_overfit"), None)
    if idx is None:
        return
    if best is not None and best.cause == "weight_decay_high" and not s.has("weight_decay_high"):
        _weight_decay_finding(s, best)
        idx += 1
    f = s.findings[idx]
    tried = [e for e in s.experiments]
    if s.unstable and (best is None or best.cause != "lr_too_high"):
        f = s.findings[idx] = _lr_claim_withdrawn(s, f, tried)
        if f.severity == "info":
            s.not_causes.update(e.cause for e in tried)
            return
    if best is None:
        if not tried:
            return
        none = "; ".join(f"{e.change}: {e.start:.4g} -> {e.after:.4g}" for e in tried)
        fixes = tuple(x for x in f.fixes if "learning rate" not in x.title) or f.fixes
        s.findings[idx] = replaced(f, message=f"{f.message}. Tried on a copy, none of these learned the batch "
                                   f"better ({none})", fixes=fixes,
                                   evidence={**dict(f.evidence), "tried": ", ".join(e.change for e in tried)})
        s.not_causes.update(e.cause for e in tried)
        return
    cause_f = next((g for g in s.findings if g.kind == best.cause), None)
    if cause_f is not None:
        s.findings[idx] = replaced(
            f, message=f"{f.message}; this follows from the finding above, {cause_f.title.lower()}: {best.said()}",
            severity="warning" if f.severity == "error" else f.severity,
            fixes=(Fix(f"fix that first: {cause_f.fix or cause_f.title}", best.code), ),
            evidence={**dict(f.evidence), **best.evidence()})
        s.explained = True
        return
    share = s.learned_share()
    if best.cause == "lr_too_low" and (share >= threshold("overfit_learns_rel") or usual_lr_that_moves(s)):
        # the user's own run learns, or moves at an lr in the range people train and fine-tune with: that a higher
        # lr memorises one batch faster is a suggestion, not a fault
        s.findings[idx] = replaced(
            f, message=f"{overfit_said(s)}: at your lr={s.lr_used:g} the loss moves ({learned_said(s, share)}), "
            f"just not to zero in this run. Tried on a copy: {best.said()}. A higher learning rate memorises one "
            "batch faster, which says nothing against yours for training (fine-tuning uses lrs this low)",
            severity="info",
            fixes=(Fix(f"only if your training is slow too: {best.change} (measured on a copy)", best.code), ),
            evidence={**dict(f.evidence), "learned_share": round(share, 4), **best.evidence()})
        s.explained = True
        return
    title = ("lower the learning rate" if best.cause == "lr_too_high" else "raise the learning rate") + \
        f" ({best.change}, measured on a copy)"
    severity = f.severity if best.fitted else "warning"
    message = f.message
    if f.severity == "info" and "stochastic" in f.evidence:
        # the note that the model's noise keeps the loss up is withdrawn: another lr learns the batch better, noise
        # and all (both curves are measured in the same noisy mode)
        off = s.dropout_off_loss
        message = overfit_said(s) + ("" if off is None else f" ({off:.4g} with dropout off)")
        severity = "error" if best.fitted else "warning"
    # a learning rate that fits the batch is the answer: the generic suspects (a frozen layer, a detached tensor)
    # would send the user after what the experiment has shown is not there
    others = () if best.fitted else tuple(x for x in f.fixes if "learning rate" not in x.title)[:1]
    s.findings[idx] = replaced(f, message=f"{message}. Tried on a copy: {best.said()}",
                               severity=severity, fixes=(Fix(title, best.code), *others),
                               evidence={**dict(f.evidence), **best.evidence()})
    s.explained = True
    _cause_above_symptoms(s, idx, best)


# what a learning rate's fix also mends: the finding that names the measured cause comes before these
_LR_SYMPTOMS = ("exploding_gradients", "dead_activations")


def _cause_above_symptoms(s: Session, idx: int, best: Experiment) -> None:
    """The finding that names the cause an experiment measured (the batch is learned with another lr) ranks above
    the findings that are its symptoms (the gradient norm that grew, the ReLUs the updates silenced): they keep
    the same measured fix, and say that they follow from it."""
    symptoms = [i for i, f in enumerate(s.findings) if f.kind in _LR_SYMPTOMS and i != idx
                and f.evidence.get("tried") == best.change]
    if not symptoms:
        return
    how = entry("consequence_of_another")
    title = entry(best.cause).title.lower()
    for i in symptoms:
        f = s.findings[i]
        s.findings[i] = replaced(f, message=how.summary.format(message=f.message, cause_title=title),
                                 severity="warning" if f.severity == "error" else f.severity)
    first = min(symptoms)
    if first < idx:
        s.findings.insert(first, s.findings.pop(idx))


def _symptoms_follow(s: Session, best: Experiment) -> None:
    """When the experiment that restores learning tried the fix of a setup finding (train mode, an optimizer over
    every parameter, ...), the gradients that exploded and the ReLUs that died on the way are its symptoms: they
    come after it, at most as warnings, and their first fix is that finding's."""
    at = next((i for i, f in enumerate(s.findings) if f.kind == best.cause and f.kind != "cannot_overfit"), None)
    if at is None:
        return
    cause = s.findings[at]
    symptoms = [i for i, f in enumerate(s.findings) if f.kind in _LR_SYMPTOMS]
    if not symptoms:
        return
    how = entry("consequence_of_another")
    first = Fix(f"fix that first: {cause.fix or cause.title}", best.code)
    for i in symptoms:
        f = s.findings[i]
        s.findings[i] = replaced(f, message=how.summary.format(message=f.message, cause_title=cause.title.lower()),
                                 severity="warning" if f.severity == "error" else f.severity, fixes=(first, ))
    if min(symptoms) < at:
        s.findings.insert(min(symptoms), s.findings.pop(at))


def _lr_claim_withdrawn(s: Session, f: Finding, tried: list[Experiment]) -> Finding:
    """An unstable curve was read as a learning rate that is too high; a lower lr tried on a copy did not learn
    the batch better (or none was tried): the claim goes, the observation stays, and the lr's fixes go with it."""
    lower = [e for e in tried if e.cause == "lr_too_high"]
    why = ("a lower learning rate tried on a copy did not learn the batch better ("
           + "; ".join(f"{e.change}: {e.start:.4g} -> {e.after:.4g}" for e in lower) + "), so the learning rate "
           "is not shown to be why") if lower else "no lower learning rate could be tried, so that is not shown"
    s.not_causes.add("lr_too_high")
    share = s.learned_share()
    if lower and share >= threshold("noisy_learns_rel"):
        # a noisy curve that learned most of the batch: the noise is the model's own (noise layers, sampling)
        return replaced(f, message=f"{overfit_said(s)}: {s.unstable}, yet it learns ({learned_said(s, share)}) and "
                        f"{why}: the training loss is noisy by the model's own design (noise layers, sampling), "
                        "which is no fault", severity="info", fixes=(),
                        evidence={**dict(f.evidence), "learned_share": round(share, 4)})
    return replaced(f, message=f"{overfit_said(s)}: {s.unstable}; {why}",
                    severity="warning" if f.severity == "error" else f.severity, fixes=entry("cannot_overfit").fixes)


def _weight_decay_finding(s: Session, e: Experiment) -> Finding:
    """The weight decay finding, which only an experiment makes: without it the batch is learned."""
    import torch

    g = s.user_opt.param_groups[0] if isinstance(s.user_opt, torch.optim.Optimizer) else {}
    wd, lr = g.get("weight_decay", 0.0), s.lr_used or 0.0
    how = ("decoupled: each step shrinks every weight by lr x weight_decay" if "AdamW" in type(s.user_opt).__name__
           else "added to the gradient as weight_decay x w, so it outweighs the loss's own gradient")
    f = finding("weight_decay_high", f"weight_decay={wd:g} with lr={lr:g} ({type(s.user_opt).__name__}, {how}) holds "
                f"the weights near zero. Tried on a copy: {e.said()}", ("optimizer",),
                evidence={"weight_decay": wd, "lr": lr, **e.evidence()})
    s.findings.insert(0, f)
    return f

