"""A reviewer's finds on the live evidence (review8): errors raised inside a model that is false as a bool.

``torch.compile``'s wrapper has no ``len()``, so testing it for truth raised inside the explainer and a notebook showed
"the diagnosis failed" instead of a panel; a module whose ``len()`` is 0 (an empty container) was skipped as the root
the layer is named from.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

from nbdebug.core.explain import explain


def _live(d) -> dict:
    assert d.live is not None, "a live error's panel shows what the live session holds"
    return dict(d.live.facts)


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        self.head = nn.Linear(6, 3)  # expects 6 features, the body gives 8

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class _Bag(nn.Module):
    """A container that reports its length, like an empty ``nn.Sequential``: false as a bool."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def __len__(self) -> int:
        return 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def test_an_error_inside_a_compiled_model_is_explained_and_named_after_the_users_model():
    model = torch.compile(_Net(), backend="eager")
    with pytest.raises(Exception) as info:
        model(torch.ones(2, 4))
    d = explain(info.value, roots={"model": model})  # raised TypeError ("_Net does not support len()") before
    assert d.kind == "shape_mismatch"
    facts = _live(d)
    assert facts["Module"].startswith("model"), facts
    assert "_orig_mod" not in " ".join(str(v) for v in facts.values()), facts


def test_a_layer_inside_a_module_that_is_false_as_a_bool_is_named_from_it():
    bag = _Bag()
    with pytest.raises(RuntimeError) as info:
        bag(torch.ones(2, 4))
    facts = _live(explain(info.value))
    assert facts["Module"].startswith("<_Bag>.fc"), facts  # the layer, named from the model that holds it
