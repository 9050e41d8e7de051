"""The shared base of every nbdebug result object.

Results are small frozen dataclasses (declare them with ``@dataclass(frozen=True, repr=False)``) that mix in
``Result``.  They are data first: ``to_dict()`` is JSON-ready and ``to_pandas()`` is tidy, one row per record.
Display comes second and is looked up lazily by name, so ``core`` never imports ``render`` at import time:
``_text_renderer`` and ``_html_renderer`` are ``"module:function"`` strings naming pure functions
``(result) -> str``.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import math
from collections.abc import Mapping
from typing import Any, ClassVar

__all__ = ["Result", "jsonable"]


def jsonable(value: Any) -> Any:
    """Turn dataclasses, tuples, enums and numpy scalars/arrays into plain JSON types."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if isinstance(value, Result):
            return value.to_dict()
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value) if not f.name.startswith("_")}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else (1e308 if value > 0 else -1e308)
    if hasattr(value, "tolist") and callable(value.tolist):  # numpy scalars and arrays
        return jsonable(value.tolist())
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def _resolve(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module_name), attr)


class Result:
    """Mixin: ``__repr__`` one cheap line, ``__str__`` the full text report, HTML for notebooks."""

    _text_renderer: ClassVar[str] = ""
    _html_renderer: ClassVar[str] = ""

    def _summary_line(self) -> str:
        """One cheap line for ``repr``; override with the headline numbers."""
        return ""

    def __repr__(self) -> str:
        line = self._summary_line()
        return f"<{type(self).__name__}{': ' + line if line else ''}>"

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict of the public fields."""
        return {
            f.name: jsonable(getattr(self, f.name))
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
            if not f.name.startswith("_")
        }

    def _records(self) -> list[dict[str, Any]]:
        """Rows for ``to_pandas``; override for results that hold a table."""
        return [self.to_dict()]

    def to_pandas(self) -> Any:
        """Return the records as a tidy ``pandas.DataFrame`` (one row per record)."""
        import pandas as pd

        return pd.DataFrame.from_records(self._records())

    def __str__(self) -> str:
        if not self._text_renderer:
            return repr(self)
        return str(_resolve(self._text_renderer)(self))

    def _repr_html_(self) -> str | None:
        if not self._html_renderer:
            return None
        return str(_resolve(self._html_renderer)(self))

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        bundle = {"text/plain": str(self)}
        html = self._repr_html_()
        if html is not None:
            bundle["text/html"] = html
        return bundle
