"""A model with a layer too narrow for its batch: a hidden width below the number of classes it must tell apart
(an LSTM of hidden size 1 before a 5-tag output) squeezes every sample through fewer numbers than the output has.
The suspect is tested on a copy: that layer rebuilt wider (and the next layer that reads it, to match), trained as
long as the user's run; a wider copy that learns the batch better puts the fault on the width.

Only looked at when the batch is not learned, no experiment restored learning and nothing else explains it.
"""

from __future__ import annotations

from typing import Any

from nbdebug.core._findings import Fix
from nbdebug.core.doctor._session import Session

__all__ = ["widen"]

CHECK = "the narrowest hidden layer widened on a copy"


def _attrs(m: Any) -> tuple[str, str] | None:
    """The attributes that set a layer's input and output width (an RNN's output is its hidden size, twice when
    bidirectional); None for a layer the experiment does not rebuild."""
    from torch import nn

    if isinstance(m, nn.RNNBase):
        return "input_size", "hidden_size"
    if isinstance(m, nn.Linear):
        return "in_features", "out_features"
    if isinstance(m, nn.modules.conv._ConvNd) and m.groups == 1:
        return "in_channels", "out_channels"
    return None


def _width(m: Any) -> tuple[str, int] | None:
    a = _attrs(m)
    return None if a is None else (a[1], int(getattr(m, a[1])))


def _in_width(m: Any) -> tuple[str, int] | None:
    a = _attrs(m)
    return None if a is None else (a[0], int(getattr(m, a[0])))


def _rebuilt(m: Any, **change: int) -> Any:
    """A new module of ``m``'s type with ``change`` (its other settings kept), at its default init."""
    from torch import nn

    args: dict[str, Any]
    if isinstance(m, nn.RNNBase):
        args = dict(input_size=m.input_size, hidden_size=m.hidden_size, num_layers=m.num_layers, bias=m.bias,
                    batch_first=m.batch_first, dropout=float(m.dropout), bidirectional=m.bidirectional)
        if isinstance(m, nn.RNN):
            args["nonlinearity"] = m.nonlinearity
        return type(m)(**{**args, **change})
    if isinstance(m, nn.Linear):
        args = dict(in_features=m.in_features, out_features=m.out_features, bias=m.bias is not None)
        return nn.Linear(**{**args, **change})
    args = dict(in_channels=m.in_channels, out_channels=m.out_channels, kernel_size=m.kernel_size, stride=m.stride,
                padding=m.padding, dilation=m.dilation, bias=m.bias is not None, padding_mode=m.padding_mode)
    return type(m)(**{**args, **change})


def _narrow(s: Session, work: Any) -> tuple[str, str, int, int] | None:
    """(narrow layer, the layer that reads it, its width, the wider width): the first hidden layer narrower than
    the classes, with a next weighted layer (in registration order) whose input width is that layer's output."""
    classes = s.num_classes or 0
    layers = [(n, m) for n, m in work.named_modules() if n and _width(m) is not None
              and all(p.requires_grad for p in m.parameters())]
    for (name, m), (nxt, after) in zip(layers, layers[1:]):
        attr, w = _width(m)  # type: ignore[misc]
        out = w * (2 if getattr(m, "bidirectional", False) else 1)
        inner = _in_width(after)
        if w < classes and inner is not None and inner[1] == out:
            return name, nxt, w, max(32, 4 * classes)
    return None


def widen(s: Session) -> None:
    from nbdebug.core.doctor import _experiments as experiments
    from nbdebug.core.doctor._capacity import _EXPLAINED, _first

    at = next((i for i, f in enumerate(s.findings) if f.kind == "cannot_overfit" and f.severity != "info"), None)
    if at is None or s.explained or s.unstable or any(e.restores for e in s.experiments) or s.has(*_EXPLAINED):
        return
    work, _ = s.fresh()
    found = _narrow(s, work)
    if found is None:
        s.check(CHECK, "skipped: no hidden layer narrower than the classes")
        return
    name, nxt, w, wide = found
    m = work.get_submodule(name)
    attr = _width(m)[0]  # type: ignore[index]
    in_attr = _in_width(work.get_submodule(nxt))[0]  # type: ignore[index]
    factor = 2 if getattr(m, "bidirectional", False) else 1

    def wider(s: Session) -> tuple[Any, Any, Any, Any]:
        import torch

        w2, opt = s.fresh()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            for path, new in ((name, _rebuilt(w2.get_submodule(name), **{attr: wide})),
                              (nxt, _rebuilt(w2.get_submodule(nxt), **{in_attr: wide * factor}))):
                parent, _, leaf = path.rpartition(".")
                setattr(w2.get_submodule(parent) if parent else w2, leaf, new)
        group = opt.param_groups[0]
        settings = {k: v for k, v in group.items() if k != "params" and k in opt.defaults}
        opt2 = type(opt)([p for p in w2.parameters() if p.requires_grad], **settings)
        return w2, opt2, None, s.loss.inputs

    label = f"{s.options.name}.{name}"
    code = f"{label} = {type(m).__name__}(..., {attr}={wide})  # and {s.options.name}.{nxt}'s {in_attr} to match"
    ex = experiments.trial(s, "model_too_small", f"{label} widened from {attr}={w} to {wide}", wider, code)
    if ex is None or not ex.restores:
        s.check(CHECK, f"{label} ({attr}={w}): " + ("the wider copy could not run" if ex is None else
                                                     f"wider did not learn the batch better ({ex.said()})"))
        return
    from nbdebug.core.knowledge import finding

    s.check(CHECK, f"{label} ({attr}={w}): {ex.said()}")
    cause = finding("model_too_small", f"{label} has {attr}={w}, narrower than the {s.num_classes} classes the "
                    f"output tells apart: every sample passes through {w * factor} number(s) there. Tried on a copy: "
                    f"{ex.said()}", (s.label(name),),
                    fixes=(Fix(f"widen {label} ({attr}={w} -> {wide}; measured on a copy)", code),),
                    evidence={"width": w, "wider": wide, **ex.evidence()})
    _first(s, at, cause)
