"""torch_xla integration tests: run only in the .venv-xla environment (``make test-xla``); never skipped in CI."""

from __future__ import annotations

import importlib.util
import os

import pytest

IN_CI = os.environ.get("CI") == "true"

if importlib.util.find_spec("torch_xla") is None:
    if IN_CI:
        raise RuntimeError("tests/xla need torch_xla (make test-xla builds .venv-xla); it is missing in CI")
    collect_ignore_glob = ["test_*.py"]  # outside CI, without torch_xla: nothing to run here

os.environ.setdefault("PJRT_DEVICE", "CPU")


@pytest.fixture(scope="session")
def collected(tmp_path_factory):
    """Every scenario run once, each under PT_XLA_DEBUG=1, with its report, debug log and live diagnosis."""
    from tests.xla.collect import collect_all

    out = tmp_path_factory.mktemp("xla_scenarios")
    collect_all(out)
    return out
