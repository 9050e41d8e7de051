"""Labels against inputs with one batch (issue 24, seventh wave): without a DataLoader, a copy trained on half of
the batch predicts the other half; labels shuffled apart from their inputs are predicted no better than chance,
while a control copy trained the same way on labels that follow from the inputs does better.  And a growing
gradient norm whose "lower the learning rate" was tried on a copy and did not help is no error with that advice."""

from __future__ import annotations

import torch
import torch.nn as nn

from nbdebug.core._findings import sort_findings
from nbdebug.core.doctor import doctor

QUICK = dict(reproducibility=False, progress=False, time_budget=None)  # every step: the verdicts do not depend on load
HALF = "labels against inputs (a copy trained on half the batch predicts the other half)"


def digits(n=64):
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.data[:n], dtype=torch.float32) / 16.0
    return (x - 0.3) / 0.4, torch.tensor(d.target[:n])


def loud(r):
    return [f for f in sort_findings(r.findings) if f.severity != "info"]


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


def test_one_batch_with_labels_shuffled_apart_is_found_by_holding_half_out():
    x, y = digits(64)
    shuffled = y[torch.randperm(64, generator=torch.Generator().manual_seed(1))]
    m = mlp()
    r = doctor(m, (x, shuffled), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=3e-3), **QUICK)
    top = loud(r)[0]
    assert top.kind == "labels_unrelated" and "label" in top.fixes[0].title, r
    # one batch: a warning, on positive evidence (the control significantly better, a permutation as fast)
    assert top.severity == "warning" and "not shown to follow from the inputs" in top.message, top
    assert "do not follow" not in top.message, top
    assert top.evidence["mean_loss"] >= top.evidence["mean_loss_permuted"], top.evidence
    assert "predict the other half" in top.message and top.evidence["z"] >= 3.09, top.evidence
    assert top.evidence["control_accuracy"] > top.evidence["accuracy"], top.evidence
    # the same batch with its labels in place: the check runs, and finds nothing
    m = mlp()
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=3e-3), **QUICK)
    assert "labels_unrelated" not in r.kinds and not loud(r), r
    assert dict(r.checks)[HALF].startswith("accuracy"), r.checks


def test_a_batch_too_small_to_split_says_so():
    x, y = digits(16)
    r = doctor(mlp(), (x, y), nn.CrossEntropyLoss(), **QUICK)
    assert "too few" in dict(r.checks)[HALF], r.checks


class PerSample(nn.Module):
    """One learned vector per sample id: nothing learned from some samples holds for any other."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(64, 16)
        self.head = nn.Linear(16, 10)

    def forward(self, ids):
        return self.head(self.emb(ids))


def test_a_model_that_does_not_generalise_from_half_a_batch_gives_no_verdict():
    # the labels are the digits' own, the inputs each sample's id: the control (labels a random copy gives the ids)
    # is predicted no better on the held-out half, so the check says nothing about the labels
    _, y = digits(64)
    m = PerSample()
    r = doctor(m, (torch.arange(64), y), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1e-2), **QUICK)
    assert "labels_unrelated" not in r.kinds, r
    assert dict(r.checks)[HALF].startswith("no verdict"), r.checks


def test_gradients_that_grew_are_not_blamed_on_the_lr_when_a_lower_lr_learns_worse():
    # doctor_cases8's DeiT on wrongly annotated labels: the norm grew 1e4x while the batch was memorised, and
    # lr/10 tried on a copy learned it worse (2.311 -> 1.686 against 0.178): no error saying "lower the lr"
    from nbdebug.core.doctor._experiments import Experiment
    from nbdebug.core.doctor._verdicts import growth_tried
    from nbdebug.core.knowledge import finding

    f = finding("exploding_gradients", "the gradient norm grew 9.81e+03x during training (lr=0.001)")
    worse = Experiment(cause="lr_too_high", change="lr=0.0001 instead of 0.001", steps=170, start=2.311,
                       before=0.1782, after=1.686, fitted=False, restores=False, code="g['lr'] = 0.0001")
    for stuck, severity in ((False, "info"), (True, "warning")):
        g = growth_tried(f, worse, stuck)
        assert g.severity == severity and "lower the learning rate" not in " ".join(x.title for x in g.fixes), g
        assert "worse than yours" in g.message and g.evidence["after"].startswith("2.311 -> 1.686"), g
    better = Experiment(cause="lr_too_high", change="lr=0.05 instead of 10000", steps=50, start=1.4, before=9.0,
                        after=0.05, fitted=True, restores=True, code="g['lr'] = 0.05")
    g = growth_tried(f, better, True)
    assert g.severity == "error" and g.fixes[0].title.startswith("lower the learning rate (lr=0.05"), g
