"""Memory: a safe snapshot engine for every ``_dump_snapshot`` format, ``memtrace`` on CUDA and CPU, OOM capture.

torch is imported inside the functions that need it; numpy is imported by the snapshot engine.
"""

from __future__ import annotations

from typing import Any

from nbdebug.core.memory._results import (
    AliveBlock,
    Annotations,
    Fragmentation,
    MemoryPeak,
    MemoryTimeline,
    NeverFreed,
    RetainedPart,
    SiteBytes,
    SnapshotDiff,
    SnapshotSummary,
    TopSites,
)
from nbdebug.core.memory._snapshot import MemorySnapshot, load_snapshot
from nbdebug.errors import SnapshotError

__all__ = [
    "load_snapshot", "MemorySnapshot", "SnapshotError", "memtrace", "MemTrace", "release_failed_cell",
    "SnapshotSummary", "MemoryTimeline", "MemoryPeak", "TopSites", "Fragmentation", "NeverFreed", "Annotations",
    "SnapshotDiff", "SiteBytes", "RetainedPart", "AliveBlock", "predict_memory", "MemoryPrediction",
]


def __getattr__(name: str) -> Any:
    # the tracing and OOM modules are only imported when used
    if name in ("memtrace", "MemTrace"):
        from nbdebug.core.memory import _trace

        return getattr(_trace, name)
    if name == "predict_memory":
        from nbdebug.core.memory._predict import predict_memory

        return predict_memory
    if name == "MemoryPrediction":
        from nbdebug.core.memory._predict_result import MemoryPrediction

        return MemoryPrediction
    if name == "release_failed_cell":
        from nbdebug.core.memory._oom import release_failed_cell

        return release_failed_cell
    raise AttributeError(f"module 'nbdebug.core.memory' has no attribute {name!r}")
