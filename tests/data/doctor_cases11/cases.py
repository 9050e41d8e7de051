"""An eleventh, independent held-out set of planted bugs for the doctor (see README.md).

The bugs are the items, in order, of one public list of causes not used by the earlier sets: errorhandle.ai's
"deep neural network model stops learning after one epoch" (E1-E8), then, when it ran out, the next list the same
search returned, errorhandle.ai's "why the neural network is not learning" (W1-W8); the rule is in README.md.
Bases (data bundled with scikit-learn or synthetic, nothing downloaded), none of them used as a base in the ten
earlier sets:
- ``shufflenet``: a small ShuffleNetV2 written by hand after torchvision's ``shufflenetv2.py`` (``channel_shuffle``,
  ``InvertedResidual`` with its two branches and channel split, conv1, stages, conv5, global mean pool, fc),
  trained with SGD momentum 0.9 and weight decay as torchvision's ``references/classification/train.py``, on digits;
- ``nin``: Network in Network as Dive into Deep Learning writes it (``nin_block``: a conv and two 1x1 convs, each
  with ReLU; max-pooling between blocks, dropout 0.5, a last block with one channel per class, global average
  pooling; He init in place of its Xavier init, see README.md) and its training loop (plain SGD, lr 0.05 here,
  cross-entropy), on digits;
- ``rtdl``: the MLP baseline of yandex-research/rtdl ("Revisiting Deep Learning Models for Tabular Data": blocks of
  Linear, ReLU, Dropout; a Linear head), AdamW with weight decay 1e-5, on scikit-learn's wine or make_circles;
- ``gptneox``: ``GPTNeoXForCausalLM`` from a tiny transformers config (no download), its own loss from ``labels``;
  AdamW (no decay on biases and LayerNorm) + ``get_scheduler("linear")`` with warm-up as transformers'
  ``run_clm_no_trainer.py``, on synthetic sequences that count up by a fixed step.

``build(case_id) -> dict`` of ``nbdebug.doctor`` arguments.  What each case should get first is in labels.json,
written before the doctor ran on any case.
"""

from __future__ import annotations

import torch
import torch.nn as nn


# -- data ------------------------------------------------------------------------------------------------------
def _perm(n_all, n, seed):
    return torch.randperm(n_all, generator=torch.Generator().manual_seed(seed))[:n]


def digits(n=64, seed=111):
    """scikit-learn digits standardised with the whole set's pixel mean and std, ``n`` rows of one fixed shuffle,
    as (n, 1, 8, 8) images and their digits."""
    from sklearn.datasets import load_digits

    d = load_digits()
    idx = _perm(len(d.target), n, seed)
    x = torch.tensor(d.data, dtype=torch.float32)
    x = ((x - x.mean()) / x.std())[idx]
    return x.reshape(n, 1, 8, 8), torch.tensor(d.target)[idx]


def wine(n=64, seed=112, standardise=True):
    """scikit-learn's wine set (13 measurements, column means from 0.36 to 747), standardised per column with the
    whole set's mean and std, or raw as the file holds it; 3 classes."""
    from sklearn.datasets import load_wine

    d = load_wine()
    idx = _perm(len(d.target), n, seed)
    x = torch.tensor(d.data, dtype=torch.float32)
    if standardise:
        x = (x - x.mean(0)) / x.std(0)
    return x[idx], torch.tensor(d.target)[idx]


def circles(n=64, seed=113):
    """scikit-learn's ``make_circles``: two concentric rings (factor 0.5, noise 0.05), not linearly separable."""
    from sklearn.datasets import make_circles

    x, y = make_circles(n_samples=n, factor=0.5, noise=0.05, random_state=seed)
    return torch.tensor(x, dtype=torch.float32), torch.tensor(y)


def counting(n=16, length=16, vocab=32, seed=114):
    """Token sequences that count up by a per-sequence step (1, 2 or 3) modulo ``vocab`` from a random start: the
    next token follows from the two before it."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, vocab, (n, 1), generator=g)
    step = torch.randint(1, 4, (n, 1), generator=g)
    return (start + step * torch.arange(length)) % vocab


def lm_batch():
    ids = counting()
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


# -- shufflenet ------------------------------------------------------------------------------------------------
def channel_shuffle(x, groups):
    b, c, h, w = x.size()
    x = x.view(b, groups, c // groups, h, w).transpose(1, 2).contiguous()
    return x.view(b, c, h, w)


class InvertedResidual(nn.Module):
    """torchvision's ShuffleNetV2 unit: with stride 1 half the channels pass through and the other half go
    through 1x1 / depthwise 3x3 / 1x1; with stride 2 both branches see the whole input; then a channel shuffle."""

    def __init__(self, inp, oup, stride):
        super().__init__()
        self.stride = stride
        branch = oup // 2
        if stride > 1:
            self.branch1 = nn.Sequential(
                nn.Conv2d(inp, inp, 3, stride, 1, groups=inp, bias=False), nn.BatchNorm2d(inp),
                nn.Conv2d(inp, branch, 1, bias=False), nn.BatchNorm2d(branch), nn.ReLU(inplace=True))
        else:
            self.branch1 = nn.Sequential()
        self.branch2 = nn.Sequential(
            nn.Conv2d(inp if stride > 1 else branch, branch, 1, bias=False), nn.BatchNorm2d(branch),
            nn.ReLU(inplace=True),
            nn.Conv2d(branch, branch, 3, stride, 1, groups=branch, bias=False), nn.BatchNorm2d(branch),
            nn.Conv2d(branch, branch, 1, bias=False), nn.BatchNorm2d(branch), nn.ReLU(inplace=True))

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2Small(nn.Module):
    """torchvision's ShuffleNetV2 layout at the scale of 8x8 digits: conv1 3x3 (stride 1, its max-pool left out),
    two stages of [stride-2 unit, stride-1 unit] (channels 24 -> 48 -> 96), conv5 1x1 to 192, global mean, fc."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(1, 24, 3, 1, 1, bias=False), nn.BatchNorm2d(24), nn.ReLU(inplace=True))
        self.stage2 = nn.Sequential(InvertedResidual(24, 48, 2), InvertedResidual(48, 48, 1))
        self.stage3 = nn.Sequential(InvertedResidual(48, 96, 2), InvertedResidual(96, 96, 1))
        self.conv5 = nn.Sequential(nn.Conv2d(96, 192, 1, bias=False), nn.BatchNorm2d(192), nn.ReLU(inplace=True))
        self.fc = nn.Linear(192, num_classes)

    def forward(self, x):
        x = self.conv5(self.stage3(self.stage2(self.conv1(x))))
        return self.fc(x.mean([2, 3]))


def reference_sgd(m, lr=0.1):
    """torchvision ``references/classification/train.py``'s optimizer: SGD momentum 0.9, weight decay (2e-5, as
    its ShuffleNetV2 recipe); lr 0.1 for a batch of 64."""
    return torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9, weight_decay=2e-5)


# -- nin -------------------------------------------------------------------------------------------------------
def nin_block(cin, cout, k, s, p):
    return nn.Sequential(nn.Conv2d(cin, cout, k, s, p), nn.ReLU(), nn.Conv2d(cout, cout, 1), nn.ReLU(),
                         nn.Conv2d(cout, cout, 1), nn.ReLU())


class NiN(nn.Module):
    """D2L's NiN at the scale of 8x8 digits: nin_block(1, 48, 3), max-pool, nin_block(48, 96, 3), max-pool,
    Dropout(0.5), nin_block(96, 10, 3), global average pool, flatten.  D2L initialises with Xavier uniform, with
    which this small net does not fit a batch in 200 steps (see README.md); the base uses He init
    (``kaiming_normal_`` for ReLU) instead.  ``init_std`` draws every conv weight from ``normal(0, init_std)``
    (biases 0)."""

    def __init__(self, init_std=None):
        super().__init__()
        self.net = nn.Sequential(nin_block(1, 48, 3, 1, 1), nn.MaxPool2d(2), nin_block(48, 96, 3, 1, 1),
                                 nn.MaxPool2d(2), nn.Dropout(0.5), nin_block(96, 10, 3, 1, 1),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten())
        for mod in self.modules():
            if isinstance(mod, nn.Conv2d):
                if init_std is None:
                    nn.init.kaiming_normal_(mod.weight, nonlinearity="relu")
                else:
                    nn.init.normal_(mod.weight, 0.0, init_std)
                nn.init.zeros_(mod.bias)

    def forward(self, x):
        return self.net(x)


# -- rtdl ------------------------------------------------------------------------------------------------------
class RtdlMLP(nn.Module):
    """rtdl's MLP: ``n_blocks`` blocks of Linear(d), ReLU, Dropout, then a Linear head (``n_blocks=0``: the head
    alone, a linear model).  ``first_bias`` sets the first block's biases to a constant."""

    def __init__(self, d_in, d_out, n_blocks=2, d=64, dropout=0.1, first_bias=None):
        super().__init__()
        blocks, width = [], d_in
        for _ in range(n_blocks):
            blocks.append(nn.Sequential(nn.Linear(width, d), nn.ReLU(), nn.Dropout(dropout)))
            width = d
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(width, d_out)
        if first_bias is not None:
            nn.init.constant_(self.blocks[0][0].bias, first_bias)

    def forward(self, x):
        return self.head(self.blocks(x))


def rtdl_adamw(m, lr=1e-3):
    return torch.optim.AdamW(m.parameters(), lr=lr, weight_decay=1e-5)


# -- gptneox ---------------------------------------------------------------------------------------------------
def gptneox():
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    torch.manual_seed(0)
    cfg = GPTNeoXConfig(vocab_size=32, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=32, rotary_pct=0.25)
    return GPTNeoXForCausalLM(cfg)


def clm_adamw_warmup(m, lr=1e-3):
    """run_clm_no_trainer.py: AdamW with weight decay off on biases and LayerNorm weights, a linear schedule with
    warm-up (lr 0 at step 0)."""
    from transformers import get_scheduler

    named = [(n, p) for n, p in m.named_parameters() if p.requires_grad]
    no_decay = ("bias", "layer_norm.weight", "layernorm.weight")
    groups = [{"params": [p for n, p in named if not any(k in n.lower() for k in no_decay)], "weight_decay": 0.01},
              {"params": [p for n, p in named if any(k in n.lower() for k in no_decay)], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=lr)
    get_scheduler("linear", optimizer=opt, num_warmup_steps=20, num_training_steps=200)
    return opt


# -- cases -----------------------------------------------------------------------------------------------------
def build(case_id):
    torch.manual_seed(0)
    if case_id == "shufflenet-sgd-lr-far-too-high":  # E1: learning rate, too high
        m = ShuffleNetV2Small()
        return dict(model=m, batch=digits(), loss_fn=nn.CrossEntropyLoss(), optimizer=reference_sgd(m, lr=10.0))
    if case_id == "nin-init-std-0.01":  # E2: vanishing gradients from an improper initialization
        m = NiN(init_std=0.01)
        return dict(model=m, batch=digits(), loss_fn=nn.CrossEntropyLoss(),
                    optimizer=torch.optim.SGD(m.parameters(), lr=0.05))
    if case_id == "rtdl-inputs-not-standardised":  # E3: data problems, poor preprocessing
        m = RtdlMLP(13, 3)
        return dict(model=m, batch=wine(standardise=False), loss_fn=nn.CrossEntropyLoss(), optimizer=rtdl_adamw(m))
    if case_id == "gptneox-plain-sgd-at-adamw-lr":  # E5: the choice of optimizer
        m = gptneox()
        return dict(model=m, batch=lm_batch(), optimizer=torch.optim.SGD(m.parameters(), lr=1e-3))
    if case_id == "shufflenet-nll-loss-on-raw-logits":  # E7: a loss without meaningful gradients
        m = ShuffleNetV2Small()
        return dict(model=m, batch=digits(), loss_fn=nn.NLLLoss(), optimizer=reference_sgd(m))
    if case_id == "rtdl-too-shallow-linear":  # W3: architecture mismatch, too shallow
        m = RtdlMLP(2, 2, n_blocks=0)
        return dict(model=m, batch=circles(), loss_fn=nn.CrossEntropyLoss(), optimizer=rtdl_adamw(m, lr=1e-2))
    if case_id == "rtdl-dead-relu-negative-bias":  # W4: activation function issues, ReLUs stuck at zero
        m = RtdlMLP(13, 3, first_bias=-10.0)
        return dict(model=m, batch=wine(), loss_fn=nn.CrossEntropyLoss(), optimizer=rtdl_adamw(m))

    if case_id == "shufflenet-healthy-sgd-momentum":
        m = ShuffleNetV2Small()
        return dict(model=m, batch=digits(), loss_fn=nn.CrossEntropyLoss(), optimizer=reference_sgd(m))
    if case_id == "gptneox-healthy-adamw-warmup":
        m = gptneox()
        return dict(model=m, batch=lm_batch(), optimizer=clm_adamw_warmup(m))
    if case_id == "gptneox-healthy-embeddings-frozen-intended":
        m = gptneox()
        m.gpt_neox.embed_in.requires_grad_(False)
        opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-3)
        return dict(model=m, batch=lm_batch(), optimizer=opt, frozen=["gpt_neox.embed_in"])
    raise KeyError(case_id)


CASES = (
    "shufflenet-sgd-lr-far-too-high", "nin-init-std-0.01", "rtdl-inputs-not-standardised",
    "gptneox-plain-sgd-at-adamw-lr", "shufflenet-nll-loss-on-raw-logits", "rtdl-too-shallow-linear",
    "rtdl-dead-relu-negative-bias",
    "shufflenet-healthy-sgd-momentum", "gptneox-healthy-adamw-warmup", "gptneox-healthy-embeddings-frozen-intended",
)
