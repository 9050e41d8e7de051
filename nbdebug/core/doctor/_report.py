"""The doctor's result."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nbdebug.core._findings import Finding, HasFindings
from nbdebug.core._result import Result

__all__ = ["DoctorReport"]


@dataclass(frozen=True, repr=False)
class DoctorReport(HasFindings, Result):
    """What ``doctor`` found.

    Attributes
    ----------
    findings : tuple of Finding
        Each with ``kind``, ``severity``, ``message``, ``where`` and ``fixes``.
    task : str
        ``"classification"``, ``"binary"`` or ``"regression"`` (as inferred from the targets and the loss).
    num_classes : int or None
        Classes of the output (classification).
    steps : int
        Steps of the overfit-one-batch run.
    losses : tuple of float
        Loss per step of that run (the overfit curve).
    baseline_losses : tuple of float
        Loss per step with zeroed inputs (the zero-input baseline).
    initial_loss, chance_loss : float or None
        The loss at init, and ``-log(1/C)`` (classification).
    grad_flow : tuple of (str, float)
        Root-mean-square gradient per module at the first step, in forward order.
    checks : tuple of (str, str)
        Every check and its outcome.
    experiments : tuple of Experiment
        Each fix tried on a copy (what was suspected, what was changed, the loss before and after at the same
        step), best first.
    """

    findings: tuple[Finding, ...]
    task: str
    num_classes: int | None
    steps: int
    losses: tuple[float, ...]
    baseline_losses: tuple[float, ...]
    initial_loss: float | None
    chance_loss: float | None
    grad_flow: tuple[tuple[str, float], ...]
    checks: tuple[tuple[str, str], ...]
    experiments: tuple[Any, ...] = ()

    def _summary_line(self) -> str:
        kinds = ", ".join(f.kind for f in self.findings) or "no findings"
        return f"{self.task}, {len(self.errors())} error(s): {kinds}"

    def _records(self) -> list[dict[str, Any]]:
        return [f.to_dict() for f in self.findings]

    def experiments_to_pandas(self) -> Any:
        """One row per experiment: cause, change, steps, start, before, after, fitted, restores."""
        import pandas as pd

        return pd.DataFrame([e.row() for e in self.experiments],
                            columns=["cause", "change", "steps", "start", "before", "after", "fitted", "restores"])

    def plot(self, ax: Any = None) -> Any:
        """Overfit curve (with the zero-input baseline) and gradient flow per layer.

        Returns a ``matplotlib.figure.Figure`` (no pyplot state); given ``ax``, draws the overfit curve on it only.
        """
        return self._figure(ax=ax)
