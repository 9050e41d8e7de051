"""One training step run on fake tensors, with every tensor storage it allocates and frees counted.

The step runs on copies of the model, optimizer and batch made of ``FakeTensor`` s (shapes, dtypes and devices,
no data), so nothing is allocated and the user's objects are not touched.  A ``TorchDispatchMode`` sits above the
fake mode and sees every operator after autograd: each new storage among an op's outputs is counted when the op
returns, and uncounted when the storage dies (a weakref finalizer), so the running total follows the order in
which real execution allocates and frees, the autograd engine's own frees included.  Views share their base's
storage and are not counted twice.

Each storage gets a kind: the ones registered before the step (parameters and buffers, optimizer state, the
batch), the ones that end up as ``.grad`` (gradients), the ones autograd saved for backward
(``saved_tensors_hooks``: activations, by the module that made them) and the rest (temporaries).  The phase comes
from the autograd engine (a graph task is running: backward) and the optimizer's step hooks.
"""

from __future__ import annotations

import contextlib
import linecache
import logging
import os
import sys
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from nbdebug.errors import NbdebugError

__all__ = ["Ledger", "PeakPlace", "StepError", "fake_world", "trace_step", "uncounted", "user_line", "KINDS", "UNCOUNTED"]

#: the kinds, in the order the panel stacks them
KINDS = ("parameters", "gradients", "optimizer state", "activations", "temporaries", "batch")

_SCALAR_READS = ("aten._local_scalar_dense", "aten.is_nonzero", "aten.equal")
_SHADOW_NUMEL = 1 << 22  # real values are followed through ops on at most this many elements
#: ops whose shape function takes only bf16 while their CPU kernel also takes float32 (torch 2.13)
_BF16_ONLY_SHAPES = frozenset({"aten._grouped_mm"})
#: ops whose shape function gives a buffer a size other than the kernel's: what they allocate is not counted
UNCOUNTED = {"aten.mkldnn_rnn_layer": "the workspace of oneDNN's LSTM/GRU kernel on CPU (aten.mkldnn_rnn_layer): "
                                      "fake tensors give it no size"}


class StepError(NbdebugError):
    """The step could not be run on fake tensors: the op and the user's line are in the message."""


@dataclass(frozen=True)
class PeakPlace:
    """Where the peak happened: the op that allocated last before it, the innermost module, the phase."""

    op: str
    module: str
    phase: str


@dataclass
class _Storage:
    nbytes: int
    phase: str
    module: str
    kind: str = ""  # set at registration (parameters, batch, optimizer state) or after the step


@dataclass
class Ledger:
    """The running total of storages alive, with the event log the peak's split is rebuilt from."""

    storages: dict[int, _Storage] = field(default_factory=dict)  # serial -> storage info
    events: list[tuple[int, int]] = field(default_factory=list)  # (serial, +nbytes / -nbytes)
    current: int = 0
    peak: int = 0
    peak_event: int = -1
    peak_place: PeakPlace = PeakPlace("", "", "")
    saved: set[int] = field(default_factory=set)  # serials autograd saved for backward
    stand_ins: list[str] = field(default_factory=list)  # user lines whose tensor values were read (.item())
    uncounted: set[str] = field(default_factory=set)  # ops whose own buffers are not counted (UNCOUNTED)
    phase: str = "setup"
    modules: list[str] = field(default_factory=list)
    _live: dict[int, int] = field(default_factory=dict)  # id(storage) -> serial, for live storages only
    _next: int = 0

    def note(self, tensor: Any, kind: str = "", op: str = "") -> int:
        """Count ``tensor``'s storage if it is new; give it ``kind`` if it has none yet.  Returns its serial."""
        st = tensor.untyped_storage()
        key = id(st)
        serial = self._live.get(key)
        if serial is not None:
            if kind and not self.storages[serial].kind:
                self.storages[serial].kind = kind
            return serial
        serial = self._next
        self._next += 1
        nbytes = int(st.nbytes())
        module = self.modules[-1] if self.modules else ""
        self.storages[serial] = _Storage(nbytes, self.phase, module, kind)
        self._live[key] = serial
        weakref.finalize(st, self._freed, key, serial)
        self.events.append((serial, nbytes))
        self.current += nbytes
        if self.current > self.peak:
            self.peak, self.peak_event = self.current, len(self.events) - 1
            self.peak_place = PeakPlace(op, module, self.phase)
        return serial

    def _freed(self, key: int, serial: int) -> None:
        if self._live.get(key) == serial:
            del self._live[key]
        nbytes = self.storages[serial].nbytes
        self.events.append((serial, -nbytes))
        self.current -= nbytes

    def serial_of(self, tensor: Any) -> int | None:
        return self._live.get(id(tensor.untyped_storage()))

    def alive_at_peak(self) -> list[int]:
        """Serials of the storages alive at the peak."""
        alive: set[int] = set()
        for serial, delta in self.events[:self.peak_event + 1]:
            if delta > 0:
                alive.add(serial)
            else:
                alive.discard(serial)
        return sorted(alive)

    def kind_of(self, serial: int) -> str:
        info = self.storages[serial]
        if info.kind:
            return info.kind
        return "activations" if serial in self.saved else "temporaries"


def _dispatch_mode_class() -> type:
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Counting(TorchDispatchMode):
        """Counts every new storage among an op's outputs; a read of a tensor's value gets a stand-in."""

        def __init__(self, ledger: Ledger, world: _FakeWorld) -> None:
            super().__init__()
            self.ledger = ledger
            self.shadows = world.shadows
            self.device = world.traced_on
            self.failed = world.failed_op  # the op whose shape function failed, to name it in the error

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            import torch
            from torch._subclasses.fake_tensor import DynamicOutputShapeException
            from torch.utils._pytree import tree_leaves, tree_map

            name = str(func.overloadpacket) if hasattr(func, "overloadpacket") else str(func)
            ledger = self.ledger
            if ledger.phase in ("forward", "backward"):
                ledger.phase = "backward" if torch._C._current_graph_task_id() != -1 else "forward"
            known = self._known(func, args, kwargs)
            if name in _SCALAR_READS:
                if known:  # a value of the batch's integers (a mask's .all()): read from the real batch
                    return self._real(func, args, kwargs)
                if getattr(args[0], "constant", None) is None:
                    # .item(), bool(t): memory does not depend on the value, so a stand-in is read (noted, unless
                    # it is the optimizer reading its own step count)
                    if ledger.phase != "optimizer":
                        ledger.stand_ins.append(user_line(None) or "(a line outside the notebook)")
                    return False if name != "aten._local_scalar_dense" else _one_of(args[0])
            if name in UNCOUNTED:
                ledger.uncounted.add(name)
            shadow = None
            try:
                out = func(*args, **(kwargs or {}))
            except DynamicOutputShapeException:
                shadow = self._real(func, args, kwargs) if known else None
                if shadow is None:
                    raise
                # the shape the real values give (nonzero of a mask): a fake tensor of that shape
                out = tree_map(lambda r: torch.empty_strided(r.shape, r.stride(), dtype=r.dtype, device=self.device)
                               if isinstance(r, torch.Tensor) else r, shadow)
            except Exception:
                out = _low_precision_retry(func, args, kwargs) if name in _BF16_ONLY_SHAPES else None
                if out is None:
                    if not self.failed:  # the innermost op that failed (an outer one re-raises its error)
                        self.failed.append(name)
                    raise
            self.failed.clear()  # an error some code caught and went past is not the step's
            leaves = tree_leaves(out)
            for leaf in leaves:
                if isinstance(leaf, torch.Tensor):
                    ledger.note(leaf, op=name)
            if known and shadow is None and sum(x.numel() for x in leaves if isinstance(x, torch.Tensor)) \
                    <= _SHADOW_NUMEL:
                shadow = self._real(func, args, kwargs)
            if shadow is not None:
                for leaf, real in zip(leaves, tree_leaves(shadow)):
                    if isinstance(leaf, torch.Tensor) and isinstance(real, torch.Tensor) and real.shape == leaf.shape:
                        self.shadows[leaf] = real
            return out

        def _known(self, func: Any, args: Any, kwargs: Any) -> bool:
            """Whether the op's real values can be computed: every tensor it reads has real values (the batch's
            integer and bool tensors and what is computed from them alone: masks, positions, label counts), or it
            reads none (arange), and it neither writes its inputs nor draws random numbers."""
            import torch
            from torch.utils._pytree import tree_leaves

            tensors = [x for x in tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
            if func._schema.is_mutable:
                for t in tensors:  # values written in place are no longer known
                    self.shadows.pop(t, None)
                return False
            if torch.Tag.nondeterministic_seeded in func.tags:
                return False
            if any(t not in self.shadows for t in tensors):
                return False
            return sum(t.numel() for t in tensors) <= _SHADOW_NUMEL

        def _real(self, func: Any, args: Any, kwargs: Any) -> Any:
            import torch
            from torch.utils._python_dispatch import _disable_current_modes
            from torch.utils._pytree import tree_map

            real_args, real_kwargs = tree_map(lambda x: self.shadows[x] if isinstance(x, torch.Tensor) else x,
                                              (args, kwargs or {}))
            if "device" in real_kwargs:  # a factory: its real values are made on the CPU
                real_kwargs["device"] = "cpu"
            with _disable_current_modes():
                try:
                    return func(*real_args, **real_kwargs)
                except Exception:  # the real op failed where the fake one may not: no value, as before
                    return None

    return _Counting


def _low_precision_retry(func: Any, args: Any, kwargs: Any) -> Any:
    """The op's fake outputs computed on bf16 copies of its float inputs, cast back: for shape functions that accept
    only bf16 where the CPU kernel takes float32 too (the shapes do not depend on the dtype).  None if that fails."""
    import torch
    from torch.utils._pytree import tree_map

    dtypes = [x.dtype for x in _tensor_leaves((args, kwargs)) if x.is_floating_point()]
    if not dtypes:
        return None
    low = tree_map(lambda x: x.to(torch.bfloat16) if isinstance(x, torch.Tensor) and x.is_floating_point() else x,
                   (args, kwargs or {}))
    try:
        out = func(*low[0], **low[1])
    except Exception:
        return None
    return tree_map(lambda x: x.to(dtypes[0]) if isinstance(x, torch.Tensor) and x.is_floating_point() else x, out)


def _tensor_leaves(obj: Any) -> list[Any]:
    import torch
    from torch.utils._pytree import tree_leaves

    return [x for x in tree_leaves(obj) if isinstance(x, torch.Tensor)]


def _one_of(tensor: Any) -> Any:
    import torch

    if tensor.dtype == torch.bool:
        return False
    return 1.0 if tensor.dtype.is_floating_point else 1


# -- fake copies of the user's objects -----------------------------------------------------------------------------

class _FakeWorld:
    """Fake copies sharing one memo: a tensor reached twice (a parameter in the model and the optimizer) is one
    fake tensor."""

    def __init__(self, device: str, allow_real: bool = False) -> None:
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode

        # fake CUDA tensors need a CUDA build (autograd asks the device for a guard and aborts the process without
        # one): without it the step is traced on CPU kernels and only the allocator model is CUDA's
        self.traced_on = "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"
        self.device = device
        self.mode = FakeTensorMode(allow_non_fake_inputs=allow_real)
        self.memo: dict[int, Any] = {}
        from torch.utils.weak import WeakIdKeyDictionary

        self.shadows: Any = WeakIdKeyDictionary()  # fake tensor -> its real values (the batch's integers)
        self.failed_op: list[str] = []  # the op whose fake run raised (at most one)

    def tensor(self, t: Any, *, shape: tuple[int, ...] | None = None, dtype: Any = None) -> Any:
        """A fake tensor like ``t`` on the target device (a parameter stays a parameter)."""
        import torch

        if shape is None and dtype is None and id(t) in self.memo:
            return self.memo[id(t)]
        size = tuple(t.shape) if shape is None else shape
        with self.mode:
            fake = torch.empty(size, dtype=dtype or t.dtype, device=self.traced_on)
        if isinstance(t, torch.nn.Parameter):
            fake = torch.nn.Parameter(fake, requires_grad=t.requires_grad)
        elif t.requires_grad and t.is_leaf:
            fake.requires_grad_(True)
        if shape is None and dtype is None:
            self.memo[id(t)] = fake
        return fake

    def module(self, model: Any, dtype: Any = None) -> Any:
        """A deep copy of ``model`` whose parameters, buffers and tensor attributes are fake."""
        import copy

        import torch

        for mod in model.modules():
            for value in list(mod._parameters.values()) + list(mod._buffers.values()) + list(vars(mod).values()):
                if isinstance(value, torch.Tensor) and id(value) not in self.memo:
                    cast = dtype if dtype is not None and value.is_floating_point() else None
                    self.memo[id(value)] = self.tensor(value, dtype=cast)
        return copy.deepcopy(model, self.memo)

    def optimizer(self, optimizer: Any) -> Any:
        """A deep copy of ``optimizer`` over the fake parameters (its state fake too)."""
        import copy

        import torch

        for state in optimizer.state.values():
            for value in state.values():
                if isinstance(value, torch.Tensor) and id(value) not in self.memo:
                    self.memo[id(value)] = self.tensor(value)
        return copy.deepcopy(optimizer, self.memo)

    def batch(self, batch: Any, batch_size: int | None = None) -> Any:
        """The batch with every tensor fake; ``batch_size`` replaces the leading size of the tensors that share the
        first tensor's leading size."""
        import torch
        from torch.utils._pytree import tree_flatten, tree_unflatten

        batch = _plain(batch)
        leaves, spec = tree_flatten(batch)
        lead = next((x.shape[0] for x in leaves if isinstance(x, torch.Tensor) and x.dim()), None)
        out = []
        for x in leaves:
            if isinstance(x, torch.Tensor):
                shape = None
                if batch_size is not None and x.dim() and x.shape[0] == lead:
                    shape = (batch_size, *x.shape[1:])
                fake = self.tensor(x, shape=shape)
                if not x.is_floating_point() and not x.is_complex() and x.device.type == "cpu" \
                        and fake.numel() <= _SHADOW_NUMEL:
                    # the real integers (ids, masks, labels): rows repeated to a new batch size
                    from torch.utils._python_dispatch import _disable_current_modes

                    with _disable_current_modes():
                        real = x if shape is None else x[torch.arange(shape[0]) % x.shape[0]]
                    self.shadows[fake] = real
                out.append(fake)
            else:
                out.append(x)
        return tree_unflatten(out, spec)


def _plain(batch: Any) -> Any:
    """A Hugging Face ``BatchEncoding`` (a UserDict) as a dict, so that pytree walks it."""
    from collections.abc import Mapping

    if isinstance(batch, Mapping) and not isinstance(batch, dict):
        return dict(batch)
    return batch


def fake_world(device: str, allow_real: bool = False) -> _FakeWorld:
    """A fresh set of fake copies for ``device`` (``allow_real``: real tensors met on the way are read as fakes)."""
    return _FakeWorld(device, allow_real)


# -- running the step ----------------------------------------------------------------------------------------------

_OWN = (os.sep + "torch" + os.sep, os.sep + "nbdebug" + os.sep, "site-packages", "dist-packages", "<frozen")


def user_line(tb: Any) -> str:
    """The user's innermost line in a traceback (``tb``) or, with None, in the current stack, named like the
    prompt (``In [12], line 3: loss = ...``)."""
    import sys
    import traceback

    from nbdebug.core._cells import is_cell_file, site_label

    frames = traceback.extract_tb(tb) if tb is not None else traceback.extract_stack(sys._getframe(1))
    cell = [f for f in frames if is_cell_file(f.filename)]
    mine = cell or [f for f in frames if not any(p in f.filename for p in _OWN)]
    if not mine:
        return ""
    f = mine[-1]
    linecache.checkcache(f.filename)
    return site_label(f.filename, f.lineno)


@contextlib.contextmanager
def _watching(ledger: Ledger, names: dict[int, str], shadows: Any) -> Iterator[None]:
    """Module stack and phase from global module and optimizer hooks, and the saved-tensor hook, while tracing."""
    import torch
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    def pre(mod: Any, args: Any) -> None:
        ledger.modules.append(names.get(id(mod), type(mod).__name__))

    def post(mod: Any, args: Any, out: Any) -> None:
        if ledger.modules:
            ledger.modules.pop()

    def opt_pre(opt: Any, args: Any, kwargs: Any) -> None:
        ledger.phase, ledger.modules[:] = "optimizer", []

    def opt_post(opt: Any, args: Any, kwargs: Any) -> None:
        ledger.phase = "forward"

    def pack(t: Any) -> Any:
        if isinstance(t, torch.Tensor):
            serial = ledger.serial_of(t)
            if serial is not None:
                ledger.saved.add(serial)
        return t

    # Hugging Face treats a fake tensor as "tracing" and then skips the checks eager mode makes on the mask (an
    # all-ones mask is dropped for the causal kernel); where the real values are known (the batch's integers), it
    # is told the truth, so that it takes the path the real step takes
    hf = sys.modules.get("transformers.utils.import_utils")
    hf_fake = getattr(hf, "is_fake_tensor", None)
    if hf_fake is not None:
        def is_fake_tensor(t: Any) -> bool:
            return bool(hf_fake(t)) and t not in shadows
        hf.is_fake_tensor = is_fake_tensor  # type: ignore[union-attr]
    handles = [register_module_forward_pre_hook(pre), register_module_forward_hook(post),
               register_optimizer_step_pre_hook(opt_pre), register_optimizer_step_post_hook(opt_post)]
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield
    finally:
        for h in handles:
            h.remove()
        if hf_fake is not None:
            hf.is_fake_tensor = hf_fake  # type: ignore[union-attr]


@contextlib.contextmanager
def step_errors(world: _FakeWorld) -> Iterator[None]:
    """What fake tensors cannot run, as one ``StepError`` naming the op and the user's line."""
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
        UnsupportedOperatorException,
    )

    # fake tensors log a shape function's failure before raising it: the error below says it once, in words
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    except DynamicOutputShapeException as e:
        raise StepError(f"the step has an output whose shape depends on the data ({_op(e)}), which cannot be "
                        f"predicted without running it, at {user_line(e.__traceback__) or 'an unknown line'}; "
                        "give the shape explicitly or keep that op out of the step") from e
    except DataDependentOutputException as e:
        raise StepError(f"the step reads tensor values to decide what to compute ({_op(e)}) at "
                        f"{user_line(e.__traceback__) or 'an unknown line'}; a prediction cannot run it") from e
    except UnsupportedOperatorException as e:
        raise StepError(f"the op {_op(e)} has no shape function, so its memory cannot be predicted; it is "
                        f"called at {user_line(e.__traceback__) or 'an unknown line'}") from e
    except Exception as e:
        if "non-Fake Tensor" in str(e) or "convert all Tensors to FakeTensors" in str(e):
            raise StepError("the step used a tensor that is not one of the model, batch or optimizer it was given "
                            f"(at {user_line(e.__traceback__) or 'an unknown line'}); a step must use only its "
                            "arguments, or the real tensors would be touched") from e
        if world.failed_op and isinstance(e, (RuntimeError, TypeError, ValueError, NotImplementedError)):
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
            raise StepError(f"the op {world.failed_op[-1]} could not run on fake tensors ({first}), so its memory "
                            f"cannot be predicted; it is called at {user_line(e.__traceback__) or 'an unknown line'}"
                            ) from e
        raise
    finally:
        world.failed_op.clear()
        logger.setLevel(level)


@contextlib.contextmanager
def uncounted(world: _FakeWorld) -> Iterator[None]:
    """The fake mode with value reads answered (a throwaway ledger): for the optimizer's warm-up step."""
    with step_errors(world), world.mode, _dispatch_mode_class()(Ledger(), world):
        yield


def trace_step(world: _FakeWorld, run: Callable[[Ledger], None], registered: Callable[[Ledger], None],
               finished: Callable[[Ledger], None]) -> Ledger:
    """Run ``run(ledger)`` under the fake mode with counting on; ``registered`` notes what exists before the step,
    ``finished`` gives kinds to what the step left (gradients).  Errors become one ``StepError``."""
    ledger = Ledger()
    counting = _dispatch_mode_class()(ledger, world)
    with step_errors(world), world.mode, counting, _watching(ledger, getattr(world, "module_names", {}), world.shadows):
        registered(ledger)
        ledger.phase = "forward"
        run(ledger)
        finished(ledger)
    return ledger


def _op(e: BaseException) -> str:
    func = getattr(e, "func", None)
    return str(func) if func is not None else str(e).splitlines()[0][:120]
