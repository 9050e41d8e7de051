"""Temporary: replaced by the pattern engine."""

from __future__ import annotations

from typing import Any

from nbdebug.core.fixes._diagnosis import Diagnosis


def explain(error: BaseException | str, *, roots: Any = None) -> Diagnosis:
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return Diagnosis(category="unknown", title="Unrecognised error", summary=text.strip().splitlines()[-1] if text.strip() else "")
