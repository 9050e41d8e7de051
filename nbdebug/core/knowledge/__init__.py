"""Everything nbdebug knows, as data: one ``Entry`` schema and one ``Threshold`` schema for every domain.

Each domain module (``cuda``, ``dist``, ``ddp``, ``autograd``, ``data``, ``optim``, ``io``, ``compile``, ``xla``, ``training``,
``memory``, ``env``, ``crash``, ``usercode``, ``library``) holds ``ENTRIES`` (a tuple of ``Entry``) and may hold ``THRESHOLDS`` (a tuple of ``Threshold``).
The registry below gathers them in this order; slugs and threshold names are unique across all domains, and a
message pattern lives in exactly one entry (``tests/test_knowledge.py`` checks both).

Readers: the explainer (``core.explain``) takes the entries whose ``contexts`` hold ``"explain"``; the
distributed runner those with ``"rank_failure"``; the NCCL-log reader those with ``"nccl_log"``; every check
builds its findings with ``finding(slug, message, ...)``, which fills severity, title and fixes from the entry.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from nbdebug.core._findings import Finding, Fix, Severity
from nbdebug.core.knowledge._schema import CONTEXTS, SHAPE, SIZE, Entry, Threshold

__all__ = [
    "Entry",
    "Threshold",
    "CONTEXTS",
    "SIZE",
    "SHAPE",
    "DOMAINS",
    "entries",
    "entry",
    "thresholds",
    "threshold",
    "finding",
    "match",
]

DOMAINS: tuple[str, ...] = ("cuda", "dist", "ddp", "autograd", "data", "optim", "io", "compile", "xla", "training",
                             "memory", "env", "crash", "usercode", "library", "batch")


@cache
def _load() -> tuple[tuple[Entry, ...], dict[str, Entry], dict[str, Threshold]]:
    all_entries: list[Entry] = []
    by_slug: dict[str, Entry] = {}
    limits: dict[str, Threshold] = {}
    for domain in DOMAINS:
        module = importlib.import_module(f"nbdebug.core.knowledge.{domain}")
        for e in getattr(module, "ENTRIES", ()):
            e = dataclasses.replace(e, domain=domain)
            if e.slug in by_slug:
                raise ValueError(f"knowledge: slug {e.slug!r} in both {by_slug[e.slug].domain} and {domain}")
            by_slug[e.slug] = e
            all_entries.append(e)
        for t in getattr(module, "THRESHOLDS", ()):
            if t.name in limits:
                raise ValueError(f"knowledge: threshold {t.name!r} in both {limits[t.name].domain} and {domain}")
            limits[t.name] = dataclasses.replace(t, domain=domain)
    return tuple(all_entries), by_slug, limits


def entries(context: str | None = None, *, domain: str | None = None) -> tuple[Entry, ...]:
    """All entries, in registry order; only those searched by ``context`` and/or held by ``domain``."""
    if context is not None and context not in CONTEXTS:
        raise ValueError(f"unknown context {context!r}; expected one of {sorted(CONTEXTS)}")
    if domain is not None and domain not in DOMAINS:
        raise ValueError(f"unknown domain {domain!r}; expected one of {', '.join(DOMAINS)}")
    return tuple(
        e for e in _load()[0]
        if (context is None or (context in e.contexts and e.patterns)) and (domain is None or e.domain == domain)
    )


@cache
def _compiled(context: str) -> tuple[tuple[Entry, tuple[re.Pattern[str], ...]], ...]:
    return tuple((e, tuple(re.compile(p) for p in e.patterns)) for e in entries(context))


def match(context: str, text: str, *, anchored: bool = False) -> Entry | None:
    """The first entry (in registry order) searched in ``context`` that has a pattern matching ``text``.

    ``anchored``: the pattern must match at the start of ``text`` (``re.match``), as for ATen op names.
    """
    for e, rxs in _compiled(context):
        if any((rx.match(text) if anchored else rx.search(text)) for rx in rxs):
            return e
    return None


def entry(slug: str) -> Entry:
    """The entry named ``slug``; ``KeyError`` naming the slug when there is none."""
    try:
        return _load()[1][slug]
    except KeyError:
        raise KeyError(f"no knowledge entry {slug!r}") from None


def thresholds(domain: str | None = None) -> Mapping[str, Threshold]:
    """Every threshold by name (only ``domain``'s when given)."""
    limits = _load()[2]
    return {k: t for k, t in limits.items() if domain is None or t.domain == domain}


def threshold(name: str) -> float:
    """The value of the threshold ``name``."""
    try:
        return _load()[2][name].value
    except KeyError:
        raise KeyError(f"no threshold {name!r}") from None


def finding(
    slug: str,
    message: str,
    where: Sequence[str] = (),
    *,
    severity: Severity | str | None = None,
    fixes: Sequence[Fix | str] | None = None,
    evidence: Mapping[str, Any] | None = None,
) -> Finding:
    """A ``Finding`` of kind ``slug``: severity, title and fixes come from its entry unless given."""
    e = entry(slug)
    sev = Severity.parse(severity) if severity is not None else e.severity
    chosen = e.fixes if fixes is None else tuple(f if isinstance(f, Fix) else Fix(f) for f in fixes)
    return Finding(kind=slug, severity=sev, message=message, where=tuple(where), fixes=chosen,
                   evidence=dict(evidence or {}), title=e.title)
