"""A signal that vanishes with depth: how much each weighted layer's output varies over the samples of the batch
(its std over the samples, which a bias does not add to), measured with forward hooks on a fresh copy at init.
When a deep layer keeps under ``signal_vanish_ratio`` of the first layer's, decaying steadily with depth (a plain
stack of many layers at PyTorch's default init), the output cannot tell the samples apart and the gradients that
flow back shrink the same way: the outputs that look input-independent, the dead units and the unlearned batch
follow from it.  The finding carries the depth profile in its evidence."""

from __future__ import annotations

import math
from typing import Any

from nbdebug.core.doctor._session import Session, fixes_for
from nbdebug.core.knowledge import threshold
from nbdebug.core.training._dynamics import depth_correlation

__all__ = ["signal_scale"]

_MIN_LAYERS = 6  # fewer weighted layers in a row do not make a decay with depth


def signal_scale(s: Session) -> None:
    import torch

    work, _ = s.fresh()
    work.train()  # normalisation layers normalise with the batch's statistics, as in training
    scales: list[tuple[str, float]] = []

    def hook(name: str) -> Any:
        def record(_m: Any, _i: Any, out: Any) -> None:
            if isinstance(out, torch.Tensor) and out.is_floating_point() and out.dim() >= 2 and out.shape[0] > 1:
                scales.append((name, float(out.detach().float().std(dim=0).mean())))
        return record

    handles = [m.register_forward_hook(hook(n)) for n, m in work.named_modules()
               if not list(m.children()) and isinstance(getattr(m, "weight", None), torch.Tensor)
               and m.weight.dim() >= 2]
    try:
        with torch.no_grad():
            s.loss.forward(work, s.loss.inputs)
    finally:
        for h in handles:
            h.remove()
    vals = [(n, v) for n, v in scales if math.isfinite(v)]
    if len(vals) < _MIN_LAYERS or vals[0][1] <= 0:
        s.check("signal scale with depth", f"{len(vals)} weighted layer(s) measured: too few for a decay")
        return
    first = vals[0][1]
    low_at = min(range(len(vals)), key=lambda i: vals[i][1])
    ratio = vals[low_at][1] / first
    rho = depth_correlation([math.log(max(v, 1e-30)) for _, v in vals[: low_at + 1]])
    s.check("signal scale with depth (deepest/first; depth correlation)", f"{ratio:.3g}; {rho:.2f}")
    if not (ratio < threshold("signal_vanish_ratio") and low_at + 1 >= _MIN_LAYERS
            and rho <= -threshold("vanish_depth_correlation")):
        return
    name = vals[low_at][0]
    smaller = f"{1 / ratio:.3g}x smaller" if ratio > 0 else "to nothing"
    s.add("vanishing_gradients", f"the signal vanishes with depth at init: how much a layer's output varies over "
          f"the samples falls from {first:.3g} after {s.label(vals[0][0])} to {vals[low_at][1]:.3g} after "
          f"{s.label(name)}, {low_at + 1} weighted layers deep ({smaller}, steadily: rank "
          f"correlation with depth {rho:.2f}), so the output barely depends on the input and the gradients "
          "shrink the same way on their way back", [s.label(n) for n, _ in vals[: low_at + 1]],
          severity="error", fixes=fixes_for("vanishing_signal"),
          evidence={"activation_scale": {n: round(v, 8) for n, v in vals[: low_at + 1]}, "ratio": ratio})
