"""Ids fed to the model as numbers: an integer input with many distinct values (user, item or token ids) that the
forward casts to float and computes with, instead of looking it up in an embedding.  Id 17 is not "more" than id
3, so a layer that multiplies the id by a weight learns an order that is not there, and the model cannot tell most
ids apart.

A ``TorchFunctionMode`` runs one forward of a copy and notes a cast to a floating dtype of a tensor that shares
its memory with an integer input (the input itself or a view of it: ``user.float().unsqueeze(1)``).  Masks and
type ids (a few distinct values) are not ids.  The fix changes the model (an ``nn.Embedding`` per id field), so it
cannot be tried on a copy: the finding says so.
"""

from __future__ import annotations

import traceback
from typing import Any

from nbdebug.core.doctor._inputs import tensor_leaves
from nbdebug.core.doctor._session import Session

__all__ = ["ids_as_numbers", "CHECK"]

CHECK = "integer ids cast to numbers in the forward"
_CASTS = ("float", "double", "half", "bfloat16", "to", "type", "type_as")
_MIN_DISTINCT = 8  # fewer distinct values: a mask, a type id or a small category set
_MAX_FIELDS = 4  # an id field holds one value per sample, or a few; more columns are a feature vector (pixel ints)
_NOT_IDS = ("position_ids", "attention_mask", "token_type_ids", "labels")


def _id_shaped(t: Any) -> bool:
    """One id per sample (``(N,)``, ``(N, 1)``) or a few id columns (``(N, k)``, small k); a feature vector of
    many integer columns (pixel values, counts) is a quantity, not ids."""
    return t.dim() == 1 or (t.dim() == 2 and t.shape[1] <= _MAX_FIELDS)


def ids_as_numbers(s: Session) -> None:
    import torch
    from torch.overrides import TorchFunctionMode

    from nbdebug.core.training._replay import _user_frame

    inputs = s.loss.model_inputs()
    if isinstance(inputs, dict):  # a Hugging Face batch: positions and masks are cast to float by design (RoPE)
        inputs = {k: v for k, v in inputs.items() if k not in _NOT_IDS}
    targets = {t.untyped_storage().data_ptr() for t in tensor_leaves(s.loss.targets) if isinstance(t, torch.Tensor)}
    ids = [t for t in tensor_leaves(inputs) if isinstance(t, torch.Tensor)
           and t.dtype in (torch.int16, torch.int32, torch.int64) and t.numel() > 1 and _id_shaped(t)
           and t.untyped_storage().data_ptr() not in targets
           and int(t.min()) >= 0 and int(torch.unique(t).numel()) >= _MIN_DISTINCT]
    if not ids:
        s.check(CHECK, "no integer id field (one value, or a few, per sample) with many distinct values")
        return
    ptrs = {t.untyped_storage().data_ptr(): t for t in ids}
    seen: list[tuple[Any, str | None]] = []

    class _Casts(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            t = args[0] if args else None
            if getattr(func, "__name__", "") in _CASTS and isinstance(t, torch.Tensor) and not t.is_floating_point() \
                    and isinstance(out, torch.Tensor) and out.is_floating_point() \
                    and t.untyped_storage().data_ptr() in ptrs and len(seen) < 4:
                seen.append((ptrs[t.untyped_storage().data_ptr()], _user_frame(traceback.extract_stack()[:-1])))
            return out

    work, _ = s.fresh()
    with torch.no_grad(), torch.random.fork_rng(devices=[]), _Casts():
        s.loss.forward(work, s.loss.inputs)
    if not seen:
        s.check(CHECK, "none: the integer inputs are looked up, not computed with")
        return
    t, site = seen[0]
    distinct = int(torch.unique(t).numel())
    s.add("ids_as_numbers", f"an integer input with {distinct} distinct values (0..{int(t.max())}, ids) is cast to "
          f"float in the forward{f' at {site}' if site else ''} and computed with as a number: an id's value says "
          "nothing about it (id 17 is not more than id 3), so the model learns an order that is not there and "
          "cannot tell most ids apart (not tried on a copy: an embedding changes the model)",
          (site or "forward",), evidence={"distinct": distinct, "casts": len(seen), "site": site or ""})
    s.check(CHECK, f"{len(seen)} cast(s) of integer ids to float")
