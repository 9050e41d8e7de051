"""Real torch_xla 2.9 on the CPU: each scenario's diagnosis from the live API, the text report and the debug log."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from nbdebug.xla import diagnose, parse_report
from tests.conftest import REPO
from tests.xla.scenarios import EXPECTED, SCENARIOS

pytestmark = pytest.mark.xla


def _problems(findings):
    return {f["kind"] if isinstance(f, dict) else f.kind: f["severity"] if isinstance(f, dict) else f.severity
            for f in findings if (f["severity"] if isinstance(f, dict) else f.severity) != "info"}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_live_with_debug_capture(collected, name):
    data = json.loads((collected / f"{name}.live.json").read_text())
    assert _problems(data["diagnosis"]["findings"]) == EXPECTED[name]["L"], data
    assert "debug analysis on" in data["debug_status"]


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_saved_text_report(collected, name):
    text = (collected / f"{name}.report.txt").read_text()
    assert _problems(diagnose(text).findings) == EXPECTED[name]["R"]
    live = json.loads((collected / f"{name}.live.json").read_text())["diagnosis"]
    report = parse_report(text)
    # the live API and the text agree on the headline counts
    assert report.compiles == live["compiles"] and report.steps == live["steps"]
    assert sorted(report.fallback_ops) == sorted(live["fallback_ops"])


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_debug_log(collected, name):
    text = (collected / f"{name}.report.txt").read_text()
    log = (collected / f"{name}.debug.txt").read_text()
    assert "Analysis: " in log
    assert _problems(diagnose(text, debug_log=log).findings) == EXPECTED[name]["RD"]
    assert _problems(diagnose(None, debug_log=log).findings) == EXPECTED[name]["D"]


@pytest.mark.parametrize("name", ["healthy", "short_last_batch", "variable_length", "item_and_print"])
def test_live_in_process_without_debug(name):
    from nbdebug.xla import watch

    with watch(debug=False) as w:
        SCENARIOS[name]()
    d = w.result.diagnosis
    assert _problems(d.findings) == EXPECTED[name]["LN"], str(d)
    assert len(w.result.per_step) == d.steps == 6
    assert sum(s.compiles for s in w.result.per_step) <= d.compiles


def test_fft_really_falls_back_on_29(collected):
    report = parse_report((collected / "fft_fallback.report.txt").read_text())
    assert any(op.startswith("aten::_fft") for op in report.fallback_ops)


def test_text_times_decode_to_the_api_values():
    import torch
    import torch_xla
    import torch_xla.debug.metrics as met

    from nbdebug.core.xla._units import format_time_ns

    dev = torch_xla.device()
    for n in range(3):
        (torch.ones(n + 2, device=dev) * 3).sum().item()
    report = parse_report(met.metrics_report())
    total, acc, samples = met.metric_data("CompileTime")
    assert report.metric("CompileTime").total_samples == total
    assert report.metric("CompileTime").accumulator == pytest.approx(acc / 1e9, abs=1e-9)
    printed = met.metrics_report().split("Metric: CompileTime", 1)[1].split("Accumulator: ", 1)[1].split()[0]
    assert format_time_ns(acc) == printed


def test_xlametrics_magic(shell):
    shell.run_line_magic("load_ext", "nbdebug")
    try:
        shell.user_ns["SCENARIOS"] = SCENARIOS
        # a scenario this process has not run yet: torch_xla's compilation cache lives as long as the process
        result = shell.run_cell_magic("xlametrics", "--no-debug -o xm", "SCENARIOS['constant_hyperparameter']()")
        assert shell.user_ns["xm"] is result
        assert result.diagnosis.finding("recompilation").severity == "error"
        bundle, _ = shell.display_formatter.format(result)
        assert "recompilation" in bundle["text/plain"] and "Per step" in bundle["text/html"]
        with pytest.raises(ZeroDivisionError):
            shell.run_cell_magic("xlametrics", "--no-debug", "1/0")
    finally:
        shell.run_line_magic("unload_ext", "nbdebug")


def test_watch_switches_debug_on_when_nothing_ran_yet(tmp_path):
    code = textwrap.dedent("""
        import json, os
        os.environ.pop("PT_XLA_DEBUG", None); os.environ.pop("PT_XLA_DEBUG_LEVEL", None)
        import torch_xla
        from nbdebug.xla import watch
        from tests.xla.scenarios import SCENARIOS
        with watch() as w:
            SCENARIOS["item_and_print"]()
        with watch() as w2:   # the setting stays on for the process
            SCENARIOS["healthy"]()
        print(json.dumps({"status": w.result.debug_status, "log": w.result.debug_log,
                          "lines": [l for f in w.result.findings for l in f.where], "log2": w2.result.debug_log}))
    """)
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("PT_XLA_DEBUG")}
    env.update(PJRT_DEVICE="CPU", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "switched on" in data["status"]
    assert "Compilation Analysis" not in proc.stderr  # written to its own file, not to the notebook's stderr
    assert "Execution Analysis: " in data["log"] and "Compilation Analysis: " in data["log2"]
    assert any("scenarios.py" in line for line in data["lines"])


def test_debug_off_after_first_execution_says_how_to_enable(tmp_path):
    code = textwrap.dedent("""
        import json, torch, torch_xla
        (torch.ones(2, device=torch_xla.device()) + 1).sum().item()   # torch_xla has run: the switch is read
        from nbdebug.xla import watch
        from tests.xla.scenarios import SCENARIOS
        with watch() as w:
            SCENARIOS["healthy"]()
        print(json.dumps({"status": w.result.debug_status, "notes": w.result.diagnosis.notes}))
    """)
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("PT_XLA_DEBUG")}
    env.update(PJRT_DEVICE="CPU", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "PT_XLA_DEBUG_LEVEL=2" in data["status"] and "restart" in data["status"]
