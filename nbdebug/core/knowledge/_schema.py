"""The one schema every knowledge table uses: ``Entry`` (a kind of problem) and ``Threshold`` (a number).

An entry is what nbdebug knows about one kind of problem, whoever finds it: the explainer matching an error
text, the distributed runner classifying a rank's failure, the NCCL-log reader, or a check (doctor, GradMonitor,
XLA, torch.compile, memory) that builds a ``Finding`` of that kind.  Fields a reader does not use stay empty.
A message pattern lives in exactly one entry; ``contexts`` says which readers search for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from nbdebug.core._findings import Fix, Severity

__all__ = ["Entry", "Threshold", "CONTEXTS", "SIZE", "SHAPE"]

# A size as PyTorch prints it: "20.00 MiB", "0 bytes", "1024.00 KiB".
SIZE = r"[0-9][0-9.,]{0,40} (?:[KMGT]i?B|bytes?|B)"
SHAPE = r"[\[(][-0-9, ]*[\])]"

# Which readers search an entry's ``patterns``:
#   explain      the error explainer (a traceback, a log, an exception)
#   rank_failure the distributed runner, classifying each rank's error as cause or victim
#   nccl_log     the reader of NCCL_DEBUG=INFO logs
#   graph_break  torch.compile: a graph-break reason
#   guard        torch.compile: the guard that failed and caused a recompilation
#   xla_fallback torch_xla: an ATen op name that ran on the CPU (aten::nonzero, ...)
CONTEXTS = frozenset({"explain", "rank_failure", "nccl_log", "graph_break", "guard", "xla_fallback"})


@dataclass(frozen=True)
class Entry:
    """One kind of problem and what to say about it.

    Attributes
    ----------
    slug : str
        Stable name, unique across every domain (``cuda_oom``, ``graph_break``, ``recompilation``, ...).
    title : str
        One line naming the problem.
    severity : Severity
        How bad it is by default.
    fixes : tuple of Fix
        Most effective first, each with short code where code helps.
    sources : tuple of str
        Where the knowledge comes from: public threads, docs, papers, measurements.
    summary, causes, first_step
        What the explainer says (``summary`` may use ``{fact}`` placeholders and ``[[...]]`` optional parts).
    patterns : tuple of str
        Regular expressions over a message; searched by the readers named in ``contexts``.
    contexts : tuple of str
        Readers that search ``patterns`` (see ``CONTEXTS``).
    role : str
        For ``rank_failure``: ``"cause"`` or ``"victim"`` (a consequence of another rank failing).
    keywords, priority, exception_types, facts, repeated_facts, wrapper, extra, frames
        How the explainer recognises and ranks the entry (see ``nbdebug.core.explain``).
    domain : str
        The knowledge module that holds the entry (filled in by the registry).
    """

    slug: str
    title: str
    severity: Severity = Severity.ERROR
    fixes: tuple[Fix, ...] = ()
    sources: tuple[str, ...] = ()
    summary: str = ""
    causes: tuple[str, ...] = ()
    first_step: str = ""
    patterns: tuple[str, ...] = ()
    contexts: tuple[str, ...] = ("explain",)
    role: str = ""
    keywords: tuple[str, ...] = ()
    priority: int = 50
    exception_types: tuple[str, ...] = ()
    # (regex with named groups, converter per group name) applied to the whole text once the entry is chosen
    facts: tuple[tuple[str, dict[str, str]], ...] = ()
    # facts that may occur many times (e.g. one line per rank): (regex, fact name, converter)
    repeated_facts: tuple[tuple[str, str, str], ...] = ()
    wrapper: bool = False
    extra: Mapping[str, str] = field(default_factory=dict)
    # regexes over a traceback's frames, tried only when no message matched
    frames: tuple[str, ...] = ()
    domain: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.severity, Severity):
            object.__setattr__(self, "severity", Severity.parse(self.severity))
        for name in ("fixes", "sources", "causes", "patterns", "contexts", "keywords", "exception_types", "frames"):
            if isinstance(getattr(self, name), str):  # ("x") is a string, not a tuple: a missing comma
                raise TypeError(f"entry {self.slug!r}: {name} is a string; expected a tuple (a missing comma?)")
        unknown = set(self.contexts) - CONTEXTS
        if unknown:
            raise ValueError(f"entry {self.slug!r}: unknown contexts {sorted(unknown)}; expected some of {sorted(CONTEXTS)}")
        if self.role not in ("", "cause", "victim"):
            raise ValueError(f"entry {self.slug!r}: role {self.role!r}; expected '', 'cause' or 'victim'")

    @property
    def fix_titles(self) -> tuple[str, ...]:
        """The fixes' titles."""
        return tuple(f.title for f in self.fixes)


@dataclass(frozen=True)
class Threshold:
    """A number a check depends on, why it has that value, and where that comes from."""

    name: str
    value: float
    why: str
    source: str
    domain: str = ""
