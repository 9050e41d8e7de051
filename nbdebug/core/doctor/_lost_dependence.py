"""Where the output stops depending on the input: the op of the forward that makes it the same for every sample.

When the model's output is identical for samples whose inputs differ, "check that the forward uses its input" is
only the symptom.  One forward of a copy runs under a ``TorchFunctionMode`` that notes every torch call: the
tensors it took and gave, whether each varies over the batch's samples (its first dimension), the module it ran
in.  From the output, the calls that made it are walked back; the first call met whose output is the same for
every sample while a floating-point input still varied is where the dependence is lost (a softmax over a
dimension of size 1 is 1.0 whatever its input; a multiply by a zero factor; a layer with no output features; a
tensor replaced by a constant).  A softmax over one unit is then an experiment: the same call made a sigmoid (what
a single unit needs) on a copy, trained on the batch, against the user's setup.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any

from nbdebug.core._findings import Fix
from nbdebug.core.doctor._session import Session

__all__ = ["Cut", "locate", "said"]

_LIKE = ("zeros_like", "ones_like", "full_like", "empty_like", "new_zeros", "new_ones", "new_full", "new_empty",
         "zero_", "fill_")
_MUL = ("mul", "mul_", "multiply", "__mul__", "__rmul__", "__imul__")
_MAX_OPS = 20000  # a forward longer than this is not walked (the finding keeps its general advice)


@dataclass
class Cut:
    """The call that made the output the same for every sample: what it is (``kind``), the op, the module it ran
    in, the user's line, and what was measured (input spread over the samples, the output's one value)."""

    kind: str  # softmax_one, zero_factor, zero_width, constant_like, op
    op: str
    module: str
    site: str | None
    detail: str
    spread_in: float
    value: float | None
    experiment: dict[str, Any] = field(default_factory=dict)


def _rows(t: Any, n: int) -> str:
    """'vary', 'same' (every sample's slice equal), or '' (no dimension of the batch's samples first)."""
    import torch

    if not isinstance(t, torch.Tensor) or t.dim() < 1 or int(t.shape[0]) != n or n < 2:
        return ""
    if t.numel() == 0:
        return "same"
    r = t.detach().reshape(n, -1)
    if not r.is_floating_point():
        return "same" if bool((r == r[:1]).all()) else "vary"
    r = r.float()
    dev = float((r - r[:1]).abs().max())
    scale = float(r.abs().max())
    return "same" if dev <= 1e-6 * max(scale, 1e-30) else "vary"


class _Op:
    __slots__ = ("index", "func", "args", "kwargs", "ins", "outs", "module", "site", "cut")

    def __init__(self, index: int, func: Any, args: Any, kwargs: Any, ins: list[Any], outs: list[Any],
                 module: str) -> None:
        self.index, self.func, self.args, self.kwargs = index, func, args, kwargs
        self.ins, self.outs, self.module = ins, outs, module
        self.site: str | None = None
        self.cut = False


def _trace(s: Session, work: Any, n: int) -> tuple[list[_Op], Any]:
    """One forward of ``work`` with every torch call noted; the calls and the forward's output."""
    import torch
    from torch.overrides import TorchFunctionMode

    from nbdebug.core.training._replay import _tensors, _user_frame

    ops: list[_Op] = []
    stack: list[str] = []

    class _Calls(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if len(ops) < _MAX_OPS:
                with torch._C.DisableTorchFunction():
                    ins = list(_tensors(list(args) + list(kwargs.values())))
                    outs = list(_tensors(out))
                    op = _Op(len(ops), func, args, kwargs, ins, outs, stack[-1] if stack else "")
                    floats = [t for t in outs if t.is_floating_point() and _rows(t, n)]
                    op.cut = bool(floats) and all(_rows(t, n) == "same" for t in floats) and any(
                        t.is_floating_point() and _rows(t, n) == "vary" for t in ins)
                    if op.cut:
                        op.site = _user_frame(traceback.extract_stack()[:-1])
                ops.append(op)
            return out

    def enter(name: str) -> Any:
        def pre(_m: Any, _a: Any) -> None:
            stack.append(name)
        return pre

    def leave(_m: Any, _a: Any, _o: Any) -> None:  # returns None: the output is left as it is
        if stack:
            stack.pop()

    handles = []
    for name, m in work.named_modules():
        handles.append(m.register_forward_pre_hook(enter(name)))
        handles.append(m.register_forward_hook(leave))
    here = _user_frame(traceback.extract_stack())  # a torch module's op has no line of the user's: this one
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]), _Calls():
            out = s.loss.forward(work, s.loss.inputs)
    finally:
        for h in handles:
            h.remove()
    for op in ops:
        if op.site == here:
            op.site = None
    return ops, out


def _walk_back(ops: list[_Op], y: Any) -> _Op | None:
    """The call nearest the output on the paths that make ``y`` whose output is the same for every sample while a
    floating-point input varied."""
    made: dict[int, list[_Op]] = {}
    for op in ops:
        for t in op.outs:
            made.setdefault(id(t), []).append(op)

    def maker(t: Any, before: int) -> _Op | None:
        return next((o for o in reversed(made.get(id(t), [])) if o.index < before), None)

    start = maker(y, len(ops))
    todo, seen, cuts = [start] if start is not None else [], set(), []
    while todo:
        op = todo.pop()
        if op.index in seen:
            continue
        seen.add(op.index)
        if op.cut:
            cuts.append(op)
            continue
        todo.extend(m for m in (maker(t, op.index) for t in op.ins) if m is not None)
    return max(cuts, key=lambda o: o.index) if cuts else None


def _describe(op: _Op, n: int) -> tuple[str, str, float, float | None]:
    """(kind, detail in words, the input's spread over the samples, the output's one value or None)."""
    from nbdebug.core.training._replay import _op_name

    name = _op_name(op.func)
    short = name.rsplit(".", 1)[-1]
    x = next(t for t in op.ins if t.is_floating_point() and _rows(t, n) == "vary")
    spread = float(x.detach().float().reshape(n, -1).std(dim=0).mean())
    out = next(t for t in op.outs if t.is_floating_point() and _rows(t, n))
    value = float(out.detach().reshape(-1)[0]) if out.numel() and bool((out == out.reshape(-1)[0]).all()) else None
    if short in ("softmax", "log_softmax", "_softmax", "_log_softmax"):
        dim = op.kwargs.get("dim", op.args[1] if len(op.args) > 1 else None)
        if isinstance(dim, int) and x.dim() > 0 and int(x.shape[dim]) == 1:
            return "softmax_one", f"{name} over dim={dim}, a dimension of size 1", spread, value
    if out.numel() == 0:
        return "zero_width", f"{name} gives {tuple(out.shape)}: no values for any sample", spread, value
    if short in _MUL:
        return "zero_factor", f"{name} by a factor that is zero", spread, value
    if short in _LIKE:
        return "constant_like", f"{name}: the input replaced by a constant", spread, value
    return "op", f"{name}, which gives the same value for every sample", spread, value


def locate(s: Session, work: Any, n: int) -> Cut | None:
    """The call where the output stops depending on the input (``work`` is a copy, in the mode the output was
    observed in), and for a softmax over one unit what a sigmoid in its place does on another copy; None when no
    such call is found (the output never read the input, or the forward is too long to walk)."""
    from nbdebug.core.doctor._inputs import logits_of

    ops, out = _trace(s, work, n)
    if len(ops) >= _MAX_OPS:
        return None
    op = _walk_back(ops, logits_of(out))
    if op is None:
        return None
    kind, detail, spread, value = _describe(op, n)
    cut = Cut(kind, detail.split(" ")[0], op.module, op.site, detail, spread, value)
    if kind in _MENDS:
        cut.experiment = _mended(s, kind)
    return cut


# what the fix of a cut does, tried on a copy: (the change in words)
_MENDS = {"softmax_one": "a sigmoid in the softmax's place", "zero_factor": "the zero factor made 1"}


def _zero(t: Any) -> bool:
    import torch

    return (isinstance(t, torch.Tensor) and t.numel() > 0 and not bool(t.any())) or (
        isinstance(t, (int, float)) and t == 0)


class _Mended:
    """The user's way of making the loss, with the cut mended in every call like it: a softmax over a dimension of
    size 1 made a sigmoid (a log_softmax a log-sigmoid), what one output unit needs; a product with a factor that
    is all zeros made the other factor (the zero made 1)."""

    def __init__(self, adapter: Any) -> None:
        self.adapter = adapter

    def loss(self, work: Any, inputs: Any, targets: Any = None) -> tuple[Any, Any]:
        import torch
        from torch.overrides import TorchFunctionMode

        class _Swap(TorchFunctionMode):
            def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                kwargs = kwargs or {}
                short = getattr(func, "__name__", "")
                if short in _MUL and len(args) == 2 and isinstance(args[0], torch.Tensor | float | int) \
                        and _zero(args[0]) != _zero(args[1]):
                    other = args[1] if _zero(args[0]) else args[0]
                    if isinstance(other, torch.Tensor):
                        return other.clone() if short.endswith("_") else other * 1
                if short in ("softmax", "log_softmax") and args and isinstance(args[0], torch.Tensor):
                    dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
                    if isinstance(dim, int) and int(args[0].shape[dim]) == 1:
                        f = torch.sigmoid if short == "softmax" else torch.nn.functional.logsigmoid
                        return f(args[0])
                return func(*args, **kwargs)

        with _Swap():
            return self.adapter.loss(work, inputs, targets)


def _mended(s: Session, kind: str) -> dict[str, Any]:
    """The user's setup and the same with the cut mended, each trained on the batch on a copy for the same steps:
    their losses at the start and the end."""
    from nbdebug.core.doctor._train_checks import train

    steps = min(s.options.steps, 60)
    runs = {}
    for key, adapter in (("before", None), ("after", _Mended(s.loss))):
        work, opt = s.fresh()
        curve = train(s, work, opt, s.loss.inputs, steps=steps, phase=f"experiment: {_MENDS[kind]}",
                      early_stop=key == "after", deadline=s.deadline(0.15), adapter=adapter)
        if not curve:
            return {}
        runs[key] = curve
    k = min(len(runs["before"]), len(runs["after"]))
    return {"steps": len(runs["after"]), "before": (runs["before"][0], runs["before"][k - 1]),
            "after": (runs["after"][0], runs["after"][-1]), "change": _MENDS[kind]}


def said(s: Session, cut: Cut, n: int) -> tuple[str, tuple[Fix, ...], dict[str, Any]]:
    """The finding's message, fixes and evidence for ``cut``."""
    from nbdebug.core.knowledge.training import LOST_DEPENDENCE

    where = s.label(cut.module) if cut.module else s.options.name
    at = f" at {cut.site}" if cut.site else ""
    value = f" ({cut.value:.4g} for every sample)" if cut.value is not None else ""
    message = (f"the output is identical for all {n} samples of the batch although their inputs differ: the "
               f"dependence on the input is lost in {where}{at}, at {cut.detail}: its input varies over the samples "
               f"(spread {cut.spread_in:.3g}), its output does not{value}. {LOST_DEPENDENCE[cut.kind][0]}")
    evidence: dict[str, Any] = {"samples": n, "op": cut.op, "module": where, "line": cut.site or "",
                                "lost_at": cut.detail}
    ex = cut.experiment
    if ex:
        (b0, b1), (a0, a1) = ex["before"], ex["after"]
        message += (f". Tried on a copy: with {ex['change']} the loss went {a0:.4g} -> {a1:.4g} in "
                    f"{ex['steps']} steps; as you have it, {b0:.4g} -> {b1:.4g}")
        evidence.update({"tried": ex["change"], "before": f"{b0:.4g} -> {b1:.4g}",
                         "after": f"{a0:.4g} -> {a1:.4g} in {ex['steps']} steps"})
    title, code = LOST_DEPENDENCE[cut.kind][1:]
    return message, (Fix(title, code),), evidence
