"""The explainer's view of the knowledge: every entry searched in error texts (``contexts`` holds "explain").

The entries themselves live in ``nbdebug.core.knowledge`` (one module per domain).  Choosing between entries
when a long log matches several (see ``_explain.choose``): the highest ``priority`` wins.  Priorities encode
"root cause before consequence": a CUDA device-side assert or OOM explains the NCCL errors and the torchrun
``ChildFailedError`` that follow it, so those wrappers have the lowest priorities.

Summary templates use ``{fact}`` placeholders (``{fact:bytes}`` formats a byte count); a ``[[...]]`` segment is
dropped when a fact it names is missing, so one template serves every wording era.
"""

from __future__ import annotations

from nbdebug.core.knowledge import SIZE, Entry, entries

__all__ = ["Entry", "TABLE", "SIZE", "SLUGS"]

TABLE: tuple[Entry, ...] = entries("explain")
SLUGS: tuple[str, ...] = tuple(e.slug for e in TABLE)
