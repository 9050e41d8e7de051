"""Error knowledge: recognise an error (exception or pasted text) and explain it.

The names are resolved on first use (PEP 562), so that importing one light submodule (the dead-kernel record that
``%load_ext nbdebug`` starts, the library-file rule of the short tracebacks) does not load the whole engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nbdebug.core.explain._diagnosis import Diagnosis, Fix, Section
    from nbdebug.core.explain._explain import explain

__all__ = ["Diagnosis", "Fix", "Section", "explain"]


def __getattr__(name: str) -> Any:
    if name == "explain":
        from nbdebug.core.explain._explain import explain

        return explain
    if name in ("Diagnosis", "Fix", "Section"):
        from nbdebug.core.explain import _diagnosis

        return getattr(_diagnosis, name)
    raise AttributeError(f"module 'nbdebug.core.explain' has no attribute {name!r}")
