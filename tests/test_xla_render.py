"""Text renderers against golden files; rewrite them with NBDEBUG_UPDATE_GOLDEN=1 after a deliberate change."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nbdebug.xla import diagnose, parse_report

DATA = Path(__file__).parent / "data" / "xla"
GOLDEN = DATA / "golden"
UPDATE = os.environ.get("NBDEBUG_UPDATE_GOLDEN") == "1"

CASES = {
    "diagnosis_variable_length": lambda: str(diagnose((DATA / "xla29_variable_length.txt").read_text())),
    "diagnosis_item_and_print": lambda: str(diagnose((DATA / "xla29_item_and_print.txt").read_text())),
    "diagnosis_boolean_mask": lambda: str(diagnose((DATA / "xla29_boolean_mask.txt").read_text())),
    "diagnosis_healthy": lambda: str(diagnose((DATA / "xla29_healthy.txt").read_text())),
    "report_era2020_xrt": lambda: str(parse_report((DATA / "era2020_xrt_issue2019.txt").read_text())),
    "report_xla29_short": lambda: str(parse_report((DATA / "xla29_short.txt").read_text())),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name):
    text = CASES[name]() + "\n"
    path = GOLDEN / f"{name}.txt"
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"{path} is missing: run with NBDEBUG_UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text()
