"""``MemoryPrediction``: the predicted peak of one training step, split by kind, with what-ifs and fixes."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from nbdebug._units import fmt_bytes, parse_bytes
from nbdebug.core._result import Result

__all__ = ["MemoryPrediction", "KindBytes", "ModuleBytes", "MemoryFix"]


@dataclass(frozen=True)
class KindBytes:
    """Bytes of one kind alive at the peak (``parameters``, ``gradients``, ``optimizer state``, ``activations``,
    ``temporaries``, ``batch``)."""

    kind: str
    bytes: int


@dataclass(frozen=True)
class ModuleBytes:
    """Activations kept for backward at the peak, by the module whose forward made them."""

    module: str
    bytes: int


@dataclass(frozen=True)
class MemoryFix:
    """One change to the step, predicted: its peak, what it saves, whether it fits the budget."""

    title: str
    code: str
    peak_bytes: int
    saving_bytes: int
    fits: bool | None


@dataclass(frozen=True, repr=False)
class MemoryPrediction(Result):
    """The peak memory of one steady-state training step, predicted on fake tensors (nothing allocated).

    Attributes
    ----------
    device : str
        ``"cuda"`` (the caching allocator modelled) or ``"cpu"``.
    peak_bytes : int
        Allocated memory at the peak: tensor bytes (CPU) or the allocator's blocks (CUDA, what
        ``torch.cuda.max_memory_allocated`` reports).
    reserved_bytes : int
        CUDA: the allocator's segments at their largest (``max_memory_reserved``); CPU: ``peak_bytes``.
    context_bytes : int
        CUDA: the context's memory outside the allocator (an estimate, see ``CUDA_CONTEXT_BYTES``); CPU: 0.
    by_kind : tuple of KindBytes
        What was alive at the peak, by kind, in the panel's order.
    activations_by_module : tuple of ModuleBytes
        Activations kept for backward at the peak, by module, largest first.
    peak_op, peak_module, peak_phase : str
        The op that allocated last before the peak, the innermost module running, and the phase (``forward``,
        ``backward``, ``optimizer``).
    state_bytes : int
        What was alive before the step began (parameters, optimizer state, batch).
    step_by_kind : tuple of KindBytes
        Of ``by_kind``, what the step itself allocated (``peak_bytes - state_bytes`` in all): what ``%%memtrace``
        measures as the cell's peak.
    settings : dict
        What was predicted: batch size, autocast dtype, checkpointing, optimizer, accumulation steps.
    notes : tuple of str
        What the number does not count or where values were stand-ins (``partial`` is then True).
    capacity_bytes : int or None
        The budget the fixes are compared to (the GPU's memory when known).
    """

    device: str
    peak_bytes: int
    reserved_bytes: int
    context_bytes: int
    by_kind: tuple[KindBytes, ...]
    activations_by_module: tuple[ModuleBytes, ...]
    peak_op: str
    peak_module: str
    peak_phase: str
    state_bytes: int
    settings: dict[str, Any]
    step_by_kind: tuple[KindBytes, ...] = ()
    notes: tuple[str, ...] = ()
    partial: bool = False
    capacity_bytes: int | None = None
    seconds: float = 0.0
    _inputs: Any = field(default=None, compare=False)

    @property
    def total_bytes(self) -> int:
        """What the device must hold: reserved memory plus the CUDA context."""
        return self.reserved_bytes + self.context_bytes

    @property
    def fits(self) -> bool | None:
        """Whether ``total_bytes`` fits ``capacity_bytes`` (None when no capacity is known)."""
        return None if self.capacity_bytes is None else self.total_bytes <= self.capacity_bytes

    def kind_bytes(self, kind: str) -> int:
        """Bytes of ``kind`` alive at the peak (0 when none)."""
        return next((k.bytes for k in self.by_kind if k.kind == kind), 0)

    def _summary_line(self) -> str:
        where = f" in {self.peak_phase}" if self.peak_phase else ""
        fit = "" if self.fits is None else (" (fits)" if self.fits else f" (over {fmt_bytes(self.capacity_bytes)})")
        return f"{self.device}: peak {fmt_bytes(self.peak_bytes)}{where}{fit}"

    def to_dict(self) -> dict[str, Any]:  # noqa: D102
        d = Result.to_dict(self)
        d["total_bytes"], d["fits"] = self.total_bytes, self.fits
        return d

    def _records(self) -> list[dict[str, Any]]:
        return [{"kind": k.kind, "bytes": k.bytes} for k in self.by_kind]

    # -- what if ------------------------------------------------------------------------------------------------

    def what_if(self, **changes: Any) -> MemoryPrediction:
        """The same step predicted again with ``batch_size=``, ``dtype=``, ``checkpointing=``, ``optimizer=``,
        ``accumulation_steps=`` changed."""
        if self._inputs is None:
            raise ValueError("this prediction keeps no inputs (it was loaded from data); call predict_memory again")
        from nbdebug.core.memory._predict import repredict

        return repredict(self, **changes)

    def largest_batch(self, budget: int | str | None = None) -> int:
        """The largest batch size whose step fits ``budget`` (bytes or ``"8 GiB"``; default the capacity).

        Returns 0 when not even a batch of one fits; the search stops at 65536.
        """
        if budget is None:
            budget = self.capacity_bytes
        if budget is None:
            raise ValueError("largest_batch needs a budget (bytes or a text like '8 GiB'): no capacity is known")
        from nbdebug.core.memory._predict import largest_batch

        return largest_batch(self, parse_bytes(budget) if isinstance(budget, str) else int(budget))

    @cached_property
    def fixes(self) -> tuple[MemoryFix, ...]:
        """The usual fixes, each predicted (smaller batch with accumulation, bf16 autocast, checkpointing, an
        optimizer with less state), best first; computed on first use."""
        from nbdebug.core.memory._predict import predicted_fixes

        return predicted_fixes(self)

    def plot(self, ax: Any = None) -> Any:
        """A stacked bar of the peak by kind (matplotlib ``Figure``)."""
        return self._figure(ax=ax)
