"""Warnings that are bugs: a compact diagnosis panel when a cell raises one (``%nbdebug warnings on|off``).

Some of the costliest training bugs never raise: ``MSELoss`` broadcasting a ``(N, 1)`` prediction against an
``(N,)`` target, ``.grad`` read on a non-leaf tensor, the scheduler stepping before the optimizer, reentrant
checkpointing with no input that requires grad, DDP copying every gradient into its buckets.  PyTorch warns
once and the run goes on.

While a cell runs, ``warnings.showwarning`` is wrapped: the warning is shown exactly as before, then, if it is
one of the warning categories of the knowledge (``Diagnosis.severity == "warning"``), the same ``Diagnosis`` the
explainer builds is shown as a compact panel right under it.  A site (file, line, category) gets one panel per
session, so a warning inside a training loop never repeats.  Deprecations and other noise are never looked
at.  Whatever goes wrong here, the user's code and the original warning are untouched.
"""

from __future__ import annotations

import sys
import threading
import warnings
from typing import Any

from nbdebug.errors import exception_message
from nbdebug.ipython._state import ExtensionState, Feature

__all__ = ["WarningWatcher", "register"]

# never explained: deprecations and the like are not bugs in the user's training
_NOISE = (DeprecationWarning, PendingDeprecationWarning, FutureWarning, ImportWarning, ResourceWarning)


class WarningWatcher:
    """Wraps ``warnings.showwarning`` while the feature is on; panels only for warnings raised inside a cell."""

    def __init__(self, state: ExtensionState) -> None:
        self.state = state
        self.on = False
        self.in_cell = False
        self.shown = 0  # panels shown so far (for tests and %nbdebug status)
        self._previous: Any = None
        self._hook: Any = None
        self._seen: set[tuple[str, int, str]] = set()
        self._pending: list[Any] = []  # panels for warnings raised off the main thread: shown when the cell ends
        self._keywords: tuple[str, ...] | None = None
        # a warning raised while one is being explained is not explained again; per thread, so that a warning
        # raised in a worker thread while the main thread explains another one is not lost
        self._local = threading.local()

    def enable(self) -> None:
        if self.on:
            return
        previous = warnings.showwarning

        def showwarning(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
                        line: str | None = None) -> None:
            previous(message, category, filename, lineno, file, line)  # the warning itself, exactly as before
            if self.in_cell:
                self._consider(message, category, filename, lineno, line)

        self._previous, self._hook = previous, showwarning
        warnings.showwarning = showwarning
        self.on = True

    def disable(self) -> None:
        if not self.on:
            return
        self.on = False
        if warnings.showwarning is self._hook:  # someone wrapped us since: leave their hook (ours is inert now)
            warnings.showwarning = self._previous
        self._previous = self._hook = None
        self._pending.clear()

    def pre_run_cell(self, *args: Any) -> None:
        self.in_cell = True

    def post_run_cell(self, *args: Any) -> None:
        self.in_cell = False
        pending, self._pending = self._pending, []
        for diagnosis in pending:
            self._display(diagnosis)

    def _candidates(self) -> tuple[str, ...]:
        if self._keywords is None:
            from nbdebug.core.knowledge import entries

            self._keywords = tuple(k for e in entries("explain") if e.extra.get("warning") == "yes" for k in e.keywords)
        return self._keywords

    def _consider(self, message: Any, category: Any, filename: str, lineno: int, line: str | None) -> None:
        if not self.on or getattr(self._local, "busy", False):
            return
        self._local.busy = True
        try:
            if isinstance(category, type) and issubclass(category, _NOISE):
                return
            # the message object is the user's: its __str__ may raise anything, KeyboardInterrupt included, which
            # must not escape from showwarning because of nbdebug; a placeholder matches no pattern: no panel
            message_text = exception_message(message)
            text = message_text.lower()
            if not any(k in text for k in self._candidates()):  # cheap: most warnings stop here
                return
            from nbdebug.core.explain import explain

            # the text, not the object: the explainer never calls the user's __str__ again
            record = warnings.WarningMessage(message_text, category, filename, lineno, None, line)
            diagnosis = explain(record)
            if diagnosis.severity != "warning":
                return
            site = (str(filename), int(lineno), diagnosis.kind)
            if site in self._seen:
                return
            self._seen.add(site)
            import dataclasses

            diagnosis = dataclasses.replace(diagnosis, notes=(self._where(filename, lineno), *diagnosis.notes))
            if threading.current_thread() is threading.main_thread():
                self._display(diagnosis)
            else:
                self._pending.append(diagnosis)
        except Exception as e:  # noqa: BLE001 - a warning must never become an error because of nbdebug
            print(f"nbdebug: the warning could not be explained ({type(e).__name__}: {e})", file=sys.stderr)
        finally:
            self._local.busy = False

    def _where(self, filename: str, lineno: int) -> str:
        """The user's line that led to the warning (the innermost frame of a notebook cell), else the warning's;
        named as the user knows it (``In [12], line 3: ...``), never by the kernel's temporary cell file."""
        from nbdebug.core._cells import is_cell_file, site_label

        frame = sys._getframe(1)
        while frame is not None:
            if is_cell_file(frame.f_code.co_filename):
                return (f"Raised by {site_label(frame.f_code.co_filename, frame.f_lineno)} (warning issued at "
                        f"{site_label(filename, lineno, code=False)}).")
            frame = frame.f_back  # type: ignore[assignment]
        return f"Raised at {site_label(filename, lineno)}."

    def _display(self, diagnosis: Any) -> None:
        from IPython.display import display

        display(diagnosis)
        self.shown += 1


def register(state: ExtensionState) -> None:
    """The ``warnings`` feature (on by default) and its cell events."""
    watcher = WarningWatcher(state)
    state.warning_watcher = watcher  # type: ignore[attr-defined]
    state.register_event("pre_run_cell", watcher.pre_run_cell)
    state.register_event("post_run_cell", watcher.post_run_cell)
    state.add_feature(Feature("warnings", "a compact diagnosis under warnings that signal a bug (loss broadcasting, "
                              "non-leaf .grad, scheduler order, ...), once per site", watcher.enable,
                              watcher.disable), on=True)
