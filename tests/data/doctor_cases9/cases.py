"""A ninth, independent held-out set of planted bugs for the doctor (see README.md).

The bugs are the causes found in public threads returned, in order, by symptom queries ("training accuracy stuck
at", "my network outputs the same value", "pytorch weights not updating", ...; the rule is in README.md).  Bases
(data bundled with scikit-learn or synthetic, nothing downloaded), none of them used as a base in the eight
earlier sets:
- ``electra``: ``ElectraForSequenceClassification`` from a tiny transformers config (no download), on synthetic
  token sequences labelled by whether a marker token occurs; AdamW (+ ``get_linear_schedule_with_warmup``, no decay
  on biases and LayerNorm) as transformers' ``run_glue_no_trainer.py``, lr 1e-3 for the small width;
- ``bifpn``: a small classifier written by hand after the BiFPN of bubbliiiing/efficientdet-pytorch (a conv
  backbone giving two scales, 1x1 laterals, fast normalised fusion with learnable fusion weights
  ``nn.Parameter(torch.ones(2))`` through ReLU and normalisation, separable convs, swish), Adam, on digits;
- ``squeezenet``: a small SqueezeNet written by hand after torchvision's (``Fire`` modules: squeeze 1x1, expand
  1x1 + 3x3; a classifier of Dropout(0.5), 1x1 conv, global average pooling), here with one output regressing the
  digit's value (standardised), MSELoss, Adam;
- ``alexnet``: a small AlexNet written by hand after torchvision's (conv/ReLU/max-pool features, a classifier of
  Dropout, Linear, ReLU, Dropout, Linear, ReLU, Linear), CrossEntropyLoss, SGD, on digits.

``build(case_id) -> dict`` of ``nbdebug.doctor`` arguments.  What each case should get first is in labels.json,
written before the doctor ran on any case.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


# -- data ------------------------------------------------------------------------------------------------------
def digits(n=64, offset=0, seed=91):
    """scikit-learn digits standardised with the whole set's pixel mean and std, rows ``offset .. offset + n`` of
    one fixed shuffle (the batch is offset 0), as (n, 1, 8, 8) images and their digits."""
    from sklearn.datasets import load_digits

    d = load_digits()
    idx = torch.randperm(len(d.target), generator=torch.Generator().manual_seed(seed))[offset:offset + n]
    x = torch.tensor(d.data, dtype=torch.float32)
    x = ((x - x.mean()) / x.std())[idx].reshape(n, 1, 8, 8)
    return x, torch.tensor(d.target)[idx]


def digit_values(n=64, offset=0):
    """The digits as a regression: the image and its digit's value standardised ((d - 4.5) / 2.87), shape (n,)
    as a dataset's column comes."""
    x, y = digits(n, offset)
    return x, (y.float() - 4.5) / 2.87


def marker_sequences(n=32, length=16, vocab=32, marker=5, seed=92):
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
def electra(num_labels=2):
    from transformers import ElectraConfig, ElectraForSequenceClassification

    torch.manual_seed(0)
    cfg = ElectraConfig(vocab_size=32, embedding_size=32, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=64, max_position_embeddings=32,
                        num_labels=num_labels)
    return ElectraForSequenceClassification(cfg)


class ElectraOneUnitSoftmax(nn.Module):
    """A binary classifier written as in the thread: one output unit, and ``softmax`` over it to "get a
    probability", given to ``nn.BCELoss``.  Softmax over a single unit is 1.0 for every input, whatever the
    logit, and its gradient is exactly zero."""

    def __init__(self):
        super().__init__()
        self.electra = electra(num_labels=1)

    def forward(self, input_ids):
        return torch.softmax(self.electra(input_ids=input_ids).logits, dim=1)


class ElectraOneUnitSigmoid(ElectraOneUnitSoftmax):
    """The fix: a sigmoid on the single unit (or the logit into ``BCEWithLogitsLoss``)."""

    def forward(self, input_ids):
        return torch.sigmoid(self.electra(input_ids=input_ids).logits)


class SeparableConv(nn.Module):
    """EfficientDet's ``SeparableConvBlock``: depthwise 3x3, pointwise 1x1, BatchNorm."""

    def __init__(self, ch):
        super().__init__()
        self.depthwise_conv = nn.Conv2d(ch, ch, 3, 1, 1, groups=ch, bias=False)
        self.pointwise_conv = nn.Conv2d(ch, ch, 1)
        self.bn = nn.BatchNorm2d(ch, momentum=0.01, eps=1e-3)

    def forward(self, x):
        return self.bn(self.pointwise_conv(self.depthwise_conv(x)))


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.stage1 = nn.Sequential(nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.stage2 = nn.Sequential(nn.Conv2d(16, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU())

    def forward(self, x):
        c3 = self.stage1(x)
        return c3, self.stage2(c3)


class BiFPNNet(nn.Module):
    """Two scales (8x8, 4x4) fused by one BiFPN layer as efficientdet-pytorch writes it: learnable fusion weights
    ``p3_w1``, ``p4_w2`` (``nn.Parameter(torch.ones(2))``) through ReLU and normalised by their sum, swish, then a
    separable conv; a linear head on the pooled 4x4 output."""

    def __init__(self, width=32, eps=1e-4):
        super().__init__()
        self.eps = eps
        self.backbone = Backbone()
        self.p3_down_channel = nn.Sequential(nn.Conv2d(16, width, 1), nn.BatchNorm2d(width, momentum=0.01, eps=1e-3))
        self.p4_down_channel = nn.Sequential(nn.Conv2d(32, width, 1), nn.BatchNorm2d(width, momentum=0.01, eps=1e-3))
        self.p3_w1 = nn.Parameter(torch.ones(2, dtype=torch.float32), requires_grad=True)
        self.p3_w1_relu = nn.ReLU()
        self.p4_w2 = nn.Parameter(torch.ones(2, dtype=torch.float32), requires_grad=True)
        self.p4_w2_relu = nn.ReLU()
        self.conv3_up = SeparableConv(width)
        self.conv4_down = SeparableConv(width)
        self.head = nn.Linear(width, 10)

    def forward(self, x):
        c3, c4 = self.backbone(x)
        p3, p4 = self.p3_down_channel(c3), self.p4_down_channel(c4)
        w = self.p3_w1_relu(self.p3_w1)
        w = w / (torch.sum(w, dim=0) + self.eps)
        p3_out = self.conv3_up(F.silu(w[0] * p3 + w[1] * F.interpolate(p4, scale_factor=2, mode="nearest")))
        w = self.p4_w2_relu(self.p4_w2)
        w = w / (torch.sum(w, dim=0) + self.eps)
        p4_out = self.conv4_down(F.silu(w[0] * p4 + w[1] * F.max_pool2d(p3_out, 2)))
        return self.head(p4_out.mean(dim=(2, 3)))


def grouped_by_module_type(model, lr=1e-3, weight_decay=5e-4):
    """The optimizer as the thread's training script builds it (the YOLO-style three groups: BatchNorm weights
    without decay, other weights with decay, biases), by walking the modules and taking their ``weight`` and
    ``bias``: a bare ``nn.Parameter`` held by a module under another name (the BiFPN fusion weights) is in no
    group, so it gets a gradient at every step and never moves."""
    pg0, pg1, pg2 = [], [], []
    for _, v in model.named_modules():
        if hasattr(v, "bias") and isinstance(v.bias, nn.Parameter):
            pg2.append(v.bias)
        if isinstance(v, nn.BatchNorm2d):
            pg0.append(v.weight)
        elif hasattr(v, "weight") and isinstance(v.weight, nn.Parameter):
            pg1.append(v.weight)
    opt = torch.optim.Adam(pg0, lr=lr, betas=(0.9, 0.999))
    opt.add_param_group({"params": pg1, "weight_decay": weight_decay})
    opt.add_param_group({"params": pg2})
    return opt


class Fire(nn.Module):
    """torchvision's SqueezeNet ``Fire`` module."""

    def __init__(self, inplanes, squeeze, expand1x1, expand3x3):
        super().__init__()
        self.squeeze = nn.Conv2d(inplanes, squeeze, 1)
        self.squeeze_activation = nn.ReLU(inplace=True)
        self.expand1x1 = nn.Conv2d(squeeze, expand1x1, 1)
        self.expand1x1_activation = nn.ReLU(inplace=True)
        self.expand3x3 = nn.Conv2d(squeeze, expand3x3, 3, padding=1)
        self.expand3x3_activation = nn.ReLU(inplace=True)

    def forward(self, x):
        x = self.squeeze_activation(self.squeeze(x))
        return torch.cat([self.expand1x1_activation(self.expand1x1(x)),
                          self.expand3x3_activation(self.expand3x3(x))], 1)


class SqueezeNetRegressor(nn.Module):
    """A small SqueezeNet (stem conv, Fire, max-pool, Fire, Fire) with torchvision's classifier (Dropout(0.5),
    1x1 conv, global average pooling) giving one output per image, shape (N, 1).  The classifier's final ReLU is
    left out, as the target is a standardised value that can be negative."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(inplace=True),
            Fire(32, 8, 16, 16), nn.MaxPool2d(2, 2, ceil_mode=True),
            Fire(32, 8, 16, 16), Fire(32, 16, 32, 32))
        self.classifier = nn.Sequential(nn.Dropout(p=0.5), nn.Conv2d(64, 1, 1), nn.AdaptiveAvgPool2d((1, 1)))

    def forward(self, x):
        return torch.flatten(self.classifier(self.features(x)), 1)


class AlexNetSmall(nn.Module):
    """torchvision's AlexNet layout at the scale of 8x8 digits."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(
            nn.Dropout(p=0.5), nn.Linear(64 * 2 * 2, 128), nn.ReLU(inplace=True),
            nn.Dropout(p=0.5), nn.Linear(128, 128), nn.ReLU(inplace=True), nn.Linear(128, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def electra_adamw_warmup(m, lr=1e-3):
    from transformers import get_linear_schedule_with_warmup

    decay = [p for n, p in m.named_parameters() if p.requires_grad and not ("bias" in n or "LayerNorm" in n)]
    no_decay = [p for n, p in m.named_parameters() if p.requires_grad and ("bias" in n or "LayerNorm" in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}], lr=lr)
    get_linear_schedule_with_warmup(opt, num_warmup_steps=20, num_training_steps=200)
    return opt


# -- cases -----------------------------------------------------------------------------------------------------
def build(case_id):
    torch.manual_seed(0)
    if case_id == "electra-softmax-over-one-unit":  # T1
        m = ElectraOneUnitSoftmax()
        ids, y = marker_sequences()
        return dict(model=m, batch=(ids, y.float().unsqueeze(1)), loss_fn=nn.BCELoss(),
                    optimizer=torch.optim.AdamW(m.parameters(), lr=1e-3))
    if case_id == "bifpn-fusion-weights-not-in-optimizer":  # T2
        m = BiFPNNet()
        return dict(model=m, batch=digits(), loss_fn=nn.CrossEntropyLoss(), optimizer=grouped_by_module_type(m))
    if case_id == "squeezenet-mse-output-n1-target-n":  # T3
        m = SqueezeNetRegressor()
        return dict(model=m, batch=digit_values(), loss_fn=nn.MSELoss(),
                    optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))
    if case_id == "alexnet-sgd-lr-far-too-low":  # T4
        m = AlexNetSmall()
        return dict(model=m, batch=digits(), loss_fn=nn.CrossEntropyLoss(),
                    optimizer=torch.optim.SGD(m.parameters(), lr=2e-5, momentum=0.9))

    if case_id == "alexnet-healthy-sgd-momentum":
        m = AlexNetSmall()
        return dict(model=m, batch=digits(), loss_fn=nn.CrossEntropyLoss(),
                    optimizer=torch.optim.SGD(m.parameters(), lr=0.02, momentum=0.9))
    if case_id == "electra-healthy-adamw-warmup":
        m = electra(num_labels=2)
        return dict(model=m, batch=text_batch(), optimizer=electra_adamw_warmup(m))
    if case_id == "bifpn-healthy-backbone-frozen-intended":
        m = BiFPNNet()
        m.backbone.requires_grad_(False)
        opt = torch.optim.Adam([p for p in m.parameters() if p.requires_grad], lr=1e-3)
        return dict(model=m, batch=digits(), loss_fn=nn.CrossEntropyLoss(), optimizer=opt, frozen=["backbone"])
    if case_id == "squeezenet-healthy-cosine-dropout":
        m = SqueezeNetRegressor()
        x, v = digit_values()
        opt = torch.optim.Adam(m.parameters(), lr=1e-3)
        torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=200)
        return dict(model=m, batch=(x, v.unsqueeze(1)), loss_fn=nn.MSELoss(), optimizer=opt)
    raise KeyError(case_id)


CASES = (
    "electra-softmax-over-one-unit", "bifpn-fusion-weights-not-in-optimizer", "squeezenet-mse-output-n1-target-n",
    "alexnet-sgd-lr-far-too-low",
    "alexnet-healthy-sgd-momentum", "electra-healthy-adamw-warmup", "bifpn-healthy-backbone-frozen-intended",
    "squeezenet-healthy-cosine-dropout",
)
