"""compile_check and %%compilecheck on real torch.compile (CPU, backend="eager": Dynamo only, fast)."""

from __future__ import annotations

import pytest
import torch
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

import nbdebug
from nbdebug.core import knowledge
from nbdebug.core._findings import Finding
from nbdebug.core.compile import GraphBreak, Recompile, build_report, capture_compile, recompile_limit


def _fixes(f: Finding) -> str:
    """Every fix of a finding, titles and code, as one text."""
    return "\n".join(str(x) for x in f.fixes)


def with_item(x):
    y = x.sin()
    if y.sum().item() > 0:  # graph break: .item()
        y = y + 1
    return y * 2


def with_print(x):
    y = x.cos()
    print("debug", y.shape)  # graph break: print
    return y + 1


def with_branch(x):
    if x.sum() > 0:  # graph break: data-dependent control flow
        return x + 1
    return x - 1


def clean(x):
    return torch.relu(x @ x.T).sum()


def by_mode(x, mode):
    if mode == "train":
        return x + 1
    return x * len(mode)


def total(x):
    return x.sum() * 2


def _line_of(fn, text):
    import inspect

    src, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(src) if text in line)


@pytest.mark.parametrize("fn,marker,fix_word", [
    (with_item, ".item()", ".item()"),
    (with_print, "print(\"debug\"", "print()"),
    (with_branch, "if x.sum() > 0", "torch.cond"),
])
def test_graph_break_reason_line_and_fix(fn, marker, fix_word):
    torch._dynamo.reset()
    with capture_output():
        report = nbdebug.compile_check(fn, torch.randn(4, 4))
    assert report.graph_break_count >= 1
    (first, *_) = [f for f in report.findings if f.kind == "graph_break"]
    assert isinstance(first, Finding) and first.severity == "warning" and first.title
    # a file's site is its last two path parts, the line and its text
    assert first.where[0].startswith(f"tests/test_compile.py:{_line_of(fn, marker)}: "), (first, report.breaks)
    assert fix_word in _fixes(first) and "fullgraph=True" in _fixes(first)


def test_clean_function_is_quiet():
    report = nbdebug.compile_check(clean, torch.randn(3, 3), calls=[(torch.randn(3, 3),)])
    assert report.ok and report.graph_count == 1 and not report.recompiles
    assert "No graph break" in str(report)


def test_shape_recompile_names_the_guard():
    report = nbdebug.compile_check(total, torch.randn(2, 3), calls=[(torch.randn(3, 3),)])
    (rec,) = report.recompiles
    assert rec.function == "total" and "size mismatch" in rec.guard
    assert report.findings[0].kind == "compile_recompilation"
    assert "mark_dynamic" in _fixes(report.findings[0])


def test_recompile_limit_is_hit_and_named():
    name, limit = recompile_limit()
    assert name in ("recompile_limit", "cache_size_limit") and limit
    calls = [(torch.randn(3), "m" * (i + 2)) for i in range(limit + 1)]
    report = nbdebug.compile_check(by_mode, torch.randn(3), "m", calls=calls)
    assert report.limit_hits and report.limit_hits[0].function == "by_mode"
    assert report.limit_hits[0].limit == limit and report.limit_hits[0].limit_name == name
    assert report.findings[0].kind == "recompile_limit" and report.findings[0].severity == "error"
    assert "mode ==" in report.limit_hits[0].last_reason
    recompile = report.finding("compile_recompilation")
    assert recompile is not None and "as tensors" in _fixes(recompile)
    assert report.kinds[0] == "recompile_limit" and report.finding("recompile_limit").where[0] == (
        f"tests/test_compile.py:{_line_of(by_mode, 'def by_mode')}: def by_mode(x, mode):")


def test_capture_restores_torch_logging():
    import logging

    before = list(logging.getLogger("torch._dynamo").handlers)
    with capture_compile() as cap:
        torch.compile(total, backend="eager")(torch.randn(5, 2))
    assert cap.result is not None and cap.result.ok
    after = logging.getLogger("torch._dynamo").handlers
    assert not any(type(h).__name__ == "_Recorder" for h in after)
    assert len(after) == len(before)


@pytest.mark.parametrize("context", ["graph_break", "guard"])
def test_every_reason_entry_is_reachable_and_has_a_fix(context):
    entries = knowledge.entries(context)
    assert entries
    for e in entries:
        assert e.patterns and e.fixes and e.domain == "compile"
        assert all(s.startswith("https://") for s in e.sources)


@pytest.mark.parametrize("reason,slug", [
    ("Tensor.item() call with capture_scalar_outputs=False", "graph_break_item"),
    ("call_function BuiltinVariable(print) [ConstantVariable(str)] {}", "graph_break_print"),
    ("Data-dependent branching", "graph_break_branch"),
    ("dynamic shape operator: aten.nonzero.default", "graph_break_dynamic_shape"),
    ("call to a function skipped by Dynamo", "graph_break_unsupported"),
])
def test_break_reasons_pick_their_entry(reason, slug):
    r = build_report([GraphBreak(reason, "train.py", 3)], [], [])
    (f,) = r.findings
    assert f.kind == "graph_break" and f.where == ("train.py:3",)
    assert f.fixes[: len(knowledge.entry(slug).fixes)] == knowledge.entry(slug).fixes
    assert f.fixes[-2:] == knowledge.entry("graph_break").fixes


@pytest.mark.parametrize("guard,slug", [
    ("tensor 'x' size mismatch at index 0. expected 2, actual 3", "guard_shape"),
    ("tensor 'x' dtype mismatch. expected Float, actual Half", "guard_dtype_device"),
    ("mode == 'm'", "guard_python_value"),
])
def test_guards_pick_their_entry(guard, slug):
    rs = [Recompile("f", "train.py", 9, guard), Recompile("f", "train.py", 9, guard)]
    (f,) = build_report([], rs, []).findings
    assert f.kind == "compile_recompilation" and f.severity == "warning" and knowledge.entry(slug).title in f.message
    assert f.fixes[0] == knowledge.entry(slug).fixes[0] and f.evidence["recompilations"] == 2


def test_empty_report():
    r = build_report([], [], [])
    assert r.ok and r.to_dict()["findings"] == [] and r.kinds == () and r.finding("graph_break") is None
    assert "No graph break" in str(r) and "No graph break" in r._repr_mimebundle_()["text/html"]


def test_compilecheck_magic(ip):
    ip.user_ns["by_mode"] = by_mode
    ip.user_ns["with_item"] = with_item
    cell = (
        "import torch\n"
        "torch._dynamo.reset()\n"
        "f = torch.compile(with_item, backend='eager')\n"
        "f(torch.randn(4))\n"
        "g = torch.compile(by_mode, backend='eager')\n"
        "for i in range(3):\n"
        "    g(torch.randn(3), 'm' * (i + 1))\n"
    )
    result = ip.run_cell_magic("compilecheck", "-o cc", cell)
    assert ip.user_ns["cc"] is result
    kinds = {f.kind for f in result.findings}
    assert kinds == {"graph_break", "compile_recompilation"}
    assert len(result.recompiles) == 2 and "mode ==" in result.recompiles[-1].guard
    bundle, _ = ip.display_formatter.format(result)
    assert "graph_break" in bundle["text/plain"] and "text/html" in bundle


def test_compilecheck_reraises_user_error(ip):
    with pytest.raises(ZeroDivisionError):
        ip.run_cell_magic("compilecheck", "", "1/0")
    import logging

    assert not any(type(h).__name__ == "_Recorder" for h in logging.getLogger("torch").handlers)


def test_xlametrics_without_torch_xla_is_a_usage_error(ip, monkeypatch):
    import nbdebug.core.xla.live as live

    monkeypatch.setattr(live, "available", lambda: False)
    with pytest.raises(UsageError, match=r"nbdebug\[xla\]"):
        ip.run_cell_magic("xlametrics", "", "x = 1")
    with pytest.raises(UsageError, match="--steps"):
        ip.run_cell_magic("xlametrics", "--steps -2", "x = 1")


def test_compilecheck_shows_the_report_then_reraises(ip):
    ip.user_ns["with_item"] = with_item
    cell = (
        "import torch\n"
        "torch._dynamo.reset()\n"
        "torch.compile(with_item, backend='eager')(torch.randn(4))\n"
        "raise KeyError('after the compile')\n"
    )
    with capture_output() as cap:
        res = ip.run_cell("%%compilecheck -o failed\n" + cell)
    assert isinstance(res.error_in_exec, KeyError) and res.error_in_exec.args == ("after the compile",)
    report = ip.user_ns["failed"]
    assert report.finding("graph_break") is not None
    shown = [o.data.get("text/plain", "") for o in cap.outputs]
    reports = [t for t in shown if "torch.compile check" in t]  # (the explainer may add its panel on the KeyError)
    assert len(reports) == 1 and "graph_break" in reports[0]
    assert not any(type(h).__name__ == "_Recorder" for h in __import__("logging").getLogger("torch").handlers)


def test_compilecheck_cell_may_use_shell_syntax(ip):
    result = ip.run_cell_magic("compilecheck", "", "echoed = !echo hi\n%env NBDEBUG_TEST_ENV=1\ny = 2\n")
    assert list(ip.user_ns["echoed"]) == ["hi"] and ip.user_ns["y"] == 2
    assert result.ok


def test_capture_keeps_the_users_own_log_settings(monkeypatch):
    import logging

    import torch._logging
    from torch._logging import _internal

    monkeypatch.delenv("TORCH_LOGS", raising=False)
    torch._logging.set_logs(dynamo=logging.INFO)
    try:
        with capture_compile() as cap:
            torch.compile(with_print, backend="eager")(torch.randn(3))
        assert cap.result.finding("graph_break") is not None  # recorded while the user's settings were on
        state = _internal._get_log_state()
        assert state.log_qname_to_level.get("torch._dynamo") == logging.INFO
        assert not state.is_artifact_enabled("recompiles") and not state.is_artifact_enabled("graph_breaks")
        assert logging.getLogger("torch._dynamo").level == logging.INFO
    finally:
        torch._logging.set_logs()


def test_capture_keeps_torch_logs_env(monkeypatch):
    import logging
    import os

    import torch._logging
    from torch._logging import _internal

    monkeypatch.setenv("TORCH_LOGS", "dynamo")
    _internal._init_logs()
    try:
        with capture_compile() as cap:
            torch._dynamo.reset()
            torch.compile(with_print, backend="eager")(torch.randn(3))
        assert cap.result.finding("graph_break") is not None  # seen although TORCH_LOGS did not ask for it
        assert os.environ["TORCH_LOGS"] == "dynamo"
        assert not _internal._get_log_state().is_artifact_enabled("graph_breaks")
        assert logging.getLogger("torch._dynamo").level == logging.INFO
    finally:
        monkeypatch.delenv("TORCH_LOGS")
        torch._logging.set_logs()


@pytest.mark.parametrize("message", [
    "Graph break in user code at /x.py:" + "7" * 5000,
    "Recompiling function f in /x.py:\u00b2",
    "Recompiling function f in /x.py:" + "1" * 5000 + "\n    - 0/0: x.size()[0] == 2",
    "torch._dynamo hit config.recompile_limit (" + "8" * 5000 + ")\n   function: 'f' (/x.py:1)",
])
def test_recorder_survives_hostile_log_messages(message):
    import logging

    from nbdebug.core.compile import _CompileLog

    rec = _CompileLog()
    rec.emit(logging.LogRecord("torch._dynamo", logging.DEBUG, __file__, 1, message, None, None))
    for event in (*rec.breaks, *rec.recompiles, *rec.limits):
        assert event.line < 10**9


@pytest.mark.parametrize("fn,kwargs", [("not a function", {}), (total, {"backend": 3})])
def test_compile_check_bad_arguments(fn, kwargs):
    from nbdebug.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="expected"):
        nbdebug.compile_check(fn, torch.randn(2), **kwargs)


KERNEL_CELL = "/tmp/ipykernel_4242/3141592653.py"  # the name ipykernel compiles a cell under


def _cell_function(source: str, name: str):
    """A function defined in a cell as a notebook kernel runs it: compiled under the kernel's temporary file name,
    its lines in linecache (as ipykernel keeps them)."""
    import linecache

    linecache.cache[KERNEL_CELL] = (len(source), None, source.splitlines(True), KERNEL_CELL)
    namespace: dict = {"torch": torch}
    exec(compile(source, KERNEL_CELL, "exec"), namespace)
    return namespace[name]


def test_sites_are_named_as_the_user_knows_the_cell():
    # issue 26, item 6: compile_check named ipykernel's temporary file ("ipykernel_4242/3141592653.py:2")
    fn = _cell_function("def gate(a):\n    if a.sum().item() > 0:\n        return a * 2\n    return a - 1\n",
                        "gate")
    torch._dynamo.reset()
    report = nbdebug.compile_check(fn, torch.randn(4))
    (found,) = report.findings
    assert found.where == ("a notebook cell, line 2: if a.sum().item() > 0:",), found.where
    shown = str(report) + report._repr_mimebundle_()["text/html"]
    assert "ipykernel" not in shown and "3141592653" not in shown, shown


def test_compilecheck_on_a_compiled_model_blames_the_users_line(ip):
    # issue 26, item 7: a torch.compile(model) recompiling was blamed on torch's own external_utils.py:67
    cell = (
        "import torch\n"
        "torch._dynamo.reset()\n"
        "net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))\n"
        "compiled = torch.compile(net, backend='eager')\n"
        "for batch in (4, 4, 7):\n"
        "    out = compiled(torch.randn(batch, 8))\n"
    )
    report = ip.run_cell_magic("compilecheck", "", cell)
    found = report.finding("compile_recompilation")
    assert found is not None and len(found.where) == 1, report.findings
    assert found.where[0].startswith("In [") and found.where[0].endswith(
        ", line 6: out = compiled(torch.randn(batch, 8))"), found.where
    assert found.message.startswith("the compiled Sequential was recompiled 1 time(s)"), found.message
    assert [r.function for r in report.recompiles] == ["Sequential.forward"]  # not torch's wrapper, "inner"
    shown = str(report) + report._repr_mimebundle_()["text/html"]
    for internal in ("external_utils", "site-packages", "inner", "ipython-input"):
        assert internal not in shown, (internal, shown)
