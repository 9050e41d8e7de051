"""A model with no non-linearity between its inputs and its output that does not learn its batch is named as too
small (measured: its output is affine in its input), never sent to look for a frozen layer or a detached tensor."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nbdebug import doctor
from nbdebug.core._findings import sort_findings

QUICK = dict(reproducibility=False, progress=False, time_budget=None)  # every step: the verdicts do not depend on load


def loud(r):
    return [f for f in sort_findings(r.findings) if f.severity != "info"]


def xor_images(n=64, seed=0):
    """4x4 one-channel images; the class is the XOR of the signs of two pixels: not linearly separable."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 1, 4, 4, generator=g)
    y = ((x[:, 0, 0, 0] > 0) ^ (x[:, 0, 3, 3] > 0)).long()
    return x, y


def conv_net(act):
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), act, nn.Flatten(), nn.Linear(128, 32), act, nn.Linear(32, 2))


def test_a_conv_net_without_activations_on_xor_data_is_named_too_small():
    x, y = xor_images()
    m = conv_net(nn.Identity())
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1e-2), **QUICK)
    top = loud(r)[0]
    assert top.kind == "model_too_small" and "layer" in top.fix and "affine" in top.message, r
    said = " ".join(f.message + " " + f.fix for f in r.findings)
    assert "frozen layer" not in said and "detached tensor" not in said, said
    assert dict(r.checks)["the output against the input"].startswith("affine"), r.checks


def test_the_same_net_with_relus_is_healthy():
    x, y = xor_images()
    m = conv_net(nn.ReLU())
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1e-2), **QUICK)
    assert not loud(r), r


def test_a_linear_model_on_linearly_separable_data_gets_no_finding():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 8, generator=g)
    y = (x[:, 0] + x[:, 1] > 0).long()
    torch.manual_seed(0)
    m = nn.Linear(8, 2)
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1e-1), **QUICK)
    assert not loud(r) and not any(f.kind == "model_too_small" for f in r.findings), r


def digits(n=64):
    datasets = pytest.importorskip("sklearn.datasets")
    d = datasets.load_digits()
    return torch.tensor(d.data[:n], dtype=torch.float32) / 16, torch.tensor(d.target[:n])


def sigmoid_mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 64), nn.Sigmoid(), nn.Linear(64, 10))


def mse_on_softmax(out, y):
    return F.mse_loss(out.softmax(1), F.one_hot(y, out.shape[1]).float())


def test_mse_on_softmax_that_does_not_learn_is_told_to_use_cross_entropy_not_to_look_for_a_frozen_layer():
    x, y = digits()
    m = sigmoid_mlp()
    r = doctor(m, (x, y), mse_on_softmax, torch.optim.SGD(m.parameters(), lr=0.1), **QUICK)
    top = loud(r)[0]
    assert top.kind == "cannot_overfit" and top.fix.startswith("use cross-entropy on the logits"), r
    assert "frozen layer" not in " ".join(f.fix for f in r.findings), r


def test_the_same_mlp_with_cross_entropy_is_healthy():
    x, y = digits()
    m = sigmoid_mlp()
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.SGD(m.parameters(), lr=0.5), **QUICK)
    assert not loud(r), r


def test_a_sigmoid_autoencoder_with_mse_is_never_told_to_use_cross_entropy():
    x, _ = digits()
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 64), nn.Sigmoid())
    r = doctor(m, (x, x), nn.MSELoss(), torch.optim.Adam(m.parameters(), lr=1e-3), **QUICK)
    assert "cross-entropy" not in " ".join(f.fix for f in r.findings), r


def test_a_tanh_net_on_inputs_too_small_for_its_non_linearity_is_not_called_linear():
    # review: a tanh hidden layer on inputs of std 3e-4 works in tanh's linear range, so the output is affine at
    # that scale; the model has its non-linearity, and standardised inputs (tried on a copy) learn the batch better
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 2, generator=g) * 3e-4
    y = ((x[:, 0] > 0) ^ (x[:, 1] > 0)).long()
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 2))
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), 1e-3), steps=150, baseline=False,
               **QUICK)
    assert "model_too_small" not in r.kinds and "no non-linearity" not in " ".join(f.message for f in r.findings), r
    top = loud(r)[0]
    assert top.kind == "unnormalised_inputs" and "standardise" in top.fix, r
    assert top.evidence["tried"] == "the inputs standardised to mean 0, std 1" and top.evidence["restores"], top
