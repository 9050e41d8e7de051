"""XLA panels: per-step compile time never shown as a fake 0; a log recorded elsewhere never passes as your code."""

from __future__ import annotations

import nbdebug.examples as ex
import nbdebug.xla as nx
from nbdebug.render import to_html, to_text


def _diagnosis():
    return nx.diagnose(ex.path("xla/xla29_constant_hyperparameter.txt").read_text(),
                       debug_log=ex.path("xla/xla29_constant_hyperparameter.debug.txt").read_text())


def test_per_step_compile_time_is_unknown_from_a_debug_log_not_zero():
    d = _diagnosis()
    assert d.compile_seconds > 1 and d.per_step
    assert all(s.compile_seconds is None for s in d.per_step)  # a debug log records no compile times
    html = to_html(d)
    assert "0.0 us" not in html and "does not record it" in html


def test_frames_of_a_log_recorded_on_another_machine_say_so():
    d = _diagnosis()
    where = d.findings[0].where[0]
    assert where.startswith("scenarios.py:134 in constant_hyperparameter")
    assert "(recorded on another machine)" in where
    assert "/work/wt" not in to_text(d) and "/work/wt" not in to_html(d)  # no path from the recording machine
