"""Real example data for the tutorials, shipped with the package so they run from a plain clone or a pip install.

- ``xla/``: torch_xla metrics reports and debug logs saved from torch_xla 2.9 on CPU, and one from 2020.
- ``dist/``: ``NCCL_DEBUG=INFO`` logs from public GitHub issues (each file names its source on its first line), and
  two artifact folders of a real 4-rank job (``postmortem_hang``, ``postmortem_crash``; see ``dist/POSTMORTEM.md``).
- ``errors/``: an error log from a public GitHub issue (its source on the first line).
- ``snapshots/``: three real CUDA memory snapshots (``torch.cuda.memory._dump_snapshot``) from permissively
  licensed public repositories (``transformer_step.pickle``, recorded with Python stacks, is the tutorial's); see
  ``snapshots/SOURCES.md`` for where they come from and their licences.

``path("xla/xla29_missing_sync.txt")`` gives a file's path; ``names("xla")`` lists a folder;
``folder("dist/postmortem_hang")`` gives a folder of files.
"""

from __future__ import annotations

from importlib.resources import as_file, files
from pathlib import Path

__all__ = ["path", "names", "folder"]

_FOLDERS = ("xla", "dist", "errors", "snapshots")


def path(name: str) -> Path:
    """The path of the example file ``name`` (``"folder/file"``); ``FileNotFoundError`` lists what there is."""
    resource = files(__name__).joinpath(*name.split("/"))
    if not resource.is_file():
        folder = name.split("/")[0]
        known = ", ".join(names(folder)) if folder in _FOLDERS else ", ".join(_FOLDERS)
        raise FileNotFoundError(f"no example {name!r}; there are: {known}")
    with as_file(resource) as p:  # a real file on disk for installed packages (zip installs are extracted)
        return Path(p)


def names(folder: str) -> list[str]:
    """The example files in ``folder`` (one of xla, dist, errors, snapshots), as ``"folder/file"`` names."""
    if folder not in _FOLDERS:
        raise ValueError(f"unknown example folder {folder!r}; expected one of {', '.join(_FOLDERS)}")
    root = files(__name__).joinpath(folder)
    return sorted(f"{folder}/{r.name}" for r in root.iterdir() if r.is_file() and not r.name.endswith(".md"))


def folder(name: str) -> Path:
    """The path of the example folder ``name`` (``"dist/postmortem_hang"``); ``FileNotFoundError`` if absent."""
    resource = files(__name__).joinpath(*name.split("/"))
    if not resource.is_dir():
        raise FileNotFoundError(f"no example folder {name!r}; there are: dist/postmortem_hang, dist/postmortem_crash")
    return Path(str(resource))
