"""The doctor's checks before training: what can be judged from the model, the batch and the first step.

In the order the run calls them: frozen parameters and the input scale (before any forward pass); the task and
its classes from the output and the loss (``infer_task``); targets in the output's class range; probabilities or
an activation fed to a loss that expects logits; (NaN/Inf in the first forward or backward pass: ``_nonfinite_site``)
the loss at init against ``-log(1/C)``; parameters that get no gradient and the gradient flow per layer; whether
the output depends on the input.  Each adds its findings and its outcome to the ``Session``.
"""

from __future__ import annotations

import math
import re
from typing import Any

from nbdebug.core.doctor._init_loss import initial_loss
from nbdebug.core.doctor._input_use import unchanged_by_zeroing
from nbdebug.core.doctor._inputs import batch_dim, logits_of, sample_count, tensor_leaves
from nbdebug.core.doctor._loss_probe import CLASS_LOSSES
from nbdebug.core.doctor._session import Session, fixes_for
from nbdebug.core.knowledge import entry, threshold
from nbdebug.core.training._dynamics import depth_correlation

__all__ = ["infer_task", "step_error", "frozen_parameters", "input_scale", "labels", "output_vs_loss",
           "initial_loss", "gradients", "input_dependence", "grad_values"]

_LOGIT_LOSSES = {"CrossEntropyLoss", "cross_entropy", "BCEWithLogitsLoss", "binary_cross_entropy_with_logits"}
_LOGPROB_LOSSES = {"NLLLoss", "nll_loss"}
_PROB_OUTPUTS = {"SoftmaxBackward0", "SigmoidBackward0"}
_ACTIVATIONS = {"ReluBackward0": "ReLU", "HardtanhBackward0": "ReLU6", "SigmoidBackward0": "sigmoid",
                "GeluBackward0": "GELU", "SoftplusBackward0": "softplus", "AbsBackward0": "abs"}


def infer_task(s: Session, out: Any) -> None:
    import torch

    from nbdebug.core.doctor._easy_checks import reconstructed_input

    t = s.loss.targets
    name = s.loss.loss_name
    call = s.loss_in
    if reconstructed_input(s) is not None:
        s.task = "reconstruction"
        s.check("task", f"reconstruction: the target of {s.loss_said()} is the model's own input")
        return
    if call is not None and call.name in ("binary_cross_entropy_with_logits", "binary_cross_entropy"):
        name = call.name
    if name in ("BCEWithLogitsLoss", "binary_cross_entropy_with_logits", "BCELoss", "binary_cross_entropy"):
        s.task = "binary"
        return
    if call is not None and call.name in CLASS_LOSSES and _class_targets(call.target):
        # the loss reads classes: its input's class dim says how many (the model's output may be shaped otherwise)
        s.task = "classification"
        if out is not None and out.dim() >= 2 and isinstance(t, torch.Tensor):
            s.class_dim = _class_dim(out, t)
        else:
            s.class_dim = call.class_dim
        if s.num_classes is None:
            s.num_classes = int(call.input.shape[call.class_dim])
        return
    if isinstance(t, torch.Tensor) and not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool:
        if out is not None and out.dim() >= 2:
            s.task = "classification"
            s.class_dim = _class_dim(out, t)
            if s.num_classes is None:
                s.num_classes = int(out.shape[s.class_dim])
            return
    if name in ("CrossEntropyLoss", "cross_entropy") and s.loss.mode == "fn" and out is not None and out.dim() >= 2:
        s.task = "classification"
        if s.num_classes is None:
            s.num_classes = int(out.shape[1])


def _class_targets(t: Any) -> bool:
    """Class indices: an integer tensor."""
    import torch

    return isinstance(t, torch.Tensor) and not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool


def _class_dim(out: Any, t: Any) -> int:
    """Where the classes are: dim 1 for (N, C, ...), the last dim for (B, T, V) with targets (B, T).

    The second is how language models are trained (their loss flattens both).
    """
    if out.dim() >= 3 and tuple(t.shape) == tuple(out.shape[:-1]):
        return out.dim() - 1
    return 1


def frozen_parameters(s: Session) -> None:
    named = list(s.user_model.named_parameters())
    frozen = [(n, p) for n, p in named if not p.requires_grad]
    if not frozen:
        s.check("frozen parameters", "none")
        return
    total = sum(p.numel() for _, p in named)
    nf = sum(p.numel() for _, p in frozen)
    frac = nf / max(total, 1)
    # name whole sub-modules when all of their parameters are frozen
    groups: list[str] = []
    frozen_names = {n for n, _ in frozen}
    for mname, mod in s.user_model.named_modules():
        if not mname or any(mname.startswith(g + ".") for g in groups):
            continue
        ps = [f"{mname}.{n}" for n, _ in mod.named_parameters()]
        if ps and all(p in frozen_names for p in ps):
            groups.append(mname)
    covered = {n for n in frozen_names if any(n.startswith(g + ".") for g in groups)}
    where = [s.label(g) for g in groups] + sorted(frozen_names - covered)
    trainable = [n for n, p in named if p.requires_grad]
    # a trainable parameter is named by its module, unless that module holds frozen ones too (LoRA's A and B beside
    # a frozen base layer): then by its own name
    owner = {n: n.rsplit(".", 1)[0] if "." in n else n for n in trainable}
    mixed = {o for o in owner.values() if any(f.startswith(o + ".") for f in frozen_names)}
    heads = sorted({n if owner[n] in mixed else owner[n] for n in trainable})
    from nbdebug.core.doctor._setup_checks import is_frozen_on_purpose

    intended = all(is_frozen_on_purpose(s, n) for n, _ in frozen)
    sev = "warning" if frac >= 0.5 and not intended else "info"
    s.add("frozen_parameters",
          f"{len(frozen)} of {len(named)} parameter tensors are frozen (requires_grad=False): "
          f"{_units_count(nf)} of {_units_count(total)} weights ({_pct(frac)} of the model), in "
          f"{', '.join(groups[:6]) or ', '.join(sorted(frozen_names)[:6])}; only "
          f"{', '.join(heads[:6])} will train" + ("; frozen on purpose, as you declared" if intended else ""),
          where, severity=sev, fixes=() if intended else None,
          evidence={"frozen_fraction": round(frac, 4), "frozen_tensors": len(frozen)})
    s.check("frozen parameters", f"{_pct(frac)} of the weights")


def input_scale(s: Session) -> None:
    import torch

    xs = [t for t in tensor_leaves(s.loss.model_inputs()) if isinstance(t, torch.Tensor)
          and t.is_floating_point() and t.numel() > 1]
    if not xs:
        return
    x = xs[0].detach().float()
    fin = x[torch.isfinite(x)]
    if not fin.numel():
        return
    lo, hi, mean, std = float(fin.min()), float(fin.max()), float(fin.mean()), float(fin.std())
    s.input_stats = (lo, hi, mean, std)
    s.check("input scale", f"{lo:.3g}..{hi:.3g} (mean {mean:.3g}, std {std:.3g})")
    if std > threshold("input_scale_std") or abs(mean) > threshold("input_scale_std"):
        pixels = lo >= 0 and 100 < hi <= 255
        s.add("unnormalised_inputs",
              f"the inputs span {lo:.4g}..{hi:.4g} (mean {mean:.4g}, std {std:.4g})"
              + (", raw 0-255 pixel values" if pixels else "")
              + ": a network trains best on inputs of about unit scale; at this scale the first layer's "
              "outputs, the initial loss and the gradients are all far too large", ("inputs",),
              fixes=s.input_fixes("unnormalised_inputs"), evidence={"min": lo, "max": hi, "mean": mean, "std": std})


def labels(s: Session, y: Any) -> bool:
    """Targets against the classes the loss reads (the tensors it was given, when the probe saw the call)."""
    import torch

    t, classes = s.loss.targets, s.num_classes
    call = s.loss_in
    if call is not None and call.name in CLASS_LOSSES and _class_targets(call.target):
        t, classes = call.target, int(call.input.shape[call.class_dim])
    elif call is not None and call.target is not None and t is None:
        t = call.target
    indexes = _indexes_classes(s)
    if s.task == "classification" and isinstance(t, torch.Tensor) and classes and not indexes:
        # integer targets beside a loss that was not seen indexing classes by them (a contrastive loss on
        # features groups samples by label): their range against the output's width says nothing
        s.check("labels", f"skipped: {s.loss_said()} was not seen indexing classes by the targets")
    elif s.task == "classification" and isinstance(t, torch.Tensor) and classes:
        valid = t != s.ignore_index()
        tv = t[valid]
        if tv.numel():
            lo, hi = int(tv.min()), int(tv.max())
            if lo < 0 or hi >= classes:
                bad = int(((tv < 0) | (tv >= classes)).sum())
                s.add("label_out_of_range", f"{bad} target(s) outside 0..{classes - 1} (the output has "
                      f"{classes} classes; targets span {lo}..{hi}); on CUDA this is the "
                      "'device-side assert triggered' error", ("targets",), fixes=_label_fixes(lo < 0))
                s.check("labels", "out of range")
                return False
        s.check("labels", f"in 0..{classes - 1}")
    if s.task == "binary" and isinstance(t, torch.Tensor) and t.numel():
        blo, bhi = float(t.min()), float(t.max())
        if blo < 0 or bhi > 1:
            s.add("label_out_of_range", f"binary targets must lie in [0, 1]; they span {blo:g}..{bhi:g}", ("targets",))
            s.check("labels", "out of range")
            return False
        s.check("labels", "in [0, 1]")
    return True


# the losses that index the output's classes by the targets, by the name a user's loss_fn has
_CLASS_LOSS_NAMES = ("CrossEntropyLoss", "NLLLoss", "MultiMarginLoss", "cross_entropy", "nll_loss",
                     "multi_margin_loss")


def _indexes_classes(s: Session) -> bool:
    """Whether the loss reads the targets as class indices into the output: a class loss the probe saw called,
    or, where the probe saw no loss call, a loss_fn of a class loss's name."""
    call = s.loss_in
    if call is not None:
        return call.name in _CLASS_LOSS_NAMES
    return s.loss.loss_name in _CLASS_LOSS_NAMES or s.loss.mode != "fn"


def output_vs_loss(s: Session, y: Any) -> None:
    """What goes into the loss against what it expects: the tensor the loss was given when the probe saw the call
    (any path: ``loss_fn``, a model's own loss, ``training_step``), else the model's output."""
    call = s.loss_in
    name, class_dim = s.loss.loss_name, s.class_dim
    if call is not None:
        y, name, class_dim = call.input, call.name, call.class_dim
    elif s.loss.mode != "fn":
        return
    if y is None or s.task == "regression":
        return
    said = s.loss_said()
    fn_name = _producer(y)
    yd = y.detach().float()
    in_unit = bool((yd >= 0).all() and (yd <= 1).all())
    rows_sum_1 = s.task == "classification" and y.dim() >= 2 and bool(
        ((yd.sum(dim=class_dim) - 1).abs() < 1e-3).all())
    last = s.last_module()
    multiclass = name in ("CrossEntropyLoss", "cross_entropy")
    if fn_name in _ACTIVATIONS and name in _LOGIT_LOSSES and not rows_sum_1 and \
            (multiclass or fn_name != "SigmoidBackward0"):
        act = _ACTIVATIONS[fn_name]
        neg = float((yd <= 0).float().mean()) if act != "sigmoid" else float("nan")
        detail = (f"{neg:.0%} of the logits are exactly 0 or below" if act != "sigmoid"
                  else f"every logit lies in [{float(yd.min()):.3g}, {float(yd.max()):.3g}]")
        s.add("activation_on_logits", f"the model's output comes out of a {act} ({fn_name}) and goes into "
              f"{said}, which expects unbounded logits: {detail}, so the model cannot express "
              "'this class is unlikely' and the loss cannot approach 0", (last,),
              evidence={"grad_fn": fn_name})
        s.check("output vs loss", f"{fn_name} outputs into {said}")
        return
    probs = fn_name in _PROB_OUTPUTS or (in_unit and rows_sum_1)
    if probs and name in _LOGIT_LOSSES:
        what = "softmax" if (fn_name == "SoftmaxBackward0" or rows_sum_1) else "sigmoid"
        s.add("probabilities_to_loss", f"the model's output is {what} probabilities (in [0, 1]"
              + (", rows sum to 1" if rows_sum_1 else "") + f") but {said} expects raw logits: "
              "it applies log-softmax/log-sigmoid itself, so gradients shrink and the loss cannot reach 0",
              (last,))
        s.check("output vs loss", f"{what} probabilities into {said}")
    elif name in _LOGPROB_LOSSES and bool((yd >= 0).all()):
        e = entry("probabilities_to_loss")
        s.add("probabilities_to_loss", f"{said} expects log-probabilities (<= 0, e.g. log_softmax) "
              "but the output is non-negative (probabilities or raw scores)", (last,), fixes=(e.fixes[2], e.fixes[0]))
        s.check("output vs loss", f"non-negative outputs into {said}")
    else:
        s.check("output vs loss", f"{fn_name or 'raw'} outputs into {said}")


# autograd nodes that only reshape or move values: the op that made a tensor is the first node past them
_SHAPE_ONLY = {"ViewBackward0", "ReshapeAliasBackward0", "UnsafeViewBackward0", "TransposeBackward0",
               "PermuteBackward0", "SqueezeBackward0", "SqueezeBackward1", "UnsqueezeBackward0", "CloneBackward0",
               "SliceBackward0", "SelectBackward0", "ExpandBackward0", "ToCopyBackward0", "AliasBackward0"}


def _producer(y: Any) -> str:
    """The name of the autograd node that made ``y``'s values ('' for a leaf), past views and reshapes
    (``logits.view(-1, C)`` into the loss still came out of the Softmax before it)."""
    node = getattr(y, "grad_fn", None)
    for _ in range(16):
        if node is None:
            return ""
        name = node.name()
        if name not in _SHAPE_ONLY:
            return str(name)
        node = next((f for f, _ in node.next_functions if f is not None), None)
    return ""


def no_grad_fn(s: Session, work: Any, out: Any, loss: Any) -> bool:
    """The first step's loss has no autograd history (no grad_fn): every output detached, or computed under
    ``no_grad`` / from ``.data`` / ``.item()``.  One ``no_gradient`` finding naming every trainable parameter (True),
    never torch's "element 0 of tensors does not require grad" from the doctor's own backward."""
    import torch

    if not torch.is_tensor(loss) or loss.requires_grad:
        return False
    trainable = [n for n, p in work.named_parameters() if p.requires_grad]
    y = logits_of(out) if out is not None else None
    where = ("the model's output is already cut from the graph (its forward detaches it)"
             if torch.is_tensor(y) and not y.requires_grad else
             "the model's output has a graph, so the loss code cuts it")
    s.add("no_gradient", f"the loss has no grad_fn, so none of the {len(trainable)} trainable parameter(s) gets a "
          f"gradient and nothing can learn: {where}", trainable or ["(loss)"],
          evidence={"loss_requires_grad": False})
    s.check("every parameter gets a gradient", "no: the loss has no grad_fn")
    return True


def gradients(s: Session, work: Any) -> None:
    import torch

    none = [n for n, p in work.named_parameters() if p.requires_grad and p.grad is None]
    if none:
        s.add("no_gradient", f"{len(none)} trainable parameter(s) got no gradient from the loss "
              "(detached, unused, or behind .data/.item()/no_grad)", none)
    s.check("every parameter gets a gradient", "no" if none else "yes")
    flow: list[tuple[str, float]] = []
    for name, mod in work.named_modules():
        grads = [p.grad for p in mod.parameters(recurse=False) if p.requires_grad and p.grad is not None]
        if grads:
            flat = torch.cat([grad_values(g).float().reshape(-1) for g in grads])
            flow.append((name or "(model)", float(flat.pow(2).mean().sqrt())))
    s.grad_flow = flow
    pos = [(n, v) for n, v in flow if v > 0 and math.isfinite(v)]
    if len(pos) >= 3:
        lo = min(pos, key=lambda t: t[1])
        hi = max(pos, key=lambda t: t[1])
        ratio = lo[1] / hi[1]
        # vanishing is a decay with depth (small near the input, large near the output), not a spread: at a
        # standard init attention's query/key gradients are tiny next to large ones in every block
        rho = depth_correlation([math.log(v) for _, v in pos])
        if ratio < threshold("vanish_ratio") and rho >= threshold("vanish_depth_correlation") and not s.has(
                "vanishing_gradients"):  # the signal's own decay with depth, measured at init, says it already
            small = [n for n, v in pos if v / hi[1] < threshold("vanish_ratio")]
            s.add("vanishing_gradients", f"per-layer RMS gradients shrink toward the input, spanning "
                  f"{1 / ratio:.3g}x: {lo[0]} gets {lo[1]:.3g} while {hi[0]} gets {hi[1]:.3g} (rank "
                  f"correlation of gradient size with depth {rho:.2f}); {len(small)} layer(s) barely learn",
                  [s.label(n) if n != "(model)" else n for n in small], fixes=_vanishing_fixes(work))
        s.check("gradient flow (min/max per-layer RMS; depth correlation)", f"{ratio:.3g}; {rho:.2f}")


_SATURATING = ("Sigmoid", "Tanh", "Softsign", "Hardtanh", "Hardsigmoid", "LogSigmoid", "Tanhshrink")


def _vanishing_fixes(work: Any) -> Any:
    """The vanishing-gradient fixes, less "replace saturating activations" where the model's activation modules
    are all of the ReLU kind (it would send the user to change what is right already)."""
    acts = {type(m).__name__ for m in work.modules() if type(m).__module__.startswith("torch.nn.modules.activation")}
    fixes = fixes_for("vanishing_gradients")
    if acts and not acts & set(_SATURATING) and any(a in ("ReLU", "LeakyReLU", "GELU", "SiLU", "ELU", "ReLU6",
                                                           "PReLU", "Mish", "SELU", "CELU") for a in acts):
        return tuple(f for f in fixes if "saturating" not in f.title)
    return fixes


def input_dependence(s: Session, y: Any, work: Any) -> None:
    """Does the output depend on the input?  Identical outputs for distinct inputs, or no gradient at all
    reaching the first layer's weights."""
    import torch

    x = next((t for t in tensor_leaves(s.loss.model_inputs()) if isinstance(t, torch.Tensor)), None)
    if x is None or y is None or not isinstance(y, torch.Tensor) or x.dim() < 1 or y.dim() < 1:
        return
    count = sample_count(s.loss.targets)
    bx, by = batch_dim(x, count), batch_dim(y, count)
    if bx is None or by is None:
        s.check("output depends on the input", "skipped: no dimension of the input and the output runs over the "
                f"batch's {count} samples")
        return
    x, y = x.movedim(bx, 0), y.movedim(by, 0)
    n = min(int(x.shape[0]), int(y.shape[0]))
    if n < 2:
        return
    xr = x[:n].reshape(n, -1)
    yr = y[:n].detach().reshape(n, -1)
    distinct_x = bool((xr != xr[:1]).any())
    same_y = bool((yr == yr[:1]).all())
    quiet = not same_y and distinct_x and _same_without_dropout(s, work, by, n)
    same_y = same_y or quiet
    if distinct_x and same_y:
        located = _lost_where(s, quiet, n)
        if located is not None:
            message, fixes, evidence = located
            s.add("ignores_input", message, (evidence["module"], *((evidence["line"],) if evidence["line"] else ())),
                  fixes=fixes, evidence=evidence)
        else:
            s.add("ignores_input", f"the output is identical{' with dropout off' if quiet else ''} for all {n} "
                  "samples of the batch although their "
                  "inputs differ: the forward pass does not depend on its input", ("inputs",),
                  evidence={"samples": n})
        s.check("output depends on the input", "no: identical outputs")
        return
    first = next(((nm, p) for nm, p in work.named_parameters() if p.requires_grad and p.dim() >= 2), None)
    if first is not None and first[1].grad is not None and distinct_x:
        g = grad_values(first[1].grad)
        others = [grad_values(p.grad) for nm, p in work.named_parameters() if p.grad is not None and nm != first[0]]
        if not bool(g.any()) and any(bool(o.any()) for o in others) and not _gradient_after_a_step(s, first[0]):
            mod = first[0].rsplit(".", 1)[0] if "." in first[0] else ""
            s.add("ignores_input", f"the gradient reaching the first layer's weights ({first[0]}) is exactly "
                  "zero while later layers get gradients: its input carries no signal (zeroed, constant "
                  "or detached)", (s.label(mod),))
            s.check("output depends on the input", "no: zero gradient at the first layer")
            return
    if distinct_x and unchanged_by_zeroing(s):
        return
    s.check("output depends on the input", "yes")


def _lost_where(s: Session, quiet: bool, n: int) -> tuple[str, Any, dict[str, Any]] | None:
    """Where the forward of a copy stops depending on its input (``_lost_dependence``): the finding's message,
    fixes and evidence; None when no op is found (the general advice stands)."""
    from nbdebug.core.doctor import _lost_dependence as lost

    try:
        work, _ = s.fresh()
        if quiet:
            work.eval()
        cut = lost.locate(s, work, n)
    except Exception as e:  # noqa: BLE001 - no place found: the observation stands with its general advice
        s.check("where the output stops depending on the input", f"skipped: {type(e).__name__}: {e}"[:200])
        return None
    if cut is None:
        s.check("where the output stops depending on the input", "no op found on the output's path that reads "
                "the input (a constant, a cached or a detached tensor)")
        return None
    s.check("where the output stops depending on the input", cut.detail)
    fading = next((f for f in s.findings if f.kind == "vanishing_gradients" and "activation_scale" in f.evidence), None)
    if cut.kind == "op" and fading is not None:
        # no op of its own: the signal fades layer by layer until one layer's output no longer varies
        message, _, evidence = lost.said(s, cut, n)
        return (message.split(". ")[0] + "; the signal fades with depth (the finding above) until there",
                fading.fixes, evidence)
    return lost.said(s, cut, n)


def _gradient_after_a_step(s: Session, name: str) -> bool:
    """Whether ``name`` gets a gradient once a fresh copy has taken one step: a zero matrix after it (LoRA's B,
    which starts at zero by design) passes it no gradient at init only, while an input that carries no signal
    leaves it at zero for good."""
    from nbdebug.core.doctor._train_checks import one_step

    try:
        work, opt = s.fresh()
        one_step(s, work, opt, s.loss.inputs)
        opt.zero_grad(set_to_none=True)
        _, loss = s.loss.loss(work, s.loss.inputs)
        loss.backward()
        g = dict(work.named_parameters())[name].grad
    except Exception:  # noqa: BLE001 - no second look: the observation at init stands
        return False
    s.check("first layer's gradient after one step", "non-zero: zero at init only (a zero matrix after it, such as "
            "LoRA's B, passes no gradient until its first update)" if g is not None and bool(grad_values(g).any())
            else "still zero")
    return g is not None and bool(grad_values(g).any())


def _same_without_dropout(s: Session, work: Any, by: int, n: int) -> bool:
    """Outputs that differ only by dropout's noise: the copy's output in eval mode is the same for every sample."""
    import torch

    if not work.training or not any(type(m).__name__.startswith("Dropout") for m in work.modules()):
        return False
    try:
        work.eval()
        with torch.no_grad():
            y = logits_of(s.loss.forward(work, s.loss.inputs))
    finally:
        work.train()
    if not isinstance(y, torch.Tensor) or y.dim() <= by or int(y.shape[by]) < n:
        return False
    yr = y.movedim(by, 0)[:n].reshape(n, -1)
    return bool((yr == yr[:1]).all())


def step_error(s: Session, e: BaseException) -> bool:
    """The first training step raised where the model's output was out of the checks' sight (a Lightning
    ``training_step``, a model's own loss): a target outside the classes, or shapes the loss refused (found by
    ``loss_shapes``), is a finding, not a crash.  False for any other error (the user's own error is raised as it
    is)."""
    from nbdebug.core.explain import explain

    if s.has("loss_broadcast") and s.loss_in is not None and s.loss_in.result is None:
        s.check("first step", "the loss refused the shapes of its inputs")  # said by loss_shapes
        return True
    d = explain(e)
    if d.kind not in ("target_out_of_bounds", "device_side_assert"):
        return False
    below = re.search(r"Target -\d+ is out of bounds", str(e)) is not None or _any_negative(
        s.loss_in.target if s.loss_in is not None else None, s.loss.targets)
    s.add("label_out_of_range", f"the first training step failed: {str(e).splitlines()[0][:200]}: a target lies "
          "outside the output's classes" + (" (below 0)" if below else ""), ("targets",), fixes=_label_fixes(below))
    s.check("labels", "out of range (the loss refused them)")
    return True


def _label_fixes(below: bool) -> Any:
    """The first fix follows the evidence: a target below 0 marks ignored positions with a value the loss does not
    ignore (-1 for -100); one above the range needs as many outputs as classes (the entry's own order)."""
    return fixes_for("label_negative") if below else None


def _any_negative(*targets: Any) -> bool:
    import torch

    return any(isinstance(t, torch.Tensor) and not t.is_floating_point() and bool(((t < 0) & (t != -100)).any())
               for t in targets)


def _pct(frac: float) -> str:
    """A share as a percentage that never rounds a part up to the whole (99.95%, not 100%)."""
    if 0.99 < frac < 1.0 or 0.0 < frac < 0.01:
        return f"{frac:.2%}"
    return f"{frac:.0%}"


def grad_values(g: Any) -> Any:
    """A gradient's stored values: a sparse gradient (Embedding(sparse=True)) has no reshape."""
    import torch

    g = g.detach()
    if g.layout is torch.sparse_coo:
        return g.coalesce().values()
    if g.layout is not torch.strided:
        return g.values()
    return g


def _units_count(n: int) -> str:
    from nbdebug._units import fmt_count

    return fmt_count(n)
