"""Show a diagnosis panel under the traceback of every cell that raised.

It runs on IPython's ``post_run_cell`` event, after IPython has shown the traceback itself, so the original
traceback is never touched.  If diagnosing fails, one line says so and nothing else changes.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from nbdebug.ipython._state import ExtensionState

# Errors that are the user stopping work, not a bug to explain.
_SKIP = (KeyboardInterrupt, SystemExit)


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
        diagnosis = enrich(exc, diagnosis) or diagnosis
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
        except Exception as e:  # the user's error above must stay the only thing that matters
            print(f"nbdebug: the diagnosis failed ({type(e).__name__}: {e}); the error above is unchanged.",
                  file=sys.stderr)
