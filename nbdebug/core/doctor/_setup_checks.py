"""The doctor's checks of the setup around the model: what the optimizer holds, the learning rate and weight
decay the user set, the mode the model was left in, the shapes the loss compares, and BatchNorm on one sample.

Each is judged before any training; where a fix can be tried on the copy, ``_experiments`` later tries it and
adds what it measured to the finding (a suspect whose fix does not move the result is not called the cause).
"""

from __future__ import annotations

from typing import Any

from nbdebug.core.doctor._inputs import set_lr
from nbdebug.core.doctor._session import Session

__all__ = ["optimizer_coverage", "learning_rate", "model_mode", "loss_shapes", "batchnorm_batch",
           "is_frozen_on_purpose", "frozen_as_declared", "user_lr", "ELEMENTWISE_LOSSES", "MODE_LAYERS"]

# losses that compare outputs and targets element by element, broadcasting shapes that differ
ELEMENTWISE_LOSSES = {"MSELoss", "mse_loss", "L1Loss", "l1_loss", "SmoothL1Loss", "smooth_l1_loss", "HuberLoss",
                      "huber_loss", "BCELoss", "binary_cross_entropy", "BCEWithLogitsLoss",
                      "binary_cross_entropy_with_logits"}
# layers that behave differently in train and eval mode
MODE_LAYERS = ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "BatchNorm1d", "BatchNorm2d",
               "BatchNorm3d", "SyncBatchNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d")


def is_frozen_on_purpose(s: Session, name: str) -> bool:
    """The user declared parameter ``name`` frozen on purpose (``frozen=True`` or a prefix of its name)."""
    frozen = s.options.frozen
    if frozen is True:
        return True
    if not frozen:
        return False
    return any(name == f or name.startswith(f.rstrip(".") + ".") for f in frozen)  # type: ignore[union-attr]


def frozen_as_declared(s: Session) -> bool:
    """Part of the model is frozen, and all of it on purpose (the ``frozen=`` argument)."""
    frozen = [n for n, p in s.user_model.named_parameters() if not p.requires_grad and p.is_floating_point()]
    return bool(frozen) and all(is_frozen_on_purpose(s, n) for n in frozen)


def optimizer_coverage(s: Session) -> None:
    """The user's optimizer against the model: trainable parameters it does not hold, parameters it holds that
    the model does not own, and an empty list."""
    import torch

    opt = s.user_opt
    if not isinstance(opt, torch.optim.Optimizer):
        s.check("optimizer holds the trainable parameters", "not checked: the optimizer is built on the copy")
        return
    named = [(n, p) for n, p in s.user_model.named_parameters() if p.requires_grad]
    held = {id(p) for g in opt.param_groups for p in g["params"]}
    owned = {id(p) for p in s.user_model.parameters()}
    missing = [n for n, p in named if id(p) not in held]
    foreign = sum(1 for g in opt.param_groups for p in g["params"] if id(p) not in owned)
    s.coverage_missing = missing
    if not missing and not foreign:
        s.check("optimizer holds the trainable parameters", f"all {len(named)}")
        return
    total = sum(p.numel() for _, p in named)
    lost = sum(p.numel() for n, p in named if n in set(missing))
    if len(missing) == len(named):
        what = (f"the optimizer holds none of the model's {len(named)} trainable parameter tensors"
                + (f" ({foreign} tensors of another model instead)" if foreign else "")
                + ": training never changes this model")
    else:
        groups = sorted({n.rsplit(".", 1)[0] if "." in n else n for n in missing})
        what = (f"{len(missing)} of {len(named)} trainable parameter tensors ({lost / max(total, 1):.0%} of the "
                f"trainable weights) are not in the optimizer, so they never change: "
                f"{', '.join(s.label(g) for g in groups[:6])}"
                + (f"; it also holds {foreign} tensors the model does not own" if foreign else ""))
    if not missing:
        what = (f"the optimizer holds {foreign} parameter tensors the model does not own (another model, or a "
                "copy made before .to(device))")
    s.add("optimizer_coverage", what, [s.label(n.rsplit(".", 1)[0]) if "." in n else n for n in missing[:6]]
          or ["optimizer"], severity="error" if len(missing) == len(named) else "warning",
          evidence={"missing_tensors": len(missing), "foreign_tensors": foreign})
    s.check("optimizer holds the trainable parameters", f"{len(named) - len(missing)} of {len(named)}")


def user_lr(s: Session) -> float | None:
    """The learning rate the user set on the first group of their optimizer (None when unknown)."""
    import torch

    if s.options.lr is not None:
        return float(s.options.lr)
    opt = s.user_opt
    if isinstance(opt, torch.optim.Optimizer) and opt.param_groups:
        v = set_lr(opt.param_groups[0])
        return float(v) if isinstance(v, (int, float)) else None
    return None


def learning_rate(s: Session) -> None:
    """The learning rate the user set, not a scheduler's warm-up value; and weight decay against it."""
    import torch

    opt = s.user_opt
    if not isinstance(opt, torch.optim.Optimizer) or not opt.param_groups:
        return
    g = opt.param_groups[0]
    now, base = g.get("lr"), set_lr(g)
    if s.options.lr is not None:
        s.check("learning rate", f"{s.options.lr:g} (given to the doctor)")
    elif isinstance(now, (int, float)) and isinstance(base, (int, float)) and now != base:
        key = "max_lr" if "max_lr" in g else "initial_lr"
        s.check("learning rate", f"{base:g} as you set it (the scheduler's {key}); its current value {now:g} is "
                "the schedule's, so the copy trains at the one you set")
    elif isinstance(base, (int, float)):
        s.check("learning rate", f"{base:g}")
    wd = g.get("weight_decay")
    if isinstance(wd, (int, float)) and wd:
        s.check("weight decay", f"{wd:g} with lr={base:g} ({type(opt).__name__})")


def model_mode(s: Session) -> None:
    """The mode the user left the model in: the copy trains in that mode, and eval mode with layers that behave
    differently in training is a finding."""
    m = s.user_model
    layers = sorted({type(x).__name__ for x in m.modules() if type(x).__name__ in MODE_LAYERS})
    if m.training:
        s.check("mode", "train")
        return
    s.left_in_eval = True
    if not layers:
        s.check("mode", "eval (no layer here behaves differently in training)")
        return
    s.add("eval_mode", f"the model is in eval mode (model.training is False) and has {', '.join(layers)}: in eval "
          "mode dropout is off and BatchNorm normalises with running statistics that never update; the doctor "
          "trains its copy in this mode, as your loop would", ["model"],
          evidence={"layers": ", ".join(layers)})
    s.check("mode", "eval: the copy is trained in eval mode, as yours would be")


def loss_shapes(s: Session, y: Any) -> None:
    """Outputs and targets of different shapes that an element-wise loss broadcasts ((N, 1) against (N,))."""
    import torch

    t, name = s.loss.targets, s.loss.loss_name
    if s.loss_in is not None:  # what the loss was given, wherever it is called
        y, t, name = s.loss_in.input, s.loss_in.target, s.loss_in.name
    elif s.loss.mode != "fn":
        return
    if not isinstance(y, torch.Tensor) or not isinstance(t, torch.Tensor):
        return
    if name not in ELEMENTWISE_LOSSES or tuple(y.shape) == tuple(t.shape):
        return
    if s.loss_in is not None and s.loss_in.result is None:  # the loss raised on these shapes (the BCE pair does)
        s.broadcast = (tuple(y.shape), tuple(t.shape))
        s.add("loss_broadcast", f"{s.loss_said()} gets outputs of shape {tuple(y.shape)} and targets of shape "
              f"{tuple(t.shape)} and refuses them (it needs equal shapes), so no training step can run",
              [s.last_module()], severity="error",
              evidence={"outputs": str(tuple(y.shape)), "targets": str(tuple(t.shape))})
        s.check("loss input shapes", f"{tuple(y.shape)} vs {tuple(t.shape)}: refused by the loss")
        return
    try:
        b = tuple(torch.broadcast_shapes(y.shape, t.shape))
    except RuntimeError:
        return
    if b == tuple(y.shape) and b == tuple(t.shape):
        return
    n_b = 1
    for d in b:
        n_b *= int(d)
    if n_b <= max(y.numel(), t.numel()):
        s.check("loss input shapes", f"{tuple(y.shape)} vs {tuple(t.shape)} (broadcast to {b}, no more elements)")
        return
    s.broadcast = (tuple(y.shape), tuple(t.shape))
    s.add("loss_broadcast", f"{s.loss_said()} gets outputs of shape {tuple(y.shape)} and targets of shape "
          f"{tuple(t.shape)}; they broadcast to {b}, so every prediction is compared with every target and the "
          "best the model can do is predict their mean", [s.last_module()], severity="error",
          evidence={"outputs": str(tuple(y.shape)), "targets": str(tuple(t.shape)), "broadcast": str(b)})
    s.check("loss input shapes", f"{tuple(y.shape)} vs {tuple(t.shape)}: broadcast to {b}")


def batchnorm_batch(s: Session) -> bool:
    """BatchNorm in train mode on a batch of one sample: a finding (torch's ValueError for 1-D inputs, a variance
    over a single sample's positions for 2-D).  False when the run cannot go on."""
    import torch

    bns = [n for n, m in s.user_model.named_modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
           and m.training]
    x = next((t for t in _leaves(s.loss.model_inputs()) if isinstance(t, torch.Tensor) and t.dim() >= 1), None)
    if not bns or x is None or int(x.shape[0]) != 1:
        return True
    s.add("batchnorm_single_sample", f"the batch holds one sample and {len(bns)} BatchNorm layer(s) train on it: "
          "in train mode BatchNorm normalises each channel over the batch, so with one sample a BatchNorm1d "
          "fails ('Expected more than 1 value per channel') and a BatchNorm2d normalises over one image's pixels "
          "only", [s.label(n) for n in bns[:6]], severity="error", evidence={"batch_size": 1})
    s.check("batch size for BatchNorm", "1 sample")
    return True


def _leaves(obj: Any) -> list[Any]:
    from nbdebug.core.doctor._inputs import tensor_leaves

    return tensor_leaves(obj)
