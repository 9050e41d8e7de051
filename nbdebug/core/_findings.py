"""One ``Finding`` for every capability: doctor, GradMonitor, XLA, torch.compile, distributed, memory.

A finding is what a check saw (``message``, with the numbers), how bad it is (``severity``), where it lives
(``where``: module or parameter names, ``file:line`` of the user's code, ranks), what to do (``fixes``, most
likely first, each with code where code helps) and the numbers behind it (``evidence``).  ``kind`` is the slug
of a knowledge entry (``nbdebug.core.knowledge``), which gives its title, default severity, fixes and sources.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nbdebug.core._result import Result

__all__ = ["Severity", "Fix", "Finding", "HasFindings", "sort_findings", "worst_severity", "fixes_of"]


class Severity(str, enum.Enum):
    """How bad a finding is; compares equal to its string value (``Severity.ERROR == "error"``)."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    def __str__(self) -> str:
        return self.value

    @property
    def rank(self) -> int:
        """0 for errors, 1 for warnings, 2 for info: sort ascending to put the worst first."""
        return _RANK[self.value]

    @classmethod
    def parse(cls, value: Severity | str) -> Severity:
        """``"error"`` / ``Severity.ERROR`` -> ``Severity.ERROR``; anything else raises ``ValueError``."""
        try:
            return cls(value)
        except ValueError:
            raise ValueError(
                f"unknown severity {value!r}; expected one of {', '.join(s.value for s in cls)}"
            ) from None


_RANK = {"error": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class Fix:
    """One fix: a short title and, where it helps, a few lines of code."""

    title: str
    code: str = ""

    def __str__(self) -> str:
        return self.title + (f"\n    {self.code}" if self.code else "")


@dataclass(frozen=True, repr=False)
class Finding(Result):
    """One problem (or, with severity ``info``, one remark) found by a check, and what to do about it.

    Attributes
    ----------
    kind : str
        Slug of the knowledge entry (``"cannot_overfit"``, ``"recompilation"``, ``"graph_break"``, ...).
    severity : Severity
        ``error``, ``warning`` or ``info`` (compares equal to those strings).
    message : str
        What was seen, with the numbers.
    where : tuple of str
        Where it lives: module or parameter names, ``file:line`` of the user's code, ranks; most relevant first.
    fixes : tuple of Fix
        What to try, most likely first.
    evidence : Mapping[str, Any]
        The numbers the finding rests on (counts, ratios, thresholds).
    title : str
        The kind in words (from the knowledge entry).
    """

    kind: str
    severity: Severity
    message: str
    where: tuple[str, ...] = ()
    fixes: tuple[Fix, ...] = ()
    evidence: Mapping[str, Any] = field(default_factory=dict)
    title: str = ""

    def __post_init__(self) -> None:
        # accept plain strings for severity and fixes; store the one canonical form
        if not isinstance(self.severity, Severity):
            object.__setattr__(self, "severity", Severity.parse(self.severity))
        if any(not isinstance(f, Fix) for f in self.fixes):
            object.__setattr__(self, "fixes", tuple(f if isinstance(f, Fix) else Fix(str(f)) for f in self.fixes))
        if not isinstance(self.where, tuple):
            object.__setattr__(self, "where", tuple(self.where))

    @property
    def fix(self) -> str:
        """The first fix's title ('' when there is none)."""
        return self.fixes[0].title if self.fixes else ""

    def _summary_line(self) -> str:
        return f"{self.severity.value} {self.kind}: {self.message}"

    def record(self) -> dict[str, Any]:
        """One flat row for a table (``to_pandas`` of a result that holds findings): lists joined with ``; ``,
        each evidence item in its own ``evidence.NAME`` column."""
        return {"kind": self.kind, "severity": self.severity.value, "title": self.title, "message": self.message,
                "where": "; ".join(self.where), "fixes": "; ".join(x.title for x in self.fixes),
                **{f"evidence.{k}": v for k, v in self.evidence.items()}}


def sort_findings(findings: Iterable[Finding]) -> tuple[Finding, ...]:
    """Worst first; the order among findings of one severity is kept."""
    return tuple(sorted(findings, key=lambda f: f.severity.rank))


def worst_severity(findings: Iterable[Finding]) -> Severity | None:
    """The most severe severity among ``findings`` (None when there are none)."""
    ranks = [f.severity for f in findings]
    return min(ranks, key=lambda s: s.rank) if ranks else None


def fixes_of(items: Sequence[Fix | str]) -> tuple[Fix, ...]:
    """Plain strings or ``Fix`` objects -> a tuple of ``Fix``."""
    return tuple(f if isinstance(f, Fix) else Fix(f) for f in items)


class HasFindings:
    """Mixin for every result that holds findings: one meaning of ``ok``, ``kinds``, ``finding(kind)``, ``worst``.

    The class provides ``findings`` (a field or a property), worst first.  ``ok`` is True when no finding is an
    error or a warning: an ``info`` finding is a remark, not a problem.
    """

    if TYPE_CHECKING:
        @property
        def findings(self) -> Sequence[Finding]: ...

    @property
    def ok(self) -> bool:
        """True when no finding is an error or a warning."""
        return not any(f.severity is not Severity.INFO for f in self.findings)

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds of all findings, worst first (in their order within a severity), each once."""
        return tuple(dict.fromkeys(f.kind for f in sort_findings(self.findings)))

    def finding(self, kind: str) -> Finding | None:
        """The first finding of ``kind`` (None when there is none)."""
        return next((f for f in self.findings if f.kind == kind), None)

    @property
    def worst(self) -> Severity | None:
        """The most severe severity among the findings (None when there are none)."""
        return worst_severity(self.findings)

    def errors(self) -> list[Finding]:
        """The findings of severity ``error``."""
        return [f for f in self.findings if f.severity is Severity.ERROR]

    def to_dict(self) -> dict[str, Any]:
        """The result's fields (``Result.to_dict``), with ``ok`` and the ``findings``, which JSON readers test."""
        data: dict[str, Any] = Result.to_dict(self)  # type: ignore[arg-type]
        data["ok"] = self.ok
        if "findings" not in data:  # a result whose findings are a property
            data["findings"] = [f.to_dict() for f in self.findings]
        return data
