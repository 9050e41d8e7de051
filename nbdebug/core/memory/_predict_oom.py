"""Under a CUDA out-of-memory error: the step's predicted need against the GPU's capacity, and the fixes with their
predicted peaks ("batch 16: 7.1 GiB, fits your 8 GiB").

The step is found in the user's namespace: the model (the module with the most parameters), its optimizer, a loss
function (``criterion`` / ``loss_fn``) and the batch (``batch`` / ``inputs`` / ``x`` and ``y`` ...), each used as
it is, on fake copies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nbdebug._units import fmt_bytes

__all__ = ["step_inputs", "prediction_section", "TITLE"]

TITLE = "Predicted need of one training step (nbdebug predict_memory)"
_BATCH_NAMES = ("batch", "inputs", "data", "sample", "x", "images", "input_ids")
_TARGET_NAMES = ("y", "target", "targets", "labels", "label")
_LOSS_NAMES = ("criterion", "loss_fn", "loss_func", "loss_function", "lossfn")


def _is_batch(value: Any) -> bool:
    import torch

    if isinstance(value, torch.Tensor):
        return value.dim() > 0
    if isinstance(value, Mapping):
        return any(isinstance(v, torch.Tensor) for v in value.values())
    if isinstance(value, (tuple, list)) and value:
        return isinstance(value[0], torch.Tensor)
    return False


def step_inputs(namespace: Mapping[str, Any]) -> dict[str, Any] | None:
    """``model``, ``optimizer``, ``loss_fn`` and ``batch`` (with the names they have) found in ``namespace``, or
    None when there is no model or no batch."""
    import sys

    torch: Any = sys.modules.get("torch")
    if torch is None:
        return None
    public = {k: v for k, v in namespace.items() if not k.startswith("_")}
    modules = [(k, v) for k, v in public.items() if isinstance(v, torch.nn.Module)]
    if not modules:
        return None
    name, model = max(modules, key=lambda kv: sum(p.numel() for p in kv[1].parameters()))
    ids = {id(p) for p in model.parameters()}
    optimizer = next(((k, v) for k, v in public.items() if isinstance(v, torch.optim.Optimizer)
                      and all(id(p) in ids for g in v.param_groups for p in g["params"])), None)
    loss = next(((k, public[k]) for k in _LOSS_NAMES if callable(public.get(k))), None)
    batch_name = next((k for k in _BATCH_NAMES if _is_batch(public.get(k))), None)
    if batch_name is None:
        return None
    batch = public[batch_name]
    target = next((k for k in _TARGET_NAMES if isinstance(public.get(k), torch.Tensor)), None)
    if isinstance(batch, torch.Tensor) and target is not None and loss is not None:
        batch, batch_name = (batch, public[target]), f"({batch_name}, {target})"
    return {"model": (name, model), "optimizer": optimizer, "loss_fn": loss, "batch": (batch_name, batch)}


def prediction_section(exc: BaseException, diagnosis: Any, namespace: Mapping[str, Any] | None) -> Any:
    """A diagnosis ``Section`` with the prediction, or None when no step is in scope."""
    from nbdebug.core.explain._diagnosis import Section
    from nbdebug.core.memory._predict import predict_memory
    from nbdebug.core.memory._predict_trace import StepError

    found = step_inputs(namespace) if namespace is not None else None
    if found is None:
        return None
    capacity = (getattr(diagnosis, "evidence", None) or {}).get("total_capacity")
    names = ", ".join(f"{what} {found[what][0]}" for what in ("model", "optimizer", "loss_fn", "batch")
                      if found[what] is not None)
    try:
        pred = predict_memory(found["model"][1], found["batch"][1],
                              found["loss_fn"][1] if found["loss_fn"] else None,
                              found["optimizer"][1] if found["optimizer"] else None, device="cuda",
                              capacity=capacity)
    except (StepError, ValueError) as e:
        return Section(title=TITLE, text=f"The step ({names}) could not be predicted: {e}")
    return section_of(pred, names)


def section_of(pred: Any, names: str) -> Any:
    """The section for a prediction ``pred`` of the step made of ``names``."""
    from nbdebug.core._findings import Fix
    from nbdebug.core.explain._diagnosis import Section

    cap = pred.capacity_bytes
    verdict = "" if cap is None else (f", your GPU has {fmt_bytes(cap)}" if not pred.fits else
                                      f", within your GPU's {fmt_bytes(cap)} (something else holds memory)")
    text = f"One training step of {names} needs about {fmt_bytes(pred.total_bytes)}{verdict}."
    facts: list[tuple[str, Any]] = [("predicted need", fmt_bytes(pred.total_bytes))]
    if cap is not None:
        facts.append(("GPU capacity", fmt_bytes(cap)))
    facts += [(k.kind, fmt_bytes(k.bytes)) for k in pred.by_kind]
    facts.append(("peak", " ".join(x for x in (pred.peak_phase, pred.peak_module) if x) or "?"))
    rows = [(f.title, fmt_bytes(f.peak_bytes), "" if f.fits is None else ("fits" if f.fits else "does not fit"))
            for f in pred.fixes]
    fixes = tuple(Fix(f"{f.title}: {fmt_bytes(f.peak_bytes)}", f.code) for f in pred.fixes if f.fits is not False)
    if cap is not None:
        size = pred.largest_batch(cap)
        if size:
            rows.insert(0, (f"batch {size} (the largest that fits)", fmt_bytes(pred.what_if(batch_size=size)
                                                                               .total_bytes), "fits"))
    return Section(title=TITLE, text=text, facts=tuple(facts), header=("fix", "predicted need", ""),
                   rows=tuple(rows), fixes=fixes, notes=pred.notes, open=True)
