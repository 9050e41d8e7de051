"""The one way a cell magic runs its cell body (IPython's ``%%time`` pattern).

``run_body`` transforms the body like any cell (the shell's input transformers, so ``!cmd`` and ``%magic`` lines
work, then its AST transformers, ``shell.ast_transformers``, as ``%%time`` does), compiles it under the cell's
history entry (tracebacks show the user's lines), runs it in the user's namespace inside the magic's recorder
(``with recorder:``, see ``nbdebug.core._recorder``), and then:

- always leaves the recorder (hooks off, recording stopped), also on an error or ``KeyboardInterrupt``;
- builds the magic's report from what was recorded, also when the body raised;
- binds the report to ``-o NAME`` when asked;
- when the body raised: shows the report, then re-raises the user's own exception;
- otherwise returns the report, which IPython displays as the cell's output; a body that ends with ``;`` returns
  None, so that nothing is displayed (IPython's own check looks at the line ``%%magic`` became, which never ends
  with ``;``); ``-o NAME`` still binds the report.

The user's frame is on top of every traceback the cell ends with:

- an exception of the user's code is re-raised unchanged;
- an error nbdebug raised from inside the user's code (a recorder's hook, e.g. the NaN sentinel at
  ``optimizer.step()``) ends at the user's line that ran into it: nbdebug's own frames below it are cut;
- an error the recorder raises when it stops (the NaN sentinel's check of what the last step left pending) is
  raised at the cell's last line, as ``with nan_sentinel(model):`` raises at its ``with`` line.

A report that is the cell's error itself, or carries it as ``.error`` (``%%nanhunt``'s ``NanReport`` when the
sentinel raised), is not shown a second time: the error panel shows it.  If building the report fails while the body had raised, one line says so and the user's error is what
the cell raises.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

__all__ = ["run_body", "compile_body"]


def compile_body(shell: Any, cell: str) -> Any:
    """The cell body, transformed like any cell (input and AST transformers), compiled under its history entry."""
    source = shell.transform_cell(cell)
    # the running cell's number: IPython 9 has already advanced execution_count while the cell runs
    running = getattr(getattr(shell.displayhook, "exec_result", None), "execution_count", None)
    filename = shell.compile.cache(source, running or shell.execution_count, raw_code=cell)
    tree = shell.transform_ast(shell.compile.ast_parse(source, filename=filename))
    return shell.compile(tree, filename, "exec")


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
        The magic's recorder: entered just before the body runs and always exited after it (start/stop
        recording, add/remove hooks), with the body's error if there was one.  An error its entry raises is
        raised as it is (the body never ran); an error its exit raises after a clean body is the cell's error.
    report : callable, optional
        ``report(error)`` builds the result from what was recorded; ``error`` is the cell's error or None.
        Without it the result is None.
    output : str, optional
        A name in the user's namespace to bind the result to (``-o NAME``).
    """
    code = compile_body(shell, cell)
    recorder = context if context is not None else contextlib.nullcontext()
    # a recorder that cannot start (a hook that cannot be added, a panel that cannot be shown) is the magic's own
    # error: raised as it is, before the body runs, with nothing recorded to report
    recorder.__enter__()
    error: BaseException | None = None
    try:
        exec(code, shell.user_ns)  # noqa: S102 - the user's own cell
    except BaseException as e:  # KeyboardInterrupt too: the report is still made, then it is re-raised
        error = _at_users_line(e)
    try:  # the recorder sees the body's error, as a with-statement would show it (the sentinel then checks nothing)
        recorder.__exit__(*((type(error), error, error.__traceback__) if error is not None else (None, None, None)))
    except BaseException as e:  # the recorder's own verdict as it stopped (only after a clean body)
        if error is not None:  # a recorder that raises over the user's error: the user's error is what matters
            print(f"nbdebug %%{magic}: stopping the recording failed ({type(e).__name__}); the cell's own error "
                  "follows.", file=sys.stderr)
        else:
            error = _at_last_line(code, e)
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
        if result is not None and result is not error and getattr(result, "error", None) is not error:
            from IPython.display import display

            display(result)
        raise error.with_traceback(error.__traceback__)
    return None if _silenced(shell, cell) else result


def _silenced(shell: Any, cell: str) -> bool:
    """The body ends with ``;``: the cell's output is hidden, as for any cell."""
    try:
        return bool(shell.displayhook.semicolon_at_end_of_expression(cell))
    except Exception:  # a body the tokenizer cannot read (IPython syntax): it decides nothing
        return cell.rstrip().endswith(";")


def _at_users_line(error: BaseException) -> BaseException:
    """An error nbdebug raised inside the user's code ends at the user's line; any other error is left as it is."""
    from nbdebug.core._own import OWN_ANYWHERE
    from nbdebug.ipython._traceback import is_library_path

    entries = []
    tb = error.__traceback__
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    if not entries or not OWN_ANYWHERE.search(entries[-1].tb_frame.f_code.co_filename):
        return error  # raised by the user's code or a library: the user's exception, unchanged
    users = [t for t in entries[1:] if not is_library_path(t.tb_frame.f_code.co_filename)]
    if users:
        users[-1].tb_next = None  # nbdebug's (and the library's) frames under the user's line
    return error


def _at_last_line(code: Any, error: BaseException) -> BaseException:
    """``error`` with a traceback that points at the body's last line (the error came when the recorder stopped)."""
    last = max((line for _, _, line in code.co_lines() if line is not None), default=1)
    marker = compile("\n" * (last - 1) + "raise __nbdebug_error__", code.co_filename, "exec")
    try:
        exec(marker, {"__nbdebug_error__": error.with_traceback(None)})  # noqa: S102 - our own one-line raise
    except BaseException as e:
        return e.with_traceback(e.__traceback__.tb_next if e.__traceback__ is not None else None)
    return error  # pragma: no cover - the marker always raises
