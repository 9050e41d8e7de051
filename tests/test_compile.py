"""compile_check and %%compilecheck on real torch.compile (CPU, backend="eager": Dynamo only, fast)."""

from __future__ import annotations

import pytest
import torch
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

import nbdebug
from nbdebug.core.compile import BREAK_FIXES, GUARD_FIXES, build_report, capture_compile, recompile_limit


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
    assert first.where.endswith(f":{_line_of(fn, marker)}"), (first, report.breaks)
    assert fix_word in first.fix and "fullgraph=True" in first.fix


def test_clean_function_is_quiet():
    report = nbdebug.compile_check(clean, torch.randn(3, 3), calls=[(torch.randn(3, 3),)])
    assert report.ok and report.graph_count == 1 and not report.recompiles
    assert "No graph break" in str(report)


def test_shape_recompile_names_the_guard():
    report = nbdebug.compile_check(total, torch.randn(2, 3), calls=[(torch.randn(3, 3),)])
    (rec,) = report.recompiles
    assert rec.function == "total" and "size mismatch" in rec.guard
    assert "mark_dynamic" in report.findings[0].fix


def test_recompile_limit_is_hit_and_named():
    name, limit = recompile_limit()
    assert name in ("recompile_limit", "cache_size_limit") and limit
    calls = [(torch.randn(3), "m" * (i + 2)) for i in range(limit + 1)]
    report = nbdebug.compile_check(by_mode, torch.randn(3), "m", calls=calls)
    assert report.limit_hits and report.limit_hits[0].function == "by_mode"
    assert report.limit_hits[0].limit == limit and report.limit_hits[0].limit_name == name
    assert report.findings[0].kind == "recompile_limit" and report.findings[0].severity == "error"
    assert "mode ==" in report.limit_hits[0].last_reason
    recompile = next(f for f in report.findings if f.kind == "recompilation")
    assert "as tensors" in recompile.fix


def test_capture_restores_torch_logging():
    import logging

    before = list(logging.getLogger("torch._dynamo").handlers)
    with capture_compile() as cap:
        torch.compile(total, backend="eager")(torch.randn(5, 2))
    assert cap.result is not None and cap.result.ok
    after = logging.getLogger("torch._dynamo").handlers
    assert not any(type(h).__name__ == "_Recorder" for h in after)
    assert len(after) == len(before)


def test_tables_are_each_reachable():
    for pattern, name, fix in (*BREAK_FIXES, *GUARD_FIXES):
        assert pattern and name and fix
    r = build_report([], [], [])
    assert r.ok and r.to_dict()["findings"] == []


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
    assert kinds == {"graph_break", "recompilation"}
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
