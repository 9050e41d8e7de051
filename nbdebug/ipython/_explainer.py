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

from nbdebug.ipython._state import ExtensionState

# Errors that are the user stopping work, or a magic's one-line usage message: nothing to explain.
_SKIP = (KeyboardInterrupt, SystemExit, UsageError)


def _safe_text(e: BaseException) -> str:
    """``Type: message`` of an exception whose ``__str__`` may itself raise (even KeyboardInterrupt)."""
    try:
        return f"{type(e).__name__}: {e}"
    except BaseException:  # the user's __str__ is user code: nothing it raises may escape run_cell
        return f"{type(e).__name__}: <unprintable>"


def module_roots(namespace: Mapping[str, Any]) -> dict[str, Any]:
    """The ``nn.Module`` objects bound to public names in the user's namespace (for qualified module names)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    module_type = torch.nn.Module
    return {k: v for k, v in list(namespace.items()) if not k.startswith("_") and isinstance(v, module_type)}


def diagnose_exception(state: ExtensionState, exc: BaseException) -> Any:
    """Explain ``exc`` in the shell's context and let enabled features add their sections."""
    from nbdebug.core.fixes import explain

    diagnosis = explain(exc, roots=module_roots(state.shell.user_ns))
    for enrich in state.enrichers:
        try:
            diagnosis = enrich(exc, diagnosis) or diagnosis
        except BaseException as e:  # noqa: BLE001 - one section failing (e.g. on the user's __str__) keeps the rest
            name = getattr(enrich, "__qualname__", type(enrich).__name__)
            note = f"nbdebug: a section ({name}) could not be added: {_safe_text(e)}"
            diagnosis = dataclasses.replace(diagnosis, notes=(*diagnosis.notes, note))
    return diagnosis


class Explainer:
    """The ``post_run_cell`` callback; ``enabled`` is flipped by ``%nbdebug explain on|off``."""

    def __init__(self, state: ExtensionState) -> None:
        self.state = state
        self.enabled = False
        self.show_unknown = False

    def __call__(self, result: Any) -> None:
        exc = getattr(result, "error_in_exec", None)
        if not self.enabled or exc is None or isinstance(exc, _SKIP):
            return
        try:
            diagnosis = diagnose_exception(self.state, exc)
            if not diagnosis.known and not self.show_unknown:
                return
            from IPython.display import display

            display(diagnosis)
        except BaseException as e:  # noqa: BLE001 - the user's error above must stay the only thing that matters
            # BaseException too: formatting the user's exception runs its __str__, which may raise anything
            print(f"nbdebug: the diagnosis failed ({_safe_text(e)}); the error above is unchanged.", file=sys.stderr)
