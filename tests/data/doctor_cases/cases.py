"""Planted-bug cases for the doctor, built on models and loops from public training scripts.

Bases (the architecture and loop each case copies; data from scikit-learn's bundled sets, nothing downloaded):
- ``mnist``: pytorch/examples ``mnist/main.py`` (Net: two 3x3 convs, dropout, log_softmax + nll_loss, Adadelta
  lr=1.0 with StepLR), on digits 8x8 (so fc1 takes 64 x 2 x 2);
- ``litmodule``: Lightning's LightningModule template (``self.model``, ``training_step`` with
  ``F.cross_entropy``, ``configure_optimizers`` returning Adam, no ``forward``), on digits;
- ``glue``: transformers' ``run_glue.py`` loop (a BERT sequence classifier from a config, AdamW lr=5e-5 with
  ``get_linear_schedule_with_warmup``), on token sequences whose label is whether token 7 occurs;
- ``resnet``: ResNet-18 written by hand (the torchvision layout, CIFAR stem), SGD lr=0.1, momentum 0.9,
  weight_decay 5e-4 (the reference CIFAR recipe), on digits upsampled to 3 x 32 x 32;
- ``tabular``: an MLP with BCEWithLogitsLoss on breast cancer (standardised), Adam lr=1e-3;
- ``lm``: a small next-token model (embedding + GRU + linear) on token sequences, CrossEntropyLoss.

Each case is ``build(case_id) -> dict`` of ``nbdebug.doctor`` arguments.  ``LABELS`` (in labels.json) says,
before the doctor ever ran on the case, which finding must come first and what its first fix must say.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


# -- data ------------------------------------------------------------------------------------------------------
def digits(n=64, seed=0):
    from sklearn.datasets import load_digits

    d = load_digits()
    g = torch.Generator().manual_seed(seed)
    idx = torch.randperm(len(d.target), generator=g)[:n]
    x = torch.tensor(d.data, dtype=torch.float32)[idx] / 16.0
    y = torch.tensor(d.target)[idx]
    return (x - 0.3) / 0.4, y


def digit_images(n=64, size=8, channels=1, seed=0):
    x, y = digits(n, seed)
    img = x.reshape(n, 1, 8, 8)
    if size != 8:
        img = F.interpolate(img, size=(size, size), mode="bilinear", align_corners=False)
    return img.repeat(1, channels, 1, 1), y


def cancer(n=64, seed=0):
    from sklearn.datasets import load_breast_cancer

    d = load_breast_cancer()
    x = torch.tensor(d.data, dtype=torch.float32)
    x = (x - x.mean(0)) / x.std(0)
    g = torch.Generator().manual_seed(seed)
    idx = torch.randperm(len(d.target), generator=g)[:n]
    return x[idx], torch.tensor(d.target, dtype=torch.float32)[idx]


def tokens(n=16, t=16, vocab=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (n, t), generator=g)
    label = (ids == 7).any(dim=1).long()
    return ids, label


# -- models from the public scripts ----------------------------------------------------------------------------
class MnistNet(nn.Module):  # pytorch/examples mnist/main.py, on 8x8 inputs
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(256, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


class MnistLogits(MnistNet):  # the same net returning logits (for CrossEntropyLoss)
    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        x = torch.flatten(self.dropout1(x), 1)
        return self.fc2(self.dropout2(F.relu(self.fc1(x))))


def lit_module(model, lr=1e-3):
    import lightning.pytorch as pl

    class LitModule(pl.LightningModule):  # Lightning's template: no forward of its own
        def __init__(self, model):
            super().__init__()
            self.model = model

        def training_step(self, batch, batch_idx):
            x, y = batch
            y_hat = self.model(x)
            return F.cross_entropy(y_hat, y)

        def configure_optimizers(self):
            return torch.optim.Adam(self.model.parameters(), lr=lr)

    return LitModule(model)


def digits_mlp(out=10, d=64):
    return nn.Sequential(nn.Linear(d, 64), nn.ReLU(), nn.Linear(64, out))


def bert(num_labels=2):
    from transformers import BertConfig, BertForSequenceClassification

    cfg = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=32, num_labels=num_labels)
    return BertForSequenceClassification(cfg)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.linear = nn.Linear(512, num_classes)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.linear(out)


class TinyLM(nn.Module):
    def __init__(self, vocab=50, d=32):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.rnn = nn.GRU(d, d, batch_first=True)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        h, _ = self.rnn(self.emb(ids))
        return self.head(h)  # (B, T, V)


def _seed(s=0):
    torch.manual_seed(s)


# -- the cases -------------------------------------------------------------------------------------------------
def build(case_id):  # noqa: C901 - one branch per case, read top to bottom
    _seed(0)
    ce = nn.CrossEntropyLoss()
    if case_id.startswith("mnist"):
        x, y = digit_images(64)
        m = MnistNet()
        opt = torch.optim.Adadelta(m.parameters(), lr=1.0)
        torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
        case = dict(model=m, batch=(x, y), loss_fn=F.nll_loss, optimizer=opt)
        if case_id == "mnist-healthy":
            return case
        if case_id == "mnist-lr-1e-8":
            return {**case, "optimizer": torch.optim.Adam(m.parameters(), lr=1e-8)}
        if case_id == "mnist-eval-left":
            m.eval()
            return case
        if case_id == "mnist-nll-on-logits":
            ml = MnistLogits()
            return dict(model=ml, batch=(x, y), loss_fn=F.nll_loss,
                        optimizer=torch.optim.Adadelta(ml.parameters(), lr=1.0))
        if case_id == "mnist-pixels-0-255":
            raw = (x * 0.4 + 0.3) * 255.0
            return {**case, "batch": (raw, y)}
        if case_id == "mnist-head-only-optimizer":
            return {**case, "optimizer": torch.optim.Adadelta(m.fc2.parameters(), lr=1.0)}
    if case_id.startswith("lit"):
        x, y = digits(64)
        if case_id == "lit-healthy":
            return dict(model=lit_module(digits_mlp()), batch=(x, y))
        if case_id == "lit-lr-10":
            return dict(model=lit_module(digits_mlp(), lr=10.0), batch=(x, y))
        if case_id == "lit-labels-out-of-range":
            return dict(model=lit_module(digits_mlp(out=8)), batch=(x, y))
        if case_id == "lit-softmax-before-ce":
            return dict(model=lit_module(nn.Sequential(digits_mlp(), nn.Softmax(dim=1))), batch=(x, y))
    if case_id.startswith("glue"):
        from transformers import get_linear_schedule_with_warmup

        ids, label = tokens(16)
        m = bert()
        opt = torch.optim.AdamW(m.parameters(), lr=5e-4, weight_decay=0.01)
        get_linear_schedule_with_warmup(opt, num_warmup_steps=100, num_training_steps=1000)
        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": label}
        case = dict(model=m, batch=batch, loss_fn=None, optimizer=opt)
        if case_id == "glue-healthy-warmup":
            return case
        if case_id == "glue-weight-decay-1":
            return {**case, "optimizer": torch.optim.Adam(m.parameters(), lr=5e-4, weight_decay=1.0)}
        if case_id == "glue-frozen-encoder-intended":
            for p in m.bert.parameters():
                p.requires_grad_(False)
            opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=5e-3)
            return {**case, "optimizer": opt, "frozen": "bert"}
        if case_id == "glue-frozen-encoder-unintended":
            for p in m.bert.parameters():
                p.requires_grad_(False)
            opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=5e-4)
            return {**case, "optimizer": opt}
    if case_id.startswith("resnet"):
        x, y = digit_images(32, size=32, channels=3)
        m = ResNet18()
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
        case = dict(model=m, batch=(x, y), loss_fn=ce, optimizer=opt)
        if case_id == "resnet-healthy":
            return case
        if case_id == "resnet-lr-1e-8":
            return {**case, "optimizer": torch.optim.SGD(m.parameters(), lr=1e-8, momentum=0.9)}
        if case_id == "resnet-batch-of-one":
            return {**case, "batch": (x[:1], y[:1])}
    if case_id.startswith("tabular"):
        x, y = cancer(64)
        m = nn.Sequential(nn.Linear(30, 32), nn.ReLU(), nn.Linear(32, 1))
        opt = torch.optim.Adam(m.parameters(), lr=1e-3)
        case = dict(model=m, batch=(x, y.unsqueeze(1)), loss_fn=nn.BCEWithLogitsLoss(), optimizer=opt)
        if case_id == "tabular-healthy-sgd":
            return {**case, "optimizer": torch.optim.SGD(m.parameters(), lr=0.1)}
        if case_id == "tabular-mse-broadcast":
            return {**case, "batch": (x, y), "loss_fn": nn.MSELoss()}
        if case_id == "tabular-label-leak":
            leaky = nn.Sequential(nn.Linear(31, 32), nn.ReLU(), nn.Linear(32, 1))
            return {**case, "batch": (torch.cat([x, y.unsqueeze(1)], dim=1), y.unsqueeze(1)), "model": leaky,
                    "optimizer": torch.optim.Adam(leaky.parameters(), lr=1e-3)}
        if case_id == "tabular-other-models-optimizer":
            other = nn.Sequential(nn.Linear(30, 32), nn.ReLU(), nn.Linear(32, 1))
            return {**case, "optimizer": torch.optim.Adam(other.parameters(), lr=1e-3)}
        if case_id == "tabular-log-of-zero-in-loss":
            def loss(out, t):
                p = torch.sigmoid(out) * 0  # a probability clipped to 0 by mistake
                return -(t * torch.log(p) + (1 - t) * torch.log(1 - p)).mean()
            return {**case, "loss_fn": loss}
    if case_id.startswith("lm"):
        ids, _ = tokens(16, 17)
        m = TinyLM()
        opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
        case = dict(model=m, batch=(ids[:, :-1], ids[:, 1:]), loss_fn=lambda o, t: ce(o.transpose(1, 2), t),
                    optimizer=opt)
        if case_id == "lm-healthy":
            return case
        if case_id == "lm-labels-not-shifted":
            return {**case, "batch": (ids[:, :-1], ids[:, :-1])}
        if case_id == "lm-detached-embedding":
            class Detached(TinyLM):
                def forward(self, ids):
                    h, _ = self.rnn(self.emb(ids).detach())
                    return self.head(h)
            _seed(0)
            dm = Detached()
            return {**case, "model": dm, "optimizer": torch.optim.AdamW(dm.parameters(), lr=3e-3)}
    raise KeyError(case_id)
