"""Weights initialised far too small: the Linear and convolution layers whose weights start at a small share of
the scale that keeps a signal's variance (PyTorch's default for their fan-in), so that what reaches the output
varies over the samples a thousandth as much as the input does (``normal_(std=1e-4)`` on every layer: the outputs
are all ~0, the gradients shrink the same way on their way back, and no learning rate moves the model).

Measured at init with forward hooks on a fresh copy: the input's spread over the samples against the last such
layer's output's.  The suspect is then an experiment: the same layers re-initialised with their own
``reset_parameters`` on a copy, trained as long as the user's run; a start whose re-initialisation does not learn
the batch better is not named as the cause (``_constant_init.settle``).
"""

from __future__ import annotations

import math
from typing import Any

from nbdebug.core.doctor._session import Session, fixes_for
from nbdebug.core.knowledge import threshold

__all__ = ["init_scale", "candidates", "large_start"]

CHECK = "weight scale at init (the output's spread over the samples / the input's)"


def _default_std(weight: Any) -> float:
    """The std of PyTorch's default init of a Linear/conv weight: uniform(+-1/sqrt(fan_in))."""
    fan_in = weight[0].numel() if weight.dim() >= 2 else weight.numel()
    return 1.0 / math.sqrt(3.0 * max(fan_in, 1))


def init_scale(s: Session) -> None:
    import torch
    from torch import nn

    work, _ = s.fresh()
    work.train()
    layers = [(n, m) for n, m in work.named_modules() if isinstance(m, (nn.Linear, nn.modules.conv._ConvNd))
              and callable(getattr(m, "reset_parameters", None)) and m.weight.requires_grad]
    if len(layers) < 2:
        s.check(CHECK, f"{len(layers)} Linear/conv layer(s): too few to shrink a signal")
        return
    seen: list[tuple[str, float, float]] = []  # name, input spread, output spread

    def spread(t: Any) -> float:
        return float(t.detach().float().std(dim=0).mean()) if isinstance(t, torch.Tensor) and t.dim() >= 2 \
            and t.shape[0] > 1 and t.is_floating_point() else math.nan

    def hook(name: str) -> Any:
        def record(_m: Any, args: Any, out: Any) -> None:
            seen.append((name, spread(args[0]) if args else math.nan, spread(out)))
        return record

    handles = [m.register_forward_hook(hook(n)) for n, m in layers]
    try:  # the RNG the later checks draw from (dropout masks) is left as it was
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            s.loss.forward(work, s.loss.inputs)
    finally:
        for h in handles:
            h.remove()
    if len(seen) < 2 or not (seen[0][1] > 0 and math.isfinite(seen[-1][2])):
        s.check(CHECK, "skipped: no layer input varies over the samples")
        return
    gain = seen[-1][2] / seen[0][1]
    scale = [(n, float(m.weight.detach().float().std()) / _default_std(m.weight)) for n, m in layers]
    small = [(n, r) for n, r in scale if 0 < r < threshold("init_small_rel")]  # a constant one is zero_init's
    s.init_large = [(n, r) for n, r in scale if r > threshold("init_large_rel")]
    s.check(CHECK, f"{gain:.3g}; {len(small)} of {len(layers)} layers under "
            f"{threshold('init_small_rel'):g} of the default scale")
    if gain >= threshold("init_gain_min") or len(small) < 2:
        return
    names = [n for n, _ in small]
    worst = min(r for _, r in small)
    s.init_small = names
    s.add("vanishing_gradients", f"the weights of {len(names)} layers start far too small ({worst:.2g}x to "
          f"{max(r for _, r in small):.2g}x the scale of PyTorch's default init for their fan-in): what reaches the "
          f"output varies over the samples {1 / max(gain, 1e-300):.3g}x less than the input does, so the outputs are "
          "all about the same and the gradients shrink the same way on their way back",
          [s.label(n) for n in names], severity="error", fixes=fixes_for("init_too_small"),
          evidence={"activation_scale": {n: float(f"{o:.3g}") for n, _, o in seen}, "init_scale": gain,
                    "small_layers": ", ".join(names)})


def candidates(s: Any) -> list[tuple[str, str, Any, str]]:
    """The experiment for weights that start too small: the same layers re-initialised with their defaults."""
    names = getattr(s, "init_small", None)
    if not names:
        return []

    def make(s: Any) -> tuple[Any, Any, Any, Any]:
        work, opt = _reset(s, names)  # reset in place: the optimizer holds the same tensors
        return work, opt, None, s.loss.inputs

    return [("vanishing_gradients", f"the {len(names)} layers re-initialised with PyTorch's default init",
             make, fixes_for("init_too_small")[0].code)]


def large_start(s: Session) -> tuple[list[tuple[str, float]], float] | None:
    """The layers that start far above PyTorch's default scale, and the loss at init of a copy with them
    re-initialised (``reset_parameters``); None when there are none or the copy cannot be measured."""
    import torch

    if len(s.init_large) < 2:
        return None
    try:
        work, _ = _reset(s, [n for n, _ in s.init_large])
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            _, loss = s.loss.loss(work, s.loss.inputs)
        value = float(loss.detach().float())
    except Exception:  # noqa: BLE001 - no experiment: the observation stands alone
        return None
    return (s.init_large, value) if math.isfinite(value) else None


def _reset(s: Session, names: list[str]) -> tuple[Any, Any]:
    """A fresh copy and its optimizer with the named layers re-initialised by their own ``reset_parameters``."""
    import torch

    work, opt = s.fresh()
    with torch.no_grad():
        for n in names:
            work.get_submodule(n).reset_parameters()
    return work, opt
