"""The installed packages a live traceback ran through, and whether their declared requirements fit.

An error raised inside a library is often a version mismatch between that library and a package it calls (a trainer
newer than the transformers it patches, a plugin built for an older framework). The text rarely says so; the
installed packages' own metadata does: each distribution states what it requires, and the session knows what is
installed. This reads the distributions that own the traceback's frames (site-packages only) and returns the
requirements of theirs that the installed versions break: the check ``pip check`` makes, limited to the packages of
this error (a requirement on a package that is not installed, an extra's, or another platform's is not one).
"""

from __future__ import annotations

import functools
import re
from types import TracebackType

__all__ = ["frame_distributions", "traceback_conflicts"]

_SITE = re.compile(r"[/\\](?:site|dist)-packages[/\\](?P<top>[A-Za-z0-9_.\-]+)")
_MAX_FRAMES = 200  # a deep recursion's traceback is not walked to its end


@functools.lru_cache(maxsize=1)
def _top_to_dists() -> dict[str, list[str]]:
    from importlib import metadata

    return {k: list(v) for k, v in metadata.packages_distributions().items()}


def _dist_of(top: str) -> str | None:
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
    try:
        dists = _top_to_dists().get(top) or []
    except Exception:  # noqa: BLE001
        return None
    return dists[0] if len(dists) == 1 else None  # a namespace (google, nvidia) shared by several: not one owner


def frame_distributions(tb: TracebackType | None) -> list[str]:
    """The installed distributions owning the traceback's frames, innermost last, each once (site-packages only)."""
    found: list[str] = []
    seen_tops: set[str] = set()
    n = 0
    while tb is not None and n < _MAX_FRAMES:
        m = _SITE.search(tb.tb_frame.f_code.co_filename)
        if m and m.group("top") not in seen_tops:
            seen_tops.add(m.group("top"))
            dist = _dist_of(m.group("top"))
            if dist and dist not in found:
                found.append(dist)
        tb, n = tb.tb_next, n + 1
    return found


def traceback_conflicts(exc: BaseException) -> list[str]:
    """Requirements of the distributions in ``exc``'s traceback that the installed versions do not meet."""
    from importlib import metadata

    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:  # pragma: no cover - a dependency of nbdebug
        return []
    conflicts = []
    for dist in frame_distributions(exc.__traceback__):
        try:
            version, requires = metadata.version(dist), metadata.requires(dist) or []
        except Exception:  # noqa: BLE001 - a broken dist-info: skip it
            continue
        for line in requires:
            if "extra ==" in line or "extra==" in line:
                continue  # an extra's (most of a big library's lines): not installed with it
            try:
                req = Requirement(line)
                if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                    continue  # an extra's, or another platform's or Python's
                installed = metadata.version(req.name)
            except (InvalidRequirement, metadata.PackageNotFoundError):
                continue  # a package not installed is pip's business, not a mismatch of what is
            except Exception:  # noqa: BLE001 - a marker it cannot evaluate, a broken dist-info
                continue
            if req.specifier and not req.specifier.contains(installed, prereleases=True):
                conflicts.append(f"{dist} {version} requires {req.name}{req.specifier}; installed {req.name} is "
                                 f"{installed}")
    return conflicts


_CONFLICT = re.compile(r"^\S+ \S+ requires (?P<req>[A-Za-z0-9_.\-]+[<>=!~][^;]*?); installed")


def install_command(conflict: str) -> str:
    """The pip command that installs what ``conflict`` (one of ``traceback_conflicts``) says is required."""
    m = _CONFLICT.match(conflict)
    return f"%pip install '{m.group('req')}'" if m else "%pip check, then install what it names"
