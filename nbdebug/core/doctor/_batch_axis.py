"""Where a forward mixes the samples of a batch: the torch calls that work along the batch's axis.

Two faults make one sample's output depend on the others, and they need different fixes: a (log-)softmax taken
over the batch's dimension (``F.log_softmax(logits, dim=0)``) and a ``view``/``reshape`` taken for a transpose
(``x.view(B, T, C)`` on a ``(T, B, C)`` tensor).  A ``TorchFunctionMode`` notes every such call in the forward
(op and line), and the same mode with ``fix=True`` runs the corrected call instead (the softmax over the class
dimension, ``permute`` for the view), so the mixing test and a training run can be repeated on the copy with the
fix applied: a suspect whose fix does not end the mixing is not named.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any

__all__ = ["Suspect", "BatchAxisMode", "FixedForward", "candidates"]

_SOFTMAX = ("softmax", "log_softmax")
_VIEW = ("view", "reshape")


@dataclass(frozen=True)
class Suspect:
    """One call along the batch's axis: ``kind`` is ``softmax`` or ``view``; ``change`` the fix in words."""

    kind: str
    op: str
    site: str | None
    change: str
    code: str


def _softmax_dim(args: tuple[Any, ...], kwargs: dict[str, Any], ndim: int) -> int:
    dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
    if dim is None:  # torch's implicit choice (deprecated): 0 for 0-, 1- and 3-dimensional inputs
        dim = 0 if ndim in (0, 1, 3) else 1
    return int(dim) % ndim


def _permutation(src: tuple[int, ...], dst: tuple[int, ...], n: int) -> tuple[int, ...] | None:
    """The order of ``src``'s dimensions that has ``dst``'s shape, when ``dst`` is ``src`` with its dimensions
    swapped (not merged or split) and the batch's length ``n`` moved: what a transpose would have given."""
    if len(src) != len(dst) or len(src) < 2 or src == dst or sorted(src) != sorted(dst) or n not in src:
        return None
    if [i for i, d in enumerate(src) if d == n] == [i for i, d in enumerate(dst) if d == n]:
        return None
    used: list[int] = []
    for size in dst:
        i = next(i for i, d in enumerate(src) if d == size and i not in used)
        used.append(i)
    return tuple(used)


class BatchAxisMode:
    """A context (a ``TorchFunctionMode``) that notes the calls along the batch's axis of ``n`` samples in
    ``suspects``; with ``fix`` it runs each one corrected instead."""

    def __new__(cls, n: int, fix: bool = False) -> Any:
        import torch
        from torch.overrides import TorchFunctionMode

        from nbdebug.core.training._replay import _op_name, _user_frame

        class _Mode(TorchFunctionMode):
            def __init__(self) -> None:
                super().__init__()
                self.suspects: list[Suspect] = []
                self.fixed = 0

            def _note(self, suspect: Suspect) -> None:
                if all((x.kind, x.site) != (suspect.kind, suspect.site) for x in self.suspects):
                    self.suspects.append(suspect)

            def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                kwargs = kwargs or {}
                name = getattr(func, "__name__", "")
                t = args[0] if args else None
                if name in _SOFTMAX and isinstance(t, torch.Tensor) and t.dim() >= 2:
                    d = _softmax_dim(args, kwargs, t.dim())
                    if int(t.shape[d]) == n and (d == 0 or sum(int(x) == n for x in t.shape) == 1):
                        to = t.dim() - 1 if d != t.dim() - 1 else 1
                        self._note(Suspect("softmax", _op_name(func), _user_frame(traceback.extract_stack()[:-1]),
                                           f"{name} over dim {to} (the classes) instead of dim {d} (the batch)",
                                           f"F.{name}(logits, dim={to - t.dim()})  # not dim={d}: that is the batch"))
                        if fix:
                            self.fixed += 1
                            kw = {k: v for k, v in kwargs.items() if k not in ("dim", "_stacklevel")}
                            return getattr(torch, name)(t, to, **kw)
                out = func(*args, **kwargs)
                if name in _VIEW and isinstance(t, torch.Tensor) and isinstance(out, torch.Tensor):
                    perm = _permutation(tuple(int(x) for x in t.shape), tuple(int(x) for x in out.shape), n)
                    if perm is not None:
                        swap = [i for i, p in enumerate(perm) if i != p]
                        how = f"transpose({swap[0]}, {swap[1]})" if len(swap) == 2 else f"permute{perm}"
                        self._note(Suspect("view", _op_name(func), _user_frame(traceback.extract_stack()[:-1]),
                                           f"{how} instead of {name}{tuple(out.shape)}",
                                           f"x = x.{how}  # not x.{name}(...): it keeps the memory order and mixes "
                                           "the samples"))
                        if fix:
                            self.fixed += 1
                            return t.permute(perm).contiguous()
                return out

        return _Mode()


class FixedForward:
    """The user's way of making the loss, with the calls along the batch's axis corrected (``BatchAxisMode`` with
    ``fix``): the experiment trains a copy with the fix applied without editing the user's code."""

    def __init__(self, adapter: Any, n: int) -> None:
        self.adapter = adapter
        self.n = n

    def loss(self, work: Any, inputs: Any, targets: Any = None) -> tuple[Any, Any]:
        with BatchAxisMode(self.n, fix=True):
            return self.adapter.loss(work, inputs, targets)


def candidates(s: Any) -> list[tuple[str, str, Any, str]]:
    """The doctor's experiment for a confirmed mixing call: a fresh copy trained with the call corrected."""
    if s.batch_axis is None:
        return []
    n, suspect = s.batch_axis

    def make(s: Any) -> tuple[Any, Any, Any, Any]:
        work, opt = s.fresh()
        return work, opt, FixedForward(s.loss, n), s.loss.inputs

    return [("mixes_batch", suspect.change, make, suspect.code)]
