"""Memory findings."""

from __future__ import annotations

from nbdebug.core.knowledge._schema import Entry, Threshold

__all__ = ["ENTRIES", "THRESHOLDS"]

ENTRIES: tuple[Entry, ...] = ()
THRESHOLDS: tuple[Threshold, ...] = ()
