"""The installed distributions: which one owns an import name, its version, and the requirements that break.

An error raised inside a library is often a version mismatch between that library and a package it calls (a trainer
newer than the transformers it patches, a plugin built for an older framework). The text rarely says so; the
installed packages' own metadata does: each distribution states what it requires, and the session knows what is
installed. ``requirement_conflicts`` returns the requirements of some distributions that the installed versions break:
the check ``pip check`` makes, limited to the packages asked about (a requirement on a package that is not installed,
an extra's, or another platform's is not one).  Two callers ask: the distributions that own a live traceback's frames
(``traceback_conflicts``, site-packages only) and torch with its companions (``_live.version_conflicts``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from types import TracebackType

__all__ = ["frame_distributions", "traceback_conflicts", "requirement_conflicts", "owner", "distribution_of",
           "installed_version", "install_command", "owns_import_name"]

_SITE = re.compile(r"[/\\](?:site|dist)-packages[/\\](?P<top>[A-Za-z0-9_.\-]+)")
_MAX_FRAMES = 200  # a deep recursion's traceback is not walked to its end


@functools.lru_cache(maxsize=1)
def _top_to_dists() -> dict[str, list[str]]:
    from importlib import metadata

    try:
        return {k: list(v) for k, v in metadata.packages_distributions().items()}
    except Exception:  # noqa: BLE001 - a broken install's metadata must not break the answer
        return {}


def owns_import_name(top: str) -> bool:
    """Whether an installed distribution provides the top-level import name ``top``."""
    return top in _top_to_dists()


def owner(top: str) -> str | None:
    """The installed distribution that owns an import name (a package folder or a module file); None when none is
    installed or several share it (a namespace such as google or nvidia)."""
    from importlib import metadata

    top = top.split(".", 1)[0]  # a module file (six.py) or a package folder
    for name in (top, top.replace("_", "-")):
        try:
            metadata.version(name)
            return name
        except metadata.PackageNotFoundError:
            continue
        except Exception:  # noqa: BLE001 - a broken dist-info
            return None
    dists = _top_to_dists().get(top) or []
    return dists[0] if len(dists) == 1 else None  # a namespace (google, nvidia) shared by several: not one owner


def distribution_of(package: str) -> str:
    """The name pip knows an import by: the installed owner first, then the common renames (PIL -> Pillow, sklearn ->
    scikit-learn), else the import name itself."""
    from nbdebug.core.knowledge.env import DISTRIBUTIONS

    return owner(package) or DISTRIBUTIONS.get(package, package)


def installed_version(name: str) -> str | None:
    """The installed version of ``name`` (a distribution, or an import name pip knows by another name)."""
    from importlib import metadata

    for dist in dict.fromkeys((name, distribution_of(name))):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
        except Exception:  # noqa: BLE001 - a broken dist-info
            return None
    return None


def frame_distributions(tb: TracebackType | None) -> list[str]:
    """The installed distributions owning the traceback's frames, innermost last, each once (site-packages only)."""
    found: list[str] = []
    seen_tops: set[str] = set()
    n = 0
    while tb is not None and n < _MAX_FRAMES:
        m = _SITE.search(tb.tb_frame.f_code.co_filename)
        if m and m.group("top") not in seen_tops:
            seen_tops.add(m.group("top"))
            dist = owner(m.group("top"))
            if dist and dist not in found:
                found.append(dist)
        tb, n = tb.tb_next, n + 1
    return found


def _metadata_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except Exception:  # noqa: BLE001 - not installed, or a broken dist-info
        return None


def requirement_conflicts(dists: Iterable[str], version_of: Callable[[str], str | None]) -> list[str]:
    """Requirements of ``dists`` (their installed metadata) that the versions ``version_of`` gives do not meet.

    ``version_of`` takes a canonical name (lower case, ``-``) and gives the version to check, None for a package that is
    not installed (or not asked about): the installed metadata for a traceback, a given set for torch's companions.
    """
    from importlib import metadata

    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:  # pragma: no cover - a dependency of nbdebug
        return []
    conflicts = []
    for dist in dists:
        try:
            version = version_of(_canonical(dist)) or _metadata_version(dist)
            requires = metadata.requires(dist) or []
        except Exception:  # noqa: BLE001 - a broken dist-info: skip it
            continue
        for line in requires:
            if "extra ==" in line or "extra==" in line:
                continue  # an extra's (most of a big library's lines): not installed with it
            try:
                req = Requirement(line)
                if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                    continue  # an extra's, or another platform's or Python's
                installed = version_of(_canonical(req.name))
                broken = installed is not None and bool(req.specifier) and not req.specifier.contains(
                    installed, prereleases=True)
            except InvalidRequirement:
                continue
            except Exception:  # noqa: BLE001 - a marker it cannot evaluate, a version it cannot read
                continue
            if broken:
                name = _canonical(req.name)
                conflicts.append(f"{dist} {version} requires {name}{req.specifier}; installed {name} is {installed}")
    return conflicts


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def traceback_conflicts(exc: BaseException) -> list[str]:
    """Requirements of the distributions in ``exc``'s traceback that the installed versions do not meet."""
    return requirement_conflicts(frame_distributions(exc.__traceback__), _metadata_version)


_CONFLICT = re.compile(r"^\S+ \S+ requires (?P<req>[A-Za-z0-9_.\-]+[<>=!~][^;]*?); installed")


def install_command(conflict: str) -> str:
    """The pip command that installs what ``conflict`` (one of ``traceback_conflicts``) says is required."""
    m = _CONFLICT.match(conflict)
    return f"%pip install '{m.group('req')}'" if m else "%pip check, then install what it names"
