"""Every tutorial runs in an environment built from binder/ alone, as Binder builds it (``make test-binder``).

``make test-binder`` makes a fresh virtual environment, installs ``binder/requirements.txt`` and runs
``binder/postBuild`` in it from the repository's root (pip's own cache keeps the rebuild short), then runs this file
with ``NBDEBUG_BINDER_PYTHON`` set to that environment's python.  Each notebook in notebooks/ is executed there
with nbclient, in notebooks/ as Binder opens it, with nothing from this checkout's own environment on the path: a
module the tutorials import but the package's ``tutorials`` extra lacks fails here.  Without the variable (the plain
``pytest`` run, which has no such environment) the test is deselected (the ``binder`` marker); ``make test`` runs it
through ``test-binder``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
BINDER_PYTHON = os.environ.get("NBDEBUG_BINDER_PYTHON")

# selected by `make test-binder` (`-m binder`) and deselected in a plain run (pyproject's addopts): there is no
# Binder environment to run them in
needs_binder_env = pytest.mark.binder

# run inside the Binder environment: execute one notebook with that environment's own kernel, list the errors
DRIVER = r"""
import json, sys
import nbformat
from nbclient import NotebookClient
path = sys.argv[1]
nb = nbformat.read(path, as_version=4)
NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": sys.argv[2]}}).execute()
errors = [(i, o.get("ename"), o.get("evalue")) for i, c in enumerate(nb.cells)
          if c.cell_type == "code" and "raises-exception" not in c.metadata.get("tags", [])
          for o in c.get("outputs", []) if o.get("output_type") == "error"]
print(json.dumps(errors))
"""


def test_binder_environment_is_built_from_the_package_extras():
    requirements = (REPO / "binder" / "requirements.txt").read_text()
    post = (REPO / "binder" / "postBuild").read_text()
    assert ".[tutorials]" in post  # one list of what the tutorials need: the extra in pyproject.toml
    listed = [ln for ln in requirements.splitlines() if ln.strip() and not ln.startswith(("#", "--"))]
    assert listed == ["torch==2.13.0+cpu"], listed


@needs_binder_env
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
@pytest.mark.timeout(900)
def test_tutorial_runs_in_the_binder_environment(path: Path, tmp_path: Path):
    assert BINDER_PYTHON, "NBDEBUG_BINDER_PYTHON is not set: run `make test-binder` (an environment built from binder/)"
    # a copy of notebooks/, so that what a tutorial writes beside itself (lightning_logs/, ...) stays out of the checkout
    shutil.copytree(path.parent, tmp_path / "notebooks")
    path = tmp_path / "notebooks" / path.name
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "NBDEBUG_SCREENSHOTS")}
    env["PATH"] = os.pathsep.join([str(Path(BINDER_PYTHON).parent), env.get("PATH", "")])
    env["MPLBACKEND"] = "Agg"
    done = subprocess.run([BINDER_PYTHON, "-c", DRIVER, str(path), str(path.parent)], env=env, cwd=path.parent,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{path.name}:\n{done.stderr[-4000:]}"
    errors = done.stdout.strip().splitlines()[-1]
    assert errors == "[]", f"{path.name}: cells raised {errors}"
