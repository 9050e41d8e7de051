"""Learning that is too easy is a symptom too: a loss below what its definition allows, a batch memorised at
once, a loss at init far under chance, targets that sit in the inputs (a feature equal to the target, labels not
shifted against the tokens), and a loss that stays as low with the targets shuffled against the inputs (it is
computed on the wrong tensor).  Each is measured on the copy, never guessed from names.
"""

from __future__ import annotations

import math
from typing import Any

from nbdebug.core.doctor._inputs import tensor_leaves
from nbdebug.core.doctor._session import Session
from nbdebug.core.knowledge import entry, threshold

__all__ = ["below_minimum", "reconstructed_input", "targets_in_inputs", "memorised_at_once", "shuffled_targets",
           "padding_masked"]

# losses that are >= 0 by definition (given what each expects)
_NON_NEGATIVE = {"CrossEntropyLoss", "cross_entropy", "NLLLoss", "nll_loss", "BCELoss", "binary_cross_entropy",
                 "BCEWithLogitsLoss", "binary_cross_entropy_with_logits", "MSELoss", "mse_loss", "L1Loss", "l1_loss",
                 "SmoothL1Loss", "smooth_l1_loss", "HuberLoss", "huber_loss"}


def below_minimum(s: Session) -> bool:
    """A loss that is >= 0 by definition went below 0 (NLLLoss on raw scores).  True when found."""
    if s.loss.loss_name not in _NON_NEGATIVE or s.initial_loss is None:
        return False
    curve = [s.initial_loss, *s.losses]
    low = min((v for v in curve if math.isfinite(v)), default=0.0)
    if low >= -1e-6:
        return False
    at = curve.index(low)
    nll = s.loss.loss_name in ("NLLLoss", "nll_loss")
    why = (" NLLLoss expects log-probabilities (<= 0) and returns minus the one picked, so raw scores let the "
           "model push it toward minus infinity" if nll else " its inputs are not what it expects")
    s.add("loss_below_minimum", f"{s.loss.loss_name} reaches {low:.4g} at step {max(at - 1, 0)}, below 0, the least "
          f"it can be by definition:{why}; the falling loss is not learning", [s.last_module()],
          evidence={"lowest_loss": low, "step": max(at - 1, 0)})
    return True


def reconstructed_input(s: Session) -> int | None:
    """Which input tensor the loss's target is, or is made from element by element (a view, a rescaling, any
    monotonic map), or is close to (the same shape and correlated: the input is the target made noisy or degraded):
    the task is to reconstruct the input (an autoencoder, a denoiser, a VAE, an image-to-image model), so the input
    holds the target by design.  None when the loss's target is no input's."""
    import torch

    call = s.loss_in
    t = call.target if call is not None else None
    if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.numel() < 8:
        return None
    tf = t.detach().reshape(-1).float()
    for i, x in enumerate(tensor_leaves(s.loss.model_inputs())):
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.numel() != t.numel():
            continue
        xf = x.detach().reshape(-1).float()
        if torch.equal(xf, tf) or abs(_rank_correlation(xf, tf)) >= 0.999:
            return i
        if tuple(x.shape) == tuple(t.shape) and t.dim() >= 2 and _correlation(xf, tf) >= threshold(
                "reconstruction_correlation"):
            return i
    return None


def _correlation(a: Any, b: Any) -> float:
    """Pearson's correlation of two flat tensors (0 when either is constant)."""
    a, b = a - a.mean(), b - b.mean()
    den = float(a.norm() * b.norm())
    return float((a * b).sum()) / den if den > 0 else 0.0


def _same_tensor(a: Any, b: Any) -> bool:
    """The loss's two tensors are views of one tensor (shared storage) or hold the same values."""
    import torch

    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return False
    try:
        if a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr():
            return True
    except (RuntimeError, NotImplementedError):  # a tensor without storage (a functional or sparse tensor)
        pass
    return a.shape == b.shape and bool(torch.equal(a.detach(), b.detach()))


def _rank_correlation(a: Any, b: Any) -> float:
    """Spearman's correlation of two flat tensors (ties ordered by position, so a monotonic map of ``a`` gives
    exactly 1 or -1)."""
    import torch

    ra = torch.argsort(torch.argsort(a, stable=True)).float()
    rb = torch.argsort(torch.argsort(b, stable=True)).float()
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = float(ra.norm() * rb.norm())
    return float((ra * rb).sum()) / den if den > 0 else 0.0


def targets_in_inputs(s: Session) -> None:
    """Targets that travel inside the inputs: an input feature equal to the target (a label column left in the
    features), or token targets equal to the input tokens position by position (labels not shifted)."""
    import torch

    if s.task == "reconstruction":
        s.check("targets inside the inputs", "by design: the loss's target is the model's own input")
        return
    t = s.loss.targets
    if _loss_over_padding(s, t):
        return
    if s.loss.mode != "fn" or not isinstance(t, torch.Tensor) or t.numel() < 8:
        return  # a model that computes its own loss (Hugging Face causal LMs) shifts the labels itself
    for x in tensor_leaves(s.loss.model_inputs()):
        if not isinstance(x, torch.Tensor) or x is t:
            continue
        if not x.is_floating_point() and x.numel() == t.numel() and max(x.dim(), t.dim()) >= 2:
            # the same positions, whichever way the loss flattens them (an RNN's (T, B) against T*B targets)
            xs, ts = x.reshape(-1), t.reshape(-1)
            valid = ts != s.ignore_index()
            same = float((xs[valid] == ts[valid]).float().mean()) if bool(valid.any()) else 0.0
            if same >= 0.9:
                e = entry("fits_too_easily")
                s.add("fits_too_easily", f"the targets equal the input tokens position by position ({same:.0%} of "
                      "them): the model is asked to copy its input, not to predict the next token; the labels are "
                      "not shifted", ["targets"], evidence={"equal_share": round(same, 4)},
                      fixes=(e.fixes[1], e.fixes[0]))
                s.check("targets inside the inputs", "labels equal the inputs (not shifted)")
                return
        if x.is_floating_point() and x.dim() == 2 and x.shape[0] >= 8 and t.numel() == x.shape[0]:
            tf = t.reshape(-1).float()
            if float(tf.std()) == 0:
                continue
            xc = x.float() - x.float().mean(0)
            tc = tf - tf.mean()
            corr = (xc * tc[:, None]).sum(0) / (xc.norm(dim=0) * tc.norm()).clamp_min(1e-12)
            j = int(corr.abs().argmax())
            if float(corr.abs()[j]) >= 0.999:
                s.add("fits_too_easily", f"input feature {j} is the target (correlation {float(corr[j]):.4f} over "
                      f"the {x.shape[0]} samples): the label leaks into the inputs, so the model learns to read it "
                      "instead of the task", ["inputs"], evidence={"feature": j, "correlation": float(corr[j])})
                s.check("targets inside the inputs", f"feature {j} equals the target")
                return
    s.check("targets inside the inputs", "no")


def _padding_in_labels(s: Session, t: Any) -> tuple[Any, Any, str] | None:
    """(padding positions the loss counts, positions it counts, where the padding was seen) of token labels:
    labels other than the ignore index where the attention mask is 0, or (without a mask) in a run of one id at
    the end of several rows, the same id in each (pad = EOS, labels = input_ids.clone()).  None when not found."""
    import torch

    if not isinstance(t, torch.Tensor) or t.is_floating_point() or t.dim() != 2 or t.numel() < 8:
        return None
    trained = t != s.ignore_index()
    inputs = s.loss.model_inputs()
    mask = inputs.get("attention_mask") if isinstance(inputs, dict) else None
    if isinstance(mask, torch.Tensor) and tuple(mask.shape) == tuple(t.shape):
        return trained & (mask == 0), trained, "where the attention mask is 0"
    pad = int(torch.mode(t[:, -1]).values)
    run = (t == pad).flip(1).int().cumprod(1).flip(1).bool()  # the run of ``pad`` ending each row
    run[:, 1:] &= run[:, :-1].clone()  # its first one may be the row's own end (pad = EOS)
    on_pad = run & trained
    rows = int(on_pad.any(1).sum())
    return (on_pad, trained, f"in a run of id {pad} that ends {rows} of the {t.shape[0]} rows") if rows >= 2 else None


def _loss_over_padding(s: Session, t: Any) -> bool:
    """Token labels that count the padding (``_padding_in_labels``): padding is trivially predictable, so the loss
    falls for nothing.  True when found."""
    found = _padding_in_labels(s, t)
    if found is None:
        return False
    on_pad, trained, how = found
    n, total = int(on_pad.sum()), int(trained.sum())
    if not n or n / max(1, total) < threshold("padding_in_loss_share"):
        return False
    e = entry("fits_too_easily")
    s.add("fits_too_easily", f"{n} of the {total} label positions the loss counts are padding ({n / total:.0%}), "
          f"{how}: the loss is taken over padding, which is trivially predictable, so it falls for nothing; set "
          f"the labels there to the ignore index {s.ignore_index()}", ["targets"],
          evidence={"padding_positions": n, "trained_positions": total}, fixes=(e.fixes[3], e.fixes[1]))
    s.check("targets inside the inputs", f"the loss counts {n} padding positions ({n / total:.0%})")
    return True


def padding_masked(s: Session) -> None:
    """The experiment behind a loss over padding: train a fresh copy with the padding's labels set to the ignore
    index, and put both curves in the finding (the loss over the real tokens only, against the user's)."""
    import copy

    at = next((i for i, f in enumerate(s.findings) if f.kind == "fits_too_easily"
               and "padding_positions" in f.evidence), None)
    if at is None or not s.losses or s.initial_loss is None:
        return
    from nbdebug.core.doctor._train_checks import train
    from nbdebug.core.knowledge import finding

    t = s.loss.targets
    found = _padding_in_labels(s, t)
    if found is None:
        return
    masked = t.masked_fill(found[0], s.ignore_index())
    adapter = copy.copy(s.loss)
    adapter.targets = masked
    inputs = s.loss.inputs
    if isinstance(inputs, dict) and inputs.get("labels") is t:
        inputs = {**inputs, "labels": masked}
    work, opt = s.fresh()
    curve = train(s, work, opt, inputs, steps=len(s.losses), phase="padding masked", adapter=adapter,
                  deadline=s.deadline(0.6), min_steps=len(s.losses))
    if not curve:
        return
    n = len(curve)
    mine = s.losses[n - 1]
    said = (f"with the padding's labels set to {s.ignore_index()} the loss over the real tokens went "
            f"{curve[0]:.4g} -> {curve[-1]:.4g} in {n} steps; as you have it, {s.initial_loss:.4g} -> {mine:.4g}")
    s.check("experiment: the padding masked out of the labels", said)
    f = s.findings[at]
    s.findings[at] = finding(f.kind, f"{f.message}. Tried on a copy: {said}", f.where, severity=f.severity,
                             fixes=f.fixes, evidence={**f.evidence, "tried": "the padding masked out of the labels",
                                                      "before": f"{s.initial_loss:.4g} -> {mine:.4g} in {n} steps",
                                                      "after": f"{curve[0]:.4g} -> {curve[-1]:.4g} in {n} steps"})


def memorised_at_once(s: Session) -> None:
    """The batch fitted within a few steps while the same model, given the targets shuffled against the inputs,
    does not: the real pairing has a shortcut (the answer reaches the model another way).  A model that fits a
    shuffled pairing as fast is only memorising the batch, which a large model does: no finding."""
    import copy

    import torch

    if s.has("fits_too_easily", "loss_below_minimum") or not s.losses or s.initial_loss is None or (
            s.task == "reconstruction"):
        return
    t = s.loss.targets
    if s.loss.mode != "fn" or not isinstance(t, torch.Tensor) or t.dim() < 1 or t.shape[0] < 4:
        return
    init = s.initial_loss
    target = s.fit_target()
    first = next((i for i, v in enumerate(s.losses) if v <= target), None)
    if first is None or first >= threshold("too_easy_steps") or init <= 10 * threshold("overfit_abs"):
        return
    from nbdebug.core.doctor._train_checks import train

    perm = torch.randperm(int(t.shape[0]), generator=torch.Generator().manual_seed(0)).to(t.device)
    shuffled = copy.copy(s.loss)
    shuffled.targets = t[perm]
    work, opt = s.fresh()
    n = 10 * (first + 1)
    curve = train(s, work, opt, s.loss.inputs, steps=n, phase="shuffled targets", adapter=shuffled,
                  deadline=s.deadline(0.2), min_steps=n)
    if not curve:  # the time budget did not let the run start (its check says so): no evidence either way
        return
    fit_shuffled = next((i for i, v in enumerate(curve) if v <= target), None)
    s.check("fitting the batch with the targets shuffled against the inputs",
            f"{'fitted after ' + str(fit_shuffled + 1) + ' steps' if fit_shuffled is not None else 'not fitted'} "
            f"in {len(curve)} steps (with the real pairing: {first + 1})")
    if fit_shuffled is not None:
        return  # it memorises any pairing this fast
    s.add("fits_too_easily", f"the batch is fitted after {first + 1} step(s) (loss {init:.4g} -> "
          f"{s.losses[first]:.4g}), while with the targets shuffled against the inputs it is not fitted in "
          f"{len(curve)} steps: the real pairing has a shortcut; look for the target inside the inputs",
          ["inputs"], evidence={"steps_to_fit": first + 1, "shuffled_steps": len(curve)})


def shuffled_targets(s: Session, work: Any) -> None:
    """After fitting, the loss with the targets shuffled against the inputs: a loss that stays as low does not
    depend on which target goes with which input (it is computed on the wrong tensor, or over padding)."""
    import torch

    t = s.loss.targets
    if s.task == "reconstruction":
        s.check("loss with targets shuffled against inputs", "skipped: the target is the model's own input")
        return
    if s.loss.mode != "fn" or not isinstance(t, torch.Tensor) or t.dim() < 1 or t.shape[0] < 4 or not s.losses:
        s.check("loss with targets shuffled against inputs", "skipped: no separate targets")
        return
    init = s.initial_loss if s.initial_loss is not None else s.losses[0]
    fitted = min(s.losses[-max(1, len(s.losses) // 10):])
    if not (math.isfinite(fitted) and fitted <= s.fit_target()):
        s.check("loss with targets shuffled against inputs", "skipped: the batch is not fitted")
        return
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(int(t.shape[0]), generator=g)
    if bool((t[perm] == t).all()):
        s.check("loss with targets shuffled against inputs", "skipped: every target is the same")
        return
    with torch.no_grad():
        out = s.loss.forward(work, s.loss.inputs)
        shuffled = float(s.loss.loss_fn(out, t[perm]))
        own = float(s.loss.loss_fn(out, t))
    mean = _mean_predictor_loss(s, out, t)
    if mean is not None and mean > 1e-12 and own > 0.5 * mean and shuffled > 1.01 * own:
        # a regression fitted mostly by learning the targets' mean: that fit does not depend on the pairing anyway
        s.check("loss with targets shuffled against inputs", f"{shuffled:.4g} (with their own targets {own:.4g}); "
                f"no verdict: predicting the targets' mean gives {mean:.4g}, so the fit is mostly that mean")
        return
    s.check("loss with targets shuffled against inputs", f"{shuffled:.4g} (with their own targets {own:.4g})")
    floor = s.label_floor()
    ref = min(abs(init), floor) if floor is not None else abs(init)  # an inflated start is no yardstick
    if math.isfinite(shuffled) and shuffled <= max(threshold("shuffled_fit_rel") * ref, 2 * abs(own) + 1e-6):
        fixes = entry("fits_too_easily").fixes
        call = s.loss_in
        if call is not None and _same_tensor(call.input, call.target):
            why, first = "it is computed on two views of one tensor, not on the model's prediction of each target", 2
        else:
            why, first = "it is not computed on the model's prediction of each target (only padding, or an input " \
                         "that holds the target)", 0
        s.add("fits_too_easily", f"after fitting the batch the loss is {own:.4g}, and {shuffled:.4g} with the targets "
              f"shuffled against the inputs: it does not depend on which target goes with which input, so {why}",
              ["loss"], evidence={"loss": own, "shuffled": shuffled},
              fixes=(fixes[first], *(f for i, f in enumerate(fixes) if i != first)))


def _mean_predictor_loss(s: Session, out: Any, t: Any) -> float | None:
    """A regression's loss when every sample is predicted as the targets' mean (what no input is needed for); None
    for other tasks or an output the loss cannot take so."""
    import torch

    y = out if isinstance(out, torch.Tensor) else None
    if s.task != "regression" or y is None or not t.is_floating_point() or not y.is_floating_point():
        return None
    try:
        with torch.no_grad():
            value = float(s.loss.loss_fn(torch.full_like(y, float(t.float().mean())), t))
    except Exception:  # noqa: BLE001 - no reference: the check goes on without it
        return None
    return value if math.isfinite(value) else None
