"""A thirteenth, independent held-out set of planted bugs for the doctor (see README.md).

The bugs are the causes found in public issue threads where a user reported a model that does not learn, taken by
the rule in README.md (the `search` tool's `issues` corpus, fixed queries, threads in the order returned):
tensorflow/tensorflow#12287 (the output maps pushed to big values, the loss then stuck at ln 2), tom-roddick/oft#6
(a line left in ``compute_loss`` so only the score loss was optimised), keras-team/keras#6447 (one NaN value in
the data), then (amendment 3) HobbitLong/SupContrast#100 (no normalisation before SupConLoss, NaN loss) and
Li-Chongyi/Zero-DCE_extension#2 (``torch.pow(x, 0.5)`` in the colour loss, not derivable at 0, NaN loss).  The
queries ran out at 5 bugs; README.md says how.
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
  transformers' ``run_clm_no_trainer.py``, on synthetic sequences that count up by a per-sequence step;
- ``supcon``: HobbitLong/SupContrast's ``SupConResNet`` layout built small (conv/BN encoder, 'mlp' projection head
  to 128, ``F.normalize``) with its ``SupConLoss`` (temperature 0.07) and its SGD lr 0.05 momentum 0.9, on two
  views of digits;
- ``zerodce``: Li-Chongyi/Zero-DCE's ``enhance_net_nopool`` built small (7 convs with skip concatenations, 8 tanh
  curve maps, its light-enhancement curve) with its exposure and colour-constancy losses, Adam 1e-3, on darkened
  crops of scikit-learn's sample photos.

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


# -- supcon ----------------------------------------------------------------------------------------------------
def two_views(n=48, seed=135):
    """Digits (standardised) in two views each: the image and a copy with Gaussian noise (std 0.3), as
    (n, 2, 1, 8, 8), and the digits as labels."""
    x, y = _digits_raw(n, seed)
    x = ((x - 4.88) / 6.02).unsqueeze(1)
    g = torch.Generator().manual_seed(seed + 1)
    return torch.stack([x, x + 0.3 * torch.randn(x.shape, generator=g)], dim=1), y


class SupConNet(nn.Module):
    """HobbitLong/SupContrast's ``SupConResNet`` layout, small: an encoder as its ResNet stem builds it (conv 3x3
    32, BatchNorm, ReLU, conv 3x3 64, BatchNorm, ReLU, global average pool) and its projection ``head`` 'mlp'
    (Linear 64-64, ReLU, Linear 64-128, feat_dim 128), every view through both; the features L2-normalised
    (``F.normalize(..., dim=1)``) unless ``normalize`` is False.  Output (n, views, 128), the shape SupConLoss
    takes."""

    def __init__(self, normalize=True):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
                                     nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                     nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 128))
        self.normalize = normalize

    def forward(self, x):
        n, v = x.shape[:2]
        f = self.head(self.encoder(x.flatten(0, 1)))
        if self.normalize:
            f = F.normalize(f, dim=1)
        return f.view(n, v, -1)


class SupConLoss(nn.Module):
    """HobbitLong/SupContrast ``losses.py`` SupConLoss (contrast_mode 'all', temperature 0.07, base_temperature
    0.07), as it computes it: anchor-dot-contrast / T, minus the row max, self-contrast masked out, log-prob,
    mean over positives."""

    def __init__(self, temperature=0.07, base_temperature=0.07):
        super().__init__()
        self.temperature, self.base_temperature = temperature, base_temperature

    def forward(self, features, labels):
        bsz, views = features.shape[:2]
        labels = labels.contiguous().view(-1, 1)
        mask = torch.eq(labels, labels.T).float().repeat(views, views)
        contrast = torch.cat(torch.unbind(features, dim=1), dim=0)
        logits = torch.matmul(contrast, contrast.T) / self.temperature
        logits_max, _ = torch.max(logits, dim=1, keepdim=True)
        logits = logits - logits_max.detach()
        logits_mask = 1 - torch.eye(bsz * views)
        mask = mask * logits_mask
        exp_logits = torch.exp(logits) * logits_mask
        log_prob = logits - torch.log(exp_logits.sum(1, keepdim=True))
        mean_log_prob_pos = (mask * log_prob).sum(1) / mask.sum(1)
        return -(self.temperature / self.base_temperature) * mean_log_prob_pos.mean()


# -- zerodce ---------------------------------------------------------------------------------------------------
def low_light(n=24, size=16, seed=136, black_frames=0):
    """16x16 RGB crops of scikit-learn's two sample photos, darkened (x 0.25, then ^1.5), as (n, 3, 16, 16) in
    [0, 1]; the last ``black_frames`` of them all black (a dark frame).  Zero-DCE needs no target: the input is
    passed again as the second item."""
    from sklearn.datasets import load_sample_images

    imgs = [torch.tensor(i, dtype=torch.float32).permute(2, 0, 1) / 255.0 for i in load_sample_images().images]
    g = torch.Generator().manual_seed(seed)
    out = []
    for k in range(n):
        im = imgs[k % 2]
        r = int(torch.randint(0, im.shape[1] - size, (1,), generator=g))
        c = int(torch.randint(0, im.shape[2] - size, (1,), generator=g))
        out.append(im[:, r:r + size, c:c + size])
    x = (torch.stack(out) * 0.25) ** 1.5
    if black_frames:
        x[-black_frames:] = 0.0
    return x, x.clone()


class DCENet(nn.Module):
    """Li-Chongyi/Zero-DCE's ``enhance_net_nopool``, small: 3x3 convs of 16 channels with ReLU and its symmetric
    skip concatenations (e1..e4, then e5 on [e3, e4], e6 on [e2, e5]), a 3x3 conv to 24 channels with tanh = 8 curve
    maps of 3 channels, applied as its light-enhancement curve x <- x + r (x^2 - x) eight times."""

    def __init__(self, ch=16):
        super().__init__()
        self.e1 = nn.Conv2d(3, ch, 3, padding=1)
        self.e2 = nn.Conv2d(ch, ch, 3, padding=1)
        self.e3 = nn.Conv2d(ch, ch, 3, padding=1)
        self.e4 = nn.Conv2d(ch, ch, 3, padding=1)
        self.e5 = nn.Conv2d(2 * ch, ch, 3, padding=1)
        self.e6 = nn.Conv2d(2 * ch, ch, 3, padding=1)
        self.e7 = nn.Conv2d(2 * ch, 24, 3, padding=1)

    def forward(self, x):
        x1 = F.relu(self.e1(x))
        x2 = F.relu(self.e2(x1))
        x3 = F.relu(self.e3(x2))
        x4 = F.relu(self.e4(x3))
        x5 = F.relu(self.e5(torch.cat([x3, x4], 1)))
        x6 = F.relu(self.e6(torch.cat([x2, x5], 1)))
        r = torch.tanh(self.e7(torch.cat([x1, x6], 1)))
        for k in range(8):
            rk = r[:, 3 * k:3 * k + 3]
            x = x + rk * (x * x - x)
        return x


class ZeroDCELoss(nn.Module):
    """Zero-DCE's exposure loss (4x4 patch means of the grey level towards 0.6, x 10) and colour
    constancy loss ``L_color`` (x 5) as its Myloss.py writes it: k = (Drg^2 + Drb^2 + Dgb^2) ** 0.5 of the squared
    differences of the channel means, with ``eps`` added inside the root when given (the thread's fix)."""

    def __init__(self, eps=0.0):
        super().__init__()
        self.eps = eps

    def forward(self, enhanced, original):
        mean = F.avg_pool2d(enhanced.mean(1, keepdim=True), 4)
        l_exp = ((mean - 0.6) ** 2).mean()
        mr, mg, mb = enhanced.mean([2, 3]).unbind(1)
        drg, drb, dgb = (mr - mg) ** 2, (mr - mb) ** 2, (mb - mg) ** 2
        k = torch.pow(drg ** 2 + drb ** 2 + dgb ** 2 + self.eps, 0.5)
        return 10.0 * l_exp + 5.0 * k.mean()


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
    if case_id == "supcon-features-not-normalised":  # SupContrast#100: no normalisation before SupConLoss
        m = SupConNet(normalize=False)
        return dict(model=m, batch=two_views(), loss_fn=SupConLoss(),
                    optimizer=torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9))
    if case_id == "zerodce-color-loss-sqrt-at-zero":  # Zero-DCE_extension#2: pow(x, 0.5) not derivable at 0
        m = DCENet()
        return dict(model=m, batch=low_light(black_frames=1), loss_fn=ZeroDCELoss(),
                    optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))
    raise KeyError(case_id)


CASES = (
    "fcn-score-map-times-1000", "locnet-loss-score-term-only", "kerasmlp2-one-nan-input",
    "supcon-features-not-normalised", "zerodce-color-loss-sqrt-at-zero",
    "fcn-healthy-sgd-momentum", "qwen2-healthy-adamw-warmup", "locnet-healthy-first-conv-frozen-intended",
)
