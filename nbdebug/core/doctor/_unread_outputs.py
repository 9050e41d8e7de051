"""Modules whose every gradient is exactly 0 at the first step: a module whose output the loss never reads (a
head left out of a multi-task loss, the output slice it fills cut away) gets zeros from autograd, not None, so
the check for parameters without a gradient misses it.  The suspect is tested on the copy: the module's output
is moved by noise up to twice its largest value, both signs (past any ReLU after it); a model output that moves
while the loss stays put means the loss does not read that output."""

from __future__ import annotations

from typing import Any

from nbdebug.core._findings import Fix
from nbdebug.core.doctor._session import Session

__all__ = ["unread_outputs", "CHECK"]

CHECK = "modules whose output the loss reads (each one's output moved on a copy)"


def _zero_grad_modules(work: Any) -> list[str]:
    """Leaf modules with trainable parameters whose every gradient is there and exactly 0."""
    import torch

    out = []
    for name, mod in work.named_modules():
        ps = [p for p in mod.parameters(recurse=False) if p.requires_grad]
        if name and ps and not list(mod.children()) and all(
                p.grad is not None and not bool(torch.any(p.grad != 0)) for p in ps):
            out.append(name)
    return out


def _loss_with(s: Session, work: Any, mod: Any, sign: float) -> tuple[Any, float]:
    """The model's output and the loss with ``mod``'s output moved by noise (of ``sign``; none for ``mod=None``)."""
    import torch

    from nbdebug.core.doctor._inputs import logits_of

    def nudge(_m: Any, _i: Any, y: Any) -> Any:
        if not isinstance(y, torch.Tensor) or not y.is_floating_point():
            return y
        g = torch.Generator().manual_seed(1)
        noise = torch.rand(y.shape, generator=g).to(y.device, y.dtype)
        return y + sign * noise * 2 * (float(y.detach().float().abs().max()) + 1.0)

    handle = mod.register_forward_hook(nudge) if mod is not None else None
    try:
        torch.manual_seed(s.options.seed)
        out, loss = s.loss.loss(work, s.loss.inputs)
    finally:
        if handle is not None:
            handle.remove()
    return logits_of(out), float(loss.detach().float())


def unread_outputs(s: Session, work: Any) -> None:
    import math

    import torch

    if s.has("no_gradient"):
        return
    names = _zero_grad_modules(work)
    if not names:
        s.check(CHECK, "skipped: every module's gradient has a nonzero entry")
        return
    mods = dict(work.named_modules())
    was = work.training
    unread = []
    try:
        work.eval()  # no BatchNorm statistics move on the copy the overfit run trains next
        with torch.no_grad():
            y0, base = _loss_with(s, work, None, 0.0)
            for name in names:
                runs = [_loss_with(s, work, mods[name], sign) for sign in (1.0, -1.0)]
                # the model's output moves and the loss does not: the loss skips that part of the output (a layer
                # behind silent ReLUs moves neither: the dead-unit checks name that)
                out_moved = isinstance(y0, torch.Tensor) and any(
                    isinstance(y, torch.Tensor) and y.shape == y0.shape and not torch.equal(y, y0) for y, _ in runs)
                still = max(abs(v - base) for _, v in runs) <= 1e-7 * max(abs(base), 1.0)
                if math.isfinite(base) and out_moved and still:
                    unread.append(name)
    finally:
        work.train(was)
    if not unread:
        s.check(CHECK, f"all read ({len(names)} module(s) with all-zero gradients move the loss when moved)")
        return
    params = [f"{m}.{p}" for m in unread for p, q in mods[m].named_parameters(recurse=False) if q.requires_grad]
    shown = ", ".join(unread[:4])
    s.add("no_gradient", f"the loss does not read the output of {shown}: its gradients are all exactly 0, and "
          f"tried on a copy, moving its output by noise up to twice its largest value (both signs) leaves the loss at "
          f"{base:.4g}, so {len(params)} trainable parameter(s) never learn",
          [s.label(m) for m in unread], severity="error",
          fixes=(Fix(f"add the loss term for {unread[0]}'s output (the loss leaves it unused), or remove the module "
                     "if it is not meant to train",
                     f"loss = main_loss + weight * other_loss  # the term that reads {unread[0]}'s output"),),
          evidence={"modules": len(unread), "parameters": len(params), "loss": base, "restores": False})
    s.check(CHECK, f"no: the loss does not read {shown}")
