"""The doctor on batches that are not one batch-first tensor (issue 24, sixth wave): a ReLU module reused at two
widths, sequence-first (L, N) token inputs given as two tensors, a forward that draws its own noise.  Nothing
raises out of doctor(); a check that cannot read the layout is listed as skipped with its reason; the checks that
can find the batch's dimension from the targets' length still run on the samples, not on the time steps."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn

from nbdebug.core.doctor import doctor

QUICK = dict(reproducibility=False, progress=False)


def layout_skips(r):
    return [c for c in r.checks if "could not handle this batch's layout" in c[1]]


class SharedReluConv(nn.Module):
    """One ReLU module after convolutions of 8 and 4 channels (the ESPCN example's style)."""

    def __init__(self) -> None:
        super().__init__()
        self.relu = nn.ReLU()
        self.c1 = nn.Conv2d(1, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 4, 3, padding=1)
        self.c3 = nn.Conv2d(4, 1, 3, padding=1)

    def forward(self, x):
        return self.c3(self.relu(self.c2(self.relu(self.c1(x)))))


def test_a_relu_reused_at_two_widths_is_probed_per_width_not_raised():
    torch.manual_seed(0)
    x = torch.rand(16, 1, 6, 6)
    y = x.flip(-1)
    m = SharedReluConv()
    r = doctor(m, (x, y), nn.MSELoss(), torch.optim.Adam(m.parameters(), lr=1e-2), steps=30, **QUICK)
    checks = dict(r.checks)
    assert "model.relu" in checks["ReLU units silent on the whole batch at init"], checks
    assert not layout_skips(r), layout_skips(r)


class PairEncoder(nn.Module):
    """Premise and hypothesis as (L, N) token tensors (an LSTM without batch_first), one ReLU used on the (L, N, H)
    projection and on the (N, 2H) and (N, H) features; dropout before the classifier.  ``unused``: the encoder returns its
    zero initial state instead of the final one, so the output does not depend on the input."""

    def __init__(self, vocab=20, h=8, unused=False) -> None:
        super().__init__()
        self.unused = unused
        self.embed = nn.Embedding(vocab, h)
        self.proj = nn.Linear(h, h)
        self.relu = nn.ReLU()
        self.rnn = nn.LSTM(h, h)
        self.mlp = nn.Linear(2 * h, h)
        self.drop = nn.Dropout(0.2)
        self.out = nn.Linear(h, 3)

    def encode(self, tokens):
        e = self.relu(self.proj(self.embed(tokens)))  # (L, N, h)
        h0 = e.new_zeros(1, tokens.shape[1], e.shape[-1])
        _, (ht, _) = self.rnn(e, (h0, h0))
        return (h0 if self.unused else ht)[-1]  # (N, h)

    def forward(self, premise, hypothesis):
        feats = self.relu(torch.cat([self.encode(premise), self.encode(hypothesis)], 1))  # (N, 2h)
        return self.out(self.drop(self.relu(self.mlp(feats))))


def pair_batch(n=12, length=7, vocab=20):
    g = torch.Generator().manual_seed(3)
    p = torch.randint(0, vocab, (length, n), generator=g)
    q = torch.randint(0, vocab, (length, n), generator=g)
    return (p, q), (p[0] % 3)


def test_sequence_first_pair_inputs_are_read_along_the_batch_dimension():
    torch.manual_seed(0)
    m = PairEncoder()
    r = doctor(m, pair_batch(), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1e-2), steps=40, **QUICK)
    assert not layout_skips(r), layout_skips(r)
    assert dict(r.checks)["output depends on the input"] == "yes"


def test_an_output_that_ignores_sequence_first_inputs_is_named_before_its_missing_gradients():
    torch.manual_seed(0)
    m = PairEncoder(unused=True)
    r = doctor(m, pair_batch(), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1e-2), steps=40, **QUICK)
    loud = [f for f in r.findings if f.severity != "info"]
    assert loud and loud[0].kind == "ignores_input", [(f.kind, f.message) for f in loud]
    assert "with dropout off" in loud[0].message
    assert "12 samples" in loud[0].message  # the samples, not the 7 time steps


class NumpyNoise(nn.Module):
    """Training-time input noise from the module's own numpy generator, created without a seed."""

    def __init__(self) -> None:
        super().__init__()
        self.rng = np.random.default_rng()
        self.lin = nn.Linear(4, 1)

    def forward(self, x):
        if self.training:
            x = x + torch.from_numpy(self.rng.normal(0.0, 0.1, tuple(x.shape))).to(x.dtype)
        return self.lin(x)


def test_a_forward_drawing_from_its_own_unseeded_numpy_generator_is_not_reproducible():
    torch.manual_seed(0)
    x = torch.randn(32, 4)
    y = x.sum(1, keepdim=True)
    m = NumpyNoise()
    state = m.rng.bit_generator.state
    r = doctor(m, (x, y), nn.MSELoss(), torch.optim.SGD(m.parameters(), lr=0.1), steps=20, progress=False)
    f = next((f for f in r.findings if f.kind == "not_reproducible"), None)
    assert f is not None, r.findings
    assert "model.rng" in f.message and "seed" in f.fixes[0].title
    assert m.rng.bit_generator.state == state  # the caller's generator is untouched


def test_a_numpy_generator_created_with_a_seed_is_no_finding():
    torch.manual_seed(0)
    x = torch.randn(32, 4)
    y = x.sum(1, keepdim=True)
    m = NumpyNoise()
    m.rng = np.random.default_rng(7)
    r = doctor(m, (x, y), nn.MSELoss(), torch.optim.SGD(m.parameters(), lr=0.1), steps=20, progress=False)
    assert "not_reproducible" not in r.kinds, r.findings


def frozen_backbone_model(dead_bias: float):
    torch.manual_seed(0)
    m = nn.Sequential()
    m.add_module("backbone", nn.Sequential(nn.Linear(16, 32), nn.ReLU()))
    m.add_module("head", nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1)))
    with torch.no_grad():
        m.backbone[0].bias[:24] = dead_bias  # most of the pretrained-like features never fire on this data
    for p in m.backbone.parameters():
        p.requires_grad_(False)
    return m


def test_dead_units_inside_a_backbone_declared_frozen_are_an_info_not_a_warning():
    m = frozen_backbone_model(-50.0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(32, 16, generator=g)
    y = (x[:, 0] > 0).float().unsqueeze(1)
    r = doctor(m, (x, y), nn.BCEWithLogitsLoss(), torch.optim.Adam(m.head.parameters(), lr=1e-3), steps=60,
               frozen="backbone", **QUICK)
    f = next(f for f in r.findings if f.kind == "dead_activations")
    assert "model.backbone.1" in f.message and f.severity == "info", f


def offset_regression(offset: float):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(64, 3, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]]) + offset
    return nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1)), x, y


def test_a_regression_whose_targets_sit_far_from_zero_is_told_to_start_its_bias_at_their_mean():
    # Adam moves the output bias by about lr a step: 40 steps at 1e-2 do not reach 30, a bias started there does
    m, x, y = offset_regression(30.0)
    r = doctor(m, (x, y), nn.MSELoss(), torch.optim.Adam(m.parameters(), lr=1e-2), steps=40, **QUICK)
    f = next((f for f in r.findings if f.kind == "initial_loss_off"), None)
    assert f is not None and f.severity == "warning", r.findings
    assert "mean" in f.fixes[0].title and "model.2.bias.fill_(30" in f.fixes[0].code, f.fixes[0]
    assert "bias to 0" not in " ".join(x.title for x in f.fixes)
    tried = float(f.message.split("the loss at init is ")[-1].split(" instead")[0])
    assert tried < f.evidence["initial"] / 4, f.message  # the fix, tried on a copy, removes most of the loss


def test_an_offset_that_the_training_pays_off_is_only_an_info():
    # SGD on MSE closes a 30 offset within 20 steps: the fix does not move the result, so it is no warning
    m, x, y = offset_regression(30.0)
    r = doctor(m, (x, y), nn.MSELoss(), torch.optim.SGD(m.parameters(), lr=1e-2), steps=40, **QUICK)
    f = next(f for f in r.findings if f.kind == "initial_loss_off")
    assert f.severity == "info" and "trained as long as your run" in f.message, f
    assert "fits the batch by then too" in f.message and f.evidence["restores"] is False, f.message


def test_a_regression_with_centred_targets_gets_no_initial_loss_finding():
    m, x, y = offset_regression(0.0)
    r = doctor(m, (x, y), nn.MSELoss(), torch.optim.SGD(m.parameters(), lr=1e-2), steps=40, **QUICK)
    assert "initial_loss_off" not in r.kinds, r.findings
    assert "predicting the targets' mean" in dict(r.checks)["loss at init"]


def test_well_under_the_label_frequencies_is_said_only_past_the_learning_threshold():
    from nbdebug.core.doctor._inputs import Options, checked
    from nbdebug.core.doctor._session import Session
    from nbdebug.core.doctor._train_checks import learned_said

    m = nn.Linear(4, 4)
    batch = (torch.randn(8, 4), torch.arange(8) % 4)  # four classes, equally often: the floor is log 4 = 1.386
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    options = Options(steps=10, lr=None, num_classes=None, dataloader=None, seed=0, baseline=False,
                      reproducibility=False, data_batches=1, time_budget=None, progress=False, name="model")
    batch, options, lightning = checked(m, batch, nn.CrossEntropyLoss(), opt, options)
    s = Session(m, batch, nn.CrossEntropyLoss(), opt, options, lightning)
    s.initial_loss = 1.5
    s.losses = [1.5] * 10 + [1.35] * 10  # 1.4 % under the floor: under, not well under
    assert "1.35, under the 1.386" in learned_said(s, s.learned_share()), learned_said(s, s.learned_share())
    s.losses = [1.5] * 10 + [0.3] * 10
    assert "0.3, well under the 1.386" in learned_said(s, s.learned_share())


class Tagger(nn.Module):
    """Tokens (N, L) -> a sequence-first LSTM -> one tag per token.  ``view``: the swap to (L, N) is written
    with view() instead of transpose(), which keeps the memory order and puts tokens of several samples in one
    sequence."""

    def __init__(self, view: bool, vocab=12, h=16) -> None:
        super().__init__()
        self.view = view
        self.embed = nn.Embedding(vocab, h)
        self.rnn = nn.LSTM(h, h)
        self.bn = nn.BatchNorm1d(h)
        self.out = nn.Linear(h, vocab)

    def forward(self, tokens):
        n, length = tokens.shape
        e = self.embed(tokens)
        e = e.view(length, n, -1) if self.view else e.transpose(0, 1)
        h, _ = self.rnn(e)
        h = h.view(n, length, -1) if self.view else h.transpose(0, 1)
        h = self.bn(h.transpose(1, 2)).transpose(1, 2)  # batch statistics: coupled in train mode by design
        return self.out(h).transpose(1, 2)  # (N, vocab, L) for CrossEntropyLoss


def tag_batch(n=16, length=6, vocab=12):
    g = torch.Generator().manual_seed(4)
    t = torch.randint(0, vocab, (n, length), generator=g)
    return t, t.flip(1)


def test_a_forward_that_mixes_samples_through_view_is_named_with_the_view_fix():
    torch.manual_seed(0)
    m = Tagger(view=True)
    r = doctor(m, tag_batch(), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1e-2), steps=30, **QUICK)
    f = next((f for f in r.findings if f.kind == "mixes_batch"), None)
    assert f is not None and f.severity == "error", r.findings
    assert "view" in f.fixes[0].title and "transpose" in f.fixes[0].title


def test_the_same_model_with_transpose_and_batchnorm_in_train_mode_keeps_its_samples_apart():
    torch.manual_seed(0)
    m = Tagger(view=False)
    r = doctor(m, tag_batch(), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1e-2), steps=30, **QUICK)
    assert "mixes_batch" not in r.kinds, r.findings
    assert dict(r.checks)["samples independent of each other (one sample's input changed on a copy)"].startswith(
        "yes"), r.checks
    assert m.training


class DenseGCN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x, adj):
        return adj @ self.lin(x)  # every node's output reads its neighbours: mixing by design


def test_a_graph_whose_adjacency_relates_the_samples_is_skipped_with_why():
    torch.manual_seed(0)
    x = torch.randn(10, 4)
    adj = (torch.rand(10, 10) > 0.6).float() + torch.eye(10)
    m = DenseGCN()
    r = doctor(m, ((x, adj), torch.arange(10) % 3), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1e-2),
               steps=30, **QUICK)
    assert "mixes_batch" not in r.kinds
    assert "10 x 10" in dict(r.checks)["samples independent of each other (one sample's input changed on a copy)"]
