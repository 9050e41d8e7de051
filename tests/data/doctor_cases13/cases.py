"""A thirteenth, independent held-out set of planted bugs for the doctor (see README.md).

The bugs are the causes found in public issue threads where a user reported a model that does not learn, taken by
the rule in README.md (the `search` tool's `issues` corpus, fixed queries, threads in the order returned):
tensorflow/tensorflow#12287 (the output maps pushed to big values, the loss then stuck at ln 2), tom-roddick/oft#6
(a line left in ``compute_loss`` so only the score loss was optimised) and keras-team/keras#6447 (one NaN value in
the data).  The queries ran out at 3 bugs; README.md says how.
Bases (data bundled with scikit-learn or synthetic, nothing downloaded), none of them used as a base in the twelve
earlier sets:
- ``fcn``: a small fully convolutional segmenter in the manner of Long et al.'s FCN (3x3 conv + ReLU stages, a 1x1
  conv scoring 2 classes per pixel, ``CrossEntropyLoss`` over the score map), SGD lr 0.05 momentum 0.9, on noisy
  digits whose target is the clean digit's foreground mask;
- ``locnet``: a classification-and-localisation net (a conv trunk, then one head per target as tom-roddick/oft
  lays its heads out: class scores and a box centre), its ``compute_loss`` = cross-entropy on the class + smooth L1
  on the centre, Adam 1e-3, on digits placed at a random spot of a 16x16 canvas;
- ``kerasmlp2``: Keras' "Structured data classification from scratch" model in torch (Dense 32 ReLU, Dropout 0.5,
  Dense 1, its sigmoid in ``BCEWithLogitsLoss``, Adam 1e-3), on scikit-learn's breast cancer set standardised;
- ``qwen2``: ``Qwen2ForCausalLM`` from a tiny transformers config (width 32, 2 layers, 4/2 heads; no download),
  its own loss from ``labels``; AdamW (no decay on biases and norms) + ``get_scheduler("linear")`` with warm-up as
  transformers' ``run_clm_no_trainer.py``, on synthetic sequences that count up by a per-sequence step.

``build(case_id) -> dict`` of ``nbdebug.doctor`` arguments.  What each case should get first is in labels.json,
written before the doctor ran on any case.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


# -- data ------------------------------------------------------------------------------------------------------
def _perm(n_all, n, seed):
    return torch.randperm(n_all, generator=torch.Generator().manual_seed(seed))[:n]


def _digits_raw(n, seed):
    from sklearn.datasets import load_digits

    d = load_digits()
    idx = _perm(len(d.target), n, seed)
    return torch.tensor(d.data, dtype=torch.float32)[idx].reshape(n, 8, 8), torch.tensor(d.target)[idx]


def seg_batch(n=32, seed=131):
    """Digits (0..16) upsampled to 16x16 plus Gaussian noise (std 4), standardised, as (n, 1, 16, 16); the target is
    the clean upsampled digit's foreground (value > 6), (n, 16, 16) class ids 0/1."""
    x, _ = _digits_raw(n, seed)
    clean = F.interpolate(x.unsqueeze(1), size=(16, 16), mode="bilinear", align_corners=False)
    g = torch.Generator().manual_seed(seed + 1)
    noisy = clean + 4.0 * torch.randn(clean.shape, generator=g)
    return (noisy - 4.9) / 6.5, (clean[:, 0] > 6).long()


def loc_batch(n=48, seed=132):
    """Each 8x8 digit (standardised) pasted at a random spot of a 16x16 canvas; the target row holds the digit and
    the centre of its box (row, column) scaled to [0, 1], as float: (n, 3)."""
    x, y = _digits_raw(n, seed)
    x = x / 16.0
    g = torch.Generator().manual_seed(seed + 1)
    r = torch.randint(0, 9, (n,), generator=g)
    c = torch.randint(0, 9, (n,), generator=g)
    canvas = torch.zeros(n, 1, 16, 16)
    for i in range(n):
        canvas[i, 0, r[i]:r[i] + 8, c[i]:c[i] + 8] = x[i]
    centre = torch.stack([(r + 4) / 16.0, (c + 4) / 16.0], dim=1)
    return (canvas - 0.1) / 0.25, torch.cat([y.float().unsqueeze(1), centre], dim=1)


def cancer(n=64, seed=133, nan_at=None):
    """scikit-learn's breast cancer set standardised per column with the whole set's mean and std, ``n`` rows; the
    target as float (n, 1) for a sigmoid output.  ``nan_at=(row, column)`` sets one value to NaN."""
    from sklearn.datasets import load_breast_cancer

    d = load_breast_cancer()
    idx = _perm(len(d.target), n, seed)
    x = torch.tensor(d.data, dtype=torch.float32)
    x = ((x - x.mean(0)) / x.std(0))[idx].clone()
    if nan_at is not None:
        x[nan_at] = float("nan")
    return x, torch.tensor(d.target, dtype=torch.float32)[idx].unsqueeze(1)


def counting(n=16, length=16, vocab=48, seed=134):
    """Token sequences that count up by a per-sequence step (1..4) modulo ``vocab`` from a random start; the
    (start, step) pairs are drawn without replacement, so no two sequences are the same."""
    g = torch.Generator().manual_seed(seed)
    pairs = torch.randperm(vocab * 4, generator=g)[:n].unsqueeze(1)
    start, step = pairs // 4, pairs % 4 + 1
    return (start + step * torch.arange(length)) % vocab


def lm_batch():
    ids = counting()
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


# -- fcn -------------------------------------------------------------------------------------------------------
class FCN(nn.Module):
    """3x3 conv + ReLU stages (16, 32, 32 channels, padding 1), a 1x1 conv scoring 2 classes per pixel.
    ``out_scale`` multiplies the score map (the planted "out maps to a big value")."""

    def __init__(self, out_scale=1.0):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1),
                                      nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU())
        self.score = nn.Conv2d(32, 2, 1)
        self.out_scale = out_scale

    def forward(self, x):
        return self.score(self.features(x)) * self.out_scale


def fcn_sgd(m):
    return torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)


# -- locnet ----------------------------------------------------------------------------------------------------
class LocNet(nn.Module):
    """A conv trunk (conv 3x3 32, ReLU, max-pool, conv 3x3 64, ReLU, max-pool, flatten, fc 128, ReLU), then one
    head per target: ``cls_head`` (10 scores) and ``box_head`` (the box centre, sigmoid); output (n, 12)."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                                      nn.Linear(64 * 4 * 4, 128), nn.ReLU())
        self.cls_head = nn.Linear(128, 10)
        self.box_head = nn.Linear(128, 2)

    def forward(self, x):
        h = self.features(x)
        return torch.cat([self.cls_head(h), torch.sigmoid(self.box_head(h))], dim=1)


class LocLoss(nn.Module):
    """``compute_loss``: cross-entropy on the class scores + smooth L1 (x 10) on the box centre.  ``score_only``
    is the planted leftover test line: only the class loss is returned."""

    def __init__(self, score_only=False):
        super().__init__()
        self.score_only = score_only

    def forward(self, out, target):
        cls_loss = F.cross_entropy(out[:, :10], target[:, 0].long())
        box_loss = 10.0 * F.smooth_l1_loss(out[:, 10:], target[:, 1:])
        if self.score_only:
            return cls_loss
        return cls_loss + box_loss


# -- kerasmlp2 -------------------------------------------------------------------------------------------------
class KerasStructured(nn.Module):
    """Keras' structured-data example head: Dense(32, relu), Dropout(0.5), Dense(1); its sigmoid is taken by
    ``BCEWithLogitsLoss`` (torch's form of Keras' sigmoid + binary_crossentropy; ``nn.BCELoss`` after a sigmoid
    raises on a NaN, see README.md)."""

    def __init__(self, d_in=30):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 1))

    def forward(self, x):
        return self.net(x)


# -- qwen2 -----------------------------------------------------------------------------------------------------
def qwen2():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=48, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=False, attention_dropout=0.0)
    return Qwen2ForCausalLM(cfg)


def clm_adamw_warmup(m, lr=3e-3):
    """run_clm_no_trainer.py: AdamW with weight decay off on biases and norm weights, a linear schedule with
    warm-up (lr 0 at step 0)."""
    from transformers import get_scheduler

    named = [(n, p) for n, p in m.named_parameters() if p.requires_grad]
    no_decay = ("bias", "norm.weight")
    groups = [{"params": [p for n, p in named if not any(k in n.lower() for k in no_decay)], "weight_decay": 0.01},
              {"params": [p for n, p in named if any(k in n.lower() for k in no_decay)], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=lr)
    get_scheduler("linear", optimizer=opt, num_warmup_steps=20, num_training_steps=200)
    return opt


# -- cases -----------------------------------------------------------------------------------------------------
def build(case_id):
    torch.manual_seed(0)
    if case_id == "fcn-score-map-times-1000":  # tensorflow#12287: the out maps pushed to a big value
        m = FCN(out_scale=1000.0)
        return dict(model=m, batch=seg_batch(), loss_fn=nn.CrossEntropyLoss(), optimizer=fcn_sgd(m))
    if case_id == "locnet-loss-score-term-only":  # oft#6: only the score loss optimised (a leftover line)
        m = LocNet()
        return dict(model=m, batch=loc_batch(), loss_fn=LocLoss(score_only=True),
                    optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))
    if case_id == "kerasmlp2-one-nan-input":  # keras#6447: one NaN value in the dataset
        m = KerasStructured()
        return dict(model=m, batch=cancer(nan_at=(17, 4)), loss_fn=nn.BCEWithLogitsLoss(),
                    optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))

    if case_id == "fcn-healthy-sgd-momentum":
        m = FCN()
        return dict(model=m, batch=seg_batch(), loss_fn=nn.CrossEntropyLoss(), optimizer=fcn_sgd(m))
    if case_id == "qwen2-healthy-adamw-warmup":
        m = qwen2()
        return dict(model=m, batch=lm_batch(), optimizer=clm_adamw_warmup(m))
    if case_id == "locnet-healthy-first-conv-frozen-intended":
        m = LocNet()
        m.features[0].requires_grad_(False)
        opt = torch.optim.Adam([p for p in m.parameters() if p.requires_grad], lr=1e-3)
        return dict(model=m, batch=loc_batch(), loss_fn=LocLoss(), optimizer=opt, frozen=["features.0"])
    raise KeyError(case_id)


CASES = (
    "fcn-score-map-times-1000", "locnet-loss-score-term-only", "kerasmlp2-one-nan-input",
    "fcn-healthy-sgd-momentum", "qwen2-healthy-adamw-warmup", "locnet-healthy-first-conv-frozen-intended",
)
