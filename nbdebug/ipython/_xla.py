"""Magics for this feature area (filled in by its issue)."""

from __future__ import annotations

from nbdebug.ipython._state import ExtensionState


def register(state: ExtensionState) -> None:
    """Register this area's magics and features."""
