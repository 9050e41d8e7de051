"""The checks of ``doctor``, run on a deep copy of the model."""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Iterable
from typing import Any

from nbdebug.core._dynamics import chance_loss
from nbdebug.core._findings import Finding
from nbdebug.core.doctor._report import DoctorReport
from nbdebug.core.doctor._repro import RngGuard, check_reproducible
from nbdebug.core.knowledge import finding, threshold
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


# -- the doctor ----------------------------------------------------------------------------------------------
def doctor(
    model: Any,
    batch: Any,
    loss_fn: Any,
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
) -> DoctorReport:
    """Check a model, a batch and a loss for the usual silent training bugs; never changes the caller's objects.

    Parameters
    ----------
    model : torch.nn.Module
        The model (deep-copied; the original is not touched).
    batch : tuple or None
        ``(inputs, targets)``; ``inputs`` may be a tensor, a tuple (``model(*inputs)``) or a dict.  None: the
        first batch of ``dataloader``.
    loss_fn : callable
        ``loss_fn(outputs, targets) -> scalar tensor`` (an ``nn.Module`` loss or a function).
    optimizer : torch.optim.Optimizer or callable, optional
        Re-created on the copy with the same class and hyper-parameters (state is not copied); a callable is a
        factory ``params -> optimizer``; None: Adam(lr=3e-3).
    steps : int
        Steps of the overfit-one-batch run (and of the zero-input baseline).
    lr : float, optional
        Learning rate of the default optimizer.
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
    if not callable(loss_fn):
        raise InvalidArgumentError(
            f"doctor: loss_fn must be callable (outputs, targets) -> loss, got {type(loss_fn).__name__}"
        )
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer) and not callable(optimizer):
        raise InvalidArgumentError(
            f"doctor: optimizer must be a torch.optim.Optimizer, a factory params -> optimizer, or None, got "
            f"{type(optimizer).__name__}"
        )
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
    if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
        raise InvalidArgumentError(
            f"doctor: batch must be (inputs, targets), got {type(batch).__name__}"
            + (f" of length {len(batch)}" if isinstance(batch, (tuple, list)) else "")
        )
    with RngGuard(), torch.random.fork_rng(devices=[]):
        return _Doctor(model, batch, loss_fn, optimizer, steps=steps, lr=lr, num_classes=num_classes,
                       dataloader=dataloader, seed=seed, baseline=baseline, reproducibility=reproducibility,
                       data_batches=data_batches).run()


class _Doctor:
    def __init__(self, model: Any, batch: Any, loss_fn: Any, optimizer: Any, **kw: Any) -> None:
        self.user_model = model
        self.loss_fn = loss_fn
        self.user_opt = optimizer
        self.kw = kw
        self.steps: int = kw["steps"]
        self.findings: list[Finding] = []
        self.checks: list[tuple[str, str]] = []
        try:
            p = next(model.parameters())
            self.device = p.device
        except StopIteration:
            self.device = None
        self.inputs = _to(batch[0], self.device)
        self.targets = _to(batch[1], self.device)
        self.loss_name = _loss_name(loss_fn)
        self.task = "regression"
        self.num_classes: int | None = kw["num_classes"]
        self.class_dim = 1
        self.losses: list[float] = []
        self.baseline_losses: list[float] = []
        self.initial_loss: float | None = None
        self.grad_flow: list[tuple[str, float]] = []

    def add(self, kind: str, message: str, where: Iterable[str] = (), severity: str | None = None) -> None:
        self.findings.append(finding(kind, message, tuple(where), severity=severity))

    def check(self, name: str, outcome: str) -> None:
        self.checks.append((name, outcome))

    def fresh(self) -> tuple[Any, Any]:
        """A deep copy of the user's model in train mode, and an optimizer for it."""
        import torch

        work = copy.deepcopy(self.user_model)
        work.train()
        params = [p for p in work.parameters() if p.requires_grad]
        opt = self.user_opt
        if opt is None:
            return work, torch.optim.Adam(params, lr=self.kw["lr"] or 3e-3)
        if isinstance(opt, torch.optim.Optimizer):
            index = {id(p): i for i, p in enumerate(self.user_model.parameters())}
            all_params = list(work.parameters())
            groups = []
            for g in opt.param_groups:
                hp = {k: v for k, v in g.items() if k != "params"}
                if self.kw["lr"] is not None:
                    hp["lr"] = self.kw["lr"]
                ps = [all_params[index[id(p)]] for p in g["params"] if id(p) in index]
                if ps:
                    groups.append({"params": ps, **hp})
            return work, type(opt)(groups, **opt.defaults)
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
        if name in ("CrossEntropyLoss", "cross_entropy") and out is not None and out.dim() >= 2:
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

    # -- the checks ------------------------------------------------------------------------------------------
    def run(self) -> DoctorReport:
        import torch

        from nbdebug.core.nan import nan_sentinel

        work, opt = self.fresh()
        dead_probe = _DeadProbe(work)
        out = None
        try:
            with nan_sentinel(work) as sentinel:
                out = _call(work, self.inputs)
                sentinel.check()
        except NonFiniteError as e:
            self.add("nonfinite_forward", f"the first forward pass produces NaN/Inf in module {e.module!r} "
                     f"({_stats_text(e.stats)})", (e.module,))
            self.check("forward", "non-finite")
            return self.report()
        finally:
            dead_probe.remove()
        self.check("forward", "finite")
        y = _first_tensor(out)
        self.infer_task(y)
        if not self.label_checks(y):
            return self.report()
        self.output_checks(out)
        # the first step: loss, gradients
        try:
            with nan_sentinel(work) as sentinel:
                out = _call(work, self.inputs)
                loss = self.loss_fn(out, self.targets)
                if not torch.isfinite(loss).all():
                    raise NonFiniteError("loss", module="(loss)", step=0, phase="forward",
                                         stats={"loss": float(loss.detach().float().mean())})
                opt.zero_grad(set_to_none=True)
                loss.backward()
                sentinel.check()
        except NonFiniteError as e:
            kind = "nonfinite_forward" if e.phase == "forward" else "nonfinite_gradient"
            self.add(kind, f"non-finite values in the {e.phase} pass of the first step, first in {e.module!r} "
                     f"({_stats_text(e.stats)})", (e.module,))
            self.check("first step", f"non-finite {e.phase}")
            return self.report()
        self.initial_loss = float(loss.detach())
        self.check("initial loss", f"{self.initial_loss:.4g}")
        self.initial_loss_check()
        self.gradient_checks(work)
        self.dead_check(dead_probe, "at init")
        # overfit one batch
        self.losses = self.train(work, opt, self.inputs, monitor=True)
        self.overfit_checks()
        probe2 = _DeadProbe(work)
        try:
            with torch.no_grad():
                _call(work, self.inputs)
        finally:
            probe2.remove()
        self.dead_check(probe2, "after training", skip_if_found=True)
        if self.kw["baseline"]:
            self.baseline_check()
        if self.kw["reproducibility"]:
            self.repro_check()
        if self.kw["dataloader"] is not None:
            self.dataloader_check()
        return self.report()

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

    def output_checks(self, out: Any) -> None:
        y = _first_tensor(out)
        if y is None or self.task == "regression":
            return
        fn_name = getattr(y.grad_fn, "name", lambda: "")() if y.grad_fn is not None else ""
        yd = y.detach().float()
        in_unit = bool((yd >= 0).all() and (yd <= 1).all())
        rows_sum_1 = self.task == "classification" and y.dim() >= 2 and bool(
            ((yd.sum(dim=self.class_dim) - 1).abs() < 1e-3).all())
        probs = fn_name in _PROB_OUTPUTS or (in_unit and rows_sum_1)
        if probs and self.loss_name in _LOGIT_LOSSES:
            what = "softmax" if (fn_name == "SoftmaxBackward0" or rows_sum_1) else "sigmoid"
            self.add("probabilities_to_loss", f"the model's output is {what} probabilities (in [0, 1]"
                     + (", rows sum to 1" if rows_sum_1 else "") + f") but {self.loss_name} expects raw logits: "
                     "it applies log-softmax/log-sigmoid itself, so gradients shrink and the loss cannot reach 0",
                     (_last_module(self.user_model),))
            self.check("output vs loss", f"{what} probabilities into {self.loss_name}")
        elif self.loss_name in _LOGPROB_LOSSES and bool((yd >= 0).all()):
            self.add("probabilities_to_loss", f"{self.loss_name} expects log-probabilities (<= 0, e.g. log_softmax) "
                     "but the output is non-negative (probabilities or raw scores)", (_last_module(self.user_model),))
            self.check("output vs loss", f"non-negative outputs into {self.loss_name}")
        else:
            self.check("output vs loss", f"{fn_name or 'raw'} outputs into {self.loss_name}")

    def initial_loss_check(self) -> None:
        loss = self.initial_loss
        if loss is None:
            return
        expected: float | None = None
        if self.task == "classification" and self.num_classes and self.num_classes > 1 and \
                self.loss_name in ("CrossEntropyLoss", "cross_entropy"):
            expected = chance_loss(self.num_classes)
            label = f"-log(1/{self.num_classes}) = {expected:.4g}"
        elif self.task == "binary" and self.loss_name in ("BCEWithLogitsLoss", "binary_cross_entropy_with_logits"):
            expected = math.log(2)
            label = f"log(2) = {expected:.4g}"
        if expected is None:
            self.check("loss at init", "no expected value for this loss")
            return
        if abs(loss - expected) / expected > threshold("init_loss_rel"):
            self.add("initial_loss_off", f"the loss at init is {loss:.4g}, far from {label}: the initial outputs are "
                     "confidently wrong (bad initialisation or output scale)", (_last_module(self.user_model),))
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
                flat = torch.cat([g.detach().float().reshape(-1) for g in grads])
                flow.append((name or "(model)", float(flat.pow(2).mean().sqrt())))
        self.grad_flow = flow
        pos = [(n, v) for n, v in flow if v > 0 and math.isfinite(v)]
        if len(pos) >= 3:
            lo = min(pos, key=lambda t: t[1])
            hi = max(pos, key=lambda t: t[1])
            ratio = lo[1] / hi[1]
            if ratio < threshold("vanish_ratio"):
                small = [n for n, v in pos if v / hi[1] < threshold("vanish_ratio")]
                self.add("vanishing_gradients", f"per-layer RMS gradients span {1 / ratio:.3g}x: {lo[0]} gets "
                         f"{lo[1]:.3g} while {hi[0]} gets {hi[1]:.3g}; {len(small)} layer(s) barely learn", small)
            self.check("gradient flow (min/max per-layer RMS)", f"{ratio:.3g}")

    def dead_check(self, probe: _DeadProbe, when: str, skip_if_found: bool = False) -> None:
        if skip_if_found and any(f.kind == "dead_activations" for f in self.findings):
            return
        dead = probe.dead()
        bad = [(n, frac) for n, frac in dead if frac >= threshold("dead_fraction")]
        if bad:
            worst = max(frac for _, frac in bad)
            sev = "error" if worst >= 1.0 else "warning"
            desc = ", ".join(f"{n}: {frac:.0%}" for n, frac in bad[:6])
            self.add("dead_activations", f"ReLU units silent for every sample of the batch {when} ({desc})",
                     [n for n, _ in bad], severity=sev)
        if dead:
            self.check(f"dead ReLU units {when}", ", ".join(f"{n}: {frac:.0%}" for n, frac in dead[:6]))

    def train(self, work: Any, opt: Any, inputs: Any, *, monitor: bool = False) -> list[float]:
        import torch

        from nbdebug.core.grads import GradMonitor

        losses: list[float] = []
        mon = GradMonitor(work, flush_every=self.steps + 1) if monitor else None
        loss_t: list[Any] = []
        if mon is not None:
            mon.attach()
        try:
            for _ in range(self.steps):
                opt.zero_grad(set_to_none=True)
                loss = self.loss_fn(_call(work, inputs), self.targets)
                loss.backward()
                opt.step()
                loss_t.append(loss.detach().float())
            losses = [float(v) for v in torch.stack(loss_t).cpu().tolist()]
        finally:
            if mon is not None:
                mon.detach()
        if mon is not None:
            self.monitor_findings(mon, losses)
        return losses

    def monitor_findings(self, mon: Any, losses: list[float]) -> None:
        import numpy as np

        h = mon.history
        g = np.asarray(h.global_norms, dtype=float)
        first_bad = next((i for i, v in enumerate(losses) if not math.isfinite(v)), None)
        nf = h.nonfinite
        if first_bad is not None or nf:
            step = first_bad if first_bad is not None else nf[0][0]
            fin = g[np.isfinite(g)]
            growth = f"; the gradient norm grew from {fin[0]:.3g} to {fin.max():.3g}" if len(fin) > 1 else ""
            self.add("exploding_gradients", f"training on one batch diverges: the loss becomes NaN/Inf at step {step}"
                     f"{growth}", nf[0][1] if nf else ())
            self.check("overfit run", f"diverged at step {step}")
            return
        if len(g) >= 8:
            k = max(1, min(10, len(g) // 10))
            early, peak = float(np.median(g[:k])), float(g.max())
            if early > 0 and peak / early > threshold("explode_growth"):
                self.add("exploding_gradients", f"the gradient norm grew {peak / early:.3g}x during training "
                         f"(from {early:.3g} to {peak:.3g})")
        self.check("max gradient norm", f"{float(g.max()) if len(g) else float('nan'):.3g}")

    def overfit_checks(self) -> None:
        if not self.losses or any(not math.isfinite(v) for v in self.losses):
            return
        init = self.initial_loss if self.initial_loss is not None else self.losses[0]
        final = min(self.losses[-max(1, len(self.losses) // 10):])
        target = max(threshold("overfit_abs"), threshold("overfit_rel") * abs(init))
        self.check("overfit one batch", f"loss {init:.4g} -> {final:.4g} in {self.steps} steps (target < {target:.3g})")
        if final > target:
            n = len(self.losses)
            earlier = min(self.losses[int(0.6 * n) : max(int(0.6 * n) + 1, int(0.8 * n))])
            msg = (f"after {self.steps} steps on one repeated batch the loss is {final:.4g} (from {init:.4g}); "
                   "a correctly wired model drives it near zero")
            if final > threshold("overfit_fail_rel") * abs(init):
                self.add("cannot_overfit", msg)
            elif final < 0.8 * earlier:
                self.add("cannot_overfit", msg + f"; it is still falling ({earlier:.4g} at step {int(0.6 * n)}): "
                         "give it more steps or a higher learning rate", severity="info")
            else:
                self.add("cannot_overfit", msg + "; it has stalled", severity="warning")

    def baseline_check(self) -> None:
        work, opt = self.fresh()
        zeros = _zeros_like(self.inputs)
        try:
            self.baseline_losses = self.train(work, opt, zeros)
        except Exception as e:  # a model that cannot take zeros (e.g. an embedding) still gets the other checks
            self.check("zero-input baseline", f"could not run: {e!r}")
            return
        if not self.losses or not self.baseline_losses:
            return
        init = self.initial_loss if self.initial_loss is not None else self.losses[0]
        tail = max(1, len(self.losses) // 10)
        real = min(self.losses[-tail:])
        zero = min(self.baseline_losses[-tail:])
        self.check("zero-input baseline", f"real input -> {real:.4g}, zero input -> {zero:.4g}")
        if not (math.isfinite(real) and math.isfinite(zero)):
            return
        gap = init - real
        if gap <= 0.01 * abs(init):
            return  # nothing learned at all: cannot_overfit says so
        if real <= max(threshold("overfit_abs"), threshold("overfit_rel") * abs(init)):
            return  # the real input fits the batch; a zero input that also does is memorising through biases only
        if zero <= real + threshold("zero_input_margin") * gap:
            self.add("ignores_input", f"with all inputs zeroed the model reaches a loss of {zero:.4g}, as good as "
                     f"with the real inputs ({real:.4g}): it learns the target statistics, not the input")

    def repro_check(self) -> None:
        n = min(3, self.steps)

        def run() -> list[Any]:
            work, opt = self.fresh()
            vals = []
            for _ in range(n):
                opt.zero_grad(set_to_none=True)
                loss = self.loss_fn(_call(work, self.inputs), self.targets)
                loss.backward()
                opt.step()
                vals.append(loss.detach().float().reshape(-1))
            vals.append([p.detach().float().sum().reshape(-1) for p in work.parameters()])
            return vals

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
        for _ in range(self.kw["data_batches"]):
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
        x, y = _to(b[0], self.device), _to(b[1], self.device)
        opt.zero_grad(set_to_none=True)
        self.loss_fn(_call(work, x), y).backward()
        opt.step()

    def report(self) -> DoctorReport:
        chance = chance_loss(self.num_classes) if self.task == "classification" and self.num_classes else None
        return DoctorReport(
            findings=tuple(self.findings),
            task=self.task,
            num_classes=self.num_classes,
            steps=self.steps,
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
