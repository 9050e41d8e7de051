"""The optimizer's settings against the learning rate.  Weight decay: the differential tries it off on a copy whenever
the batch is not learned (stuck or rising) and names it, with before/after numbers, only when that restores learning.
Plain SGD at an adaptive optimizer's lr (1e-3, no momentum) is too low for SGD: the lr experiment that restores
learning is a warning, while SGD at 1e-3 with momentum 0.9 (a usual fine-tune) gets none."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from nbdebug import doctor
from nbdebug.core._findings import sort_findings

QUICK = dict(reproducibility=False, progress=False, time_budget=None)  # every step: the verdicts do not depend on load


def loud(r):
    return [f for f in sort_findings(r.findings) if f.severity != "info"]


def digits(n=64):
    datasets = pytest.importorskip("sklearn.datasets")
    d = datasets.load_digits()
    x = torch.tensor(d.data[:n], dtype=torch.float32)
    return (x - x.mean(0)) / (x.std(0) + 1e-6), torch.tensor(d.target[:n])


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 10))


def pretrained(x, y, steps=30):
    """The MLP after a few steps of plain Adam: a fine-tune starts below chance, so a weight decay that pulls every
    weight to zero makes its loss rise back to chance (a run that reads as unstable, not stuck)."""
    m = mlp()
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(m(x), y).backward()
        opt.step()
    return m


@pytest.mark.parametrize("start", ["init", "pretrained"])
def test_a_huge_l2_weight_decay_in_adam_is_named_with_the_loss_it_gives_without_it(start):
    x, y = digits()
    m = mlp() if start == "init" else pretrained(x, y)
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1e-2, weight_decay=10.0),
               **QUICK)
    top = loud(r)[0]
    assert top.kind == "weight_decay_high", r
    assert "weight_decay=0 instead of 10" in top.message, top
    tried = next(e for e in r.experiments if e.cause == "weight_decay_high")
    assert tried.restores and tried.after < tried.before / 2, tried
    assert "frozen layer" not in " ".join(f.fix for f in loud(r)), r


def test_a_usual_weight_decay_on_the_same_model_is_no_finding():
    x, y = digits()
    m = mlp()
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.01),
               **QUICK)
    assert not loud(r), r
    assert not any(f.kind == "weight_decay_high" for f in r.findings), r


def gru_classifier():
    """Rows of the 8x8 digit as a sequence of 8 steps, a GRU and a linear head."""
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.GRU(8, 32, batch_first=True)
            self.head = nn.Linear(32, 10)

        def forward(self, x):
            return self.head(self.rnn(x.view(-1, 8, 8))[0][:, -1])

    return Net()


def test_plain_sgd_at_1e3_is_told_to_raise_the_lr_with_the_measured_value():
    x, y = digits()
    m = gru_classifier()
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.SGD(m.parameters(), lr=1e-3), **QUICK)
    top = loud(r)[0]
    assert top.kind == "cannot_overfit" and top.fix.startswith("raise the learning rate"), r
    assert "frozen layer" not in " ".join(x.title for f in r.findings for x in f.fixes), r


def test_sgd_at_1e3_with_momentum_gets_no_warning():
    x, y = digits()
    m = gru_classifier()
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.SGD(m.parameters(), lr=1e-3, momentum=0.9), **QUICK)
    assert not loud(r), r
