"""``nan_sentinel``: find the first module whose output or gradient goes NaN/Inf, at one host sync per step.

Forward hooks on every module record ``isfinite(output).all()`` as a device tensor (no sync) and hook each output
tensor's gradient; parameters get gradient hooks too.  At a step boundary (the optimizer's step, which has not
yet applied the bad gradients; an explicit ``sentinel.step()``; the next forward of the model; or the end of the
``with`` block) the flags are stacked and read once.  The first non-finite value in execution order names the
module, the phase and the step, and ``NonFiniteError`` is raised.  With ``replay=True`` that step's forward is run
again, op by op, to name the first op that produced the value and its source line, and its backward under
``torch.autograd.detect_anomaly``.

Attribution in the backward pass: a gradient is checked once per tensor; when the gradient of a module's input
(or of one of its parameters) is the first non-finite one, that module's backward produced it; when the gradient
of the model's output is already non-finite, the loss (code after the model) produced it.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Any

from nbdebug.core._findings import Finding, HasFindings
from nbdebug.core._recorder import Recorder
from nbdebug.core._result import Result
from nbdebug.core.training._dynamics import describe_tensor
from nbdebug.core.training._replay import ReplayResult, _tensors, replay_step
from nbdebug.errors import InvalidArgumentError, NonFiniteError, exception_message

__all__ = ["nan_sentinel", "NanSentinel", "NanReport", "ReplayResult", "replay_step"]


@dataclass(frozen=True, repr=False)
class NanReport(HasFindings, Result):
    """What a NaN/Inf sentinel watched, and the first non-finite value it found (``rec.result``).

    Attributes
    ----------
    modules : int
        Modules whose outputs (and, with ``backward``, gradients) were checked.
    steps : int
        Training steps checked (one host sync each).
    backward : bool
        Gradients were checked too.
    error : NonFiniteError or None
        The first non-finite value, as the error raised for it (module, step, phase, statistics, and with replay
        the op and its source line); None when every checked value was finite.
    """

    modules: int
    steps: int
    backward: bool
    error: NonFiniteError | None = None

    @property
    def findings(self) -> tuple[Finding, ...]:
        """The non-finite value as a finding (``nonfinite_forward`` or ``nonfinite_gradient``), or none."""
        e = self.error
        if e is None:
            return ()
        from nbdebug.core.knowledge import finding

        kind = "nonfinite_forward" if e.phase in ("forward", "input") else "nonfinite_gradient"
        where = tuple(w for w in (e.module and f"module {e.module}", e.source) if w)
        return (finding(kind, exception_message(e), where=where,
                        evidence={"step": e.step, "phase": e.phase, **({"op": e.op} if e.op else {})}),)

    def _summary_line(self) -> str:
        if self.error is not None:
            return f"NaN/Inf at step {self.error.step}, {self.error.phase}, module {self.error.module or '(root)'}"
        checked = "outputs and gradients" if self.backward else "outputs"
        return f"no NaN/Inf in {self.steps} step(s): {checked} of {self.modules} module(s) checked"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the counts, and the error's module, step, phase, op, source and message."""
        e = self.error
        return {"modules": self.modules, "steps": self.steps, "backward": self.backward,
                "error": None if e is None else {"message": exception_message(e), "module": e.module, "step": e.step,
                                                 "phase": e.phase, "op": e.op, "source": e.source}}

LOSS = "(loss: code after the model's output)"
_WIDE: set[Any] = set()  # float32/float64: summed in their own dtype; half types are summed in float32
_F32: Any = None


_TENSOR: Any = None  # torch.Tensor, set when a sentinel is made (torch is not imported with this module)


def _flat(obj: Any) -> Any:
    """The tensors of a hook's inputs or output.

    The common shapes (one tensor, a tuple of tensors) are taken without a generator.
    """
    if isinstance(obj, _TENSOR):
        return (obj,)
    if type(obj) is tuple and all(isinstance(o, _TENSOR) for o in obj):
        return obj
    return tuple(_tensors(obj))


def _finite_probe(t: Any) -> Any:
    """One reduction kept on the device: the sum is NaN/Inf iff an element is (barring overflow, re-checked)."""
    t = t.detach()
    return t.sum() if t.dtype in _WIDE else t.sum(dtype=_F32)


class NanSentinel(Recorder):
    """Hooks that watch every module's outputs and gradients for NaN/Inf (see ``nan_sentinel``).

    A recorder: ``result`` is a ``NanReport``: what it watched, and in ``.error`` the first ``NonFiniteError`` it
    raised or found (None while it saw none).
    """

    _label = "NanSentinel"

    def __init__(self, model: Any, *, replay: bool = False, optimizer: Any = None, check_backward: bool = True,
                 step_hook: bool = True):
        import torch

        from nbdebug.core.training.grads import unwrap_model

        global _F32, _TENSOR
        _F32 = torch.float32
        _TENSOR = torch.Tensor
        _WIDE.update((torch.float32, torch.float64))
        if not isinstance(model, torch.nn.Module):
            raise InvalidArgumentError(f"nan_sentinel: expected a torch.nn.Module, got {type(model).__name__}")
        if optimizer is not None and not callable(getattr(optimizer, "register_step_pre_hook", None)):
            raise InvalidArgumentError(
                f"nan_sentinel: optimizer must be a torch.optim.Optimizer or None, got {type(optimizer).__name__}"
            )
        self.model = unwrap_model(model)
        self.replay = bool(replay)
        self.optimizer = optimizer
        self.check_backward = bool(check_backward)
        self.names = [n for n, _ in self.model.named_modules()]
        self._params = [p for p in self.model.parameters() if p.requires_grad]
        self._modules = [m for _, m in self.model.named_modules()]
        index = {n: i for i, n in enumerate(self.names)}
        self._parent = [index.get(n.rsplit(".", 1)[0] if "." in n else "", 0) for n in self.names]
        self._param_owner: dict[int, int] = {}
        for i, m in enumerate(self._modules):
            for p in m.parameters(recurse=False):
                self._param_owner.setdefault(id(p), i)
        self.step_index = 0
        self.syncs = 0
        # without the optimizer hook the caller marks each step (``step()``) before the optimizer applies it
        self.step_hook = bool(step_hook)
        self._saw_optimizer = optimizer is not None or not self.step_hook
        self._handles: list[Any] = []
        self._active = False
        self._replaying = False
        self._found: NonFiniteError | None = None
        self._reset()

    def _reset(self) -> None:
        # the hooks on this step's activations have done their work: take them off, so that a tensor the user
        # keeps (an output stored for later) carries no hook of ours
        for h in getattr(self, "_tensor_handles", ()):
            h.remove()
        self._tensor_handles: list[Any] = []
        # one entry per checked tensor, in the order they were produced: flag (device scalar) and where
        self._flags: list[Any] = []
        # (kind, module index, tensor or weakref, shape, dtype); kind: data/forward/input/output/parameter
        self._where: list[tuple[str, int, Any, tuple[Any, ...], str]] = []
        self._backward_seen = False
        # id(tensor) -> (tensor, producer index, consumer indices, {"model_output": bool}); this forward only
        self._seen: dict[int, tuple[Any, int, list[int], dict[str, bool]]] = {}
        self._fwd_seen: dict[int, Any] = {}
        # id(tensor) -> index of its "between" flag; flag index -> the module that finished just before
        self._between: dict[int, int] = {}
        self._prev: dict[int, int] = {}
        self._last_done = -1
        self._calls: list[tuple[Any, Any, Any]] = []
        self._out_grads: list[Any] = []
        self._forwards = 0

    # -- the recorder ----------------------------------------------------------------------------------------
    @property
    def result(self) -> NanReport:
        """What was watched so far, and the first non-finite value seen (``.error``; None when none was)."""
        return NanReport(modules=len(self.names), steps=self.step_index, backward=self.check_backward,
                         error=self._found)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:  # the block's own error goes on: what is pending is not looked at
            self.detach()
            return
        found = self._last_check()
        if found is not None:
            raise found

    def stop(self) -> None:
        """Take every hook off, then check what the last step left pending: what it finds is ``result``."""
        self._last_check()

    def _last_check(self) -> NonFiniteError | None:
        self.remove_hooks()
        try:
            self.check()
        except NonFiniteError as e:
            return e
        finally:
            self._reset()
        return None

    def start(self) -> NanSentinel:
        """Register the hooks; returns ``self``."""
        if self._active:
            return self
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        try:
            root = self._modules[0]
            self._handles.append(root.register_forward_pre_hook(self._root_pre, with_kwargs=True))
            for i, m in enumerate(self._modules):
                self._handles.append(m.register_forward_hook(self._make_fwd(i)))
            if not self.step_hook:
                pass
            elif self.optimizer is not None:
                self._handles.append(self.optimizer.register_step_pre_hook(self._on_opt_step))
            else:
                self._handles.append(register_optimizer_step_pre_hook(self._on_opt_step))
        except BaseException:
            self.detach()
            raise
        self._active = True
        return self

    attach = start  # its name before the recorder shape

    def detach(self) -> None:
        """Remove every hook and drop what is pending (safe to call twice)."""
        self.remove_hooks()
        self._reset()

    def remove_hooks(self) -> None:
        """Remove every hook but keep the pending flags, so that a last ``check()`` can still run."""
        for h in self._handles:
            h.remove()
        self._handles.clear()
        for h in self._tensor_handles:
            h.remove()
        self._tensor_handles.clear()
        self._active = False

    # -- hooks ---------------------------------------------------------------------------------------------
    def _root_pre(self, module: Any, args: Any, kwargs: Any) -> None:
        if self._replaying:
            return
        if self._flags:
            if not self._saw_optimizer:  # with one, gradient accumulation keeps flags until its step
                # no optimizer seen (evaluation loops, hand-written updates): each forward is a step
                self.check(advance=True)
        for t in _tensors((args, kwargs)):
            if t.is_floating_point():
                self._fwd_seen[id(t)] = t
                self._flags.append(_finite_probe(t))
                self._where.append(("data", -2, weakref.ref(t), t.shape, t.dtype))
        self._forwards += 1
        if self.replay:
            import torch

            self._calls.append((args, kwargs, torch.get_rng_state()))

    def _make_fwd(self, idx: int) -> Any:
        def hook(module: Any, inputs: Any, output: Any) -> None:
            if self._replaying:
                return
            # inputs made by the parent's own code between two modules (not a checked output, not the batch)
            for t in _flat(inputs):
                if t.is_floating_point():
                    key = id(t)
                    seen = self._fwd_seen.get(key)
                    if seen is t:
                        j = self._between.get(key)
                        if j is not None and self._is_ancestor(idx, self._where[j][1]):
                            # an enclosing module took the same tensor: the code that made it is around that one
                            w = self._where[j]
                            self._where[j] = (w[0], idx, w[2], w[3], w[4])
                        continue
                    self._fwd_seen[key] = t
                    self._between[key] = len(self._flags)
                    self._prev[len(self._flags)] = self._last_done
                    self._flags.append(_finite_probe(t))
                    self._where.append(("between", idx, t, t.shape, t.dtype))
            for t in _flat(output):
                if t.is_floating_point():
                    key = id(t)
                    if key in self._fwd_seen and self._fwd_seen[key] is t:
                        continue  # a parent returning its child's output: already checked at the child
                    self._fwd_seen[key] = t
                    self._flags.append(_finite_probe(t))
                    self._where.append(("forward", idx, t, t.shape, t.dtype))
                    if self.check_backward and t.requires_grad:
                        self._watch(t, producer=idx)
            if self.check_backward:
                for t in _flat(inputs):
                    if t.requires_grad and t.is_floating_point():
                        entry = self._seen.get(id(t))
                        if entry is None or entry[0] is not t:
                            self._watch(t, producer=-1)
                            entry = self._seen[id(t)]
                        entry[2].append(idx)
            self._last_done = idx
            if idx == 0:
                for t in _flat(output):
                    entry = self._seen.get(id(t))
                    if entry is not None and entry[0] is t:
                        entry[3]["model_output"] = True
                # the model's forward is done: hold no activation beyond what autograd itself keeps
                self._seen.clear()
                self._fwd_seen.clear()
                self._between.clear()
                self._where = [(k, i, weakref.ref(t) if k in ("forward", "between") and not isinstance(t, weakref.ref) else t, sh, dt)
                               for k, i, t, sh, dt in self._where]

        return hook

    def _is_ancestor(self, a: int, b: int) -> bool:
        """Module ``a`` encloses module ``b`` (strictly)."""
        if a == b or b < 0:
            return False
        return a == 0 or self.names[b].startswith(self.names[a] + ".")

    def _watch(self, t: Any, producer: int) -> None:
        entry = self._seen.get(id(t))
        if entry is not None and entry[0] is t:
            return
        consumers: list[int] = []
        meta = {"model_output": False}
        self._seen[id(t)] = (t, producer, consumers, meta)
        self._tensor_handles.append(t.register_hook(self._make_tensor_hook(producer, consumers, meta, t.shape, t.dtype)))

    def _make_tensor_hook(self, producer: int, consumers: list[int], meta: dict[str, bool], shape: Any,
                          dtype: Any) -> Any:
        def hook(grad: Any) -> None:
            if self._replaying or not self._active:
                return
            if consumers:  # the innermost module that took this tensor as input produced its gradient
                kind, where = "input", consumers[0]
            elif meta["model_output"]:  # the loss (code after the model) produced it
                kind, where = "output", -1
                if self.replay:
                    self._out_grads.append(grad)
            else:  # functional code in the forward of the producer's parent module used this output
                kind, where = "functional", self._parent[producer] if producer >= 0 else 0
            self._backward_seen = True
            # a gradient needs no detach (it carries no graph unless create_graph=True)
            self._flags.append(grad.sum() if grad.dtype in _WIDE and not grad.requires_grad else _finite_probe(grad))
            self._where.append((kind, where, weakref.ref(grad), shape, dtype))

        return hook

    def _on_opt_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.optimizer is None:
            ids = {id(p) for p in self.model.parameters()}
            if not any(id(p) in ids for g in optimizer.param_groups for p in g["params"]):
                return
        self._saw_optimizer = True
        self.step()

    # -- checking ------------------------------------------------------------------------------------------
    def step(self) -> None:
        """Mark the end of a training step: check the flags (one host sync) and count the step."""
        self.check(advance=True)

    def check(self, *, advance: bool = False) -> None:
        """Check pending flags now; raise ``NonFiniteError`` on the first non-finite value."""
        import torch

        step = self.step_index
        if advance:
            self.step_index += 1
        if not self._flags:
            self._reset()
            return
        if self._backward_seen and self.check_backward:
            self._add_param_flags()
        flags = self._flags
        # (n,) sums: NaN/Inf anywhere makes its sum non-finite
        mixed = len({v.dtype for v in flags}) > 1
        sums = torch.stack([v.to(torch.float64) for v in flags]) if mixed else torch.stack(flags)
        self.syncs += 1
        bad = ~torch.isfinite(sums)
        if not bool(bad.any()):
            self._reset()
            return
        try:
            for first in bad.nonzero()[:, 0].tolist():
                if self._confirmed(first):
                    self._raise(first, step)
        finally:
            self._reset()

    def _add_param_flags(self) -> None:
        """Parameter gradients: one fused norm over all of them, checked after the activation gradients."""
        import torch

        by_dev: dict[Any, list[tuple[int, Any]]] = {}
        for p in self._params:
            if p.grad is not None:
                by_dev.setdefault(p.grad.device, []).append((self._param_owner[id(p)], p.grad))
        for items in by_dev.values():
            # a sparse gradient (Embedding(sparse=True)) is checked through its values: no norm kernel takes it
            dense = [g if g.layout is torch.strided else (g.coalesce().values() if g.layout is torch.sparse_coo
                                                         else g.values()) for _, g in items]
            norms = torch._foreach_norm(dense)
            for (idx, g), n in zip(items, norms):
                self._flags.append(n)
                self._where.append(("parameter", idx, weakref.ref(g), tuple(g.shape), str(g.dtype)))

    def _tensor(self, i: int) -> Any:
        t = self._where[i][2]
        return t() if isinstance(t, weakref.ref) else t

    def _confirmed(self, i: int) -> bool:
        """Rule out a sum that overflowed although every element is finite (exact check, failure path only)."""
        import torch

        t = self._tensor(i)
        return t is None or not bool(torch.isfinite(t).all())

    def _raise(self, first: int, step: int) -> None:
        kind, idx, _, shape, dtype = self._where[first]
        shape, dtype = tuple(shape), str(dtype)
        t = self._tensor(first)
        if t is not None:
            stats = describe_tensor(t)
        else:  # freed since (nbdebug keeps no activation alive): what the device-side probe saw
            probe = float(self._flags[first])
            stats = {"shape": shape, "dtype": dtype.replace("torch.", ""),
                     "contains": "NaN" if math.isnan(probe) else "Inf"}
        location = None
        if kind in ("data", "forward", "between"):
            phase = "forward"
            if kind == "data":
                module, what = "(input)", "the model's input (the batch itself)"
            elif kind == "between":
                # every module that ran before produced finite outputs: the parent's own code made this value
                parent = self._parent[idx] if idx > 0 else 0
                module = self.names[parent]
                prev = self._prev.get(first, -1)
                cls = type(self._modules[parent]).__name__
                child = self.names[idx]
                if prev >= 0 and prev != parent and self._is_ancestor(parent, prev):
                    location = f"between {self.names[prev]} and {child} in {cls}.forward"
                else:
                    location = f"before {child} in {cls}.forward"
                what = (f"input of module {child!r} ({type(self._modules[idx]).__name__}), made by code {location} "
                        "(every module before it produced finite outputs)")
            else:
                module = self.names[idx]
                what = f"output of module {module!r} ({type(self._modules[idx]).__name__})"
        else:
            phase = "backward"
            module = LOSS if idx == -1 else self.names[idx]
            what = {
                "input": f"gradient produced by the backward of module {module!r}",
                "functional": f"gradient produced by code in the forward of module {module!r} (outside its children)",
                "output": "gradient of the model's output (produced by the loss)",
                "parameter": f"gradient of a parameter of module {module!r}",
            }[kind]
        replay = None
        if self.replay and self._calls:
            self._replaying = True
            try:
                replay = replay_step(self.model, self._calls, self._out_grads)
            finally:
                self._replaying = False
        counts = ", ".join(f"{k}={stats[k]}" for k in ("nan", "posinf", "neginf") if stats.get(k))
        msg = f"non-finite values in the {phase} pass at step {step}: {what}"
        if counts and stats.get("numel") is not None:
            msg += f" [{counts} of {stats['numel']} values; shape {stats.get('shape')}]"
        elif stats.get("contains"):  # the tensor is gone: what the device-side probe saw
            msg += f" [contains {stats['contains']}; shape {stats.get('shape')}]"
        if location is not None:
            stats = {**stats, "location": location}
        if replay is not None:
            msg += "\nreplay: " + replay.describe()
        found = NonFiniteError(
            msg,
            module=module,
            step=step,
            phase=phase,
            stats=stats,
            op=replay.op if replay else None,
            source=replay.source if replay else None,
            anomaly=replay.anomaly if replay else None,
        )
        if self._found is None:
            self._found = found
        raise found

    def __repr__(self) -> str:
        return f"<NanSentinel {'active' if self._active else 'inactive'}: {len(self.names)} modules, step {self.step_index}>"


def nan_sentinel(model: Any, *, replay: bool = False, optimizer: Any = None, check_backward: bool = True) -> NanSentinel:
    """Watch every module's outputs and gradients for NaN/Inf; raise ``NonFiniteError`` at the first one.

    Parameters
    ----------
    model : torch.nn.Module
        The model to watch (DDP / compile wrappers are looked through).
    replay : bool
        On failure, run the step's forward again to name the first op producing the value and its source line,
        and its backward under ``torch.autograd.detect_anomaly`` (keeps references to that step's inputs).
    optimizer : torch.optim.Optimizer, optional
        The optimizer whose step ends a training step; by default any optimizer stepping the model's parameters.
        Until an optimizer step is seen, each forward counts as a step: pass it when accumulating gradients.
    check_backward : bool
        Also watch gradients (of module outputs and parameters).

    Returns
    -------
    NanSentinel
        A recorder: ``with nan_sentinel(model) as s:``; ``s.result`` is a ``NanReport`` (steps and modules checked;
        ``.error``, the ``NonFiniteError`` it raised, None after a clean run); ``s.step()`` marks a step boundary
        in loops without a torch optimizer.

    Raises
    ------
    InvalidArgumentError
        When ``model`` is not a ``torch.nn.Module`` or ``optimizer`` is not an optimizer.
    NonFiniteError
        With ``module``, ``step`` (from 0), ``phase`` (``"forward"``/``"backward"``) and ``stats``.

    Examples
    --------
    >>> with nbdebug.nan_sentinel(model, replay=True):      # doctest: +SKIP
    ...     for step, (x, y) in enumerate(loader):
    ...         loss = loss_fn(model(x), y); loss.backward(); opt.step(); opt.zero_grad()
    """
    return NanSentinel(model, replay=replay, optimizer=optimizer, check_backward=check_backward)
