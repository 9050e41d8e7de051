"""Hostile inputs to the torch_xla readers (issue 15): numbers too long or not ASCII digits never crash ``diagnose``
or the CLI with a raw traceback; they give ``ReportParseError`` or leave the field out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nbdebug.errors import ReportParseError
from nbdebug.xla import diagnose, parse_debug_log, parse_report

DATA = Path(__file__).parent / "data" / "xla"
REPO = Path(__file__).resolve().parents[1]
HEALTHY = (DATA / "xla29_healthy.txt").read_text()
HEALTHY_LOG = (DATA / "xla29_healthy.debug.txt").read_text()

BAD_REPORTS = {
    "time_of_400_nines": HEALTHY.replace("Accumulator: 083.790us", "Accumulator: " + "9" * 400 + "us", 1),
    "time_part_of_400_nines": HEALTHY.replace("Accumulator: 083.790us", "Accumulator: " + "9" * 400 + "s083.790us", 1),
    "counter_of_401_digits": HEALTHY.replace("  Value: 6", "  Value: 1" + "0" * 400, 1),
    "samples_of_5000_digits": HEALTHY.replace("TotalSamples: 12", "TotalSamples: " + "7" * 5000, 1),
    "step_of_5000_digits": "[MetricsData; step=" + "3" * 5000 + "]\n" + HEALTHY,
    "superscript_counter": HEALTHY.replace("  Value: 6", "  Value: \u00b2", 1),
    "percent_of_400_digits": HEALTHY.replace("Percentiles: 1%=", "Percentiles: " + "1" * 400 + "%=", 1),
    "bytes_of_400_digits": HEALTHY.replace("Accumulator: 12.00", "Accumulator: " + "9" * 400 + "GB", 1),
}


def test_the_inputs_really_changed_the_report():
    for name, text in BAD_REPORTS.items():
        assert text != HEALTHY, name


@pytest.mark.parametrize("name", sorted(BAD_REPORTS))
def test_bad_numbers_in_a_report_are_a_parse_error(name):
    with pytest.raises(ReportParseError) as info:
        diagnose(BAD_REPORTS[name])
    assert "line" in str(info.value) or "step" in str(info.value)


BAD_LOGS = {
    "superscript_inputs": ("Number of Graph Inputs: 8", "Number of Graph Inputs: \u00b2"),
    "inputs_of_5000_digits": ("Number of Graph Inputs: 8", "Number of Graph Inputs: " + "8" * 5000),
    "frame_line_of_5000_digits": ("scenarios.py:40)", "scenarios.py:" + "4" * 5000 + ")"),
    "frame_line_in_arabic_digits": ("scenarios.py:40)", "scenarios.py:\u0664\u0660)"),
}


@pytest.mark.parametrize("name", sorted(BAD_LOGS))
def test_bad_numbers_in_a_debug_log_leave_the_field_out(name):
    old, new = BAD_LOGS[name]
    assert old in HEALTHY_LOG
    log = parse_debug_log(HEALTHY_LOG.replace(old, new, 1))
    good = parse_debug_log(HEALTHY_LOG)
    assert len(log.events) == len(good.events)
    first, was = log.events[0], good.events[0]
    if "inputs" in name:
        assert first.n_inputs is None and was.n_inputs == 8
    else:
        assert len(first.frames) == len(was.frames) - 1 and all(f.line < 10**9 for f in first.frames)
    assert diagnose(HEALTHY, debug_log=log).ok


@pytest.mark.parametrize("name", ["time_of_400_nines", "step_of_5000_digits", "counter_of_401_digits"])
def test_cli_says_what_is_wrong_without_a_traceback(tmp_path, name):
    path = tmp_path / "report.txt"
    path.write_text(BAD_REPORTS[name])
    proc = subprocess.run([sys.executable, "-m", "nbdebug", "xla", str(path)], capture_output=True, text=True,
                          cwd=REPO, timeout=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "torch_xla metrics report" in proc.stderr


def test_cli_with_a_bad_debug_log(tmp_path):
    path = tmp_path / "debug.txt"
    path.write_text(HEALTHY_LOG.replace("Number of Graph Inputs: 8", "Number of Graph Inputs: \u00b2"))
    proc = subprocess.run([sys.executable, "-m", "nbdebug", "xla", str(DATA / "xla29_healthy.txt"), "--debug-log",
                           str(path)], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]


def test_plain_parse_report_agrees():
    with pytest.raises(ReportParseError):
        parse_report(BAD_REPORTS["step_of_5000_digits"])


@pytest.mark.parametrize("kwargs", [
    {"report_or_text": b"Metric: CompileTime"},
    {"report_or_text": 42},
    {"report_or_text": HEALTHY, "debug_log": ["Compilation Analysis"]},
    {"report_or_text": HEALTHY, "steps": -1},
    {"report_or_text": HEALTHY, "steps": 2.5},
])
def test_bad_arguments_say_what_was_expected(kwargs):
    from nbdebug.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="expected"):
        diagnose(**kwargs)
