"""Replaying a step in which the NaN sentinel saw a non-finite value: which module made it, then which op and line.

The sentinel's hot path records each top-level forward call of a step (the inputs, the RNG state, grad and autocast
mode) and checks a few aggregates.  When one is non-finite, ``Localiser`` runs those calls again, as recorded and
before the optimizer has applied anything, with hooks on every module: the first non-finite value in execution
order names the module, forward or backward.  ``replay_step`` (``replay=True``) then runs the call again under a
``TorchFunctionMode`` that records the first op whose output is non-finite while its inputs are finite, and its
backward under ``torch.autograd.detect_anomaly``.  RNG state and every buffer are restored after each replay.
"""

from __future__ import annotations

import contextlib
import re
import traceback
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from nbdebug.core._result import Result

__all__ = ["Call", "Localiser", "Located", "ReplayResult", "replay_step", "first_nonfinite", "stacked"]


def _tensors(obj: Any, depth: int = 0) -> Iterator[Any]:
    import torch

    if isinstance(obj, torch.Tensor):
        yield obj
    elif depth < 2 and isinstance(obj, (tuple, list)):
        for o in obj:
            yield from _tensors(o, depth + 1)
    elif depth < 2 and isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors(o, depth + 1)


def _flat(obj: Any) -> Any:
    """The tensors of a hook's inputs or output; the common shapes (one tensor, a tuple of tensors) without a
    generator, as this runs on every step."""
    from torch import Tensor

    if isinstance(obj, Tensor):
        return (obj,)
    if type(obj) is tuple and all(isinstance(o, Tensor) for o in obj):
        return obj
    return tuple(_tensors(obj))


def _detached(obj: Any, depth: int = 0) -> Any:
    """The same structure with each tensor that requires grad replaced by a fresh leaf: the replay's graph is its
    own, never the step's (which its backward may have freed)."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach().requires_grad_() if obj.requires_grad else obj
    if depth < 2 and type(obj) in (tuple, list):
        return type(obj)(_detached(o, depth + 1) for o in obj)
    if depth < 2 and type(obj) is dict:
        return {k: _detached(v, depth + 1) for k, v in obj.items()}
    return obj


class Call:
    """One top-level forward call of a step, as the sentinel recorded it: enough to run it again."""

    __slots__ = ("module", "index", "args", "kwargs", "rng", "cuda_rng", "grad_enabled", "autocast", "versions")

    def __init__(self, module: Any, index: int, args: Any, kwargs: Any) -> None:
        import torch

        self.module, self.index, self.args, self.kwargs = module, index, args, kwargs
        self.rng = torch.get_rng_state()
        self.cuda_rng = torch.cuda.get_rng_state() if torch.cuda.is_initialized() else None
        self.grad_enabled = torch.is_grad_enabled()
        self.autocast = _autocast_state()
        # each tensor input's version counter: one that moved was modified in place after the call began
        self.versions = tuple(t._version for t in _tensors((args, kwargs)))

    def modified(self) -> bool:
        """An input tensor was modified in place since the call began (by the forward itself or later code)."""
        return tuple(t._version for t in _tensors((self.args, self.kwargs))) != self.versions


def _autocast_state() -> tuple[tuple[str, Any], ...]:
    """The autocast regions now on: (device type, dtype) for CUDA and the CPU.  torch < 2.4 has only the
    per-device functions."""
    import torch

    if hasattr(torch, "get_autocast_dtype"):
        try:
            return tuple((d, torch.get_autocast_dtype(d)) for d in ("cuda", "cpu") if torch.is_autocast_enabled(d))
        except TypeError:  # is_autocast_enabled() taking no device type
            pass
    out = []
    if torch.is_autocast_enabled():
        out.append(("cuda", torch.get_autocast_gpu_dtype()))
    if torch.is_autocast_cpu_enabled():
        out.append(("cpu", torch.get_autocast_cpu_dtype()))
    return tuple(out)


@contextlib.contextmanager
def _as_recorded(call: Call) -> Iterator[None]:
    """Run under the call's RNG state, grad mode and autocast."""
    import torch

    torch.set_rng_state(call.rng)
    if call.cuda_rng is not None:
        torch.cuda.set_rng_state(call.cuda_rng)
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.set_grad_enabled(call.grad_enabled))
        for device, dtype in call.autocast:
            stack.enter_context(torch.autocast(device, dtype=dtype))
        yield


@contextlib.contextmanager
def _kept_state(model: Any) -> Iterator[None]:
    """Restore the RNG state and every buffer (running statistics, counters, EMA, spectral norm's vectors,
    non-persistent ones too) that replaying forward calls changes."""
    import torch

    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    cpu_rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state() if torch.cuda.is_initialized() else None
    try:
        yield
    finally:
        torch.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state(cuda_rng)
        with torch.no_grad():
            for b, saved in buffers:
                b.copy_(saved)


_WIDE: set[Any] = set()  # float32/float64: summed in their own dtype; half types are summed in float32


def finite_probe(t: Any) -> Any:
    """One reduction kept on the device: the sum is NaN/Inf iff an element is (barring overflow, re-checked)."""
    import torch

    if not _WIDE:
        _WIDE.update((torch.float32, torch.float64))
    t = t.detach()
    return t.sum() if t.dtype in _WIDE else t.sum(dtype=torch.float32)


def stacked(flags: list[Any]) -> Any:
    """The flags in one tensor, on the first one's device (a model split over devices has flags on each); mixed
    dtypes in float64 (float32 on MPS, which has no float64)."""
    import torch

    dev = flags[0].device
    dtypes = {v.dtype for v in flags}
    dtype = next(iter(dtypes)) if len(dtypes) == 1 else torch.float32 if dev.type == "mps" else torch.float64
    return torch.stack([v.detach().to(device=dev, dtype=dtype) for v in flags])


def first_nonfinite(flags: list[Any], tensor_of: Any) -> int | None:
    """Index of the first flag that is non-finite and whose tensor really holds a NaN/Inf (a sum or a norm can
    overflow although every element is finite): one host sync when all are finite."""
    import torch

    if not flags:
        return None
    bad = ~torch.isfinite(stacked(flags))
    if not bool(bad.any()):
        return None
    for i in bad.nonzero()[:, 0].tolist():
        t = tensor_of(i)
        if t is None or not bool(torch.isfinite(t).all()):
            return i
    return None


def param_grad_flags(grads: list[Any]) -> tuple[list[Any], list[int], list[Any]]:
    """One fused norm per device over the parameters' gradients (None: no gradient): the norms, the positions of
    the gradients they are of, and those gradients (a sparse one as its values)."""
    import torch

    by_dev: dict[Any, list[tuple[int, Any]]] = {}
    for i, g in enumerate(grads):
        if g is not None and g.device.type != "meta":  # a meta tensor holds no values to check
            by_dev.setdefault(g.device, []).append((i, g))
    norms: list[Any] = []
    where: list[int] = []
    values: list[Any] = []
    for items in by_dev.values():
        # a sparse gradient (Embedding(sparse=True)) is checked through its values: no norm kernel takes it
        dense = [g if g.layout is torch.strided else (g.coalesce().values() if g.layout is torch.sparse_coo
                                                     else g.values()) for _, g in items]
        norms.extend(torch._foreach_norm(dense))
        where.extend(i for i, _ in items)
        values.extend(dense)
    return norms, where, values


class Located(NamedTuple):
    """Where replaying found the first non-finite value.

    ``kind``: data (the call's input), between (an input made by the parent's own code), forward (a module's
    output), input (the gradient of a module's input: that module's backward made it), functional (a gradient made
    by code in a module's forward outside its children), output (the gradient of the model's output: the loss
    made it) or parameter.  ``module``: index in the sentinel's module list (-1: the loss code).  ``prev``: for
    ``between``, the module that finished just before (-1: none).
    """

    kind: str
    module: int
    stats: dict[str, Any]
    prev: int = -1


def _stats(t: Any, probe: Any, shape: Any, dtype: Any) -> dict[str, Any]:
    from nbdebug.core.training._dynamics import describe_tensor

    if t is not None:
        return describe_tensor(t)
    # freed since (nbdebug keeps no activation gradient alive): what the device-side probe saw
    return {"shape": tuple(shape), "dtype": str(dtype).replace("torch.", ""),
            "contains": "NaN" if bool(probe.isnan()) else "Inf"}


class Localiser:
    """Hooks on every module, on only while one recorded call is run again: the first non-finite value in order.

    Forward: each module's output, and each floating input that no module produced (the parent's own code made it
    between two children).  Backward: a gradient is checked once per tensor; when the gradient of a module's input
    (or of one of its parameters) is the first non-finite one, that module's backward produced it; when the
    gradient of the call's output is already non-finite, the loss (code after the model) produced it.
    """

    def __init__(self, names: list[str], modules: list[Any], parent: list[int], params: list[Any],
                 param_owner: list[int]) -> None:
        self.names, self.modules, self.parent = names, modules, parent
        self.params, self.param_owner = params, param_owner
        self._tensor_handles: list[Any] = []
        self._reset()

    def _reset(self) -> None:
        self._flags: list[Any] = []
        # (kind, module index, tensor or weakref, shape, dtype)
        self._where: list[tuple[str, int, Any, Any, Any]] = []
        # id(tensor) -> (tensor, producer index, consumer indices, {"model_output": bool})
        self._seen: dict[int, tuple[Any, int, list[int], dict[str, bool]]] = {}
        self._fwd_seen: dict[int, Any] = {}
        # id(tensor) -> index of its "between" flag; flag index -> the module that finished just before
        self._between: dict[int, int] = {}
        self._prev: dict[int, int] = {}
        self._last_done = -1
        self._top = 0

    def is_ancestor(self, a: int, b: int) -> bool:
        """Module ``a`` encloses module ``b`` (strictly)."""
        if a == b or b < 0:
            return False
        return a == 0 or self.names[b].startswith(self.names[a] + ".")

    def run(self, call: Call, *, backward: bool, grad_outputs: dict[int, Any] | None = None) -> Located | None:
        """Run ``call`` again with the hooks on: its forward, then (``backward``) its backward into fresh gradients.

        ``grad_outputs``: position among the output's tensors -> the gradient the loss sent there (None: not kept,
        ones are sent instead); only the outputs a gradient reached in the step are taken back through (a model
        that returns its loss and its logits was differentiated through the loss alone).  ``.grad`` is not touched.
        """
        import torch

        self._reset()
        self._top = call.index
        handles = [m.register_forward_hook(self._make_fwd(i)) for i, m in enumerate(self.modules)]
        try:
            args, kwargs = _detached(call.args), _detached(call.kwargs)
            for t in _tensors((args, kwargs)):
                if t.is_floating_point():
                    self._fwd_seen[id(t)] = t
                    self._flags.append(finite_probe(t))
                    self._where.append(("data", -2, t, t.shape, t.dtype))
            with _as_recorded(call):
                out = call.module(*args, **kwargs)
                outs = [(j, t) for j, t in enumerate(_tensors(out)) if t.is_floating_point()]
                for _, t in outs:
                    entry = self._seen.get(id(t))
                    if entry is not None and entry[0] is t:
                        entry[3]["model_output"] = True
                found = self._first()  # every module output is still held here: the statistics are exact
                if found is not None or not backward:
                    return found
                # the forward is done: hold no activation beyond what autograd itself keeps
                self._seen.clear()
                self._fwd_seen.clear()
                self._prev.clear()
                self._flags, self._where = [], []
                given = grad_outputs or {}
                outs = [(j, t) for j, t in outs if t.requires_grad and (not given or j in given)]
                inputs = self.params + [t for t in _tensors((args, kwargs)) if t.requires_grad]
                if not outs or not inputs:
                    return None
                grads = [given[j] if given.get(j) is not None and given[j].shape == t.shape else torch.ones_like(t)
                         for j, t in outs]
                got = torch.autograd.grad([t for _, t in outs], inputs, grad_outputs=grads, allow_unused=True)
                del out, outs, grads
                for n, i, g in zip(*param_grad_flags(list(got[:len(self.params)]))):
                    self._flags.append(n)
                    self._where.append(("parameter", self.param_owner[i], g, g.shape, g.dtype))
                return self._first()
        finally:
            for h in handles:
                h.remove()
            for h in getattr(self, "_tensor_handles", ()):
                h.remove()
            self._tensor_handles = []
            self._reset()

    def _first(self) -> Located | None:
        where = self._where

        def tensor_of(i: int) -> Any:
            t = where[i][2]
            return t() if isinstance(t, weakref.ref) else t

        i = first_nonfinite(self._flags, tensor_of)
        if i is None:
            return None
        kind, idx, _, shape, dtype = where[i]
        return Located(kind, idx, _stats(tensor_of(i), self._flags[i], shape, dtype), self._prev.get(i, -1))

    def _make_fwd(self, idx: int) -> Any:
        def hook(module: Any, inputs: Any, output: Any) -> None:
            # inputs made by the parent's own code between two modules (not a checked output, not the call's input)
            for t in _flat(inputs):
                if t.is_floating_point():
                    key = id(t)
                    seen = self._fwd_seen.get(key)
                    if seen is t:
                        j = self._between.get(key)
                        if j is not None and self.is_ancestor(idx, self._where[j][1]):
                            # an enclosing module took the same tensor: the code that made it is around that one
                            w = self._where[j]
                            self._where[j] = (w[0], idx, w[2], w[3], w[4])
                        continue
                    self._fwd_seen[key] = t
                    self._between[key] = len(self._flags)
                    self._prev[len(self._flags)] = self._last_done
                    self._flags.append(finite_probe(t))
                    self._where.append(("between", idx, t, t.shape, t.dtype))
            for t in _flat(output):
                if t.is_floating_point():
                    key = id(t)
                    if key in self._fwd_seen and self._fwd_seen[key] is t:
                        continue  # a parent returning its child's output: already checked at the child
                    self._fwd_seen[key] = t
                    self._flags.append(finite_probe(t))
                    self._where.append(("forward", idx, t, t.shape, t.dtype))
                    if t.requires_grad:
                        self._watch(t, producer=idx)
            for t in _flat(inputs):
                if t.requires_grad and t.is_floating_point():
                    entry = self._seen.get(id(t))
                    if entry is None or entry[0] is not t:
                        self._watch(t, producer=-1)
                        entry = self._seen[id(t)]
                    entry[2].append(idx)
            self._last_done = idx

        return hook

    def _watch(self, t: Any, producer: int) -> None:
        entry = self._seen.get(id(t))
        if entry is not None and entry[0] is t:
            return
        consumers: list[int] = []
        meta = {"model_output": False}
        self._seen[id(t)] = (t, producer, consumers, meta)
        hook = self._make_tensor_hook(producer, consumers, meta, t.shape, t.dtype)
        self._tensor_handles.append(t.register_hook(hook))

    def _make_tensor_hook(self, producer: int, consumers: list[int], meta: dict[str, bool], shape: Any,
                          dtype: Any) -> Any:
        def hook(grad: Any) -> None:
            if consumers:  # the innermost module that took this tensor as input produced its gradient
                kind, where = "input", consumers[0]
            elif meta["model_output"]:  # the loss (code after the model) produced it
                kind, where = "output", -1
            else:  # functional code in the forward of the producer's parent module used this output
                kind, where = "functional", self.parent[producer] if producer >= 0 else self._top
            self._flags.append(finite_probe(grad))
            self._where.append((kind, where, weakref.ref(grad), shape, dtype))

        return hook


@dataclass(frozen=True, repr=False)
class ReplayResult(Result):
    """What replaying the failing step found: the first op with a non-finite output and where it was called."""

    op: str | None
    source: str | None
    anomaly: str | None
    note: str | None = None

    def _summary_line(self) -> str:
        return self.op or "not reproduced"

    def describe(self) -> str:
        """One line: the op and its source line, and what detect_anomaly said."""
        parts = []
        if self.op:
            parts.append(f"first non-finite op in the forward pass: {self.op}"
                         + (f" at {self.source}" if self.source else ""))
        if self.note:
            parts.append(self.note)
        if self.anomaly:
            parts.append(f"(detail, backward: {self.anomaly})" if self.op else f"detect_anomaly: {self.anomaly}")
        return "; ".join(parts) if parts else "the replay did not reproduce the non-finite value"


_INTERNAL = re.compile(r"[/\\](torch|nbdebug[/\\]core|contextlib|functools)[/\\]|[/\\]torch[/\\]|<frozen ")


def _user_frame(stack: list[traceback.FrameSummary]) -> str | None:
    """The innermost user frame, named as the user knows it: ``In [12], line 3: code`` for a cell, ``file.py:40
    in fn: code`` for a file."""
    from nbdebug.core._cells import is_cell_file, site_label

    for fr in reversed(stack):
        if not _INTERNAL.search(fr.filename):
            line = (fr.line or "").strip()
            if is_cell_file(fr.filename):
                return site_label(fr.filename, fr.lineno)
            return f"{fr.filename}:{fr.lineno} in {fr.name}: {line}"
    return None


def _op_name(func: Any) -> str:
    name = getattr(func, "__name__", None) or str(func)
    qual = getattr(func, "__qualname__", "") or ""
    module = getattr(func, "__module__", "") or ""
    if qual.startswith("_VariableFunctionsClass") or module == "torch":
        return f"torch.{name}"
    if "TensorBase" in qual or qual.startswith("Tensor."):
        return f"Tensor.{name}"
    if module.endswith("nn.functional"):
        return f"torch.nn.functional.{name}"
    return qual or name


def _first_nonfinite_mode() -> Any:
    """A TorchFunctionMode that records the first op whose output is non-finite while its inputs are finite."""
    import torch
    from torch.overrides import TorchFunctionMode

    class FirstNonfinite(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.op: str | None = None
            self.source: str | None = None

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if self.op is None:
                with torch._C.DisableTorchFunction():
                    outs = [t for t in _tensors(out) if t.is_floating_point()]
                    if outs and not all(bool(torch.isfinite(t).all()) for t in outs):
                        ins = [t for t in _tensors(list(args) + list(kwargs.values())) if t.is_floating_point()]
                        if all(bool(torch.isfinite(t).all()) for t in ins):
                            self.op = _op_name(func)
                            self.source = _user_frame(traceback.extract_stack()[:-1])
            return out

    return FirstNonfinite()


def replay_step(model: Any, calls: list[Any], output_grads: list[Any]) -> ReplayResult:
    """Run recorded forward calls again (as recorded) to find the op, then backward under detect_anomaly.

    ``calls`` are ``Call`` objects (or ``(args, kwargs, rng_state)`` of calls of ``model`` itself);
    ``output_grads`` are the gradients that reached the calls' outputs in the original backward (may be empty).
    Parameters' ``.grad``, buffers and RNG state are restored.
    """
    import warnings

    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    op = source = anomaly = note = None
    bad_out = [g for g in output_grads if g is not None and not bool(torch.isfinite(g).all())]
    with _kept_state(model):
        for call in calls:
            if not isinstance(call, Call):
                args, kwargs, rng = call
                call = Call(model, 0, args, kwargs)
                call.rng = rng if rng is not None else call.rng
            mode = _first_nonfinite_mode()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    with torch.autograd.detect_anomaly(check_nan=True), _as_recorded(call), torch.enable_grad():
                        with mode:
                            out = call.module(*_detached(call.args), **_detached(call.kwargs))
                        outs = [t for t in _tensors(out) if t.requires_grad and t.is_floating_point()]
                        if outs and bad_out and mode.op is None:
                            # the model's forward is finite and the gradient the loss sent back is not: the
                            # model's backward only carries the loss's NaN on (detect_anomaly would name the
                            # last layer's backward function)
                            note = ("the model's forward pass is finite; the gradient reaching the model's output "
                                    "is already non-finite: the loss code after the model produced it (look for a "
                                    "division by 0, e.g. a temperature of 0, log(0) or sqrt(0) there)")
                            outs = []
                        if outs and params:
                            grads = [
                                g if g is not None and g.shape == t.shape else torch.ones_like(t)
                                for t, g in zip(outs, list(output_grads) + [None] * len(outs))
                            ]
                            torch.autograd.grad(outs, params, grad_outputs=grads, allow_unused=True)
                except RuntimeError as e:
                    anomaly = str(e).splitlines()[0]
                    for w in caught:
                        text = str(w.message)
                        if "Traceback of forward call" in text:
                            frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)', text)
                            user = [f for f in frames if not _INTERNAL.search(f[0])]
                            if user:
                                f = user[-1]
                                anomaly += f" (forward call: {f[0]}:{f[1]} in {f[2]}: {f[3].strip()})"
            if mode.op is not None and op is None:
                op, source = mode.op, mode.source
            if op is not None or anomaly is not None or note is not None:
                break
    return ReplayResult(op=op, source=source, anomaly=anomaly, note=note)
