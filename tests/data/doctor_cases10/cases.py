"""A tenth, independent held-out set of planted bugs for the doctor (see README.md).

The bugs are the items, in order, of one public checklist not used by the earlier sets: Full Stack Deep Learning's
"Lecture 7: Troubleshooting Deep Neural Networks" (Josh Tobin, spring 2021 notes; the rule is in README.md).
Bases (data bundled with scikit-learn or synthetic, nothing downloaded), none of them used as a base in the nine
earlier sets:
- ``albert``: ``AlbertForSequenceClassification`` from a tiny transformers config (no download), on synthetic
  token sequences labelled by whether a marker token occurs; AdamW (+ ``get_linear_schedule_with_warmup``, no decay
  on biases and LayerNorm) as transformers' ``run_glue_no_trainer.py``;
- ``densenet``: a small DenseNet written by hand after torchvision's ``densenet.py`` (``_DenseLayer``: BN, ReLU,
  1x1 conv, BN, ReLU, 3x3 conv, concatenated; ``_Transition``: BN, ReLU, 1x1 conv, avg-pool; ``norm5``; its
  init), trained as pytorch/examples ``imagenet/main.py`` does (CrossEntropyLoss, SGD lr 0.1 momentum 0.9
  weight_decay 1e-4), on digits;
- ``snn``: a self-normalising MLP written by hand after bioinf-jku/SNNs (SELU layers with LeCun-normal init,
  ``normal_(0, sqrt(1 / fan_in))``, biases 0), 8 hidden layers of 64, SGD, on digits (flat) or on scikit-learn's
  diabetes regression;
- ``kerasmlp``: Keras' ``mnist_mlp.py`` example in torch (Dense 512 ReLU, Dropout 0.2, Dense 512 ReLU,
  Dropout 0.2, Dense with softmax as CrossEntropyLoss, RMSprop lr 1e-3; SGD lr 0.01 momentum 0.9 for the
  inputs case, see README.md), on scikit-learn's breast cancer set.

``build(case_id) -> dict`` of ``nbdebug.doctor`` arguments.  What each case should get first is in labels.json,
written before the doctor ran on any case.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# -- data ------------------------------------------------------------------------------------------------------
def _perm(n_all, n, seed):
    return torch.randperm(n_all, generator=torch.Generator().manual_seed(seed))[:n]


def digits(n=64, seed=101, flat=False):
    """scikit-learn digits standardised with the whole set's pixel mean and std, ``n`` rows of one fixed shuffle,
    as (n, 1, 8, 8) images (or (n, 64) rows) and their digits."""
    from sklearn.datasets import load_digits

    d = load_digits()
    idx = _perm(len(d.target), n, seed)
    x = torch.tensor(d.data, dtype=torch.float32)
    x = ((x - x.mean()) / x.std())[idx]
    return (x if flat else x.reshape(n, 1, 8, 8)), torch.tensor(d.target)[idx]


def diabetes(n=64, seed=102):
    """scikit-learn's diabetes regression (its features come centred and scaled), the target standardised, shape
    (n,) as a dataset's column comes."""
    from sklearn.datasets import load_diabetes

    d = load_diabetes()
    idx = _perm(len(d.target), n, seed)
    y = torch.tensor(d.target, dtype=torch.float32)
    return torch.tensor(d.data, dtype=torch.float32)[idx], ((y - y.mean()) / y.std())[idx]


def breast_cancer(n=64, seed=103, standardise=True):
    """scikit-learn's breast cancer set (30 features, raw scales from 0.001 to 4254), standardised per feature
    with the whole set's mean and std, or raw as the file holds it."""
    from sklearn.datasets import load_breast_cancer

    d = load_breast_cancer()
    idx = _perm(len(d.target), n, seed)
    x = torch.tensor(d.data, dtype=torch.float32)
    if standardise:
        x = (x - x.mean(0)) / x.std(0)
    return x[idx], torch.tensor(d.target)[idx]


def marker_sequences(n=32, length=16, vocab=32, marker=5, seed=104):
    """Token sequences (tokens 6..vocab-1) of which half carry ``marker`` at a random position: label 1 when the
    marker occurs, else 0."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(6, vocab, (n, length), generator=g)
    labels = torch.zeros(n, dtype=torch.long)
    labels[: n // 2] = 1
    pos = torch.randint(0, length, (n // 2,), generator=g)
    ids[torch.arange(n // 2), pos] = marker
    perm = torch.randperm(n, generator=g)
    return ids[perm], labels[perm]


def text_batch():
    ids, y = marker_sequences()
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": y}


# -- models ----------------------------------------------------------------------------------------------------
def albert(num_labels=2):
    from transformers import AlbertConfig, AlbertForSequenceClassification

    torch.manual_seed(0)
    cfg = AlbertConfig(vocab_size=32, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=64, max_position_embeddings=32,
                       num_labels=num_labels)
    return AlbertForSequenceClassification(cfg)


class AlbertSoftmaxProbs(nn.Module):
    """The classifier's logits turned into probabilities with ``softmax`` in ``forward`` (to "read them as
    probabilities"), then given to ``nn.CrossEntropyLoss``, which applies its own log-softmax: the loss cannot go
    below -log(e / (e + 1)) = 0.313 for two classes, and its gradient fades as the probabilities saturate."""

    def __init__(self):
        super().__init__()
        self.albert = albert(num_labels=2)

    def forward(self, input_ids):
        return torch.softmax(self.albert(input_ids=input_ids).logits, dim=-1)


class AlbertLogits(AlbertSoftmaxProbs):
    """The fix: the logits into ``nn.CrossEntropyLoss``."""

    def forward(self, input_ids):
        return self.albert(input_ids=input_ids).logits


def albert_adamw_warmup(m, lr=1e-3):
    from transformers import get_linear_schedule_with_warmup

    decay = [p for n, p in m.named_parameters() if p.requires_grad and not ("bias" in n or "LayerNorm" in n)]
    no_decay = [p for n, p in m.named_parameters() if p.requires_grad and ("bias" in n or "LayerNorm" in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}], lr=lr)
    get_linear_schedule_with_warmup(opt, num_warmup_steps=20, num_training_steps=200)
    return opt


class _DenseLayer(nn.Module):
    """torchvision's ``_DenseLayer`` (memory-efficient path and dropout left out)."""

    def __init__(self, num_input_features, growth_rate, bn_size):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(num_input_features)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(num_input_features, bn_size * growth_rate, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth_rate)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth_rate, growth_rate, 3, padding=1, bias=False)

    def forward(self, x):
        return torch.cat([x, self.conv2(self.relu2(self.norm2(self.conv1(self.relu1(self.norm1(x))))))], 1)


class DenseNetSmall(nn.Module):
    """torchvision's DenseNet layout at the scale of 8x8 digits: a 3x3 stem (the CIFAR variant's), two dense
    blocks of 3 layers (growth 12, bn_size 4) with a transition between, ``norm5``, ReLU, global average pooling,
    a linear classifier; torchvision's init (Kaiming-normal convs, BatchNorm 1/0, linear bias 0)."""

    def __init__(self, growth_rate=12, block_config=(3, 3), num_init_features=24, bn_size=4, num_classes=10):
        super().__init__()
        layers = [nn.Conv2d(1, num_init_features, 3, padding=1, bias=False)]
        ch = num_init_features
        for i, n in enumerate(block_config):
            for _ in range(n):
                layers.append(_DenseLayer(ch, growth_rate, bn_size))
                ch += growth_rate
            if i != len(block_config) - 1:
                layers += [nn.BatchNorm2d(ch), nn.ReLU(inplace=True), nn.Conv2d(ch, ch // 2, 1, bias=False),
                           nn.AvgPool2d(2, 2)]
                ch //= 2
        layers.append(nn.BatchNorm2d(ch))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(ch, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.Linear):
                nn.init.constant_(m.bias, 0)

    def forward(self, x):
        out = F.adaptive_avg_pool2d(F.relu(self.features(x)), (1, 1))
        return self.classifier(torch.flatten(out, 1))


def imagenet_sgd(m, lr=0.1):
    """pytorch/examples ``imagenet/main.py``'s optimizer."""
    return torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9, weight_decay=1e-4)


class SNN(nn.Module):
    """A self-normalising MLP as bioinf-jku/SNNs writes it: ``depth`` hidden layers of ``width`` with SELU,
    weights drawn ``normal_(0, sqrt(1 / fan_in))`` (LeCun normal), biases 0 (its AlphaDropout left out).
    ``activation`` and ``init_std`` let a case change the activation or the init's scale."""

    def __init__(self, n_in=64, n_out=10, width=64, depth=8, activation=nn.SELU, init_std=None):
        super().__init__()
        dims = [n_in] + [width] * depth
        blocks = []
        for a, b in zip(dims[:-1], dims[1:]):
            blocks += [nn.Linear(a, b), activation()]
        self.body = nn.Sequential(*blocks)
        self.out = nn.Linear(width, n_out)
        for mod in self.modules():
            if isinstance(mod, nn.Linear):
                std = init_std if init_std is not None else math.sqrt(1.0 / mod.in_features)
                nn.init.normal_(mod.weight, 0.0, std)
                nn.init.zeros_(mod.bias)

    def forward(self, x):
        return self.out(self.body(x))


class KerasMLP(nn.Module):
    """Keras' ``mnist_mlp.py`` model in torch: Dense(512, relu), Dropout(0.2), Dense(512, relu), Dropout(0.2),
    Dense(classes) (its softmax is CrossEntropyLoss's)."""

    def __init__(self, n_in=30, n_out=2):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n_in, 512), nn.ReLU(), nn.Dropout(0.2), nn.Linear(512, 512), nn.ReLU(),
                                 nn.Dropout(0.2), nn.Linear(512, n_out))

    def forward(self, x):
        return self.net(x)


# -- cases -----------------------------------------------------------------------------------------------------
def build(case_id):
    torch.manual_seed(0)
    if case_id == "densenet-sgd-lr-far-too-high":  # F2: hyper-parameter choices, the learning rate
        m = DenseNetSmall()
        return dict(model=m, batch=digits(), loss_fn=nn.CrossEntropyLoss(), optimizer=imagenet_sgd(m, lr=10.0))
    if case_id == "snn-sigmoid-activations":  # F12: ReLU (here SELU) activations, not saturating ones
        m = SNN(activation=nn.Sigmoid)
        return dict(model=m, batch=digits(flat=True), loss_fn=nn.CrossEntropyLoss(),
                    optimizer=torch.optim.SGD(m.parameters(), lr=0.05))
    if case_id == "snn-init-std-0.01":  # F13: an init matched to the activation
        m = SNN(init_std=0.01)
        return dict(model=m, batch=digits(flat=True), loss_fn=nn.CrossEntropyLoss(),
                    optimizer=torch.optim.SGD(m.parameters(), lr=0.05))
    if case_id == "kerasmlp-weight-decay-far-too-strong":  # F14: no regularization to start
        m = KerasMLP()
        return dict(model=m, batch=breast_cancer(), loss_fn=nn.CrossEntropyLoss(),
                    optimizer=torch.optim.RMSprop(m.parameters(), lr=1e-3, weight_decay=1.0))
    if case_id == "kerasmlp-inputs-not-normalised":  # F15: normalize inputs
        m = KerasMLP()
        return dict(model=m, batch=breast_cancer(standardise=False), loss_fn=nn.CrossEntropyLoss(),
                    optimizer=torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9))
    if case_id == "snn-mse-output-n1-target-n":  # F17: incorrect shapes, silent broadcasting
        m = SNN(n_in=10, n_out=1)
        return dict(model=m, batch=diabetes(), loss_fn=nn.MSELoss(),
                    optimizer=torch.optim.SGD(m.parameters(), lr=0.01))
    if case_id == "albert-softmax-into-cross-entropy":  # F19: softmax outputs to a loss that expects logits
        m = AlbertSoftmaxProbs()
        ids, y = marker_sequences()
        return dict(model=m, batch=(ids, y), loss_fn=nn.CrossEntropyLoss(),
                    optimizer=torch.optim.AdamW(m.parameters(), lr=1e-3))

    if case_id == "densenet-healthy-sgd-momentum":
        m = DenseNetSmall()
        return dict(model=m, batch=digits(), loss_fn=nn.CrossEntropyLoss(), optimizer=imagenet_sgd(m))
    if case_id == "albert-healthy-adamw-warmup":
        m = albert(num_labels=2)
        return dict(model=m, batch=text_batch(), optimizer=albert_adamw_warmup(m))
    if case_id == "albert-healthy-embeddings-frozen-intended":
        m = albert(num_labels=2)
        m.albert.embeddings.requires_grad_(False)
        opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-3)
        return dict(model=m, batch=text_batch(), optimizer=opt, frozen=["albert.embeddings"])
    raise KeyError(case_id)


CASES = (
    "densenet-sgd-lr-far-too-high", "snn-sigmoid-activations", "snn-init-std-0.01",
    "kerasmlp-weight-decay-far-too-strong", "kerasmlp-inputs-not-normalised", "snn-mse-output-n1-target-n",
    "albert-softmax-into-cross-entropy",
    "densenet-healthy-sgd-momentum", "albert-healthy-adamw-warmup", "albert-healthy-embeddings-frozen-intended",
)
