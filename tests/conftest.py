"""Shared fixtures: a real IPython shell with nbdebug loaded, and where the shared real data lives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SNAPSHOTS = SHARED / "data" / "snapshots"
IN_CI = os.environ.get("CI") == "true"


@pytest.fixture(scope="session")
def snapshots_dir() -> Path:
    """The real snapshot pickles in ../shared/data/snapshots (never copied into the repository)."""
    if not SNAPSHOTS.is_dir():
        if IN_CI:
            pytest.fail(f"{SNAPSHOTS} is missing in CI; the shared real snapshots are required")
        pytest.skip(f"{SNAPSHOTS} is absent: the shared real snapshots are not next to this checkout")
    return SNAPSHOTS


@pytest.fixture(scope="session")
def shell():
    """One real InteractiveShell for the whole session, with every mime type formatted."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    ip = InteractiveShell.instance(config=config)
    ip.display_formatter.active_types = ip.display_formatter.format_types
    return ip


@pytest.fixture()
def ip(shell):
    """The shell with nbdebug loaded; unloaded again after the test whatever happened."""
    shell.run_line_magic("load_ext", "nbdebug")
    try:
        yield shell
    finally:
        shell.run_line_magic("unload_ext", "nbdebug")
