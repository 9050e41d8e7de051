"""What the user passes to ``doctor``: checked and normalised, and the one adapter that makes a loss from it.

``checked`` validates the arguments (one clear ``InvalidArgumentError`` each) and resolves a DataLoader into its
first batch.  ``LossAdapter`` turns the three ways a loss is made into one call, ``loss(work, inputs)``:

- ``"fn"``: a plain ``loss_fn(model(inputs), targets)``;
- ``"hf"``: a Hugging Face model called as ``model(**batch)``, whose output carries ``.loss`` (and ``.logits``);
- ``"lightning"``: a LightningModule's ``training_step(batch, 0)``, returning a loss or a dict with ``"loss"``.

``fresh_copy`` makes the deep copy the checks train, with the user's optimizer re-created on it.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass, replace
from typing import Any

from nbdebug.errors import InvalidArgumentError

__all__ = ["Options", "checked", "LossAdapter", "logits_of", "fresh_copy", "recreate_optimizer", "step_optimizer",
           "to_device", "tensor_leaves", "call_model", "lr_of", "set_lr", "has_own_forward",
           "construct_optimizer", "lightning_optimizer", "batch_dim", "sample_count"]


@dataclass(frozen=True)
class Options:
    """The doctor's keyword arguments, checked."""

    steps: int
    lr: float | None
    num_classes: int | None
    dataloader: Any
    seed: int
    baseline: bool
    reproducibility: bool
    data_batches: int
    time_budget: float | None
    progress: bool | None
    name: str
    frozen: tuple[str, ...] | bool = ()  # what the user froze on purpose (prefixes of parameter names; True: all)


# -- checking what was passed --------------------------------------------------------------------------------
def checked(model: Any, batch: Any, loss_fn: Any, optimizer: Any, options: Options) -> tuple[Any, Options, bool]:
    """``(batch, options, lightning)`` once every argument is valid: a DataLoader given as the batch becomes the
    ``dataloader`` option and its first batch; ``lightning`` says the model is a LightningModule."""
    import torch

    steps, data_batches, num_classes = options.steps, options.data_batches, options.num_classes
    lr, time_budget, dataloader = options.lr, options.time_budget, options.dataloader
    if not isinstance(model, torch.nn.Module):
        raise InvalidArgumentError(f"doctor: expected a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise InvalidArgumentError(f"doctor: steps must be an int >= 1, got {steps!r}")
    if not isinstance(data_batches, int) or data_batches < 1:
        raise InvalidArgumentError(f"doctor: data_batches must be an int >= 1, got {data_batches!r}")
    if num_classes is not None and (not isinstance(num_classes, int) or num_classes < 1):
        raise InvalidArgumentError(f"doctor: num_classes must be an int >= 1 or None, got {num_classes!r}")
    if lr is not None and (not isinstance(lr, (int, float)) or not lr > 0):
        raise InvalidArgumentError(f"doctor: lr must be a number > 0 or None, got {lr!r}")
    if time_budget is not None and (not isinstance(time_budget, (int, float)) or not time_budget > 0):
        raise InvalidArgumentError(f"doctor: time_budget must be a number of seconds > 0 or None, got {time_budget!r}")
    frozen = options.frozen
    if isinstance(frozen, str):
        frozen = (frozen,)
    elif frozen is None or frozen is False:
        frozen = ()
    elif frozen is not True:
        if not isinstance(frozen, (tuple, list, set)) or not all(isinstance(f, str) for f in frozen):
            raise InvalidArgumentError(f"doctor: frozen must be True, a name or a list of parameter names or module "
                                       f"prefixes frozen on purpose, got {frozen!r}")
        frozen = tuple(frozen)
    lightning = _is_lightning(model)
    if loss_fn is not None and not callable(loss_fn):
        raise InvalidArgumentError(
            f"doctor: loss_fn must be callable (outputs, targets) -> loss, or None for a model that computes its "
            f"own loss, got {type(loss_fn).__name__}"
        )
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer) and not callable(optimizer):
        raise InvalidArgumentError(
            f"doctor: optimizer must be a torch.optim.Optimizer, a factory params -> optimizer, or None, got "
            f"{type(optimizer).__name__}"
        )
    if isinstance(batch, torch.utils.data.DataLoader):
        dataloader = dataloader if dataloader is not None else batch
        batch = None
    if batch is None and dataloader is not None:
        try:
            batch = next(iter(dataloader))
        except StopIteration as e:
            raise InvalidArgumentError("doctor: batch is None and the DataLoader given is empty; expected a "
                                       "DataLoader with at least one batch") from e
    if not any(p.requires_grad for p in model.parameters()):
        raise InvalidArgumentError(
            f"doctor: {type(model).__name__} has no trainable parameters; expected at least one with requires_grad=True"
        )
    if isinstance(batch, dict) and loss_fn is None and not lightning:
        pass  # a Hugging Face batch: model(**batch) computes the loss from the labels inside
    elif lightning and loss_fn is None:
        pass  # training_step takes the batch as the DataLoader yields it
    elif not (isinstance(batch, (tuple, list)) and len(batch) == 2):
        raise InvalidArgumentError(
            f"doctor: batch must be (inputs, targets), a dict of model inputs (with loss_fn=None), or a DataLoader, "
            f"got {type(batch).__name__}"
            + (f" of length {len(batch)}" if isinstance(batch, (tuple, list)) else "")
        )
    elif loss_fn is None:
        raise InvalidArgumentError(
            "doctor: loss_fn is None, but the batch is (inputs, targets) and the model is not a LightningModule; "
            "expected loss_fn(outputs, targets), or a dict batch for a model that computes its own loss"
        )
    return batch, replace(options, dataloader=dataloader, frozen=frozen), lightning


def has_own_forward(model: Any) -> bool:
    """The model's class (or one of its bases outside torch and Lightning) defines ``forward``."""
    for cls in type(model).__mro__:
        mod = getattr(cls, "__module__", "") or ""
        if mod.startswith(("torch.", "lightning.", "pytorch_lightning.", "lightning_fabric.")) or cls is object:
            continue
        if "forward" in vars(cls):
            return True
    return False


def _is_lightning(model: Any) -> bool:
    return any(c.__name__ == "LightningModule" for c in type(model).__mro__) and callable(
        getattr(model, "training_step", None))


# -- tensors in what was passed ------------------------------------------------------------------------------
def call_model(model: Any, inputs: Any) -> Any:
    """``model(**inputs)``, ``model(*inputs)`` or ``model(inputs)``."""
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


def to_device(obj: Any, device: Any) -> Any:
    """A copy of ``obj``'s tensors on ``device`` (always a copy: a forward that writes into its input must not
    change the caller's batch)."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach().to(device, copy=True) if device is not None else obj.detach().clone()
    if isinstance(obj, (tuple, list)):
        return type(obj)(to_device(o, device) for o in obj)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    return obj


def _zeros_like(obj: Any) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        return torch.zeros_like(obj)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_zeros_like(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _zeros_like(v) for k, v in obj.items()}
    return obj


def _first_tensor(out: Any) -> Any:
    import torch

    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)) and out:
        return _first_tensor(out[0])
    if isinstance(out, dict) and out:
        return _first_tensor(next(iter(out.values())))
    return None


def tensor_leaves(obj: Any) -> list[Any]:
    """Every leaf of nested dicts, tuples and lists, in order."""
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in tensor_leaves(v)]
    if isinstance(obj, (tuple, list)):
        return [x for v in obj for x in tensor_leaves(v)]
    return [obj]


def sample_count(targets: Any) -> int | None:
    """How many samples the batch holds, read from the targets' length (None without a target tensor)."""
    import torch

    return int(targets.shape[0]) if isinstance(targets, torch.Tensor) and targets.dim() >= 1 else None


def batch_dim(x: Any, n: int | None) -> int | None:
    """The dimension of ``x`` that runs over the batch's ``n`` samples: 0 when its length is ``n`` (or ``n`` is not
    known), else the one other dimension of that length (``(L, N)`` sequence-first inputs); None when none or
    several fit, and a check that slices samples apart then gives way."""
    import torch

    if not isinstance(x, torch.Tensor) or x.dim() == 0:
        return None
    if n is None or int(x.shape[0]) == n:
        return 0
    dims = [d for d in range(1, x.dim()) if int(x.shape[d]) == n]
    return dims[0] if len(dims) == 1 else None


def _model_loss(out: Any) -> Any:
    """The loss a model computed itself: ``ModelOutput.loss``, ``out["loss"]``, or the first item of a tuple."""
    import torch

    loss = getattr(out, "loss", None)
    if loss is None and isinstance(out, dict):
        loss = out.get("loss")
    if loss is None and isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor) \
            and out[0].dim() == 0:
        loss = out[0]
    return loss


def logits_of(out: Any) -> Any:
    """The tensor the checks look at: ``.logits`` of a model output, else its first tensor."""
    import torch

    lg = getattr(out, "logits", None)
    if isinstance(lg, torch.Tensor):
        return lg
    if isinstance(out, dict) and isinstance(out.get("logits"), torch.Tensor):
        return out["logits"]
    if isinstance(out, dict) and "loss" in out:
        rest = {k: v for k, v in out.items() if k != "loss"}
        return _first_tensor(rest)
    return _first_tensor(out)


def _loss_name(loss_fn: Any) -> str:
    if isinstance(loss_fn, type):
        return loss_fn.__name__
    name = getattr(loss_fn, "__name__", None)
    if name is None:
        name = type(loss_fn).__name__
    return str(name)


# -- the one adapter -----------------------------------------------------------------------------------------
class LossAdapter:
    """One call for the loss, whichever way the user's setup makes it.

    ``mode`` is ``"fn"`` (``loss_fn(model(inputs), targets)``), ``"hf"`` (``model(**batch).loss``) or
    ``"lightning"`` (``model.training_step(batch, 0)``, a loss or a dict with ``"loss"``).  ``batch`` is a copy
    of the user's batch on the model's device, split into ``inputs`` (what the model is called with) and
    ``targets`` (None when the model's own loss holds them out of sight).
    """

    def __init__(self, batch: Any, loss_fn: Any, lightning: bool, device: Any) -> None:
        self.loss_fn = loss_fn
        self.mode = "fn" if loss_fn is not None else ("lightning" if lightning else "hf")
        self.batch = to_device(batch, device)
        self.inputs, self.targets = self.split(self.batch)
        self.loss_name = _loss_name(loss_fn) if loss_fn is not None else (
            "CrossEntropyLoss" if self.mode == "hf" else "training_step")

    def split(self, batch: Any) -> tuple[Any, Any]:
        """``(inputs, targets)`` of a batch: a Hugging Face batch is its own inputs, with ``labels`` inside."""
        if self.mode == "hf":
            return batch, batch.get("labels") if isinstance(batch, dict) else None
        if self.mode == "lightning" and not (isinstance(batch, (tuple, list)) and len(batch) == 2):
            return batch, None
        return batch[0], batch[1]

    def model_inputs(self) -> Any:
        """The inputs without the labels (what the input checks look at)."""
        if self.mode == "hf":
            return {k: v for k, v in self.inputs.items() if k != "labels"}
        return self.inputs

    def zeroed_inputs(self) -> Any:
        """Zeroed inputs; a Hugging Face batch keeps its labels (and its attention mask, so attention stays
        defined)."""
        if self.mode == "hf" and isinstance(self.inputs, dict):
            return {k: (v if k in ("labels", "attention_mask") else _zeros_like(v)) for k, v in self.inputs.items()}
        return _zeros_like(self.inputs)

    def forward(self, work: Any, inputs: Any) -> Any:
        """The model's output on ``inputs`` (None for a LightningModule that has no ``forward`` of its own: it is
        trained through ``training_step`` only)."""
        if self.mode == "lightning" and not has_own_forward(work):
            return None
        if self.mode == "hf":
            return work(**inputs) if isinstance(inputs, dict) else call_model(work, inputs)
        return call_model(work, inputs)

    def loss(self, work: Any, inputs: Any, targets: Any = None) -> tuple[Any, Any]:
        """(model output or None, scalar loss) for one step on ``inputs`` (and ``targets``; the batch's own by
        default)."""
        targets = self.targets if targets is None else targets
        if self.mode == "fn":
            out = call_model(work, inputs)
            return out, self.loss_fn(out, targets)
        if self.mode == "hf":
            out = self.forward(work, inputs)
            loss = _model_loss(out)
            if loss is None:
                raise InvalidArgumentError(
                    f"doctor: {type(work).__name__}(**batch) returned no loss; expected labels in the batch "
                    "(a 'labels' key) or a loss_fn")
            return out, loss
        import warnings

        b = inputs
        if isinstance(self.batch, (tuple, list)) and len(self.batch) == 2:
            b = [inputs, targets] if isinstance(self.batch, list) else (inputs, targets)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # self.log() outside a Trainer
            res = work.training_step(b, 0)
        loss = res.get("loss") if isinstance(res, dict) else res
        if loss is None:
            raise InvalidArgumentError(
                f"doctor: {type(work).__name__}.training_step returned {type(res).__name__}; expected a loss tensor "
                "or a dict with 'loss'")
        return None, loss

    def probe(self, work: Any, inputs: Any) -> tuple[Any, Any, Any]:
        """(model output or None, scalar loss or None, ``LossProbe``): the first forward pass, with every call to a
        torch loss noted (what it was given), whichever way the loss is made.  A loss that raises (a target out of
        range) is not raised here: the probe has noted its inputs, and the first training step meets the error
        again where the doctor handles it."""
        from nbdebug.core.doctor._loss_probe import LossProbe
        from nbdebug.errors import NonFiniteError

        probe = LossProbe()
        loss = None
        if self.mode == "hf":  # the model computes its loss inside its forward
            try:
                with probe:
                    out = self.forward(work, inputs)
            except NonFiniteError:
                raise
            except Exception:
                if not probe.calls or probe.calls[-1].result is not None:
                    raise  # the model's own error, not its loss's
                return None, None, probe
            return out, _model_loss(out), probe
        out = self.forward(work, inputs)
        try:
            with probe:  # a LightningModule's loss is in its training_step, with or without a forward
                loss = self.loss_fn(out, self.targets) if self.mode == "fn" else self.loss(work, inputs)[1]
        except NonFiniteError:
            raise
        except Exception:  # noqa: BLE001 - met again, and handled, in the first training step
            loss = None
        return out, loss, probe

    def batch_loss(self, work: Any, batch: Any) -> Any:
        """The scalar loss of one step on another batch of the same form (one of a DataLoader's)."""
        return self.loss(work, *self.split(batch))[1]


# -- the copy the checks train, and its optimizer -------------------------------------------------------------
def fresh_copy(model: Any, optimizer: Any, lr: float | None, lightning: bool,
               name: str = "model") -> tuple[Any, Any]:
    """A deep copy of the user's model, in the mode the user left it in, and an optimizer for it: the user's
    re-created on the copy, a factory's, ``configure_optimizers()`` of a LightningModule trained by its
    ``training_step`` (``lightning``), or Adam(lr=3e-3).

    An optimizer that holds none of the model's parameters becomes one that updates nothing (SGD with lr=0 over
    the copy), so the checks see what the user's loop would do instead of torch's "empty parameter list".
    A model that cannot be deep-copied is one ``InvalidArgumentError`` naming what cannot be copied (``name``:
    what the model is called in it).
    """
    import torch

    try:
        work = copy.deepcopy(model)
    except Exception as e:  # noqa: BLE001 - any object's __deepcopy__/__reduce_ex__ may raise anything
        raise InvalidArgumentError(_not_copyable(model, name, e)) from e
    params = [p for p in work.parameters() if p.requires_grad]
    if optimizer is None and lightning:
        made = work.configure_optimizers()
        while isinstance(made, (tuple, list)) and made:
            made = made[0]
        if isinstance(made, dict):
            made = made.get("optimizer")
        if isinstance(made, torch.optim.Optimizer):
            for g in made.param_groups:
                # the lr set, not the warm-up value a scheduler built beside it has already put in (0 at step 0)
                g["lr"] = lr if lr is not None else set_lr(g)
            return work, made
    if optimizer is None:
        return work, torch.optim.Adam(params, lr=lr or 3e-3)
    if isinstance(optimizer, torch.optim.Optimizer):
        index = {id(p): i for i, p in enumerate(model.parameters())}
        all_params = list(work.parameters())
        made = recreate_optimizer(optimizer, lambda p: all_params[index[id(p)]] if id(p) in index else None, lr)
        return work, made if made is not None else torch.optim.SGD(params, lr=0.0)
    if callable(optimizer):
        return work, optimizer(params)
    raise InvalidArgumentError(
        f"doctor: optimizer must be a torch.optim.Optimizer, a factory or None, got {type(optimizer).__name__}"
    )


def lightning_optimizer(model: Any) -> Any:
    """The optimizer a LightningModule's ``configure_optimizers()`` builds, over the module's own parameters, so the
    setup checks (what it holds, its lr and weight decay) read it as they read one passed in: it is built on a deep
    copy (the user's module is not asked to run anything) and re-created over the matching parameters.  None when
    it cannot be built outside a Trainer or is not a torch optimizer."""
    import torch

    try:
        work = copy.deepcopy(model)
        made = work.configure_optimizers()
    except Exception:  # noqa: BLE001 - e.g. it reads self.trainer: the copy's own optimizer is used instead
        return None
    while isinstance(made, (tuple, list)) and made:
        made = made[0]
    if isinstance(made, dict):
        made = made.get("optimizer")
    if not isinstance(made, torch.optim.Optimizer):
        return None
    mine = {id(w): p for w, p in zip(work.parameters(), model.parameters())}
    return recreate_optimizer(made, lambda p: mine.get(id(p)))


def _not_copyable(model: Any, name: str, error: Exception) -> str:
    """Why ``copy.deepcopy(model)`` failed: the first attribute (of the model or a sub-module, then inside it) that
    cannot be copied on its own, and what to do."""
    from nbdebug.errors import describe_exception

    found = _first_uncopyable(model, name, 0)
    if found is None:
        what, move, cls = "something it holds cannot be copied", "that object", "its class"
    else:
        path, value, owner, held = found
        what = f"{path} (a {type(value).__name__}) cannot be copied"
        move = owner or path
        kind = type(held if owner else value)
        user_class = kind.__module__.split(".")[0] not in ("builtins", "_thread", "torch")
        cls = f"its class ({kind.__name__})" if user_class else "its class"
    return (f"doctor trains a deep copy of {name} so that your model is left untouched, but {what}: "
            f"{describe_exception(error)}. Move {move} out of the model (keep it beside the model, or delete the "
            f"attribute before doctor and set it back after), or give {cls} a __deepcopy__ that shares or "
            "re-creates it")


def _first_uncopyable(obj: Any, path: str, depth: int) -> tuple[str, Any, str, Any] | None:
    """(dotted path, value, the module's attribute that holds it, that attribute's value) of the first part of
    ``obj`` that ``copy.deepcopy`` refuses, looking into a part that fails (a sub-module, an object's ``__dict__``)
    for the innermost one; sub-modules are searched without being copied whole, and parameters and buffers are
    tried last (they are the large parts).  The holder is "" outside a module."""
    import torch

    if depth > 6:
        return None
    if not isinstance(obj, torch.nn.Module):
        try:
            parts = list(vars(obj).items())
        except TypeError:
            return None
        return next((f for k, v in parts if (f := _try_copy(v, f"{path}.{k}", depth)) is not None), None)
    own = [(k, v) for k, v in vars(obj).items() if k not in ("_parameters", "_buffers", "_modules")]
    for k, v in own:
        found = _try_copy(v, f"{path}.{k}", depth)
        if found is not None:
            return found if found[2] else (found[0], found[1], f"{path}.{k}", v)
    for k, sub in obj._modules.items():
        found = _first_uncopyable(sub, f"{path}.{k}", depth + 1) if sub is not None else None
        if found is not None:
            return found
    for k, t in [*obj._parameters.items(), *obj._buffers.items()]:
        if _try_copy(t, f"{path}.{k}", depth) is not None:
            return f"{path}.{k}", t, f"{path}.{k}", t
    return None


def _try_copy(value: Any, path: str, depth: int) -> tuple[str, Any, str, Any] | None:
    """None when ``value`` deep-copies; else the innermost part of it that does not (or ``value`` itself)."""
    try:
        copy.deepcopy(value)
        return None
    except Exception:  # noqa: BLE001 - the part that fails is what we are looking for
        return _first_uncopyable(value, path, depth + 1) or (path, value, "", None)


def recreate_optimizer(opt: Any, params_of: Any, lr: float | None = None) -> Any:
    """A new optimizer of ``opt``'s class over other parameters, with the same groups and hyper-parameters.

    ``params_of(p)`` maps each of ``opt``'s parameters to its counterpart (or None to drop it).  Only the
    constructor's own keyword arguments are passed (``defaults`` may hold internal keys, such as AdamW's
    ``decoupled_weight_decay``); every group keeps all of its own settings.  State (moments) is not copied.
    The learning rate is the one the user set (``set_lr``), not a scheduler's current (warm-up) value.  None
    when no parameter has a counterpart.
    """
    groups = []
    for g in opt.param_groups:
        hp = {k: v for k, v in g.items() if k != "params"}
        hp["lr"] = lr if lr is not None else set_lr(g)
        ps = [q for q in (params_of(p) for p in g["params"]) if q is not None]
        if ps:
            groups.append({"params": ps, **hp})
    if not groups:
        return None
    return construct_optimizer(type(opt), opt.defaults, groups)


def construct_optimizer(cls: Any, defaults: Any, groups: list[dict[str, Any]]) -> Any:
    """``cls(groups, **kwargs)`` with only the constructor's own keyword arguments from ``defaults``."""
    sig: Any
    try:
        sig = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):  # pragma: no cover - a C-level constructor
        sig = {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.values()):
        kwargs = dict(defaults)
    else:
        kwargs = {k: v for k, v in defaults.items() if k in sig}
    if groups and "lr" in kwargs and "lr" in groups[0]:
        kwargs["lr"] = groups[0]["lr"]
    try:
        return cls(groups, **kwargs)
    except TypeError:
        # a constructor that takes fewer keywords than its defaults name: the groups carry every setting
        return cls(groups)


def set_lr(group: Any) -> Any:
    """The learning rate the user set for a parameter group: a scheduler keeps it as ``initial_lr`` (OneCycleLR
    its peak as ``max_lr``) while ``lr`` holds its current, warm-up value."""
    for key in ("max_lr", "initial_lr", "lr"):
        v = group.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return v
    return group.get("lr")


def step_optimizer(opt: Any, closure: Any) -> None:
    """``opt.step()``; optimizers that evaluate the loss themselves (LBFGS) get the closure."""
    import torch

    if isinstance(opt, torch.optim.LBFGS):
        opt.step(closure)
    else:
        opt.step()


def lr_of(opt: Any) -> float | None:
    """The first group's learning rate (None when it has none a float can hold)."""
    try:
        lr = opt.param_groups[0].get("lr")
    except (AttributeError, IndexError):
        return None
    try:
        return float(lr)
    except (TypeError, ValueError):
        return None
