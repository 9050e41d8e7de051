"""Issue 24, the review of the one-batch labels check (seventh wave): labels hard but learnable get no finding from
one batch (only positive evidence counts: the user's held-out accuracy significantly below a control's, and no
faster learning than every permutation of the labels); binary 0/1 targets for BCEWithLogitsLoss are checked too; a
shuffling DataLoader leaves the caller's RNG as it was."""

from __future__ import annotations

import random

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from nbdebug.core.doctor import doctor

QUICK = dict(reproducibility=False, progress=False, time_budget=None)  # every step: the verdicts do not depend on load
HALF = "labels against inputs (a copy trained on half the batch predicts the other half)"


def mlp(i, h, o):
    return nn.Sequential(nn.Linear(i, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, o))


def test_hard_but_learnable_labels_from_one_batch_get_no_finding():
    # make_classification labels an MLP trained on 3000 samples predicts at 60 % and 84 % (chance 10 % and 25 %):
    # from one batch of 64 a copy trained on 32 predicts the others poorly, and the check said "error" before
    from sklearn.datasets import make_classification

    for classes, informative in ((10, 5), (4, 4)):
        X, Y = make_classification(n_samples=4000, n_features=20, n_informative=informative, n_redundant=0,
                                   n_classes=classes, n_clusters_per_class=1, class_sep=0.5, random_state=classes)
        X = ((X - X.mean(0)) / X.std(0)).astype("float32")
        sel = np.random.RandomState(0).permutation(4000)[:64]
        torch.manual_seed(0)
        m = mlp(20, 128, classes)
        r = doctor(m, (torch.tensor(X[sel]), torch.tensor(Y[sel])), nn.CrossEntropyLoss(),
                   torch.optim.Adam(m.parameters(), 1e-3), **QUICK)
        assert "labels_unrelated" not in r.kinds, r
        assert "accuracy" in dict(r.checks)[HALF], r.checks  # the check ran


def cancer(n=64):
    from sklearn.datasets import load_breast_cancer

    d = load_breast_cancer()
    x = d.data.astype("float32")
    x = (x - x.mean(0)) / (x.std(0) + 1e-6)
    idx = np.random.RandomState(0).permutation(len(x))[:n]
    y = torch.tensor(d.target[idx])
    return torch.tensor(x[idx]), y[torch.randperm(n, generator=torch.Generator().manual_seed(5))]


def test_binary_float_targets_for_bce_with_logits_are_checked():
    x, y = cancer()
    for column in (True, False):
        torch.manual_seed(0)
        m = mlp(30, 64, 1) if column else nn.Sequential(mlp(30, 64, 1), nn.Flatten(0))
        t = y.float().unsqueeze(1) if column else y.float()
        r = doctor(m, (x, t), nn.BCEWithLogitsLoss(), torch.optim.Adam(m.parameters(), 1e-3), **QUICK)
        said = dict(r.checks)[HALF]
        assert "not one class per sample" not in said and said.startswith(("accuracy", "no verdict")), r.checks


def test_a_shuffling_dataloader_leaves_the_global_rng_as_it_was():
    torch.manual_seed(0)
    dl = DataLoader(TensorDataset(torch.randn(256, 20), torch.randint(0, 4, (256,))), batch_size=64, shuffle=True)
    m = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 4))
    before = torch.get_rng_state().clone(), np.random.get_state()[1].copy(), random.getstate()
    doctor(m, None, nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), 1e-3), dataloader=dl, steps=20, **QUICK)
    assert torch.equal(before[0], torch.get_rng_state())
    assert (before[1] == np.random.get_state()[1]).all() and before[2] == random.getstate()
