"""Every tutorial in notebooks/ is executed top to bottom with nbclient; an error in any cell fails it.

Cells that demonstrate an error on purpose carry the tag ``raises-exception`` (nbclient's own convention).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import REPO

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path: Path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    # the kernel imports this checkout's nbdebug, whichever checkout the suite runs from
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
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
