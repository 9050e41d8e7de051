"""What one ``doctor`` call knows so far: the user's objects, the loss adapter, the findings and checks, and what
the checks learned about the problem (task, classes, the overfit curve); every check reads and adds to it."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from nbdebug.core._findings import Finding, Fix
from nbdebug.core.doctor._inputs import LossAdapter, Options, fresh_copy, lightning_optimizer
from nbdebug.core.knowledge import entry, finding

__all__ = ["Session", "Progress", "fixes_for", "replaced"]


def fixes_for(slug: str) -> tuple[Fix, ...]:
    """The fixes of the knowledge entry ``slug``: a finding whose cause is known takes the cause's fixes."""
    return entry(slug).fixes


def replaced(f: Finding, **changes: Any) -> Finding:
    """``f`` with its message, severity, fixes or evidence changed: the one way a finding is re-worded."""
    return finding(f.kind, changes.get("message", f.message), f.where, severity=changes.get("severity", f.severity),
                   fixes=changes.get("fixes", f.fixes), evidence=changes.get("evidence", f.evidence))


class Progress:
    """One line on stderr, rewritten in place: phase, step, and the time left at the current pace."""

    def __init__(self, enabled: bool | None) -> None:
        self.enabled = enabled
        self.t0 = time.perf_counter()
        self.shown = False

    def __call__(self, phase: str, i: int, n: int, per_step: float, force: bool = False) -> None:
        import sys

        elapsed = time.perf_counter() - self.t0
        if self.enabled is False or (self.enabled is None and elapsed < 3.0 and not force):
            return
        if self.enabled is None and not self.shown and per_step * max(n - i, 0) < 2.0:
            return
        width = 24
        done = int(width * i / max(n, 1))
        left = per_step * max(n - i, 0)
        sys.stderr.write(f"\rdoctor: {phase[:22]:<22} [{'#' * done}{'.' * (width - done)}] {i}/{n}  "
                         f"{elapsed:.0f} s elapsed, ~{left:.0f} s left   ")
        sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        import sys

        if self.shown:
            sys.stderr.write(f"\rdoctor: done in {time.perf_counter() - self.t0:.1f} s" + " " * 60 + "\n")
            sys.stderr.flush()


class Session:
    """The state of one doctor call, shared by the checks at init, the checks while training and the run."""

    def __init__(self, model: Any, batch: Any, loss_fn: Any, optimizer: Any, options: Options,
                 lightning: bool) -> None:
        self.user_model = model
        # a LightningModule's own optimizer (configure_optimizers) is checked like one passed in
        self.user_opt = optimizer if optimizer is not None or not lightning or loss_fn is not None \
            else lightning_optimizer(model)
        self.options = options
        self.findings: list[Finding] = []
        self.checks: list[tuple[str, str]] = []
        try:
            self.device = next(model.parameters()).device
        except StopIteration:
            self.device = None
        self.loss = LossAdapter(batch, loss_fn, lightning, self.device)
        # what the checks learn about the problem
        self.task = "regression"
        self.num_classes: int | None = options.num_classes
        self.class_dim = 1
        self.input_stats: tuple[float, float, float, float] | None = None  # min, max, mean, std
        self.initial_loss: float | None = None
        self.grad_flow: list[tuple[str, float]] = []
        self.losses: list[float] = []
        self.baseline_losses: list[float] = []
        self.step_time = 0.0
        self.lr_used: float | None = None
        self.unstable = ""  # why the overfit run is unstable ("" when it is not)
        self.cut_by_budget = False  # the overfit run stopped at the time budget before its verdict was clear
        self.params_still: float | None = None  # the overfit run stopped early: its parameters did not move (rel.)
        self.dropout_off_loss: float | None = None  # the trained copy's loss on the batch with its dropout off
        self.stochastic = False  # two forward passes of the trained copy give different losses (dropout, sampling)
        # what the setup checks and the experiments learn
        self.coverage_missing: list[str] = []  # trainable parameters the user's optimizer does not hold
        self.left_in_eval = False  # the user left the model in eval mode
        self.broadcast: tuple[Any, Any] | None = None  # (output shape, target shape) an element-wise loss broadcasts
        self.loss_in: Any = None  # the torch loss call the probe step saw make the loss (a LossCall), or None
        self.experiments: list[Any] = []  # the Experiments run, best first
        self.init_large: list[tuple[str, float]] = []  # layers far above it: (name, share of its scale)
        self.init_small: list[str] = []  # layers whose weights start far under the default init's scale
        self.batch_axis: Any = None  # (samples, Suspect): the call that mixes the batch (its fix ends the mixing)
        self.not_causes: set[str] = set()  # kinds whose fix was tried on a copy and did not move the result
        self.explained = False  # an experiment found why the batch is not learned
        self.depth_fixes: dict[str, Fix] = {}  # a vanishing signal's fixes tried on a copy, by the change's words
        self.skipped: set[str] = set()  # phases that did not start: their steps did not fit in the time budget
        self.t0 = time.perf_counter()
        self.progress = Progress(options.progress)

    # -- findings and checks ---------------------------------------------------------------------------------
    def add(self, kind: str, message: str, where: Iterable[str] = (), severity: str | None = None,
            fixes: Any = None, evidence: Any = None) -> None:
        """A finding of ``kind`` (its entry gives the title, and the severity and fixes unless given)."""
        self.findings.append(finding(kind, message, tuple(where), severity=severity, fixes=fixes, evidence=evidence))

    def has(self, *kinds: str) -> bool:
        return any(f.kind in kinds for f in self.findings)

    def check(self, name: str, outcome: str) -> None:
        self.checks.append((name, outcome))

    def label(self, qualname: str) -> str:
        """``model.3 = Softmax(dim=1)``: the module's path from the model, as the error panel names it."""
        root = self.options.name
        mod = dict(self.user_model.named_modules()).get(qualname)
        path = f"{root}.{qualname}" if qualname else root
        if mod is None or list(mod.children()):
            return path
        try:
            extra = mod.extra_repr()
        except Exception:  # a module whose extra_repr fails still gets a name
            extra = ""
        return f"{path} = {type(mod).__name__}({extra})"

    def input_fixes(self, slug: str) -> tuple[Fix, ...]:
        """``slug``'s fixes for inputs far from unit scale, less the pixels' (divide by 255) unless the inputs span
        0..255 as raw pixels do: tabular features are standardised, not divided by 255."""
        lo, hi = (self.input_stats or (0.0, 0.0, 0.0, 0.0))[:2]
        fixes = entry(slug).fixes
        if lo >= 0 and 100 < hi <= 255:
            return fixes
        return tuple(x for x in fixes if "255" not in x.title and "255" not in x.code) or fixes

    def last_module(self) -> str:
        """The label of the model's last leaf module (where an output problem lives)."""
        last = ""
        for name, m in self.user_model.named_modules():
            if not list(m.children()):
                last = name
        return self.label(last or "(model)")

    # -- the problem -----------------------------------------------------------------------------------------
    def ignore_index(self) -> int:
        if self.loss_in is not None:
            return int(self.loss_in.ignore_index)
        return int(getattr(self.loss.loss_fn, "ignore_index", -100))

    def observe(self, probe: Any, loss: Any) -> None:
        """What the probe step saw the loss given (``loss_in``).  When the step's loss is that one call's result, its
        name is the loss's for every check (a LightningModule's ``training_step``, a Hugging Face model's own loss,
        a lambda around a torch loss), unless the user's ``loss_fn`` already is a torch loss."""
        from nbdebug.core.doctor._loss_probe import known_loss

        call, whole = probe.the_loss(loss)
        self.loss_in = call
        if call is not None and whole and not (self.loss.mode == "fn" and known_loss(self.loss.loss_name)):
            self.loss.loss_name = call.name

    def loss_said(self) -> str:
        """The loss's name as a user reads it: the ``loss_fn``'s own, else the torch loss the probe saw."""
        from nbdebug.core.doctor._loss_probe import known_loss

        if self.loss_in is not None and not (self.loss.mode == "fn" and known_loss(self.loss.loss_name)):
            return f"F.{self.loss_in.name}"
        return self.loss.loss_name

    def cross_entropy(self) -> bool:
        """The loss is a softmax cross-entropy (named so, or a Hugging Face head's own loss on class labels)."""
        return self.loss.loss_name in ("CrossEntropyLoss", "cross_entropy") or (
            self.loss.mode != "fn" and self.task == "classification")

    def label_floor(self) -> float | None:
        """The loss a model reaches from the label frequencies alone, without looking at its input (their
        entropy), when the loss is a cross-entropy on class indices or 0/1 targets; None otherwise."""
        import math

        import torch

        name = self.loss.loss_name
        t = self.loss_in.target if self.loss_in is not None and self.loss_in.target is not None else self.loss.targets
        if not isinstance(t, torch.Tensor) or not t.numel():
            return None
        if name in ("CrossEntropyLoss", "cross_entropy", "NLLLoss", "nll_loss") and not t.is_floating_point():
            t = t[t != self.ignore_index()]
            if not t.numel() or int(t.min()) < 0:
                return None
            p = torch.bincount(t.reshape(-1)).float() / t.numel()
            return float(-(p[p > 0] * p[p > 0].log()).sum())
        if name in ("BCEWithLogitsLoss", "binary_cross_entropy_with_logits", "BCELoss", "binary_cross_entropy"):
            tf = t.detach().float()
            if not bool(((tf == 0) | (tf == 1)).all()):
                return None
            p = tf.reshape(tf.shape[0], -1).mean(0) if tf.dim() >= 1 and tf.shape[0] else tf.reshape(1)
            h = [-(q * math.log(q) + (1 - q) * math.log(1 - q)) if 0 < q < 1 else 0.0 for q in p.tolist()]
            return sum(h) / len(h)
        return None

    def fit_target(self, start: float | None = None) -> float:
        """The loss below which one batch counts as fitted: a tenth of where the run starts, or of what the label
        frequencies alone give when that is lower (a start inflated by raw inputs is no yardstick), and at least
        ``overfit_abs``.  ``start``: another run's own start (an experiment that changes what the loss is)."""
        from nbdebug.core.knowledge import threshold

        if start is None:
            start = self.initial_loss if self.initial_loss is not None else (self.losses[0] if self.losses else 0.0)
            floor = self.label_floor()
            ref = min(abs(start), floor) if floor is not None else abs(start)
        else:
            ref = abs(start)
        return self.loss_minimum() + max(threshold("overfit_abs"), threshold("overfit_rel") * ref)

    def loss_minimum(self) -> float:
        """The least the loss can be on a batch it has memorised: 0, or with ``label_smoothing`` the entropy of the
        smoothed targets (0.50 for 10 classes at 0.1), which no model can go under."""
        import math

        call = self.loss_in
        eps = call.label_smoothing if call is not None and call.name == "cross_entropy" else 0.0
        if not 0.0 < eps <= 1.0 or call is None or call.input.dim() < 1:
            return 0.0
        classes = int(call.input.shape[call.class_dim])
        if classes < 2:
            return 0.0
        top, rest = 1.0 - eps + eps / classes, eps / classes
        return -(top * math.log(top)) - (classes - 1) * rest * math.log(rest)

    def learned_share(self) -> float:
        """How far the overfit run took the loss (the lowest of its last tenth) below where it started, or below what
        the label frequencies alone give when that is lower, as a share of the initial loss; 0 when unknown.  A
        run that only learned which labels are common has not learned from its input."""
        import math

        if not self.losses:
            return 0.0
        init = self.initial_loss if self.initial_loss is not None else self.losses[0]
        final = self.final_loss()
        if not (math.isfinite(init) and math.isfinite(final)) or init == 0:
            return 0.0
        floor = self.label_floor()
        start = init if floor is None else min(init, floor)
        return (start - final) / abs(init)

    def final_loss(self) -> float:
        """Where the overfit run took the loss: the lowest of its last tenth, or the trained copy's loss with its
        dropout off when that is lower (dropout's noise keeps a memorised batch's training loss up)."""
        import math

        final = min(self.losses[-max(1, len(self.losses) // 10):]) if self.losses else math.nan
        off = self.dropout_off_loss
        return off if off is not None and math.isfinite(final) and off < final else final

    def lr_note(self) -> str:
        """`` (lr=0.003)`` when the learning rate is known, else ''."""
        return f" (lr={self.lr_used:g})" if self.lr_used is not None else ""

    # -- copies and time -------------------------------------------------------------------------------------
    def fresh(self) -> tuple[Any, Any]:
        """A deep copy of the user's model in the mode the user left it in, and an optimizer for it."""
        return fresh_copy(self.user_model, self.user_opt, self.options.lr, self.loss.mode == "lightning",
                          self.options.name)

    def time_left(self) -> float | None:
        """Seconds left in the budget (None: no budget)."""
        budget = self.options.time_budget
        return None if budget is None else budget - (time.perf_counter() - self.t0)

    def deadline(self, share: float) -> float | None:
        """When a phase given ``share`` of the time left in the budget must stop (None: no budget)."""
        budget = self.options.time_budget
        if budget is None:
            return None
        left = budget - (time.perf_counter() - self.t0)
        return time.perf_counter() + max(left, 0.0) * share

    def out_of_time(self, phase: str, steps: int, per_step: float | None = None) -> bool:
        """True, with a check line that says so, when ``steps`` steps of the measured step time (``per_step``, else
        the first step's) cannot fit in what is left of the time budget: then the phase does not start."""
        left = self.time_left()
        per = self.step_time if per_step is None else per_step
        if left is None or per <= 0 or steps * per <= left:
            return False
        self.check(phase, f"skipped: {steps} steps of {_secs(per)} s do not fit in the {_secs(max(left, 0.0))} s "
                          f"left of time_budget={self.options.time_budget:g}")
        self.skipped.add(phase)
        return True


def _secs(t: float) -> str:
    return f"{t:.2g}" if t < 10 else f"{t:.0f}"
