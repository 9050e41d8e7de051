"""Labels against inputs: are samples the model did not train on predicted better than their labels shuffled among
them would be (a permutation test)?  Given a DataLoader, after fitting the first batch, the samples are another
batch's; with one batch, a copy is trained on half of it and predicts the other half.  Labels shuffled apart from
their inputs can still be memorised, but never generalise.  A miss is a finding only when a control copy, trained
the same way on labels that follow from the inputs by construction, does generalise.  The check is always listed:
it ran, or why not.
"""

from __future__ import annotations

from typing import Any

from nbdebug.core.doctor._inputs import batch_dim, logits_of, sample_count, to_device
from nbdebug.core.doctor._session import Session
from nbdebug.core.doctor._train_checks import learned_said
from nbdebug.core.knowledge import entry, threshold

__all__ = ["generalisation", "within_batch", "CHECK", "HALF_CHECK"]

CHECK = "labels against inputs (a second batch after fitting the first)"
HALF_CHECK = "labels against inputs (a copy trained on half the batch predicts the other half)"
_HALF_MIN = 32  # samples the batch needs for the half it holds out to say anything
_ALPHA = 0.05  # the permutation test's level, half a batch held out
_PERMUTED_RUNS = 4  # the user's labels faster than most of them: a structure the model uses, no verdict
_Z = 3.09  # the two-proportion test's one-sided 0.1 % level (one batch: few samples, a control easier than most labels)
_ROWS = 64  # unseen samples wanted for a verdict
_BATCHES = 8  # most batches read to find them
_PERMUTATIONS = 200


def generalisation(s: Session, work: Any) -> None:
    """Predict samples of the DataLoader that are not in the fitted batch, and compare the accuracy with the
    commonest class's rate and with the accuracy of the same predictions against the labels shuffled."""
    import torch

    why = _not_ready(s)
    if why:
        s.check(CHECK, why)
        return
    share = s.learned_share()
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
    _verdict(s, CHECK, got, rows, lambda: _control(s, s.loss.inputs, inputs, got[1].numel()),
             f"after training on one batch ({learned_said(s, share)}), the model predicts",
             "it learned the first batch's labels, which do not follow from the inputs")


def within_batch(s: Session) -> None:
    """One batch only: a fresh copy trained on one half of it (as many steps as the overfit run) predicts the other
    half, both ways round.  One batch is few samples: labels hard to learn look like labels unrelated to the inputs,
    so a finding needs positive evidence, all of: the user's pooled accuracy is no better than chance, it is
    significantly below a control's (the same training on labels that follow from the inputs by construction, a
    two-proportion test), and the user's labels are learned no faster than the median of ``_PERMUTED_RUNS``
    permutations of them.  Then a warning that the labels are not shown to follow from the inputs, never an error."""
    import torch

    why = _not_ready(s)
    if why:
        s.check(HALF_CHECK, why)
        return
    halves = _halves(s)
    if isinstance(halves, str):
        s.check(HALF_CHECK, f"skipped: {halves}")
        return
    a, b = halves
    preds, labels, curves = [], [], []
    for i, (seen, unseen) in enumerate(((a, b), (b, a))):
        r = _half_run(s, seen, unseen, s.deadline(0.3 / (2 - i)))
        if isinstance(r, str):
            s.check(HALF_CHECK, r)
            return
        preds.append(r[0])
        labels.append(r[1])
        curves.append(r[2])
    pred, t = torch.cat(preds), torch.cat(labels)
    acc, majority, shuffled, p = _scores(pred, t)
    n = int(t.numel())
    rows = f"held-out samples of the batch (a copy trained on each half predicts the other; {n} in all)"
    measured = (f"accuracy {acc:.0%} on {n} {rows} (commonest class: {majority:.0%}; with the labels "
                f"shuffled among them: {shuffled:.0%}, p = {p:.2g})")
    s.check(HALF_CHECK, measured)
    if acc > majority + threshold("generalise_margin") or p < _ALPHA:
        return
    controls = [_control(s, a[0], b[0], int(b[1].numel())), _control(s, b[0], a[0], int(a[1].numel()))]
    if any(c == "time" for c in controls):
        s.check(HALF_CHECK, f"no verdict (time): {measured}, but the copy trained on labels that follow from the "
                "inputs (which says whether this can tell) was cut short by the time budget")
        return
    if not all(isinstance(c, tuple) for c in controls):
        s.check(HALF_CHECK, f"no verdict: {measured}, and no copy could be trained on labels that follow from the "
                "inputs to show that this model generalises from what it trained on")
        return
    done = [c for c in controls if isinstance(c, tuple)]
    c_n = sum(c[3] for c in done)
    c_acc = sum(c[0] * c[3] for c in done) / c_n
    z = _below(acc, n, c_acc, c_n)
    if z < _Z:
        s.check(HALF_CHECK, f"no verdict: {measured}; a copy trained the same way on labels that follow from the "
                f"inputs by construction (a randomly initialised copy's predictions) reaches {c_acc:.0%}, not "
                f"significantly better (z = {z:.2g}): labels this hard to learn from {n // 2} samples look the same")
        return
    pace = _pace_against_permuted(s)
    if not isinstance(pace, tuple):
        s.check(HALF_CHECK, f"no verdict{' (time)' if pace == 'time' else ''}: {measured}, but "
                + ("a copy trained on the labels permuted among the samples was cut short by the time budget"
                   if pace == "time" else "no copy could be trained on the labels permuted among the samples"))
        return
    if pace[0] < pace[1]:
        s.check(HALF_CHECK, f"no verdict: {measured}, but your labels are learned faster than most of "
                f"{_PERMUTED_RUNS} permutations of them among the samples (mean loss over {len(s.losses)} steps "
                f"{pace[0]:.4g}, the median permutation {pace[1]:.4g}): they may hold a structure this model uses")
        return
    s.add("labels_unrelated", "the labels are not shown to follow from the inputs: they may be shuffled apart from "
          f"them or annotated wrongly (the batch can still be memorised, as your run did). Copies trained on half of "
          f"the batch each (loss {curves[0][0]:.4g} -> {curves[0][-1]:.4g} in {len(curves[0])} steps) predict the "
          f"other half with {acc:.0%} accuracy over {n} samples, no better than always guessing their commonest class "
          f"({majority:.0%}) or than their labels shuffled among them ({shuffled:.0%}, p = {p:.2g}); trained the same "
          f"way on labels that follow from the inputs by construction (a random copy's predictions), they reach "
          f"{c_acc:.0%} (z = {z:.2g}); and your labels are learned no faster than the same labels permuted among the "
          f"samples (mean loss over {len(s.losses)} steps {pace[0]:.4g}, the median permutation {pace[1]:.4g}). "
          f"{n} held-out samples are few, and labels this hard to learn from {n // 2} samples look the same",
          ("targets",), severity="warning",
          # one batch, no DataLoader to shuffle: what the labels are is looked at first
          fixes=tuple(reversed(entry("labels_unrelated").fixes)),
          evidence={"accuracy": acc, "majority": majority, "p_value": p, "samples": n, "control_accuracy": c_acc,
                    "z": z, "mean_loss": pace[0], "mean_loss_permuted": pace[1]})


def _half_run(s: Session, seen: tuple[Any, Any], unseen: tuple[Any, Any],
              deadline: float | None) -> tuple[Any, Any, list[float]] | str:
    """(predicted classes, labels, loss curve) of a fresh copy trained on ``seen`` (inputs, labels) as many steps as
    the overfit run, predicting ``unseen``; or the check line that says why not."""
    import torch

    from nbdebug.core.doctor._train_checks import train

    work, opt = s.fresh()
    done = train(s, work, opt, seen[0], steps=len(s.losses), phase="labels: half the batch",
                 adapter=_Targets(s, seen[1]), deadline=deadline, min_steps=len(s.losses))
    if len(done) < len(s.losses):
        return "no verdict (time): the copy trained on half the batch was cut short by the time budget"
    with torch.no_grad():
        got = _predictions(s, s.loss.forward(work, unseen[0]), unseen[1])
    if got is None:
        return "skipped: the output does not give one class per label"
    return got[0], got[1], done


def _below(acc: float, n: int, c_acc: float, c_n: int) -> float:
    """The two-proportion z statistic of ``acc`` (over ``n``) below ``c_acc`` (over ``c_n``); 0 when both agree."""
    pooled = (acc * n + c_acc * c_n) / (n + c_n)
    se = (pooled * (1 - pooled) * (1 / n + 1 / c_n)) ** 0.5
    return 0.0 if se == 0 else (c_acc - acc) / se


def _pace_against_permuted(s: Session) -> tuple[float, float] | str | None:
    """(the user's run's mean loss, the median pace of fresh copies trained as many steps on the labels permuted
    among the samples: the ``_PERMUTED_RUNS // 2``-th lowest mean loss of ``_PERMUTED_RUNS`` permutations): labels
    that follow from the inputs are learned faster than permutations of them (the pairing has a structure to use);
    labels unrelated to their inputs are just another permutation, as fast as a typical one.  One run's pace varies
    (on a dropout transformer it is mostly noise), so the user's must be no faster than the median, not the fastest;
    the runs stop once that is decided.  ``"time"`` when cut short."""
    import torch

    from nbdebug.core.doctor._train_checks import train

    t = s.loss.targets
    k = len(s.losses)
    mine = sum(s.losses) / k
    need = _PERMUTED_RUNS // 2
    means: list[float] = []
    for i in range(_PERMUTED_RUNS):
        perm = torch.randperm(int(t.shape[0]), generator=torch.Generator().manual_seed(1 + i)).to(t.device)
        permuted = t[perm]
        work, opt = s.fresh()
        inputs = {**s.loss.inputs, "labels": permuted} if s.loss.mode == "hf" else s.loss.inputs
        try:
            curve = train(s, work, opt, inputs, steps=k, phase="labels: permuted", adapter=_Targets(s, permuted),
                          deadline=s.deadline(0.8 / (_PERMUTED_RUNS - i)), min_steps=k)
        except Exception:  # noqa: BLE001 - no pace: no verdict
            return None
        if len(curve) < k:
            return "time"
        means.append(sum(curve) / k)
        as_fast = sum(m <= mine for m in means)
        if as_fast >= need or len(means) - as_fast > _PERMUTED_RUNS - need:
            break
    return mine, sorted(means)[need - 1]


def _halves(s: Session) -> tuple[tuple[Any, Any], tuple[Any, Any]] | str:
    """((inputs, labels) of one half of the batch, those of the other half), drawn by a fixed permutation; or why
    the batch cannot be split so."""
    import torch

    t = s.loss.targets
    if not _one_per_sample(s, t):
        return "the labels are not one class per sample"
    n = int(t.shape[0])
    if n < _HALF_MIN:
        return f"{n} samples, too few to hold half of them out (at least {_HALF_MIN})"
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(0)).to(t.device)
    idx = perm[: n // 2], perm[n // 2:]
    try:
        xs = [_rows(s.loss.inputs, i, n) for i in idx]
    except ValueError as e:
        return str(e)
    if s.loss.mode == "hf":
        return (xs[0], xs[0]["labels"]), (xs[1], xs[1]["labels"])
    return (xs[0], t[idx[0]]), (xs[1], t[idx[1]])


def _rows(obj: Any, idx: Any, n: int) -> Any:
    """``obj`` with every tensor of the batch's ``n`` samples along its first dimension cut to the rows ``idx``."""
    import torch

    if isinstance(obj, torch.Tensor):
        if obj.dim() == 0:
            return obj
        if int(obj.shape[0]) != n:
            raise ValueError(f"an input of shape {tuple(obj.shape)} does not hold the {n} samples along its first "
                             "dimension")
        return obj[idx]
    if isinstance(obj, (tuple, list)):
        return type(obj)(_rows(o, idx, n) for o in obj)
    if isinstance(obj, dict):
        return {k: _rows(v, idx, n) for k, v in obj.items()}
    return obj


def _verdict(s: Session, check: str, got: tuple[Any, Any], rows: str, control: Any, trained: str,
             meaning: str) -> None:
    """The accuracy of predictions on samples not trained on against the commonest class and the labels shuffled
    among them; a miss is a ``labels_unrelated`` finding unless the control (``control()``) shows this model does
    not generalise from what it trained on."""
    pred, t = got
    acc, majority, shuffled, p = _scores(pred, t)
    measured = (f"accuracy {acc:.0%} on {t.numel()} {rows} (commonest class: {majority:.0%}; with the labels "
                f"shuffled among them: {shuffled:.0%}, p = {p:.2g})")
    s.check(check, measured)
    if acc > majority + threshold("generalise_margin"):
        return
    c = control()
    if c == "time":
        s.check(check, f"no verdict (time): {measured}, but the copy trained on labels that follow from the inputs "
                "(which says whether this can tell) was cut short by the time budget")
        return
    if isinstance(c, tuple) and c[0] <= c[1] + threshold("generalise_margin"):
        s.check(check, f"no verdict: {measured}, but a copy trained the same way on labels that follow from the "
                f"inputs by construction (a randomly initialised copy's predictions) predicts them no better "
                f"({c[0]:.0%}, commonest {c[1]:.0%}, p = {c[2]:.2g}): this model does not generalise from what it "
                "trained on, so this says nothing about the labels")
        return
    said = "" if not isinstance(c, tuple) else (
        f"; a copy trained the same way on labels that follow from the inputs (a random copy's predictions) "
        f"reaches {c[0]:.0%} on them (p = {c[2]:.2g})")
    s.add("labels_unrelated", f"{trained} {t.numel()} {rows} with {acc:.0%} accuracy, no better than always "
          f"guessing their commonest class ({majority:.0%}) or than their labels shuffled among them "
          f"({shuffled:.0%}, p = {p:.2g}): {meaning}{said}", ("targets",),
          evidence={"accuracy": acc, "majority": majority, "p_value": p, "samples": int(t.numel()),
                    **({} if not isinstance(c, tuple) else {"control_accuracy": c[0]})})


def _not_ready(s: Session) -> str:
    """Why the labels cannot be compared with the inputs yet ('' when they can)."""
    if s.task not in ("classification", "binary"):
        return f"skipped: the task is {s.task or 'not a classification'}, no class labels to compare"
    if not s.losses or s.unstable:
        return "skipped: " + ("the overfit run is unstable" if s.unstable else "no overfit run")
    share = s.learned_share()
    if s.final_loss() > s.fit_target() and share < threshold("generalise_learned_rel"):
        # what counts is how much of the batch was learned, not whether it was memorised by the doctor's mark: a
        # model that took the loss well down on one batch predicts others above chance when labels follow inputs
        return (f"skipped: the first batch is barely learned (the loss went down by {max(share, 0):.0%} of its "
                "start), so there is nothing to generalise from")
    return ""


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


def _one_per_sample(s: Session, t: Any) -> bool:
    """Whether ``t`` holds one class per sample: integer classes of shape (N,), or a binary task's 0/1 targets of
    shape (N,) or (N, 1) (float ones too, as BCEWithLogitsLoss takes them)."""
    import torch

    if not isinstance(t, torch.Tensor) or t.dim() == 0:
        return False
    if t.dim() == 1 and not t.is_floating_point():
        return True
    return s.task == "binary" and (t.dim() == 1 or (t.dim() == 2 and t.shape[1] == 1)) \
        and bool(((t == 0) | (t == 1)).all())


def _control(s: Session, seen: Any, unseen: Any, rows: int) -> tuple[float, float, float, int] | str | None:
    """(accuracy, commonest class's rate, permutation p-value, samples) on the unseen samples of a fresh copy trained as long as the user's run
    on ``seen`` (the fitted batch, or half of it) with labels that follow from the inputs by construction: a re-initialised copy's
    predictions (balanced: its logits less their mean over the batch).  A model that cannot generalise from one
    batch even then says nothing about the user's labels.  None where the labels are not one class per sample;
    ``"time"`` when the time budget cut its training short."""
    import torch

    from nbdebug.core.doctor._train_checks import train

    if not _one_per_sample(s, s.loss.targets):
        return None
    try:
        teacher, _ = s.fresh()
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(s.options.seed + 1)
            for m in teacher.modules():
                if callable(getattr(m, "reset_parameters", None)):
                    m.reset_parameters()
            teacher.eval()
            seen_y, unseen_y = (_labels(s, logits_of(s.loss.forward(teacher, x))) for x in (seen, unseen))
        if seen_y is None or unseen_y is None or seen_y.dim() != 1 or unseen_y.numel() != rows:
            return None
        work, opt = s.fresh()
        inputs = {**seen, "labels": seen_y} if s.loss.mode == "hf" else seen
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
    acc, majority, _, p = _scores(pred, unseen_y)
    return acc, majority, p, rows


def _scores(pred: Any, t: Any) -> tuple[float, float, float, float]:
    """(accuracy, the commonest class's rate, the mean accuracy with the labels shuffled among the samples, the
    permutation test's p-value) of predictions against labels."""
    import torch

    acc = float((pred == t).float().mean())
    majority = float(torch.unique(t, return_counts=True)[1].max()) / t.numel()
    g = torch.Generator().manual_seed(0)
    perm = [float((pred == t[torch.randperm(t.numel(), generator=g)]).float().mean()) for _ in range(_PERMUTATIONS)]
    return acc, majority, sum(perm) / len(perm), (1 + sum(a >= acc for a in perm)) / (1 + _PERMUTATIONS)


class _Targets:
    """The user's loss, on other targets (the control's labels)."""

    def __init__(self, s: Session, targets: Any) -> None:
        self.s, self.targets = s, targets

    def loss(self, work: Any, inputs: Any, targets: Any = None) -> tuple[Any, Any]:
        if self.s.loss.mode == "hf":
            return self.s.loss.loss(work, {**inputs, "labels": self.targets})
        t = self.s.loss.targets
        return self.s.loss.loss(work, inputs, self.targets.to(t.dtype).reshape((-1, *t.shape[1:])))


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
