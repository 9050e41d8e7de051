"""The doctor's checks while training: what only shows once a copy of the model trains on the batch.

In the order the run calls them: ReLU units that never fire (``dead_activations``, at init and after training);
the overfit-one-batch run (``train``, with a ``GradMonitor`` for exploding norms) and its verdict (``overfit``:
a rising or oscillating curve is a learning rate too high).  The runs beside it (the zero-input baseline, two
seeded runs, the DataLoader's wait) are in ``_side_runs``.
"""

from __future__ import annotations

import math
import time
from typing import Any

from nbdebug.core.doctor._inputs import batch_dim, step_optimizer
from nbdebug.core.doctor._session import Session, fixes_for
from nbdebug.core.doctor._setup_checks import is_frozen_on_purpose
from nbdebug.core.knowledge import threshold

__all__ = ["DeadProbe", "dead_activations", "train", "one_step", "overfit", "overfit_said", "learned_said",
           "loss_without_noise", "MIN_STEPS"]

_RELU = ("ReLU", "ReLU6")
MIN_STEPS = 20  # the overfit run takes at least this many steps when they fit in the budget
FLOOR_STEPS = 8  # fewer steps than this (when slow steps cut a phase) say nothing: the phase does not start


class DeadProbe:
    """Forward hooks on ReLU modules recording which units stayed zero for every sample."""

    def __init__(self, model: Any, samples: int | None = None) -> None:
        self.alive: dict[str, dict[int, Any]] = {}  # module name -> unit count -> fired flags
        self.samples = samples  # the batch's sample count: tells (L, N, C) sequence-first outputs apart
        self.handles = []
        for name, m in model.named_modules():
            if type(m).__name__ in _RELU:
                self.handles.append(m.register_forward_hook(self._make(name)))

    def _make(self, name: str) -> Any:
        def hook(module: Any, inputs: Any, out: Any) -> None:
            o = out.detach()
            if o.dim() >= 2:
                # (N, C, ...) -> one flag per unit/channel: did it fire for any sample or position?  A
                # sequence-first (L, N, C) output keeps its units last, not in the batch's dimension
                unit = o.dim() - 1 if o.dim() == 3 and batch_dim(o, self.samples) == 1 else 1
                fired = (o > 0).movedim(unit, 0).reshape(o.shape[unit], -1).any(dim=1)
            else:
                fired = o > 0
            # one flag tensor per unit count: a module reused at several widths (one ReLU after convs of 32
            # and 16 channels) keeps each width's units apart instead of OR-ing tensors that do not match
            sites = self.alive.setdefault(name, {})
            prev = sites.get(fired.shape[0])
            sites[fired.shape[0]] = fired if prev is None else (prev | fired)

        return hook

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def dead(self) -> list[tuple[str, float]]:
        import torch

        return [(n, 1.0 - float(torch.cat(list(sites.values())).float().mean())) for n, sites in self.alive.items()]


def dead_activations(s: Session, probe: DeadProbe, when: str, skip_if_found: bool = False) -> None:
    """ReLU units that stayed at zero for every sample of the batch (``when``: at init, after training)."""
    if skip_if_found and any(f.kind == "dead_activations" for f in s.findings):
        return
    dead = probe.dead()
    bad = [(n, frac) for n, frac in dead if frac >= threshold("dead_fraction")]
    if bad:
        worst = max(frac for _, frac in bad)
        sev = "error" if worst >= 1.0 else "warning"
        if all(is_frozen_on_purpose(s, f"{n}.") for n, _ in bad):
            sev = "info"  # inside what the user declared frozen: not theirs to fix in this training
        desc = ", ".join(f"{s.label(n)}: {frac:.0%} of its units" for n, frac in bad[:6])
        fixes = s.input_fixes("input_scale_downstream") if s.has("unnormalised_inputs") else None
        why = ""
        if when == "after training" and fixes is None:
            # alive at init, dead after the overfit run: the updates pushed them off
            why = f"; they fired at init, so the updates killed them: the learning rate is too high{s.lr_note()}"
            fixes = fixes_for("lr_too_high")
        s.add("dead_activations", f"ReLU units silent for every sample of the batch {when} ({desc}){why}",
              [s.label(n) for n, _ in bad], severity=sev, fixes=fixes)
    if dead:
        s.check(f"ReLU units silent on the whole batch {when}",
                ", ".join(f"{s.label(n)}: {frac:.0%} of its units" for n, frac in dead[:6]))


def one_step(s: Session, work: Any, opt: Any, inputs: Any, adapter: Any = None) -> Any:
    """One optimizer step of ``work`` on ``inputs``; the step's loss (optimizers such as LBFGS call the closure
    again: the first loss is the step's).  ``adapter``: another way to make the loss (an experiment's)."""
    holder: list[Any] = []
    make = adapter if adapter is not None else s.loss

    def closure() -> Any:
        opt.zero_grad(set_to_none=True)
        _, loss = make.loss(work, inputs)
        loss.backward()
        holder.append(loss)
        return loss

    closure()
    step_optimizer(opt, closure)
    return holder[0]


def train(s: Session, work: Any, opt: Any, inputs: Any, *, monitor: bool = False, steps: int | None = None,
          phase: str = "", early_stop: bool = False, deadline: float | None = None,
          adapter: Any = None, min_steps: int = MIN_STEPS) -> list[float]:
    """Train ``work`` on one repeated batch of ``inputs``; the loss per step.

    ``monitor``: watch the gradients with a ``GradMonitor`` and add what it finds (the overfit run).
    ``early_stop``: stop once the batch is fitted or the loss is no longer finite.  ``deadline``: stop there
    (after at least ``min_steps`` steps); with a deadline, a phase whose fewest steps cannot fit in what is left of
    the time budget does not start (no losses, and a check line that says so), and any phase stops once the whole
    budget is spent.  ``adapter``: another way to make the loss (an experiment's).
    """
    import torch

    from nbdebug.core.training.grads import GradMonitor

    n = steps or s.options.steps
    if deadline is not None and s.out_of_time(phase or "training", min(n, min_steps, FLOOR_STEPS)):
        return []
    budget = s.options.time_budget
    end = s.t0 + budget if deadline is not None and budget is not None else None
    losses: list[float] = []
    mon = GradMonitor(work, flush_every=n + 1) if monitor else None
    loss_t: list[Any] = []
    target = None
    if early_stop and s.initial_loss is not None:
        target = s.fit_target()
    still = _Stillness(work) if monitor and early_stop else None
    if mon is not None:
        mon.attach()
    t0 = time.perf_counter()
    first_step: float | None = None
    try:
        for i in range(n):
            loss_t.append(one_step(s, work, opt, inputs, adapter).detach().float())
            now = time.perf_counter()
            if i == 0:
                first_step = now - t0
            if i == 0 and deadline is not None and first_step is not None:
                # slow steps: fewer than min_steps when min_steps would take three times the phase's share (fewer
                # than 20 steps of SGD with momentum often rise before they fall: a healthy run looks unstable)
                share = max(deadline - t0, 0.0)
                if first_step * min_steps > 3 * share:
                    min_steps = max(FLOOR_STEPS, int(3 * share / max(first_step, 1e-9)))
            spent = end is not None and now >= end  # the whole budget is spent: stop within a step of it
            if (i + 1) % 10 == 0 or spent or (deadline is not None and i + 1 >= min_steps and now > deadline):
                per = (now - t0) / (i + 1)
                s.progress(phase, i + 1, n if deadline is None else min(n, i + 1 + int(
                    max(deadline - now, 0) / max(per, 1e-9))), per)
                if spent or (deadline is not None and now > deadline and i + 1 >= min_steps):
                    s.cut_by_budget = s.cut_by_budget or monitor
                    break
                if target is not None:
                    recent = torch.stack(loss_t[-5:]).cpu()
                    if not bool(torch.isfinite(recent).all()):
                        break  # diverged: the verdict is in
                    if bool((recent <= target).all()):
                        break  # fits the batch
            if still is not None and i + 1 == FLOOR_STEPS and still.moved(work, loss_t) is not None:
                s.params_still = still.change
                break  # nothing moves: more steps of the same say nothing; the experiments get the time
        losses = [float(v) for v in torch.stack(loss_t).cpu().tolist()]
        if len(losses) >= 3 and first_step is not None:
            # the steady pace, past the first step's warm-up: what later phases are planned with
            s.step_time = (time.perf_counter() - t0 - first_step) / (len(losses) - 1)
    finally:
        if mon is not None:
            mon.detach()
    if mon is not None:
        _monitor_findings(s, mon, losses)
    return losses


class _Stillness:
    """Whether the parameters move at all: a fixed sample of each trainable tensor's values (at most 1024 each),
    compared after a few steps.  A loss that has not moved while the parameters moved by less than
    ``still_params_rel`` of their size is a verdict (a learning rate of 1e-8, an optimizer that updates nothing)
    that more steps would only repeat."""

    def __init__(self, work: Any) -> None:
        import torch

        g = torch.Generator().manual_seed(0)
        self.picks = []
        for p in work.parameters():
            if p.requires_grad and p.is_floating_point() and p.numel():
                idx = torch.randint(0, p.numel(), (min(p.numel(), 1024),), generator=g).to(p.device)
                self.picks.append((p, idx, p.detach().reshape(-1)[idx].float().clone()))
        self.change: float | None = None

    def moved(self, work: Any, loss_t: list[Any]) -> float | None:
        """The parameters' relative change when both it and the loss's are too small to matter, else None."""
        import torch

        if not self.picks or len(loss_t) < 2:
            return None
        first, last = float(loss_t[0]), float(loss_t[-1])
        if not abs(last - first) < threshold("overfit_still_rel") * abs(first):
            return None
        diff = torch.stack([(p.detach().reshape(-1)[i].float() - v).norm() for p, i, v in self.picks]).norm()
        size = torch.stack([v.norm() for _, _, v in self.picks]).norm()
        rel = float(diff / size.clamp_min(1e-12))
        if rel >= threshold("still_params_rel"):
            return None
        self.change = rel
        return rel


def _monitor_findings(s: Session, mon: Any, losses: list[float]) -> None:
    """Exploding gradients: a loss that becomes NaN/Inf, or a gradient norm that grows by orders of magnitude."""
    import numpy as np

    h = mon.history
    g = np.asarray(h.global_norms, dtype=float)
    first_bad = next((i for i, v in enumerate(losses) if not math.isfinite(v)), None)
    nf = h.nonfinite
    lr = s.lr_note()
    if first_bad is not None or nf:
        step = first_bad if first_bad is not None else nf[0][0]
        fin = g[np.isfinite(g)]
        growth = f"; the gradient norm grew from {fin[0]:.3g} to {fin.max():.3g}" if len(fin) > 1 else ""
        s.add("exploding_gradients", f"training on one batch diverges{lr}: the loss becomes NaN/Inf at step "
              f"{step}{growth}", nf[0][1] if nf else ())
        s.unstable = f"it diverged at step {step}"
        s.check("overfit run", f"diverged at step {step}")
        return
    if len(g) >= 8:
        k = max(1, min(10, len(g) // 10))
        early, peak = float(np.median(g[:k])), float(g.max())
        if early > 0 and peak / early > threshold("explode_growth"):
            s.add("exploding_gradients", f"the gradient norm grew {peak / early:.3g}x during training{lr} "
                  f"(from {early:.3g} to {peak:.3g})")
    s.check("max gradient norm", f"{float(g.max()) if len(g) else float('nan'):.3g}")


def loss_without_noise(s: Session, work: Any) -> None:
    """What the trained copy's loss on the batch is without the noise of training: with every dropout module's
    ``p`` set to 0 for one forward pass (``s.dropout_off_loss``; ``p`` rather than eval mode: attention code reads
    the module's ``p``, and BatchNorm keeps its batch statistics), and whether two forward passes in its training
    mode differ (``s.stochastic``: dropout, a noise layer, a VAE's sampling).  A noisy training loss keeps a learned
    batch above the fit mark, so the fit is judged without the noise."""
    import torch

    if not s.losses:
        return
    drops = [m for m in work.modules() if isinstance(m, torch.nn.modules.dropout._DropoutNd)
             and m.training and float(m.p) > 0]
    kept = [m.p for m in drops]
    try:
        with torch.no_grad():
            a = float(s.loss.loss(work, s.loss.inputs)[1].detach().float())
            b = float(s.loss.loss(work, s.loss.inputs)[1].detach().float())
            s.stochastic = math.isfinite(a) and math.isfinite(b) and abs(a - b) > 1e-6 * max(abs(a), abs(b), 1e-12)
            if drops:
                for m in drops:
                    m.p = 0.0
                s.dropout_off_loss = float(s.loss.loss(work, s.loss.inputs)[1].detach().float())
    except Exception as e:  # noqa: BLE001 - no verdict without the noise: the training curve alone is judged
        s.check("loss without the noise of training", f"could not run: {type(e).__name__}: {e}")
    finally:
        for m, p in zip(drops, kept):
            m.p = p


def overfit(s: Session) -> None:
    """Did the loss on one repeated batch approach zero (with dropout off, when the model has dropout)?  If not,
    why: unstable, out of time, not moving, or stalled."""
    if not s.losses or any(not math.isfinite(v) for v in s.losses):
        return
    init = s.initial_loss if s.initial_loss is not None else s.losses[0]
    n = len(s.losses)
    final = min(s.losses[-max(1, n // 10):])
    target = s.fit_target()
    off = s.dropout_off_loss
    s.check("overfit one batch", f"loss {init:.4g} -> {final:.4g} in {n} steps (target < {target:.3g})"
            + ("" if off is None else f"; {off:.4g} with dropout off"))
    if final <= target or (off is not None and off <= target):
        return
    lr = f"lr={s.lr_used:g}" if s.lr_used is not None else "the learning rate"
    msg = overfit_said(s)
    if _noise_keeps_it_up(s, msg):
        return
    s.unstable = _instability(s.losses, init)
    if s.unstable and s.cut_by_budget and n < MIN_STEPS:
        # a short run that the time budget cut: healthy SGD with momentum often rises before it falls
        s.add("cannot_overfit", f"{msg}; the run stopped at the time budget ({s.options.time_budget:g} s) after "
              f"{n} steps, too few to tell a learning rate that is too high ({s.unstable}) from a start that "
              "rises before it falls, so there is no verdict yet", severity="info",
              fixes=fixes_for("overfit_out_of_time"))
        s.unstable = ""
        return
    if s.unstable:
        s.add("cannot_overfit", f"{msg}: {s.unstable}, the mark of a learning rate that is too high "
              f"({lr})", severity="error", fixes=fixes_for("lr_too_high"),
              evidence={"lr": s.lr_used, "final": final, "min": min(s.losses)})
        return
    earlier = min(s.losses[int(0.6 * n): max(int(0.6 * n) + 1, int(0.8 * n))])
    tiny_lr = s.lr_used is not None and s.lr_used < threshold("tiny_lr")
    # a loss that barely moved in 50 steps or more is a verdict even when the budget cut the run short, and so is
    # one at a learning rate too small to move it
    if abs(init - final) < threshold("overfit_still_rel") * abs(init) and (not s.cut_by_budget or n >= 50 or tiny_lr):
        moved = "" if s.params_still is None else (
            f" (the parameters moved by {s.params_still:.1g} of their size in {n} steps, so the run stopped there)")
        s.add("cannot_overfit", f"{msg}: the loss has barely moved with {lr}{moved}", severity="error",
              fixes=fixes_for("lr_too_low") if tiny_lr else None,
              evidence={"lr": s.lr_used, "final": final, **({} if s.params_still is None else
                                                           {"parameter_change": s.params_still})})
        return
    if _frozen_part_learns(s, msg):
        return
    if s.cut_by_budget and final < 0.999 * earlier:
        budget = s.options.time_budget
        s.add("cannot_overfit", msg + f"; the run stopped at the time budget ({budget:g} s) while the loss was "
              f"still falling ({earlier:.4g} at step {int(0.6 * n)}), so there is no verdict yet",
              severity="info", fixes=fixes_for("overfit_out_of_time"))
        return
    if final > threshold("overfit_fail_rel") * abs(init):
        s.add("cannot_overfit", msg + "; a correctly wired model drives it near zero")
    elif final < 0.8 * earlier:
        # more steps take it further; whether a higher lr would is not measured here, so it is not advised
        s.add("cannot_overfit", msg + f"; it is still falling ({earlier:.4g} at step {int(0.6 * n)}) with {lr}: "
              "more steps take it further", severity="info", fixes=fixes_for("overfit_out_of_time"))
    else:
        s.add("cannot_overfit", msg + "; it has stalled", severity="warning")


def overfit_said(s: Session) -> str:
    """``after 200 steps on one repeated batch the loss is 0.41 (from 0.697)``."""
    init = s.initial_loss if s.initial_loss is not None else s.losses[0]
    final = min(s.losses[-max(1, len(s.losses) // 10):])
    return f"after {len(s.losses)} steps on one repeated batch the loss is {final:.4g} (from {init:.4g})"


def learned_said(s: Session, share: float) -> str:
    """``the loss went 0.697 -> 0.387, well under the 0.59 that the label frequencies alone give``."""
    floor = s.label_floor()
    init = s.initial_loss if s.initial_loss is not None else s.losses[0]
    final = s.final_loss()
    if floor is not None and floor < init:
        where = ("well under" if share >= threshold("noisy_learns_rel") else "under") if share > 0 else "not yet under"
        return f"the loss went {init:.4g} -> {final:.4g}, {where} the {floor:.4g} that the label frequencies alone give"
    return f"the loss went {init:.4g} -> {final:.4g}, {(init - final) / abs(init):.0%} lower"


def _frozen_part_learns(s: Session, msg: str) -> bool:
    """With a part frozen on purpose, the question is what the part that trains can do: when its loss goes below
    what the label frequencies alone give (``head_learns_rel``) it learns from the input, and the batch not being
    memorised is a note, not a fault (a linear head on frozen features may not separate 16 samples at all).  True
    when that note was added."""
    from nbdebug.core.doctor._setup_checks import frozen_as_declared

    share = s.learned_share()
    if not frozen_as_declared(s) or share < threshold("head_learns_rel"):
        return False
    trainable = [(n, p) for n, p in s.user_model.named_parameters() if p.requires_grad]
    parts = sorted({n.rsplit(".", 1)[0] if "." in n else n for n, _ in trainable})
    weights = sum(p.numel() for _, p in trainable)
    s.add("cannot_overfit", f"{msg}; only what you train ({', '.join(parts[:4])}: {weights:,} weights, the rest frozen "
          f"as you declared) learns here: {learned_said(s, share)}; a small trainable part on frozen features need "
          "not memorise a batch, so this is no fault", severity="info", fixes=(),
          evidence={"learned_share": round(share, 4), "trainable_weights": weights})
    return True


def _noise_keeps_it_up(s: Session, msg: str) -> bool:
    """A training loss that is noisy by the model's design (dropout, a noise layer, sampling), on a batch whose loss
    went well down (``noisy_learns_rel`` of its start, or of what the label frequencies give; with dropout, measured
    with dropout off) is learned: the curve's noise, and the batch not memorised under it, are no fault (a rising or
    oscillating curve is the noise's too).  True when that note was added."""
    off = s.dropout_off_loss
    share = s.learned_share()
    if not (off is not None and math.isfinite(off) or s.stochastic) or share < threshold("noisy_learns_rel"):
        return False
    if off is not None:
        how = f" with dropout on; with dropout off the trained copy's loss on it is {off:.4g}"
        why = "dropout's noise keeps the training loss up"
    else:
        how = "; two forward passes of the trained copy on it give different losses"
        why = "the model's own noise (a noise layer, sampling) keeps the training loss up"
    s.add("cannot_overfit", f"{msg}{how} ({learned_said(s, share)}): it learns, and {why}, so this is no fault",
          severity="info", fixes=(), evidence={"dropout_off": off, "stochastic": s.stochastic,
                                               "learned_share": round(share, 4)})
    return True


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
