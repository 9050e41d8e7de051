"""Replaying the step where the NaN sentinel found a non-finite value: the first op that made it, and its line.

The step's recorded forward calls are run again (same RNG state) under a ``TorchFunctionMode`` that records the
first op whose output is non-finite while its inputs are finite, and its backward under
``torch.autograd.detect_anomaly``.  Used by ``nan_sentinel(model, replay=True)`` (``nbdebug.core.training.nan``).
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from nbdebug.core._result import Result

__all__ = ["ReplayResult", "replay_step"]


def _tensors(obj: Any, depth: int = 0) -> Iterator[Any]:
    import torch

    if isinstance(obj, torch.Tensor):
        yield obj
    elif depth < 2 and isinstance(obj, (tuple, list)):
        for o in obj:
            yield from _tensors(o, depth + 1)
    elif depth < 2 and isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors(o, depth + 1)


@dataclass(frozen=True, repr=False)
class ReplayResult(Result):
    """What replaying the failing step found: the first op with a non-finite output and where it was called."""

    op: str | None
    source: str | None
    anomaly: str | None
    note: str | None = None

    def _summary_line(self) -> str:
        return self.op or "not reproduced"

    def describe(self) -> str:
        """One line: the op and its source line, and what detect_anomaly said."""
        parts = []
        if self.op:
            parts.append(f"first non-finite op in the forward pass: {self.op}"
                         + (f" at {self.source}" if self.source else ""))
        if self.note:
            parts.append(self.note)
        if self.anomaly:
            parts.append(f"(detail, backward: {self.anomaly})" if self.op else f"detect_anomaly: {self.anomaly}")
        return "; ".join(parts) if parts else "the replay did not reproduce the non-finite value"


_INTERNAL = re.compile(r"[/\\](torch|nbdebug[/\\]core|contextlib|functools)[/\\]|[/\\]torch[/\\]|<frozen ")


def _user_frame(stack: list[traceback.FrameSummary]) -> str | None:
    """The innermost user frame, named as the user knows it: ``In [12], line 3: code`` for a cell, ``file.py:40
    in fn: code`` for a file."""
    from nbdebug.core._cells import is_cell_file, site_label

    for fr in reversed(stack):
        if not _INTERNAL.search(fr.filename):
            line = (fr.line or "").strip()
            if is_cell_file(fr.filename):
                return site_label(fr.filename, fr.lineno)
            return f"{fr.filename}:{fr.lineno} in {fr.name}: {line}"
    return None


def _op_name(func: Any) -> str:
    name = getattr(func, "__name__", None) or str(func)
    qual = getattr(func, "__qualname__", "") or ""
    module = getattr(func, "__module__", "") or ""
    if qual.startswith("_VariableFunctionsClass") or module == "torch":
        return f"torch.{name}"
    if "TensorBase" in qual or qual.startswith("Tensor."):
        return f"Tensor.{name}"
    if module.endswith("nn.functional"):
        return f"torch.nn.functional.{name}"
    return qual or name


def _first_nonfinite_mode() -> Any:
    """A TorchFunctionMode that records the first op whose output is non-finite while its inputs are finite."""
    import torch
    from torch.overrides import TorchFunctionMode

    class FirstNonfinite(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.op: str | None = None
            self.source: str | None = None

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if self.op is None:
                with torch._C.DisableTorchFunction():
                    outs = [t for t in _tensors(out) if t.is_floating_point()]
                    if outs and not all(bool(torch.isfinite(t).all()) for t in outs):
                        ins = [t for t in _tensors(list(args) + list(kwargs.values())) if t.is_floating_point()]
                        if all(bool(torch.isfinite(t).all()) for t in ins):
                            self.op = _op_name(func)
                            self.source = _user_frame(traceback.extract_stack()[:-1])
            return out

    return FirstNonfinite()


def replay_step(model: Any, calls: list[tuple[Any, Any, Any]], output_grads: list[Any]) -> ReplayResult:
    """Run recorded forward calls again (same RNG state) to find the op, then backward under detect_anomaly.

    ``calls`` are ``(args, kwargs, rng_state)``; ``output_grads`` are the gradients that reached the model's
    outputs in the original backward (may be empty).  Parameters' ``.grad``, buffers and RNG state are restored.
    """
    import warnings

    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    buffers = {k: v.detach().clone() for k, v in model.state_dict(keep_vars=False).items() if "running" in k or "num_batches" in k}
    cpu_rng = torch.get_rng_state()
    op = source = anomaly = note = None
    bad_out = [g for g in output_grads if g is not None and not bool(torch.isfinite(g).all())]
    try:
        for args, kwargs, rng in calls:
            if rng is not None:
                torch.set_rng_state(rng)
            mode = _first_nonfinite_mode()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    with torch.autograd.detect_anomaly(check_nan=True), torch.enable_grad():
                        with mode:
                            out = model(*args, **kwargs)
                        outs = [t for t in _tensors(out) if t.requires_grad and t.is_floating_point()]
                        if outs and bad_out and mode.op is None:
                            # the model's forward is finite and the gradient the loss sent back is not: the
                            # model's backward only carries the loss's NaN on (detect_anomaly would name the
                            # last layer's backward function)
                            note = ("the model's forward pass is finite; the gradient reaching the model's output "
                                    "is already non-finite: the loss code after the model produced it (look for a "
                                    "division by 0, e.g. a temperature of 0, log(0) or sqrt(0) there)")
                            outs = []
                        if outs:
                            grads = [
                                g if g is not None and g.shape == t.shape else torch.ones_like(t)
                                for t, g in zip(outs, list(output_grads) + [None] * len(outs))
                            ]
                            torch.autograd.grad(outs, params, grad_outputs=grads, allow_unused=True)
                except RuntimeError as e:
                    anomaly = str(e).splitlines()[0]
                    for w in caught:
                        text = str(w.message)
                        if "Traceback of forward call" in text:
                            frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)', text)
                            user = [f for f in frames if not _INTERNAL.search(f[0])]
                            if user:
                                f = user[-1]
                                anomaly += f" (forward call: {f[0]}:{f[1]} in {f[2]}: {f[3].strip()})"
            if mode.op is not None and op is None:
                op, source = mode.op, mode.source
            if op is not None or anomaly is not None or note is not None:
                break
    finally:
        torch.set_rng_state(cpu_rng)
        with torch.no_grad():
            for k, v in model.state_dict(keep_vars=True).items():
                if k in buffers:
                    v.copy_(buffers[k])
    return ReplayResult(op=op, source=source, anomaly=anomaly, note=note)
