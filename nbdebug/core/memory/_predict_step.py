"""The step that is predicted: how the model is called, where the loss comes from, the optimizer's copy, the
settings a what-if changes (autocast dtype, checkpointing, optimizer, accumulation)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Settings", "autocast_dtype", "checkpoint_blocks", "call_model", "loss_of", "fake_optimizer",
           "is_lightning", "warm_up", "unwrap_ddp", "ddp_buckets"]

_DTYPES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16", "half": "float16",
           "fp32": None, "float32": None}
_OPTIMIZERS = {"sgd": "SGD", "adam": "Adam", "adamw": "AdamW", "adafactor": "Adafactor", "rmsprop": "RMSprop",
               "adagrad": "Adagrad"}


@dataclass(frozen=True)
class Settings:
    """What a prediction changes about the user's step."""

    batch_size: int | None = None
    dtype: str | None = None  # autocast dtype name: "bfloat16" / "float16", None: as the step is
    checkpointing: bool = False
    optimizer: Any = None  # None: the user's; a name or an optimizer class: a fresh one
    accumulation_steps: int = 1


def autocast_dtype(dtype: Any) -> str | None:
    """``"bf16"`` / ``torch.bfloat16`` -> ``"bfloat16"``; None / fp32 -> None; anything else: ``ValueError``."""
    if dtype is None:
        return None
    name = str(dtype).removeprefix("torch.").lower()
    if name not in _DTYPES:
        raise ValueError(f"dtype={dtype!r} is not an autocast dtype; expected 'bf16', 'fp16', 'fp32' or a torch "
                         "dtype among bfloat16, float16, float32")
    return _DTYPES[name]


def autocast(device: str, dtype: str | None) -> Any:
    import torch

    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device, dtype=getattr(torch, dtype))


def checkpoint_blocks(model: Any) -> int:
    """Wrap every repeated block (a child of a ModuleList or Sequential with a sibling of its class) of the fake
    copy in non-reentrant activation checkpointing, outermost blocks only.  Returns how many were wrapped."""
    import torch
    from torch.utils.checkpoint import checkpoint

    if getattr(model, "supports_gradient_checkpointing", False):  # Hugging Face: its own switch, which also turns
        # the key/value cache off (a recomputed block would append to it twice)
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return sum(1 for m in model.modules() if getattr(m, "gradient_checkpointing", False))
    containers = (torch.nn.ModuleList, torch.nn.Sequential)
    chosen: list[str] = []
    for name, mod in model.named_modules():
        if not isinstance(mod, containers) or any(name.startswith(c + ".") or name == c for c in chosen):
            continue
        children = list(mod.named_children())
        classes = [type(c) for _, c in children]
        blocks = [(n, c) for n, c in children if classes.count(type(c)) >= 2 and any(True for _ in c.parameters())]
        for n, c in blocks:
            full = f"{name}.{n}" if name else n
            if any(full.startswith(x + ".") for x in chosen):
                continue
            chosen.append(full)
            c.forward = functools.partial(_checkpointed, checkpoint, c.forward)
    return len(chosen)


def _checkpointed(checkpoint: Callable[..., Any], forward: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return checkpoint(forward, *args, use_reentrant=False, **kwargs)


def is_lightning(model: Any) -> bool:
    """A LightningModule, or anything shaped like one (``training_step`` and ``configure_optimizers``)."""
    return callable(getattr(model, "training_step", None)) and callable(getattr(model, "configure_optimizers", None))


def call_model(model: Any, batch: Any) -> Any:
    """The forward of the usual loops: ``model(**batch)`` for a dict, ``model(x)`` for ``(x, y)``, else
    ``model(batch)``."""
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (tuple, list)) and batch:
        return model(batch[0])
    return model(batch)


def loss_of(out: Any, batch: Any, loss_fn: Callable[..., Any] | None, notes: list[str]) -> Any:
    """The loss of the usual loops: ``loss_fn(out, y)`` for ``(x, y)``, ``loss_fn(out, batch)`` for a dict,
    ``loss_fn(out)`` for a tensor; without ``loss_fn`` the output's ``.loss`` / ``["loss"]``, else a stand-in."""
    import torch

    if loss_fn is not None:
        if isinstance(batch, (tuple, list)) and len(batch) >= 2:
            return loss_fn(out, batch[1])
        return loss_fn(out, batch) if isinstance(batch, dict) else loss_fn(out)
    loss = getattr(out, "loss", None)
    if loss is None and isinstance(out, dict):
        loss = out.get("loss")
    if isinstance(loss, torch.Tensor):
        return loss
    first = out if isinstance(out, torch.Tensor) else next(
        (v for v in (out.values() if isinstance(out, dict) else out) if isinstance(v, torch.Tensor)), None)
    if first is None:
        raise ValueError("the model's output has no loss and no tensor; give loss_fn=, or step= for a custom loop")
    notes.append("no loss_fn was given and the output has no .loss: the loss is a stand-in (the output's sum)")
    return first.sum()


def fake_optimizer(world: Any, fake_model: Any, model: Any, optimizer: Any, device: str) -> Any:
    """The optimizer over the fake parameters: a deep copy of the user's, or a fresh one of a class or name."""
    import torch

    if optimizer is None:
        return None
    fake_ids = {id(p) for p in fake_model.parameters()}
    if isinstance(optimizer, torch.optim.Optimizer) and all(
            id(p) in fake_ids for g in optimizer.param_groups for p in g["params"]):
        fake = optimizer  # made over the fake copy already (a LightningModule's configure_optimizers)
    elif isinstance(optimizer, torch.optim.Optimizer):
        real = {id(p) for g in optimizer.param_groups for p in g["params"]}
        missing = [p for g in optimizer.param_groups for p in g["params"] if id(p) not in world.memo]
        if missing:
            raise ValueError(f"the optimizer holds {len(missing)} of {len(real)} parameters that are not the "
                             "model's; give the optimizer built over model.parameters()")
        fake = world.optimizer(optimizer)
    else:
        cls = optimizer
        if isinstance(optimizer, str):
            name = _OPTIMIZERS.get(optimizer.lower())
            if name is None or not hasattr(torch.optim, name):
                raise ValueError(f"optimizer={optimizer!r} is not known; expected one of "
                                 f"{', '.join(sorted(_OPTIMIZERS))}, an optimizer class or instance")
            cls = getattr(torch.optim, name)
        fake = cls([p for p in fake_model.parameters() if p.requires_grad], lr=1e-3)
    if device == "cuda":  # on CUDA tensors torch picks the foreach implementation (its temporaries count)
        for group in fake.param_groups:
            if group.get("foreach", False) is None and not group.get("fused"):
                group["foreach"] = True
    return fake


def warm_up(optimizer: Any) -> None:
    """Create the optimizer's state as a first step would (zero gradients, one step), then drop the gradients."""
    import torch

    if optimizer is None or optimizer.state:
        return
    params = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad]
    for p in params:
        p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def unwrap_ddp(model: Any) -> tuple[Any, Any]:
    """``(the wrapped module, the DistributedDataParallel wrapper)`` for a DDP model, ``(model, None)`` otherwise."""
    if type(model).__name__ == "DistributedDataParallel" and hasattr(model, "module"):
        return model.module, model
    return model, None


def ddp_buckets(ddp: Any, params: list[Any]) -> list[tuple[int, Any]]:
    """The sizes (elements, dtype) of DDP's gradient buckets over ``params``: flat buffers that live as long as the
    wrapper, filled in reverse parameter order, the first up to 1 MiB and the others up to ``bucket_cap_mb``."""
    first = 1 << 20
    cap = int(getattr(ddp, "bucket_bytes_cap", 25 << 20))
    buckets: list[tuple[int, Any]] = []
    open_: dict[Any, list[int]] = {}  # dtype -> [elements, bytes] of the bucket being filled
    for p in reversed([p for p in params if p.requires_grad]):
        cur = open_.setdefault(p.dtype, [0, 0])
        limit = first if not buckets else cap
        cur[0] += p.numel()
        cur[1] += p.numel() * p.element_size()
        if cur[1] >= limit:
            buckets.append((cur[0], p.dtype))
            open_[p.dtype] = [0, 0]
    buckets += [(n, d) for d, (n, _) in open_.items() if n]
    return buckets
