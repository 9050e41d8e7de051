"""The live check of a stated version requirement: the installed release compared with the specifier the message
states (``torch>=1.10``), so a panel never tells a user to install what the kernel already has.

A message can state a version that is not the cause ("You need torch>=1.10, using Ampere GPU with cuda>=11.0" on a
GPU without bf16), or a parameter's bound that only looks like one ("focal_gamma>=0.0"): the check says which, from
the package's installed metadata and the module the kernel imported, never by guessing.  Its words live in
``knowledge.env.REQUIREMENT_CHECKED``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, NamedTuple

from nbdebug.core._findings import Fix
from nbdebug.core.explain._installed import installed_version

__all__ = ["RequirementChecked", "requirement_check"]


class RequirementChecked(NamedTuple):
    """What the check found: a row for the live evidence, the first step, the fixes and the causes that apply."""

    row: tuple[str, str]
    first_step: str
    fixes: list[Fix]
    causes: tuple[str, ...] | None


def _outcome(req: Any, installed: str | None, version: Any) -> str:
    """absent, stale (met on disk, not by the copy the kernel imported), met or missed."""
    if installed is None:
        return "absent"
    if not req.specifier.contains(version(installed), prereleases=True):
        return "missed"
    imported = getattr(sys.modules.get(req.name), "__version__", None)
    if isinstance(imported, str) and imported != installed and not req.specifier.contains(
            version(imported), prereleases=True):
        return "stale"
    return "met"


def requirement_check(facts: Mapping[str, Any]) -> RequirementChecked | None:
    """``facts["requirement"]`` checked against this session; None when it is no specifier packaging can read (the
    entry's own advice then stays)."""
    try:
        from packaging.requirements import InvalidRequirement, Requirement
        from packaging.version import InvalidVersion, Version
    except ImportError:  # pragma: no cover - packaging ships with pip and every build tool; without it, no check
        return None
    from nbdebug.core.knowledge.env import REQUIREMENT_CHECKED

    text = str(facts.get("requirement") or "").replace(" ", "")
    for op in (">=", "==", "~=", "<="):
        text = text.replace(op + "v", op)  # "torch>=v1.10": a tag's spelling
    try:
        req = Requirement(text)
        installed = installed_version(req.name)
        outcome = _outcome(req, installed, Version) if req.specifier else ""
    except (InvalidRequirement, InvalidVersion):
        return None
    if not outcome:
        return None
    imported = getattr(sys.modules.get(req.name), "__version__", "")
    values = {"req": str(req), "name": req.name, "installed": installed or "", "imported": imported}
    row, step, causes = REQUIREMENT_CHECKED[outcome]
    fixes = [] if installed is None else [
        Fix("See what is installed", f"import importlib.metadata as md\nprint(md.version('{req.name}'))")]
    if outcome == "missed":
        fixes.insert(0, Fix(f"Install {req}, then restart the kernel", f"%pip install '{req}'   # then Kernel > Restart"))
    return RequirementChecked(("Requirement check", row.format(**values)), step.format(**values), fixes,
                              None if causes is None else tuple(c.format(**values) for c in causes))
