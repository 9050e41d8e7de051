"""``ipython/_cell.run_body``: the one way a cell magic runs its body (IPython's ``%%time`` pattern)."""

from __future__ import annotations

import re
from contextlib import contextmanager

import pytest
from IPython.utils.capture import capture_output

from nbdebug.ipython._cell import run_body

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@contextmanager
def recording(log):
    log.append("start")
    try:
        yield
    finally:
        log.append("stop")


def test_body_runs_with_ipython_syntax_and_returns_the_report(shell):
    log = []
    result = run_body(shell, "x_cell = !echo hi\ny_cell = len(x_cell)", magic="t", context=recording(log),
                      report=lambda err: ("report", err), output="bound")
    assert result == ("report", None)
    assert shell.user_ns["x_cell"] == ["hi"] and shell.user_ns["bound"] == ("report", None)
    assert log == ["start", "stop"]


@pytest.mark.parametrize("exc", [ValueError("boom"), KeyboardInterrupt()])
def test_a_failing_body_shows_the_report_then_reraises_the_users_error(shell, exc):
    log = []
    shell.user_ns["_exc"] = exc
    with capture_output() as out, pytest.raises(type(exc)) as info:
        run_body(shell, "raise _exc", magic="t", context=recording(log), report=lambda err: f"saw {err!r}")
    assert info.value is exc
    assert log == ["start", "stop"]
    assert any(f"saw {exc!r}" in o.data.get("text/plain", "") for o in out.outputs)


def test_a_failing_report_never_replaces_the_users_error(shell):
    def broken(err):
        raise RuntimeError("report broke")

    with capture_output() as out, pytest.raises(ZeroDivisionError):
        run_body(shell, "1/0", magic="t", report=broken)
    assert "no report (RuntimeError: report broke)" in out.stderr
    with pytest.raises(RuntimeError, match="report broke"):  # without a user error the report's own error shows
        run_body(shell, "pass", magic="t", report=broken)


def test_the_body_is_filed_under_the_running_cells_number(shell):
    shell.run_line_magic("load_ext", "nbdebug")
    try:
        shell.run_cell("pass", store_history=True)
        with capture_output() as out:
            result = shell.run_cell("%%memtrace --device cpu\n1/0", store_history=True)
        cells = set(re.findall(r"Cell In\[(\d+)\]", ANSI.sub("", out.stdout + out.stderr)))
        assert cells == {str(result.execution_count)}, cells
    finally:
        shell.run_line_magic("unload_ext", "nbdebug")
