"""What the loss was given, wherever it is computed: a ``TorchFunctionMode`` that notes every call to a torch
loss (``F.cross_entropy``, ``nll_loss``, ``mse_loss``, the BCE pair, ...; the ``nn`` loss modules call these) with
its input and target tensors.

The doctor's probe step runs under it, so the checks of the output against the loss (probabilities into a loss
that expects logits, raw scores into NLL, shapes that broadcast, targets against the classes) see the tensors the
loss compared, whichever way the loss was made: ``loss_fn(model(x), y)``, a Hugging Face model's own loss, a
LightningModule's ``training_step``.  The same mode, given a ``rewrite``, changes what the loss is given: that
is how an experiment tries a fix of the loss's inputs (matching shapes, logits instead of probabilities) on a copy
without knowing where the user's code calls the loss.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["LossCall", "LossProbe", "loss_functions", "known_loss", "CLASS_LOSSES"]

# losses whose input holds one score per class in dim 1 ((N, C, ...) or (C,)) and whose target is a class index
CLASS_LOSSES = ("cross_entropy", "nll_loss")
_NAMES = ("cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
          "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "poisson_nll_loss",
          "gaussian_nll_loss", "soft_margin_loss", "multilabel_soft_margin_loss", "multi_margin_loss")
_FUNCS: dict[Any, str] = {}
# the nn modules of those losses (each calls its functional form)
_MODULES = {"CrossEntropyLoss": "cross_entropy", "NLLLoss": "nll_loss", "MSELoss": "mse_loss", "L1Loss": "l1_loss",
            "SmoothL1Loss": "smooth_l1_loss", "HuberLoss": "huber_loss", "BCELoss": "binary_cross_entropy",
            "BCEWithLogitsLoss": "binary_cross_entropy_with_logits", "KLDivLoss": "kl_div",
            "PoissonNLLLoss": "poisson_nll_loss", "GaussianNLLLoss": "gaussian_nll_loss",
            "SoftMarginLoss": "soft_margin_loss", "MultiLabelSoftMarginLoss": "multilabel_soft_margin_loss",
            "MultiMarginLoss": "multi_margin_loss"}


def known_loss(name: str) -> bool:
    """``name`` is one of torch's losses (an ``nn`` module's or a functional's name)."""
    return name in _MODULES or name in _NAMES


def loss_functions() -> dict[Any, str]:
    """``{torch.nn.functional.<loss>: name}`` for the losses the probe notes (built on first use: torch is
    imported lazily)."""
    if not _FUNCS:
        import torch.nn.functional as F

        _FUNCS.update({getattr(F, n): n for n in _NAMES if hasattr(F, n)})
    return _FUNCS


@dataclass
class LossCall:
    """One call of a torch loss: its name, what it was given and what it returned (None when it raised)."""

    name: str
    input: Any  # the prediction tensor, as the loss got it (with its autograd history)
    target: Any  # the target tensor (None when the loss has none)
    ignore_index: int
    result: Any = None
    label_smoothing: float = 0.0

    @property
    def class_dim(self) -> int:
        """Where a class loss reads its classes: dim 1 of a batch, dim 0 of one sample."""
        return 1 if getattr(self.input, "dim", lambda: 0)() >= 2 else 0


_SIGNATURES: dict[Any, inspect.Signature] = {}


def _bind(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> inspect.BoundArguments | None:
    sig = _SIGNATURES.get(func)
    if sig is None:
        try:
            sig = _SIGNATURES[func] = inspect.signature(func)
        except (TypeError, ValueError):  # pragma: no cover - every torch loss is a Python function
            return None
    try:
        return sig.bind(*args, **kwargs)
    except TypeError:
        return None


Rewrite = Callable[[LossCall, Any], Any]  # (the call, its input) -> the input the loss gets instead


class LossProbe:
    """Notes the calls to torch losses made while it is active (``with LossProbe() as probe: ...``);
    ``probe.calls`` in call order.  ``rewrite(call, input)`` returns what the loss is given instead of ``input``
    (an experiment's change); a loss call made inside another one's computation is not seen twice.
    """

    def __init__(self, rewrite: Rewrite | None = None) -> None:
        from torch.overrides import TorchFunctionMode

        probe = self

        class _Mode(TorchFunctionMode):
            def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                kwargs = dict(kwargs or {})
                name = loss_functions().get(func)
                if name is None:
                    return func(*args, **kwargs)
                call, bound = probe._note(name, func, tuple(args), kwargs)
                if bound is not None and probe.rewrite is not None and call is not None:
                    bound.arguments["input"] = probe.rewrite(call, bound.arguments["input"])
                    args, kwargs = bound.args, bound.kwargs
                out = func(*args, **kwargs)
                if call is not None:
                    call.result = out
                return out

        self.rewrite = rewrite
        self.calls: list[LossCall] = []
        self._mode = _Mode()

    def _note(self, name: str, func: Any, args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> tuple[LossCall | None, inspect.BoundArguments | None]:
        import torch

        bound = _bind(func, args, kwargs)
        if bound is None or not isinstance(bound.arguments.get("input"), torch.Tensor):
            return None, None
        target = bound.arguments.get("target")
        ignore = bound.arguments.get("ignore_index", -100)
        smoothing = bound.arguments.get("label_smoothing", 0.0)
        call = LossCall(name=name, input=bound.arguments["input"],
                        target=target if isinstance(target, torch.Tensor) else None,
                        ignore_index=int(ignore) if isinstance(ignore, int) else -100,
                        label_smoothing=float(smoothing) if isinstance(smoothing, (int, float)) else 0.0)
        self.calls.append(call)
        return call, bound

    def __enter__(self) -> LossProbe:
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)

    def the_loss(self, loss: Any) -> tuple[LossCall | None, bool]:
        """(the call that made the loss, whether the step's loss is that call's result and nothing else): the call
        whose result is ``loss`` itself, else the first call seen (None when no torch loss was called)."""
        for c in self.calls:
            if c.result is not None and c.result is loss:
                return c, True
        return (self.calls[0] if self.calls else None), False
