"""A cell's peak predicted by running its code on fake copies of what it reads, then checked against the measured
run (``%%memtrace --predict``).

The names the cell reads are looked up in the user's namespace: modules, optimizers, tensors and containers of
tensors become fake copies (one memo, so the optimizer's parameters are the fake model's); other objects that hold
them (an LR scheduler) are deep-copied through the same memo; functions, classes and modules are used as they are.
The cell's code then runs in a namespace of its own, so nothing it assigns reaches the user's.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import time
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nbdebug._units import fmt_bytes
from nbdebug.core._result import Result
from nbdebug.core.memory._predict_result import MemoryPrediction

__all__ = ["predict_cell", "check", "PredictionCheck", "KindCheck", "measured_kinds"]

# the profiler's memory categories (lower case) -> the prediction's kinds
_CATEGORY_KINDS = {"parameter": "parameters", "gradient": "gradients", "optimizer_state": "optimizer state",
                   "optimizer state": "optimizer state", "activation": "activations", "temporary": "temporaries",
                   "input": "batch", "autograd_detail": "temporaries"}


def _names_read(code: types.CodeType) -> set[str]:
    names = set(code.co_names) | set(code.co_varnames)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names_read(const)
    return names


def predict_cell(code: types.CodeType, namespace: Mapping[str, Any], device: str = "cpu") -> MemoryPrediction:
    """The peak of running ``code`` (a compiled cell) with ``namespace``'s tensors, modules and optimizers faked."""
    import torch

    from nbdebug.core.memory._predict import _Inputs, _result
    from nbdebug.core.memory._predict_alloc import CUDA_CONTEXT_BYTES
    from nbdebug.core.memory._predict_step import Settings
    from nbdebug.core.memory._predict_trace import Ledger, fake_world, trace_step

    t0 = time.perf_counter()
    world = fake_world(device, allow_real=True)  # tensors a cell makes for real (a data loader's) become fake
    read = [n for n in _names_read(code) if n in namespace]
    values = {n: namespace[n] for n in read}
    fake: dict[str, Any] = {}
    with world.mode:
        for n, v in values.items():
            if isinstance(v, torch.nn.Module):
                fake[n] = world.module(v)
        for n, v in values.items():
            if isinstance(v, torch.optim.Optimizer):
                fake[n] = world.optimizer(v)
        for n, v in values.items():
            if n in fake or isinstance(v, (types.ModuleType, types.FunctionType, type, types.BuiltinFunctionType)):
                continue
            if isinstance(v, torch.Tensor) or _holds_tensors(v):
                fake[n] = world.batch(v)
            elif isinstance(v, (list, dict, set)) or hasattr(v, "__dict__"):
                try:
                    fake[n] = copy.deepcopy(v, world.memo)
                except Exception:  # not copyable (an iterator, a file): used as it is
                    fake[n] = v
    world.module_names = {id(m): f"{n}.{q}" if q else n  # type: ignore[attr-defined]
                          for n, v in fake.items() if isinstance(v, torch.nn.Module)
                          for q, m in v.named_modules()}
    run_ns: dict[str, Any] = dict(namespace)
    run_ns.update(fake)

    def registered(ledger: Ledger) -> None:
        for v in fake.values():
            if isinstance(v, torch.nn.Module):
                for p in v.parameters():
                    ledger.note(p, kind="parameters")
                    if p.requires_grad:
                        p.register_post_accumulate_grad_hook(lambda q: _noted(ledger, q.grad))
                        if p.grad is not None:
                            ledger.note(p.grad, kind="gradients")
                for b in v.buffers():
                    ledger.note(b, kind="parameters")
            elif isinstance(v, torch.optim.Optimizer):
                for s in v.state.values():
                    for t in s.values():
                        if isinstance(t, torch.Tensor):
                            ledger.note(t, kind="optimizer state")
            else:
                from torch.utils._pytree import tree_leaves

                for t in tree_leaves(v) if _holds_tensors(v) or isinstance(v, torch.Tensor) else []:
                    if isinstance(t, torch.Tensor):
                        ledger.note(t, kind="batch")

    def run(ledger: Ledger) -> None:
        # the cell runs again for real right after: what it prints here (stand-in values) is not shown
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            exec(code, run_ns)  # noqa: S102  (the user's own cell, as they asked it to run)

    def finished(ledger: Ledger) -> None:
        for v in fake.values():
            if isinstance(v, torch.optim.Optimizer):
                for s in v.state.values():
                    for t in s.values():
                        if isinstance(t, torch.Tensor):
                            ledger.note(t, kind="optimizer state")

    ledger = trace_step(world, run, registered, finished)
    inputs = _Inputs(None, None, None, None, None, device, None, CUDA_CONTEXT_BYTES)
    notes = []
    if ledger.stand_ins:
        notes.append("tensor values were read (.item() or a bool test) at " + "; ".join(sorted(set(ledger.stand_ins))[:3])
                     + ": they were stand-ins, so control flow that depends on them may differ")
    result = _result(ledger, inputs, Settings(), notes, torch.__version__)
    return dataclasses.replace(result, seconds=time.perf_counter() - t0, _inputs=None,
                               settings={"cell": "as written", "torch": torch.__version__})


def _noted(ledger: Any, grad: Any) -> None:
    ledger.note(grad, kind="gradients")


def _holds_tensors(value: Any) -> bool:
    import torch

    if isinstance(value, Mapping):
        return any(isinstance(v, torch.Tensor) for v in value.values())
    if isinstance(value, (tuple, list)):
        return any(isinstance(v, torch.Tensor) for v in value)
    return False


def measured_kinds(trace: Any) -> dict[str, int] | None:
    """The measured peak by kind, from a CPU recording made with categories (None without them)."""
    from nbdebug.errors import NbdebugError

    try:
        cats = trace.by_category()
    except NbdebugError:
        return None
    out: dict[str, int] = {}
    for cat, nbytes in cats:
        kind = _CATEGORY_KINDS.get(str(cat).lower().replace(" ", "_"), _CATEGORY_KINDS.get(str(cat).lower(), "other"))
        out[kind] = out.get(kind, 0) + int(nbytes)
    return out


@dataclass(frozen=True)
class KindCheck:
    """One kind: what the cell was predicted to allocate at its peak, and what was measured."""

    kind: str
    predicted_bytes: int
    measured_bytes: int | None


@dataclass(frozen=True, repr=False)
class PredictionCheck(Result):
    """``%%memtrace --predict``: the cell's predicted peak against the measured one, by kind.

    ``predicted_bytes`` and ``measured_bytes`` are the cell's own peak (the rise above what was alive before it, as
    ``%%memtrace`` measures); ``error_pct`` is the prediction's error in percent of the measurement.
    """

    predicted_bytes: int
    measured_bytes: int
    kinds: tuple[KindCheck, ...]
    prediction: MemoryPrediction = field(compare=False)
    trace: Any = field(default=None, compare=False)

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted_bytes - self.measured_bytes) / self.measured_bytes if self.measured_bytes \
            else 0.0

    def _summary_line(self) -> str:
        return (f"predicted {fmt_bytes(self.predicted_bytes)}, measured {fmt_bytes(self.measured_bytes)} "
                f"({self.error_pct:+.1f}%)")

    def to_dict(self) -> dict[str, Any]:  # noqa: D102
        return {"predicted_bytes": self.predicted_bytes, "measured_bytes": self.measured_bytes,
                "error_pct": self.error_pct, "kinds": [vars(k) for k in self.kinds],
                "prediction": self.prediction.to_dict()}

    def _records(self) -> list[dict[str, Any]]:
        return [vars(k) for k in self.kinds]


def check(prediction: MemoryPrediction, trace: Any) -> PredictionCheck:
    """Put a cell's prediction next to its measured recording."""
    measured = measured_kinds(trace)
    kinds = [k.kind for k in prediction.step_by_kind] + [k for k in (measured or {}) if
                                                          k not in {x.kind for x in prediction.step_by_kind}]
    pred = {k.kind: k.bytes for k in prediction.step_by_kind}
    rows = tuple(KindCheck(k, pred.get(k, 0), None if measured is None else measured.get(k, 0)) for k in kinds)
    return PredictionCheck(predicted_bytes=prediction.peak_bytes - prediction.state_bytes,
                           measured_bytes=int(trace.peak_bytes), kinds=rows, prediction=prediction, trace=trace)

