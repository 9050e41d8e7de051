"""Show a diagnosis panel under the traceback of every cell that raised.

It runs on IPython's ``post_run_cell`` event, after IPython has shown the traceback itself, so the original
traceback is never touched.  If diagnosing fails, one line says so and nothing else changes: even an exception
whose ``__str__`` raises (KeyboardInterrupt included) cannot make ``run_cell`` fail through the explainer.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from typing import Any

from IPython.core.error import UsageError

from nbdebug.errors import describe_exception
from nbdebug.ipython._state import ExtensionState

# Errors that are the user stopping work, or a magic's one-line usage message: nothing to explain (a SystemExit gets a
# panel only with a known cause: argparse reading the kernel's own command line).
_SKIP = (KeyboardInterrupt, UsageError)


def module_roots(namespace: Mapping[str, Any]) -> dict[str, Any]:
    """The ``nn.Module`` objects bound to public names in the user's namespace (for qualified module names)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    module_type = torch.nn.Module
    return {k: v for k, v in list(namespace.items()) if not k.startswith("_") and isinstance(v, module_type)}


def diagnose_exception(state: ExtensionState, exc: BaseException) -> Any:
    """Explain ``exc`` in the shell's context and let enabled features add their sections."""
    from nbdebug.core.explain import explain

    diagnosis = explain(exc, roots=module_roots(state.shell.user_ns))
    for enrich in state.enrichers:
        try:
            diagnosis = enrich(exc, diagnosis) or diagnosis
        except BaseException as e:  # noqa: BLE001 - one section failing (e.g. on the user's __str__) keeps the rest
            name = getattr(enrich, "__qualname__", type(enrich).__name__)
            note = f"nbdebug: a section ({name}) could not be added: {describe_exception(e)}"
            diagnosis = dataclasses.replace(diagnosis, notes=(*diagnosis.notes, note))
    return diagnosis


def _telling(diagnosis: Any) -> bool:
    live = getattr(diagnosis, "live", None)
    return live is not None and bool(getattr(live, "telling", False))


class Explainer:
    """The ``post_run_cell`` callback; ``enabled`` is flipped by ``%nbdebug explain on|off``."""

    def __init__(self, state: ExtensionState) -> None:
        self.state = state
        self.enabled = False
        self.show_unknown = False
        # (exception, diagnosis, full traceback text) made by the short-traceback handler for this cell's error
        self.pending: tuple[BaseException, Any, str] | None = None
        # id of the exception whose panel the traceback handler already showed (an id: holding the exception
        # would keep its frames, and the tensors they hold, alive)
        self._shown: int | None = None

    def diagnose(self, exc: BaseException) -> Any:
        """The diagnosis of ``exc`` (cached, so the short traceback and the panel share one)."""
        if self.pending is not None and self.pending[0] is exc:
            return self.pending[1]
        diagnosis = diagnose_exception(self.state, exc)
        self.pending = (exc, diagnosis, "")
        return diagnosis

    def shows(self, diagnosis: Any) -> bool:
        """Whether a panel will be shown for ``diagnosis``: a known error, or an unknown one whose live evidence
        says something (tensors, a module, what a check found), or any error with ``%nbdebug explain all``."""
        return self.enabled and (diagnosis.known or self.show_unknown or _telling(diagnosis))

    def keep_full_traceback(self, exc: BaseException, text: str) -> None:
        """The short traceback folded frames of ``exc``: the panel carries the full one."""
        if self.pending is not None and self.pending[0] is exc:
            self.pending = (exc, self.pending[1], text)

    def __call__(self, result: Any) -> None:
        exc = getattr(result, "error_in_exec", None)
        shown, self._shown = self._shown, None
        if exc is not None and id(exc) == shown:  # shown (or tried) right under its traceback already
            self.pending = None
            return
        self.show(exc)
        self._shown = None  # the cell is over

    def show(self, exc: BaseException | None) -> None:
        """Show the panel of ``exc`` (also called by the traceback handler, which runs when IPython executes a
        script silently and no ``post_run_cell`` comes)."""
        pending, self.pending = self.pending, None
        if not self.enabled or exc is None or isinstance(exc, _SKIP):
            return
        self._shown = id(exc)  # one panel (or one failure line) per error, whoever calls first
        try:
            if pending is not None and pending[0] is exc:
                diagnosis = pending[1]
                if pending[2]:
                    from nbdebug.core.explain._diagnosis import Section

                    # in the notebook panel only: a terminal printed the traceback right above (%tb prints it again)
                    full = Section(title="Full traceback", preformatted=pending[2], html_only=True,
                                   notes=("Library frames were folded above (%nbdebug traceback full shows them "
                                          "in place).",))
                    diagnosis = dataclasses.replace(diagnosis, sections=(*diagnosis.sections, full))
            else:
                diagnosis = diagnose_exception(self.state, exc)
            if isinstance(exc, SystemExit) and not diagnosis.known:
                return  # sys.exit() in a cell is no error: only a known cause (argparse reading the kernel's argv)
            if not diagnosis.known and not self.show_unknown and not _telling(diagnosis):
                return
            from IPython.display import display

            display(diagnosis)
        except BaseException as e:  # noqa: BLE001 - the user's error above must stay the only thing that matters
            # BaseException too: formatting the user's exception runs its __str__, which may raise anything
            print(f"nbdebug: the diagnosis failed ({describe_exception(e)}); the error above is unchanged.", file=sys.stderr)
