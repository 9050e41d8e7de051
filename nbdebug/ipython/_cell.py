"""The one way a cell magic runs its cell body (IPython's ``%%time`` pattern).

``run_body`` transforms the body with the shell's own input transformers (so ``!cmd``, ``%magic`` and
``%%``-free IPython syntax work inside it), compiles it under the cell's history entry (tracebacks show the
user's lines), runs it in the user's namespace inside the magic's recording context, and then:

- always leaves the recording context (hooks off, recording stopped), also on an error or ``KeyboardInterrupt``;
- builds the magic's report from what was recorded, also when the body raised;
- binds the report to ``-o NAME`` when asked;
- when the body raised: shows the report, then re-raises the user's own exception, unchanged;
- otherwise returns the report, which IPython displays as the cell's output unless the cell ends with ``;``.

If building the report fails while the body had raised, one line says so and the user's error is what the cell
raises.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

__all__ = ["run_body", "compile_body"]


def compile_body(shell: Any, cell: str) -> Any:
    """The cell body, transformed like any cell and compiled under its own history entry."""
    source = shell.transform_cell(cell)
    # the running cell's number: IPython 9 has already advanced execution_count while the cell runs
    running = getattr(getattr(shell.displayhook, "exec_result", None), "execution_count", None)
    filename = shell.compile.cache(source, running or shell.execution_count, raw_code=cell)
    return shell.compile(source, filename, "exec")


def run_body(
    shell: Any,
    cell: str,
    *,
    magic: str,
    context: AbstractContextManager[Any] | None = None,
    report: Callable[[BaseException | None], Any] | None = None,
    output: str | None = None,
) -> Any:
    """Run ``cell`` inside ``context``; return ``report(error)`` (see the module docstring for the contract).

    Parameters
    ----------
    shell : InteractiveShell
    cell : str
        The cell body, as the user typed it.
    magic : str
        The magic's name, for messages.
    context : context manager, optional
        Entered just before the body runs and always exited after it (start/stop recording, add/remove hooks).
    report : callable, optional
        ``report(error)`` builds the result from what was recorded; ``error`` is the body's exception or None.
        Without it the result is None.
    output : str, optional
        A name in the user's namespace to bind the result to (``-o NAME``).
    """
    code = compile_body(shell, cell)
    error: BaseException | None = None
    with context if context is not None else contextlib.nullcontext():
        try:
            exec(code, shell.user_ns)  # noqa: S102 - the user's own cell
        except BaseException as e:  # KeyboardInterrupt too: the report is still made, then it is re-raised
            error = e
    result: Any = None
    if report is not None:
        try:
            result = report(error)
        except Exception as e:
            if error is None:
                raise
            print(f"nbdebug %%{magic}: no report ({type(e).__name__}: {e}); the cell's own error follows.",
                  file=sys.stderr)
    if output:
        shell.user_ns[output] = result
    if error is not None:
        if result is not None:
            from IPython.display import display

            display(result)
        raise error.with_traceback(error.__traceback__)
    return result
