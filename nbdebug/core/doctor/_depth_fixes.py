"""A signal or a gradient that vanishes with depth, made an experiment: which of its usual causes is this net's?

"Use fewer layers, or add BatchNorm" changes the architecture; the two causes a deep net usually has are cheaper
to mend and can be tried on a copy: saturating activations (sigmoid/tanh between the layers: each one passes at
most a quarter of the gradient, and squashes the signal), and an init whose scale does not match the activation
(``normal_(std=0.01)`` where LeCun / He / Glorot give about ``1/sqrt(fan_in)``).  ``candidates`` gives the
differential the experiments run (the activations swapped for ReLU on a copy; every Linear/conv layer re-drawn
with the init matched to the net's activation, where its weights are off that scale); ``settle`` makes the fixes
that restored learning the finding's first fixes, ranked by measured effect, with the before and after numbers.
When neither moves the training, the finding keeps its general advice (and the experiments say that they did not
help).
"""

from __future__ import annotations

import math
from typing import Any

from nbdebug.core._findings import Finding, Fix
from nbdebug.core.doctor._session import Session, replaced

__all__ = ["candidates", "settle"]

_SATURATING = ("Sigmoid", "Tanh", "Softsign", "Hardtanh", "Hardsigmoid")
_RELU_LIKE = ("ReLU", "ReLU6", "LeakyReLU", "PReLU", "RReLU", "ELU", "CELU", "GELU", "SiLU", "Mish", "Hardswish")
_OFF_SCALE = 2.0  # weights whose std is off the matched init's by more than this factor (either way)


def _vanishing(s: Session) -> Finding | None:
    return next((f for f in s.findings if f.kind == "vanishing_gradients" and f.severity != "info"), None)


def _family(work: Any) -> str | None:
    """The activation the net is built with (the most frequent kind among its activation modules)."""
    counts = {"selu": 0, "relu": 0, "saturating": 0}
    for m in work.modules():
        name = type(m).__name__
        if name == "SELU":
            counts["selu"] += 1
        elif name in _RELU_LIKE:
            counts["relu"] += 1
        elif name in _SATURATING:
            counts["saturating"] += 1
    best = max(counts, key=lambda k: counts[k])
    return best if counts[best] else None


def _layers(work: Any) -> list[tuple[str, Any]]:
    from torch import nn

    return [(n, m) for n, m in work.named_modules() if isinstance(m, (nn.Linear, nn.modules.conv._ConvNd))
            and m.weight.requires_grad and m.weight.dim() >= 2]


def _matched_std(weight: Any, family: str) -> float:
    fan_in = max(weight[0].numel(), 1)
    fan_out = max(weight.shape[0] * (weight[0, 0].numel() if weight.dim() > 2 else 1), 1)
    if family == "selu":
        return 1.0 / math.sqrt(fan_in)
    if family == "relu":
        return math.sqrt(2.0 / fan_in)
    return math.sqrt(2.0 / (fan_in + fan_out))


def _at_default_init(model: Any) -> bool:
    """Whether most Linear/conv layers are at the scale of PyTorch's default init for their fan-in."""
    from nbdebug.core.doctor._init_scale import _default_std

    ratios = [float(m.weight.detach().float().std()) / _default_std(m.weight) for _, m in _layers(model)]
    return len([r for r in ratios if 1 / _OFF_SCALE <= r <= _OFF_SCALE]) * 2 > len(ratios) > 0


def _off_scale(work: Any, family: str) -> bool:
    """Whether most Linear/conv layers start off the scale that ``family``'s activation keeps."""
    ratios = [float(m.weight.detach().float().std()) / _matched_std(m.weight, family) for _, m in _layers(work)]
    return len([r for r in ratios if not (1 / _OFF_SCALE <= r <= _OFF_SCALE)]) * 2 > len(ratios) > 0


def _reinit(work: Any, family: str) -> None:
    import torch

    with torch.no_grad():
        for _, m in _layers(work):
            m.weight.normal_(0.0, _matched_std(m.weight, family))
            if getattr(m, "bias", None) is not None:
                m.bias.zero_()


def _saturating(s: Session, work: Any) -> list[str]:
    """The saturating activation modules between layers, in the order the forward runs them, less one whose output
    is the model's output (a sigmoid that gives probabilities is no hidden activation)."""
    import torch

    ran: list[tuple[str, Any]] = []
    handles = [m.register_forward_hook(lambda _m, _i, out, n=n: ran.append((n, out)))
               for n, m in work.named_modules() if type(m).__name__ in _SATURATING]
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            out = s.loss.forward(work, s.loss.inputs)
    finally:
        for h in handles:
            h.remove()
    from nbdebug.core.doctor._inputs import logits_of

    y = logits_of(out)
    names = list(dict.fromkeys(n for n, o in ran if o is not y))
    return names


def candidates(s: Session) -> list[tuple[str, str, Any, str]]:
    """The experiments for a vanishing signal: (cause, change in words, variant, code), as the differential takes
    them; each one's fix in words is kept on the session for ``settle``."""
    from torch import nn

    from nbdebug.core.knowledge.training import DEPTH_FIXES, MATCHED_INIT

    if _vanishing(s) is None:
        return []
    work, _ = s.fresh()
    out: list[tuple[str, str, Any, str]] = []
    try:
        hidden = _saturating(s, work)
    except Exception:  # noqa: BLE001 - no forward here, no activation experiment
        hidden = []
    if hidden:
        kinds = sorted({type(work.get_submodule(n)).__name__ for n in hidden})
        what = f"{len(hidden)} x {'/'.join(kinds)}"

        # ReLU keeps a signal's variance only at He init's scale: layers drawn off it get that init with it
        he = _off_scale(work, "relu")

        def swapped(s: Session) -> tuple[Any, Any, Any, Any]:
            w, opt = s.fresh()
            for n in hidden:
                parent, _, leaf = n.rpartition(".")
                setattr(w.get_submodule(parent) if parent else w, leaf, nn.ReLU())
            if he:
                _reinit(w, "relu")
            return w, opt, None, s.loss.inputs

        change = f"the {what} activations replaced by ReLU" + (" (with the He init ReLU needs)" if he else "")
        title, code = DEPTH_FIXES["activation"]
        s.depth_fixes[change] = Fix(title.format(what=what), code.format(kind=kinds[0]))
        out.append(("vanishing_gradients", change, swapped, s.depth_fixes[change].code))
    family = _family(work)
    layers = _layers(work)
    if family is not None and layers:
        ratios = [float(m.weight.detach().float().std()) / _matched_std(m.weight, family) for _, m in layers]
        if _off_scale(work, family):
            init, code = MATCHED_INIT[family]
            stds = sorted(float(m.weight.detach().float().std()) for _, m in layers)
            what = f"weight std {stds[len(stds) // 2]:.2g}, {min(ratios):.2g}x to {max(ratios):.2g}x the matched scale"

            def matched(s: Session) -> tuple[Any, Any, Any, Any]:
                w, opt = s.fresh()  # re-drawn in place: the optimizer holds the same tensors
                _reinit(w, family)
                return w, opt, None, s.loss.inputs

            change = f"every Linear/conv layer re-initialised with {init} init"
            title, _ = DEPTH_FIXES["init"]
            loop = f"for layer in model.modules():\n    if isinstance(layer, (nn.Linear, nn.Conv2d)):\n        {code}"
            s.depth_fixes[change] = Fix(title.format(init=init, what=what), loop)
            out.append(("vanishing_gradients", change, matched, loop))
    if not any(c[0] == "vanishing_gradients" and "re-initialised" in c[1] for c in out):
        out.extend(_default_init(s, work))
    return out


def _reset(work: Any) -> None:
    """Every module that has ``reset_parameters()`` (Linear, conv, LSTM/GRU, Embedding, norms) at its own
    default init, drawn under a forked RNG (the caller's random state is not moved)."""
    import torch

    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(0)
        for m in work.modules():
            if callable(getattr(m, "reset_parameters", None)) and any(True for _ in m.parameters(recurse=False)):
                m.reset_parameters()


def _default_init(s: Session, work: Any) -> list[tuple[str, str, Any, str]]:
    """The weights compared with each layer's own default init (a copy reset with ``reset_parameters()``): where
    most weight matrices sit off it by more than ``_OFF_SCALE``, re-drawing them there is an experiment (the net
    that has no activation modules to read a matched init from: an LSTM tagger)."""
    import copy

    from nbdebug.core.knowledge.training import DEPTH_FIXES

    ref = copy.deepcopy(work)
    _reset(ref)
    mine = dict(work.named_parameters())
    ratios = []
    for n, p in ref.named_parameters():
        if p.dim() >= 2 and mine[n].requires_grad and float(p.detach().float().std()) > 0:
            ratios.append(float(mine[n].detach().float().std()) / float(p.detach().float().std()))
    off = [r for r in ratios if not (1 / _OFF_SCALE <= r <= _OFF_SCALE)]
    if not ratios or len(off) * 2 <= len(ratios):
        return []

    def reset(s: Session) -> tuple[Any, Any, Any, Any]:
        w, opt = s.fresh()  # reset in place: the optimizer holds the same tensors
        _reset(w)
        return w, opt, None, s.loss.inputs

    what = f"{len(off)} of {len(ratios)} weight matrices at {min(ratios):.2g}x to {max(ratios):.2g}x their default std"
    change = "every layer re-initialised at its default init (reset_parameters())"
    title, code = DEPTH_FIXES["default_init"]
    s.depth_fixes[change] = Fix(title.format(what=what), code)
    return [("vanishing_gradients", change, reset, code)]


def settle(s: Session) -> None:
    """After the experiments: the fixes that restored learning lead the finding, ranked by measured effect (each
    with its numbers); a finding elsewhere that pointed at the old first fix points at the new one."""
    f = _vanishing(s)
    if f is None or not s.depth_fixes:
        return
    mine = [e for e in s.experiments if e.change in s.depth_fixes]
    won = [e for e in mine if e.restores]
    if not won:
        return
    old = f.fix
    fixes = tuple(Fix(f"{s.depth_fixes[e.change].title} (measured on a copy: {e.start:.4g} -> {e.after:.4g} "
                      f"in {e.steps} steps, yours {e.user_start:.4g} -> {e.before:.4g})", s.depth_fixes[e.change].code)
                  for e in won)
    if won[0].change.startswith("every Linear/conv layer") and _at_default_init(s.user_model):
        # the layers are at PyTorch's default init, which nets this deep are built with beside normalisation or
        # residual connections: the plain depth is the deviation, so its fix stays first and the measured init
        # comes next, as what also mends it
        fixes = (*f.fixes[:1], *fixes)
    others = "; ".join(e.said() for e in mine if e is not won[0])
    message = f.message if won[0].said() in f.message else f"{f.message}. Tried on a copy: {won[0].said()}"
    message += f"; also tried: {others}" if others else ""
    evidence = {**dict(f.evidence), **won[0].evidence(),
                "fixes_tried": "; ".join(f"{e.change}: {e.after:.4g}" for e in mine)}
    new = replaced(f, message=message, fixes=tuple(dict.fromkeys((*fixes, *f.fixes[:1]))), evidence=evidence)
    s.findings = [new if g is f else _repointed(g, old, fixes[0].title) for g in s.findings]
    s.not_causes.discard("vanishing_gradients")


def _repointed(f: Finding, old: str | None, new: str) -> Finding:
    if not old or not any(old in x.title for x in f.fixes):
        return f
    return replaced(f, fixes=tuple(Fix(x.title.replace(old, new), x.code) for x in f.fixes))
