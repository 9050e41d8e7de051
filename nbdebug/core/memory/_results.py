"""Result objects of the snapshot analyses (data first; display lives in ``nbdebug.render.memory``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nbdebug._units import fmt_bytes
from nbdebug.core._findings import Finding, HasFindings
from nbdebug.core._result import Result

__all__ = [
    "SiteBytes", "RetainedPart", "AliveBlock", "SnapshotSummary", "MemoryTimeline", "MemoryPeak", "TopSites",
    "SegmentRow", "OomRow", "Fragmentation", "NeverFreed", "AnnotationRow", "Annotations", "DiffRow", "SnapshotDiff",
]



@dataclass(frozen=True)
class SiteBytes:
    """Bytes attributed to one allocation site (the first user frame of the stack)."""

    site: str
    bytes: int
    count: int
    filename: str = ""
    line: int = 0
    function: str = ""


@dataclass(frozen=True)
class RetainedPart:
    """Memory a traced block kept alive, of one kind: ``"parameters"`` (made by building or moving a model),
    ``"gradients"`` (made by the backward pass), ``"optimizer state"`` (made by an optimizer's step) or
    ``"other"``; with its sites, largest first."""

    kind: str
    bytes: int
    sites: tuple[SiteBytes, ...]


@dataclass(frozen=True)
class AliveBlock:
    """One live allocation at a moment, with where it came from."""

    address: int
    bytes: int
    site: str
    category: str
    since: str  # "trace" (allocated during the trace) or "before trace"
    stack: tuple[str, ...]


@dataclass(frozen=True, repr=False)
class SnapshotSummary(Result):
    """The headline numbers of a snapshot (the JSON of ``python -m nbdebug snapshot --json``).

    Attributes
    ----------
    source : str
        Where the snapshot came from.
    devices : tuple of int
        Devices with trace entries or segments.
    device : int
        Device the memory numbers below describe.
    events : int
        Trace entries in the file (all devices).
    peak_allocated_bytes : int
        Maximum over the trace of bytes allocated and not yet ``free_completed`` on ``device``, counting blocks
        alive before the trace began.
    peak_time_us : float or None
        When the peak happened (None when the trace has no ``time_us``).
    final_allocated_bytes, peak_reserved_bytes : int
        Allocated bytes after the last event; highest reserved (cudaMalloc'ed) bytes.
    segments : int
        Segments in the file (all devices).
    top_sites : tuple of SiteBytes
        Largest allocation sites on ``device`` (bytes allocated during the trace plus blocks alive before it).
    ooms : tuple of dict
        ``oom`` entries: device, requested bytes, free bytes reported by CUDA, time.
    """

    source: str
    devices: tuple[int, ...]
    device: int
    events: int
    peak_allocated_bytes: int
    peak_time_us: float | None
    peak_event_index: int
    final_allocated_bytes: int
    peak_reserved_bytes: int
    segments: int
    top_sites: tuple[SiteBytes, ...]
    ooms: tuple[dict[str, Any], ...]
    x_unit: str
    notes: tuple[str, ...] = ()


    def _summary_line(self) -> str:
        return (f"device {self.device}, {self.events} events, peak {fmt_bytes(self.peak_allocated_bytes)}, "
                f"reserved {fmt_bytes(self.peak_reserved_bytes)}")

    def _records(self) -> list[dict[str, Any]]:
        return [{"site": s.site, "bytes": s.bytes, "count": s.count} for s in self.top_sites]


@dataclass(frozen=True, repr=False)
class MemoryTimeline(Result):
    """Allocated and reserved bytes after each event; ``x`` is ``time_us`` or the event index (``x_unit``).

    The first point is the state before the first event (memory alive when recording started).
    """

    device: int
    x_unit: str
    x: np.ndarray
    allocated: np.ndarray
    reserved: np.ndarray


    def _summary_line(self) -> str:
        peak = int(self.allocated.max()) if self.allocated.size else 0
        return f"device {self.device}, {self.x.size} points, peak {peak} B"

    def to_dict(self) -> dict[str, Any]:  # noqa: D102
        return {"device": self.device, "x_unit": self.x_unit, "x": self.x.tolist(),
                "allocated": self.allocated.tolist(), "reserved": self.reserved.tolist()}

    def to_pandas(self) -> Any:  # noqa: D102
        import pandas as pd

        return pd.DataFrame({self.x_unit if self.x_unit != "us" else "time_us": self.x,
                             "allocated_bytes": self.allocated, "reserved_bytes": self.reserved})


@dataclass(frozen=True, repr=False)
class MemoryPeak(Result):
    """The moment of highest allocated memory and what was alive then."""

    device: int
    bytes: int
    event_index: int  # -1: the peak is the memory already alive before the trace
    time_us: float | None
    by_site: tuple[SiteBytes, ...]
    by_category: tuple[tuple[str, int], ...]
    blocks: tuple[AliveBlock, ...]  # largest live blocks


    def _summary_line(self) -> str:
        return f"device {self.device}: {fmt_bytes(self.bytes)} at event {self.event_index}"

    def _records(self) -> list[dict[str, Any]]:
        return [{"site": s.site, "bytes": s.bytes, "count": s.count} for s in self.by_site]


@dataclass(frozen=True, repr=False)
class TopSites(Result):
    """Allocation sites ranked by bytes allocated during the trace (plus blocks alive before it)."""

    device: int
    sites: tuple[SiteBytes, ...]


    def _summary_line(self) -> str:
        return f"device {self.device}, {len(self.sites)} sites"

    def _records(self) -> list[dict[str, Any]]:
        return [{"site": s.site, "bytes": s.bytes, "count": s.count, "filename": s.filename, "line": s.line,
                 "function": s.function} for s in self.sites]


@dataclass(frozen=True)
class SegmentRow:
    """One segment of the final state."""

    address: int
    total_bytes: int
    allocated_bytes: int
    free_bytes: int
    largest_free_block: int
    blocks: int
    segment_type: str
    expandable: bool
    pool: str
    #: bytes of the segment that no listed block covers (0 in a complete snapshot: blocks tile their segment);
    #: part of ``free_bytes``, but where in it the free space lies, and so its largest free block, is unknown
    unlisted_bytes: int = 0


@dataclass(frozen=True)
class OomRow:
    """An out-of-memory event: the request against what was free."""

    event_index: int
    requested_bytes: int
    device_free_bytes: int | None
    largest_free_block: int
    cached_free_bytes: int
    time_us: float | None
    site: str


@dataclass(frozen=True, repr=False)
class Fragmentation(HasFindings, Result):
    """Reserved but unallocated memory, and the largest free block per segment (final state)."""

    device: int
    reserved_bytes: int
    allocated_bytes: int
    free_bytes: int
    largest_free_block: int
    segments: tuple[SegmentRow, ...]
    ooms: tuple[OomRow, ...]
    #: reserved bytes in no listed block (see ``SegmentRow.unlisted_bytes``); counted in ``free_bytes``
    unlisted_bytes: int = 0


    @property
    def findings(self) -> tuple[Finding, ...]:
        """Each OOM's verdict: fragmentation (enough free, not in one block) or memory genuinely in use."""
        from nbdebug.core.memory._oom import oom_findings

        return tuple(f for o in self.ooms
                     for f in oom_findings(o.requested_bytes, o.largest_free_block, o.cached_free_bytes,
                                           device=self.device))

    @property
    def fragmentation(self) -> float:
        """``1 - largest free block / free bytes`` (0: one free block; near 1: free memory in crumbs), over the
        listed blocks only (bytes in no listed block have no known layout)."""
        listed = self.free_bytes - self.unlisted_bytes
        return 0.0 if listed <= 0 else 1.0 - self.largest_free_block / listed

    def _summary_line(self) -> str:
        return (f"device {self.device}: {fmt_bytes(self.free_bytes)} reserved but free, largest block "
                f"{fmt_bytes(self.largest_free_block)}")

    def _records(self) -> list[dict[str, Any]]:
        return [dict(vars(s)) for s in self.segments]


@dataclass(frozen=True, repr=False)
class NeverFreed(Result):
    """What a window of the trace allocated and was still alive at the end of the trace."""

    device: int
    start: float
    end: float
    x_unit: str
    bytes: int
    count: int
    by_site: tuple[SiteBytes, ...]


    def _summary_line(self) -> str:
        return f"device {self.device}: {self.count} blocks, {self.bytes} B never freed"

    def _records(self) -> list[dict[str, Any]]:
        return [{"site": s.site, "bytes": s.bytes, "count": s.count} for s in self.by_site]


@dataclass(frozen=True)
class AnnotationRow:
    """A ``record_function`` region boundary."""

    name: str
    stage: str
    device: int
    time_us: float | None
    event_index: int  # first event at or after the marker, -1 when unknown


@dataclass(frozen=True, repr=False)
class Annotations(Result):
    """External annotations (markers) of the snapshot."""

    rows: tuple[AnnotationRow, ...]

    def _summary_line(self) -> str:
        return f"{len(self.rows)} markers"

    def _records(self) -> list[dict[str, Any]]:
        return [dict(vars(r)) for r in self.rows]


@dataclass(frozen=True)
class DiffRow:
    """Bytes alive at one site in each snapshot."""

    site: str
    before_bytes: int
    after_bytes: int
    delta_bytes: int


def diff_rows(before: Sequence[SiteBytes], after: Sequence[SiteBytes]) -> tuple[DiffRow, ...]:
    """Bytes by site in two snapshots, every site of either, largest change first."""
    a = {r.site: r.bytes for r in before}
    b = {r.site: r.bytes for r in after}
    rows = [DiffRow(site, a.get(site, 0), b.get(site, 0), b.get(site, 0) - a.get(site, 0)) for site in a | b]
    rows.sort(key=lambda r: (-abs(r.delta_bytes), r.site))
    return tuple(rows)


@dataclass(frozen=True, repr=False)
class SnapshotDiff(Result):
    """Memory alive at the end of two snapshots, compared by allocation site."""

    before: str
    after: str
    before_bytes: int
    after_bytes: int
    rows: tuple[DiffRow, ...]
    # the two snapshots (for the pictures: both timelines on one axis, the peaks by site); not part of the data
    _before: Any = field(default=None, compare=False)
    _after: Any = field(default=None, compare=False)
    _device: int | None = field(default=None, compare=False)

    def peak_rows(self) -> tuple[DiffRow, ...]:
        """Bytes alive at each snapshot's peak, by site, largest change first (empty without the snapshots)."""
        if self._before is None or self._after is None:
            return ()
        return diff_rows(self._before.peak(self._device).by_site, self._after.peak(self._device).by_site)


    def _summary_line(self) -> str:
        return f"{self.after_bytes - self.before_bytes:+d} B over {len(self.rows)} sites"

    def _records(self) -> list[dict[str, Any]]:
        return [dict(vars(r)) for r in self.rows]
