"""The doctor's run: it checks what was passed, orders the checks, and builds the ``DoctorReport``.

The rooms: ``_inputs`` (what the user passed, and the one loss adapter), ``_session`` (what one call knows so
far), ``_init_checks`` (before training), ``_train_checks`` (while training), and this module.  Every text a
person reads in a fix comes from ``nbdebug.core.knowledge.training``.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import replace as _replace
from typing import Any

from nbdebug.core._findings import Fix
from nbdebug.core.doctor import _bottleneck as bottleneck
from nbdebug.core.doctor import _capacity as capacity
from nbdebug.core.doctor import _constant_init as constant
from nbdebug.core.doctor import _dead_units as dead
from nbdebug.core.doctor import _depth_fixes as depth
from nbdebug.core.doctor import _easy_checks as easy
from nbdebug.core.doctor import _experiments as experiments
from nbdebug.core.doctor import _ids as ids
from nbdebug.core.doctor import _init_checks as init
from nbdebug.core.doctor import _init_scale as init_scale
from nbdebug.core.doctor import _late_nonfinite as late
from nbdebug.core.doctor import _mixing as mixing
from nbdebug.core.doctor import _nonfinite_site as site
from nbdebug.core.doctor import _setup_checks as setup
from nbdebug.core.doctor import _side_runs as side
from nbdebug.core.doctor import _signal_scale as signal
from nbdebug.core.doctor import _train_checks as training
from nbdebug.core.doctor import _unread_outputs as unread
from nbdebug.core.doctor._generalise import CHECK as LABELS_CHECK
from nbdebug.core.doctor._generalise import HALF_CHECK, generalisation, within_batch
from nbdebug.core.doctor._inputs import Options, checked, logits_of, lr_of, sample_count
from nbdebug.core.doctor._report import DoctorReport
from nbdebug.core.doctor._repro import RngGuard
from nbdebug.core.doctor._session import Session
from nbdebug.core.knowledge import entry, finding
from nbdebug.core.training._dynamics import chance_loss
from nbdebug.errors import NonFiniteError

__all__ = ["doctor"]

# findings whose presence explains a failure to overfit or a bad initial loss
_ROOT_CAUSES = ("label_out_of_range", "loss_below_minimum", "optimizer_coverage", "loss_broadcast",
                "probabilities_to_loss", "activation_on_logits", "no_gradient", "ignores_input", "frozen_parameters",
                "unnormalised_inputs", "dead_activations", "mixes_batch", "ids_as_numbers")
# findings that such a cause explains
_CONSEQUENCES = ("cannot_overfit", "initial_loss_off", "vanishing_gradients")


def doctor(
    model: Any,
    batch: Any,
    loss_fn: Any = None,
    optimizer: Any = None,
    *,
    steps: int = 200,
    lr: float | None = None,
    num_classes: int | None = None,
    dataloader: Any = None,
    seed: int = 0,
    baseline: bool = True,
    reproducibility: bool = True,
    data_batches: int = 10,
    time_budget: float | None = 60.0,
    progress: bool | None = None,
    name: str = "model",
    frozen: Any = (),
) -> DoctorReport:
    """Check a model, a batch and a loss for the usual silent training bugs; never changes the caller's objects.

    Parameters
    ----------
    model : torch.nn.Module
        The model (deep-copied; the original is not touched).  A Hugging Face model (``model(**batch)`` returning
        ``.loss``/``.logits``) and a LightningModule (its ``training_step``) work with ``loss_fn=None``.
    batch : tuple, dict, DataLoader or None
        ``(inputs, targets)``; ``inputs`` may be a tensor, a tuple (``model(*inputs)``) or a dict.  A dict alone
        is a Hugging Face batch (labels inside, ``-100`` ignored).  A DataLoader: its first batch (and the
        DataLoader check).  None: the first batch of ``dataloader``.
    loss_fn : callable, optional
        ``loss_fn(outputs, targets) -> scalar tensor``; None: the loss the model computes itself (``.loss`` of its
        output, or a LightningModule's ``training_step``).
    optimizer : torch.optim.Optimizer or callable, optional
        Re-created on the copy with the same class and hyper-parameters (state is not copied); a callable is a
        factory ``params -> optimizer``; None: a LightningModule's ``configure_optimizers()``, else Adam(lr=3e-3).
    steps : int
        Most steps of the overfit-one-batch run (and of the zero-input baseline).
    lr : float, optional
        Learning rate of the optimizer on the copy.
    num_classes : int, optional
        Classes, when they cannot be read from the output's shape.
    dataloader : torch.utils.data.DataLoader, optional
        Time waiting for data against compute over ``data_batches`` batches.
    seed : int
        Seed of the reproducibility check.
    baseline, reproducibility : bool
        Run the zero-input baseline / the two seeded runs.
    data_batches : int
        Batches timed for the DataLoader check.
    time_budget : float or None
        Seconds the whole call should take (60 by default): the overfit run stops once its verdict is clear and
        uses fewer steps when one step is slow; a phase whose fewest steps (8) cannot fit in what is left does not
        start, and its check says so; no phase runs more than a step past the budget.  None: run every step.
    progress : bool or None
        Show a progress line with the time left; None: only when the call takes more than a few seconds.
    name : str
        What to call the model in findings (``model.3 = Softmax(dim=1)``).
    frozen : True, str or sequence of str
        What you froze on purpose: parameter names or module prefixes (``"backbone"``), or True for every frozen
        parameter.  Those are then an info, not a warning, and no experiment unfreezes them as a cure.

    Returns
    -------
    DoctorReport
        ``findings`` (kind, severity, message, where, fixes), the overfit curve, gradient flow per layer.
    """
    import torch

    options = Options(steps=steps, lr=lr, num_classes=num_classes, dataloader=dataloader, seed=seed,
                      baseline=baseline, reproducibility=reproducibility, data_batches=data_batches,
                      time_budget=time_budget, progress=progress, name=name, frozen=frozen)
    with RngGuard(), torch.random.fork_rng(devices=[]):
        # inside the guard: the first batch of a shuffling DataLoader draws from the global RNG
        batch, options, lightning = checked(model, batch, loss_fn, optimizer, options)
        s = Session(model, batch, loss_fn, optimizer, options, lightning)
        caught: list[Any] = []
        try:
            with warnings.catch_warnings():
                # the doctor's runs on the copy, in this thread: listed, never shown as the user's; another thread's
                # warnings (the filters and the printer are the process's) are shown as they would have been
                warnings.showwarning = _own_warnings(caught, warnings.showwarning)
                _run(s)
                constant.settle(s)
        finally:
            s.progress.close()
        _warnings_check(s, caught)
        return _report(s)


def _own_warnings(caught: list[Any], show: Any) -> Any:
    """A ``warnings.showwarning`` that keeps this thread's warnings in ``caught`` and shows other threads'."""
    import threading

    me = threading.get_ident()

    def showwarning(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
                    line: Any = None) -> None:
        if threading.get_ident() == me:
            caught.append(warnings.WarningMessage(message, category, filename, lineno, file, line))
        else:
            show(message, category, filename, lineno, file, line)

    return showwarning


def _warnings_check(s: Session, caught: list[Any]) -> None:
    """The warnings the doctor's own runs raised (torch's broadcasting warning while an experiment tries the
    loss's shapes, ...) are not printed as if the user's code had just raised them: a check says what they were."""
    seen = list(dict.fromkeys(f"{w.category.__name__}: {str(w.message).splitlines()[0][:160]}" for w in caught))
    s.check("warnings raised during the doctor's runs on the copy",
            f"{len(seen)} distinct (not shown): " + "; ".join(seen[:3]) + (" ..." if len(seen) > 3 else "")
            if seen else "none")


def _run(s: Session) -> None:
    """Every check, in order; a check that makes the rest meaningless (NaN at the first step, labels out of
    range) ends the run."""
    import torch

    from nbdebug.core.training.nan import nan_sentinel

    init.frozen_parameters(s)
    constant.constant_weights(s)
    _safe(s, "input scale", init.input_scale, s)
    _safe(s, "the batch inspector", _data_checks, s)
    setup.optimizer_coverage(s)
    setup.learning_rate(s)
    setup.model_mode(s)
    _safe(s, "BatchNorm with one sample", setup.batchnorm_batch, s)
    work, opt = s.fresh()
    s.lr_used = lr_of(opt) if not s.has("optimizer_coverage") else setup.user_lr(s)
    dead_probe = training.DeadProbe(work, sample_count(s.loss.targets))
    out = None
    try:
        with nan_sentinel(work) as sentinel:
            out, probe_loss, probe = s.loss.probe(work, s.loss.inputs)
            sentinel.check()
    except NonFiniteError as e:
        site.nonfinite(s, "nonfinite_forward", "the first forward pass produces NaN/Inf", e)
        s.check("forward", "non-finite")
        return
    except ValueError as e:
        if s.has("batchnorm_single_sample") and "more than 1 value per channel" in str(e):
            s.check("forward", "BatchNorm refused the batch of one sample")
            return
        raise
    finally:
        dead_probe.remove()
    s.check("forward", "finite" if out is not None else (
        "no forward of its own: trained through training_step" if s.loss.mode == "lightning"
        else "the model's own loss raised on its inputs"))
    s.observe(probe, probe_loss)
    # what the checks look at: the model's output, or what its loss was given when the output is out of sight
    y = logits_of(out) if out is not None else (s.loss_in.input if s.loss_in is not None else None)
    init.infer_task(s, y)
    if not init.labels(s, y):
        return
    _safe(s, "output against the loss", init.output_vs_loss, s, y)
    _safe(s, "loss input shapes", setup.loss_shapes, s, y)
    _safe(s, "targets inside the inputs", easy.targets_in_inputs, s)
    _safe(s, init_scale.CHECK, init_scale.init_scale, s)
    _safe(s, "signal scale with depth", signal.signal_scale, s)
    # the first step: loss, gradients
    t_step = time.perf_counter()
    try:
        with nan_sentinel(work) as sentinel:
            out, loss = s.loss.loss(work, s.loss.inputs)
            if not torch.isfinite(loss).all():
                op, source = site.loss_site(s, work)
                raise NonFiniteError("loss", module="(loss)", step=0, phase="forward", op=op, source=source,
                                     stats={"loss": float(loss.detach().float().mean())})
            opt.zero_grad(set_to_none=True)
            if init.no_grad_fn(s, work, out, loss):
                return
            loss.backward()
            sentinel.check()
    except NonFiniteError as e:
        kind = "nonfinite_forward" if e.phase == "forward" else "nonfinite_gradient"
        if kind == "nonfinite_gradient" and not e.op:
            e.op, e.source = site.gradient_site(s, work)
        site.nonfinite(s, kind, f"non-finite values in the {e.phase} pass of the first step", e)
        s.check("first step", f"non-finite {e.phase}")
        return
    except (IndexError, RuntimeError, ValueError) as e:
        if not init.step_error(s, e):
            raise
        return
    s.step_time = time.perf_counter() - t_step
    s.initial_loss = float(loss.detach())
    s.check("initial loss", f"{s.initial_loss:.4g}")
    _safe(s, "loss at init", init.initial_loss, s)
    _safe(s, "gradients", init.gradients, s, work)
    _safe(s, unread.CHECK, unread.unread_outputs, s, work)
    _safe(s, "output depends on the input", init.input_dependence, s, logits_of(out) if out is not None else y, work)
    _safe(s, mixing.CHECK, mixing.mixes_batch, s, work)
    _safe(s, ids.CHECK, ids.ids_as_numbers, s)
    _safe(s, "ReLU units silent on the whole batch at init", training.dead_activations, s, dead_probe, "at init")
    # overfit one batch
    s.losses = training.train(s, work, opt, s.loss.inputs, monitor=True, deadline=s.deadline(0.4),
                              phase="overfit one batch", early_stop=True)
    if "overfit one batch" in s.skipped:
        _no_time_to_train(s)
        return
    _safe(s, "loss without noise", training.loss_without_noise, s, work)
    if not easy.below_minimum(s):
        training.overfit(s)
        _safe(s, "fitting the batch with the targets shuffled against the inputs", _memorised_at_once, s)
        _safe(s, "loss with targets shuffled against inputs", easy.shuffled_targets, s, work)
        _safe(s, "padding masked", easy.padding_masked, s)
    probe2 = training.DeadProbe(work, sample_count(s.loss.targets))
    try:
        with torch.no_grad():
            s.loss.forward(work, s.loss.inputs)
    finally:
        probe2.remove()
    _safe(s, "ReLU units silent on the whole batch after training", training.dead_activations, s, probe2,
          "after training", skip_if_found=True)
    _safe(s, "experiments on the copy", experiments.run, s)
    _safe(s, "the fixes of a vanishing signal tried on a copy", depth.settle, s)
    _safe(s, "whether the ReLU units silent at init matter", dead.settle, s)
    _safe(s, "the output against the input", capacity.linear_model, s)
    _safe(s, bottleneck.CHECK, bottleneck.widen, s)
    _safe(s, "the advice for an unlearned batch", capacity.plain_advice, s)
    if s.options.dataloader is not None:
        _safe(s, LABELS_CHECK, generalisation, s, work)
    else:
        # the one place a second batch would be compared (the batch inspector looked at this one before training)
        s.check(LABELS_CHECK, "skipped: one batch only; pass dataloader= to compare a batch the model did not train "
                "on (half of this batch is held out instead)")
        _safe(s, HALF_CHECK, within_batch, s)
    if s.options.baseline and not s.explained:
        _safe(s, "zero-input baseline", side.zero_input_baseline, s)
    if s.options.reproducibility:
        _safe(s, "two seeded runs", side.reproducibility, s)
    if s.options.dataloader is not None:
        _safe(s, "dataloader wait", side.dataloader_wait, s)
    if s.losses and not all(map(math.isfinite, s.losses)):
        _safe(s, late.CHECK, late.in_the_run, s)
    else:
        _safe(s, late.CHECK, late.keep_training, s, work, opt)  # the last use of the trained copy
    if s.has("fits_too_easily"):  # the doctor's experiment named the leak: the inspector's static sign is the same
        s.findings = [f for f in s.findings if f.kind not in ("feature_is_label", "labels_not_shifted",
                                                                   "labels_padded_with_pad_id")]
    _input_unused_first(s)
    _dead_layer_first(s)
    _consequences(s)


def _input_unused_first(s: Session) -> None:
    """Outputs identical for every sample although the inputs differ: the forward does not use its input, and the
    parameters that only see the input get no gradient because of that, so the input finding comes first."""
    unused = next((f for f in s.findings if f.kind == "ignores_input" and "samples" in f.evidence), None)
    if unused is None or not s.has("no_gradient"):
        return
    s.findings = [unused] + [f if f.kind != "no_gradient" else _replace(
        f, message=f"{f.message}; they follow from the output ignoring its input (identical for every sample)")
        for f in s.findings if f is not unused]


def _dead_layer_first(s: Session) -> None:
    """A layer whose ReLUs are all silent at init (a large negative bias) passes nothing of the input on: outputs
    that ignore the input follow from it, so the dead units come first with their bias/init fix."""
    dead = next((f for f in s.findings if f.kind == "dead_activations" and f.severity == "error"
                 and "at init" in f.message), None)
    loud = {f.kind for f in s.findings if f.severity != "info"}
    if dead is None or "ignores_input" not in loud or "zero_init" in loud:
        return  # weights that start at zero silence the ReLUs too: they are the cause when found
    how = entry("consequence_of_another")
    first = Fix(f"fix that first: {dead.fix or dead.title}", dead.fixes[0].code if dead.fixes else "")
    s.findings = [dead] + [finding(f.kind, how.summary.format(message=f.message, cause_title=dead.title.lower()),
                                   f.where, severity="warning" if f.severity == "error" else f.severity,
                                   fixes=(first,), evidence=dict(f.evidence))
                           if f.kind == "ignores_input" and f.severity != "info" else f
                           for f in s.findings if f is not dead]


def _safe(s: Session, name: str, check: Any, *args: Any, **kwargs: Any) -> None:
    """Run one check on the copy; one that cannot handle this batch's layout (inputs that are not batch-first, a
    tuple of tensors, a loss with shapes of its own) gives way, listed as skipped with the reason, instead of
    raising out of doctor().  A non-finite value is a verdict, not a failure of the check: it goes on up."""
    try:
        check(*args, **kwargs)
    except NonFiniteError:
        raise
    except Exception as e:  # noqa: BLE001 - the doctor's own manipulation of the data failed: say so, go on
        first = (str(e).splitlines() or [""])[0][:160]
        s.check(name, f"skipped: it could not handle this batch's layout ({type(e).__name__}: {first})")


def _no_time_to_train(s: Session) -> None:
    """The overfit run could not start in the time budget: an info that says there is no verdict on training (the
    checks at init stand), and every later phase, which builds on that run, is left out."""
    from nbdebug.core.doctor._session import fixes_for

    why = dict(s.checks)["overfit one batch"].removeprefix("skipped: ")
    s.add("overfit_out_of_time", f"the overfit-one-batch run did not start: {why}, so there is no "
          "verdict on whether the model learns this batch (the checks before training stand)",
          severity="info", fixes=fixes_for("overfit_out_of_time")[:1])
    _consequences(s)


def _memorised_at_once(s: Session) -> None:
    """``easy.memorised_at_once``, with no verdict when its run with shuffled targets did not fit in the budget (an
    empty curve is not a batch that could not be fitted)."""
    easy.memorised_at_once(s)
    if "shuffled targets" in s.skipped:
        s.findings = [f for f in s.findings if not (f.kind == "fits_too_easily" and f.evidence.get("shuffled_steps") == 0)]
        s.checks = [c for c in s.checks if c[0] != "fitting the batch with the targets shuffled against the inputs"]


def _consequences(s: Session) -> None:
    """A finding caused by another says so, and points at the cause instead of its own generic fixes (a fix of its
    own stays only where it was measured, not its entry's general advice: "look for a frozen layer" beside a
    named cause sends the user looking for what is not there)."""
    causes = [f for f in s.findings if f.kind in _ROOT_CAUSES and f.kind not in s.not_causes
              and f.severity != "info"]
    if not causes:
        return
    cause = causes[0]
    follows = set(_CONSEQUENCES)
    # a finding whose own fix, tried on a copy, learns the batch better than the cause's measured fix (or the
    # cause has none) outranks it: ranked by measured effect, the cause becomes what follows
    better = next((f for f in s.findings if f.kind in _CONSEQUENCES and f.severity != "info"
                   and f.evidence.get("restores") and _measured(f) < _measured(cause)), None)
    if better is not None:
        cause, follows = better, (follows - {better.kind}) | {cause.kind}
    how = entry("consequence_of_another")
    first = how.fixes[0]
    moved = len(s.findings)
    for i, f in enumerate(s.findings):
        if f.kind == "cannot_overfit" and s.explained:
            continue  # the experiments said what it follows from
        if "activation_scale" in f.evidence:
            continue  # the signal that vanishes with depth is a cause of its own (``_constant_init.settle``)
        if f.kind in follows and f is not cause and not (f.kind == "cannot_overfit" and s.unstable):
            s.findings[i] = finding(
                f.kind, how.summary.format(message=f.message, cause_title=cause.title.lower()),
                f.where, severity="warning" if f.severity == "error" else f.severity,
                fixes=(Fix(first.title.format(cause_title=cause.title.lower(), cause_fix=cause.fix or cause.title),
                           first.code), *[x for x in f.fixes[:1] if x not in entry(f.kind).fixes]),
                evidence=dict(f.evidence))
            moved = min(moved, i)
    if moved < s.findings.index(cause):  # the cause comes before what follows from it
        s.findings.insert(moved, s.findings.pop(s.findings.index(cause)))


def _measured(f: Any) -> float:
    """The loss a finding's fix reached on a copy (its evidence's "start -> end in n steps"; inf when none)."""
    after = str(f.evidence.get("after", "")).partition("->")[2].split(" in ")[0].strip()
    try:
        value = float(after)
    except ValueError:
        return math.inf
    return value if math.isfinite(value) else math.inf


def _report(s: Session) -> DoctorReport:
    chance = chance_loss(s.num_classes) if s.task == "classification" and s.num_classes else None
    return DoctorReport(
        findings=tuple(s.findings),
        task=s.task,
        num_classes=s.num_classes,
        steps=len(s.losses) or (0 if "overfit one batch" in s.skipped else s.options.steps),
        losses=tuple(s.losses),
        baseline_losses=tuple(s.baseline_losses),
        initial_loss=s.initial_loss,
        chance_loss=chance,
        grad_flow=tuple(s.grad_flow),
        checks=tuple(s.checks),
        experiments=tuple(s.experiments),
    )


# what the doctor's own checks already say about the same thing, so that one problem is named once
_SAID_BY_THE_DOCTOR = {
    "unscaled_features": "unnormalised_inputs", "raw_pixels": "unnormalised_inputs",
    "pixels_scaled_twice": "unnormalised_inputs",
}


# what the batch inspector finds that does no harm to training: a remark in the doctor's report, not a warning
_NO_HARM_TO_TRAINING = {
    "constant_columns": "they carry no information, and a model trains with them (image pixels at the border are "
                        "often constant)",
    # rows repeated inside one batch do not stop a model from learning it (synthetic and token batches repeat
    # often); they matter across a train/validation split, which compare_splits checks
    "duplicate_rows": "repeated rows in one batch do not stop training; they matter when they also sit in the "
                      "validation split (compare_splits checks that)",
    "identical_images": "repeated images in one batch do not stop training; they matter when they also sit in the "
                        "validation split (compare_splits checks that)",
}


def _data_checks(s: Session) -> None:
    """The batch inspector's findings on the user's batch (the silent data bugs: padding in the labels, target
    leakage, NaN columns, ...), before anything trains; never an error of the doctor's."""
    from nbdebug.core.data import batch_findings

    try:
        found = batch_findings(s.loss.batch, model=s.user_model)
    except Exception as e:  # noqa: BLE001 - the doctor's own checks go on whatever the inspector meets
        s.check("the batch inspector", f"skipped: it could not read the batch ({type(e).__name__}: {e})")
        return
    kept = [f for f in found if not s.has(_SAID_BY_THE_DOCTOR.get(f.kind, ""))]
    kept = [finding(f.kind, f"{f.message}; {_NO_HARM_TO_TRAINING[f.kind]}", f.where, severity="info", fixes=f.fixes,
                    evidence=f.evidence) if f.kind in _NO_HARM_TO_TRAINING and f.severity != "info" else f
            for f in kept]
    s.findings.extend(kept)
    s.check("the batch inspector", ", ".join(f.kind.replace("_", " ") for f in kept) if kept else "nothing found")
