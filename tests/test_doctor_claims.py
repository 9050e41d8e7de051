"""A doctor's claim is backed by what it measured on a copy (issue 24, fifth wave): a healthy model whose training
loss is noisy by design (dropout, a noise layer) is not called unstable; "the learning rate is too high" stands only
when a lower one learns the batch better; labels shuffled apart from their inputs are tested once the batch is
learned, not only memorised; the measured cause ranks above its symptoms; and what does not harm training (constant
pixel columns, a DataLoader wait of a millisecond or so per batch) is no warning."""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from nbdebug.core._findings import sort_findings
from nbdebug.core.doctor import doctor

QUICK = dict(reproducibility=False, progress=False, time_budget=None)  # every step: the verdicts do not depend on load


def digits(n=128):
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.data[:n], dtype=torch.float32) / 16.0
    return (x - 0.3) / 0.4, torch.tensor(d.target[:n])


def loud(r):
    return [f for f in sort_findings(r.findings) if f.severity != "info"]


def said(r):
    return " ".join(f.message + " " + " ".join(x.title + " " + x.code for x in f.fixes) for f in r.findings)


class GaussianNoise(nn.Module):
    """Noise added to the input while training (a regulariser people use): the training loss is noisy by design."""

    def __init__(self, std: float) -> None:
        super().__init__()
        self.std = std

    def forward(self, x):
        return x + self.std * torch.randn_like(x) if self.training else x


def test_healthy_mlp_with_dropout_05_and_adam_is_not_called_unstable():
    x, y = digits(128)
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 10))
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1e-3), **QUICK)
    assert not loud(r), r
    assert "too high" not in said(r)
    overfit = dict(r.checks)["overfit one batch"]
    assert "with dropout off" in overfit, overfit
    assert m[2].p == 0.5 and m.training  # the caller's dropout is untouched


def test_a_curve_noisy_by_a_noise_layer_is_not_blamed_on_the_lr():
    x, y = digits(128)
    torch.manual_seed(0)
    m = nn.Sequential(GaussianNoise(1.0), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1e-3), **QUICK)
    assert not loud(r), r
    assert "too high" not in said(r)
    assert "two forward passes of the trained copy on it give different losses" in r.finding("cannot_overfit").message


def test_labels_shuffled_apart_from_their_inputs_are_caught_when_the_batch_is_learned_not_memorised():
    x, y = digits(1024)
    shuffled = y[torch.randperm(len(y), generator=torch.Generator().manual_seed(1))]
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    loader = DataLoader(TensorDataset(x, shuffled), batch_size=128, shuffle=True)
    r = doctor(m, loader, nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1e-3), **QUICK)
    assert loud(r)[0].kind == "labels_unrelated", r
    assert "shuffle inputs and labels together" in loud(r)[0].fix


def test_the_same_loader_with_labels_that_follow_the_inputs_gets_no_warning():
    x, y = digits(1024)
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    loader = DataLoader(TensorDataset(x, y), batch_size=256, shuffle=True)
    r = doctor(m, loader, nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1e-3), **QUICK)
    assert not loud(r), r  # constant border pixels and an in-memory loader's wait are no warnings
    assert r.finding("constant_columns").severity == "info"
    assert dict(r.checks)["labels against inputs (a second batch after fitting the first)"].startswith("accuracy")


def test_the_measured_cause_ranks_above_the_exploding_gradients_it_causes():
    x, y = digits(64)
    torch.manual_seed(0)
    m = nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
                      nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                      nn.Linear(32, 10))
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=3.0), **QUICK)
    top = loud(r)[0]
    assert top.kind == "cannot_overfit" and top.fixes[0].title.startswith("lower the learning rate (lr="), r
    symptoms = [f for f in r.findings if f.kind in ("exploding_gradients", "dead_activations")]
    assert symptoms, r
    for f in symptoms:
        assert f.severity == "warning" and "follows from the finding above" in f.message
        assert f.fixes[0].title.startswith("lower the learning rate (lr=")


class Backbone(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.backbone = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU())
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        return self.head(self.backbone(x))


def test_a_trained_model_whose_loss_starts_under_chance_is_no_leak():
    # a model trained on other samples of the task, its backbone then frozen on purpose and its head fine-tuned
    from sklearn.datasets import load_digits

    d = load_digits()
    xs = (torch.tensor(d.data[512:1024], dtype=torch.float32) / 16.0 - 0.3) / 0.4
    ys = torch.tensor(d.target[512:1024])
    m = Backbone()
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    for _ in range(100):
        opt.zero_grad()
        nn.functional.cross_entropy(m(xs), ys).backward()
        opt.step()
    m.backbone.requires_grad_(False)
    r = doctor(m, digits(64), nn.CrossEntropyLoss(), torch.optim.Adam(m.head.parameters(), lr=1e-3),
               frozen="backbone", **QUICK)
    assert not loud(r), r
    assert "the model is trained already" in dict(r.checks)["loss at init"]


def test_a_loss_that_starts_under_chance_without_the_weights_knowing_is_still_named():
    x, y = digits(64)
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))

    def loss_fn(out, t):  # the loss is computed on the targets themselves, not on the prediction
        return nn.functional.cross_entropy(5 * nn.functional.one_hot(t, 10).float() + 0 * out, t)

    r = doctor(m, (x, y), loss_fn, torch.optim.Adam(m.parameters(), lr=1e-3), **QUICK)
    assert r.finding("fits_too_easily").severity != "info", r  # re-initialised, the loss stays under chance
    assert "trained already" not in dict(r.checks)["loss at init"]


def test_a_run_still_falling_is_not_told_to_raise_an_lr_that_no_experiment_tried():
    x, y = digits(64)
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.SGD(m.parameters(), lr=0.05), steps=60, **QUICK)
    f = r.finding("cannot_overfit")
    assert f.severity == "info" and "still falling" in f.message, r
    assert "higher learning rate" not in said(r) and "raise the learning rate" not in said(r)


class VAE(nn.Module):
    """A variational autoencoder: its loss is noisy by design (the latent is sampled) and never reaches zero."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.enc = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 16))
        self.dec = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64))

    def forward(self, x):
        mu, logvar = self.enc(x).chunk(2, -1)
        return self.dec(mu + torch.randn_like(mu) * (0.5 * logvar).exp()), mu, logvar


def vae_loss(out, x):
    rec, mu, logvar = out
    kl = -0.5 * torch.mean(torch.sum(1 + logvar - mu ** 2 - logvar.exp(), 1))
    return nn.functional.mse_loss(rec, x, reduction="sum") / x.shape[0] + kl


def test_a_healthy_vae_whose_sampled_loss_cannot_reach_zero_gets_no_warning():
    x, _ = digits(128)
    m = VAE()
    r = doctor(m, (x, x), vae_loss, torch.optim.Adam(m.parameters(), lr=1e-3), **QUICK)
    assert not loud(r), r
    assert "different losses" in r.finding("cannot_overfit").message


def test_the_mode_left_is_named_before_the_explosion_it_causes():
    x, y = digits(64)
    torch.manual_seed(0)
    m = nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                      nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
                      nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                      nn.Flatten(), nn.Linear(64, 10))
    m.eval()  # left in eval mode after a validation pass: BatchNorm never normalises this batch
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.SGD(m.parameters(), lr=0.5, momentum=0.9), **QUICK)
    assert loud(r)[0].kind == "eval_mode", r
    for f in r.findings:
        if f.kind in ("exploding_gradients", "dead_activations"):
            assert f.severity == "warning" and f.fixes[0].title.startswith("fix that first"), f


def test_the_noise_note_gives_way_when_a_lower_lr_learns_the_batch_noise_and_all():
    x, y = digits(64)
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.2), nn.Linear(128, 10))
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1.0), **QUICK)
    top = loud(r)[0]
    assert top.kind == "cannot_overfit" and top.fixes[0].title.startswith("lower the learning rate (lr=0.001"), r
    assert "no fault" not in said(r)


def test_a_run_that_barely_moves_is_restored_by_an_lr_that_learns_many_times_as_much():
    # plain SGD at lr=0.003 on a BatchNorm CNN: the loss falls 2.31 -> 2.25 in 200 steps, lr=0.05 takes it to 1.7;
    # that is the lr, not "a frozen layer, a detached tensor" (nothing is wired wrong)
    x, y = digits(1024)
    torch.manual_seed(0)
    m = nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                      nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                      nn.Flatten(), nn.Dropout(0.2), nn.Linear(32, 10))
    loader = DataLoader(TensorDataset(x, y), batch_size=128, shuffle=True)
    r = doctor(m, loader, nn.CrossEntropyLoss(), torch.optim.SGD(m.parameters(), lr=0.003), **QUICK)
    assert "frozen layer" not in said(r), r
    best = r.experiments[0]
    assert best.cause == "lr_too_low" and best.restores, r.experiments
