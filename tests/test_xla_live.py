"""The live-metrics plumbing without torch_xla: snapshot differences, percentiles, per-step rows, fd capture."""

from __future__ import annotations

import os
import sys

import pytest

from nbdebug.core.xla import live
from nbdebug.core.xla.live import Snapshot, _FdCapture, _percentiles, _step_stats, _to_report


def _snap(t, counters, metrics):
    return Snapshot(t, counters, metrics)


def test_percentiles_follow_torch_xla_rule():
    # sorted_samples[floor(p * n)], no interpolation: with 4 samples the 50% one is the third
    values = [4.0, 1.0, 3.0, 2.0]
    got = dict(_percentiles(values))
    assert got[1.0] == 1.0 and got[50.0] == 3.0 and got[99.0] == 4.0
    assert _percentiles([]) == ()


def test_difference_report_and_units():
    before = _snap(10.0, {"MarkStep": 2, "CachedCompile": 1}, {"CompileTime": (1, 5e8, ((9.0, 5e8),))})
    after = _snap(
        20.0,
        {"MarkStep": 5, "CachedCompile": 3, "aten::nonzero": 3, "xla::add": 7},
        {"CompileTime": (3, 5e8 + 3e9, ((9.0, 5e8), (11.0, 1e9), (12.0, 2e9))),
         "InboundData": (2, 8.0, ((11.0, 4.0), (12.0, 4.0)))},
    )
    report = _to_report(after, before)
    assert report.layout == "live" and report.steps == 3 and report.cache_hits == 2
    assert report.compiles == 2 and report.compile_seconds == pytest.approx(3.0)
    ct = report.metric("CompileTime")
    assert ct.unit == "s" and [v for _, v in ct.percentiles][-1] == pytest.approx(2.0)  # only the cell's samples
    assert report.metric("InboundData").unit == "B"
    assert report.fallback_ops == {"aten::nonzero": 3}


def test_step_rows():
    a = _snap(0, {"ExecuteComputation": 1}, {"CompileTime": (1, 1e9, ())})
    b = _snap(1, {"ExecuteComputation": 3, "aten::_fft_r2c": 2, "aten::_local_scalar_dense": 5},
              {"CompileTime": (2, 3e9, ()), "TransferFromDeviceTime": (4, 1.0, ())})
    row = _step_stats(7, a, b)
    assert (row.step, row.compiles, row.executions, row.transfers_from_device, row.fallback_calls) == (7, 1, 2, 4, 2)
    assert row.compile_seconds == pytest.approx(2.0)


def test_debug_status_messages(monkeypatch):
    monkeypatch.delenv("PT_XLA_DEBUG", raising=False)
    monkeypatch.delenv("PT_XLA_DEBUG_FILE", raising=False)
    monkeypatch.setenv("PT_XLA_DEBUG_LEVEL", "2")
    on, msg = live.debug_status(None)
    assert on and "first execution" in msg
    monkeypatch.delenv("PT_XLA_DEBUG_LEVEL")
    ran = _snap(0, {"ExecuteComputation": 4}, {"ExecuteTime": (4, 1.0, ())})
    on, msg = live.debug_status(ran)
    assert not on and "%env PT_XLA_DEBUG_LEVEL=2" in msg and "restart" in msg
    fresh = _snap(0, {}, {})
    on, msg = live.debug_status(fresh)
    assert on and "switched on" in msg and os.environ["PT_XLA_DEBUG_LEVEL"] == "2"
    # the analysis goes to a file of its own rather than to the notebook's stderr
    assert os.path.exists(os.environ["PT_XLA_DEBUG_FILE"]) and os.environ["PT_XLA_DEBUG_FILE"] in msg
    os.unlink(os.environ["PT_XLA_DEBUG_FILE"])


def test_fd_capture_keeps_debug_lines_and_gives_back_the_rest(capfd):
    cap = _FdCapture()
    cap.start()
    os.write(2, b"Compilation Analysis: Compilation Cause\nsome other C++ warning\n")
    os.write(1, b"pt-xla-profiler: CompileTime too frequent: 9 counts during 10 steps\nuser output\n")
    got = cap.stop()
    sys.stdout.flush()
    out, err = capfd.readouterr()
    assert "Compilation Analysis: Compilation Cause" in got and "pt-xla-profiler: CompileTime" in got
    assert "some other C++ warning" in err and "user output" in out
    assert "Compilation Analysis" not in err


def test_available_does_not_import_torch_xla():
    before = "torch_xla" in sys.modules
    live.available()
    assert ("torch_xla" in sys.modules) == before


class _FakeWatch:
    """Stands in for ``watch`` where torch_xla is not installed: records that the cell ran inside it."""

    def __init__(self, steps=None, debug=True):
        self.result = None
        self.inside = False

    def __enter__(self):
        self.inside = True
        return self

    def __exit__(self, *exc):
        from pathlib import Path

        from nbdebug.xla import XlaCellReport, diagnose, parse_report

        self.inside = False
        text = (Path(__file__).parent / "data" / "xla" / "xla29_item_and_print.txt").read_text()
        self.result = XlaCellReport(diagnose(text), parse_report(text), debug_status="fake")


@pytest.fixture()
def fake_watch(monkeypatch):
    made = []

    def factory(**kwargs):
        made.append(_FakeWatch(**kwargs))
        return made[-1]

    monkeypatch.setattr(live, "available", lambda: True)
    monkeypatch.setattr(live, "watch", factory)
    return made


def test_xlametrics_shows_the_report_then_reraises(ip, fake_watch):
    from IPython.utils.capture import capture_output

    with capture_output() as cap:
        res = ip.run_cell("%%xlametrics -o xm\nseen = !echo hi\nraise RuntimeError('in the cell')\n")
    assert isinstance(res.error_in_exec, RuntimeError) and str(res.error_in_exec) == "in the cell"
    assert list(ip.user_ns["seen"]) == ["hi"]  # shell syntax works inside the magic's cell
    (w,) = fake_watch
    assert not w.inside and ip.user_ns["xm"] is w.result  # the context was left, the report bound
    shown = [o.data.get("text/plain", "") for o in cap.outputs]
    assert len(shown) == 1 and "host_sync" in shown[0]


def test_xlametrics_returns_the_report(ip, fake_watch):
    result = ip.run_cell_magic("xlametrics", "--steps 6", "x = 1")
    assert result is fake_watch[0].result and ip.user_ns["x"] == 1
    bundle, _ = ip.display_formatter.format(result)
    assert "host_sync" in bundle["text/plain"] and "nbd-findings" in bundle["text/html"]
