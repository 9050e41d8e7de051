"""The live check of a stated version requirement: the installed release compared with the specifier the message
states (``torch>=1.10``), so a panel never tells a user to install what the kernel already has.

A message can state a version that is not the cause ("You need torch>=1.10, using Ampere GPU with cuda>=11.0" on a
GPU without bf16), or a parameter's bound that only looks like one ("focal_gamma>=0.0"): the check says which, from
the package's installed metadata and the module the kernel imported, never by guessing.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from nbdebug.core._findings import Fix

__all__ = ["requirement_check"]


def _installed(name: str) -> str | None:
    """The installed version of ``name`` (a distribution, or an import name pip knows by another name)."""
    from importlib import metadata

    from nbdebug.core.explain._family import distribution_of

    for dist in dict.fromkeys((name, distribution_of(name))):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def requirement_check(facts: Mapping[str, Any]) -> tuple[list[tuple[str, str]], str, list[Fix], bool] | None:
    """Rows, a first step, fixes and whether those fixes are the only ones that apply, for ``facts["requirement"]``
    checked against this session; None when the requirement is no specifier packaging can read (the entry's own
    advice stays)."""
    try:
        from packaging.requirements import InvalidRequirement, Requirement
        from packaging.version import InvalidVersion, Version
    except ImportError:  # pragma: no cover - packaging ships with pip and every build tool; without it, no check
        return None

    text = str(facts.get("requirement") or "").replace(" ", "")
    for op in (">=", "==", "~=", "<="):
        text = text.replace(op + "v", op)  # "torch>=v1.10": a tag's spelling
    try:
        req = Requirement(text)
    except InvalidRequirement:
        return None
    if not req.specifier:
        return None
    installed = _installed(req.name)
    if installed is None:
        return ([("Requirement", f"{req}: {req.name} is not an installed package")],
                f"The message states {req}, and no package named {req.name} is installed in this kernel's "
                f"environment: if {req.name} is a package, install it (%pip install '{req}') and restart the kernel; "
                f"if it is an argument or setting, the message states a bound on its value, not a version.", [], True)
    try:
        meets = req.specifier.contains(Version(installed), prereleases=True)
    except InvalidVersion:
        return None
    look = Fix("See what is installed", f"import importlib.metadata as md\nprint(md.version('{req.name}'))")
    imported = getattr(sys.modules.get(req.name), "__version__", None)
    if meets and isinstance(imported, str) and imported != installed:
        try:
            stale = not req.specifier.contains(Version(imported), prereleases=True)
        except InvalidVersion:
            stale = False
        if stale:
            return ([("Requirement", f"{req}: installed {installed} meets it, but this kernel imported {imported}")],
                    f"{req.name} {installed} is installed and meets {req}, but this kernel still runs the {imported} "
                    f"it imported before the upgrade: restart the kernel (Kernel > Restart) and rerun.", [look], True)
    if meets:
        return ([("Requirement", f"installed {req.name} {installed} meets {req}")],
                f"The installed {req.name} {installed} already meets {req}, so the version is not the cause: read the "
                f"rest of the message for what it really needs (a GPU feature, a setting, another package).", [look], True)
    return ([("Requirement", f"installed {req.name} {installed} does not meet {req}")],
            f"The installed {req.name} {installed} does not meet {req}: install a release that does (%pip install "
            f"'{req}', or the release of the calling library made for {installed}) and restart the kernel.",
            [Fix(f"Install {req}, then restart the kernel", f"%pip install '{req}'   # then Kernel > Restart"), look],
            True)
