"""The diagnosis panel under a failing cell: shown after the untouched traceback, never breaking the session."""

from __future__ import annotations

import re

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

SHAPE_CELL = "import torch\ntorch.randn(4, 10) @ torch.randn(20, 5)\n"


def _diagnoses(out):
    return [o for o in out.outputs if "nbdebug" in o.data.get("text/plain", "")]


def test_failing_cell_shows_traceback_then_diagnosis(ip):
    with capture_output() as out:
        result = ip.run_cell(SHAPE_CELL)
    assert isinstance(result.error_in_exec, RuntimeError)
    # IPython printed the user's own traceback, unchanged
    assert "mat1 and mat2 shapes cannot be multiplied" in out.stdout + out.stderr
    assert "Traceback" in out.stdout + out.stderr or "RuntimeError" in out.stdout + out.stderr
    shown = _diagnoses(out)
    assert len(shown) == 1
    assert "shape_mismatch" in shown[0].data["text/plain"]
    assert "nbd-diagnosis" in shown[0].data["text/html"]


def test_explain_off_shows_nothing_extra(ip):
    ip.run_line_magic("nbdebug", "explain off")
    try:
        with capture_output() as out:
            ip.run_cell(SHAPE_CELL)
        assert _diagnoses(out) == []
        assert "mat1 and mat2" in out.stdout + out.stderr
    finally:
        ip.run_line_magic("nbdebug", "explain on")


def test_unknown_errors_stay_quiet_unless_asked(ip):
    with capture_output() as out:
        ip.run_cell("undefined_name_xyz")
    assert _diagnoses(out) == []
    ip.run_line_magic("nbdebug", "explain all")
    try:
        with capture_output() as out:
            ip.run_cell("undefined_name_xyz")
        (shown,) = _diagnoses(out)
        assert "no known diagnosis" in shown.data["text/plain"]
    finally:
        from nbdebug.ipython._extension import get_state

        get_state(ip).explainer.show_unknown = False


def test_explainer_failure_is_one_line_and_keeps_the_error(ip, monkeypatch):
    import nbdebug.core.explain as fixes

    def broken(*a, **k):
        raise ValueError("planted failure")

    monkeypatch.setattr(fixes, "explain", broken)
    with capture_output() as out:
        result = ip.run_cell(SHAPE_CELL)
    assert isinstance(result.error_in_exec, RuntimeError)
    text = out.stdout + out.stderr
    assert "mat1 and mat2 shapes cannot be multiplied" in text
    failed = [line for line in text.splitlines() if line.startswith("nbdebug:")]
    assert failed == ["nbdebug: the diagnosis failed (ValueError: planted failure); the error above is unchanged."]


def test_keyboard_interrupt_is_not_diagnosed(ip):
    with capture_output() as out:
        ip.run_cell("raise KeyboardInterrupt")
    assert _diagnoses(out) == []


def test_explain_magic_on_pasted_text_and_last_error(ip):
    d = ip.run_cell_magic("explain", "", "[rank0]: RuntimeError: CUDA error: device-side assert triggered\n")
    assert d.kind == "device_side_assert"
    with capture_output():
        ip.run_cell(SHAPE_CELL)
    last = ip.run_line_magic("explain", "")
    assert last.kind == "shape_mismatch"
    bundle, _ = ip.display_formatter.format(last)
    assert {"text/plain", "text/html"} <= set(bundle)


def test_explain_magic_with_no_error_yet_is_a_usage_error(shell, monkeypatch):
    import sys

    monkeypatch.delattr(sys, "last_value", raising=False)
    monkeypatch.delattr(sys, "last_exc", raising=False)
    shell.run_line_magic("load_ext", "nbdebug")
    try:
        with pytest.raises(UsageError, match="no error has been raised yet"):
            shell.run_line_magic("explain", "")
    finally:
        shell.run_line_magic("unload_ext", "nbdebug")


def test_status_names_the_explain_mode(ip):
    from nbdebug.ipython._extension import get_state

    try:
        status = ip.run_line_magic("nbdebug", "explain all")
        assert status.state("explain") == "all"
        assert "explain    all" in str(status)
        bundle, _ = ip.display_formatter.format(status)
        assert re.search(r"<td[^>]*>all</td>", bundle["text/html"])  # cells may carry inline styles
        assert "explain all" in repr(status)
        back = ip.run_line_magic("nbdebug", "explain on")  # "on" leaves the "all" mode
        assert back.state("explain") == "on" and not get_state(ip).explainer.show_unknown
        assert ip.run_line_magic("nbdebug", "explain off").state("explain") == "off"
    finally:
        ip.run_line_magic("nbdebug", "explain on")
        get_state(ip).explainer.show_unknown = False


def test_bad_switch_word_is_a_usage_error(ip):
    with pytest.raises(UsageError, match="expected 'on', 'off' or 'all'"):
        ip.run_line_magic("nbdebug", "explain loud")


def test_nbdebug_usage_errors_get_no_diagnosis_even_with_all(ip):
    from nbdebug.ipython._extension import get_state

    ip.run_line_magic("nbdebug", "explain all")
    try:
        with capture_output() as out:
            result = ip.run_cell("%nbdebug nosuchfeature on")
        assert isinstance(result.error_in_exec, UsageError)
        assert "unknown feature" in out.stdout + out.stderr
        assert _diagnoses(out) == []
        assert "no known diagnosis" not in out.stdout + out.stderr
    finally:
        get_state(ip).explainer.show_unknown = False


UNPRINTABLE = '''
class Unprintable(Exception):
    def __str__(self):
        raise {inner}("from __str__")

raise Unprintable("x")
'''


@pytest.mark.parametrize("inner", ["KeyboardInterrupt", "RuntimeError"])
def test_exception_whose_str_raises_does_not_escape_run_cell(ip, inner):
    from nbdebug.ipython._extension import get_state

    ip.run_line_magic("nbdebug", "explain all")  # the unknown path formats the exception too
    try:
        with capture_output() as out:
            result = ip.run_cell(UNPRINTABLE.format(inner=inner))
        assert type(result.error_in_exec).__name__ == "Unprintable"
        assert ip.run_cell("1 + 1").result == 2  # the session goes on
        shown = _diagnoses(out)
        assert len(shown) == 1 and "Unprintable" in shown[0].data["text/plain"]
    finally:
        get_state(ip).explainer.show_unknown = False


def test_explain_survives_unprintable_exceptions_directly():
    from nbdebug.core.explain import explain

    class Unprintable(Exception):
        def __str__(self):
            raise KeyboardInterrupt

    d = explain(Unprintable())
    assert d.exception_type.endswith("Unprintable") and not d.known


KERNEL_ARGV = ["/env/lib/python3.11/site-packages/ipykernel_launcher.py", "-f",
               "/home/u/.local/share/jupyter/runtime/kernel-0a1b2c3d-0000-4000-8000-000000000000.json"]


def test_argparse_reading_the_kernels_command_line_gets_its_panel(ip, monkeypatch):
    # the commonest notebook SystemExit: a script's parser pasted into a cell reads the kernel's own argv
    monkeypatch.setattr("sys.argv", KERNEL_ARGV)
    cell = ("import argparse\np = argparse.ArgumentParser()\np.add_argument('--lr', type=float, default=0.1)\n"
            "args = p.parse_args()\n")
    with capture_output() as out:
        result = ip.run_cell(cell)
    assert isinstance(result.error_in_exec, SystemExit)
    assert "unrecognized arguments: -f" in out.stderr  # argparse's own message, untouched
    (shown,) = _diagnoses(out)
    assert "argparse_in_notebook" in shown.data["text/plain"]
    assert "parse_args" in shown.data["text/plain"]


def test_a_cells_own_sys_exit_gets_no_panel_even_with_explain_all(ip, monkeypatch):
    monkeypatch.setattr("sys.argv", KERNEL_ARGV)
    ip.run_line_magic("nbdebug", "explain all")
    try:
        for cell in ("import sys\nsys.exit(2)", "raise SystemExit('done')", "import sys\nsys.exit(0)"):
            with capture_output() as out:
                result = ip.run_cell(cell)
            assert isinstance(result.error_in_exec, SystemExit)
            assert _diagnoses(out) == []
    finally:
        from nbdebug.ipython._extension import get_state

        get_state(ip).explainer.show_unknown = False
