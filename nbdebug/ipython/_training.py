"""``%%nanhunt`` and ``%%gradmonitor`` cell magics, and the NaN/Inf section of the error panel.

Imported by ``%load_ext nbdebug``: no torch, numpy, pandas, matplotlib or ipywidgets at import time.  Both magics
run their cell through ``nbdebug.ipython._cell.run_body`` inside their recorder (``nan_sentinel``, ``GradMonitor``)
and return its ``result``: ``!``/``%`` lines work; hooks come off however the cell ends; on an error the report is
shown, then the cell's own error is re-raised.  The live GradMonitor panel is ``nbdebug.ipython._live``.
"""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from nbdebug.ipython._args import parse_args
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
        if torch is not None and not isinstance(model, torch.nn.Module):
            from nbdebug.core.training.grads import model_of

            inner = model_of(model)  # a Hugging Face / Lightning Trainer, an accelerate-prepared model
            if inner is not None:
                return inner
        if torch is None or not isinstance(model, torch.nn.Module):
            raise UsageError(f"%%{magic}: {expr!r} is a {type(model).__name__}, expected a torch.nn.Module or a "
                             "Trainer holding one (transformers.Trainer, lightning.Trainer after fit started)")
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


def _names_of(shell: Any, obj: Any) -> list[str]:
    return [k for k, v in list(shell.user_ns.items()) if v is obj and not k.startswith("_")]


@magics_class
class TrainingMagics(Magics):
    """Training-dynamics magics."""

    nbd_state: ExtensionState
    shell: Any

    @magic_arguments()
    @argument("model", nargs="?", help="expression naming the model or a Trainer holding it (default: the only "
              "nn.Module in the namespace)")
    @argument("--replay", action="store_true", help="replay the failing step to name the op and its source line")
    @argument("-o", "--output", metavar="NAME", help="also bind the NanReport (its .error: the NonFiniteError, or None) to NAME")
    @cell_magic
    def nanhunt(self, line: str, cell: str) -> Any:
        """Run the cell with a NaN/Inf sentinel on the model; stop at the first non-finite value.

        Usage::

            %%nanhunt model --replay
            for step in range(1000):
                loss = loss_fn(model(x), y)
                loss.backward(); opt.step(); opt.zero_grad()

        The model is looked up before the cell runs (build it in an earlier cell).  The model's outputs and
        gradients are checked on the device, with one host sync per optimizer step; a non-finite step is run again
        with every module watched, to name the module.
        On the first NaN/Inf the cell stops with ``nbdebug.NonFiniteError`` naming the module, the step (from 0)
        and the phase (forward/backward); with ``--replay`` it also names the op and its source line (the
        step's backward replayed under ``torch.autograd.detect_anomaly``).  The traceback ends at your line that
        ran into it (the cell's last line when the last step's check found it).  Hooks come off however the cell
        ends; any other error of the cell is re-raised unchanged.  ``!cmd`` and ``%magic`` lines work in the cell.
        The result is a ``NanReport`` (returned; ``-o NAME`` binds it): the steps and modules checked, and in
        ``.error`` the ``NonFiniteError`` when the cell raised one (None when it ran clean).
        """
        args = parse_args(self.nanhunt, line, "%%nanhunt")
        model = _find_model(self.shell, args.model, "nanhunt")
        from nbdebug.core.training.nan import nan_sentinel
        from nbdebug.errors import InvalidArgumentError
        from nbdebug.ipython._cell import run_body

        try:
            sentinel = nan_sentinel(model, replay=args.replay)
        except InvalidArgumentError as e:
            raise UsageError(f"%%nanhunt: {e}") from e
        # a NonFiniteError is the cell's error and the report's .error at once: the error panel (the explainer's
        # NaN/Inf section) shows it, run_body does not show the report a second time
        return run_body(self.shell, cell, magic="nanhunt", context=sentinel, report=lambda error: sentinel.result,
                        output=args.output)

    @magic_arguments()
    @argument("model", nargs="?", help="expression naming the model or a Trainer holding it (default: the only "
              "nn.Module in the namespace)")
    @argument("--every", type=int, default=1, help="record every N-th optimizer step")
    @argument("--classes", type=int, default=None, help="number of classes (flags a loss plateau at chance level)")
    @argument("--no-live", action="store_true", help="do not show the live panel while the cell runs")
    @argument("-o", "--output", metavar="NAME", help="also bind the GradHistory to NAME")
    @cell_magic
    def gradmonitor(self, line: str, cell: str) -> Any:
        """Run the cell with a GradMonitor on the model and show its live panel.

        Usage::

            %%gradmonitor model --classes 10 -o hist
            for x, y in loader:
                loss = loss_fn(model(x), y); loss.backward(); opt.step(); opt.zero_grad()

        Build the model in an earlier cell: the monitor watches the model that exists when the cell starts.
        Inside the cell, ``_gradmonitor`` is the monitor: ``_gradmonitor.log_loss(loss)`` adds the loss to the
        panel.  The live panel updates in place at most twice a second and ends as a static picture.  Returns the
        recorded ``GradHistory`` (global/per-module norms, spikes, NaN/Inf, trends, findings); ``-o NAME`` binds
        it.  A cell that records no optimizer step gets a warning saying why.  When the cell raises, the history
        is shown and the cell's own error is re-raised.
        """
        args = parse_args(self.gradmonitor, line, "%%gradmonitor")
        if args.every < 1:
            raise UsageError(f"%%gradmonitor: --every must be >= 1, got {args.every}")
        if args.classes is not None and args.classes < 1:
            raise UsageError(f"%%gradmonitor: --classes must be >= 1, got {args.classes}")
        model = _find_model(self.shell, args.model, "gradmonitor")
        from nbdebug.core.training.grads import GradMonitor
        from nbdebug.errors import InvalidArgumentError
        from nbdebug.ipython import _live  # noqa: F401 - registers the live panel with GradMonitor
        from nbdebug.ipython._cell import run_body

        try:
            mon = GradMonitor(model, every=args.every, num_classes=args.classes, live=not args.no_live)
        except InvalidArgumentError as e:
            raise UsageError(f"%%gradmonitor: {e}") from e
        self.shell.user_ns["_gradmonitor"] = mon
        names = _names_of(self.shell, model)

        def report(error: BaseException | None) -> Any:
            if mon.view is not None and hasattr(mon.view, "retire"):
                mon.view.retire()  # the returned history is the cell's one panel
            return _explain_no_steps(self.shell, mon.result, model, names)

        return run_body(self.shell, cell, magic="gradmonitor", context=mon, report=report, output=args.output)


def _explain_no_steps(shell: Any, history: Any, model: Any, names: list[str]) -> Any:
    """When no optimizer step was seen and the cell rebound the model's name, say so in the finding."""
    if history.steps_seen or not any(f.kind == "no_optimizer_steps" for f in history.findings):
        return history
    rebound = [n for n in names if shell.user_ns.get(n) is not model]
    if not rebound:
        return history
    import dataclasses

    from nbdebug.core.knowledge import finding

    shown = ", ".join(f"`{n}`" for n in rebound)
    better = finding(
        "no_optimizer_steps",
        f"no optimizer step of the monitored model was seen: the cell rebinds {shown} to a new object, which the "
        "monitor does not watch (and its optimizer steps the new parameters); build the model in an earlier cell",
        rebound,
        evidence={"steps_seen": 0},
    )
    findings = tuple(better if f.kind == "no_optimizer_steps" else f for f in history.findings)
    return dataclasses.replace(history, findings=findings)


def _safe(value: Any, limit: int = 300) -> str:
    """``str(value)``, never raising and never huge (the exception's attributes are the user's objects)."""
    try:
        text = str(value)
    except Exception:
        try:
            text = object.__repr__(value)
        except Exception:
            text = "<unprintable>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def nonfinite_section(exc: BaseException, diagnosis: Any) -> Any:
    """Enricher: add the sentinel's findings (module, step, phase, op, source line) to the error panel."""
    from nbdebug.errors import NonFiniteError

    if not isinstance(exc, NonFiniteError):
        return diagnosis
    try:
        return _nonfinite_section(exc, diagnosis)
    except Exception:  # the explainer adds to the traceback; its own failure must not hide the user's error
        return diagnosis


def _nonfinite_section(exc: Any, diagnosis: Any) -> Any:
    import dataclasses

    from nbdebug.core.explain._diagnosis import Section
    from nbdebug.core.knowledge import entry

    module = _safe(getattr(exc, "module", ""))
    step = _safe(getattr(exc, "step", "?"))
    phase = _safe(getattr(exc, "phase", ""))
    stats = getattr(exc, "stats", None)
    stats = stats if isinstance(stats, dict) else {}
    location = _safe(stats.get("location", "")) if stats.get("location") else ""
    op, source, anomaly = (getattr(exc, k, None) for k in ("op", "source", "anomaly"))
    replayed = "\nreplay: " in str(exc)
    facts: list[tuple[str, Any]] = [("module", module or "(the model's own forward)"), ("step (from 0)", step),
                                    ("phase", phase)]
    if location:
        facts.append(("made by", location))
    if op:  # the forward op first: the backward function is only detail
        facts.append(("op", _safe(op)))
    if source:
        facts.append(("source", _safe(source)))
    replay_note = ""
    if replayed:
        replay_note = str(exc).split("\nreplay: ", 1)[1].splitlines()[0]
    if anomaly:
        facts.append(("the backward pass (detect_anomaly)", _in_words(_safe(anomaly))))
    facts += [(f"tensor {_safe(k, 40)}", _safe(v)) for k, v in list(stats.items())[:12] if k != "location"]
    e = entry("nonfinite_forward" if phase == "forward" else "nonfinite_gradient")
    fixes = e.fixes
    notes: tuple[str, ...] = ()
    if not op and not replayed:
        notes = ("nan_sentinel(model, replay=True) or %%nanhunt --replay names the op and its source line",)
    if replayed:  # replay is already on: do not suggest it again
        fixes = tuple(f for f in fixes if "replay" not in f.title and "replay" not in f.code)
        if not op:
            notes = (f"replay: {_safe(replay_note, 400)}",)
    if op:
        first = f"{_safe(op)} produced the first non-finite value" + (f" at {_safe(source)}" if source else "")
    elif location:
        first = f"look at the code {location}: every module before it produced finite outputs"
    elif replayed and replay_note:
        first = _safe(replay_note, 400)
    else:
        first = ""
    place = _place(module, location)
    text = f"{e.title}: first seen {place}, step {step} (from 0), {phase} pass."
    section = Section(title="NaN/Inf sentinel", text=text, facts=tuple(facts), fixes=fixes, notes=notes)
    where = f" {place}"
    extra = {"first_step": first} if first else {}
    causes = diagnosis.causes
    if op:  # what the replay saw comes first; a guess such as "learning rate too high" goes after it
        seen = _op_cause(_safe(op), _safe(source) if source else "")
        causes = (seen, *[c for c in causes if "learning rate" not in c.lower()],
                  *[c for c in causes if "learning rate" in c.lower()])
    return dataclasses.replace(
        diagnosis,
        **extra,
        sections=(*diagnosis.sections, section),
        # the sentinel knows more than the message: where, when and in which pass the value appeared
        kind=diagnosis.kind if diagnosis.known else "nan_loss",
        causes=causes,
        title=f"NaN/Inf in the {phase} pass{where} at step {step}",
        summary=f"{e.title}: first seen{where}, step {step} (from 0), {phase} pass",
        fixes=(*fixes, *(f for f in diagnosis.fixes if not (replayed and "anomaly" in (f.title + f.code)))),
    )


_OP_CAUSES = {
    "log": "took the log of a number <= 0 (log(0) = -inf, log of a negative number = NaN)",
    "sqrt": "took the square root of a negative number (and its gradient at 0 is inf)",
    "div": "divided by zero", "true_divide": "divided by zero", "pow": "raised 0 to a negative power",
    "exp": "overflowed (exp of a large number is inf)", "acos": "took acos of a number outside [-1, 1]",
    "asin": "took asin of a number outside [-1, 1]",
}
_BACKWARD_WORDS = {"Addmm": "a Linear layer (addmm)", "Mm": "a matrix multiply", "Bmm": "a batched matrix multiply",
                   "Convolution": "a convolution", "Log": "torch.log", "Div": "a division", "Sqrt": "torch.sqrt",
                   "Pow": "a power", "Exp": "torch.exp", "Softmax": "a softmax", "LogSoftmax": "a log-softmax",
                   "NativeBatchNorm": "a BatchNorm layer", "NativeLayerNorm": "a LayerNorm layer"}


def _place(module: str, location: str) -> str:
    """Where the value appeared, as the error panel names modules: ``in model.2``, ``in the model's own
    forward, between fc2 and fc3``; never a bare index such as '2'."""
    if location:
        return f"in the model's own code, {location}"
    if not module or module == "(model)":
        return "in the model's own forward"
    if module.startswith("(loss"):
        return "in the loss code"
    return f"in model.{module}"


def _op_cause(op: str, source: str) -> str:
    name = op.rsplit(".", 1)[-1]
    what = _OP_CAUSES.get(name, "produced a non-finite value from finite inputs")
    return f"{op} {what}" + (f", at {source}" if source else "") + " (seen in the replay)"


def _in_words(anomaly: str) -> str:
    """detect_anomaly's ``Function 'AddmmBackward0' returned nan values`` with the function in words."""
    import re

    m = re.search(r"Function '(\w+?)Backward\d*'", anomaly)
    if not m:
        return anomaly
    words = _BACKWARD_WORDS.get(m.group(1), m.group(1).lower())
    return f"the gradient of {words} came out non-finite ({anomaly})"


def register(state: ExtensionState) -> None:
    """Register this area's magics and the NonFiniteError section of the error panel."""
    state.register_magics(TrainingMagics)
    state.add_enricher(nonfinite_section)
