"""``%nbdebug`` (status and switches), ``%explain`` / ``%%explain``, and the error explainer."""

from __future__ import annotations

import sys
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from nbdebug.ipython._args import parse_args
from nbdebug.ipython._explainer import Explainer, diagnose_exception
from nbdebug.ipython._state import ExtensionState, Feature

_SWITCH_WORDS = {"on": True, "off": False, "true": True, "false": False, "1": True, "0": False}


@magics_class
class CoreMagics(Magics):
    """nbdebug's status magic and the error explainer."""

    nbd_state: ExtensionState

    @magic_arguments()
    @argument("feature", nargs="?", help="feature to switch (see the list that %%nbdebug prints)")
    @argument("switch", nargs="?", help="on or off (explain also takes all)")
    @line_magic
    def nbdebug(self, line: str) -> Any:
        """Show nbdebug's status, or switch one of its features on or off.

        Usage::

            %nbdebug                 # versions, CUDA / torch_xla availability, features and their state
            %nbdebug explain off     # stop showing a diagnosis under errors
            %nbdebug explain on
            %nbdebug explain all     # also say so when an error is not recognised
            %nbdebug traceback full  # IPython's whole traceback (default: short, library frames folded)
            %nbdebug traceback short
            %nbdebug warnings off    # no panel under warnings that signal a bug (loss broadcasting, ...)

        Returns the status object (also after a switch).
        """
        args = parse_args(self.nbdebug, line, "%nbdebug")
        features = self.nbd_state.features
        explainer: Explainer = self.nbd_state.explainer  # type: ignore[attr-defined]
        if args.feature is not None:
            feature = features.get(args.feature)
            if feature is None:
                raise UsageError(f"%nbdebug: unknown feature {args.feature!r}; expected one of: {', '.join(features)}")
            word = (args.switch or "").lower()
            if args.feature == "traceback":
                word = {"short": "on", "full": "off"}.get(word, word)
            if args.feature == "explain" and word in ("all", *_SWITCH_WORDS):
                explainer.show_unknown = word == "all"
                word = "on" if word == "all" else word
            if word not in _SWITCH_WORDS:
                expected = {"explain": "'on', 'off' or 'all'", "traceback": "'short' or 'full'"}.get(
                    args.feature, "'on' or 'off'")
                raise UsageError(f"%nbdebug {args.feature}: expected {expected}, got {args.switch!r}")
            try:
                feature.set(_SWITCH_WORDS[word])
            except RuntimeError as e:
                raise UsageError(f"%nbdebug {args.feature}: {e}") from e
        from nbdebug.core._status import collect_status

        modes = {"explain": "all"} if explainer.show_unknown else {}
        if "traceback" in features:
            modes["traceback"] = "short" if features["traceback"].on else "full"
        return collect_status(tuple((f.name, f.on, f.description) for f in features.values()), modes)

    @line_cell_magic
    def explain(self, line: str, cell: str | None = None) -> Any:
        """Explain an error.

        Usage::

            %explain                 # the last error raised in this session
            %explain CUDA error: device-side assert triggered     # one pasted line
            %%explain                # a whole pasted log or traceback from a job that ran elsewhere
            ...pasted text...

        Returns a ``Diagnosis`` (``.kind``, ``.evidence``, ``.fixes``, ``.to_dict()``).
        """
        from nbdebug.core.explain import explain

        text = (cell if cell is not None else line).strip()
        if text:
            return explain(text)
        exc = getattr(sys, "last_value", None)
        if exc is None:  # (not `or`: the user's exception decides its own truth value)
            exc = getattr(sys, "last_exc", None)
        if exc is None:
            raise UsageError("%explain: no error has been raised yet; paste the error text after %explain or in %%explain")
        return diagnose_exception(self.nbd_state, exc)


def register(state: ExtensionState) -> None:
    """Register the core magics and the explainer (on by default)."""
    state.register_magics(CoreMagics)
    explainer = Explainer(state)
    state.explainer = explainer  # type: ignore[attr-defined]
    state.register_event("post_run_cell", explainer)

    def enable() -> None:
        explainer.enabled = True

    def disable() -> None:
        explainer.enabled = False

    state.add_feature(Feature("explain", "diagnosis panel under every error", enable, disable), on=True)

    from nbdebug.ipython._warnings import register as register_warnings

    register_warnings(state)

    from nbdebug.ipython._traceback import ShortTracebacks

    short = ShortTracebacks(state.shell, explainer.diagnose, explainer.shows, explainer.keep_full_traceback,
                            explainer.show)
    state.short_tracebacks = short  # type: ignore[attr-defined]
    feature = Feature("traceback", "short tracebacks: your frames in full, library frames folded, the diagnosis "
                      "first (the full traceback is in the panel)", short.enable, short.disable)
    state.add_feature(feature)
    try:
        feature.set(True)
    except RuntimeError:  # another extension's custom exception handler: leave it in charge
        pass
