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


class _Recorder:
    """A recorder that says what its exit saw, and can fail to start."""

    def __init__(self, fail_start=None):
        self.fail_start, self.exit_saw = fail_start, "not exited"

    def __enter__(self):
        if self.fail_start is not None:
            raise self.fail_start
        return self

    def __exit__(self, tp, value, tb):
        self.exit_saw = value


def test_a_recorder_that_cannot_start_raises_its_own_error_before_the_body_runs(shell):
    # (it used to be taken for the recorder's verdict at the stop: re-pointed at the cell's last line, and a
    # report of nothing recorded shown above it)
    err = RuntimeError("the live panel cannot be shown")
    rec, reports = _Recorder(fail_start=err), []
    shell.user_ns.pop("ran_body", None)
    with capture_output() as out, pytest.raises(RuntimeError) as info:
        run_body(shell, "ran_body = True", magic="t", context=rec, report=reports.append)
    assert info.value is err and info.traceback[-1].name == "__enter__"  # its own traceback, not re-pointed
    assert "ran_body" not in shell.user_ns and reports == [] and not out.outputs
    assert rec.exit_saw == "not exited"


def test_the_recorder_sees_the_bodys_error_as_a_with_statement_shows_it(shell):
    rec = _Recorder()
    with capture_output(), pytest.raises(ZeroDivisionError) as info:
        run_body(shell, "1/0", magic="t", context=rec)
    assert rec.exit_saw is info.value
    rec = _Recorder()
    run_body(shell, "pass", magic="t", context=rec)
    assert rec.exit_saw is None


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
