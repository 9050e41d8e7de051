"""Samples of a batch must not see each other: change one sample's input on a copy and look at the others' outputs
(Karpathy's backprop-through-the-batch test, done forward).  In eval mode, so that BatchNorm's batch statistics and
dropout do not couple the samples by design; skipped, with the reason, where the inputs relate samples to each
other (an N x N adjacency) or no dimension runs over the samples."""

from __future__ import annotations

from typing import Any

from nbdebug.core._findings import Fix
from nbdebug.core.doctor._batch_axis import BatchAxisMode, Suspect
from nbdebug.core.doctor._inputs import batch_dim, logits_of, sample_count, tensor_leaves
from nbdebug.core.doctor._session import Session, fixes_for

__all__ = ["mixes_batch", "CHECK"]

CHECK = "samples independent of each other (one sample's input changed on a copy)"
_REL = 1e-4  # an output change this small against the outputs' scale is rounding, not mixing


def _replace_first(obj: Any, old: Any, new: Any) -> Any:
    """``obj`` with the leaf ``old`` (by identity) replaced by ``new``."""
    if obj is old:
        return new
    if isinstance(obj, dict):
        return {k: _replace_first(v, old, new) for k, v in obj.items()}
    if isinstance(obj, (tuple, list)):
        return type(obj)(_replace_first(v, old, new) for v in obj)
    return obj


def _changed(x: Any, dim: int) -> Any:
    """``x`` with its first sample (along ``dim``) changed: noise for floats, the next id for integer tokens."""
    import torch

    y = x.clone()
    first = y.narrow(dim, 0, 1)
    if x.is_floating_point():
        g = torch.Generator().manual_seed(0)
        first.add_(torch.randn(first.shape, generator=g).to(x.device, x.dtype) * (float(x.float().std()) or 1.0))
    elif x.dtype == torch.bool:
        first.logical_not_()
    else:
        hi = int(x.max())
        first.copy_((first + 1) % max(hi + 1, 2) if hi > 0 else first + 1)
    return y


def mixes_batch(s: Session, work: Any) -> None:
    import torch

    inputs = s.loss.model_inputs()
    leaves = [t for t in tensor_leaves(inputs) if isinstance(t, torch.Tensor)]
    n = sample_count(s.loss.targets)
    x = leaves[0] if leaves else None
    bx = batch_dim(x, n)
    if s.loss.mode == "lightning" or x is None or bx is None or (n or int(x.shape[bx])) < 3:
        s.check(CHECK, "skipped: no input dimension runs over the batch's samples")
        return
    n = n or int(x.shape[bx])
    if any(sum(int(d) == n for d in t.shape) >= 2 for t in leaves):
        s.check(CHECK, f"skipped: an input relates the {n} samples to each other (a tensor of {n} x {n}, a graph)")
        return
    was = work.training

    def forward(inputs: Any) -> Any:
        torch.manual_seed(s.options.seed)  # a forward that samples (a VAE's latent) draws the same noise each time
        return logits_of(s.loss.forward(work, inputs))

    changed = _replace_first(s.loss.inputs, x, _changed(x, bx))
    try:
        work.eval()
        with torch.no_grad():
            y0, again = forward(s.loss.inputs), forward(s.loss.inputs)
            with BatchAxisMode(n) as probe:
                y1 = forward(changed)
    finally:
        work.train(was)
    if isinstance(y0, torch.Tensor) and isinstance(again, torch.Tensor) and not torch.equal(y0, again):
        s.check(CHECK, "skipped: the forward gives another output on the same input (randomness torch's seed does "
                "not reach)")
        return
    by = batch_dim(y0, n)
    if not isinstance(y0, torch.Tensor) or not isinstance(y1, torch.Tensor) or by is None or y0.shape != y1.shape:
        s.check(CHECK, "skipped: no output dimension runs over the batch's samples")
        return
    d = (y1.float() - y0.float()).abs().movedim(by, 0).reshape(n, -1).amax(dim=1)
    scale = (float(y0.float().abs().max()) or 1.0) * _rel(y0)
    if float(d[0]) <= scale:
        s.check(CHECK, "skipped: changing the first sample's input did not change its own output")
        return
    moved = _moved(d, scale)
    if not moved:
        s.check(CHECK, f"yes: the other {n - 1} outputs did not change")
        return
    said = (f"changing only the first sample's input (in eval mode, on a copy) changed the outputs of {moved} of the "
            f"other {n - 1} samples (by up to {float(d[1:].max()):.3g})")
    cause = _confirmed(s, work, probe.suspects, changed, n, by, forward)
    if cause is None:
        s.add("mixes_batch", f"{said}: the forward mixes samples of the batch, as a view() or reshape() taken for a "
              "transpose or an operation over the batch's dimension does", ("forward",),
              evidence={"samples": n, "moved": moved})
    else:
        fix = fixes_for(f"batch_axis_{cause.kind}")[0]
        what = ("normalises over the batch's samples, not over the classes" if cause.kind == "softmax" else
                "reinterprets the memory of a tensor whose batch dimension moves, as only a transpose may")
        s.add("mixes_batch", f"{said}: {cause.op} {what}; with {cause.change} on a copy no other sample's output "
              "moves", (cause.site or "forward",),
              fixes=(Fix(fix.title, cause.code), *fixes_for(f"batch_axis_{cause.kind}")[1:]),
              evidence={"samples": n, "moved": moved, "call": cause.op, "site": cause.site or ""})
        s.batch_axis = (n, cause)
    s.check(CHECK, f"no: {moved} of {n - 1} other outputs changed")


def _rel(y: Any) -> float:
    """The change that is rounding in ``y``'s dtype: 1e-4 of the outputs' scale, or a few units of the last place
    of a half-precision output (float16 rounds at 1e-3, so the 1e-4 of float32 would read rounding as mixing)."""
    import torch

    return max(_REL, 4 * float(torch.finfo(y.dtype).eps)) if y.is_floating_point() else _REL


def _moved(d: Any, tol: float) -> int:
    return int((d[1:] > tol).sum())


def _confirmed(s: Session, work: Any, suspects: list[Suspect], changed: Any, n: int, by: int,
               forward: Any) -> Suspect | None:
    """The suspect call whose fix, applied on the copy, ends the mixing (the mixing test run again with the
    corrected calls); None when the probe saw none or the fix does not end it."""
    import torch

    if not suspects:
        return None
    was = work.training
    try:
        work.eval()
        with torch.no_grad(), BatchAxisMode(n, fix=True):
            y0, y1 = forward(s.loss.inputs), forward(changed)
    except Exception:  # noqa: BLE001 - a fix that cannot run here is no evidence: the finding stays general
        return None
    finally:
        work.train(was)
    if not isinstance(y0, torch.Tensor) or not isinstance(y1, torch.Tensor) or y0.shape != y1.shape:
        return None
    d = (y1.float() - y0.float()).abs().movedim(by, 0).reshape(n, -1).amax(dim=1)
    scale = (float(y0.float().abs().max()) or 1.0) * _rel(y0)
    return suspects[0] if float(d[0]) > scale and not _moved(d, scale) else None
