"""Every tutorial in notebooks/ is executed top to bottom with nbclient; an error in any cell fails it.

Each runs as a user who cloned the repository would run it: from a copy of the repository's files with nothing
beside it (no ``../shared``, no other sibling folder), and from a working directory other than ``notebooks/``.
Cells that demonstrate an error on purpose carry the tag ``raises-exception`` (nbclient's own convention).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """The repository's files (tracked and not ignored) copied alone into an empty folder: a plain clone."""
    root = tmp_path_factory.mktemp("plain") / "nbdebug"
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = REPO / rel
        if src.is_file():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, root / rel)
    assert not (root.parent / "shared").exists()
    return root


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path: Path, clone: Path, tmp_path: Path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    # the kernel imports the clone's nbdebug and starts in a folder that is not notebooks/
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(clone), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(clone / "notebooks" / path.name, as_version=4)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(elsewhere)}})
    client.execute()
    errors = [
        (i, out.get("ename"), out.get("evalue"))
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and "raises-exception" not in cell.metadata.get("tags", [])
        for out in cell.get("outputs", [])
        if out.get("output_type") == "error"
    ]
    assert not errors, f"{path.name}: cells raised {errors}"


def test_there_are_tutorials():
    assert NOTEBOOKS, "notebooks/ holds no tutorial"
