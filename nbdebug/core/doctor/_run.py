"""The checks of ``doctor``, run on a deep copy of the model."""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Iterable
from typing import Any

from nbdebug.core._findings import Finding, Fix
from nbdebug.core.doctor._report import DoctorReport
from nbdebug.core.doctor._repro import RngGuard, check_reproducible
from nbdebug.core.knowledge import finding, threshold
from nbdebug.core.training._dynamics import chance_loss, depth_correlation
from nbdebug.errors import InvalidArgumentError, NonFiniteError

__all__ = ["doctor"]

_LOGIT_LOSSES = {"CrossEntropyLoss", "cross_entropy", "BCEWithLogitsLoss", "binary_cross_entropy_with_logits"}
_LOGPROB_LOSSES = {"NLLLoss", "nll_loss"}
_PROB_OUTPUTS = {"SoftmaxBackward0", "SigmoidBackward0"}
_RELU = ("ReLU", "ReLU6")


# -- helpers -------------------------------------------------------------------------------------------------
def _loss_name(loss_fn: Any) -> str:
    if isinstance(loss_fn, type):
        return loss_fn.__name__
    name = getattr(loss_fn, "__name__", None)
    if name is None:
        name = type(loss_fn).__name__
    return str(name)


def _call(model: Any, inputs: Any) -> Any:
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


def _to(obj: Any, device: Any) -> Any:
    """A copy of ``obj``'s tensors on ``device`` (always a copy: a forward that writes into its input must not
    change the caller's batch)."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach().to(device, copy=True) if device is not None else obj.detach().clone()
    if isinstance(obj, (tuple, list)):
        return type(obj)(_to(o, device) for o in obj)
    if isinstance(obj, dict):
        return {k: _to(v, device) for k, v in obj.items()}
    return obj


def _zeros_like(obj: Any) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        return torch.zeros_like(obj)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_zeros_like(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _zeros_like(v) for k, v in obj.items()}
    return obj


def _first_tensor(out: Any) -> Any:
    import torch

    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)) and out:
        return _first_tensor(out[0])
    if isinstance(out, dict) and out:
        return _first_tensor(next(iter(out.values())))
    return None


# -- optimizers ----------------------------------------------------------------------------------------------
def recreate_optimizer(opt: Any, params_of: Any, lr: float | None = None) -> Any:
    """A new optimizer of ``opt``'s class over other parameters, with the same groups and hyper-parameters.

    ``params_of(p)`` maps each of ``opt``'s parameters to its counterpart (or None to drop it).  Only the
    constructor's own keyword arguments are passed (``defaults`` may hold internal keys, such as AdamW's
    ``decoupled_weight_decay``); every group keeps all of its own settings.  State (moments) is not copied.
    """
    import inspect

    groups = []
    for g in opt.param_groups:
        hp = {k: v for k, v in g.items() if k != "params"}
        if lr is not None:
            hp["lr"] = lr
        ps = [q for q in (params_of(p) for p in g["params"]) if q is not None]
        if ps:
            groups.append({"params": ps, **hp})
    cls = type(opt)
    sig: Any
    try:
        sig = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):  # pragma: no cover - a C-level constructor
        sig = {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.values()):
        kwargs = dict(opt.defaults)
    else:
        kwargs = {k: v for k, v in opt.defaults.items() if k in sig}
    if lr is not None and "lr" in kwargs:
        kwargs["lr"] = lr
    try:
        return cls(groups, **kwargs)
    except TypeError:
        # a constructor that takes fewer keywords than its defaults name: the groups carry every setting
        return cls(groups)


def _step(opt: Any, closure: Any) -> None:
    """``opt.step()``; optimizers that evaluate the loss themselves (LBFGS) get the closure."""
    import torch

    if isinstance(opt, torch.optim.LBFGS):
        opt.step(closure)
    else:
        opt.step()


# -- what users pass ------------------------------------------------------------------------------------------
def _is_loader(obj: Any) -> bool:
    import torch

    return isinstance(obj, torch.utils.data.DataLoader)


def _is_lightning(model: Any) -> bool:
    return any(c.__name__ == "LightningModule" for c in type(model).__mro__) and callable(
        getattr(model, "training_step", None))


def _model_loss(out: Any) -> Any:
    """The loss a model computed itself: ``ModelOutput.loss``, ``out["loss"]``, or the first item of a tuple."""
    import torch

    loss = getattr(out, "loss", None)
    if loss is None and isinstance(out, dict):
        loss = out.get("loss")
    if loss is None and isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor) \
            and out[0].dim() == 0:
        loss = out[0]
    return loss


def _logits(out: Any) -> Any:
    """The tensor the checks look at: ``.logits`` of a model output, else its first tensor."""
    import torch

    lg = getattr(out, "logits", None)
    if isinstance(lg, torch.Tensor):
        return lg
    if isinstance(out, dict) and isinstance(out.get("logits"), torch.Tensor):
        return out["logits"]
    if isinstance(out, dict) and "loss" in out:
        rest = {k: v for k, v in out.items() if k != "loss"}
        return _first_tensor(rest)
    return _first_tensor(out)


class _Progress:
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
        sys.stderr.write(f"\rdoctor: {phase:<22} [{'#' * done}{'.' * (width - done)}] {i}/{n}  "
                         f"{elapsed:.0f} s elapsed, ~{left:.0f} s left   ")
        sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        import sys

        if self.shown:
            sys.stderr.write(f"\rdoctor: done in {time.perf_counter() - self.t0:.1f} s" + " " * 60 + "\n")
            sys.stderr.flush()


# -- the doctor ----------------------------------------------------------------------------------------------
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
        uses fewer steps when one step is slow.  None: run every step.
    progress : bool or None
        Show a progress line with the time left; None: only when the call takes more than a few seconds.
    name : str
        What to call the model in findings (``model.3 = Softmax(dim=1)``).

    Returns
    -------
    DoctorReport
        ``findings`` (kind, severity, message, where, fixes), the overfit curve, gradient flow per layer.
    """
    import torch

    if not isinstance(model, torch.nn.Module):
        raise InvalidArgumentError(f"doctor: expected a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise InvalidArgumentError(f"doctor: steps must be an int >= 1, got {steps!r}")
    if not isinstance(data_batches, int) or data_batches < 1:
        raise InvalidArgumentError(f"doctor: data_batches must be an int >= 1, got {data_batches!r}")
    if num_classes is not None and (not isinstance(num_classes, int) or num_classes < 1):
        raise InvalidArgumentError(f"doctor: num_classes must be an int >= 1 or None, got {num_classes!r}")
    if lr is not None and (not isinstance(lr, (int, float)) or not lr > 0):
        raise InvalidArgumentError(f"doctor: lr must be a number > 0 or None, got {lr!r}")
    if time_budget is not None and (not isinstance(time_budget, (int, float)) or not time_budget > 0):
        raise InvalidArgumentError(f"doctor: time_budget must be a number of seconds > 0 or None, got {time_budget!r}")
    lightning = _is_lightning(model)
    if loss_fn is not None and not callable(loss_fn):
        raise InvalidArgumentError(
            f"doctor: loss_fn must be callable (outputs, targets) -> loss, or None for a model that computes its "
            f"own loss, got {type(loss_fn).__name__}"
        )
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer) and not callable(optimizer):
        raise InvalidArgumentError(
            f"doctor: optimizer must be a torch.optim.Optimizer, a factory params -> optimizer, or None, got "
            f"{type(optimizer).__name__}"
        )
    if _is_loader(batch):
        dataloader = dataloader if dataloader is not None else batch
        batch = None
    if batch is None and dataloader is not None:
        try:
            batch = next(iter(dataloader))
        except StopIteration as e:
            raise InvalidArgumentError("doctor: batch is None and the DataLoader given is empty; expected a "
                                       "DataLoader with at least one batch") from e
    if not any(p.requires_grad for p in model.parameters()):
        raise InvalidArgumentError(
            f"doctor: {type(model).__name__} has no trainable parameters; expected at least one with requires_grad=True"
        )
    if isinstance(batch, dict) and loss_fn is None and not lightning:
        pass  # a Hugging Face batch: model(**batch) computes the loss from the labels inside
    elif lightning and loss_fn is None:
        pass  # training_step takes the batch as the DataLoader yields it
    elif not (isinstance(batch, (tuple, list)) and len(batch) == 2):
        raise InvalidArgumentError(
            f"doctor: batch must be (inputs, targets), a dict of model inputs (with loss_fn=None), or a DataLoader, "
            f"got {type(batch).__name__}"
            + (f" of length {len(batch)}" if isinstance(batch, (tuple, list)) else "")
        )
    elif loss_fn is None:
        raise InvalidArgumentError(
            "doctor: loss_fn is None, but the batch is (inputs, targets) and the model is not a LightningModule; "
            "expected loss_fn(outputs, targets), or a dict batch for a model that computes its own loss"
        )
    with RngGuard(), torch.random.fork_rng(devices=[]):
        return _Doctor(model, batch, loss_fn, optimizer, steps=steps, lr=lr, num_classes=num_classes,
                       dataloader=dataloader, seed=seed, baseline=baseline, reproducibility=reproducibility,
                       data_batches=data_batches, time_budget=time_budget, progress=progress, name=name,
                       lightning=lightning).run()


class _Doctor:
    def __init__(self, model: Any, batch: Any, loss_fn: Any, optimizer: Any, **kw: Any) -> None:
        self.user_model = model
        self.loss_fn = loss_fn
        self.user_opt = optimizer
        self.kw = kw
        self.steps: int = kw["steps"]
        self.steps_run = 0
        self.findings: list[Finding] = []
        self.checks: list[tuple[str, str]] = []
        try:
            p = next(model.parameters())
            self.device = p.device
        except StopIteration:
            self.device = None
        # how the loss is made: "fn" loss_fn(model(inputs), targets); "hf" model(**batch).loss;
        # "lightning" model.training_step(batch, 0)
        self.mode = "fn" if loss_fn is not None else ("lightning" if kw["lightning"] else "hf")
        self.batch = _to(batch, self.device)
        if self.mode == "hf":
            self.inputs = self.batch
            self.targets = self.batch.get("labels") if isinstance(self.batch, dict) else None
        elif self.mode == "lightning":
            two = isinstance(self.batch, (tuple, list)) and len(self.batch) == 2
            self.inputs = self.batch[0] if two else self.batch
            self.targets = self.batch[1] if two else None
        else:
            self.inputs = self.batch[0]
            self.targets = self.batch[1]
        self.loss_name = _loss_name(loss_fn) if loss_fn is not None else (
            "CrossEntropyLoss" if self.mode == "hf" else "training_step")
        self.task = "regression"
        self.num_classes: int | None = kw["num_classes"]
        self.class_dim = 1
        self.losses: list[float] = []
        self.baseline_losses: list[float] = []
        self.initial_loss: float | None = None
        self.grad_flow: list[tuple[str, float]] = []
        self.step_time = 0.0
        self.t0 = time.perf_counter()
        self.progress = _Progress(kw["progress"])
        self.lr_used: float | None = None
        self.unstable = ""  # why the overfit run is unstable ("" when it is not)
        self.cut_by_budget = False  # the overfit run stopped at the time budget before its verdict was clear

    def add(self, kind: str, message: str, where: Iterable[str] = (), severity: str | None = None,
            fixes: Any = None, evidence: Any = None) -> None:
        self.findings.append(finding(kind, message, tuple(where), severity=severity, fixes=fixes, evidence=evidence))

    def has(self, *kinds: str) -> bool:
        return any(f.kind in kinds for f in self.findings)

    def check(self, name: str, outcome: str) -> None:
        self.checks.append((name, outcome))

    def label(self, qualname: str) -> str:
        """``model.3 = Softmax(dim=1)``: the module's path from the model, as the error panel names it."""
        root = self.kw["name"]
        mod = dict(self.user_model.named_modules()).get(qualname)
        path = f"{root}.{qualname}" if qualname else root
        if mod is None or list(mod.children()):
            return path
        try:
            extra = mod.extra_repr()
        except Exception:  # a module whose extra_repr fails still gets a name
            extra = ""
        return f"{path} = {type(mod).__name__}({extra})"

    # -- making the loss --------------------------------------------------------------------------------------
    def forward(self, work: Any, inputs: Any) -> Any:
        if self.mode == "hf":
            return work(**inputs) if isinstance(inputs, dict) else _call(work, inputs)
        return _call(work, inputs)

    def loss_of(self, work: Any, inputs: Any) -> tuple[Any, Any]:
        """(model output or None, scalar loss) for one step on ``inputs``."""
        if self.mode == "fn":
            out = _call(work, inputs)
            return out, self.loss_fn(out, self.targets)
        if self.mode == "hf":
            out = self.forward(work, inputs)
            loss = _model_loss(out)
            if loss is None:
                raise InvalidArgumentError(
                    f"doctor: {type(work).__name__}(**batch) returned no loss; expected labels in the batch "
                    "(a 'labels' key) or a loss_fn")
            return out, loss
        import warnings

        b = inputs
        if isinstance(self.batch, (tuple, list)) and len(self.batch) == 2:
            b = [inputs, self.targets] if isinstance(self.batch, list) else (inputs, self.targets)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # self.log() outside a Trainer
            res = work.training_step(b, 0)
        loss = res.get("loss") if isinstance(res, dict) else res
        if loss is None:
            raise InvalidArgumentError(
                f"doctor: {type(work).__name__}.training_step returned {type(res).__name__}; expected a loss tensor "
                "or a dict with 'loss'")
        return None, loss

    def fresh(self) -> tuple[Any, Any]:
        """A deep copy of the user's model in train mode, and an optimizer for it."""
        import torch

        work = copy.deepcopy(self.user_model)
        work.train()
        params = [p for p in work.parameters() if p.requires_grad]
        opt = self.user_opt
        lr = self.kw["lr"]
        if opt is None and self.mode == "lightning":
            made = work.configure_optimizers()
            while isinstance(made, (tuple, list)) and made:
                made = made[0]
            if isinstance(made, dict):
                made = made.get("optimizer")
            if isinstance(made, torch.optim.Optimizer):
                if lr is not None:
                    for g in made.param_groups:
                        g["lr"] = lr
                return work, made
        if opt is None:
            return work, torch.optim.Adam(params, lr=lr or 3e-3)
        if isinstance(opt, torch.optim.Optimizer):
            index = {id(p): i for i, p in enumerate(self.user_model.parameters())}
            all_params = list(work.parameters())
            return work, recreate_optimizer(
                opt, lambda p: all_params[index[id(p)]] if id(p) in index else None, lr)
        if callable(opt):
            return work, opt(params)
        raise InvalidArgumentError(
            f"doctor: optimizer must be a torch.optim.Optimizer, a factory or None, got {type(opt).__name__}"
        )

    # -- classification of the problem ------------------------------------------------------------------------
    def infer_task(self, out: Any) -> None:
        import torch

        t = self.targets
        name = self.loss_name
        if name in ("BCEWithLogitsLoss", "binary_cross_entropy_with_logits", "BCELoss", "binary_cross_entropy"):
            self.task = "binary"
            return
        if isinstance(t, torch.Tensor) and not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool:
            if out is not None and out.dim() >= 2:
                self.task = "classification"
                self.class_dim = self._class_dim(out, t)
                if self.num_classes is None:
                    self.num_classes = int(out.shape[self.class_dim])
                return
        if name in ("CrossEntropyLoss", "cross_entropy") and self.mode == "fn" and out is not None and out.dim() >= 2:
            self.task = "classification"
            if self.num_classes is None:
                self.num_classes = int(out.shape[1])

    @staticmethod
    def _class_dim(out: Any, t: Any) -> int:
        """Where the classes are: dim 1 for (N, C, ...), the last dim for (B, T, V) with targets (B, T).

        The second is how language models are trained (their loss flattens both).
        """
        if out.dim() >= 3 and tuple(t.shape) == tuple(out.shape[:-1]):
            return out.dim() - 1
        return 1

    def ignore_index(self) -> int:
        return int(getattr(self.loss_fn, "ignore_index", -100))

    def cross_entropy(self) -> bool:
        """The loss is a softmax cross-entropy (named so, or a Hugging Face head's own loss on class labels)."""
        return self.loss_name in ("CrossEntropyLoss", "cross_entropy") or (
            self.mode != "fn" and self.task == "classification")

    # -- the checks ------------------------------------------------------------------------------------------
    def run(self) -> DoctorReport:
        try:
            return self._run()
        finally:
            self.progress.close()

    def _run(self) -> DoctorReport:
        import torch

        from nbdebug.core.training.nan import nan_sentinel

        self.frozen_check()
        self.input_scale_check()
        work, opt = self.fresh()
        self.lr_used = _lr_of(opt)
        dead_probe = _DeadProbe(work)
        out = None
        try:
            with nan_sentinel(work) as sentinel:
                out = self.forward(work, self.inputs)
                sentinel.check()
        except NonFiniteError as e:
            self.nonfinite("nonfinite_forward", "the first forward pass produces NaN/Inf", e)
            self.check("forward", "non-finite")
            return self.report()
        finally:
            dead_probe.remove()
        self.check("forward", "finite")
        y = _logits(out)
        self.infer_task(y)
        if not self.label_checks(y):
            return self.report()
        self.output_checks(y)
        # the first step: loss, gradients
        t_step = time.perf_counter()
        try:
            with nan_sentinel(work) as sentinel:
                out, loss = self.loss_of(work, self.inputs)
                if not torch.isfinite(loss).all():
                    raise NonFiniteError("loss", module="(loss)", step=0, phase="forward",
                                         stats={"loss": float(loss.detach().float().mean())})
                opt.zero_grad(set_to_none=True)
                loss.backward()
                sentinel.check()
        except NonFiniteError as e:
            kind = "nonfinite_forward" if e.phase == "forward" else "nonfinite_gradient"
            self.nonfinite(kind, f"non-finite values in the {e.phase} pass of the first step", e)
            self.check("first step", f"non-finite {e.phase}")
            return self.report()
        self.step_time = time.perf_counter() - t_step
        self.initial_loss = float(loss.detach())
        self.check("initial loss", f"{self.initial_loss:.4g}")
        self.initial_loss_check()
        self.gradient_checks(work)
        self.sensitivity_check(_logits(out) if out is not None else y, work)
        self.dead_check(dead_probe, "at init")
        # overfit one batch
        self.losses = self.train(work, opt, self.inputs, monitor=True, deadline=self.deadline(0.6),
                                 phase="overfit one batch", early_stop=True)
        self.overfit_checks()
        probe2 = _DeadProbe(work)
        try:
            with torch.no_grad():
                self.forward(work, self.inputs)
        finally:
            probe2.remove()
        self.dead_check(probe2, "after training", skip_if_found=True)
        if self.kw["dataloader"] is not None:
            self.generalisation_check(work)
        if self.kw["baseline"]:
            self.baseline_check()
        if self.kw["reproducibility"]:
            self.repro_check()
        if self.kw["dataloader"] is not None:
            self.dataloader_check()
        self.consequences()
        return self.report()

    def deadline(self, share: float) -> float | None:
        """When a phase given ``share`` of the time left in the budget must stop (None: no budget)."""
        budget = self.kw["time_budget"]
        if budget is None:
            return None
        left = budget - (time.perf_counter() - self.t0)
        return time.perf_counter() + max(left, 0.0) * share

    def nonfinite(self, kind: str, what: str, e: NonFiniteError) -> None:
        where = e.module
        if where not in ("(loss)", "(input)") and not where.startswith("(loss"):
            where = self.label("" if where == "(model)" else where)
        detail = f" ({e.stats['location']})" if e.stats.get("location") else ""
        self.add(kind, f"{what}, first in {where}{detail} ({_stats_text(e.stats)})", (where,))

    def frozen_check(self) -> None:
        named = list(self.user_model.named_parameters())
        frozen = [(n, p) for n, p in named if not p.requires_grad]
        if not frozen:
            self.check("frozen parameters", "none")
            return
        total = sum(p.numel() for _, p in named)
        nf = sum(p.numel() for _, p in frozen)
        frac = nf / max(total, 1)
        # name whole sub-modules when all of their parameters are frozen
        groups: list[str] = []
        frozen_names = {n for n, _ in frozen}
        for mname, mod in self.user_model.named_modules():
            if not mname or any(mname.startswith(g + ".") for g in groups):
                continue
            ps = [f"{mname}.{n}" for n, _ in mod.named_parameters()]
            if ps and all(p in frozen_names for p in ps):
                groups.append(mname)
        covered = {n for n in frozen_names if any(n.startswith(g + ".") for g in groups)}
        where = [self.label(g) for g in groups] + sorted(frozen_names - covered)
        trainable = [n for n, p in named if p.requires_grad]
        heads = sorted({n.rsplit(".", 1)[0] if "." in n else n for n in trainable})
        sev = "warning" if frac >= 0.5 else "info"
        self.add("frozen_parameters",
                 f"{len(frozen)} of {len(named)} parameter tensors are frozen (requires_grad=False): "
                 f"{_units_count(nf)} of {_units_count(total)} weights ({_pct(frac)} of the model), in "
                 f"{', '.join(groups[:6]) or ', '.join(sorted(frozen_names)[:6])}; only "
                 f"{', '.join(heads[:6])} will train", where, severity=sev,
                 evidence={"frozen_fraction": round(frac, 4), "frozen_tensors": len(frozen)})
        self.check("frozen parameters", f"{_pct(frac)} of the weights")

    def input_scale_check(self) -> None:
        import torch

        xs = [t for t in _leaves(self.inputs if self.mode != "hf" else {
            k: v for k, v in self.inputs.items() if k != "labels"}) if isinstance(t, torch.Tensor)
              and t.is_floating_point() and t.numel() > 1]
        if not xs:
            return
        x = xs[0].detach().float()
        fin = x[torch.isfinite(x)]
        if not fin.numel():
            return
        lo, hi, mean, std = float(fin.min()), float(fin.max()), float(fin.mean()), float(fin.std())
        self.input_stats = (lo, hi, mean, std)
        self.check("input scale", f"{lo:.3g}..{hi:.3g} (mean {mean:.3g}, std {std:.3g})")
        if std > threshold("input_scale_std") or abs(mean) > threshold("input_scale_std"):
            pixels = lo >= 0 and 100 < hi <= 255
            self.add("unnormalised_inputs",
                     f"the inputs span {lo:.4g}..{hi:.4g} (mean {mean:.4g}, std {std:.4g})"
                     + (", raw 0-255 pixel values" if pixels else "")
                     + ": a network trains best on inputs of about unit scale; at this scale the first layer's "
                     "outputs, the initial loss and the gradients are all far too large", ("inputs",),
                     evidence={"min": lo, "max": hi, "mean": mean, "std": std})

    def label_checks(self, y: Any) -> bool:
        import torch

        t = self.targets
        if self.task == "classification" and isinstance(t, torch.Tensor) and self.num_classes:
            valid = t != self.ignore_index()
            tv = t[valid]
            if tv.numel():
                lo, hi = int(tv.min()), int(tv.max())
                if lo < 0 or hi >= self.num_classes:
                    bad = int(((tv < 0) | (tv >= self.num_classes)).sum())
                    self.add("label_out_of_range", f"{bad} target(s) outside 0..{self.num_classes - 1} (the output has "
                             f"{self.num_classes} classes; targets span {lo}..{hi}); on CUDA this is the "
                             "'device-side assert triggered' error", ("targets",))
                    self.check("labels", "out of range")
                    return False
            self.check("labels", f"in 0..{self.num_classes - 1}")
        if self.task == "binary" and isinstance(t, torch.Tensor) and t.numel():
            blo, bhi = float(t.min()), float(t.max())
            if blo < 0 or bhi > 1:
                self.add("label_out_of_range", f"binary targets must lie in [0, 1]; they span {blo:g}..{bhi:g}", ("targets",))
                self.check("labels", "out of range")
                return False
            self.check("labels", "in [0, 1]")
        return True

    def output_checks(self, y: Any) -> None:
        if y is None or self.task == "regression" or self.mode != "fn":
            return
        fn_name = getattr(y.grad_fn, "name", lambda: "")() if y.grad_fn is not None else ""
        yd = y.detach().float()
        in_unit = bool((yd >= 0).all() and (yd <= 1).all())
        rows_sum_1 = self.task == "classification" and y.dim() >= 2 and bool(
            ((yd.sum(dim=self.class_dim) - 1).abs() < 1e-3).all())
        last = self.label(_last_module(self.user_model))
        multiclass = self.loss_name in ("CrossEntropyLoss", "cross_entropy")
        if fn_name in _ACTIVATIONS and self.loss_name in _LOGIT_LOSSES and not rows_sum_1 and \
                (multiclass or fn_name != "SigmoidBackward0"):
            act = _ACTIVATIONS[fn_name]
            neg = float((yd <= 0).float().mean()) if act != "sigmoid" else float("nan")
            detail = (f"{neg:.0%} of the logits are exactly 0 or below" if act != "sigmoid"
                      else f"every logit lies in [{float(yd.min()):.3g}, {float(yd.max()):.3g}]")
            self.add("activation_on_logits", f"the model's output comes out of a {act} ({fn_name}) and goes into "
                     f"{self.loss_name}, which expects unbounded logits: {detail}, so the model cannot express "
                     "'this class is unlikely' and the loss cannot approach 0", (last,),
                     evidence={"grad_fn": fn_name})
            self.check("output vs loss", f"{fn_name} outputs into {self.loss_name}")
            return
        probs = fn_name in _PROB_OUTPUTS or (in_unit and rows_sum_1)
        if probs and self.loss_name in _LOGIT_LOSSES:
            what = "softmax" if (fn_name == "SoftmaxBackward0" or rows_sum_1) else "sigmoid"
            self.add("probabilities_to_loss", f"the model's output is {what} probabilities (in [0, 1]"
                     + (", rows sum to 1" if rows_sum_1 else "") + f") but {self.loss_name} expects raw logits: "
                     "it applies log-softmax/log-sigmoid itself, so gradients shrink and the loss cannot reach 0",
                     (last,))
            self.check("output vs loss", f"{what} probabilities into {self.loss_name}")
        elif self.loss_name in _LOGPROB_LOSSES and bool((yd >= 0).all()):
            self.add("probabilities_to_loss", f"{self.loss_name} expects log-probabilities (<= 0, e.g. log_softmax) "
                     "but the output is non-negative (probabilities or raw scores)", (last,))
            self.check("output vs loss", f"non-negative outputs into {self.loss_name}")
        else:
            self.check("output vs loss", f"{fn_name or 'raw'} outputs into {self.loss_name}")

    def initial_loss_check(self) -> None:
        loss = self.initial_loss
        if loss is None:
            return
        expected: float | None = None
        if self.task == "classification" and self.num_classes and self.num_classes > 1 and self.cross_entropy():
            expected = chance_loss(self.num_classes)
            label = f"-log(1/{self.num_classes}) = {expected:.4g}"
        elif self.task == "binary" and self.loss_name in ("BCEWithLogitsLoss", "binary_cross_entropy_with_logits"):
            expected = math.log(2)
            label = f"log(2) = {expected:.4g}"
        if expected is None:
            self.check("loss at init", "no expected value for this loss")
            return
        if abs(loss - expected) / expected > threshold("init_loss_rel") and not self.has(
                "probabilities_to_loss", "activation_on_logits"):
            if self.has("unnormalised_inputs"):
                lo, hi, _, _ = getattr(self, "input_stats", (0.0, 0.0, 0.0, 0.0))
                self.add("initial_loss_off", f"the loss at init is {loss:.4g}, far from {label}: the inputs span "
                         f"{lo:.4g}..{hi:.4g}, so the logits are as large as the inputs (see unnormalised_inputs)",
                         ("inputs",), fixes=_NORMALISE_FIXES)
            else:
                self.add("initial_loss_off", f"the loss at init is {loss:.4g}, far from {label}: the initial "
                         "outputs are confidently wrong (bad initialisation or output scale)",
                         (self.label(_last_module(self.user_model)),))
        self.check("loss at init", f"{loss:.4g} vs expected {expected:.4g}")

    def gradient_checks(self, work: Any) -> None:
        import torch

        none = [n for n, p in work.named_parameters() if p.requires_grad and p.grad is None]
        if none:
            self.add("no_gradient", f"{len(none)} trainable parameter(s) got no gradient from the loss "
                     "(detached, unused, or behind .data/.item()/no_grad)", none)
        self.check("every parameter gets a gradient", "no" if none else "yes")
        flow: list[tuple[str, float]] = []
        for name, mod in work.named_modules():
            grads = [p.grad for p in mod.parameters(recurse=False) if p.requires_grad and p.grad is not None]
            if grads:
                flat = torch.cat([_values(g).float().reshape(-1) for g in grads])
                flow.append((name or "(model)", float(flat.pow(2).mean().sqrt())))
        self.grad_flow = flow
        pos = [(n, v) for n, v in flow if v > 0 and math.isfinite(v)]
        if len(pos) >= 3:
            lo = min(pos, key=lambda t: t[1])
            hi = max(pos, key=lambda t: t[1])
            ratio = lo[1] / hi[1]
            # vanishing is a decay with depth (small near the input, large near the output), not a spread: at a
            # standard init attention's query/key gradients are tiny next to large ones in every block
            rho = depth_correlation([math.log(v) for _, v in pos])
            if ratio < threshold("vanish_ratio") and rho >= threshold("vanish_depth_correlation"):
                small = [n for n, v in pos if v / hi[1] < threshold("vanish_ratio")]
                self.add("vanishing_gradients", f"per-layer RMS gradients shrink toward the input, spanning "
                         f"{1 / ratio:.3g}x: {lo[0]} gets {lo[1]:.3g} while {hi[0]} gets {hi[1]:.3g} (rank "
                         f"correlation of gradient size with depth {rho:.2f}); {len(small)} layer(s) barely learn",
                         [self.label(n) if n != "(model)" else n for n in small])
            self.check("gradient flow (min/max per-layer RMS; depth correlation)", f"{ratio:.3g}; {rho:.2f}")

    def sensitivity_check(self, y: Any, work: Any) -> None:
        """Does the output depend on the input?  Identical outputs for distinct inputs, or no gradient at all
        reaching the first layer's weights."""
        import torch

        x = next((t for t in _leaves(self.inputs if self.mode != "hf" else {
            k: v for k, v in self.inputs.items() if k != "labels"}) if isinstance(t, torch.Tensor)), None)
        if x is None or y is None or not isinstance(y, torch.Tensor) or x.dim() < 1 or y.dim() < 1:
            return
        n = min(int(x.shape[0]), int(y.shape[0]))
        if n < 2:
            return
        xr = x[:n].reshape(n, -1)
        yr = y[:n].detach().reshape(n, -1)
        distinct_x = bool((xr != xr[:1]).any())
        same_y = bool((yr == yr[:1]).all())
        if distinct_x and same_y:
            self.add("ignores_input", f"the output is identical for all {n} samples of the batch although their "
                     "inputs differ: the forward pass does not depend on its input", ("inputs",),
                     evidence={"samples": n})
            self.check("output depends on the input", "no: identical outputs")
            return
        first = next(((nm, p) for nm, p in work.named_parameters() if p.requires_grad and p.dim() >= 2), None)
        if first is not None and first[1].grad is not None and distinct_x:
            g = _values(first[1].grad)
            others = [_values(p.grad) for nm, p in work.named_parameters() if p.grad is not None and nm != first[0]]
            if not bool(g.any()) and any(bool(o.any()) for o in others):
                mod = first[0].rsplit(".", 1)[0] if "." in first[0] else ""
                self.add("ignores_input", f"the gradient reaching the first layer's weights ({first[0]}) is exactly "
                         "zero while later layers get gradients: its input carries no signal (zeroed, constant "
                         "or detached)", (self.label(mod),))
                self.check("output depends on the input", "no: zero gradient at the first layer")
                return
        self.check("output depends on the input", "yes")

    def dead_check(self, probe: _DeadProbe, when: str, skip_if_found: bool = False) -> None:
        if skip_if_found and any(f.kind == "dead_activations" for f in self.findings):
            return
        dead = probe.dead()
        bad = [(n, frac) for n, frac in dead if frac >= threshold("dead_fraction")]
        if bad:
            worst = max(frac for _, frac in bad)
            sev = "error" if worst >= 1.0 else "warning"
            desc = ", ".join(f"{n}: {frac:.0%}" for n, frac in bad[:6])
            fixes = _NORMALISE_FIXES if self.has("unnormalised_inputs") else None
            why = ""
            if when == "after training" and fixes is None:
                # alive at init, dead after the overfit run: the updates pushed them off
                lr = f" (lr={self.lr_used:g})" if self.lr_used is not None else ""
                why = f"; they fired at init, so the updates killed them: the learning rate is too high{lr}"
                fixes = _LOWER_LR_FIXES
            self.add("dead_activations", f"ReLU units silent for every sample of the batch {when} ({desc}){why}",
                     [self.label(n) for n, _ in bad], severity=sev, fixes=fixes)
        if dead:
            self.check(f"dead ReLU units {when}", ", ".join(f"{n}: {frac:.0%}" for n, frac in dead[:6]))

    def train(self, work: Any, opt: Any, inputs: Any, *, monitor: bool = False, steps: int | None = None,
              phase: str = "", early_stop: bool = False, stop_below: float | None = None,
              deadline: float | None = None) -> list[float]:
        import torch

        from nbdebug.core.training.grads import GradMonitor

        n = steps or self.steps
        losses: list[float] = []
        mon = GradMonitor(work, flush_every=n + 1) if monitor else None
        loss_t: list[Any] = []
        target = None
        if early_stop and self.initial_loss is not None:
            target = max(threshold("overfit_abs"), threshold("overfit_rel") * abs(self.initial_loss))
        if mon is not None:
            mon.attach()
        t0 = time.perf_counter()
        holder: list[Any] = []

        def closure() -> Any:
            opt.zero_grad(set_to_none=True)
            _, loss = self.loss_of(work, inputs)
            loss.backward()
            holder.append(loss)
            return loss

        try:
            for i in range(n):
                holder.clear()
                closure()
                _step(opt, closure)
                loss_t.append(holder[0].detach().float())
                if (i + 1) % 10 == 0:
                    now = time.perf_counter()
                    per = (now - t0) / (i + 1)
                    self.progress(phase, i + 1, n if deadline is None else min(n, i + 1 + int(
                        max(deadline - now, 0) / max(per, 1e-9))), per)
                    if deadline is not None and now > deadline and i + 1 >= _MIN_STEPS:
                        self.cut_by_budget = self.cut_by_budget or monitor
                        break
                    if target is not None or stop_below is not None:
                        recent = torch.stack(loss_t[-5:]).cpu()
                        if not bool(torch.isfinite(recent).all()):
                            break  # diverged: the verdict is in
                        if target is not None and bool((recent <= target).all()):
                            break  # fits the batch
                        if stop_below is not None and bool((recent <= stop_below).all()):
                            break
            losses = [float(v) for v in torch.stack(loss_t).cpu().tolist()]
        finally:
            if mon is not None:
                mon.detach()
        if monitor:
            self.steps_run = len(losses)
        if mon is not None:
            self.monitor_findings(mon, losses)
        return losses

    def monitor_findings(self, mon: Any, losses: list[float]) -> None:
        import numpy as np

        h = mon.history
        g = np.asarray(h.global_norms, dtype=float)
        first_bad = next((i for i, v in enumerate(losses) if not math.isfinite(v)), None)
        nf = h.nonfinite
        lr = f" (lr={self.lr_used:g})" if self.lr_used is not None else ""
        if first_bad is not None or nf:
            step = first_bad if first_bad is not None else nf[0][0]
            fin = g[np.isfinite(g)]
            growth = f"; the gradient norm grew from {fin[0]:.3g} to {fin.max():.3g}" if len(fin) > 1 else ""
            self.add("exploding_gradients", f"training on one batch diverges{lr}: the loss becomes NaN/Inf at step "
                     f"{step}{growth}", nf[0][1] if nf else ())
            self.unstable = f"it diverged at step {step}"
            self.check("overfit run", f"diverged at step {step}")
            return
        if len(g) >= 8:
            k = max(1, min(10, len(g) // 10))
            early, peak = float(np.median(g[:k])), float(g.max())
            if early > 0 and peak / early > threshold("explode_growth"):
                self.add("exploding_gradients", f"the gradient norm grew {peak / early:.3g}x during training{lr} "
                         f"(from {early:.3g} to {peak:.3g})")
        self.check("max gradient norm", f"{float(g.max()) if len(g) else float('nan'):.3g}")

    def overfit_checks(self) -> None:
        if not self.losses or any(not math.isfinite(v) for v in self.losses):
            return
        init = self.initial_loss if self.initial_loss is not None else self.losses[0]
        n = len(self.losses)
        final = min(self.losses[-max(1, n // 10):])
        target = max(threshold("overfit_abs"), threshold("overfit_rel") * abs(init))
        self.check("overfit one batch", f"loss {init:.4g} -> {final:.4g} in {n} steps (target < {target:.3g})")
        if final <= target:
            return
        lr = f"lr={self.lr_used:g}" if self.lr_used is not None else "the learning rate"
        msg = f"after {n} steps on one repeated batch the loss is {final:.4g} (from {init:.4g})"
        self.unstable = _instability(self.losses, init)
        if self.unstable:
            self.add("cannot_overfit", f"{msg}: {self.unstable}, the mark of a learning rate that is too high "
                     f"({lr})", severity="error", fixes=_LOWER_LR_FIXES,
                     evidence={"lr": self.lr_used, "final": final, "min": min(self.losses)})
            return
        earlier = min(self.losses[int(0.6 * n): max(int(0.6 * n) + 1, int(0.8 * n))])
        if self.cut_by_budget and final < 0.999 * earlier:
            budget = self.kw["time_budget"]
            self.add("cannot_overfit", msg + f"; the run stopped at the time budget ({budget:g} s) while the loss was "
                     f"still falling ({earlier:.4g} at step {int(0.6 * n)}), so there is no verdict yet",
                     severity="info", fixes=(Fix("give the doctor more time",
                                                 "nbdebug.doctor(model, batch, loss_fn, time_budget=None)"),
                                             _RAISE_LR_FIXES[0]))
            return
        if abs(init - final) < threshold("overfit_still_rel") * abs(init):
            self.add("cannot_overfit", f"{msg}: the loss has barely moved with {lr}; the updates are too small "
                     "to change the model", severity="error", fixes=_RAISE_LR_FIXES if (
                         self.lr_used is not None and self.lr_used < threshold("tiny_lr")) else None,
                     evidence={"lr": self.lr_used, "final": final})
            return
        if final > threshold("overfit_fail_rel") * abs(init):
            self.add("cannot_overfit", msg + "; a correctly wired model drives it near zero")
        elif final < 0.8 * earlier:
            self.add("cannot_overfit", msg + f"; it is still falling ({earlier:.4g} at step {int(0.6 * n)}): "
                     f"give it more steps or a higher learning rate than {lr}", severity="info",
                     fixes=_RAISE_LR_FIXES)
        else:
            self.add("cannot_overfit", msg + "; it has stalled", severity="warning")

    def consequences(self) -> None:
        """A finding caused by another says so, and points at the cause instead of its own generic fixes."""
        causes = [f for f in self.findings if f.kind in _ROOT_CAUSES]
        if not causes:
            return
        cause = causes[0]
        for i, f in enumerate(self.findings):
            if f.kind in ("cannot_overfit", "initial_loss_off", "vanishing_gradients") and f is not cause and \
                    not (f.kind == "cannot_overfit" and self.unstable):
                self.findings[i] = finding(
                    f.kind, f"{f.message} - most likely a consequence of {cause.kind} ({cause.title.lower()}): "
                    "fix that first", f.where,
                    severity="warning" if f.severity == "error" else f.severity,
                    fixes=(Fix(f"fix {cause.kind} first: " + (cause.fixes[0].title if cause.fixes else cause.title)),
                           *f.fixes[:1]),
                    evidence={**dict(f.evidence), "consequence_of": cause.kind})

    def _accuracy(self, out: Any, targets: Any) -> tuple[float, float] | None:
        """(accuracy, majority-class rate) of a classifier's output on ``targets``; None when not a classifier."""
        import torch

        y = _logits(out)
        if y is None or not isinstance(targets, torch.Tensor):
            return None
        if self.task == "classification":
            if self.class_dim != 1 and y.dim() >= 3:
                pred = y.argmax(dim=-1)
            else:
                pred = y.argmax(dim=1)
            valid = targets != self.ignore_index()
        elif self.task == "binary":
            pred = (y.reshape(targets.shape) > (0.5 if self.loss_name in ("BCELoss", "binary_cross_entropy") else 0))
            pred = pred.to(targets.dtype)
            valid = torch.ones_like(targets, dtype=torch.bool)
        else:
            return None
        if pred.shape != targets.shape or not bool(valid.any()):
            return None
        t = targets[valid]
        acc = float((pred[valid] == t).float().mean())
        majority = float(torch.unique(t, return_counts=True)[1].max()) / t.numel()
        return acc, majority

    def generalisation_check(self, work: Any) -> None:
        """After fitting batch 1, is another batch predicted better than by always guessing its commonest class?
        Labels shuffled apart from the inputs can still be memorised, but never generalise."""
        import torch

        if self.task not in ("classification", "binary") or not self.losses or self.unstable:
            return
        init = self.initial_loss if self.initial_loss is not None else self.losses[0]
        if min(self.losses[-max(1, len(self.losses) // 10):]) > threshold("overfit_rel") * abs(init):
            return  # batch 1 is not fitted: nothing to generalise from
        it = iter(self.kw["dataloader"])
        try:
            next(it)
            other = _to(next(it), self.device)
        except StopIteration:
            return
        try:
            with torch.no_grad():
                if self.mode == "hf":
                    out, targets = self.forward(work, other), other.get("labels")
                else:
                    out, targets = _call(work, other[0]), other[1]
        except Exception as e:  # a second batch of another shape: no verdict
            self.check("second batch", f"could not run: {e!r}")
            return
        got = self._accuracy(out, targets)
        if got is None:
            return
        acc, majority = got
        self.check("second batch after fitting the first", f"accuracy {acc:.0%} (commonest class: {majority:.0%})")
        if acc <= majority + threshold("generalise_margin"):
            self.add("labels_unrelated", f"after fitting one batch, the model predicts another batch with "
                     f"{acc:.0%} accuracy, no better than always guessing its commonest class ({majority:.0%}): it "
                     "memorised the first batch's labels, which do not follow from the inputs", ("targets",),
                     evidence={"accuracy": acc, "majority": majority})

    def baseline_check(self) -> None:
        if not self.losses:
            return
        init = self.initial_loss if self.initial_loss is not None else self.losses[0]
        tail = max(1, len(self.losses) // 10)
        real = min(self.losses[-tail:])
        if not math.isfinite(real):
            self.check("zero-input baseline", "skipped: the real run diverged")
            return
        if real <= max(threshold("overfit_abs"), threshold("overfit_rel") * abs(init)):
            # the real input fits the batch; a zero input that also does is memorising through biases only
            self.check("zero-input baseline", "skipped: the real input fits the batch")
            return
        if self.unstable:
            self.check("zero-input baseline", "skipped: the real run is unstable")
            return
        if self.cut_by_budget:
            self.check("zero-input baseline", "skipped: the real run stopped at the time budget")
            return
        if self.has("ignores_input"):
            self.check("zero-input baseline", "skipped: the output does not depend on the input")
            return
        work, opt = self.fresh()
        zeros = _zeros_inputs(self.inputs, self.mode)
        try:
            self.baseline_losses = self.train(work, opt, zeros, steps=len(self.losses), phase="zero-input baseline",
                                              deadline=self.deadline(0.7))
        except Exception as e:  # a model that cannot take zeros (e.g. an embedding) still gets the other checks
            self.check("zero-input baseline", f"could not run: {e!r}")
            return
        if not self.baseline_losses:
            return
        if len(self.baseline_losses) < len(self.losses):  # cut by the budget: compare at the same step
            real = min(self.losses[max(0, len(self.baseline_losses) - tail): len(self.baseline_losses)])
        zero = min(self.baseline_losses[-tail:])
        self.check("zero-input baseline", f"real input -> {real:.4g}, zero input -> {zero:.4g}")
        if not math.isfinite(zero):
            return
        gap = init - real
        if gap <= 0.01 * abs(init):
            return  # nothing learned at all: cannot_overfit says so
        share = (init - zero) / gap
        # the zero-input run must itself learn that much: a zero input can start lower (e.g. at chance level
        # behind BatchNorm) without learning anything
        zero_gap = self.baseline_losses[0] - zero
        margin = threshold("zero_input_margin")
        if zero <= real + margin * gap and zero_gap >= (1 - margin) * gap:
            how = "as low as" if zero <= real else f"{share:.0%} of the way to"
            self.add("ignores_input", f"with all inputs zeroed the model's loss goes from {init:.4g} to {zero:.4g}, "
                     f"{how} the {real:.4g} it reaches with the real inputs: it learns the target statistics, not "
                     "the input", ("inputs",), evidence={"real": real, "zero": zero, "initial": init})

    def repro_check(self) -> None:
        n = min(3, self.steps)

        def run() -> list[Any]:
            work, opt = self.fresh()
            vals = []
            holder: list[Any] = []

            def closure() -> Any:
                opt.zero_grad(set_to_none=True)
                _, loss = self.loss_of(work, self.inputs)
                loss.backward()
                holder.append(loss)
                return loss

            for _ in range(n):
                holder.clear()
                closure()
                _step(opt, closure)
                vals.append(holder[0].detach().float().reshape(-1))
            vals.append([p.detach().float().sum().reshape(-1) for p in work.parameters()])
            return vals

        self.progress("two seeded runs", 0, 2 * n, self.step_time)
        rep = check_reproducible(run, seed=self.kw["seed"])
        if rep.reproducible:
            self.check("two seeded runs", f"identical over {n} steps")
        else:
            step = rep.first_divergent_step
            when = f"at step {step}" if step is not None and step < n else "in the final parameters"
            self.add("not_reproducible", f"two runs seeded with {self.kw['seed']} differ {when} ({rep.value_a} vs "
                     f"{rep.value_b}): something draws from an unseeded generator or a non-deterministic kernel")
            self.check("two seeded runs", f"differ {when}")

    def dataloader_check(self) -> None:
        loader = self.kw["dataloader"]
        work, opt = self.fresh()
        wait = comp = 0.0
        n = 0
        it = iter(loader)
        t0 = time.perf_counter()
        try:
            first = next(it)  # worker start-up is not steady-state waiting
        except StopIteration:
            self.check("dataloader", "empty")
            return
        self._data_step(work, opt, first)
        for i in range(self.kw["data_batches"]):
            t0 = time.perf_counter()
            try:
                b = next(it)
            except StopIteration:
                break
            t1 = time.perf_counter()
            self._data_step(work, opt, b)
            t2 = time.perf_counter()
            wait += t1 - t0
            comp += t2 - t1
            n += 1
            self.progress("dataloader", i + 1, self.kw["data_batches"], (wait + comp) / n)
        if n == 0:
            self.check("dataloader", "fewer than 2 batches")
            return
        frac = wait / max(wait + comp, 1e-12)
        self.check("dataloader wait", f"{frac:.0%} of step time over {n} batches")
        if frac > threshold("data_wait_fraction"):
            self.add("dataloader_bottleneck", f"{frac:.0%} of each step is spent waiting for the DataLoader "
                     f"({wait / n * 1e3:.1f} ms waiting vs {comp / n * 1e3:.1f} ms computing per batch; "
                     f"num_workers={getattr(loader, 'num_workers', '?')})", ("dataloader",))

    def _data_step(self, work: Any, opt: Any, b: Any) -> None:
        b = _to(b, self.device)
        opt.zero_grad(set_to_none=True)
        if self.mode == "fn":
            loss = self.loss_fn(_call(work, b[0]), b[1])
        elif self.mode == "hf":
            loss = _model_loss(self.forward(work, b))
        else:
            loss = work.training_step(b, 0)
            loss = loss.get("loss") if isinstance(loss, dict) else loss
        loss.backward()
        _step(opt, lambda: loss)

    def report(self) -> DoctorReport:
        chance = chance_loss(self.num_classes) if self.task == "classification" and self.num_classes else None
        return DoctorReport(
            findings=tuple(self.findings),
            task=self.task,
            num_classes=self.num_classes,
            steps=len(self.losses) or self.steps,
            losses=tuple(self.losses),
            baseline_losses=tuple(self.baseline_losses),
            initial_loss=self.initial_loss,
            chance_loss=chance,
            grad_flow=tuple(self.grad_flow),
            checks=tuple(self.checks),
        )


class _DeadProbe:
    """Forward hooks on ReLU modules recording which units stayed zero for every sample."""

    def __init__(self, model: Any) -> None:
        self.alive: dict[str, Any] = {}
        self.handles = []
        for name, m in model.named_modules():
            if type(m).__name__ in _RELU:
                self.handles.append(m.register_forward_hook(self._make(name)))

    def _make(self, name: str) -> Any:
        def hook(module: Any, inputs: Any, out: Any) -> None:
            o = out.detach()
            if o.dim() >= 2:
                # (N, C, ...) -> one flag per unit/channel: did it fire for any sample or position?
                fired = (o > 0).transpose(0, 1).reshape(o.shape[1], -1).any(dim=1)
            else:
                fired = o > 0
            prev = self.alive.get(name)
            self.alive[name] = fired if prev is None else (prev | fired)

        return hook

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def dead(self) -> list[tuple[str, float]]:
        return [(n, 1.0 - float(f.float().mean())) for n, f in self.alive.items()]


def _last_module(model: Any) -> str:
    last = ""
    for name, m in model.named_modules():
        if not list(m.children()):
            last = name
    return last or "(model)"


def _stats_text(stats: dict[str, Any]) -> str:
    parts = [f"{k}={stats[k]}" for k in ("nan", "posinf", "neginf") if stats.get(k)]
    if "shape" in stats:
        parts.append(f"shape {tuple(stats['shape'])}")
    return ", ".join(parts) or "non-finite"


def _pct(frac: float) -> str:
    """A share as a percentage that never rounds a part up to the whole (99.95%, not 100%)."""
    if 0.99 < frac < 1.0 or 0.0 < frac < 0.01:
        return f"{frac:.2%}"
    return f"{frac:.0%}"


def _values(g: Any) -> Any:
    """A gradient's stored values: a sparse gradient (Embedding(sparse=True)) has no reshape."""
    import torch

    g = g.detach()
    if g.layout is torch.sparse_coo:
        return g.coalesce().values()
    if g.layout is not torch.strided:
        return g.values()
    return g


def _leaves(obj: Any) -> list[Any]:
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in _leaves(v)]
    if isinstance(obj, (tuple, list)):
        return [x for v in obj for x in _leaves(v)]
    return [obj]


def _zeros_inputs(inputs: Any, mode: str) -> Any:
    """Zeroed inputs; a Hugging Face batch keeps its labels (and its attention mask, so attention stays defined)."""
    if mode == "hf" and isinstance(inputs, dict):
        return {k: (v if k in ("labels", "attention_mask") else _zeros_like(v)) for k, v in inputs.items()}
    return _zeros_like(inputs)


def _lr_of(opt: Any) -> float | None:
    try:
        lr = opt.param_groups[0].get("lr")
    except (AttributeError, IndexError):
        return None
    try:
        return float(lr)
    except (TypeError, ValueError):
        return None


def _units_count(n: int) -> str:
    from nbdebug._units import fmt_count

    return fmt_count(n)


def _instability(losses: list[float], init: float) -> str:
    """Why a loss curve on one batch is unstable ("" when it is not): rising well above its minimum, or
    oscillating with a large amplitude."""
    n = len(losses)
    if n < 10:
        return ""
    lo = min(losses)
    at = losses.index(lo)
    tail = losses[-max(3, n // 10):]
    now = sorted(tail)[len(tail) // 2]
    if now > max(1.5 * lo, lo + 0.1 * abs(init)) and at < n - len(tail):
        return f"it fell to {lo:.4g} at step {at} and rose again to {now:.4g}"
    if now > 1.05 * abs(init):
        return f"it ends above where it started ({now:.4g} vs {init:.4g})"
    second = losses[n // 2:]
    ups = sum(1 for a, b in zip(second, second[1:]) if b > a)
    swing = sum(abs(b - a) for a, b in zip(second, second[1:])) / max(len(second) - 1, 1)
    if ups >= 0.4 * (len(second) - 1) and swing > 0.1 * max(abs(now), 1e-12):
        return (f"it oscillates (up on {ups} of the last {len(second) - 1} steps, by {swing:.3g} on average "
                f"around {now:.4g})")
    return ""


_MIN_STEPS = 20  # the overfit run takes at least this many steps whatever the budget

_NORMALISE_FIXES = (
    Fix("normalise the inputs to about unit scale (divide pixels by 255, then standardise)",
        "x = (x / 255.0 - mean) / std  # or transforms.Normalize(mean, std) after ToTensor()"),
    Fix("standardise tabular features with statistics of the training set",
        "x = (x - x_train.mean(0)) / x_train.std(0).clamp_min(1e-8)"),
)
_LOWER_LR_FIXES = (
    Fix("lower the learning rate (by 10x, then again until the loss falls steadily)",
        "for g in opt.param_groups: g['lr'] *= 0.1"),
    Fix("add warmup and clip gradients", "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)"),
)
_RAISE_LR_FIXES = (
    Fix("raise the learning rate (Adam: 1e-3 to 3e-3; SGD: 0.01 to 0.1 for this tiny problem)",
        "for g in opt.param_groups: g['lr'] = 1e-3"),
    Fix("give the overfit run more steps", "nbdebug.doctor(model, batch, loss_fn, steps=500)"),
)
# findings whose presence explains a failure to overfit or a bad initial loss
_ROOT_CAUSES = ("label_out_of_range", "probabilities_to_loss", "activation_on_logits", "no_gradient",
                "ignores_input", "frozen_parameters", "unnormalised_inputs", "dead_activations")
_ACTIVATIONS = {"ReluBackward0": "ReLU", "HardtanhBackward0": "ReLU6", "SigmoidBackward0": "sigmoid",
                "GeluBackward0": "GELU", "SoftplusBackward0": "softplus", "AbsBackward0": "abs"}
