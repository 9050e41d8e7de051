"""A model ignores its input only when its output does not move with it: measured by zeroing the inputs, on the
model as given and on a trained copy, never inferred from a zero input's loss that comes close (a model that learns
slowly, a loss with a floor: MSE on probabilities, label smoothing)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nbdebug import doctor
from nbdebug.core._findings import sort_findings


def loud(r):
    return [f for f in sort_findings(r.findings) if f.severity != "info"]


def blobs(n=64, d=16, classes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % classes
    centres = torch.randn(classes, d, generator=g) * 2
    return centres[y] + 0.5 * torch.randn(n, d, generator=g), y


class SoftmaxMLP(nn.Module):
    def __init__(self, d=16, classes=4):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, 32), nn.Tanh(), nn.Linear(32, classes))

    def forward(self, x):
        return self.net(x)


def mse_on_softmax(out, y):
    return F.mse_loss(out.softmax(1), F.one_hot(y, out.shape[1]).float())


class CachedInput(nn.Module):
    """The bug: the forward uses a detached tensor cached from the first batch it saw."""

    def __init__(self, d=16, classes=4):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, 32), nn.Tanh(), nn.Linear(32, classes))
        self.register_buffer("cache", torch.zeros(0))

    def forward(self, x):
        if self.cache.numel() == 0:
            self.cache = torch.randn_like(x)
        return self.net(self.cache.detach())


def test_mse_on_softmax_of_a_slow_sigmoid_mlp_is_never_said_to_ignore_its_input():
    """A sigmoid MLP on sklearn's digits with MSE between softmax and one-hot labels learns slowly: a zero input's
    loss comes as close as the real one's (0.0900 against 0.0900), yet zeroing the inputs moves the output."""
    datasets = pytest.importorskip("sklearn.datasets")
    d = datasets.load_digits()
    x, y = torch.tensor(d.data[:64], dtype=torch.float32) / 16, torch.tensor(d.target[:64])
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.Sigmoid(), nn.Linear(64, 10))
    r = doctor(model, (x, y), mse_on_softmax, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
               time_budget=None, progress=False)
    assert not any(f.kind == "ignores_input" for f in r.findings), r
    said = dict(r.checks)
    assert "the model uses its input" in said["output against the input"], said


def test_label_smoothing_with_clipping_on_a_healthy_classifier_gets_no_ignores_input():
    torch.manual_seed(1)
    x, y = blobs(seed=1)
    model = SoftmaxMLP()
    r = doctor(model, (x, y), nn.CrossEntropyLoss(label_smoothing=0.1),
               optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4), steps=60, time_budget=None, progress=False)
    assert not any(f.kind == "ignores_input" for f in r.findings), r


def test_a_forward_on_a_cached_detached_tensor_is_said_to_ignore_its_input():
    torch.manual_seed(2)
    x, y = blobs(seed=2)
    model = CachedInput()
    r = doctor(model, (x, y), nn.CrossEntropyLoss(), optimizer=torch.optim.Adam(model.parameters(), lr=1e-2),
               steps=80, time_budget=None, progress=False)
    assert any(f.kind == "ignores_input" for f in r.findings), r
