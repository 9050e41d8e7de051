"""The cell-magic contract, checked on every cell magic nbdebug registers (IPython's ``%%time`` pattern).

The magics are read from the shell's magics manager after ``%load_ext nbdebug``, so a new cell magic is covered
the day it is registered: it is either run here (``CASES``) or named in ``NOT_RUN`` with the reason, and
``test_every_registered_cell_magic_is_run_or_named_with_its_reason`` fails otherwise.  Each magic that runs a body
in the kernel is checked for:

- the report: returned (IPython shows it as the cell's output) and bound by ``-o NAME``;
- a trailing ``;`` silences the output (``-o`` still binds the report);
- a user exception: the report is shown, then the user's own exception is raised with the user's frame on top of
  the traceback (not nbdebug's);
- state restored, on success and on error: hooks off, recording off, profiler off, grad / inference / anomaly modes,
  torch function and dispatch modes and torch's log handlers as they were;
- an AST transformer registered in ``shell.ast_transformers`` is applied inside the cell.
"""

from __future__ import annotations

import ast
import logging
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn
from IPython.utils.capture import capture_output

import nbdebug
from nbdebug.core._recorder import Recorder

# nbdebug's cell magics that run no body in the kernel, and why the contract above does not apply to them
NOT_RUN = {
    "explain": "%%explain reads a pasted log or traceback as text; it runs nothing",
    "torchrun": "%%torchrun runs the body in N fresh rank processes, never in the kernel, so there is no user "
                "exception, hook or mode in the kernel to check; its own contract (a DistRun returned and bound, "
                "no rank left running) is tests/test_dist_run.py's",
}

OK_BODY = (
    "contract_loss = contract_model(torch.randn(2, 4)).sum()\n"
    "contract_loss.backward(); contract_opt.step(); contract_opt.zero_grad()\n"
    "seen_by_ast = CONTRACT_MARK"
)
FAILING_BODY = "contract_model(torch.randn(2, 4)).sum().backward()\nraise ValueError('the user’s own error')"


@dataclass(frozen=True)
class Case:
    """How to run one magic: its arguments and the type of its report (None: a clean cell reports nothing)."""

    args: str
    report: Any
    # bodies where nbdebug's recorder itself raises: (body, error type), the user's line being line 2
    own_errors: tuple[tuple[str, type], ...] = field(default=())


CASES = {
    "memtrace": Case("--device cpu", nbdebug.MemTrace),
    "nanhunt": Case("contract_model", nbdebug.NanReport, own_errors=(
        # raised by the sentinel's optimizer hook, inside the user's opt.step()
        ("contract_model(torch.full((2, 4), float('nan'))).sum().backward()\ncontract_opt.step()",
         nbdebug.NonFiniteError),
        # found by the last check, when the cell's recording stops
        ("y = 1\ncontract_model(torch.full((2, 4), float('nan')))", nbdebug.NonFiniteError),
    )),
    "gradmonitor": Case("contract_model --no-live", nbdebug.GradHistory),
    "compilecheck": Case("", nbdebug.CompileReport),
    "xlametrics": Case("--steps 1", nbdebug.xla.XlaCellReport),  # torch_xla is faked: see fake_xla
}


class FakeXlaWatch(Recorder):
    """``nbdebug.xla.watch()`` where torch_xla cannot exist: a recorder that reports a real saved metrics report."""

    _label = "FakeXlaWatch"
    recording = False

    def __init__(self, steps: Any = None, debug: bool = True) -> None:
        self._result = None

    def start(self) -> FakeXlaWatch:
        FakeXlaWatch.recording = True
        return self

    def stop(self) -> None:
        from nbdebug.xla import XlaCellReport, diagnose, parse_report

        FakeXlaWatch.recording = False
        text = (Path(__file__).parent / "data" / "xla" / "xla29_item_and_print.txt").read_text()
        self._result = XlaCellReport(diagnose(text), parse_report(text), debug_status="fake")

    @property
    def result(self) -> Any:
        return self._result


class Mark(ast.NodeTransformer):
    """A user's AST transformer: ``CONTRACT_MARK`` becomes 42."""

    def visit_Name(self, node: ast.Name) -> Any:
        if node.id == "CONTRACT_MARK":
            return ast.copy_location(ast.Constant(42), node)
        return node


@pytest.fixture()
def contract(ip, fake_xla):
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    ip.user_ns.update(torch=torch, contract_model=model, contract_opt=torch.optim.SGD(model.parameters(), lr=0.1))
    ip.ast_transformers.append(Mark())
    try:
        yield ip
    finally:
        ip.ast_transformers[:] = [t for t in ip.ast_transformers if not isinstance(t, Mark)]
        for name in ("contract_model", "contract_opt", "contract_loss", "seen_by_ast", "out", "y"):
            ip.user_ns.pop(name, None)


@pytest.fixture()
def fake_xla(monkeypatch):
    from nbdebug.core.xla import live

    monkeypatch.setattr(live, "available", lambda: True)
    monkeypatch.setattr(live, "watch", FakeXlaWatch)


def nbdebug_cell_magics(ip) -> set[str]:
    """The cell magics registered by nbdebug's magics classes, read from the shell's magics manager."""
    return {name for name, fn in ip.magics_manager.magics["cell"].items()
            if type(getattr(fn, "__self__", None)).__module__.startswith("nbdebug.")}


def state(ip) -> dict[str, Any]:
    """Everything a magic may switch on while its cell runs, and must put back."""
    from torch.nn.modules import module
    from torch.optim.optimizer import _global_optimizer_pre_hooks

    model = ip.user_ns["contract_model"]
    return {
        "optimizer hooks": len(_global_optimizer_pre_hooks),
        "global module hooks": (len(module._global_forward_hooks), len(module._global_forward_pre_hooks),
                                len(module._global_backward_hooks)),
        "model hooks": [(len(m._forward_hooks), len(m._forward_pre_hooks), len(m._backward_hooks))
                        for m in model.modules()] + [len(p._backward_hooks or {}) for p in model.parameters()],
        "grad mode": torch.is_grad_enabled(),
        "inference mode": torch.is_inference_mode_enabled(),
        "anomaly mode": torch.is_anomaly_enabled(),
        "torch function modes": torch._C._len_torch_function_stack(),
        "torch dispatch modes": torch._C._len_torch_dispatch_stack(),
        "profiler": torch.autograd._profiler_enabled(),
        # torch re-creates its own handler when its log settings are put back: compared by kind and level
        "log handlers": {n: sorted((type(h).__name__, h.level) for h in logging.getLogger(n).handlers)
                         for n in ("torch", "torch._dynamo")},
        "xla recording": FakeXlaWatch.recording,
    }


def innermost(error: BaseException) -> traceback.FrameSummary:
    return traceback.extract_tb(error.__traceback__)[-1]


def run(ip, magic: str, body: str, output: str = "out") -> tuple[Any, Any]:
    with capture_output() as shown:
        result = ip.run_cell(f"%%{magic} {CASES[magic].args} -o {output}\n{body}", store_history=True)
    return result, shown


def test_every_registered_cell_magic_is_run_or_named_with_its_reason(ip):
    registered = nbdebug_cell_magics(ip)
    assert registered, "no nbdebug cell magic found in the magics manager"
    assert not set(CASES) & set(NOT_RUN)
    assert registered == set(CASES) | set(NOT_RUN), (
        f"run here: {sorted(CASES)}; named with a reason: {sorted(NOT_RUN)}; registered: {sorted(registered)}")


@pytest.mark.parametrize("magic", sorted(CASES))
def test_the_report_is_returned_and_bound(contract, magic):
    before = state(contract)
    result, _ = run(contract, magic, OK_BODY)
    assert result.success, result.error_in_exec
    expected = CASES[magic].report
    if expected is None:
        assert result.result is None and contract.user_ns["out"] is None
    else:
        assert isinstance(result.result, expected) and contract.user_ns["out"] is result.result
        bundle, _ = contract.display_formatter.format(result.result)
        assert bundle["text/plain"]
    assert contract.user_ns["seen_by_ast"] == 42  # the user's AST transformer ran inside the magic's cell
    assert state(contract) == before


@pytest.mark.parametrize("magic", sorted(CASES))
def test_a_trailing_semicolon_silences_the_output(contract, magic):
    result, shown = run(contract, magic, OK_BODY + ";")
    assert result.success and result.result is None
    assert not shown.outputs and "Out[" not in shown.stdout
    expected = CASES[magic].report
    assert expected is None or isinstance(contract.user_ns["out"], expected)  # -o still binds the report


@pytest.mark.parametrize("magic", sorted(CASES))
def test_the_users_exception_is_reraised_with_the_users_frame_on_top(contract, magic):
    before = state(contract)
    result, shown = run(contract, magic, FAILING_BODY)
    error = result.error_in_exec
    assert type(error) is ValueError and str(error) == "the user’s own error"
    top = innermost(error)
    assert top.filename in contract.compile._filename_map and top.lineno == 2, top
    report = contract.user_ns["out"]
    if CASES[magic].report is not None:  # the report of what ran before the error is shown, and bound
        assert isinstance(report, CASES[magic].report)
        assert [o for o in shown.outputs if o.data.get("text/plain")], "the report was not shown"
    assert state(contract) == before


@pytest.mark.parametrize("magic,body,error_type",
                         [(m, body, t) for m in sorted(CASES) for body, t in CASES[m].own_errors])
def test_an_error_nbdebug_raises_ends_at_the_users_line(contract, magic, body, error_type):
    before = state(contract)
    result, _ = run(contract, magic, body)
    error = result.error_in_exec
    assert isinstance(error, error_type)
    top = innermost(error)
    assert top.filename in contract.compile._filename_map and top.lineno == 2, top  # not nbdebug's own frames
    out = contract.user_ns["out"]  # the magic's result, bound by -o: the error, or a report that carries it
    assert out is error or out.error is error
    assert state(contract) == before


def test_arguments_no_shell_can_split_are_one_usage_line_for_every_magic(ip):
    # an unclosed quote fails in shlex, before argparse: every nbdebug magic, line or cell, says so in one line
    from IPython.core.error import UsageError

    magics = {(kind, name) for kind in ("line", "cell") for name, fn in ip.magics_manager.magics[kind].items()
              if type(getattr(fn, "__self__", None)).__module__.startswith("nbdebug.")}
    assert {("cell", "memtrace"), ("line", "nbdebug"), ("line", "postmortem")} <= magics
    free_text = {"explain"}  # %explain / %%explain take pasted error text, not arguments: a quote is text
    for kind, name in sorted(magics):
        if name in free_text:
            continue
        try:
            if kind == "cell":
                ip.run_cell_magic(name, '"unclosed', "x = 1")
            else:
                ip.run_line_magic(name, '"unclosed')
        except UsageError as e:
            assert str(e) and "\n" not in str(e), (kind, name, str(e))  # one line, which says something
        except Exception as e:  # noqa: BLE001 - anything else is what this test is about
            pytest.fail(f"%{'%' if kind == 'cell' else ''}{name} '\"unclosed' raised {type(e).__name__}: {e}")
        else:
            pytest.fail(f"%{'%' if kind == 'cell' else ''}{name} '\"unclosed' raised nothing")
