"""Labels against inputs, given a DataLoader: after fitting the first batch, are samples the model did not train
on predicted better than their labels shuffled among them would be (a permutation test)?  Labels shuffled apart
from their inputs can still be memorised, but never generalise.  The check is always listed: it ran, or why not.
"""

from __future__ import annotations

from typing import Any

from nbdebug.core.doctor._inputs import batch_dim, logits_of, sample_count, to_device
from nbdebug.core.doctor._session import Session
from nbdebug.core.doctor._train_checks import learned_said
from nbdebug.core.knowledge import threshold

__all__ = ["generalisation", "CHECK"]

CHECK = "labels against inputs (a second batch after fitting the first)"
_ROWS = 64  # unseen samples wanted for a verdict
_BATCHES = 8  # most batches read to find them
_PERMUTATIONS = 200


def generalisation(s: Session, work: Any) -> None:
    """Predict samples of the DataLoader that are not in the fitted batch, and compare the accuracy with the
    commonest class's rate and with the accuracy of the same predictions against the labels shuffled."""
    import torch

    if s.task not in ("classification", "binary"):
        s.check(CHECK, f"skipped: the task is {s.task or 'not a classification'}, no class labels to compare")
        return
    if not s.losses or s.unstable:
        s.check(CHECK, "skipped: " + ("the overfit run is unstable" if s.unstable else "no overfit run"))
        return
    share = s.learned_share()
    if s.final_loss() > s.fit_target() and share < threshold("generalise_learned_rel"):
        # what counts is how much of the batch was learned, not whether it was memorised by the doctor's mark: a
        # model that took the loss well down on one batch predicts others above chance when labels follow inputs
        s.check(CHECK, f"skipped: the first batch is barely learned (the loss went down by {max(share, 0):.0%} of "
                "its start), so there is nothing to generalise from")
        return
    try:
        inputs, targets, rows = _unseen(s)
    except Exception as e:  # noqa: BLE001 - a DataLoader the doctor cannot read again: no verdict, said so
        s.check(CHECK, f"skipped: could not read more batches ({type(e).__name__}: {e})")
        return
    if inputs is None:
        s.check(CHECK, "skipped: the DataLoader holds no sample outside the fitted batch")
        return
    try:
        with torch.no_grad():
            out = s.loss.forward(work, inputs)
    except Exception as e:  # noqa: BLE001 - a second batch of another shape: no verdict
        s.check(CHECK, f"skipped: the model could not run on another batch ({type(e).__name__}: {e})")
        return
    got = _predictions(s, out, targets)
    if got is None:
        s.check(CHECK, "skipped: the output does not give one class per label")
        return
    pred, t = got
    acc = float((pred == t).float().mean())
    majority = float(torch.unique(t, return_counts=True)[1].max()) / t.numel()
    g = torch.Generator().manual_seed(0)
    perm = [float((pred == t[torch.randperm(t.numel(), generator=g)]).float().mean()) for _ in range(_PERMUTATIONS)]
    p = (1 + sum(a >= acc for a in perm)) / (1 + _PERMUTATIONS)
    s.check(CHECK, f"accuracy {acc:.0%} on {t.numel()} {rows} (commonest class: {majority:.0%}; with the labels "
            f"shuffled among them: {sum(perm) / len(perm):.0%}, p = {p:.2g})")
    if acc <= majority + threshold("generalise_margin"):
        control = _control(s, inputs, t.numel())
        if control == "time":
            s.check(CHECK, f"no verdict (time): accuracy {acc:.0%} on {t.numel()} {rows}, but the copy trained on "
                    "labels that follow from the inputs (which says whether one batch can tell) was cut short by "
                    "the time budget")
            return
        if isinstance(control, tuple) and control[0] <= control[1] + threshold("generalise_margin"):
            s.check(CHECK, f"no verdict: accuracy {acc:.0%} on {t.numel()} {rows}, but a copy trained the same way "
                    f"on labels that follow from the inputs by construction (a randomly initialised copy's "
                    f"predictions) predicts them no better ({control[0]:.0%}, commonest {control[1]:.0%}): this "
                    "model does not generalise from one batch, so one batch says nothing about the labels")
            return
        said = "" if not isinstance(control, tuple) else (f"; a copy trained the same way on labels that follow from the inputs "
                                           f"(a random copy's predictions) reaches {control[0]:.0%} on them")
        s.add("labels_unrelated", f"after training on one batch ({learned_said(s, share)}), the model predicts "
              f"{t.numel()} {rows} with {acc:.0%} accuracy, no better than always guessing their commonest class "
              f"({majority:.0%}) or than their labels shuffled among them ({sum(perm) / len(perm):.0%}, p = {p:.2g}): "
              f"it learned the first batch's labels, which do not follow from the inputs{said}", ("targets",),
              evidence={"accuracy": acc, "majority": majority, "p_value": p, "samples": int(t.numel())})


def _unseen(s: Session) -> tuple[Any, Any, str]:
    """(inputs, targets, what they are) of up to ``_ROWS`` samples from the DataLoader's batches that are not in
    the fitted batch (a shuffling DataLoader draws some of them again); for inputs that are not one tensor, the
    second batch as it comes.  (None, None, "") when there is none."""
    import torch

    it = iter(s.options.dataloader)
    seen_x = s.loss.inputs
    if not isinstance(seen_x, torch.Tensor) or batch_dim(seen_x, sample_count(s.loss.targets)) != 0:
        # several tensors, or samples not along the first dimension: no rows to compare, the next batch as it is
        next(it, None)  # the fitted batch
        other = next(it, None)
        if other is None:
            return None, None, ""
        x, t = s.loss.split(to_device(other, s.device))
        return x, t, "samples of a second batch"
    seen = {r.numpy().tobytes() for r in seen_x.detach().cpu().reshape(seen_x.shape[0], -1)}
    xs, ts, n = [], [], 0
    for i, b in enumerate(it):
        if i >= _BATCHES or n >= _ROWS:
            break
        x, t = s.loss.split(to_device(b, s.device))
        if not isinstance(x, torch.Tensor) or not isinstance(t, torch.Tensor) or x.shape[1:] != seen_x.shape[1:] \
                or batch_dim(x, sample_count(t)) != 0:
            continue
        keep = [j for j, r in enumerate(x.detach().cpu().reshape(x.shape[0], -1)) if r.numpy().tobytes() not in seen]
        xs.append(x[keep])
        ts.append(t[keep])
        n += len(keep)
    if not n:
        return None, None, ""
    return torch.cat(xs)[:_ROWS], torch.cat(ts)[:_ROWS], "samples it did not train on"


def _predictions(s: Session, out: Any, targets: Any) -> tuple[Any, Any] | None:
    """(predicted classes, labels) at the labelled positions of a classifier's output; None when not a classifier."""
    import torch

    y = logits_of(out)
    if y is None or not isinstance(targets, torch.Tensor):
        return None
    if s.task == "classification":
        pred = y.argmax(dim=-1) if s.class_dim != 1 and y.dim() >= 3 else y.argmax(dim=1)
        valid = targets != s.ignore_index()
    else:
        pred = (y.reshape(targets.shape) > (0.5 if s.loss.loss_name in ("BCELoss", "binary_cross_entropy") else 0))
        pred = pred.to(targets.dtype)
        valid = torch.ones_like(targets, dtype=torch.bool)
    if pred.shape != targets.shape or not bool(valid.any()):
        return None
    return pred[valid], targets[valid]


def _control(s: Session, unseen: Any, rows: int) -> tuple[float, float] | str | None:
    """(accuracy, commonest class's rate) on the unseen samples of a fresh copy trained as long as the user's run
    on the fitted batch with labels that follow from the inputs by construction: a re-initialised copy's
    predictions (balanced: its logits less their mean over the batch).  A model that cannot generalise from one
    batch even then says nothing about the user's labels.  None where the labels are not one class per sample;
    ``"time"`` when the time budget cut its training short."""
    import torch

    from nbdebug.core.doctor._train_checks import train

    t = s.loss.targets
    if not isinstance(t, torch.Tensor) or t.dim() != 1 or s.loss.mode not in ("fn", "hf"):
        return None
    try:
        teacher, _ = s.fresh()
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(s.options.seed + 1)
            for m in teacher.modules():
                if callable(getattr(m, "reset_parameters", None)):
                    m.reset_parameters()
            teacher.eval()
            seen_y, unseen_y = (_labels(s, logits_of(s.loss.forward(teacher, x))) for x in (s.loss.inputs, unseen))
        if seen_y is None or unseen_y is None or seen_y.shape != t.shape or unseen_y.numel() != rows:
            return None
        work, opt = s.fresh()
        inputs = {**s.loss.inputs, "labels": seen_y} if s.loss.mode == "hf" else s.loss.inputs
        done = train(s, work, opt, inputs, steps=len(s.losses), phase="labels: control", adapter=_Targets(s, seen_y),
                     deadline=s.deadline(0.7), min_steps=len(s.losses))
        if len(done) < len(s.losses):
            return "time"
        with torch.no_grad():
            pred = _labels(s, logits_of(s.loss.forward(work, unseen)), centre=False)
    except Exception:  # noqa: BLE001 - no control: the verdict stands on the user's labels alone
        return None
    if pred is None or pred.shape != unseen_y.shape:
        return None
    majority = float(torch.unique(unseen_y, return_counts=True)[1].max()) / unseen_y.numel()
    return float((pred == unseen_y).float().mean()), majority


class _Targets:
    """The user's loss, on other targets (the control's labels)."""

    def __init__(self, s: Session, targets: Any) -> None:
        self.s, self.targets = s, targets

    def loss(self, work: Any, inputs: Any, targets: Any = None) -> tuple[Any, Any]:
        if self.s.loss.mode == "hf":
            return self.s.loss.loss(work, {**inputs, "labels": self.targets})
        return self.s.loss.loss(work, inputs, self.targets.to(self.s.loss.targets.dtype))


def _labels(s: Session, y: Any, centre: bool = True) -> Any:
    """One class per sample from (N, C) logits or (N,)/(N, 1) binary scores; balanced over the batch by taking
    the logits less their mean over the samples (the median score for a binary one)."""
    import torch

    if not isinstance(y, torch.Tensor) or y.dim() < 1:
        return None
    y = y.detach().float()
    if s.task == "classification" and y.dim() == 2:
        return (y - y.mean(0) if centre else y).argmax(1)
    if s.task == "binary" and y.numel() == y.shape[0]:
        y = y.reshape(-1)
        cut = float(y.median()) if centre else (0.5 if s.loss.loss_name in ("BCELoss", "binary_cross_entropy")
                                                else 0.0)
        return (y > cut).long()
    return None
