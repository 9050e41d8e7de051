"""Weights initialised to a constant: every entry of a trainable weight matrix equal at init (zeros from an
initializer range of 0, a ``fill_`` meant for a bias).  Every unit of such a layer computes the same thing and gets
the same gradient, so the symmetry between them is never broken; with zeros nothing of the input passes at all.

Found on the user's model (read only) before training; once training has run, it is an error when the training
shows what it causes (outputs that ignore the input, parameters without gradient, a batch not learned), and the
findings it causes come after it with its fix.  A constant matrix the training does not suffer from (a zero-init
output layer, learned all the same) is an info.
"""

from __future__ import annotations

from typing import Any

from nbdebug.core._findings import Finding, Fix, Severity
from nbdebug.core.doctor._session import Session
from nbdebug.core.knowledge import entry, finding

__all__ = ["constant_weights", "settle"]

# what weights that start as one value cause: these findings follow from it
_CAUSED = ("ignores_input", "no_gradient", "dead_activations", "vanishing_gradients", "cannot_overfit",
           "initial_loss_off")


def constant_weights(s: Session) -> None:
    """Add ``zero_init`` for the trainable weight matrices (2 or more dimensions) whose entries are all equal."""
    import torch

    found: list[tuple[str, float]] = []
    bare: list[str] = []
    for name, p in s.user_model.named_parameters():
        if not (p.requires_grad and p.is_floating_point() and p.dim() >= 2 and p.numel() >= 2):
            continue
        v = p.detach().reshape(-1)
        if bool(torch.isfinite(v[:1]).all()) and bool((v == v[0]).all()):
            if name.rsplit(".", 1)[-1] == "weight":
                found.append((name, float(v[0])))
            else:
                bare.append(name)
    if bare:
        # a parameter added bare is a weight when the forward multiplies its input by it (``x @ W1``); a class
        # token or a position embedding (added or concatenated) and LoRA's B (right after a random A) start at
        # zero by design: no symmetry is kept
        const = {n: v for n, v in ((n, float(p.detach().reshape(-1)[0])) for n, p in
                                   s.user_model.named_parameters() if n in bare)}
        weights = _multiplying(s, set(bare))
        found += [(n, const[n]) for n in bare if n in weights]
        bare = [n for n in bare if n not in weights]
    said_bare = f" ({len(bare)} parameter(s) added bare, not a layer's weight, start constant by design: " + \
        ", ".join(bare[:3]) + ")" if bare else ""
    if not found:
        s.check("weights initialised to a constant", "none" + said_bare)
        return
    said = ", ".join(f"{s.options.name}.{n} = {v:g}" for n, v in found[:4]) + (
        f" and {len(found) - 4} more" if len(found) > 4 else "")
    zeros = all(v == 0 for _, v in found)
    s.add("zero_init", f"{len(found)} weight matrices hold one value in every entry at init ({said}): every unit of "
          "such a layer computes the same thing and gets the same gradient, so the symmetry between them is never "
          "broken" + ("; with zeros nothing of the input passes through them, so the output cannot depend on it "
                      "and the layers before them get no gradient" if zeros else ""),
          [f"{s.options.name}.{n.rsplit('.', 1)[0] if '.' in n else n}" for n, _ in found],
          evidence={"constant": {n: v for n, v in found}})
    s.check("weights initialised to a constant", f"{len(found)}: {said}{said_bare}")


_PRODUCTS = ("matmul", "mm", "bmm", "mv", "linear", "einsum", "addmm", "tensordot", "__matmul__", "__rmatmul__",
             "conv1d", "conv2d", "conv3d")


def _multiplying(s: Session, names: set[str]) -> set[str]:
    """Which of the named constant parameters one forward of a copy multiplies the input (or a hidden signal) by,
    leaving out one applied right after a product with a random parameter (a low-rank pair, LoRA's B)."""
    import torch
    from torch.overrides import TorchFunctionMode

    work, _ = s.fresh()
    storage = {p.untyped_storage().data_ptr(): n for n, p in work.named_parameters() if p.requires_grad}
    const = {ptr for ptr, n in storage.items() if n in names}
    low_rank: list[Any] = []  # outputs of a product with a random parameter (kept alive, compared by identity)
    used: set[str] = set()

    def tensors(obj: Any) -> list[Any]:
        if isinstance(obj, (tuple, list)):
            return [t for o in obj for t in tensors(o)]
        return [obj] if isinstance(obj, torch.Tensor) else []

    class _Products(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            if getattr(func, "__name__", "") in _PRODUCTS:
                ts = tensors(list(args) + list((kwargs or {}).values()))
                ptrs = [t.untyped_storage().data_ptr() for t in ts]
                mine = [p for p in ptrs if p in const]
                after_random = any(any(t is o for o in low_rank) for t in ts)
                if mine and not after_random:
                    used.update(storage[p] for p in mine)
                if any(p in storage and p not in const for p in ptrs) and isinstance(out, torch.Tensor):
                    low_rank.append(out)
            return out

    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]), _Products():
            s.loss.forward(work, s.loss.inputs)
    except Exception:  # a forward that fails here leaves the bare parameters as they were: not weights
        return set()
    return used


def settle(s: Session) -> None:
    """After training: a cause found at init (weights that start constant, a signal that vanishes with depth) first,
    with what it causes after it; an info when the batch is learned all the same."""
    for pick in (lambda f: f.kind == "zero_init",
                 lambda f: f.kind == "vanishing_gradients" and "activation_scale" in f.evidence):
        at = next((i for i, f in enumerate(s.findings) if pick(f)), None)
        if at is not None:
            _first(s, s.findings.pop(at))
            return


def _first(s: Session, cause: Finding) -> None:
    caused = [i for i, f in enumerate(s.findings) if f.kind in _CAUSED and f.severity != "info"]
    learned = bool(s.losses) and not any(f.kind == "cannot_overfit" and f.severity != "info" for f in s.findings)
    other = next((e for e in s.experiments if e.restores and e.cause != cause.kind), None)
    own = next((e for e in s.experiments if e.cause == cause.kind), None)
    if own is not None and not own.restores and not learned:
        # its own fix tried on a copy (the layers re-initialised) did not learn the batch better: not the cause
        s.findings.append(finding(cause.kind, f"{cause.message}; that start is not shown to be what stops the "
                                  "training", cause.where, severity=Severity.INFO, fixes=cause.fixes,
                                  evidence=dict(cause.evidence)))
        return
    if caused and not learned and other is not None:
        # a copy with another change (a higher lr) learned the batch with this start: the start is not what stops
        # it, and the measured fix stays first
        s.findings.append(finding(cause.kind, f"{cause.message}; a copy learned the batch with this start all the "
                                  f"same ({other.change}), so it is not what stops the training here", cause.where,
                                  severity=Severity.INFO, fixes=cause.fixes, evidence=dict(cause.evidence)))
        return
    if not caused or learned:
        # the training learned the batch: the constant start (a zero-init output layer) was broken by the inputs,
        # and outputs that were identical at init said nothing against the model
        for i in caused:
            f = s.findings[i]
            if f.kind == "ignores_input":
                s.findings[i] = finding(f.kind, f"{f.message}; at init only ({cause.title.lower()}), and the "
                                        "training learned the batch all the same", f.where, severity=Severity.INFO,
                                        fixes=(), evidence=dict(f.evidence))
        s.findings.append(finding(cause.kind, f"{cause.message}; the training learned the batch all the same, so "
                                  "this costs nothing measurable here", cause.where, severity=Severity.INFO,
                                  fixes=cause.fixes, evidence=dict(cause.evidence)))
        return
    how = entry("consequence_of_another")
    first = Fix(f"fix that first: {cause.fix or cause.title}", cause.fixes[0].code if cause.fixes else "")
    for i in caused:
        f = s.findings[i]
        if f"follows from the finding above, {cause.title.lower()}" in f.message:
            continue  # the experiment that restored learning said so already
        s.findings[i] = finding(f.kind, how.summary.format(message=f.message, cause_title=cause.title.lower()),
                                f.where, severity="warning" if f.severity == "error" else f.severity,
                                fixes=(first,), evidence=dict(f.evidence))
    s.findings.insert(0, cause)
    s.explained = True
