"""The result of explaining one error: what happened, the numbers, ranked causes, fixes, the first step."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nbdebug.core._findings import Fix, Severity
from nbdebug.core._result import Result

__all__ = ["Fix", "Section", "Diagnosis", "user_sources"]


def user_sources(sources: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The sources a user can open (http/https addresses), in order, without repeats.

    Knowledge may carry other provenance (names of internal notes); that never reaches a report.
    """
    return tuple(dict.fromkeys(s for s in sources if s.startswith(("https://", "http://"))))


@dataclass(frozen=True)
class Section:
    """An extra block added to a diagnosis by another part of nbdebug (e.g. the memory snapshot at an OOM).

    Data only; the renderer lays it out: ``text`` (a paragraph), ``facts`` (key/value rows), a table
    (``header`` and ``rows``), ``fixes``, ``notes`` and ``preformatted`` text (a traceback), in that order.
    """

    title: str
    text: str = ""
    facts: tuple[tuple[str, Any], ...] = ()
    header: tuple[str, ...] = ()
    rows: tuple[tuple[Any, ...], ...] = ()
    fixes: tuple[Fix, ...] = ()
    notes: tuple[str, ...] = ()
    preformatted: str = ""


@dataclass(frozen=True, repr=False)
class Diagnosis(Result):
    """What an error means and what to do about it.

    Attributes
    ----------
    kind : str
        Stable slug of the knowledge entry (``cuda_oom``, ``shape_mismatch``, ..., or ``unknown``): the same word
        as ``Finding.kind``.
    title : str
        One line naming the problem.
    summary : str
        What happened, in plain words, with the numbers filled in.
    evidence : Mapping[str, Any]
        Numbers and names parsed out of the message or the exception (sizes, shapes, devices, ...): the same word
        as ``Finding.evidence``.
    causes : tuple of str
        Likely causes, most likely first.
    fixes : tuple of Fix
        Fixes, most effective first, each with short code.
    first_step : str
        The one thing to try first.
    exception_type : str
        The exception's class name, when known.
    message : str
        The line of the error text that was recognised.
    notes : tuple of str
        Context that depends on where the error happened (e.g. the module that raised it).
    sections : tuple of Section
        Extra blocks contributed by other features (e.g. the memory snapshot at an OOM).
    sources : tuple of str
        Public pages the knowledge behind this diagnosis comes from (issue threads, docs): http(s) addresses
        only; anything else given here is dropped.
    severity : Severity
        ``error``, or ``warning`` (the same ``Severity`` as a ``Finding``, equal to those strings) for a warning that signals a bug (``loss_broadcast``, ...): the run went
        on, but it is training the wrong thing, slower, or without gradients somewhere.
    """

    kind: str
    title: str
    summary: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    causes: tuple[str, ...] = ()
    fixes: tuple[Fix, ...] = ()
    first_step: str = ""
    exception_type: str = ""
    message: str = ""
    notes: tuple[str, ...] = ()
    sections: tuple[Section, ...] = ()
    sources: tuple[str, ...] = ()
    severity: Severity = Severity.ERROR

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", user_sources(self.sources))
        if not isinstance(self.severity, Severity):
            object.__setattr__(self, "severity", Severity.parse(self.severity))

    @property
    def known(self) -> bool:
        """False when the error matched no known knowledge entry."""
        return self.kind != "unknown"

    def _summary_line(self) -> str:
        return f"{self.kind}: {self.title}"

    def _records(self) -> list[dict[str, Any]]:
        return [{"kind": self.kind, "evidence": k, "value": v} for k, v in self.evidence.items()] or [
            {"kind": self.kind, "evidence": None, "value": None}
        ]
