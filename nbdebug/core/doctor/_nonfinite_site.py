"""Where a NaN/Inf of the first step was made: the finding (``nonfinite``: the module, the op and the line of the
user's code), the op whose backward first turned finite gradients non-finite (``gradient_site``, replayed under
anomaly mode on the copy), and the op of the loss code whose output first went non-finite (``loss_site``).
"""

from __future__ import annotations

import re
from typing import Any

from nbdebug.core.doctor._session import Session, fixes_for
from nbdebug.errors import NonFiniteError

__all__ = ["nonfinite", "gradient_site", "loss_site"]


def nonfinite(s: Session, kind: str, what: str, e: NonFiniteError) -> None:
    where = e.module
    if where not in ("(loss)", "(input)") and not where.startswith("(loss"):
        where = s.label("" if where == "(model)" else where)
    detail = f" ({e.stats['location']})" if e.stats.get("location") else ""
    made = ""
    if e.op:
        by = f"the gradient of {e.op}" if kind == "nonfinite_gradient" else e.op
        made = f"; made by {by}" + (f" at {e.source}" if e.source else "")
    if where == "(loss)":
        where = "the loss code"
    fixes = _guard_fixes(e.op) if kind == "nonfinite_gradient" and e.op else None
    if where == "(input)":  # the batch brings them: no guard, precision or normalisation in the model helps
        fixes = fixes_for("nonfinite_input")
    s.add(kind, f"{what}, first in {where}{detail}{made} ({_stats_text(e.stats)})",
          (where, *((e.source,) if e.source else ())), fixes=fixes,
          evidence={k: v for k, v in (("op", e.op), ("line", e.source)) if v})


def _guard_fixes(op: str) -> Any:
    """A NaN gradient whose op is named: guard that op's input (why its gradient is infinite, and the safe form)."""
    from nbdebug.core._findings import Fix
    from nbdebug.core.knowledge.training import GRADIENT_GUARDS, GUARD_FIX

    general = fixes_for("nonfinite_gradient_op")
    name = op.rsplit(".", 1)[-1].lower().lstrip("_")
    key = next((k for k in GRADIENT_GUARDS if name == k or name.endswith(k) or name.startswith(k)), None)
    if key is None:
        return general
    why, code = GRADIENT_GUARDS[key]
    return (Fix(GUARD_FIX.format(op=op, why=why), code), *general[1:])


def gradient_site(s: Session, work: Any) -> tuple[str | None, str | None]:
    """The op whose backward first made a non-finite gradient from finite ones in the first step (sqrt's at 0 is
    inf; the NaN comes a node later, where anomaly mode's NaN check would point), and the line of the user's code
    that called it.  The step's loss is made again on the copy under anomaly mode (each node keeps its forward's
    stack) and differentiated into fresh gradients (the parameters' ``.grad`` are not touched).  (None, None) when
    no node is found."""
    import warnings

    import torch

    params = [p for p in work.parameters() if p.requires_grad]
    first: list[Any] = []

    def watch(node: Any) -> Any:
        def hook(grad_inputs: Any, grad_outputs: Any) -> None:
            if not first and _all_finite(grad_outputs) and not _all_finite(grad_inputs):
                first.append(node)
        return hook

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # anomaly mode's own "this mode will increase the runtime"
            with torch.autograd.detect_anomaly(check_nan=False):
                _, loss = s.loss.loss(work, s.loss.inputs)
        seen: set[Any] = set()
        todo = [loss.grad_fn]
        while todo:
            node = todo.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            node.register_hook(watch(node))
            todo.extend(n for n, _ in node.next_functions)
        torch.autograd.grad(loss, params, allow_unused=True)
    except Exception:  # the replay only adds detail; the finding stands without it
        return None, None
    if not first:
        return None, None
    node = first[0]
    name = re.sub(r"Backward\d*$", "", node.name())
    op = f"torch.{_snake(name)}"
    return op, _user_line(node.metadata.get("traceback_") or [])


def _all_finite(grads: Any) -> bool:
    import torch

    return all(g is None or bool(torch.isfinite(g).all()) for g in grads)


def _user_line(stack: list[str]) -> str | None:
    """The innermost frame of a formatted stack that is the user's, named as the user knows it."""
    from nbdebug.core._cells import is_cell_file, site_label

    for text in reversed(stack):
        m = re.match(r'\s*File "([^"]+)", line (\d+), in (\S+)\n?\s*(.*)', text, re.S)
        if m is None or re.search(r"[/\\](torch|nbdebug)[/\\]|<frozen ", m.group(1)):
            continue
        file, line, fn, code = m.groups()
        if is_cell_file(file):
            return site_label(file, int(line))
        return f"{file}:{line} in {fn}: {code.strip()}"
    return None


def _snake(name: str) -> str:
    """An autograd node's op name as torch spells the function: LinalgVectorNorm -> linalg_vector_norm."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def loss_site(s: Session, work: Any) -> tuple[str | None, str | None]:
    """The op and the line (as the user knows it) of the loss code that made the first non-finite value: the
    step is run again under a mode that notes the first op whose output is non-finite while its inputs are
    finite (the model's forward was finite, so that op is in the loss code)."""
    import traceback

    import torch

    from nbdebug.core.training._replay import _first_nonfinite_mode, _user_frame

    mode = _first_nonfinite_mode()
    try:
        with torch.no_grad(), mode:
            s.loss.loss(work, s.loss.inputs)
    except Exception:  # the replay only adds detail; the finding stands without it
        return None, None
    # a loss module of torch's own (nn.MSELoss) has no line of the user's: the innermost user frame is then the
    # call of the doctor itself, which is no site of the loss
    return mode.op, None if mode.source == _user_frame(traceback.extract_stack()) else mode.source


def _stats_text(stats: dict[str, Any]) -> str:
    parts = [f"{k}={stats[k]}" for k in ("nan", "posinf", "neginf") if stats.get(k)]
    if "shape" in stats:
        parts.append(f"shape {tuple(stats['shape'])}")
    return ", ".join(parts) or "non-finite"
