"""The doctor on bugs of the fourth round, each on models that are not the held-out sets' own (a CNN and an MLP on
scikit-learn's digits and breast-cancer sets, a sequence-first GRU tagger) and on a healthy twin of each: a
softmax over the batch, a reshape taken for a transpose, weights initialised far too small, a hand-written BCE
that reaches log(0), zeros that are a bare parameter's standard init, inputs that are not pixels."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nbdebug import doctor
from nbdebug.core._findings import sort_findings

sklearn = pytest.importorskip("sklearn.datasets")
QUICK = dict(reproducibility=False, progress=False)


def loud(r):
    return [f for f in sort_findings(r.findings) if f.severity != "info"]


def text(r):
    return " ".join(f.message + " " + " ".join(x.title + " " + x.code for x in f.fixes) for f in r.findings).lower()


def digits(n=64):
    d = sklearn.load_digits()
    x = torch.tensor(d.data[:n], dtype=torch.float32)
    return (x - x.mean(0)) / (x.std(0) + 1e-6), torch.tensor(d.target[:n])


def cancer(n=128):
    d = sklearn.load_breast_cancer()
    x = torch.tensor(d.data[:n], dtype=torch.float32)
    return (x - x.mean(0)) / x.std(0), torch.tensor(d.target[:n], dtype=torch.float32)


class CNN(nn.Module):
    def __init__(self, std=None, log_softmax_dim=None):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(1, 16, 3, padding=1), nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 4, 10)
        self.dim = log_softmax_dim
        if std is not None:
            for m in self.modules():
                if isinstance(m, (nn.Conv2d, nn.Linear)):
                    nn.init.normal_(m.weight, std=std)
                    nn.init.zeros_(m.bias)

    def forward(self, x):  # (B, 1, 8, 8)
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = self.fc(F.max_pool2d(F.relu(self.c2(x)), 2).flatten(1))  # (B, 10)
        return x if self.dim is None else F.log_softmax(x, dim=self.dim)


class Tagger(nn.Module):
    """A GRU run sequence-first, back to batch-first for the tag head."""

    def __init__(self, reshape_bug=False):
        super().__init__()
        self.emb, self.gru, self.out = nn.Embedding(20, 16), nn.GRU(16, 24), nn.Linear(24, 3)
        self.bug = reshape_bug

    def forward(self, tokens):  # (B, T)
        b, t = tokens.shape
        h, _ = self.gru(self.emb(tokens).transpose(0, 1))  # (T, B, 24)
        h = h.reshape(b, t, -1) if self.bug else h.permute(1, 0, 2)
        return self.out(h).transpose(1, 2)  # (B, tags, T)


def tags(n=32, length=12):
    g = torch.Generator().manual_seed(1)
    tok = torch.randint(0, 20, (n, length), generator=g)
    return tok, (tok + tok.roll(1, 1)) % 3


def test_a_log_softmax_over_the_batch_is_named_with_the_class_dimension_and_its_fix_learns():
    x, y = digits()
    torch.manual_seed(0)
    r = doctor(CNN(log_softmax_dim=0), (x.view(-1, 1, 8, 8), y), nn.NLLLoss(), **QUICK)
    top = loud(r)[0]
    assert top.kind == "mixes_batch" and "softmax" in top.fix and "dim=-1" in top.fixes[0].code, r
    assert "view" not in text(r), r  # not the view/transpose advice: the probe found the softmax
    assert top.evidence["restores"] is True and "log_softmax over dim 1" in top.message, top
    torch.manual_seed(0)
    assert not loud(doctor(CNN(log_softmax_dim=1), (x.view(-1, 1, 8, 8), y), nn.NLLLoss(), **QUICK))


def test_a_reshape_taken_for_a_transpose_is_named_with_its_line_and_permute():
    tok, tag = tags()
    torch.manual_seed(0)
    r = doctor(Tagger(reshape_bug=True), (tok, tag), nn.CrossEntropyLoss(), **QUICK)
    top = loud(r)[0]
    assert top.kind == "mixes_batch" and "transpose" in top.fix, r
    assert "h.reshape(b, t, -1)" in top.evidence["site"] and "transpose(0, 1)" in top.fixes[0].code, top
    assert "softmax" not in text(r), r
    torch.manual_seed(0)
    assert not loud(doctor(Tagger(), (tok, tag), nn.CrossEntropyLoss(), **QUICK))


def test_weights_initialised_far_too_small_are_named_and_re_initialising_them_learns():
    x, y = digits()
    torch.manual_seed(0)
    m = CNN(std=1e-4)
    r = doctor(m, (x.view(-1, 1, 8, 8), y), nn.CrossEntropyLoss(), torch.optim.SGD(m.parameters(), lr=0.05,
                                                                                     momentum=0.9), **QUICK)
    top = loud(r)[0]
    assert top.kind == "vanishing_gradients" and "initialise" in top.fix, r
    assert top.evidence["restores"] is True, top
    assert "frozen layer" not in text(r) and "detach" not in text(r), r
    torch.manual_seed(0)
    m = CNN()
    assert not loud(doctor(m, (x.view(-1, 1, 8, 8), y), nn.CrossEntropyLoss(),
                           torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9), **QUICK))


def hand_written_bce(z, t):
    p = torch.sigmoid(z.squeeze(-1))
    return -(t * torch.log(p) + (1 - t) * torch.log(1 - p)).mean()


def mlp():
    return nn.Sequential(nn.Linear(30, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))


def test_a_hand_written_bce_that_reaches_log_zero_is_found_in_the_loss_code_with_its_line():
    x, y = cancer()
    torch.manual_seed(0)
    m = mlp()
    r = doctor(m, (x, y), hand_written_bce, torch.optim.Adam(m.parameters(), lr=1e-2), **QUICK)
    top = loud(r)[0]
    assert top.kind == "nonfinite_forward" and top.evidence["op"] == "torch.log", r
    assert "torch.log(1 - p)" in top.evidence["line"] and "logits" in top.fix, top
    assert "lower the learning rate" not in (top.fix or ""), top
    torch.manual_seed(0)
    m = mlp()
    healthy = doctor(m, (x, y.unsqueeze(1)), nn.BCEWithLogitsLoss(), torch.optim.Adam(m.parameters(), lr=1e-2),
                     **QUICK)
    assert not loud(healthy), healthy
    assert "finite for" in dict(healthy.checks)[next(k for k, _ in healthy.checks if k.startswith("training on"))]


def test_an_mse_that_overflows_on_diverged_outputs_is_put_on_the_learning_rate_not_the_loss_code():
    # review: outputs ~1e19 (SGD lr=0.5) are finite and their square overflows in MSELoss; the loss code was named
    # first with the user's doctor(...) line as its site, and the lr experiment that fitted the batch was demoted
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=g)
    y = (x @ torch.randn(8, 1, generator=g)) * 10

    def run(lr):
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
        return doctor(m, (x, y), nn.MSELoss(), torch.optim.SGD(m.parameters(), lr=lr), steps=100, **QUICK)

    r = run(0.5)
    assert not any(f.kind == "nonfinite_forward" for f in r.findings), r.findings
    top = loud(r)[0]
    assert top.kind in ("exploding_gradients", "lr_too_high") and "lower the learning rate" in top.fix, r.findings
    assert "loss code" not in text(r) and "guard log" not in text(r), r
    assert not any(f.kind == "nonfinite_forward" for f in run(0.01).findings)


class TinyViT(nn.Module):
    """Patches, a class token and a position embedding that start at zero (the usual init), a transformer layer."""

    def __init__(self):
        super().__init__()
        self.patch = nn.Linear(16, 32)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, 32))
        self.pos_embed = nn.Parameter(torch.zeros(1, 5, 32))
        self.block = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.head = nn.Linear(32, 10)

    def forward(self, x):  # (B, 64)
        p = self.patch(x.view(-1, 4, 16))  # (B, 4, 32)
        z = torch.cat([self.cls_token.expand(len(x), -1, -1), p], 1) + self.pos_embed
        return self.head(self.block(z)[:, 0])


def test_a_class_token_and_position_embedding_at_zero_are_no_finding():
    x, y = digits()
    torch.manual_seed(0)
    r = doctor(TinyViT(), (x, y), nn.CrossEntropyLoss(), **QUICK)
    assert not any(f.kind == "zero_init" for f in r.findings), r
    assert "by design" in dict(r.checks)["weights initialised to a constant"], r.checks


def test_tabular_inputs_far_from_unit_scale_are_not_told_to_divide_by_255():
    d = sklearn.load_breast_cancer()
    x, y = torch.tensor(d.data[:128], dtype=torch.float32), torch.tensor(d.target[:128])
    torch.manual_seed(0)
    r = doctor(nn.Sequential(nn.Linear(30, 32), nn.ReLU(), nn.Linear(32, 2)), (x, y), nn.CrossEntropyLoss(),
               **QUICK)
    found = [f for f in r.findings if f.kind in ("unnormalised_inputs", "initial_loss_off")]
    assert found and all("255" not in x.title + x.code for f in found for x in f.fixes), r


class LoRA(nn.Module):
    """A frozen base layer with a low-rank update: A random and small, B at zero (the usual LoRA init)."""

    def __init__(self, base, r=4):
        super().__init__()
        self.base = base.requires_grad_(False)
        self.A = nn.Parameter(torch.randn(r, base.in_features) * 0.01)
        self.B = nn.Parameter(torch.zeros(base.out_features, r))

    def forward(self, x):
        return self.base(x) + x @ self.A.t() @ self.B.t()


def test_a_lora_fine_tune_with_b_at_zero_is_healthy_and_names_what_trains():
    x, y = digits()
    torch.manual_seed(0)
    m = nn.Sequential(LoRA(nn.Linear(64, 128)), nn.ReLU(), LoRA(nn.Linear(128, 10)))
    opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-2)
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), opt, frozen=True, **QUICK)
    assert not loud(r), r  # A's gradient is zero at init only, behind B = 0
    assert "only 0.A, 0.B, 2.A, 2.B will train" in next(f.message for f in r.findings if f.kind == "frozen_parameters")


def test_tiny_regression_inputs_are_not_said_to_be_ignored():
    d = sklearn.load_diabetes()  # features of scale 0.05, targets 25..346
    x, y = torch.tensor(d.data[:128], dtype=torch.float32), torch.tensor(d.target[:128], dtype=torch.float32)
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 1))
    r = doctor(m, (x, y.unsqueeze(1)), nn.MSELoss(), torch.optim.Adam(m.parameters(), lr=1e-2), **QUICK)
    assert not any(f.kind == "ignores_input" for f in r.findings), r


class Ratings(nn.Module):
    """A hand-written recommender: user and item ids either looked up in embeddings or cast to float (the bug)."""

    def __init__(self, as_numbers=False, users=50, items=40, dim=16):
        super().__init__()
        self.as_numbers = as_numbers
        if as_numbers:
            self.user, self.item = nn.Linear(1, dim), nn.Linear(1, dim)
        else:
            self.user, self.item = nn.Embedding(users, dim), nn.Embedding(items, dim)
        self.mlp = nn.Sequential(nn.Linear(2 * dim, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, user, item):
        if self.as_numbers:
            u, i = self.user(user.float()[:, None]), self.item(item.to(torch.float32)[:, None])
        else:
            u, i = self.user(user), self.item(item)
        return self.mlp(torch.cat([u, i], 1)).squeeze(1)


def test_ids_cast_to_float_are_named_with_their_line_and_an_embedding_as_the_fix():
    g = torch.Generator().manual_seed(0)
    user, item = torch.randint(0, 50, (256,), generator=g), torch.randint(0, 40, (256,), generator=g)
    y = ((user % 3 == 0) ^ (item % 4 == 0)).float()
    torch.manual_seed(0)
    r = doctor(Ratings(as_numbers=True), ((user, item), y), nn.BCEWithLogitsLoss(), **QUICK)
    f = next(f for f in r.findings if f.kind == "ids_as_numbers")
    assert f.severity == "warning" and "Embedding" in f.fix and "user.float()" in f.evidence["site"], f
    torch.manual_seed(0)
    healthy = doctor(Ratings(), ((user, item), y), nn.BCEWithLogitsLoss(), **QUICK)
    assert not any(f.kind == "ids_as_numbers" for f in healthy.findings), healthy
    assert "looked up" in dict(healthy.checks)["integer ids cast to numbers in the forward"]


class Pixels(nn.Module):
    """Integer pixel values 0..16 (sklearn's digits as stored) cast to float and scaled in the forward: a quantity."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x):
        return self.net(x.float() / 16)


def test_integer_pixel_values_cast_to_float_are_not_ids():
    # review: any integer input with 8+ distinct values cast to float was called ids (pixel ints, counts); an id
    # field holds one value per sample (or a few), a feature vector of 64 integer columns is a quantity
    d = sklearn.load_digits()
    x, y = torch.tensor(d.data[:128], dtype=torch.int64), torch.tensor(d.target[:128])
    torch.manual_seed(0)
    r = doctor(Pixels(), (x, y), nn.CrossEntropyLoss(), **QUICK)
    assert not any(f.kind == "ids_as_numbers" for f in r.findings), r.findings
    assert dict(r.checks)["integer ids cast to numbers in the forward"].startswith("no integer id field"), r.checks


def test_weights_initialised_far_too_large_are_named_for_the_loss_at_init_and_measured_reset():
    x, y = digits()
    torch.manual_seed(0)
    r = doctor(CNN(std=1.0), (x.view(-1, 1, 8, 8), y), nn.CrossEntropyLoss(), **QUICK)
    f = next(f for f in r.findings if f.kind == "initial_loss_off")
    assert f.severity == "warning" and "initialise the layers" in f.fix, f
    assert abs(f.evidence["reinitialised"] - 2.303) < 0.5 < f.evidence["initial"] - 2.303, f


def test_a_regression_fitted_mostly_by_its_targets_mean_is_no_leak_while_a_target_column_is():
    d = sklearn.load_diabetes()
    x, y = torch.tensor(d.data[:128], dtype=torch.float32), torch.tensor(d.target[:128], dtype=torch.float32)
    x = (x - x.mean(0)) / x.std(0)
    y = 3.0 + 0.3 * (y - y.mean()) / y.std()  # targets around 3 with a small spread: the mean is most of the fit
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 1))
    r = doctor(m, (x, y.unsqueeze(1)), nn.MSELoss(), torch.optim.Adam(m.parameters(), lr=3e-3), **QUICK)
    assert not any(f.kind == "fits_too_easily" for f in r.findings), r
    y = (y - y.mean()) / y.std()  # targets around 0: fitting them is not learning a mean
    leak = torch.cat([x, y.unsqueeze(1)], 1)  # the target left in the features
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(11, 32), nn.ReLU(), nn.Linear(32, 1))
    r = doctor(m, (leak, y.unsqueeze(1)), nn.MSELoss(), torch.optim.Adam(m.parameters(), lr=3e-3), **QUICK)
    said = dict(r.checks).get("loss with targets shuffled against inputs", "")
    assert said and "no verdict" not in said and "skipped" not in said, r.checks  # a real fit gets its verdict


class Spectra(torch.utils.data.Dataset):
    """Per-sample work in __getitem__ (a long FFT per sample, as audio features are made), for a tiny model."""

    def __init__(self, n=512, length=1 << 15):
        self.n, self.length = n, length

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        spec = torch.fft.rfft(torch.randn(self.length, generator=g)).abs()[:64].log1p()
        return spec, i % 3


def test_a_dataloader_whose_getitem_makes_the_wait_names_it():
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 3))
    loader = DataLoader(Spectra(), batch_size=64)
    r = doctor(m, None, nn.CrossEntropyLoss(), dataloader=loader, data_batches=4, baseline=False, **QUICK)
    f = next((f for f in r.findings if f.kind == "dataloader_bottleneck"), None)
    assert f is not None and "__getitem__ alone takes" in f.message, r.checks
    x, y = torch.randn(512, 64), torch.randint(0, 3, (512,))
    loader = DataLoader(TensorDataset(x, y), batch_size=64)
    r = doctor(nn.Sequential(nn.Linear(64, 3)), None, nn.CrossEntropyLoss(), dataloader=loader, data_batches=4,
               baseline=False, **QUICK)
    assert not any(f.kind == "dataloader_bottleneck" for f in r.findings), r


def test_a_model_that_does_not_generalise_from_one_batch_gets_no_labels_verdict_behind_a_dataloader():
    transformers = pytest.importorskip("transformers")
    from torch.utils.data import DataLoader

    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, num_labels=2)
    m = transformers.BertForSequenceClassification(cfg)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 100, (256, 16), generator=g)
    y = (ids[:, :8].float().mean(1) > ids[:, 8:].float().mean(1)).long()  # labels that follow from the tokens
    rows = [{"input_ids": ids[i], "attention_mask": torch.ones(16, dtype=torch.long), "labels": y[i]}
            for i in range(256)]
    loader = DataLoader(rows, batch_size=16, shuffle=True)
    r = doctor(m, None, None, torch.optim.AdamW(m.parameters(), lr=1e-3), dataloader=loader, **QUICK)
    assert not any(f.kind == "labels_unrelated" for f in r.findings), r
    assert "no verdict" in dict(r.checks)["labels against inputs (a second batch after fitting the first)"]
