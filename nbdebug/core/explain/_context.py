"""What the exception object knows beyond its text: its chain, and the module whose forward raised it.

For an error raised inside ``nn.Module.forward`` we walk ``exc.__traceback__`` to the innermost frame whose
``self`` is an ``nn.Module`` running ``forward``, name it by its qualified name in the user's models
(``roots`` maps notebook names to modules, e.g. ``{"model": model}`` -> ``model.encoder.2``) and describe the
tensors it received.  torch is never imported here: if it is not in ``sys.modules`` no module can be involved.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Mapping
from types import FrameType
from typing import Any

from nbdebug.core.explain._evidence import qualified_name
from nbdebug.errors import describe_exception

__all__ = ["exception_text", "exception_type_name", "module_context", "module_layout", "index_context",
           "ddp_unused_context"]

_FORWARD_NAMES = frozenset({"forward", "_call_impl", "_wrapped_call_impl", "__call__"})


def exception_type_name(exc: BaseException) -> str:
    """``torch.OutOfMemoryError``, ``RuntimeError``: the class with its public module unless builtin."""
    cls = type(exc)
    module = cls.__module__
    return cls.__qualname__ if module in ("builtins", "__main__") else f"{module}.{cls.__qualname__}"


def exception_text(exc: BaseException) -> str:
    """The messages of the exception and of its causes/contexts, root cause first (as a traceback shows them)."""
    chain: list[BaseException] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(chain) < 8:
        seen.add(id(current))
        chain.append(current)
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    parts = []
    for item in reversed(chain):
        try:
            parts.append("".join(traceback.format_exception_only(type(item), item)))
        except BaseException:  # noqa: BLE001 - the user's __str__ may raise anything: not our error
            parts.append(describe_exception(item) + "\n")
    return "\n".join(parts)


def _frames(exc: BaseException) -> list[FrameType]:
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames


def _describe_tensor(t: Any) -> str:
    dtype = str(t.dtype).removeprefix("torch.")
    return f"{tuple(t.shape)} {dtype} on {t.device}"


def _module_label(m: Any) -> str:
    extra = ""
    try:
        extra = m.extra_repr()
    except Exception:
        pass
    return f"{type(m).__name__}({extra})"


def module_context(exc: BaseException, roots: Mapping[str, Any] | None) -> tuple[dict[str, Any], list[str]]:
    """Facts and notes about the innermost ``nn.Module.forward`` the exception went through (empty if none)."""
    torch = sys.modules.get("torch")
    if torch is None or exc.__traceback__ is None:
        return {}, []
    module_type = torch.nn.Module
    tensor_type = torch.Tensor
    outermost = innermost = None
    inner_frame: FrameType | None = None
    for frame in _frames(exc):
        owner = frame.f_locals.get("self")
        if isinstance(owner, module_type) and frame.f_code.co_name in _FORWARD_NAMES:
            if outermost is None:
                outermost = getattr(owner, "_orig_mod", owner)  # torch.compile's wrapper: the model it wraps
            innermost, inner_frame = owner, frame
    if innermost is None or inner_frame is None:
        return {}, []
    facts: dict[str, Any] = {"module_type": _module_label(innermost)}
    name = qualified_name(innermost, roots or {}, outermost)
    if name:
        facts["module"] = name
    inputs = {k: _describe_tensor(v) for k, v in inner_frame.f_locals.items()
              if k != "self" and isinstance(v, tensor_type)}
    shapes = {k: list(v.shape) for k, v in inner_frame.f_locals.items() if k != "self" and isinstance(v, tensor_type)}
    if shapes:
        facts["module_input_shapes"] = shapes
    weight = getattr(innermost, "weight", None)
    if isinstance(weight, tensor_type):
        facts["module_weight_shape"] = list(weight.shape)
    where = facts.get("module", "a module")
    notes = [f"Raised inside {where} = {facts['module_type']}"
             + (f", called with {', '.join(f'{k}: {v}' for k, v in inputs.items())}" if inputs else "") + "."]
    notes.extend(_layer_hint(innermost, shapes))
    return facts, notes


def module_layout(exc: BaseException) -> Any:
    """The layout fix for the innermost module whose input has the right size but the wrong layout, or None."""
    torch = sys.modules.get("torch")
    if torch is None or exc.__traceback__ is None:
        return None
    from nbdebug.core.explain._analyze import layout_hint

    for frame in reversed(_frames(exc)):
        owner = frame.f_locals.get("self")
        if isinstance(owner, torch.nn.Module) and frame.f_code.co_name in _FORWARD_NAMES:
            x = next((v for k, v in frame.f_locals.items() if k != "self" and isinstance(v, torch.Tensor)), None)
            if x is None:
                return None
            in_features, in_channels = getattr(owner, "in_features", None), getattr(owner, "in_channels", None)
            return layout_hint(list(x.shape), in_features=in_features if isinstance(in_features, int) else None,
                               in_channels=in_channels if isinstance(in_channels, int) else None,
                               spatial=len(getattr(owner, "kernel_size", ()) or ()))
    return None


def _layer_hint(module: Any, shapes: dict[str, list[int]]) -> list[str]:
    """Compare the configured input size of common layers with what they received."""
    if not shapes:
        return []
    first = next(iter(shapes.values()))
    in_features = getattr(module, "in_features", None)
    in_channels = getattr(module, "in_channels", None)
    spatial = len(getattr(module, "kernel_size", ()) or ())
    from nbdebug.core.explain._analyze import layout_hint

    hint = layout_hint(first, in_features=in_features if isinstance(in_features, int) else None,
                       in_channels=in_channels if isinstance(in_channels, int) else None, spatial=spatial)
    if hint is not None:
        return [hint[0]]
    if isinstance(in_features, int) and first and first[-1] != in_features:
        notes = [f"This layer expects in_features={in_features} but its input's last dimension is {first[-1]}: "
                 f"either the layer before produces {first[-1]} features, or in_features should be {first[-1]}."]
        if len(first) == 2 and first[0] == in_features:  # a batch size equal to in_features may be a coincidence
            notes.append(f"Only if the input {first} is laid out (features, batch) rather than (batch, features): "
                         f"pass x.T, shape ({first[1]}, {first[0]}).")
        return notes
    if isinstance(in_channels, int) and spatial and len(first) > spatial:
        got = first[-(spatial + 1)]  # channels come right before the spatial dims, batched or not
        if got != in_channels:
            return [f"This layer expects in_channels={in_channels} but the input has {got} channels "
                    "(the dimension before the spatial ones: N, C, H, W)."]
    return []


# functional frames whose locals tell the valid range of a label or index
_LOSS_FRAMES = frozenset({"cross_entropy", "nll_loss", "nll_loss_nd", "multi_margin_loss"})


def index_context(exc: BaseException) -> dict[str, Any]:
    """For out-of-range labels / indices: the number of classes (or embedding rows) and the offending range."""
    torch = sys.modules.get("torch")
    if torch is None or exc.__traceback__ is None:
        return {}
    tensor_type = torch.Tensor
    facts: dict[str, Any] = {}
    for frame in reversed(_frames(exc)):
        name = frame.f_code.co_name
        loc = frame.f_locals
        if name in _LOSS_FRAMES:
            logits, target = loc.get("input"), loc.get("target")
            if isinstance(logits, tensor_type) and logits.dim() >= 1:
                facts["num_classes"] = int(logits.shape[1] if logits.dim() > 1 else logits.shape[0])
            if isinstance(target, tensor_type) and target.numel() and not target.is_floating_point():
                facts["target_min"], facts["target_max"] = int(target.min()), int(target.max())
            break
        if name == "embedding":
            weight, index = loc.get("weight"), loc.get("input")
            if isinstance(weight, tensor_type) and weight.dim() == 2:
                facts["num_embeddings"] = int(weight.shape[0])
            if isinstance(index, tensor_type) and index.numel() and not index.is_floating_point():
                facts["index_min"], facts["index_max"] = int(index.min()), int(index.max())
            break
    return facts


def _find_ddp(exc: BaseException, roots: Mapping[str, Any] | None) -> tuple[Any, str]:
    """The DistributedDataParallel that raised (from the traceback), else one in ``roots``; and its name."""
    for frame in reversed(_frames(exc)):
        candidate = frame.f_locals.get("self")
        if type(candidate).__name__ == "DistributedDataParallel" and hasattr(candidate, "module"):
            name = next((k for k, v in (roots or {}).items() if v is candidate), "")
            return candidate, name
    for name, value in (roots or {}).items():
        if type(value).__name__ == "DistributedDataParallel" and hasattr(value, "module"):
            return value, name
    return None, ""


def ddp_unused_context(exc: BaseException, facts: Mapping[str, Any],
                       roots: Mapping[str, Any] | None) -> tuple[dict[str, Any], list[str]]:
    """Name the parameters DDP got no gradient for, when the wrapped model is at hand.

    DDP's "Parameter indices which did not receive grad" count the trainable parameters of the wrapped module in
    ``named_parameters()`` order; without indices (older releases), the trainable parameters whose ``.grad`` is
    still None while others have one are the unused ones.
    """
    if sys.modules.get("torch") is None:
        return {}, []
    ddp, ddp_name = _find_ddp(exc, roots)
    if ddp is None:
        return {}, []
    try:
        trainable = [(n, p) for n, p in ddp.module.named_parameters() if p.requires_grad]
    except Exception:  # a module whose parameters cannot be listed: say nothing rather than guess
        return {}, []
    indices = [int(i) for i in str(facts.get("unused_indices", "")).split() if i.isdigit()]
    if indices:
        names = [trainable[i][0] for i in indices if i < len(trainable)]
        how = "from the indices in the message"
    else:
        with_grad = [n for n, p in trainable if p.grad is not None]
        names = [n for n, p in trainable if p.grad is None] if with_grad else []
        how = "trainable parameters that have no .grad after the last backward while the others have one"
    if not names:
        return {}, []
    owner = f"{ddp_name}.module" if ddp_name else "the wrapped module"
    shown = ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")
    note = f"Parameters of {owner} that got no gradient ({how}): {shown}. Remove or freeze them, or use them in the loss."
    return {"unused_names": ", ".join(names)}, [note]
