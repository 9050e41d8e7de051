"""A fourteenth, independent held-out set of planted bugs for the doctor (see README.md).

The bugs are the causes found in public issue threads where a user reported a model that does not learn, taken by
the rule in README.md (the `search` tool's `issues` corpus, fixed queries, threads in the order returned):
keras-team/keras#2975 (a one-unit output with 'softmax' instead of 'sigmoid': the same class for every input),
karpathy/nanoGPT#136 (NaN loss; reducing the learning rate fixed it) and chelsea0x3b/dfdx#486 (a ReLU on the output
layer gave zero gradients).  The queries and their " pytorch" and " github" repeats gave only these 3; README.md says
how.
Bases (data bundled with scikit-learn or synthetic, nothing downloaded), none of them used as a base in the
thirteen earlier sets:
- ``kerascnn``: Keras' small binary image classifier in torch (Conv2D 16 3x3 ReLU, MaxPool 2, Conv2D 32 3x3 ReLU,
  MaxPool 2, Flatten, Dense 64 ReLU, Dense 1), on scikit-learn's digits (8x8, standardised), target digit >= 5;
- ``nanogpt``: karpathy/nanoGPT's ``GPT`` written small by hand (token + position embeddings, 2 pre-LayerNorm blocks
  of causal self-attention and a 4x GELU MLP, final LayerNorm, tied head; width 32, 4 heads), AdamW as its
  ``configure_optimizers`` (decay only on 2-d weights), on synthetic sequences that count up by a per-sequence step;
- ``dfdxmlp``: the MLP regressor of dfdx#486's example (Linear 8->32 ReLU, Linear 32->32 ReLU, Linear 32->1), MSE,
  Adam 1e-3, on a synthetic smooth regression target, standardised (about half the targets are negative).

``build(case_id) -> dict`` of ``nbdebug.doctor`` arguments.  What each case should get first is in labels.json,
written before the doctor ran on any case.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# -- data ------------------------------------------------------------------------------------------------------
def digits_binary(n=64, seed=141):
    """scikit-learn's digits, ``n`` rows drawn without replacement, standardised with the whole set's mean and std,
    as (n, 1, 8, 8); the target is 1.0 for digits 5..9 else 0.0, as (n, 1)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.data, dtype=torch.float32)
    x = (x - x.mean()) / x.std()
    idx = torch.randperm(len(d.target), generator=torch.Generator().manual_seed(seed))[:n]
    y = (torch.tensor(d.target)[idx] >= 5).float().unsqueeze(1)
    return x[idx].reshape(n, 1, 8, 8), y


def counting(n=16, length=17, vocab=40, seed=142):
    """``n`` distinct sequences start, start+step, ... (mod vocab), split into inputs (first 16) and next tokens."""
    g = torch.Generator().manual_seed(seed)
    pairs = torch.randperm(vocab * 3, generator=g)[:n]
    start, step = (pairs % vocab).unsqueeze(1), (pairs // vocab + 1).unsqueeze(1)
    seq = (start + step * torch.arange(length)) % vocab
    return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()


def regression(n=64, d=8, seed=143):
    """x ~ N(0, 1) in ``d`` dimensions; y = sin(x0) + 0.5 x1 x2 + 0.8 x3 - 0.6 x4, standardised, as (n, 1)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    y = torch.sin(x[:, 0]) + 0.5 * x[:, 1] * x[:, 2] + 0.8 * x[:, 3] - 0.6 * x[:, 4]
    y = (y - y.mean()) / y.std()
    return x, y.unsqueeze(1)


# -- kerascnn --------------------------------------------------------------------------------------------------
class KerasCNN(nn.Module):
    """``out="logit"``: one raw score (used with BCEWithLogitsLoss); ``out="softmax"``: Keras' Dense(1,
    activation='softmax') of keras#2975, a softmax over a single unit, used with BCELoss."""

    def __init__(self, out="logit"):
        super().__init__()
        self.out = out
        self.features = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(32 * 2 * 2, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, x):
        z = self.head(self.features(x))
        return torch.softmax(z, dim=1) if self.out == "softmax" else z


# -- nanogpt ---------------------------------------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, d, heads, block):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.register_buffer("mask", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        att = F.softmax(att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf")), dim=-1)
        x = x + self.c_proj((att @ v).transpose(1, 2).contiguous().view(b, t, d))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab=40, block=16, d=32, heads=4, layers=2):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.h = nn.ModuleList(Block(d, heads, block) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
        for blk in self.h:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


class LMLoss(nn.Module):
    def forward(self, logits, targets):
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def gpt_adamw(m, lr=3e-3, warmup=0):
    """nanoGPT's configure_optimizers: weight decay 0.1 on the 2-d weights only, betas (0.9, 0.95); with
    ``warmup`` > 0 a LambdaLR linear warm-up over that many steps (lr 0 at step 0) as its get_lr."""
    params = [p for p in m.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95))
    if warmup:
        torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, s / warmup))
    return opt


# -- dfdxmlp ---------------------------------------------------------------------------------------------------
class MLP(nn.Module):
    """``relu_out=True``: the ReLU left on the output layer of dfdx#486."""

    def __init__(self, relu_out=False):
        super().__init__()
        layers = [nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1)]
        self.net = nn.Sequential(*layers, *([nn.ReLU()] if relu_out else []))

    def forward(self, x):
        return self.net(x)


# -- cases -----------------------------------------------------------------------------------------------------
def build(case_id):
    torch.manual_seed(0)
    if case_id == "kerascnn-softmax-on-one-unit":  # keras#2975: 'softmax' on a one-unit output, not 'sigmoid'
        m = KerasCNN(out="softmax")
        return dict(model=m, batch=digits_binary(), loss_fn=nn.BCELoss(),
                    optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))
    if case_id == "nanogpt-adamw-lr-too-high":  # nanoGPT#136: NaN loss, reducing the learning rate fixed it
        m = GPT()
        return dict(model=m, batch=counting(), loss_fn=LMLoss(), optimizer=gpt_adamw(m, lr=3.0))
    if case_id == "dfdxmlp-relu-on-output":  # dfdx#486: a ReLU on the output layer, zero gradients
        m = MLP(relu_out=True)
        return dict(model=m, batch=regression(), loss_fn=nn.MSELoss(),
                    optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))

    if case_id == "kerascnn-healthy-sgd-momentum":
        m = KerasCNN()
        return dict(model=m, batch=digits_binary(), loss_fn=nn.BCEWithLogitsLoss(),
                    optimizer=torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9))
    if case_id == "nanogpt-healthy-adamw-warmup":
        m = GPT()
        return dict(model=m, batch=counting(), loss_fn=LMLoss(), optimizer=gpt_adamw(m, lr=3e-3, warmup=20))
    if case_id == "dfdxmlp-healthy-first-layer-frozen-intended":
        m = MLP()
        m.net[0].requires_grad_(False)
        opt = torch.optim.Adam([p for p in m.parameters() if p.requires_grad], lr=1e-3)
        return dict(model=m, batch=regression(), loss_fn=nn.MSELoss(), optimizer=opt, frozen=["net.0"])
    raise KeyError(case_id)


CASES = (
    "kerascnn-softmax-on-one-unit", "nanogpt-adamw-lr-too-high", "dfdxmlp-relu-on-output",
    "kerascnn-healthy-sgd-momentum", "nanogpt-healthy-adamw-warmup", "dfdxmlp-healthy-first-layer-frozen-intended",
)
