"""``%%nanhunt`` and ``%%gradmonitor`` cell magics, and the live GradMonitor widget.

Imported by ``%load_ext nbdebug``: no torch, numpy, pandas, matplotlib or ipywidgets at import time.
"""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from nbdebug.ipython._state import ExtensionState


def _find_model(shell: Any, expr: str | None, magic: str) -> Any:
    """The model named by ``expr``, or the single top-level nn.Module in the user's namespace."""
    import sys

    torch = sys.modules.get("torch")
    if expr:
        try:
            model = eval(expr, shell.user_ns)  # noqa: S307 - the user's own expression, in the user's namespace
        except Exception as e:
            raise UsageError(f"%%{magic}: could not evaluate the model expression {expr!r}: {e!r}") from e
        if torch is None or not isinstance(model, torch.nn.Module):
            raise UsageError(f"%%{magic}: {expr!r} is a {type(model).__name__}, expected a torch.nn.Module")
        return model
    if torch is None:
        raise UsageError(f"%%{magic}: torch is not imported in this session; name the model: %%{magic} MODEL")
    modules = {id(v): (k, v) for k, v in shell.user_ns.items() if not k.startswith("_") and isinstance(v, torch.nn.Module)}
    inner = {id(m) for _, v in modules.values() for m in v.modules() if m is not v}
    roots = [(k, v) for i, (k, v) in modules.items() if i not in inner]
    if len(roots) != 1:
        names = ", ".join(sorted(k for k, _ in roots)) or "none"
        raise UsageError(f"%%{magic}: name the model to watch (%%{magic} MODEL); top-level modules found: {names}")
    return roots[0][1]


@magics_class
class TrainingMagics(Magics):
    """Training-dynamics magics."""

    nbd_state: ExtensionState
    shell: Any

    @magic_arguments()
    @argument("model", nargs="?", help="expression naming the model (default: the only nn.Module in the namespace)")
    @argument("--replay", action="store_true", help="replay the failing step to name the op and its source line")
    @argument("-o", "--output", metavar="NAME", help="also bind the NonFiniteError (or None) to NAME")
    @cell_magic
    def nanhunt(self, line: str, cell: str) -> Any:
        """Run the cell with a NaN/Inf sentinel on the model; stop at the first non-finite value.

        Usage::

            %%nanhunt model --replay
            for step in range(1000):
                loss = loss_fn(model(x), y)
                loss.backward(); opt.step(); opt.zero_grad()

        The model is looked up before the cell runs (build it in an earlier cell).  Every module's outputs and
        gradients are checked on the device, with one host sync per optimizer step.
        On the first NaN/Inf the cell stops with ``nbdebug.NonFiniteError`` naming the module, the step (from 0)
        and the phase (forward/backward); with ``--replay`` it also names the op and its source line (the
        step's backward replayed under ``torch.autograd.detect_anomaly``).  Hooks come off however the cell ends.
        Returns None when the cell ran clean (``-o NAME`` binds the error, or None).
        """
        args = parse_argstring(self.nanhunt, line)
        model = _find_model(self.shell, args.model, "nanhunt")
        from nbdebug.core.nan import nan_sentinel
        from nbdebug.errors import NonFiniteError

        found: NonFiniteError | None = None
        try:
            with nan_sentinel(model, replay=args.replay):
                self.shell.ex(cell)
        except NonFiniteError as e:
            found = e
            raise
        finally:
            if args.output:
                self.shell.user_ns[args.output] = found
        return None

    @magic_arguments()
    @argument("model", nargs="?", help="expression naming the model (default: the only nn.Module in the namespace)")
    @argument("--every", type=int, default=1, help="record every N-th optimizer step")
    @argument("--classes", type=int, default=None, help="number of classes (flags a loss plateau at chance level)")
    @argument("--no-live", action="store_true", help="do not show the live panel while the cell runs")
    @argument("-o", "--output", metavar="NAME", help="also bind the GradMonitor to NAME")
    @cell_magic
    def gradmonitor(self, line: str, cell: str) -> Any:
        """Run the cell with a GradMonitor on the model and show its live panel.

        Usage::

            %%gradmonitor model --classes 10 -o mon
            for x, y in loader:
                loss = loss_fn(model(x), y); loss.backward(); opt.step(); opt.zero_grad()

        Inside the cell, ``_gradmonitor.log_loss(loss)`` adds the loss to the panel.  Returns the recorded
        ``GradHistory`` (global/per-module norms, spikes, NaN/Inf, trends); ``-o NAME`` binds the monitor.
        """
        args = parse_argstring(self.gradmonitor, line)
        if args.every < 1:
            raise UsageError(f"%%gradmonitor: --every must be >= 1, got {args.every}")
        model = _find_model(self.shell, args.model, "gradmonitor")
        from nbdebug.core.grads import GradMonitor

        mon = GradMonitor(model, every=args.every, num_classes=args.classes, live=not args.no_live)
        if args.output:
            self.shell.user_ns[args.output] = mon
        self.shell.user_ns["_gradmonitor"] = mon
        with mon:
            self.shell.ex(cell)
        return mon.history


class LivePanel:
    """An ipywidgets HTML panel that a GradMonitor refreshes between steps (at most ``refresh_hz``)."""

    def __init__(self, monitor: Any) -> None:
        from nbdebug.errors import require

        ipywidgets = require("ipywidgets", "widgets", "The live GradMonitor panel")
        self.monitor = monitor
        self.widget = ipywidgets.HTML(value=self._render(running=True))
        self.widget.add_class("nbd-live")
        monitor.add_listener(self.update)
        self.updates = 0

    def _render(self, running: bool) -> str:
        from nbdebug.render.training import live_html

        return live_html(self.monitor.history, running=running)

    def update(self, monitor: Any) -> None:
        self.widget.value = self._render(running=monitor._attached)
        self.updates += 1

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


def live_panel(monitor: Any) -> LivePanel:
    """Create and display the live panel of ``monitor`` (a plain HTML snapshot outside IPython)."""
    panel = LivePanel(monitor)
    try:
        from IPython import get_ipython

        if get_ipython() is not None:
            from IPython.display import display

            display(panel.widget)
    except ImportError:  # pragma: no cover - IPython is a dependency
        pass
    return panel


def nonfinite_section(exc: BaseException, diagnosis: Any) -> Any:
    """Enricher: add the sentinel's findings (module, step, phase, op, source line) to the error panel."""
    from nbdebug.errors import NonFiniteError

    if not isinstance(exc, NonFiniteError):
        return diagnosis
    import dataclasses

    from nbdebug.core._dynamics import KINDS
    from nbdebug.core.fixes._diagnosis import Section
    from nbdebug.render._html import esc, kv_table

    rows = [("module", exc.module), ("step (from 0)", exc.step), ("phase", exc.phase)]
    rows += [(k, v) for k, v in (("op", exc.op), ("source", exc.source), ("detect_anomaly", exc.anomaly)) if v]
    rows += [(f"tensor {k}", v) for k, v in exc.stats.items()]
    kind = "nonfinite_forward" if exc.phase == "forward" else "nonfinite_gradient"
    fixes = KINDS[kind].fixes
    text = "\n".join(f"{k}: {v}" for k, v in rows) + "\n" + "\n".join(f"fix: {f}" for f in fixes)
    html = kv_table(rows) + "<ul>" + "".join(f"<li>{esc(f)}</li>" for f in fixes) + "</ul>"
    if exc.op is None:
        html += '<div class="nbd-muted">nan_sentinel(model, replay=True) or %%nanhunt --replay names the op and line</div>'
    section = Section(title="NaN/Inf sentinel", text=text, html=html)
    try:
        changes: dict[str, Any] = {"sections": (*diagnosis.sections, section)}
        # the sentinel knows more than the message: where, when and in which pass the value appeared
        from nbdebug.core.fixes._diagnosis import Fix

        where = f"in {exc.module!r}" if exc.module else ""
        changes.update(
            category=diagnosis.category if diagnosis.known else "nan_loss",
            title=f"NaN/Inf in the {exc.phase} pass {where} at step {exc.step}",
            summary=KINDS[kind].title + f": first seen {where}, step {exc.step} (from 0), {exc.phase} pass",
            fixes=(*(Fix(f) for f in fixes), *diagnosis.fixes),
        )
        return dataclasses.replace(diagnosis, **changes)
    except (TypeError, AttributeError, ValueError):
        return diagnosis


def register(state: ExtensionState) -> None:
    """Register this area's magics and the NonFiniteError section of the error panel."""
    state.register_magics(TrainingMagics)
    state.add_enricher(nonfinite_section)
