"""What ``inspect_batch`` saw (``BatchReport`` and its rows) and the one way its checks build a ``Finding``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from nbdebug.core._findings import Finding, HasFindings, Severity, sort_findings
from nbdebug.core._result import Result
from nbdebug.core.knowledge._schema import Entry

__all__ = ["BatchReport", "TokenRow", "ChannelStats", "ColumnStats", "SplitOverlap", "batch_finding", "limit"]


@cache
def _entries() -> tuple[dict[str, Entry], dict[str, float]]:
    from nbdebug.core.knowledge import batch

    return {e.slug: e for e in batch.ENTRIES}, {t.name: t.value for t in batch.THRESHOLDS}


def _registered() -> bool:
    """True once the knowledge registry gathers the ``batch`` domain (then it is the one way, as everywhere)."""
    from nbdebug.core import knowledge

    return "batch" in knowledge.DOMAINS


def limit(name: str) -> float:
    """The value of the batch threshold ``name`` (``nbdebug.core.knowledge.batch.THRESHOLDS``)."""
    if _registered():
        from nbdebug.core.knowledge import threshold

        return threshold(name)
    return _entries()[1][name]


def batch_finding(slug: str, message: str, where: Sequence[str] = (), *, evidence: Mapping[str, Any] | None = None,
                  severity: Severity | str | None = None) -> Finding:
    """A ``Finding`` of kind ``slug`` with the severity, title and fixes of its entry in ``knowledge.batch``
    (through ``knowledge.finding`` once the registry gathers that domain)."""
    if _registered():
        from nbdebug.core.knowledge import finding

        return finding(slug, message, where, severity=severity, evidence=evidence)
    e = _entries()[0][slug]
    sev = Severity.parse(severity) if severity is not None else e.severity
    return Finding(kind=slug, severity=sev, message=message, where=tuple(where), fixes=e.fixes,
                   evidence=dict(evidence or {}), title=e.title)


@dataclass(frozen=True)
class TokenRow:
    """One decoded row of a text batch, bounded: its first and last tokens, each with what the loss does with it.

    ``tokens`` holds ``(text, state)`` pairs; state is ``"trained"`` (its label counts in the loss), ``"masked"``
    (label -100), ``"pad"``, ``"special"`` (a special token that is not padding) or ``"input"`` (no labels given);
    ``("...", "gap")`` stands for the tokens left out in the middle.
    """

    index: int
    tokens: tuple[tuple[str, str], ...]
    length: int
    pad: int
    trained: int
    bos: bool
    eos: bool
    cut: bool


@dataclass(frozen=True)
class ChannelStats:
    """Mean, standard deviation and range of one image channel (or one table column), over the batch."""

    name: str
    mean: float
    std: float
    min: float
    max: float
    nan: int = 0


ColumnStats = ChannelStats


@dataclass(frozen=True)
class SplitOverlap:
    """Rows of one split found in another: exact copies and near copies (equal after normalizing)."""

    train_rows: int
    val_rows: int
    exact: int
    near: int
    examples: tuple[int, ...] = ()


@dataclass(frozen=True, repr=False, eq=False)
class BatchReport(HasFindings, Result):
    """What ``nbdebug.inspect_batch`` saw in a batch, and the silent data bugs it found.

    Attributes
    ----------
    modality : str
        ``"text"``, ``"image"``, ``"table"``, or ``"columns"`` (a dataset whose columns never reach a model).
    source : str
        What was given, in words (``"dict of 3 tensors (BatchEncoding)"``, ``"DataLoader, 4 batches"``).
    rows : int
        Examples looked at.
    shape : tuple of int
        Shape of the main input (``input_ids``, the images, the feature table).
    findings : tuple of Finding
        Worst first; each names what was seen, where (rows, columns) and the fix with code.
    stats : tuple of (str, object)
        The headline numbers, in words (pad fraction and side, label tokens trained, pixel range, ...).
    token_rows : tuple of TokenRow
        A few decoded rows (text), special tokens visible, trained and masked label tokens apart.
    channels : tuple of ChannelStats
        Per-channel statistics (images) or per-column statistics (tables).
    label_counts : tuple of (str, int)
        Examples per label (images and tables with labels).
    grid_labels : tuple of str
        The labels under the pictures of ``grid``.
    overlap : SplitOverlap or None
        With ``other=``: rows shared with the other split.
    grid : numpy.ndarray or None
        Up to 16 de-normalized images, ``(k, H, W, C)`` uint8, for the picture (``.plot()``).
    """

    modality: str
    source: str
    rows: int
    shape: tuple[int, ...]
    findings: tuple[Finding, ...] = ()
    stats: tuple[tuple[str, Any], ...] = ()
    token_rows: tuple[TokenRow, ...] = ()
    channels: tuple[ChannelStats, ...] = ()
    label_counts: tuple[tuple[str, int], ...] = ()
    grid_labels: tuple[str, ...] = ()
    overlap: SplitOverlap | None = None
    grid: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "findings", sort_findings(self.findings))

    def _summary_line(self) -> str:
        problems = sum(f.severity is not Severity.INFO for f in self.findings)
        kinds = f": {', '.join(self.kinds[:4])}" if problems else ""
        return f"{self.modality} batch, {self.rows} rows, {problems} problem(s){kinds}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (without the picture's pixels), ``ok`` and the findings."""
        data = HasFindings.to_dict(self)
        data.pop("grid", None)
        return data

    def _records(self) -> list[dict[str, Any]]:
        return [f.record() for f in self.findings]

    def to_pandas(self) -> Any:
        """One row per finding: ``kind``, ``severity``, ``title``, ``message``, ``where``, ``fixes`` and one
        ``evidence.NAME`` column per number behind it (an empty frame for a clean batch)."""
        from nbdebug.errors import require

        pd = require("pandas", "pandas", "BatchReport.to_pandas()")
        columns = ["kind", "severity", "title", "message", "where", "fixes"]
        return pd.DataFrame.from_records(self._records(), columns=None if self.findings else columns)

    def plot(self, ax: Any = None) -> Any:
        """The batch's images, de-normalized, in a grid with their labels (a ``matplotlib.figure.Figure``)."""
        return self._figure(ax=ax)
