"""The shared base of every nbdebug result object.

Results are small frozen dataclasses (declare them with ``@dataclass(frozen=True, repr=False)``) that mix in
``Result``.  They are data first: ``to_dict()`` is JSON-ready and ``to_pandas()`` is tidy, one row per record.
Display comes second and lives in ``nbdebug.render``: a registry keyed by result type gives each type its text,
HTML and static-picture renderers.  ``core`` never imports ``render``; the mixin asks the registry at display
time, through ``display_registry()`` below, the one place where ``core`` reaches up, by module name.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["Result", "jsonable", "display_registry"]


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


def display_registry() -> Any:
    """The render registry (``nbdebug.render``), imported on first display: core never imports it statically."""
    return importlib.import_module("nbdebug.render")


class Result:
    """Mixin: ``__repr__`` one cheap line, ``__str__`` the full text report, HTML and a picture for notebooks."""

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
        from nbdebug.errors import require

        pd = require("pandas", "pandas", f"{type(self).__name__}.to_pandas()")
        return pd.DataFrame.from_records(self._records())

    def __str__(self) -> str:
        return str(display_registry().to_text(self))

    def _repr_html_(self) -> str | None:
        return display_registry().to_html(self)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return dict(display_registry().mimebundle(self, include=include, exclude=exclude))

    def _figure(self, **options: Any) -> Any:
        """The result's matplotlib Figure from the render registry (``.plot()`` methods call this)."""
        return display_registry().to_figure(self, **options)
