"""Every tutorial in notebooks/ is executed top to bottom with nbclient; an error in any cell fails it.

Each runs as a user who cloned the repository would run it: from a copy of the repository's files with nothing
beside it (no ``../shared``, no other sibling folder), and from a working directory other than ``notebooks/``.
Cells that demonstrate an error on purpose carry the tag ``raises-exception`` (nbclient's own convention).
"""

from __future__ import annotations

import os
import re
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
    # issue 26, item 14: the outputs read well where no script or stylesheet runs (GitHub, nbviewer)
    unreadable = [(i, why) for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
                  for out in cell.get("outputs", []) for why in [without_scripts(out)] if why]
    assert not unreadable, f"{path.name}: outputs that need a script or a stylesheet: {unreadable}"
    static_html(nb, path.stem, tmp_path)


# an object's default repr, or a matplotlib Figure's stand-in for its picture: no words for a reader
_BARE_REPR = re.compile(r"^<[\w.]+ (?:object )?at 0x[0-9a-f]+>$|^<Figure size [0-9.]+x[0-9.]+ with [0-9]+ Axes>$")


def without_scripts(out) -> str:
    """Why an output would not read where no script or stylesheet runs (GitHub, nbviewer), or ''.

    Every rich output must also carry a picture, or a plain-text form with words in it: nbviewer and GitHub drop
    scripts, and a sanitising renderer drops ``<style>`` and inline SVG.  An output that is a script or a widget
    and nothing else would be an empty box there.
    """
    if out.get("output_type") not in ("display_data", "execute_result"):
        return ""
    data = out.get("data", {})
    if any(k.startswith("image/") and data[k] for k in data):
        return ""
    text = str(data.get("text/plain", "")).strip()
    if not text or _BARE_REPR.match(text):
        kinds = ", ".join(sorted(data))
        return f"no picture and no words ({kinds}): {text[:60]!r}"
    html = str(data.get("text/html", ""))
    if html and re.search(r"<script\b", html) and "hidden" not in html and "<img" not in html:
        # a panel built by its script: the static fallback must be in the HTML itself, or in the text
        if not re.sub(r"<script\b.*?</script>|<style\b.*?</style>|<[^>]+>", "", html, flags=re.S).strip():
            return "its HTML is only a script"
    return ""


def static_html(nb, name: str, tmp_path: Path) -> Path:
    """The executed notebook as one static HTML page with every script removed, as nbviewer without JavaScript
    shows it (kept in NBDEBUG_SHOTS_DIR when that is set, to look at)."""
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter(template_name="classic").from_notebook_node(nb)
    body = re.sub(r"<script\b.*?</script>", "", body, flags=re.S | re.I)
    folder = Path(os.environ["NBDEBUG_SHOTS_DIR"]) if os.environ.get("NBDEBUG_SHOTS_DIR") else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    page = folder / f"{name}.static.html"
    page.write_text(body, encoding="utf-8")
    return page


def test_there_are_tutorials():
    assert NOTEBOOKS, "notebooks/ holds no tutorial"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_tutorial_text_names_nothing_the_reader_lacks(path: Path):
    # issue 26, item 12: the tour's introduction spoke of "playbooks", documents a reader of the tutorials never had
    import nbformat

    nb = nbformat.read(path, as_version=4)
    words = "\n".join(c.source for c in nb.cells)
    assert not re.search(r"playbook|shared/notes|\.\./shared|seed:", words, re.I), path.name
