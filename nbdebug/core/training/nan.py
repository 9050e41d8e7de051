"""``nan_sentinel``: stop training at the first NaN/Inf, before the optimizer applies it, at one host sync a step.

Cheap enough to leave on, and it still says where the value was made.  The hot path hooks only the calls into the model (its own forward, or, when a training
loop calls its children, theirs): each call's inputs are kept by reference with the RNG, grad and autocast state,
its floating outputs are summed on the device, and the gradient reaching those outputs is summed too.  At a step
boundary (the optimizer's step, which has not yet applied the gradients; an explicit ``sentinel.step()``; the next
forward of the model when no optimizer was seen; or the end of the ``with`` block) those sums and one fused norm
over the parameters' gradients are stacked and read once.  Only when one is non-finite is the step's recorded calls
run again with hooks on every module (``_replay.Localiser``): the first non-finite value in execution order names
the module and the phase, and ``NonFiniteError`` is raised.  With ``replay=True`` the call is run once more, op by
op, to name the first op that produced the value and its source line, and its backward under
``torch.autograd.detect_anomaly``.

A forward that depends on state changed since the step's calls (a global flag, a counter) may not make the value
again when replayed: the error then names the call's module and says so.

Memory: a call made with grad disabled (an evaluation loop between two optimizer steps) is checked at the next
call and its inputs dropped, so one such batch is held at most.  With gradient accumulation each micro-batch's
inputs are held by reference until the optimizer's step (they are needed to replay it), 32 calls at most: past
that the pending values are checked early and the calls dropped (their output gradients are still checked).  A non-finite value that reaches neither
an output of the model nor a parameter's gradient (masked away) changes nothing that is trained, and is not
reported.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from nbdebug.core._findings import Finding, HasFindings
from nbdebug.core._recorder import Recorder
from nbdebug.core._result import Result
from nbdebug.core.training._replay import (
    Call,
    Localiser,
    Located,
    ReplayResult,
    _flat,
    _kept_state,
    _stats,
    finite_probe,
    first_nonfinite,
    param_grad_flags,
    replay_step,
    stacked,
)
from nbdebug.errors import InvalidArgumentError, NonFiniteError, exception_message

__all__ = ["nan_sentinel", "NanSentinel", "NanReport", "ReplayResult", "replay_step"]


@dataclass(frozen=True, repr=False)
class NanReport(HasFindings, Result):
    """What a NaN/Inf sentinel watched, and the first non-finite value it found (``rec.result``).

    Attributes
    ----------
    modules : int
        Modules in the model: each step checks the model's outputs (and, with ``backward``, the gradients), and a
        non-finite step is run again with every one of these watched, to name the one that made the value.
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
        return f"no NaN/Inf in {self.steps} step(s): the model's {checked} checked ({self.modules} module(s))"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the counts, and the error's module, step, phase, op, source and message."""
        e = self.error
        return {"modules": self.modules, "steps": self.steps, "backward": self.backward,
                "error": None if e is None else {"message": exception_message(e), "module": e.module, "step": e.step,
                                                 "phase": e.phase, "op": e.op, "source": e.source}}


LOSS = "(loss: code after the model's output)"
_MAX_CALLS = 32  # calls kept at once: past this (long accumulation) check early and drop the calls, not the gradient hooks
# backward passes in a row zeroed without an optimizer step that are dropped unchecked (a GradScaler halving its scale
# from 65536 after overflows skips about 16; one that skips every step hides a NaN the model makes)
_MAX_SKIPPED = 24


def _in_backward() -> bool:
    """Autograd's engine is running a backward on this thread (a checkpointed module's forward run again)."""
    import torch

    task = getattr(torch._C, "_current_graph_task_id", None)
    return task is not None and task() != -1


class NanSentinel(Recorder):
    """Checks every training step for NaN/Inf at one host sync, and names where it was made (see ``nan_sentinel``).

    A recorder: ``result`` is a ``NanReport``: what it watched, and in ``.error`` the first ``NonFiniteError`` it
    raised or found (None while it saw none).
    """

    _label = "NanSentinel"

    def __init__(self, model: Any, *, replay: bool = False, optimizer: Any = None, check_backward: bool = True,
                 step_hook: bool = True):
        import torch

        from nbdebug.core.training.grads import unwrap_model

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
        self._modules = [m for _, m in self.model.named_modules()]
        self._params = [p for p in self.model.parameters() if p.requires_grad]
        index = {n: i for i, n in enumerate(self.names)}
        parent = [index.get(n.rsplit(".", 1)[0] if "." in n else "", 0) for n in self.names]
        first_owner: dict[int, int] = {}
        for i, m in enumerate(self._modules):
            for p in m.parameters(recurse=False):
                first_owner.setdefault(id(p), i)
        self._param_owner = [first_owner[id(p)] for p in self._params]
        self._locate = Localiser(self.names, self._modules, parent, self._params, self._param_owner)
        # the calls that are recorded: the model's own, and its children's when a loop calls them directly
        # (a LightningModule's training_step); a call made inside a recorded one is not recorded again
        ids = {id(m): i for i, m in enumerate(self._modules)}
        self._entries = [0] + [ids[id(c)] for c in self.model.children() if id(c) in ids and ids[id(c)]]
        self.step_index = 0
        self.syncs = 0
        self.discarded = 0  # backward passes in a row whose gradients were zeroed without an optimizer step
        # without the optimizer hook the caller marks each step (``step()``) before the optimizer applies it
        self.step_hook = bool(step_hook)
        self._saw_optimizer = optimizer is not None or not self.step_hook
        self._handles: list[Any] = []
        self._tensor_handles: list[Any] = []
        self._active = False
        self._replaying = False
        self._found: NonFiniteError | None = None
        self._reset()

    def _reset(self) -> None:
        # the hooks on this step's outputs have done their work: take them off, so that a tensor the user keeps
        # (an output stored for later) carries no hook of ours
        for h in self._tensor_handles:
            h.remove()
        self._tensor_handles = []
        # one entry per checked value, in the order they were produced: flag (device scalar) and what it is of:
        # (kind, call index or parameter position, output position, tensor or weakref); kind: output/output_grad
        self._flags: list[Any] = []
        self._where: list[tuple[str, int, int, Any, Any, Any]] = []  # ..., shape, dtype (kept past the tensor)
        self._calls: list[Call | None] = []
        self._backward_calls: set[int] = set()
        self._depth = 0
        self._live = 0  # calls still kept (a call checked early is dropped: its slot holds None)
        self._last_no_grad = False

    def _check_early(self, *, no_grad_only: bool) -> None:
        """Check what is pending before the step ends, then drop the calls checked and the forward values.

        All calls are dropped, or with ``no_grad_only`` those made with grad disabled; the hooks waiting for a
        backward stay.
        """
        if self._flags:
            flags = self._flags
            self.syncs += 1
            first = first_nonfinite(flags, self._tensor)
            if first is not None:
                try:
                    self._raise(first, flags, self.step_index)
                finally:
                    self._reset()
        for k, call in enumerate(self._calls):
            if call is not None and (not no_grad_only or not call.grad_enabled):
                self._calls[k] = None
                self._live -= 1
        self._flags, self._where = [], []
        self._last_no_grad = False

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
            for i in self._entries:
                m = self._modules[i]
                self._handles.append(m.register_forward_pre_hook(self._make_pre(i), with_kwargs=True))
                self._handles.append(m.register_forward_hook(self._make_post(), always_call=True))
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

    # -- the hot path: a few Python calls and two device-side sums per call ---------------------------------
    def _make_pre(self, idx: int) -> Any:
        def pre(module: Any, args: Any, kwargs: Any) -> None:
            if self._replaying or _in_backward():  # gradient checkpointing runs the forward again in backward
                return
            if self._depth and idx:  # a child called inside a recorded call
                self._depth += 1
                return
            # (the model's own call is never nested: a depth left over is from a forward that was interrupted)
            if self._backward_calls and self.step_hook and self._discarded() and self.discarded < _MAX_SKIPPED:
                # a backward whose gradients were zeroed without an optimizer step (GradScaler skipping a step whose
                # scaled gradients overflowed): nothing of it reached the parameters, so it is dropped, not reported;
                # past _MAX_SKIPPED in a row (a scaler that skips every step: the NaN is the model's) it is checked
                self._reset()
                self.discarded += 1
            elif self._flags and not self._saw_optimizer:
                # no optimizer seen (evaluation loops, hand-written updates): each forward is a step
                self.check(advance=True)
            elif self._last_no_grad:
                # a call made with grad disabled (evaluation) has no backward to wait for: checked now and not
                # kept, so that an evaluation loop between two optimizer steps holds one batch at most
                self._check_early(no_grad_only=True)
            elif self._live >= _MAX_CALLS:
                self._check_early(no_grad_only=False)
            self._depth = 1
            call = Call(module, idx, args, kwargs)
            self._calls.append(call)
            self._live += 1
            self._last_no_grad = not call.grad_enabled

        return pre

    def _discarded(self) -> bool:
        """After a backward and before any optimizer step: every gradient is gone (``zero_grad()``, set to None)."""
        return all(p.grad is None for p in self._params)

    def _make_post(self) -> Any:
        def post(module: Any, args: Any, output: Any) -> None:
            if self._replaying or not self._depth or _in_backward():
                return
            self._depth -= 1
            if self._depth or output is None:  # a nested call, or the forward raised
                return
            k = len(self._calls) - 1
            for j, t in enumerate(_flat(output)):
                if t.is_floating_point():
                    self._flags.append(finite_probe(t))
                    self._where.append(("output", k, j, weakref.ref(t), t.shape, t.dtype))
                    if self.check_backward and t.requires_grad:
                        self._tensor_handles.append(t.register_hook(self._make_grad_hook(k, j)))

        return post

    def _make_grad_hook(self, k: int, j: int) -> Any:
        def hook(grad: Any) -> None:
            if self._replaying or not self._active:
                return
            self._backward_calls.add(k)
            self._flags.append(finite_probe(grad))
            # with replay the op replay runs the backward with the gradients the loss really sent
            self._where.append(("output_grad", k, j, grad if self.replay else weakref.ref(grad), grad.shape,
                                grad.dtype))

        return hook

    def _on_opt_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.optimizer is None:
            ids = {id(p) for p in self.model.parameters()}
            if not any(id(p) in ids for g in optimizer.param_groups for p in g["params"]):
                return
        self._saw_optimizer = True
        self.discarded = 0
        self.step()

    # -- checking ------------------------------------------------------------------------------------------
    def step(self) -> None:
        """Mark the end of a training step: check its values and the parameters' gradients, and count the step.

        The gradients are complete and not yet applied; one host sync.
        """
        self.check(advance=True, gradients=True)

    def check(self, *, advance: bool = False, gradients: bool = False) -> None:
        """Check pending values now; raise ``NonFiniteError`` on the first non-finite one.

        The parameters' gradients are checked too after a backward pass, or with ``gradients``.
        """
        step = self.step_index
        if advance:
            self.step_index += 1
        flags = self._flags
        if self.check_backward and (gradients or self._backward_calls):
            norms, where, values = param_grad_flags([p.grad for p in self._params])
            flags = flags + norms
            self._where.extend(("parameter", i, 0, g, g.shape, g.dtype) for i, g in zip(where, values))
        try:
            if not flags:
                return
            self.syncs += 1
            first = first_nonfinite(flags, self._tensor)
            if first is not None:
                self._raise(first, flags, step)
        finally:
            self._reset()

    def _tensor(self, i: int) -> Any:
        t = self._where[i][3]
        return t() if isinstance(t, weakref.ref) else t

    def _stats_of(self, i: int, flags: list[Any]) -> dict[str, Any]:
        """The statistics of checked value ``i``: exact while its tensor lives, else its shape and what the flag saw."""
        w = self._where[i]
        return _stats(self._tensor(i), flags[i], w[4], w[5])

    def _localise(self, flags: list[Any]) -> tuple[Located | None, int, str | None]:
        """Run the step's calls again, in order, with hooks on every module, up to the first non-finite value.

        Returns where it was, the call's index, and a note when running them again did not show it.
        """
        import torch

        finite = torch.isfinite(stacked(flags)).tolist()
        bad_out: dict[int, int] = {}  # call -> its first non-finite output
        bad_grad: dict[int, int] = {}  # call -> its first non-finite output gradient (the loss made it)
        # call -> position of each output a gradient reached -> that gradient (kept with replay=True, else None)
        grads: dict[int, dict[int, Any]] = {}
        for i, (kind, c, j, *_) in enumerate(self._where[:len(flags)]):
            if kind == "output" and not finite[i]:
                bad_out.setdefault(c, i)
            elif kind == "output_grad":
                if not finite[i]:
                    bad_grad.setdefault(c, i)
                grads.setdefault(c, {})[j] = self._tensor(i) if self.replay else None
        n, k = self._live, -1
        self._replaying = True
        try:
            with _kept_state(self.model):
                found, k = self._run_calls(bad_out, bad_grad, grads, flags)
            if found is not None:
                return found, k, None
        except Exception as e:  # the user's code failing when run again must not hide the non-finite value
            note = f"running the step again to find the module raised {type(e).__name__}: {e}"
        else:
            if not bad_out and not bad_grad and all(
                    w[0] == "parameter" for w, ok in zip(self._where, finite) if not ok):
                return None, -1, ("the gradients that reached the model's outputs were finite: the value reached "
                                  "this parameter's gradient by another path (a regulariser or penalty computed "
                                  "from the parameter itself, or code using it outside the model's forward)")
            which = f" (call {k + 1} of {n} in this step)" if n > 1 and k in bad_out else ""
            note = ("running the step's forward again did not make the value again" + which + ": the model's code "
                    "may depend on state that changed since (a flag, a counter), so the module inside it is not named")
        finally:
            self._replaying = False
        return None, -1, note

    def _run_calls(self, bad_out: dict[int, int], bad_grad: dict[int, int], grads: dict[int, dict[int, Any]],
                   flags: list[Any]) -> tuple[Located | None, int]:
        """The step's calls run again in order: the first non-finite value and its call (else the last call run)."""
        k = -1
        for k, call in enumerate(self._calls):
            if call is not None:  # a call checked early is not kept (its forward was finite)
                backward = k in self._backward_calls and k not in bad_grad and k not in bad_out
                found = self._locate.run(call, backward=backward, grad_outputs=grads.get(k))
                if found is not None:
                    return found, k
            if k in bad_out:  # its output was non-finite and is finite now
                break
            if k in bad_grad:  # the call's forward is finite and the gradient the loss sent back is not
                i = bad_grad[k]
                stats = self._stats_of(i, flags)
                return Located("output", -1, stats), k
        return None, k

    def _fallback(self, first: int, flags: list[Any]) -> Located:
        """What the step's own checks saw, when running it again did not show more."""
        kind, k = self._where[first][:2]
        stats = self._stats_of(first, flags)
        call = self._calls[k] if kind == "output" else None
        if call is not None:
            return Located("forward", call.index, stats)
        if kind == "output_grad":
            return Located("output", -1, stats)
        return Located("parameter", self._param_owner[k], stats)

    def _raise(self, first: int, flags: list[Any], step: int) -> None:
        found, k, note = self._localise(flags)
        if found is None:
            found = self._fallback(first, flags)
        kind, idx, stats, prev = found
        location = None
        if kind in ("data", "forward", "between"):
            phase = "forward"
            if kind == "data":
                kept = self._calls[k] if k >= 0 else None
                top = kept.index if kept is not None else 0
                module = "(input)"
                what = ("the model's input (the batch itself)" if top == 0
                        else f"the input of module {self.names[top]!r} (as the training code called it)")
                if kept is not None and kept.modified():  # not the data's fault: what the call saw is gone
                    module = self.names[top]
                    what = (f"the input of module {module!r} as it is now: the input was modified in place since the "
                            "call (by the forward itself, e.g. x.log_(), or by code after it), so the call's own "
                            "input is not known and running it again is not the step")
            elif kind == "between":
                # every module that ran before produced finite outputs: the parent's own code made this value
                parent = self._locate.parent[idx] if idx > 0 else 0
                module = self.names[parent]
                cls = type(self._modules[parent]).__name__
                child = self.names[idx]
                if prev >= 0 and prev != parent and self._locate.is_ancestor(parent, prev):
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
        calls = [c for c in (self._calls[k:k + 1] if k >= 0 else self._calls) if c is not None]
        if self.replay and calls:
            out_grads = [self._tensor(i) for _, _, i in sorted(
                (w[1], w[2], i) for i, w in enumerate(self._where[:len(flags)])
                if w[0] == "output_grad" and (k < 0 or w[1] == k))]
            self._replaying = True
            try:
                replay = replay_step(self.model, calls, out_grads)
            finally:
                self._replaying = False
        counts = ", ".join(f"{c}={stats[c]}" for c in ("nan", "posinf", "neginf") if stats.get(c))
        msg = f"non-finite values in the {phase} pass at step {step}: {what}"
        if counts and stats.get("numel") is not None:
            msg += f" [{counts} of {stats['numel']} values; shape {stats.get('shape')}]"
        elif stats.get("contains"):  # the tensor is gone: what the device-side probe saw
            msg += f" [contains {stats['contains']}; shape {stats.get('shape')}]"
        if note is not None:
            msg += f"\n({note})"
        if location is not None:
            stats = {**stats, "location": location}
        if replay is not None:
            msg += "\nreplay: " + replay.describe()
        found_error = NonFiniteError(
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
            self._found = found_error
        raise found_error

    def __repr__(self) -> str:
        return f"<NanSentinel {'active' if self._active else 'inactive'}: {len(self.names)} modules, step {self.step_index}>"


def nan_sentinel(model: Any, *, replay: bool = False, optimizer: Any = None, check_backward: bool = True) -> NanSentinel:
    """Stop training at the first NaN/Inf, before the optimizer applies it, and name the module that made it.

    Each step costs a sum of the model's outputs, a sum of the gradient reaching them and one fused norm over the
    parameters' gradients, read at one host sync.  Only a non-finite step is run again (same inputs, RNG state,
    grad and autocast mode) with every module watched, to name the first module whose output or gradient was
    non-finite.  A model whose code depends on state changed since the call may not make the value again: the
    error then names the call's module and says so.

    Parameters
    ----------
    model : torch.nn.Module
        The model to watch (DDP / compile wrappers are looked through).
    replay : bool
        On failure, also run the step's forward op by op to name the first op producing the value and its source
        line, and its backward under ``torch.autograd.detect_anomaly`` with the gradients the loss sent (kept until
        the step ends).
    optimizer : torch.optim.Optimizer, optional
        The optimizer whose step ends a training step; by default any optimizer stepping the model's parameters.
        Until an optimizer step is seen, each forward counts as a step: pass it when accumulating gradients.
    check_backward : bool
        Also check gradients (the one reaching the model's outputs, and the parameters').

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
